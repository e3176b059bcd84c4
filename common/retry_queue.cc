#include "common/retry_queue.h"

#include <algorithm>
#include <utility>

#include "spdlog/spdlog.h"

namespace vault::common {

RetryQueue::RetryQueue(absl::Duration first_backoff, absl::Duration max_backoff)
    : first_backoff_(first_backoff), max_backoff_(max_backoff), thread_([this] { Loop(); }) {}

RetryQueue::~RetryQueue() { Stop(); }

void RetryQueue::Add(std::string name, std::function<absl::Status()> attempt,
                     absl::Duration give_up_after) {
  absl::MutexLock lock(&mu_);
  if (stop_) return;
  const absl::Time now = absl::Now();
  tasks_.push_back(
      Task{std::move(name), std::move(attempt), now, now + give_up_after, first_backoff_});
  added_ = true;
}

size_t RetryQueue::pending() const {
  absl::MutexLock lock(&mu_);
  return tasks_.size() + running_;
}

size_t RetryQueue::delivered() const {
  absl::MutexLock lock(&mu_);
  return delivered_;
}

size_t RetryQueue::dropped() const {
  absl::MutexLock lock(&mu_);
  return dropped_;
}

void RetryQueue::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stop_ && !thread_.joinable()) return;
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
  absl::MutexLock lock(&mu_);
  tasks_.clear();
}

void RetryQueue::Loop() {
  for (;;) {
    Task task;
    {
      absl::MutexLock lock(&mu_);
      for (;;) {
        if (stop_) return;
        added_ = false;
        auto next = std::min_element(tasks_.begin(), tasks_.end(),
                                     [](const Task& a, const Task& b) { return a.due < b.due; });
        const absl::Time now = absl::Now();
        if (next != tasks_.end() && next->due <= now) {
          task = std::move(*next);
          tasks_.erase(next);
          ++running_;
          break;
        }
        const absl::Time wake = next == tasks_.end() ? now + absl::Seconds(1) : next->due;
        mu_.AwaitWithDeadline(absl::Condition(
                                  +[](RetryQueue* q) ABSL_EXCLUSIVE_LOCKS_REQUIRED(q->mu_) {
                                    return q->stop_ || q->added_;
                                  },
                                  this),
                              wake);
      }
    }
    absl::Status s = task.attempt();
    absl::MutexLock lock(&mu_);
    --running_;
    if (s.ok()) {
      ++delivered_;
      continue;
    }
    const absl::Time now = absl::Now();
    if (now >= task.deadline) {
      ++dropped_;
      spdlog::warn("{}: given up after retrying until its deadline: {}", task.name, s.ToString());
      continue;
    }
    spdlog::debug("{}: {}; retrying in {}", task.name, s.ToString(),
                  absl::FormatDuration(task.backoff));
    task.due = std::min(now + task.backoff, task.deadline);
    task.backoff = std::min(task.backoff * 2, max_backoff_);
    tasks_.push_back(std::move(task));
  }
}

}  // namespace vault::common
