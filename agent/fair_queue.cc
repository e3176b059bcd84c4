#include "agent/fair_queue.h"

#include <algorithm>

namespace vault::agent {

FairQueue::FairQueue(size_t threads) {
  for (size_t i = 0; i < std::max<size_t>(1, threads); ++i)
    threads_.emplace_back([this] { Loop(); });
}

FairQueue::~FairQueue() { Shutdown(); }

bool FairQueue::Schedule(const std::string& key, std::function<void()> task) {
  absl::MutexLock lock(&mu_);
  if (stop_) return false;
  std::deque<std::function<void()>>& q = queues_[key];
  if (q.empty()) ready_.push_back(key);
  q.push_back(std::move(task));
  ++queued_;
  return true;
}

size_t FairQueue::queued() const {
  absl::MutexLock lock(&mu_);
  return queued_;
}

void FairQueue::Loop() {
  for (;;) {
    std::function<void()> task;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](FairQueue* q)
               ABSL_NO_THREAD_SAFETY_ANALYSIS { return q->stop_ || !q->ready_.empty(); },
          this));
      if (ready_.empty()) return;  // stopped and drained
      std::string key = std::move(ready_.front());
      ready_.pop_front();
      auto it = queues_.find(key);
      task = std::move(it->second.front());
      it->second.pop_front();
      --queued_;
      if (it->second.empty()) {
        queues_.erase(it);
      } else {
        ready_.push_back(std::move(key));  // its next task waits for the others' turn
      }
    }
    task();
  }
}

void FairQueue::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
  threads_.clear();
}

bool RateLimiter::Admit(const std::string& key, uint32_t per_second, absl::Time now) {
  if (per_second == 0) return true;
  absl::MutexLock lock(&mu_);
  if (buckets_.size() > 100000) buckets_.clear();
  Bucket& b = buckets_[key];
  if (b.last == absl::InfinitePast()) {
    b.tokens = per_second;
  } else {
    b.tokens =
        std::min<double>(per_second, b.tokens + absl::ToDoubleSeconds(now - b.last) * per_second);
  }
  b.last = now;
  if (b.tokens < 1) return false;
  b.tokens -= 1;
  return true;
}

}  // namespace vault::agent
