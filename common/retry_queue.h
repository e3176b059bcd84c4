// A single background thread that runs deliveries until each succeeds: for messages to other
// vaults that must arrive eventually (a hop's receipt to the agent's home vault, a revocation to
// every member) but that nobody waits for. A failed attempt is tried again after a backoff that
// doubles from `first_backoff` up to `max_backoff`; a task is dropped (and logged) when it still
// fails at its deadline.
//
//   common::RetryQueue outbox(absl::Milliseconds(200), absl::Seconds(10));
//   outbox.Add("revocation to vault-b", [&] { return transport->Revoke("vault-b", req).status(); },
//              absl::Hours(1));
//   outbox.Stop();  // drops what is left (the caller makes it again at its next start)
//
// Tasks run one at a time, in order of when they are due; a task should bound its own wait
// (a deadline on its RPC). Thread-safety: Add and pending from any thread; Stop from one.
#ifndef VAULT_COMMON_RETRY_QUEUE_H_
#define VAULT_COMMON_RETRY_QUEUE_H_

#include <cstddef>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace vault::common {

class RetryQueue {
 public:
  RetryQueue(absl::Duration first_backoff, absl::Duration max_backoff);
  RetryQueue(const RetryQueue&) = delete;
  RetryQueue& operator=(const RetryQueue&) = delete;
  ~RetryQueue();  // Stop()

  // Runs `attempt` soon, and again after each failure until it returns OK or `give_up_after`
  // has passed. Ignored after Stop.
  void Add(std::string name, std::function<absl::Status()> attempt, absl::Duration give_up_after);

  // Tasks not yet delivered (neither succeeded nor dropped).
  size_t pending() const;
  // Deliveries that succeeded and tasks dropped at their deadline, since construction.
  size_t delivered() const;
  size_t dropped() const;

  // Ends the thread after the attempt in progress; what is left is dropped. Idempotent.
  void Stop();

 private:
  struct Task {
    std::string name;
    std::function<absl::Status()> attempt;
    absl::Time due;
    absl::Time deadline;
    absl::Duration backoff;
  };
  void Loop();

  const absl::Duration first_backoff_;
  const absl::Duration max_backoff_;
  mutable absl::Mutex mu_;
  std::vector<Task> tasks_ ABSL_GUARDED_BY(mu_);
  size_t running_ ABSL_GUARDED_BY(mu_) = 0;
  size_t delivered_ ABSL_GUARDED_BY(mu_) = 0;
  size_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool added_ ABSL_GUARDED_BY(mu_) = false;  // wakes the loop for a task due now
  std::thread thread_;
};

}  // namespace vault::common

#endif  // VAULT_COMMON_RETRY_QUEUE_H_
