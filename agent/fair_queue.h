// agent/fair_queue: the worker pool that runs host calls, fair across principals (RFC-0006 §9):
// each principal has its own queue and the workers take from the principals in turn, so one
// principal's agents flooding the vault with calls delay another's by at most one call per
// worker. RateLimiter is the per-principal token bucket (host calls per second).
//
//   FairQueue pool(/*threads=*/4);
//   pool.Schedule(principal, [=] { HandleCall(...); });
//   RateLimiter limiter;
//   if (!limiter.Admit(principal, /*per_second=*/1000, absl::Now())) { ... refuse ... }
//
// Thread-safety: thread-safe. Shutdown runs what is queued and joins the workers.
#ifndef VAULT_AGENT_FAIR_QUEUE_H_
#define VAULT_AGENT_FAIR_QUEUE_H_

#include <cstddef>
#include <deque>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace vault::agent {

class FairQueue {
 public:
  explicit FairQueue(size_t threads);
  FairQueue(const FairQueue&) = delete;
  FairQueue& operator=(const FairQueue&) = delete;
  ~FairQueue();

  // False (the task is dropped) after Shutdown.
  bool Schedule(const std::string& key, std::function<void()> task);
  // Tasks queued, over all keys.
  size_t queued() const;
  void Shutdown();

 private:
  void Loop();

  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::deque<std::function<void()>>> queues_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> ready_ ABSL_GUARDED_BY(mu_);  // keys with work, in turn order
  size_t queued_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

class RateLimiter {
 public:
  // Takes one token from `key`'s bucket (capacity and refill: `per_second`). False when empty.
  bool Admit(const std::string& key, uint32_t per_second, absl::Time now);

 private:
  struct Bucket {
    double tokens = 0;
    absl::Time last = absl::InfinitePast();
  };
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, Bucket> buckets_ ABSL_GUARDED_BY(mu_);
};

}  // namespace vault::agent

#endif  // VAULT_AGENT_FAIR_QUEUE_H_
