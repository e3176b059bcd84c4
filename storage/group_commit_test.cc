#include "storage/group_commit.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/testing/temp_dir.h"
#include "gtest/gtest.h"
#include "rocksdb/iterator.h"
#include "storage/database.h"

namespace vault::storage {
namespace {

struct TestOp {
  int id = 0;
  bool poison = false;  // the prepare hook refuses a group holding this op
};

class GroupCommitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = tmp_.path();
    absl::StatusOr<std::unique_ptr<Database>> db = Database::Open(
        {.path = dir_ + "/db", .sync_writes = true, .block_cache_mb = 8}, {{.name = "ops"}});
    ASSERT_EQ(db.status(), absl::OkStatus());
    db_ = std::move(*db);
  }
  void TearDown() override { db_.reset(); }

  static std::string Key(int id) { return absl::StrCat("op-", id); }

  // The ids of every key in the "ops" column family.
  std::vector<std::string> StoredKeys() const {
    std::vector<std::string> keys;
    std::unique_ptr<rocksdb::Iterator> it(
        db_->db()->NewIterator(rocksdb::ReadOptions(), db_->Handle("ops")));
    for (it->SeekToFirst(); it->Valid(); it->Next()) keys.push_back(it->key().ToString());
    EXPECT_TRUE(it->status().ok());
    return keys;
  }

  common::testing::TempDir tmp_{"group_commit_test"};
  std::string dir_;
  std::unique_ptr<Database> db_;
};

TEST_F(GroupCommitTest, ManyThreadsEveryOpCommittedOnceSerialPrepareGroupsForm) {
  constexpr int kThreads = 16;
  constexpr int kPerThread = 100;
  constexpr int kOps = kThreads * kPerThread;

  std::atomic<bool> in_hooks{false};
  std::atomic<int> overlaps{0};
  std::vector<std::atomic<int>> prepared(kOps);
  std::vector<std::atomic<int>> finished(kOps);
  absl::Mutex mu;
  std::vector<size_t> group_sizes;

  GroupCommitter<TestOp> committer(
      db_.get(), {.prepare =
                      [&](absl::Span<TestOp* const> ops, rocksdb::WriteBatch* batch) {
                        // The region from prepare to finish of one group never overlaps another's.
                        if (in_hooks.exchange(true)) overlaps.fetch_add(1);
                        for (TestOp* op : ops) {
                          prepared[op->id].fetch_add(1);
                          batch->Put(db_->Handle("ops"), Key(op->id), "v");
                        }
                        absl::SleepFor(absl::Microseconds(200));  // give followers time to queue up
                        {
                          absl::MutexLock lock(&mu);
                          group_sizes.push_back(ops.size());
                        }
                        return absl::OkStatus();
                      },
                  .finish =
                      [&](absl::Span<TestOp* const> ops, const absl::Status& written) {
                        EXPECT_EQ(written, absl::OkStatus());
                        for (TestOp* op : ops) finished[op->id].fetch_add(1);
                        if (!in_hooks.exchange(false)) overlaps.fetch_add(1);
                      }});

  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        TestOp op{.id = t * kPerThread + i};
        if (!committer.Commit(&op).ok()) failures.fetch_add(1);
        // When Commit returns, its group's finish already ran.
        if (finished[op.id].load() != 1) failures.fetch_add(1);
      }
    });
  }
  for (std::thread& t : threads) t.join();

  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(overlaps.load(), 0);
  for (int id = 0; id < kOps; ++id) {
    EXPECT_EQ(prepared[id].load(), 1) << "op " << id;
    EXPECT_EQ(finished[id].load(), 1) << "op " << id;
  }
  size_t total = 0;
  size_t largest = 0;
  for (size_t n : group_sizes) {
    total += n;
    largest = std::max(largest, n);
  }
  EXPECT_EQ(total, static_cast<size_t>(kOps));
  EXPECT_GT(largest, 1u) << "no group ever held more than one op";
  EXPECT_LT(group_sizes.size(), static_cast<size_t>(kOps));
  EXPECT_EQ(StoredKeys().size(), static_cast<size_t>(kOps));
}

// Holds the first leader inside prepare until every other writer has queued behind it, so the
// next group is all of them.
class GateFirstGroup {
 public:
  void WaitInFirstPrepare() {
    if (first_.exchange(false)) {
      entered_.Notify();
      release_.WaitForNotification();
    }
  }
  void WaitForFirstPrepare() { entered_.WaitForNotification(); }
  void Release() { release_.Notify(); }

 private:
  std::atomic<bool> first_{true};
  absl::Notification entered_, release_;
};

TEST_F(GroupCommitTest, FailedPrepareFailsEveryMemberAndWritesNothing) {
  constexpr int kFollowers = 8;
  GateFirstGroup gate;
  absl::Mutex mu;
  std::vector<std::vector<int>> groups;  // ids per group, in prepare order
  std::vector<absl::Status> finish_statuses;
  const absl::Status poisoned = absl::ResourceExhaustedError("poisoned group");

  GroupCommitter<TestOp> committer(
      db_.get(), {.prepare =
                      [&](absl::Span<TestOp* const> ops, rocksdb::WriteBatch* batch) {
                        gate.WaitInFirstPrepare();
                        bool poison = false;
                        std::vector<int> ids;
                        for (TestOp* op : ops) {
                          // Records go into the batch before the failure is known: still nothing
                          // written.
                          batch->Put(db_->Handle("ops"), Key(op->id), "v");
                          ids.push_back(op->id);
                          poison = poison || op->poison;
                        }
                        absl::MutexLock lock(&mu);
                        groups.push_back(ids);
                        return poison ? poisoned : absl::OkStatus();
                      },
                  .finish =
                      [&](absl::Span<TestOp* const> ops, const absl::Status& written) {
                        absl::MutexLock lock(&mu);
                        finish_statuses.push_back(written);
                      }});

  absl::Status first_status;
  std::thread first([&] {
    TestOp op{.id = 0};
    first_status = committer.Commit(&op);
  });
  gate.WaitForFirstPrepare();

  std::vector<absl::Status> statuses(kFollowers + 1);
  std::atomic<int> calling{0};
  std::vector<std::thread> followers;
  for (int id = 1; id <= kFollowers; ++id) {
    followers.emplace_back([&, id] {
      TestOp op{.id = id, .poison = id == 5};
      calling.fetch_add(1);
      statuses[id] = committer.Commit(&op);
    });
  }
  while (calling.load() < kFollowers) absl::SleepFor(absl::Milliseconds(1));
  absl::SleepFor(absl::Milliseconds(200));  // let each follower reach the queue
  const rocksdb::SequenceNumber seq_before = db_->db()->GetLatestSequenceNumber();
  gate.Release();
  first.join();
  for (std::thread& t : followers) t.join();

  EXPECT_EQ(first_status, absl::OkStatus());
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0], std::vector<int>{0});
  EXPECT_EQ(groups[1].size(), static_cast<size_t>(kFollowers));
  for (int id = 1; id <= kFollowers; ++id) EXPECT_EQ(statuses[id], poisoned) << "op " << id;
  ASSERT_EQ(finish_statuses.size(), 2u);
  EXPECT_EQ(finish_statuses[0], absl::OkStatus());
  EXPECT_EQ(finish_statuses[1], poisoned);
  // Only the first group's record exists; the failed group wrote nothing at all.
  EXPECT_EQ(StoredKeys(), std::vector<std::string>{Key(0)});
  EXPECT_EQ(db_->db()->GetLatestSequenceNumber(), seq_before + 1);
}

TEST_F(GroupCommitTest, GroupsRespectMaxGroupAndKeepCommitManyTogether) {
  GateFirstGroup gate;
  absl::Mutex mu;
  std::vector<std::vector<int>> groups;
  GroupCommitter<TestOp> committer(
      db_.get(),
      {.prepare =
           [&](absl::Span<TestOp* const> ops, rocksdb::WriteBatch* batch) {
             gate.WaitInFirstPrepare();
             std::vector<int> ids;
             for (TestOp* op : ops) {
               batch->Put(db_->Handle("ops"), Key(op->id), "v");
               ids.push_back(op->id);
             }
             absl::MutexLock lock(&mu);
             groups.push_back(ids);
             return absl::OkStatus();
           }},
      /*max_group=*/3);

  std::thread first([&] {
    TestOp op{.id = 0};
    EXPECT_EQ(committer.Commit(&op), absl::OkStatus());
  });
  gate.WaitForFirstPrepare();
  std::atomic<int> calling{0};
  std::vector<std::thread> followers;
  for (int id = 1; id <= 6; ++id) {
    followers.emplace_back([&, id] {
      TestOp op{.id = id};
      calling.fetch_add(1);
      EXPECT_EQ(committer.Commit(&op), absl::OkStatus());
    });
  }
  // One caller with five ops: more than max_group, yet one group.
  followers.emplace_back([&] {
    std::vector<TestOp> ops(5);
    std::vector<TestOp*> ptrs;
    for (int i = 0; i < 5; ++i) {
      ops[i].id = 100 + i;
      ptrs.push_back(&ops[i]);
    }
    calling.fetch_add(1);
    EXPECT_EQ(committer.CommitMany(ptrs), absl::OkStatus());
  });
  while (calling.load() < 7) absl::SleepFor(absl::Milliseconds(1));
  absl::SleepFor(absl::Milliseconds(200));
  gate.Release();
  first.join();
  for (std::thread& t : followers) t.join();

  size_t total = 0;
  bool many_together = false;
  for (const std::vector<int>& g : groups) {
    total += g.size();
    if (g == std::vector<int>{100, 101, 102, 103, 104}) {
      many_together = true;
    } else {
      EXPECT_LE(g.size(), 3u);
      for (int id : g) EXPECT_LT(id, 100) << "CommitMany ops split or mixed into another group";
    }
  }
  EXPECT_EQ(total, 12u);
  EXPECT_TRUE(many_together);
  EXPECT_EQ(StoredKeys().size(), 12u);
}

TEST_F(GroupCommitTest, EmptyBatchSucceedsWithoutWriting) {
  int finishes = 0;
  GroupCommitter<TestOp> committer(
      db_.get(),
      {.prepare = [](absl::Span<TestOp* const>, rocksdb::WriteBatch*) { return absl::OkStatus(); },
       .finish =
           [&](absl::Span<TestOp* const> ops, const absl::Status& written) {
             EXPECT_EQ(written, absl::OkStatus());
             ++finishes;
           }});
  const rocksdb::SequenceNumber before = db_->db()->GetLatestSequenceNumber();
  TestOp op{.id = 1};
  EXPECT_EQ(committer.Commit(&op), absl::OkStatus());
  EXPECT_EQ(db_->db()->GetLatestSequenceNumber(), before);
  EXPECT_EQ(finishes, 1);
}

TEST_F(GroupCommitTest, FinishHookIsOptional) {
  GroupCommitter<TestOp> committer(
      db_.get(), {.prepare = [&](absl::Span<TestOp* const> ops, rocksdb::WriteBatch* batch) {
        for (TestOp* op : ops) batch->Put(db_->Handle("ops"), Key(op->id), "v");
        return absl::OkStatus();
      }});
  TestOp a{.id = 1}, b{.id = 2};
  EXPECT_EQ(committer.Commit(&a), absl::OkStatus());
  std::vector<TestOp*> both = {&a, &b};
  EXPECT_EQ(committer.CommitMany(both), absl::OkStatus());
  EXPECT_EQ(StoredKeys(), (std::vector<std::string>{Key(1), Key(2)}));
}

}  // namespace
}  // namespace vault::storage
