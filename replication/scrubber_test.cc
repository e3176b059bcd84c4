// The scrub over a real store: it paces itself, resumes at its saved position after a restart,
// and counts damaged objects (without members it cannot repair them).
#include "replication/scrubber.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/testing/temp_dir.h"
#include "gtest/gtest.h"
#include "replication/follower.h"
#include "rocksdb/write_batch.h"
#include "storage/database.h"

namespace vault::replication {
namespace {

class ScrubberTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::vector<storage::ColumnFamilySpec> cfs = cas::Store::ColumnFamilies();
    for (storage::ColumnFamilySpec& cf : Follower::ColumnFamilies()) cfs.push_back(cf);
    absl::StatusOr<std::unique_ptr<storage::Database>> db = storage::Database::Open(
        {.path = tmp_.path() + "/db", .sync_writes = false, .block_cache_mb = 8}, cfs);
    ASSERT_TRUE(db.ok()) << db.status();
    db_ = *std::move(db);
    absl::StatusOr<std::unique_ptr<cas::Store>> store =
        cas::Store::Open(db_.get(), cas::StoreOptions{});
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
  }

  // `n` objects of `bytes` each.
  std::vector<std::string> PutObjects(int n, size_t bytes) {
    std::vector<std::string> out;
    std::vector<cas::PutItem> items;
    for (int i = 0; i < n; ++i) {
      std::string o = absl::StrCat("object ", i, " ");
      o.resize(bytes, static_cast<char>('a' + i % 26));
      out.push_back(std::move(o));
    }
    for (const std::string& o : out) items.push_back({cas::Digest::Of(o), o});
    for (const auto& r : store_->PutMany(items)) EXPECT_TRUE(r.ok()) << r.status();
    return out;
  }

  std::unique_ptr<Scrubber> Start(uint64_t rate) {
    vault::v1::ScrubConfig config;
    config.set_bytes_per_second(rate);
    config.set_interval_ms(60000);
    absl::StatusOr<std::unique_ptr<Scrubber>> s =
        Scrubber::Start({.db = db_.get(), .store = store_.get()}, config);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *std::move(s) : nullptr;
  }

  static bool WaitFor(const std::function<bool()>& done, absl::Duration timeout) {
    const absl::Time end = absl::Now() + timeout;
    while (absl::Now() < end) {
      if (done()) return true;
      absl::SleepFor(absl::Milliseconds(10));
    }
    return done();
  }

  common::testing::TempDir tmp_{"scrubber_test"};
  std::unique_ptr<storage::Database> db_;
  std::unique_ptr<cas::Store> store_;
};

TEST_F(ScrubberTest, PacesItselfAndResumesWhereItStopped) {
  // 200 objects of 4 KiB (+512 counted each) at 512 KiB/s: a pass takes about 1.8 s.
  PutObjects(200, 4096);
  std::unique_ptr<Scrubber> first = Start(512 << 10);
  absl::SleepFor(absl::Milliseconds(600));
  first->Stop();
  const ScrubCounters a = first->counters();
  EXPECT_EQ(a.passes, 0u);
  EXPECT_GT(a.objects, 20u);
  EXPECT_LT(a.objects, 120u);  // paced: not the whole store at once
  absl::StatusOr<std::string> position = Scrubber::LoadPosition(db_.get());
  ASSERT_TRUE(position.ok()) << position.status();
  EXPECT_EQ(position->size(), 40u);  // the last key checked

  // A new scrubber goes on after that key: its first pass covers only the rest.
  std::unique_ptr<Scrubber> second = Start(64 << 20);
  ASSERT_TRUE(WaitFor([&] { return second->counters().passes >= 1; }, absl::Seconds(20)));
  second->Stop();
  EXPECT_EQ(second->counters().objects, 200 - a.objects);
  EXPECT_EQ(second->counters().damaged, 0u);
  EXPECT_EQ(*Scrubber::LoadPosition(db_.get()), "");  // a pass ended: the next starts over
}

TEST_F(ScrubberTest, CountsDamagedObjectsItCannotRepairWithoutMembers) {
  std::vector<std::string> objects = PutObjects(50, 3000);
  // Damage two objects' stored bytes.
  for (int i : {7, 31}) {
    std::string bad = objects[i];
    bad[10] ^= 1;
    rocksdb::WriteBatch batch;
    batch.Put(db_->Handle("cas_data"), cas::Digest::Of(objects[i]).Key(), bad);
    ASSERT_EQ(db_->Write(&batch), absl::OkStatus());
  }
  std::unique_ptr<Scrubber> s = Start(64 << 20);
  ASSERT_TRUE(WaitFor([&] { return s->counters().passes >= 1; }, absl::Seconds(20)));
  s->Stop();
  EXPECT_EQ(s->counters().objects, 50u);
  EXPECT_EQ(s->counters().damaged, 2u);
  EXPECT_EQ(s->counters().repaired, 0u);
}

}  // namespace
}  // namespace vault::replication
