// Store::Compact: sparse pack files are rewritten and their space comes back; every live object
// reads back byte-exact, after a reopen too; a removal racing the run is not undone; a damaged
// value keeps its file; and each failing step (a full disk, a failed sync, a failed removal)
// leaves the store consistent, for the next run to finish.
#include <gmock/gmock.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cas/store_test_fixture.h"
#include "common/env.h"

namespace vault::cas {
namespace {

using ::absl::StatusCode;

// The POSIX Env, with pack file writes, syncs and removals that fail on demand.
class FailingEnv : public common::Env {
 public:
  std::atomic<int> fail_write{0};  // errno for WriteAt, 0: none
  std::atomic<int> fail_sync{0};
  std::atomic<int> fail_remove{0};

  std::unique_ptr<common::EnvFile> Open(const std::string& path, common::OpenMode mode, bool direct,
                                        int* err, mode_t bits) override {
    std::unique_ptr<common::EnvFile> f = base_->Open(path, mode, direct, err, bits);
    if (f == nullptr) return nullptr;
    return std::make_unique<File>(this, std::move(f));
  }
  int SyncDir(const std::string& dir) override { return base_->SyncDir(dir); }
  int CreateDir(const std::string& path, mode_t mode) override {
    return base_->CreateDir(path, mode);
  }
  int ListDir(const std::string& dir, std::vector<std::string>* names) override {
    return base_->ListDir(dir, names);
  }
  int Rename(const std::string& from, const std::string& to) override {
    return base_->Rename(from, to);
  }
  int Remove(const std::string& path) override {
    if (int e = fail_remove.load(); e != 0) return e;
    return base_->Remove(path);
  }

 private:
  class File : public common::EnvFile {
   public:
    File(FailingEnv* env, std::unique_ptr<common::EnvFile> base)
        : env_(env), base_(std::move(base)) {}
    int WriteAt(uint64_t offset, std::vector<iovec> pieces) override {
      if (int e = env_->fail_write.load(); e != 0) return e;
      return base_->WriteAt(offset, std::move(pieces));
    }
    ssize_t ReadAt(uint64_t offset, char* out, size_t n) override {
      return base_->ReadAt(offset, out, n);
    }
    int Sync() override {
      if (int e = env_->fail_sync.load(); e != 0) return e;
      return base_->Sync();
    }
    int FullSync() override { return base_->FullSync(); }
    int Close() override { return base_->Close(); }
    int PunchHole(uint64_t offset, uint64_t length) override {
      return base_->PunchHole(offset, length);
    }
    int Chmod(mode_t mode) override { return base_->Chmod(mode); }

   private:
    FailingEnv* const env_;
    std::unique_ptr<common::EnvFile> base_;
  };
  common::Env* const base_ = common::Env::Default();
};

std::string ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void OverwriteAt(const std::string& path, uint64_t offset, const std::string& bytes) {
  std::fstream f(path, std::ios::binary | std::ios::in | std::ios::out);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

class CompactionTest : public StoreTest {
 protected:
  void SetUp() override {
    options_.env = &env_;
    sync_writes_ = true;  // pack syncs happen, and can fail
    StoreTest::SetUp();
  }
  // Objects in a pack file of their own (a reopen starts a new file): `n` packed small ones and
  // one chunked one, all returned.
  std::vector<std::string> FillAFile(int n, uint64_t seed) {
    std::vector<std::string> out;
    for (int i = 0; i < n; ++i) {
      out.push_back(RandomBytes(8 << 10, seed * 1000 + i));  // above pack_min_bytes (4 KiB)
      PutOk(out.back());
    }
    out.push_back(RandomBytes(kThreshold * 2 + 99, seed * 1000 + 999));
    EXPECT_EQ(UploadWhole(out.back()).status(), absl::OkStatus());
    EXPECT_NO_FATAL_FAILURE(Reopen());
    return out;
  }
  uint64_t PackDirBytes() const {
    uint64_t total = 0;
    for (const auto& e : std::filesystem::directory_iterator(options_.pack_dir)) {
      total += e.file_size();
    }
    return total;
  }
  size_t PackFiles() const {
    size_t n = 0;
    for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(options_.pack_dir)) {
      ++n;
    }
    return n;
  }
  void ExpectAllRead(const std::vector<const std::vector<std::string>*>& sets) {
    for (const auto* set : sets) {
      for (const std::string& o : *set) {
        EXPECT_TRUE(SameBytes(ReadAllOk(Digest::Of(o)), o));
      }
    }
  }
  absl::StatusOr<CompactReport> Compact(CompactOptions o = {}) {
    o.retire_delay = absl::ZeroDuration();
    return store_->Compact(o);
  }
  FailingEnv env_;
};

TEST_F(CompactionTest, ASparseFileIsRewrittenAndItsSpaceComesBack) {
  std::vector<std::string> a = FillAFile(20, 1);
  const std::vector<std::string> b = FillAFile(20, 2);
  // 18 of a's 20 small objects and its large one go: a's file is mostly garbage.
  std::vector<std::string> a_kept(a.begin(), a.begin() + 2);
  for (size_t i = 2; i < a.size(); ++i) {
    ASSERT_EQ(store_->Remove(Digest::Of(a[i])).status(), absl::OkStatus());
  }
  ASSERT_EQ(store_->SweepChunks(false).status(), absl::OkStatus());
  const uint64_t before = PackDirBytes();
  absl::StatusOr<CompactReport> dry = Compact({.dry_run = true});
  ASSERT_EQ(dry.status(), absl::OkStatus());
  EXPECT_EQ(dry->files, 2u);
  EXPECT_EQ(dry->rewritten, 0u);
  EXPECT_EQ(dry->live_bytes, 2 * (8u << 10) + 20 * (8u << 10) + b.back().size());
  EXPECT_EQ(PackDirBytes(), before);

  absl::StatusOr<CompactReport> r = Compact();
  ASSERT_EQ(r.status(), absl::OkStatus());
  EXPECT_EQ(r->rewritten, 1u);
  EXPECT_EQ(r->copied_values, 2u);
  EXPECT_EQ(r->copied_bytes, 2u * (8 << 10));
  EXPECT_EQ(r->kept_damaged, 0u);
  EXPECT_GT(r->freed_bytes, 18u * (8 << 10) + a.back().size() - 1);
  EXPECT_LT(PackDirBytes(), before - 18 * (8 << 10) - a.back().size() + 2 * (8 << 10) + 65536);
  ExpectAllRead({&a_kept, &b});
  for (size_t i = 2; i < a.size(); ++i) {
    EXPECT_EQ(store_->Contains(Digest::Of(a[i])).value_or(true), false);
  }
  ASSERT_NO_FATAL_FAILURE(Reopen());
  ExpectAllRead({&a_kept, &b});
  // A second run finds nothing more to do.
  absl::StatusOr<CompactReport> again = Compact();
  ASSERT_EQ(again.status(), absl::OkStatus());
  EXPECT_EQ(again->rewritten, 0u);
}

TEST_F(CompactionTest, AFileWithNothingLiveIsRemovedWithoutACopy) {
  const std::vector<std::string> a = FillAFile(5, 3);
  for (const std::string& o : a) {
    ASSERT_EQ(store_->Remove(Digest::Of(o)).status(), absl::OkStatus());
  }
  ASSERT_EQ(store_->SweepChunks(false).status(), absl::OkStatus());
  const size_t files = PackFiles();
  absl::StatusOr<CompactReport> r = Compact();
  ASSERT_EQ(r.status(), absl::OkStatus());
  EXPECT_EQ(r->rewritten, 1u);
  EXPECT_EQ(r->copied_values, 0u);
  EXPECT_EQ(PackFiles(), files - 1);
}

TEST_F(CompactionTest, ARemovalDuringTheRunIsNotUndone) {
  const std::vector<std::string> a = FillAFile(10, 4);
  for (size_t i = 2; i < a.size(); ++i) {
    ASSERT_EQ(store_->Remove(Digest::Of(a[i])).status(), absl::OkStatus());
  }
  ASSERT_EQ(store_->SweepChunks(false).status(), absl::OkStatus());
  // Once the run has read the refs, a[0] is removed and a[1] removed and stored again.
  bool done = false;
  absl::StatusOr<CompactReport> r = Compact({.keep_going = [&]() -> absl::Status {
    if (!done) {
      done = true;
      EXPECT_EQ(store_->Remove(Digest::Of(a[0])).status(), absl::OkStatus());
      EXPECT_EQ(store_->Remove(Digest::Of(a[1])).status(), absl::OkStatus());
      PutOk(a[1]);
    }
    return absl::OkStatus();
  }});
  ASSERT_EQ(r.status(), absl::OkStatus());
  EXPECT_EQ(r->rewritten, 1u);
  EXPECT_EQ(store_->ReadAll(Digest::Of(a[0])).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(CountRows("cas_data"), 1u);  // a[1]'s: a[0]'s was not brought back
  EXPECT_TRUE(SameBytes(ReadAllOk(Digest::Of(a[1])), a[1]));
  ASSERT_NO_FATAL_FAILURE(Reopen());
  EXPECT_TRUE(SameBytes(ReadAllOk(Digest::Of(a[1])), a[1]));
  EXPECT_EQ(store_->totals().objects, 1u);
}

TEST_F(CompactionTest, AFileWithBytesNotYetReferredToStays) {
  // An upload's chunks are in the pack file being appended to, their refs not yet recorded
  // (pack_sync_bytes not reached): the compaction seals the file and must leave it alone.
  options_.pack_sync_bytes = uint64_t{1} << 30;
  ASSERT_NO_FATAL_FAILURE(Reopen());
  const std::string data = RandomBytes(kThreshold * 3, 8);
  absl::StatusOr<std::unique_ptr<Upload>> up = store_->StartUpload(Digest::Of(data), 0);
  ASSERT_EQ(up.status(), absl::OkStatus());
  ASSERT_EQ(AppendInPieces(up->get(), data, 0, data.size() - 1000, {65536}), absl::OkStatus());
  absl::StatusOr<CompactReport> r = Compact();
  ASSERT_EQ(r.status(), absl::OkStatus());
  EXPECT_EQ(r->rewritten, 0u);
  ASSERT_EQ(AppendInPieces(up->get(), data, data.size() - 1000, data.size(), {65536}),
            absl::OkStatus());
  ASSERT_EQ((*up)->Finish().status(), absl::OkStatus());
  up->reset();
  EXPECT_TRUE(SameBytes(ReadAllOk(Digest::Of(data)), data));
  // Its refs recorded, the sealed file holds only live values: nothing to rewrite either.
  absl::StatusOr<CompactReport> after = Compact();
  ASSERT_EQ(after.status(), absl::OkStatus());
  EXPECT_EQ(after->rewritten, 0u);
  EXPECT_TRUE(SameBytes(ReadAllOk(Digest::Of(data)), data));
}

TEST_F(CompactionTest, TheFileBeingAppendedToIsSealedAndRewrittenToo) {
  std::vector<std::string> objects;
  for (int i = 0; i < 10; ++i) {
    objects.push_back(RandomBytes(8 << 10, 900 + i));
    PutOk(objects.back());
  }
  for (int i = 1; i < 10; ++i) {
    ASSERT_EQ(store_->Remove(Digest::Of(objects[i])).status(), absl::OkStatus());
  }
  absl::StatusOr<CompactReport> r = Compact();
  ASSERT_EQ(r.status(), absl::OkStatus());
  EXPECT_EQ(r->rewritten, 1u);
  EXPECT_EQ(r->copied_values, 1u);
  EXPECT_TRUE(SameBytes(ReadAllOk(Digest::Of(objects[0])), objects[0]));
  EXPECT_EQ(PackFiles(), 1u);
}

TEST_F(CompactionTest, ADamagedValueKeepsItsFile) {
  const std::vector<std::string> a = FillAFile(4, 5);
  ASSERT_EQ(store_->Remove(Digest::Of(a[2])).status(), absl::OkStatus());
  ASSERT_EQ(store_->Remove(Digest::Of(a[3])).status(), absl::OkStatus());
  ASSERT_EQ(store_->Remove(Digest::Of(a[4])).status(), absl::OkStatus());
  ASSERT_EQ(store_->SweepChunks(false).status(), absl::OkStatus());
  // a[0]'s bytes in its pack file are damaged.
  std::string path;
  for (const auto& e : std::filesystem::directory_iterator(options_.pack_dir)) {
    path = e.path().string();
  }
  const std::string file = ReadWholeFile(path);
  const size_t at = file.find(a[0].substr(0, 64));
  ASSERT_NE(at, std::string::npos);
  OverwriteAt(path, at + 100, "damage");
  absl::StatusOr<CompactReport> r = Compact();
  ASSERT_EQ(r.status(), absl::OkStatus());
  EXPECT_EQ(r->kept_damaged, 1u);
  EXPECT_EQ(r->copied_values, 1u);  // a[1]
  EXPECT_EQ(r->rewritten, 0u);
  EXPECT_TRUE(std::filesystem::exists(path));
  EXPECT_TRUE(SameBytes(ReadAllOk(Digest::Of(a[1])), a[1]));
  EXPECT_EQ(store_->ReadAll(Digest::Of(a[0])).status().code(), StatusCode::kDataLoss);
}

TEST_F(CompactionTest, EachFailingStepLeavesTheStoreConsistent) {
  const std::vector<std::string> a = FillAFile(10, 6);
  std::vector<std::string> b = FillAFile(3, 7);
  std::vector<std::string> a_kept(a.begin(), a.begin() + 2);
  a_kept.push_back(a.back());
  for (size_t i = 2; i + 1 < a.size(); ++i) {
    ASSERT_EQ(store_->Remove(Digest::Of(a[i])).status(), absl::OkStatus());
  }
  // A full disk: nothing is copied, nothing moves.
  env_.fail_write = ENOSPC;
  absl::StatusOr<CompactReport> full = Compact({.max_live_fraction = 0.99});
  EXPECT_EQ(full.status().code(), StatusCode::kResourceExhausted) << full.status();
  env_.fail_write = 0;
  ExpectAllRead({&a_kept, &b});
  // A sync that fails: the pack store refuses writes until a restart, the refs stay.
  env_.fail_sync = EIO;
  absl::StatusOr<CompactReport> unsynced = Compact({.max_live_fraction = 0.99});
  EXPECT_FALSE(unsynced.ok());
  env_.fail_sync = 0;
  ExpectAllRead({&a_kept, &b});
  ASSERT_NO_FATAL_FAILURE(Reopen());
  ExpectAllRead({&a_kept, &b});
  // A removal that fails: the refs moved, the old file stays as garbage.
  env_.fail_remove = EIO;
  absl::StatusOr<CompactReport> stuck = Compact({.max_live_fraction = 0.99});
  EXPECT_EQ(stuck.status().code(), StatusCode::kUnavailable) << stuck.status();
  env_.fail_remove = 0;
  ExpectAllRead({&a_kept, &b});
  ASSERT_NO_FATAL_FAILURE(Reopen());
  ExpectAllRead({&a_kept, &b});
  // Healthy again, a run finishes the work: nothing live is lost, the garbage is gone.
  absl::StatusOr<CompactReport> r = Compact({.max_live_fraction = 0.99});
  ASSERT_EQ(r.status(), absl::OkStatus());
  EXPECT_GE(r->rewritten, 1u);
  ExpectAllRead({&a_kept, &b});
  ASSERT_NO_FATAL_FAILURE(Reopen());
  ExpectAllRead({&a_kept, &b});
  // What is left on disk is the live bytes, give or take the 4 KiB alignment of chunks.
  uint64_t live = 0;
  for (const auto* set : {&a_kept, &b}) {
    for (const std::string& o : *set) live += o.size();
  }
  EXPECT_GE(PackDirBytes(), live);
  EXPECT_LE(PackDirBytes(), live + live / 4 + (64 << 10));
}

}  // namespace
}  // namespace vault::cas
