// Pack files (cas/pack.h) alone, and the store's use of them: what is packed, that it reads back
// after a reopen, and that damage to a pack file (bytes flipped, truncated, deleted, a forged
// ref) is DATA_LOSS, never wrong bytes.
#include "cas/pack.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <thread>
#include <tuple>

#include "absl/strings/str_format.h"
#include "cas/store_test_fixture.h"

namespace vault::cas {
namespace {

std::vector<std::string> PackFiles(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

TEST(PackRefTest, EncodesAndDecodes) {
  PackRef ref{.file = 0x0102030405060708ULL, .offset = (uint64_t{5} << 32) + 7, .size = 300000};
  std::string v = EncodePackRef(ref);
  ASSERT_EQ(v.size(), kPackRefBytes);
  EXPECT_EQ(v.substr(0, 4), "VPK1");
  std::optional<PackRef> back = DecodePackRef(v, 300000);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->file, ref.file);
  EXPECT_EQ(back->offset, ref.offset);
  EXPECT_EQ(back->size, ref.size);
  // A value as long as a ref is the bytes themselves when that is the expected size, or when
  // it lacks the magic.
  EXPECT_FALSE(DecodePackRef(v, kPackRefBytes).has_value());
  std::string other = v;
  other[0] = 'X';
  EXPECT_FALSE(DecodePackRef(other, 300000).has_value());
  EXPECT_FALSE(DecodePackRef(v.substr(1), 300000).has_value());
}

TEST(PackStoreTest, AppendsReadBackAcrossFilesAndReopen) {
  common::testing::TempDir tmp("pack_test");
  const std::string dir = tmp.path() + "/packs";
  std::vector<std::pair<PackRef, std::string>> written;
  {
    absl::StatusOr<std::unique_ptr<PackStore>> packs =
        PackStore::Open({.dir = dir, .file_bytes = 100 << 10});
    ASSERT_EQ(packs.status(), absl::OkStatus());
    uint64_t ticket = 0;
    for (int i = 0; i < 20; ++i) {
      std::string bytes = RandomBytes(30000 + i, 100 + i);
      absl::StatusOr<PackRef> ref = (*packs)->Append(bytes, &ticket);
      ASSERT_EQ(ref.status(), absl::OkStatus());
      written.emplace_back(*ref, bytes);
    }
    // A value larger than a file gets a file of its own.
    std::string big = RandomBytes(300 << 10, 7);
    absl::StatusOr<PackRef> ref = (*packs)->Append(big, &ticket);
    ASSERT_EQ(ref.status(), absl::OkStatus());
    EXPECT_EQ(ref->offset, 0u);
    written.emplace_back(*ref, big);
    ASSERT_EQ((*packs)->Sync(ticket), absl::OkStatus());
    ASSERT_EQ((*packs)->Sync(ticket), absl::OkStatus());  // nothing new: no-op
    for (const auto& [r, bytes] : written) {
      absl::StatusOr<std::string> got = (*packs)->Read(r);
      ASSERT_EQ(got.status(), absl::OkStatus());
      EXPECT_TRUE(SameBytes(*got, bytes));
    }
  }
  // 3 x ~30 KB per 100 KiB file: 7 files, plus the big one.
  EXPECT_EQ(PackFiles(dir).size(), 8u);
  absl::StatusOr<std::unique_ptr<PackStore>> again = PackStore::Open({.dir = dir});
  ASSERT_EQ(again.status(), absl::OkStatus());
  for (const auto& [r, bytes] : written) {
    absl::StatusOr<std::string> got = (*again)->Read(r);
    ASSERT_EQ(got.status(), absl::OkStatus());
    EXPECT_TRUE(SameBytes(*got, bytes));
  }
  // A reopened store never appends to an earlier run's files.
  uint64_t ticket = 0;
  absl::StatusOr<PackRef> next = (*again)->Append("after the reopen", &ticket);
  ASSERT_EQ(next.status(), absl::OkStatus());
  EXPECT_GT(next->file, written.back().first.file);
  EXPECT_EQ(next->offset, 0u);
}

TEST(PackStoreTest, ConcurrentAppendsAndGroupSyncs) {
  common::testing::TempDir tmp("pack_test");
  absl::StatusOr<std::unique_ptr<PackStore>> packs =
      PackStore::Open({.dir = tmp.path() + "/packs", .file_bytes = 1 << 20});
  ASSERT_EQ(packs.status(), absl::OkStatus());
  constexpr int kThreads = 4, kEach = 50;
  std::vector<std::vector<std::pair<PackRef, std::string>>> got(kThreads);
  std::vector<std::thread> threads;
  std::atomic<int> errors{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        std::string bytes = RandomBytes(1000 + 997 * i, 1000 * t + i);
        uint64_t ticket = 0;
        absl::StatusOr<PackRef> ref = (*packs)->Append(bytes, &ticket);
        if (!ref.ok() || !(*packs)->Sync(ticket).ok()) {
          ++errors;
          return;
        }
        got[t].emplace_back(*ref, std::move(bytes));
      }
    });
  }
  for (std::thread& th : threads) th.join();
  ASSERT_EQ(errors.load(), 0);
  for (const auto& list : got) {
    for (const auto& [ref, bytes] : list) {
      absl::StatusOr<std::string> back = (*packs)->Read(ref);
      ASSERT_EQ(back.status(), absl::OkStatus());
      ASSERT_TRUE(SameBytes(*back, bytes));
    }
  }
}

TEST(PackStoreTest, AppendManyWritesMoreValuesThanOneSystemCallTakes) {
  common::testing::TempDir tmp("pack_test");
  absl::StatusOr<std::unique_ptr<PackStore>> packs = PackStore::Open({.dir = tmp.path() + "/p"});
  ASSERT_EQ(packs.status(), absl::OkStatus());
  std::vector<std::string> bytes;
  for (int i = 0; i < 2500; ++i) bytes.push_back(RandomBytes(static_cast<size_t>(i % 7) * 100, i));
  std::vector<absl::string_view> views(bytes.begin(), bytes.end());
  uint64_t ticket = 0;
  absl::StatusOr<std::vector<PackRef>> refs = (*packs)->AppendMany(views, &ticket);
  ASSERT_EQ(refs.status(), absl::OkStatus());
  ASSERT_EQ(refs->size(), bytes.size());
  ASSERT_EQ((*packs)->Sync(ticket), absl::OkStatus());
  for (size_t i = 0; i < bytes.size(); ++i) {
    absl::StatusOr<std::string> got = (*packs)->Read((*refs)[i]);
    ASSERT_EQ(got.status(), absl::OkStatus());
    ASSERT_EQ(*got, bytes[i]) << "value " << i;
  }
}

// A full disk (here: the file size limit, EFBIG) is a clear error and nothing is referenced;
// what was written before still reads back. In a child process, so the limit binds nothing else.
void ExpectWriteBeyondTheFileSizeLimitRefused(bool uncached) {
  common::testing::TempDir tmp("pack_test");
  const std::string dir = tmp.path() + "/packs";
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    signal(SIGXFSZ, SIG_IGN);
    rlimit lim{.rlim_cur = 256 << 10, .rlim_max = 256 << 10};
    if (setrlimit(RLIMIT_FSIZE, &lim) != 0) _exit(10);
    absl::StatusOr<std::unique_ptr<PackStore>> packs = PackStore::Open({.dir = dir});
    if (!packs.ok()) _exit(11);
    uint64_t ticket = 0;
    auto append = [&](const std::string& bytes) {
      return uncached ? (*packs)->AppendUncached(bytes, &ticket) : (*packs)->Append(bytes, &ticket);
    };
    absl::StatusOr<PackRef> first = append(std::string(100 << 10, 'a'));
    if (!first.ok()) _exit(12);
    absl::StatusOr<PackRef> over = append(std::string(200 << 10, 'b'));
    if (over.status().code() != StatusCode::kResourceExhausted) _exit(13);
    if (over.status().message().find("write pack file") == std::string::npos) _exit(14);
    if (!(*packs)->Sync(ticket).ok()) _exit(15);
    absl::StatusOr<std::string> back = (*packs)->Read(*first);
    if (!back.ok() || *back != std::string(100 << 10, 'a')) _exit(16);
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(PackStoreTest, WriteBeyondTheFileSizeLimitIsRefused) {
  ExpectWriteBeyondTheFileSizeLimitRefused(/*uncached=*/false);
}

// Whether files in `dir` take O_DIRECT (tmpfs does not).
bool TakesDirect(const std::string& dir) {
  const std::string probe = dir + "/direct-probe";
  int fd = open(probe.c_str(), O_WRONLY | O_CREAT | O_DIRECT | O_CLOEXEC, 0600);
  if (fd >= 0) close(fd);
  unlink(probe.c_str());
  return fd >= 0;
}

// Uncached appends interleaved with ordinary ones, from several threads and across files: each
// uncached value starts on a 4 KiB boundary, no value overlaps another, and every one reads back
// exactly, after a reopen too.
TEST(PackStoreTest, UncachedAppendsInterleaveWithOrdinaryOnesAndReadBack) {
  common::testing::TempDir tmp("pack_test");
  const std::string dir = tmp.path() + "/packs";
  const bool direct = TakesDirect(tmp.path());
  constexpr int kThreads = 4, kEach = 24;
  std::vector<std::vector<std::tuple<PackRef, std::string, bool>>> got(kThreads);
  {
    absl::StatusOr<std::unique_ptr<PackStore>> packs =
        PackStore::Open({.dir = dir, .file_bytes = 3 << 20});
    ASSERT_EQ(packs.status(), absl::OkStatus());
    std::vector<std::thread> threads;
    std::atomic<int> errors{0};
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        for (int i = 0; i < kEach; ++i) {
          const bool uncached = (i + t) % 3 != 0;
          // Sizes on and off the 4 KiB grid, from one byte to past a file's size.
          const size_t size = i == 5 ? 1 : i == 6 ? 4096 : i == 7 ? (4 << 20) : 1000 + 40961 * i;
          std::string bytes = RandomBytes(size, 100 * t + i);
          uint64_t ticket = 0;
          absl::StatusOr<PackRef> ref = uncached ? (*packs)->AppendUncached(bytes, &ticket)
                                                 : (*packs)->Append(bytes, &ticket);
          if (!ref.ok() || !(*packs)->Sync(ticket).ok()) {
            ++errors;
            return;
          }
          got[t].emplace_back(*ref, std::move(bytes), uncached);
        }
      });
    }
    for (std::thread& th : threads) th.join();
    ASSERT_EQ(errors.load(), 0);
    const int uncached_count = kThreads * kEach - kThreads * kEach / 3;
    EXPECT_EQ((*packs)->direct_appends(), direct ? static_cast<uint64_t>(uncached_count) : 0u);
  }
  std::map<uint64_t, std::vector<std::pair<uint64_t, uint64_t>>> ranges;  // file -> [from, to)
  AlignedBuffer buffer;
  absl::StatusOr<std::unique_ptr<PackStore>> packs = PackStore::Open({.dir = dir});
  ASSERT_EQ(packs.status(), absl::OkStatus());
  for (const auto& list : got) {
    for (const auto& [ref, bytes, uncached] : list) {
      if (uncached) {
        EXPECT_EQ(ref.offset % kDirectAlignment, 0u);
      }
      ranges[ref.file].emplace_back(ref.offset, ref.offset + ref.size);
      absl::StatusOr<std::string> back = (*packs)->Read(ref);
      ASSERT_EQ(back.status(), absl::OkStatus());
      ASSERT_TRUE(SameBytes(*back, bytes)) << "file " << ref.file << " offset " << ref.offset;
      absl::StatusOr<absl::string_view> uncached = (*packs)->ReadUncached(ref, &buffer);
      ASSERT_EQ(uncached.status(), absl::OkStatus());
      ASSERT_TRUE(SameBytes(*uncached, bytes)) << "file " << ref.file << " offset " << ref.offset;
    }
  }
  for (auto& [file, list] : ranges) {
    std::sort(list.begin(), list.end());
    for (size_t i = 1; i < list.size(); ++i) {
      EXPECT_LE(list[i - 1].second, list[i].first) << "file " << file << ": values overlap";
    }
  }
}

// With direct writes off, uncached appends are ordinary writes, unpadded.
TEST(PackStoreTest, UncachedAppendsWithDirectWritesOffAreOrdinaryWrites) {
  common::testing::TempDir tmp("pack_test");
  absl::StatusOr<std::unique_ptr<PackStore>> packs =
      PackStore::Open({.dir = tmp.path() + "/p", .direct_writes = false});
  ASSERT_EQ(packs.status(), absl::OkStatus());
  const std::string a = RandomBytes(5000, 1), b = RandomBytes(300000, 2);
  uint64_t ticket = 0;
  absl::StatusOr<PackRef> ra = (*packs)->Append(a, &ticket);
  absl::StatusOr<PackRef> rb = (*packs)->AppendUncached(b, &ticket);
  ASSERT_TRUE(ra.ok() && rb.ok());
  ASSERT_EQ((*packs)->Sync(ticket), absl::OkStatus());
  EXPECT_EQ(rb->offset, 5000u);
  EXPECT_EQ((*packs)->direct_appends(), 0u);
  EXPECT_EQ(*(*packs)->Read(*ra), a);
  EXPECT_TRUE(SameBytes(*(*packs)->Read(*rb), b));
}

TEST(PackStoreTest, UncachedWriteBeyondTheFileSizeLimitIsRefused) {
  ExpectWriteBeyondTheFileSizeLimitRefused(/*uncached=*/true);
}

// An uncached read of a value at the very end of a file (not padded to a block) stops at the
// end of the file; one of a truncated file is DATA_LOSS, never short bytes.
TEST(PackStoreTest, UncachedReadsStopAtTheEndOfTheFileAndRefuseTruncation) {
  common::testing::TempDir tmp("pack_test");
  const std::string dir = tmp.path() + "/packs";
  const std::string a = RandomBytes(100000, 1), b = RandomBytes(5000, 2);
  PackRef ra, rb;
  {
    absl::StatusOr<std::unique_ptr<PackStore>> packs = PackStore::Open({.dir = dir});
    ASSERT_EQ(packs.status(), absl::OkStatus());
    uint64_t ticket = 0;
    ra = *(*packs)->AppendUncached(a, &ticket);
    rb = *(*packs)->Append(b, &ticket);  // ends the file, 5000 bytes into a block
    ASSERT_EQ((*packs)->Sync(ticket), absl::OkStatus());
  }
  absl::StatusOr<std::unique_ptr<PackStore>> packs = PackStore::Open({.dir = dir});
  ASSERT_EQ(packs.status(), absl::OkStatus());
  AlignedBuffer buffer;
  EXPECT_TRUE(SameBytes(*(*packs)->ReadUncached(rb, &buffer), b));
  EXPECT_TRUE(SameBytes(*(*packs)->ReadUncached(ra, &buffer), a));
  packs->reset();  // no open descriptors
  const std::vector<std::string> files = PackFiles(dir);
  ASSERT_EQ(files.size(), 1u);
  ASSERT_EQ(truncate(files[0].c_str(), static_cast<off_t>(rb.offset + 100)), 0);
  packs = PackStore::Open({.dir = dir});
  ASSERT_EQ(packs.status(), absl::OkStatus());
  absl::StatusOr<absl::string_view> cut = (*packs)->ReadUncached(rb, &buffer);
  EXPECT_EQ(cut.status().code(), StatusCode::kDataLoss) << cut.status();
  EXPECT_NE(cut.status().message().find("truncated"), std::string::npos) << cut.status();
  EXPECT_TRUE(SameBytes(*(*packs)->ReadUncached(ra, &buffer), a));
}

TEST(PackStoreTest, OpenRefusesAFileWhereTheDirectoryShouldBe) {
  common::testing::TempDir tmp("pack_test");
  const std::string path = tmp.path() + "/packs";
  std::ofstream(path) << "not a directory";
  EXPECT_FALSE(PackStore::Open({.dir = path}).ok());
}

// ---- The store's pack files ----------------------------------------------------------------

class PackedStoreTest : public StoreTest {
 protected:
  std::string PackDir() const { return dir_ + "/packs"; }
  std::string ValueOf(absl::string_view cf, absl::string_view key) {
    std::string v;
    EXPECT_TRUE(
        db_->db()->Get(rocksdb::ReadOptions(), db_->Handle(cf), storage::ToSlice(key), &v).ok());
    return v;
  }
  // Flips one byte of every pack file at `offset_in_value` past the start of `ref`.
  void FlipPackByte(const PackRef& ref, uint64_t at) {
    const std::string path = absl::StrFormat("%s/pack-%016x", PackDir(), ref.file);
    int fd = open(path.c_str(), O_RDWR);
    ASSERT_GE(fd, 0) << path;
    char c = 0;
    ASSERT_EQ(pread(fd, &c, 1, static_cast<off_t>(ref.offset + at)), 1);
    c ^= 0x20;
    ASSERT_EQ(pwrite(fd, &c, 1, static_cast<off_t>(ref.offset + at)), 1);
    close(fd);
  }
  // Puts `data` (stored whole, in a pack file), then flips its byte at `at` there.
  void PutAndFlipByte(const std::string& data, uint64_t at) {
    PutOk(data);
    std::optional<PackRef> ref =
        DecodePackRef(ValueOf("cas_data", Digest::Of(data).Key()), data.size());
    ASSERT_TRUE(ref.has_value());
    ASSERT_NO_FATAL_FAILURE(FlipPackByte(*ref, at));
  }
  // Uploads `data` (chunked, at least 4 chunks), then flips the byte in the middle of its third
  // chunk in the pack file. Sets *chunks to its chunks.
  void UploadAndDamageThirdChunk(const std::string& data, std::vector<std::string>* chunks) {
    ASSERT_EQ(UploadWhole(data).status(), absl::OkStatus());
    *chunks = ExpectedChunks(data);
    ASSERT_GT(chunks->size(), 3u);
    const std::string& third = (*chunks)[2];
    std::optional<PackRef> ref =
        DecodePackRef(ValueOf("cas_chunks", Sha256::Hash(third)), third.size());
    ASSERT_TRUE(ref.has_value());
    ASSERT_NO_FATAL_FAILURE(FlipPackByte(*ref, third.size() / 2));
  }
};

TEST_F(PackedStoreTest, LargeValuesArePackedSmallOnesAreNot) {
  const std::string small = RandomBytes(1000, 1);
  const std::string inline_large = RandomBytes(100 << 10, 2);  // packed, stored whole
  const std::string chunked = RandomBytes(1 << 20, 3);         // chunked; chunks packed
  PutOk(small);
  PutOk(inline_large);
  ASSERT_EQ(UploadWhole(chunked).status(), absl::OkStatus());

  EXPECT_EQ(ValueOf("cas_data", Digest::Of(small).Key()), small);
  std::optional<PackRef> ref =
      DecodePackRef(ValueOf("cas_data", Digest::Of(inline_large).Key()), inline_large.size());
  ASSERT_TRUE(ref.has_value());
  EXPECT_EQ(ref->size, inline_large.size());
  for (const std::string& c : ExpectedChunks(chunked)) {
    std::optional<PackRef> cref = DecodePackRef(ValueOf("cas_chunks", Sha256::Hash(c)), c.size());
    ASSERT_TRUE(cref.has_value()) << "a chunk of " << c.size() << " bytes is not packed";
  }
  ASSERT_FALSE(PackFiles(PackDir()).empty());

  ASSERT_NO_FATAL_FAILURE(Reopen());
  EXPECT_TRUE(SameBytes(ReadAllOk(Digest::Of(small)), small));
  EXPECT_TRUE(SameBytes(ReadAllOk(Digest::Of(inline_large)), inline_large));
  EXPECT_TRUE(SameBytes(ReadAllOk(Digest::Of(chunked)), chunked));
  EXPECT_TRUE(
      SameBytes(ReadRangeOk(Digest::Of(chunked), 300000, 5000), chunked.substr(300000, 5000)));
}

TEST_F(PackedStoreTest, RepeatedPutsAddNothingToThePacks) {
  const std::string data = RandomBytes(200 << 10, 4);
  PutOk(data);
  std::vector<std::string> files = PackFiles(PackDir());
  ASSERT_EQ(files.size(), 1u);
  const uintmax_t size = std::filesystem::file_size(files[0]);
  EXPECT_TRUE(PutOk(data).already_present);
  std::vector<PutItem> items{{Digest::Of(data), data}, {Digest::Of(data), data}};
  for (const auto& r : store_->PutMany(items)) {
    ASSERT_EQ(r.status(), absl::OkStatus());
    EXPECT_TRUE(r->already_present);
  }
  EXPECT_EQ(std::filesystem::file_size(files[0]), size);
}

TEST_F(PackedStoreTest, FlippedPackByteIsDataLoss) {
  const std::string data = RandomBytes(100 << 10, 5);
  const Digest d = Digest::Of(data);
  ASSERT_NO_FATAL_FAILURE(PutAndFlipByte(data, 4321));
  EXPECT_EQ(store_->ReadAll(d).status().code(), StatusCode::kDataLoss);
  int calls = 0;
  EXPECT_EQ(store_
                ->Read(d, 0, 10, 0,
                       [&](uint64_t, absl::string_view) {
                         ++calls;
                         return absl::OkStatus();
                       })
                .code(),
            StatusCode::kDataLoss);
  EXPECT_EQ(calls, 0) << "corrupt bytes were sent";
  // The scrub's repair puts verified bytes back.
  ASSERT_EQ(store_->Repair(d, data), absl::OkStatus());
  EXPECT_TRUE(SameBytes(ReadAllOk(d), data));
}

TEST_F(PackedStoreTest, FlippedChunkInAPackIsDataLossOnlyWhereItIsRead) {
  const std::string data = RandomBytes(1 << 20, 6);
  const Digest d = Digest::Of(data);
  std::vector<std::string> chunks;
  ASSERT_NO_FATAL_FAILURE(UploadAndDamageThirdChunk(data, &chunks));
  EXPECT_EQ(store_->ReadAll(d).status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(store_->ReadChunk(Sha256::Hash(chunks[2]), static_cast<uint32_t>(chunks[2].size()))
                .status()
                .code(),
            StatusCode::kDataLoss);
  EXPECT_TRUE(SameBytes(ReadRangeOk(d, 0, chunks[0].size()), chunks[0]));
}

// A reader told to skip verification passes a damaged chunk on as it is (its receiver hashes
// every byte), and Verify then finds the damage; a verifying reader refuses it.
TEST_F(PackedStoreTest, UnverifiedReadPassesDamageOnAndVerifyFindsIt) {
  // An intact object verifies.
  const std::string intact = RandomBytes(1 << 20, 17);
  ASSERT_EQ(UploadWhole(intact).status(), absl::OkStatus());
  absl::StatusOr<std::unique_ptr<ObjectReader>> clean = store_->OpenReader(Digest::Of(intact));
  ASSERT_EQ(clean.status(), absl::OkStatus());
  EXPECT_EQ((*clean)->Verify(), absl::OkStatus());

  const std::string data = RandomBytes(1 << 20, 16);
  const Digest d = Digest::Of(data);
  std::vector<std::string> chunks;
  ASSERT_NO_FATAL_FAILURE(UploadAndDamageThirdChunk(data, &chunks));

  absl::StatusOr<std::unique_ptr<ObjectReader>> reader =
      store_->OpenReader(d, ReadCheck::kUnverified);
  ASSERT_EQ(reader.status(), absl::OkStatus());
  (*reader)->BypassCache();
  std::string got;
  ASSERT_EQ((*reader)->Read(0, 0, 0,
                            [&](uint64_t, absl::string_view piece) {
                              got.append(piece.data(), piece.size());
                              return absl::OkStatus();
                            }),
            absl::OkStatus());
  ASSERT_EQ(got.size(), data.size());
  const size_t flipped = chunks[0].size() + chunks[1].size() + chunks[2].size() / 2;
  size_t differ = 0;
  for (size_t i = 0; i < data.size(); ++i) differ += got[i] != data[i] ? 1 : 0;
  EXPECT_EQ(differ, 1u);
  EXPECT_NE(got[flipped], data[flipped]);
  absl::Status verified = (*reader)->Verify();
  EXPECT_EQ(verified.code(), StatusCode::kDataLoss) << verified;
  EXPECT_NE(verified.message().find("corrupt storage"), std::string::npos) << verified;
  EXPECT_EQ(store_->ReadAll(d).status().code(), StatusCode::kDataLoss);
}

// The same for an object stored whole (below the chunking threshold): an unverified read passes
// exactly the flipped byte on, Verify and a verified read find it.
TEST_F(PackedStoreTest, UnverifiedReadOfAWholeObjectPassesDamageOnAndVerifyFindsIt) {
  const std::string intact = RandomBytes(100 << 10, 18);
  PutOk(intact);
  absl::StatusOr<std::unique_ptr<ObjectReader>> clean =
      store_->OpenReader(Digest::Of(intact), ReadCheck::kUnverified);
  ASSERT_EQ(clean.status(), absl::OkStatus());
  EXPECT_EQ((*clean)->Verify(), absl::OkStatus());

  const std::string data = RandomBytes(100 << 10, 19);
  const Digest d = Digest::Of(data);
  ASSERT_NO_FATAL_FAILURE(PutAndFlipByte(data, 4321));
  absl::StatusOr<std::string> got = store_->ReadAll(d, ReadCheck::kUnverified);
  ASSERT_EQ(got.status(), absl::OkStatus());
  ASSERT_EQ(got->size(), data.size());
  size_t differ = 0;
  for (size_t i = 0; i < data.size(); ++i) differ += (*got)[i] != data[i] ? 1 : 0;
  EXPECT_EQ(differ, 1u);
  EXPECT_NE((*got)[4321], data[4321]);
  absl::StatusOr<std::unique_ptr<ObjectReader>> reader =
      store_->OpenReader(d, ReadCheck::kUnverified);
  ASSERT_EQ(reader.status(), absl::OkStatus());
  absl::Status verified = (*reader)->Verify();
  EXPECT_EQ(verified.code(), StatusCode::kDataLoss) << verified;
  EXPECT_NE(verified.message().find("corrupt storage"), std::string::npos) << verified;
  EXPECT_EQ(store_->ReadAll(d).status().code(), StatusCode::kDataLoss);
}

// A put of one large object hashes it while its bytes are written and synced. A mismatch is
// still refused, with the content's own digest; nothing refers to the bytes written, and they are
// punched out of the pack file. The bytes under their own digest are stored; wrong bytes for an
// object already stored are refused and change nothing.
TEST_F(PackedStoreTest, ALargePutHashedBesideItsWriteRefusesAMismatchAndGivesItsBytesBack) {
  options_.chunking_threshold = 4 << 20;  // objects of 1 MiB are put whole
  ASSERT_NO_FATAL_FAILURE(Reopen());
  const std::string data = RandomBytes(1 << 20, 21), other = RandomBytes(1 << 20, 22);
  auto allocated = [&] {
    int64_t bytes = 0;
    for (const std::string& f : PackFiles(PackDir())) {
      struct stat st;
      EXPECT_EQ(stat(f.c_str(), &st), 0) << f;
      bytes += static_cast<int64_t>(st.st_blocks) * 512;
    }
    return bytes;
  };
  // Neighbours in the same pack file, written just before and just after.
  const std::string left = RandomBytes(5000, 23), right = RandomBytes(7000, 24);
  PutOk(left);
  const int64_t before = allocated();
  const Digest claimed = Digest::Of(other);
  absl::StatusOr<PutOutcome> bad = store_->Put(claimed, data);
  EXPECT_EQ(bad.status(),
            absl::InvalidArgumentError(absl::StrCat(
                "digest mismatch: claimed ", claimed.ToString(), ", content hashes to ",
                Digest::Of(data).ToString(), "; nothing stored")));
  EXPECT_EQ(store_->ReadAll(claimed).status().code(), StatusCode::kNotFound);
  EXPECT_LT(allocated() - before, 64 << 10) << "the refused bytes still take space";
  PutOk(right);
  EXPECT_EQ(PackFiles(PackDir()).size(), 1u);
  EXPECT_TRUE(SameBytes(ReadAllOk(Digest::Of(left)), left));
  EXPECT_TRUE(SameBytes(ReadAllOk(Digest::Of(right)), right));

  PutOutcome stored = PutOk(data);
  EXPECT_FALSE(stored.already_present);
  EXPECT_TRUE(SameBytes(ReadAllOk(Digest::Of(data)), data));
  EXPECT_GE(allocated() - before, 1 << 20);
  absl::StatusOr<PutOutcome> wrong = store_->Put(Digest::Of(data), other);
  EXPECT_EQ(wrong.status().code(), StatusCode::kInvalidArgument) << wrong.status();
  EXPECT_TRUE(SameBytes(ReadAllOk(Digest::Of(data)), data));
  EXPECT_EQ(store_->last_seq(), 3u);
}

// Discard punches exactly the value's range: the bytes around it are untouched, the range reads
// as zeros; a ref into a file that is gone is an error (the store then stops writing before it
// hashes).
TEST(PackStoreTest, DiscardPunchesExactlyTheValue) {
  common::testing::TempDir tmp("pack_discard");
  absl::StatusOr<std::unique_ptr<PackStore>> packs = PackStore::Open({.dir = tmp.path()});
  ASSERT_EQ(packs.status(), absl::OkStatus());
  const std::string a(5001, 'a'), b(300000, 'b'), c(7001, 'c');
  uint64_t ticket = 0;
  absl::StatusOr<std::vector<PackRef>> refs = (*packs)->AppendMany({a, b, c}, &ticket);
  ASSERT_EQ(refs.status(), absl::OkStatus());
  ASSERT_EQ((*packs)->Sync(ticket), absl::OkStatus());
  ASSERT_EQ((*packs)->Discard((*refs)[1]), absl::OkStatus());
  absl::StatusOr<std::string> got = (*packs)->Read((*refs)[0]);
  ASSERT_EQ(got.status(), absl::OkStatus());
  EXPECT_EQ(*got, a);
  got = (*packs)->Read((*refs)[2]);
  ASSERT_EQ(got.status(), absl::OkStatus());
  EXPECT_EQ(*got, c);
  got = (*packs)->Read((*refs)[1]);
  ASSERT_EQ(got.status(), absl::OkStatus());
  EXPECT_EQ(*got, std::string(b.size(), '\0'));
  PackRef gone = (*refs)[0];
  gone.file += 100;
  absl::Status missing = (*packs)->Discard(gone);
  EXPECT_EQ(missing.code(), StatusCode::kUnavailable) << missing;
  EXPECT_NE(missing.message().find("open pack file"), std::string::npos) << missing;
}

TEST_F(PackedStoreTest, TruncatedOrDeletedPackIsDataLoss) {
  const std::string a = RandomBytes(100 << 10, 7);
  PutOk(a);
  std::vector<std::string> files = PackFiles(PackDir());
  ASSERT_EQ(files.size(), 1u);
  ASSERT_NO_FATAL_FAILURE(Reopen());  // no cached descriptor of the file
  ASSERT_EQ(truncate(files[0].c_str(), 50 << 10), 0);
  absl::Status s = store_->ReadAll(Digest::Of(a)).status();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s;
  EXPECT_NE(s.message().find("truncated"), std::string::npos) << s;
  ASSERT_NO_FATAL_FAILURE(Reopen());
  ASSERT_EQ(unlink(files[0].c_str()), 0);
  s = store_->ReadAll(Digest::Of(a)).status();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s;
  EXPECT_NE(s.message().find("missing"), std::string::npos) << s;
}

// A ref that names more or fewer bytes than the object has, or points into another object's
// bytes, never yields bytes that pass as the object.
TEST_F(PackedStoreTest, ForgedRefsAreDataLoss) {
  const std::string a = RandomBytes(100 << 10, 8);
  const std::string b = RandomBytes(100 << 10, 9);
  PutOk(a);
  PutOk(b);
  const Digest da = Digest::Of(a), db = Digest::Of(b);
  std::string ref_b = ValueOf("cas_data", db.Key());
  ASSERT_NO_FATAL_FAILURE(Overwrite("cas_data", da.Key(), ref_b));  // a's key, b's bytes
  EXPECT_EQ(store_->ReadAll(da).status().code(), StatusCode::kDataLoss);
  std::optional<PackRef> r = DecodePackRef(ref_b, b.size());
  ASSERT_TRUE(r.has_value());
  r->size -= 1;
  ASSERT_NO_FATAL_FAILURE(Overwrite("cas_data", db.Key(), EncodePackRef(*r)));
  EXPECT_EQ(store_->ReadAll(db).status().code(), StatusCode::kDataLoss);
  r->size += 1;
  r->offset += 1 << 30;  // past the end of the file
  ASSERT_NO_FATAL_FAILURE(Overwrite("cas_data", db.Key(), EncodePackRef(*r)));
  EXPECT_EQ(store_->ReadAll(db).status().code(), StatusCode::kDataLoss);
  r->offset -= 1 << 30;
  r->file += 1000;  // no such file
  ASSERT_NO_FATAL_FAILURE(Overwrite("cas_data", db.Key(), EncodePackRef(*r)));
  EXPECT_EQ(store_->ReadAll(db).status().code(), StatusCode::kDataLoss);
}

// An interrupted upload keeps its packed chunks for a resume, across a reopen, also when they
// were still pending a sync step when the upload was dropped.
TEST_F(PackedStoreTest, InterruptedUploadResumesFromPackedChunks) {
  options_.pack_sync_bytes = 64 << 20;
  ASSERT_NO_FATAL_FAILURE(Reopen());
  const std::string data = RandomBytes(2 << 20, 10);
  const Digest d = Digest::Of(data);
  {
    absl::StatusOr<std::unique_ptr<Upload>> up = store_->StartUpload(d, 0);
    ASSERT_EQ(up.status(), absl::OkStatus());
    ASSERT_EQ((*up)->Append(data.substr(0, 1 << 20)), absl::OkStatus());
  }
  ASSERT_NO_FATAL_FAILURE(Reopen());
  absl::StatusOr<uint64_t> at = store_->UploadOffset(d);
  ASSERT_EQ(at.status(), absl::OkStatus());
  ASSERT_GT(*at, 0u);
  ASSERT_LE(*at, uint64_t{1} << 20);
  absl::StatusOr<std::unique_ptr<Upload>> up = store_->StartUpload(d, *at);
  ASSERT_EQ(up.status(), absl::OkStatus());
  ASSERT_EQ((*up)->Append(absl::string_view(data).substr(*at)), absl::OkStatus());
  ASSERT_EQ((*up)->Finish().status(), absl::OkStatus());
  EXPECT_TRUE(SameBytes(ReadAllOk(d), data));
}

}  // namespace
}  // namespace vault::cas
