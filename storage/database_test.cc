#include "storage/database.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "common/testing/temp_dir.h"
#include "gtest/gtest.h"
#include "rocksdb/iterator.h"
#include "rocksdb/write_batch.h"

namespace vault::storage {
namespace {

class DatabaseTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = tmp_.path(); }

  DatabaseOptions Options() const {
    return DatabaseOptions{.path = dir_ + "/db", .sync_writes = false, .block_cache_mb = 8};
  }
  static std::vector<ColumnFamilySpec> Specs() {
    return {{.name = "alpha"},
            {.name = "beta", .blob_min_bytes = 1024},
            {.name = "gamma", .point_lookups = false}};
  }

  common::testing::TempDir tmp_{"database_test"};
  std::string dir_;
};

TEST(ToStatus, OkIsOk) { EXPECT_EQ(ToStatus(rocksdb::Status::OK(), "anything"), absl::OkStatus()); }

TEST(ToStatus, MapsCodes) {
  EXPECT_EQ(ToStatus(rocksdb::Status::NotFound("k"), "get").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ToStatus(rocksdb::Status::Corruption("bad block"), "get").code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(ToStatus(rocksdb::Status::IOError("disk"), "write").code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(ToStatus(rocksdb::Status::NoSpace("full"), "write").code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(ToStatus(rocksdb::Status::NotSupported("x"), "op").code(),
            absl::StatusCode::kUnimplemented);
  EXPECT_EQ(ToStatus(rocksdb::Status::InvalidArgument("x"), "op").code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ToStatus(rocksdb::Status::Busy("x"), "op").code(), absl::StatusCode::kAborted);
  EXPECT_EQ(ToStatus(rocksdb::Status::TryAgain("x"), "op").code(), absl::StatusCode::kAborted);
  EXPECT_EQ(ToStatus(rocksdb::Status::Aborted("x"), "op").code(), absl::StatusCode::kAborted);
  EXPECT_EQ(ToStatus(rocksdb::Status::TimedOut("x"), "op").code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(ToStatus(rocksdb::Status::ShutdownInProgress("x"), "op").code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(ToStatus(rocksdb::Status::Incomplete("x"), "op").code(), absl::StatusCode::kInternal);
}

TEST(ToStatus, MessageNamesTheOperation) {
  absl::Status s = ToStatus(rocksdb::Status::Corruption("bad block"), "read chunk");
  EXPECT_EQ(s.message(), "read chunk: Corruption: bad block");
}

TEST(SliceConversion, RoundTripsBytesIncludingNul) {
  const std::string bytes("a\0b\xff", 4);
  rocksdb::Slice slice = ToSlice(bytes);
  EXPECT_EQ(slice.data(), bytes.data());
  EXPECT_EQ(slice.size(), 4u);
  absl::string_view back = View(slice);
  EXPECT_EQ(back.data(), bytes.data());
  EXPECT_EQ(back.size(), 4u);
}

TEST_F(DatabaseTest, OpenCreatesColumnFamiliesAndHandlesWork) {
  absl::StatusOr<std::unique_ptr<Database>> db = Database::Open(Options(), Specs());
  ASSERT_EQ(db.status(), absl::OkStatus());
  ASSERT_NE((*db)->db(), nullptr);
  EXPECT_EQ((*db)->Handle("alpha")->GetName(), "alpha");
  EXPECT_EQ((*db)->Handle("beta")->GetName(), "beta");
  EXPECT_EQ((*db)->Handle("gamma")->GetName(), "gamma");
  EXPECT_NE((*db)->Handle("alpha"), (*db)->Handle("beta"));
  EXPECT_EQ((*db)->options().path, dir_ + "/db");

  std::vector<std::string> names;
  ASSERT_TRUE(rocksdb::DB::ListColumnFamilies(rocksdb::DBOptions(), dir_ + "/db", &names).ok());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"alpha", "beta", "default", "gamma"}));
}

TEST_F(DatabaseTest, WritesAreAtomicPerBatchAndSurviveReopen) {
  const std::string big(4096, 'b');  // above beta's blob threshold
  {
    absl::StatusOr<std::unique_ptr<Database>> db = Database::Open(Options(), Specs());
    ASSERT_EQ(db.status(), absl::OkStatus());
    rocksdb::WriteBatch batch;
    batch.Put((*db)->Handle("alpha"), "k1", "v1");
    batch.Put((*db)->Handle("beta"), "k1", big);
    ASSERT_EQ((*db)->Write(&batch), absl::OkStatus());
    rocksdb::WriteBatch unsynced;
    unsynced.Put((*db)->Handle("gamma"), "k2", "v2");
    ASSERT_EQ((*db)->WriteUnsynced(&unsynced), absl::OkStatus());
    // The same key in different column families is different data.
    std::string value;
    EXPECT_TRUE((*db)
                    ->db()
                    ->Get(rocksdb::ReadOptions(), (*db)->Handle("gamma"), "k1", &value)
                    .IsNotFound());
  }
  absl::StatusOr<std::unique_ptr<Database>> db = Database::Open(Options(), Specs());
  ASSERT_EQ(db.status(), absl::OkStatus());
  std::string value;
  ASSERT_TRUE((*db)->db()->Get(rocksdb::ReadOptions(), (*db)->Handle("alpha"), "k1", &value).ok());
  EXPECT_EQ(value, "v1");
  ASSERT_TRUE((*db)->db()->Get(rocksdb::ReadOptions(), (*db)->Handle("beta"), "k1", &value).ok());
  EXPECT_EQ(value, big);
  ASSERT_TRUE((*db)->db()->Get(rocksdb::ReadOptions(), (*db)->Handle("gamma"), "k2", &value).ok());
  EXPECT_EQ(value, "v2");
}

TEST_F(DatabaseTest, ReopenWithAnAdditionalColumnFamilyCreatesIt) {
  {
    absl::StatusOr<std::unique_ptr<Database>> db = Database::Open(Options(), {{.name = "alpha"}});
    ASSERT_EQ(db.status(), absl::OkStatus());
  }
  absl::StatusOr<std::unique_ptr<Database>> db = Database::Open(Options(), Specs());
  ASSERT_EQ(db.status(), absl::OkStatus());
  EXPECT_EQ((*db)->Handle("gamma")->GetName(), "gamma");
}

TEST_F(DatabaseTest, ReopenWithoutAnExistingColumnFamilyIsInvalidArgument) {
  {
    absl::StatusOr<std::unique_ptr<Database>> db = Database::Open(Options(), Specs());
    ASSERT_EQ(db.status(), absl::OkStatus());
  }
  absl::StatusOr<std::unique_ptr<Database>> db = Database::Open(Options(), {{.name = "alpha"}});
  EXPECT_EQ(db.status().code(), absl::StatusCode::kInvalidArgument) << db.status();
}

TEST_F(DatabaseTest, SecondOpenOfTheSameDirectoryFailsWhileLocked) {
  absl::StatusOr<std::unique_ptr<Database>> first = Database::Open(Options(), Specs());
  ASSERT_EQ(first.status(), absl::OkStatus());
  absl::StatusOr<std::unique_ptr<Database>> second = Database::Open(Options(), Specs());
  // RocksDB reports the held LOCK file as an IOError.
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable) << second.status();
}

// gtest runs *DeathTest suites first, before any RocksDB background thread exists; the forked
// child uses this test's directory, which TearDown removes.
using DatabaseDeathTest = DatabaseTest;

TEST_F(DatabaseDeathTest, HandleOfUndeclaredColumnFamilyAborts) {
  EXPECT_DEATH(
      {
        absl::StatusOr<std::unique_ptr<Database>> db = Database::Open(Options(), Specs());
        if (db.ok()) (*db)->Handle("undeclared");
      },
      "");
}

}  // namespace
}  // namespace vault::storage
