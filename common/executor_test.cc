#include "common/executor.h"

#include <atomic>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace vault::common {
namespace {

TEST(Executor, RunsAllTasks) {
  std::atomic<int> ran{0};
  Executor pool(/*threads=*/4, /*max_queue=*/2000);
  for (int i = 0; i < 1000; ++i) {
    ASSERT_TRUE(pool.Schedule([&ran] { ran.fetch_add(1); }));
  }
  pool.Shutdown();
  EXPECT_EQ(ran.load(), 1000);
}

TEST(Executor, ZeroThreadsMeansOne) {
  std::atomic<int> ran{0};
  Executor pool(/*threads=*/0, /*max_queue=*/10);
  ASSERT_TRUE(pool.Schedule([&ran] { ran.fetch_add(1); }));
  pool.Shutdown();
  EXPECT_EQ(ran.load(), 1);
}

TEST(Executor, RunsTasksOnSeveralThreadsAtOnce) {
  constexpr int kThreads = 4;
  absl::Mutex mu;
  int arrived = 0;
  std::atomic<int> all_met{0};
  Executor pool(kThreads, /*max_queue=*/kThreads);
  for (int i = 0; i < kThreads; ++i) {
    ASSERT_TRUE(pool.Schedule([&] {
      absl::MutexLock lock(&mu);
      ++arrived;
      auto everyone = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return arrived == kThreads; };
      // Only possible if all tasks are running at the same time.
      if (mu.AwaitWithTimeout(absl::Condition(&everyone), absl::Seconds(30))) all_met.fetch_add(1);
    }));
  }
  pool.Shutdown();
  EXPECT_EQ(all_met.load(), kThreads);
}

TEST(Executor, ScheduleRefusesPastMaxQueue) {
  absl::Notification started, release;
  std::atomic<int> ran{0};
  Executor pool(/*threads=*/1, /*max_queue=*/2);
  ASSERT_TRUE(pool.Schedule([&] {
    started.Notify();
    release.WaitForNotification();
    ran.fetch_add(1);
  }));
  started.WaitForNotification();  // the only worker is busy; the queue is empty
  EXPECT_TRUE(pool.Schedule([&ran] { ran.fetch_add(10); }));
  EXPECT_TRUE(pool.Schedule([&ran] { ran.fetch_add(100); }));
  EXPECT_FALSE(pool.Schedule([&ran] { ran.fetch_add(1000); }));
  EXPECT_FALSE(pool.Schedule([&ran] { ran.fetch_add(1000); }));
  release.Notify();
  pool.Shutdown();
  EXPECT_EQ(ran.load(), 111);  // the refused tasks never ran
}

TEST(Executor, ZeroMaxQueueRefusesEverything) {
  std::atomic<int> ran{0};
  Executor pool(/*threads=*/2, /*max_queue=*/0);
  EXPECT_FALSE(pool.Schedule([&ran] { ran.fetch_add(1); }));
  pool.Shutdown();
  EXPECT_EQ(ran.load(), 0);
}

TEST(Executor, ScheduleRefusesAfterShutdown) {
  std::atomic<int> ran{0};
  Executor pool(/*threads=*/2, /*max_queue=*/10);
  pool.Shutdown();
  EXPECT_FALSE(pool.Schedule([&ran] { ran.fetch_add(1); }));
  pool.Shutdown();  // idempotent
  EXPECT_EQ(ran.load(), 0);
}

TEST(Executor, ShutdownDrainsQueuedTasks) {
  absl::Notification started, release;
  std::atomic<int> ran{0};
  Executor pool(/*threads=*/1, /*max_queue=*/100);
  ASSERT_TRUE(pool.Schedule([&] {
    started.Notify();
    release.WaitForNotification();
    ran.fetch_add(1);
  }));
  started.WaitForNotification();
  int accepted = 1;
  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE(pool.Schedule([&ran] { ran.fetch_add(1); }));
    ++accepted;
  }
  std::thread stopper([&pool] { pool.Shutdown(); });
  // Once Shutdown has begun, Schedule refuses; until then it may still accept.
  while (pool.Schedule([&ran] { ran.fetch_add(1); })) ++accepted;
  EXPECT_EQ(ran.load(), 0);  // the worker is still blocked: nothing else ran
  release.Notify();
  stopper.join();
  EXPECT_EQ(ran.load(), accepted);
}

TEST(Executor, DestructorDrainsQueuedTasks) {
  std::atomic<int> ran{0};
  {
    Executor pool(/*threads=*/2, /*max_queue=*/100);
    for (int i = 0; i < 100; ++i) ASSERT_TRUE(pool.Schedule([&ran] { ran.fetch_add(1); }));
  }
  EXPECT_EQ(ran.load(), 100);
}

TEST(Executor, ScheduleFromManyThreads) {
  std::atomic<int> ran{0};
  std::atomic<int> accepted{0};
  Executor pool(/*threads=*/3, /*max_queue=*/100000);
  std::vector<std::thread> producers;
  for (int t = 0; t < 8; ++t) {
    producers.emplace_back([&] {
      for (int i = 0; i < 500; ++i) {
        if (pool.Schedule([&ran] { ran.fetch_add(1); })) accepted.fetch_add(1);
      }
    });
  }
  for (std::thread& t : producers) t.join();
  pool.Shutdown();
  EXPECT_EQ(accepted.load(), 4000);
  EXPECT_EQ(ran.load(), 4000);
}

}  // namespace
}  // namespace vault::common
