// agent/agent_store: the agents' durable records and their logs in the vault's RocksDB.
//
// Column families: "agents" (id -> AgentRecord; every state change is a synced write) and
// "agent_logs" (id \0 be64(seq) -> AgentLogLine; unsynced, the newest kLogLinesKept per agent).
//
//   AgentStore store(db);
//   VAULT_RETURN_IF_ERROR(store.Put(record));
//   VAULT_ASSIGN_OR_RETURN(vault::v1::AgentRecord r, store.Get("a-0123456789abcdef"));
//   store.AppendLog(id, line);  // assigns line.seq
//   std::vector<vault::v1::AgentLogLine> lines = store.ReadLogs(id, /*from_seq=*/0, 100);
//
// Thread-safety: thread-safe.
#ifndef VAULT_AGENT_AGENT_STORE_H_
#define VAULT_AGENT_AGENT_STORE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "storage/database.h"
#include "vault/v1/agent.pb.h"

namespace vault::agent {

inline constexpr uint64_t kLogLinesKept = 10000;

// Agent ids: 1-64 of [a-z0-9-], starting with a letter or digit ("a-" + hex by vaultctl).
// INVALID_ARGUMENT otherwise.
absl::Status ValidateAgentId(const std::string& id);
// "running", "paused", ...
std::string StateName(vault::v1::AgentState state);

class AgentStore {
 public:
  static std::vector<storage::ColumnFamilySpec> ColumnFamilies();
  explicit AgentStore(const storage::Database* db) : db_(db) {}

  // Durable (synced) before it returns.
  absl::Status Put(const vault::v1::AgentRecord& record);
  // In the write-ahead log, not synced: durable with the next synced write (or lost with a
  // crash before it), for a state whose loss the record's durable predecessor covers.
  absl::Status PutUnsynced(const vault::v1::AgentRecord& record);
  // Adds the record's write to `batch` (for a write that must be atomic with others).
  void AddPut(rocksdb::WriteBatch* batch, const vault::v1::AgentRecord& record) const;
  // NOT_FOUND when there is no such agent.
  absl::StatusOr<vault::v1::AgentRecord> Get(const std::string& id) const;
  // Every record, by id.
  absl::StatusOr<std::vector<vault::v1::AgentRecord>> LoadAll() const;

  // Appends a line (its seq is assigned here) and wakes WaitForLogs.
  absl::Status AppendLog(const std::string& id, vault::v1::AgentLogLine line);
  // Lines with seq >= from_seq, oldest first, at most `max`.
  std::vector<vault::v1::AgentLogLine> ReadLogs(const std::string& id, uint64_t from_seq,
                                                size_t max) const;
  // Waits until the agent has a line with seq >= from_seq, or `deadline`. True if it has.
  bool WaitForLogs(const std::string& id, uint64_t from_seq, absl::Time deadline);
  // Wakes every WaitForLogs (shutdown).
  void WakeAll();

 private:
  // The next seq to assign for `id` (loaded from the database the first time).
  uint64_t NextSeqLocked(const std::string& id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(log_mu_);

  const storage::Database* const db_;
  absl::Mutex log_mu_;
  absl::CondVar log_cv_;
  absl::flat_hash_map<std::string, uint64_t> next_seq_ ABSL_GUARDED_BY(log_mu_);
  bool woken_ ABSL_GUARDED_BY(log_mu_) = false;
};

}  // namespace vault::agent

#endif  // VAULT_AGENT_AGENT_STORE_H_
