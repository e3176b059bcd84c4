// Crash consistency in seconds: a real RocksDB and real pack files under fault injectors that lose
// whatever was not synced when the power is cut (common/testing/fault_env.h,
// storage/testing/fault_fs.h), then reopened. Every acknowledged object must be there, byte for
// byte; an object in flight at the cut is either whole or absent, never damaged. The minute-long
// SIGKILL suites (integration-tests/crash_test.cc) check the same of the real process; these
// check what a power cut adds: the page cache is lost too.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "cas/store.h"
#include "cas/store_test_fixture.h"
#include "common/file_util.h"
#include "common/testing/fault_env.h"
#include "common/testing/temp_dir.h"
#include "gtest/gtest.h"
#include "rocksdb/env.h"
#include "storage/database.h"
#include "storage/testing/fault_fs.h"

namespace vault::cas {
namespace {

using common::testing::CrashSwitch;
using common::testing::FaultEnv;
using storage::testing::FaultFs;

class CrashConsistencyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    options_.chunk_avg_bytes = kAvg;
    options_.chunking_threshold = kThreshold;
    options_.pack_dir = tmp_.Path("packs");
    options_.pack_min_bytes = 4 << 10;
    // Large sync steps: an upload in flight at the cut has chunks written and not yet synced.
    options_.pack_sync_bytes = 8 << 20;
    options_.min_free_bytes = 0;
    options_.env = &env_;
    ASSERT_NO_FATAL_FAILURE(Open());
  }

  void Open() {
    fs_ = std::make_shared<FaultFs>(&power_);
    rocks_env_ = rocksdb::NewCompositeEnv(fs_);
    absl::StatusOr<std::unique_ptr<storage::Database>> db =
        storage::Database::Open({.path = tmp_.Path("db"),
                                 .env = rocks_env_.get(),
                                 .sync_writes = true,
                                 .block_cache_mb = 8},
                                Store::ColumnFamilies());
    ASSERT_EQ(db.status(), absl::OkStatus());
    db_ = *std::move(db);
    absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(db_.get(), options_);
    ASSERT_EQ(store.status(), absl::OkStatus());
    store_ = *std::move(store);
  }

  // The power goes: nothing written from now on reaches the disk, the process's own shutdown
  // included; then the disk is cut back to what was synced, and the store opened again. How
  // many pack files (and names) lost something.
  int CrashAndReopen() {
    power_.Cut();
    uploads_.clear();
    store_.reset();
    db_.reset();
    const int packs_lost = env_.DropUnsynced();
    fs_->DropUnsynced();
    power_.Restore();
    rocks_env_.reset();
    Open();
    return packs_lost;
  }

  common::testing::TempDir tmp_{"crash_consistency_test"};
  CrashSwitch power_;
  FaultEnv env_{&power_};
  std::shared_ptr<FaultFs> fs_;
  std::unique_ptr<rocksdb::Env> rocks_env_;
  StoreOptions options_;
  std::unique_ptr<storage::Database> db_;
  std::unique_ptr<Store> store_;
  std::vector<std::unique_ptr<Upload>> uploads_;
};

TEST_F(CrashConsistencyTest, NothingAcknowledgedIsLostAndNothingInFlightIsDamaged) {
  absl::flat_hash_map<std::string, std::string> acknowledged;  // digest text -> bytes
  std::vector<std::string> in_flight;
  uint64_t seed = 1;
  for (int round = 0; round < 4; ++round) {
    // Inline in RocksDB, inline in a pack, chunked into packs: each acknowledged.
    for (size_t size :
         {size_t{100}, size_t{3000}, size_t{20} << 10, size_t{200} << 10, (size_t{1} << 20) + 7}) {
      const std::string data = RandomBytes(size, seed++);
      if (size < kThreshold) {
        absl::StatusOr<PutOutcome> put = store_->Put(Digest::Of(data), data);
        ASSERT_EQ(put.status(), absl::OkStatus());
      } else {  // chunked: streamed, acknowledged by its Finish
        absl::StatusOr<std::unique_ptr<Upload>> up = store_->StartUpload(Digest::Of(data), 0);
        ASSERT_EQ(up.status(), absl::OkStatus());
        ASSERT_EQ((*up)->Append(data), absl::OkStatus());
        ASSERT_EQ((*up)->Finish().status(), absl::OkStatus());
      }
      acknowledged[Digest::Of(data).ToString()] = data;
    }
    // In flight at the cut: an upload with chunks written and not synced, never finished.
    const std::string partial = RandomBytes(3 << 20, seed++);
    absl::StatusOr<std::unique_ptr<Upload>> up = store_->StartUpload(Digest::Of(partial), 0);
    ASSERT_EQ(up.status(), absl::OkStatus());
    ASSERT_EQ((*up)->Append(absl::string_view(partial).substr(0, 2 << 20)), absl::OkStatus());
    uploads_.push_back(*std::move(up));
    in_flight.push_back(partial);

    // The in-flight upload's chunks were in a pack and never synced: the cut took them (else
    // this test would prove nothing of the packs).
    EXPECT_GT(CrashAndReopen(), 0) << "round " << round;
    ASSERT_NE(store_, nullptr);
    for (const auto& [text, data] : acknowledged) {
      absl::StatusOr<std::string> back = store_->ReadAll(Digest::Of(data));
      ASSERT_EQ(back.status(), absl::OkStatus()) << text << " after round " << round;
      EXPECT_TRUE(SameBytes(*back, data)) << text;
    }
    for (const std::string& data : in_flight) {
      absl::StatusOr<bool> present = store_->Contains(Digest::Of(data));
      ASSERT_EQ(present.status(), absl::OkStatus());
      if (*present) {
        absl::StatusOr<std::string> back = store_->ReadAll(Digest::Of(data));
        ASSERT_EQ(back.status(), absl::OkStatus());
        EXPECT_TRUE(SameBytes(*back, data));
      }
    }
  }
}

TEST_F(CrashConsistencyTest, AnAtomicFileWriteIsOldOrNewAfterACut) {
  const std::string path = tmp_.Path("vault.conf");
  ASSERT_EQ(common::WriteFileAtomic(path, "old", 0600, &env_), absl::OkStatus());
  // Acknowledged, then the cut: the new content stays (its rename was made durable by the
  // directory's sync; without that sync the cut would bring "old" back).
  ASSERT_EQ(common::WriteFileAtomic(path, "new", 0600, &env_), absl::OkStatus());
  power_.Cut();
  env_.DropUnsynced();
  power_.Restore();
  absl::StatusOr<std::string> back = common::ReadFile(path);
  ASSERT_EQ(back.status(), absl::OkStatus());
  EXPECT_EQ(*back, "new");
  // Issued during the cut: it reports success, as a write into the page cache would, and the
  // disk keeps the last content that was acknowledged before, whole; its temporary file is gone.
  power_.Cut();
  EXPECT_EQ(common::WriteFileAtomic(path, "newer, never synced", 0600, &env_), absl::OkStatus());
  env_.DropUnsynced();
  power_.Restore();
  back = common::ReadFile(path);
  ASSERT_EQ(back.status(), absl::OkStatus());
  EXPECT_EQ(*back, "new");
  std::vector<std::string> names;
  ASSERT_EQ(common::Env::Default()->ListDir(tmp_.path(), &names), 0);
  for (const std::string& name : names) {
    EXPECT_EQ(name.find("vault.conf."), std::string::npos) << name;  // no temporary, no link
  }
}

}  // namespace
}  // namespace vault::cas
