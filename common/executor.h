// A bounded pool of worker threads for blocking work (storage, hashing) that must not run on
// gRPC's callback threads.
//
//   common::Executor pool(/*threads=*/4, /*max_queue=*/1024);
//   if (!pool.Schedule([] { DoWork(); })) reactor->Finish(Unavailable("busy"));
//   pool.Shutdown();  // runs what is queued, then joins
//
// Thread-safety: Schedule may be called from any thread; Shutdown once, from one thread.
#ifndef VAULT_COMMON_EXECUTOR_H_
#define VAULT_COMMON_EXECUTOR_H_

#include <cstddef>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace vault::common {

class Executor {
 public:
  Executor(size_t threads, size_t max_queue);
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;
  ~Executor();

  // Queues `task`. False, without running it, when the queue is full or the pool is shut down.
  bool Schedule(std::function<void()> task);

  // Stops accepting tasks, finishes the queued ones and joins the threads. Idempotent.
  void Shutdown();

 private:
  void Loop();

  const size_t max_queue_;
  absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace vault::common

#endif  // VAULT_COMMON_EXECUTOR_H_
