#include "agent/fair_queue.h"

#include <atomic>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace vault::agent {
namespace {

TEST(FairQueue, APrincipalFloodingTheQueueDoesNotStarveAnother) {
  FairQueue pool(1);
  absl::Notification gate;
  // Hold the only worker so that everything below queues up first.
  pool.Schedule("a", [&] { gate.WaitForNotification(); });
  absl::Mutex mu;
  std::vector<std::string> order;
  for (int i = 0; i < 1000; ++i) {
    pool.Schedule("a", [&] {
      absl::MutexLock lock(&mu);
      order.push_back("a");
    });
  }
  pool.Schedule("b", [&] {
    absl::MutexLock lock(&mu);
    order.push_back("b");
  });
  gate.Notify();
  pool.Shutdown();
  ASSERT_EQ(order.size(), 1001u);
  // b's one task runs after at most one of a's, not after all thousand.
  size_t b_at = std::find(order.begin(), order.end(), "b") - order.begin();
  EXPECT_LE(b_at, 1u);
}

TEST(FairQueue, ShutdownRunsWhatIsQueuedThenRefuses) {
  FairQueue pool(2);
  std::atomic<int> ran{0};
  for (int i = 0; i < 100; ++i) pool.Schedule(std::to_string(i % 3), [&] { ++ran; });
  pool.Shutdown();
  EXPECT_EQ(ran.load(), 100);
  EXPECT_FALSE(pool.Schedule("a", [&] { ++ran; }));
  EXPECT_EQ(ran.load(), 100);
}

TEST(RateLimiter, AdmitsTheRateAndRefillsOverTime) {
  RateLimiter limiter;
  absl::Time t = absl::FromUnixSeconds(1000);
  int admitted = 0;
  for (int i = 0; i < 20; ++i) admitted += limiter.Admit("p", 10, t) ? 1 : 0;
  EXPECT_EQ(admitted, 10);
  EXPECT_FALSE(limiter.Admit("p", 10, t));
  EXPECT_TRUE(limiter.Admit("q", 10, t));  // buckets are per principal
  EXPECT_TRUE(limiter.Admit("p", 10, t + absl::Milliseconds(100)));
  EXPECT_FALSE(limiter.Admit("p", 10, t + absl::Milliseconds(100)));
  EXPECT_TRUE(limiter.Admit("p", 0, t));  // 0: no limit
}

}  // namespace
}  // namespace vault::agent
