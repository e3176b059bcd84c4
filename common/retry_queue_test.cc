// Tests of common::RetryQueue: retried until it succeeds, dropped at its deadline, stopped.
#include "common/retry_queue.h"

#include <gtest/gtest.h>

#include <atomic>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace vault::common {
namespace {

bool WaitFor(const std::function<bool()>& done, absl::Duration limit = absl::Seconds(10)) {
  const absl::Time end = absl::Now() + limit;
  while (!done()) {
    if (absl::Now() > end) return false;
    absl::SleepFor(absl::Milliseconds(2));
  }
  return true;
}

TEST(RetryQueueTest, RetriesAFailingDeliveryUntilItSucceeds) {
  RetryQueue q(absl::Milliseconds(5), absl::Milliseconds(20));
  std::atomic<int> attempts{0};
  q.Add(
      "third time lucky",
      [&] { return ++attempts < 3 ? absl::UnavailableError("peer down") : absl::OkStatus(); },
      absl::Minutes(1));
  ASSERT_TRUE(WaitFor([&] { return q.delivered() == 1; }));
  EXPECT_EQ(attempts.load(), 3);
  EXPECT_EQ(q.pending(), 0u);
  EXPECT_EQ(q.dropped(), 0u);
}

TEST(RetryQueueTest, ATaskIsDroppedAtItsDeadlineAndOthersStillRun) {
  RetryQueue q(absl::Milliseconds(5), absl::Milliseconds(10));
  std::atomic<int> hopeless{0}, fine{0};
  q.Add(
      "hopeless",
      [&] {
        ++hopeless;
        return absl::UnavailableError("never");
      },
      absl::Milliseconds(80));
  q.Add(
      "fine",
      [&] {
        ++fine;
        return absl::OkStatus();
      },
      absl::Minutes(1));
  ASSERT_TRUE(WaitFor([&] { return q.dropped() == 1 && q.delivered() == 1; }));
  EXPECT_EQ(fine.load(), 1);
  EXPECT_GE(hopeless.load(), 3);  // tried again and again, until its deadline
  EXPECT_EQ(q.pending(), 0u);
}

TEST(RetryQueueTest, StopDropsWhatIsLeftAndAddAfterStopIsIgnored) {
  RetryQueue q(absl::Hours(1), absl::Hours(1));
  std::atomic<int> attempts{0};
  q.Add(
      "once, then an hour later",
      [&] {
        ++attempts;
        return absl::UnavailableError("down");
      },
      absl::Hours(2));
  ASSERT_TRUE(WaitFor([&] { return attempts.load() == 1; }));
  const absl::Time before = absl::Now();
  q.Stop();
  EXPECT_LT(absl::Now() - before, absl::Seconds(1));  // not waiting for the hour
  EXPECT_EQ(q.pending(), 0u);
  q.Add(
      "late", [&] { return absl::OkStatus(); }, absl::Minutes(1));
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(q.delivered(), 0u);
  EXPECT_EQ(q.pending(), 0u);
}

}  // namespace
}  // namespace vault::common
