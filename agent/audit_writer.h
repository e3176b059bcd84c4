// agent/audit_writer: how the runtime writes the audit entries of agents' host calls and
// lifecycle. A durable entry is appended before Append returns (the caller answers only after);
// the others are queued and appended in order, in batches, by a thread of the writer's own, so
// that hashing and writing them never delays an agent's answer.
//
//   AuditWriter writer(log);
//   writer.Append(entry, /*durable=*/false);   // queued
//   writer.Stop();                             // drains the queue, then returns
//
// Thread-safety: thread-safe. Entries appended from one thread are written in that order.
#ifndef VAULT_AGENT_AUDIT_WRITER_H_
#define VAULT_AGENT_AUDIT_WRITER_H_

#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "audit/log.h"
#include "vault/v1/audit.pb.h"

namespace vault::agent {

class AuditWriter {
 public:
  // Queued entries are taken at most every `batch_interval` (a wake-up per entry would put a
  // third thread on the CPUs beside the agent and the reactor for every host call).
  explicit AuditWriter(audit::AuditLog* log, absl::Duration batch_interval = absl::Milliseconds(2));
  AuditWriter(const AuditWriter&) = delete;
  AuditWriter& operator=(const AuditWriter&) = delete;
  ~AuditWriter();  // Stop()

  // `durable`: appended (and synced) before this returns; a failure is logged. Otherwise queued.
  // After Stop, every entry is appended before this returns.
  void Append(vault::v1::AuditEntry entry, bool durable);
  // Writes what is queued and ends the thread. Idempotent.
  void Stop();

 private:
  void Loop();

  audit::AuditLog* const log_;
  const absl::Duration batch_interval_;
  absl::Mutex mu_;
  std::vector<vault::v1::AuditEntry> queue_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace vault::agent

#endif  // VAULT_AGENT_AUDIT_WRITER_H_
