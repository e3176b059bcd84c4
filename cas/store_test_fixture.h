// Shared fixture of the cas/ store tests (store_test.cc, upload_test.cc, read_test.cc): a real
// Database and Store in a fresh directory, with small chunking options so tests are fast.
#ifndef VAULT_CAS_STORE_TEST_FIXTURE_H_
#define VAULT_CAS_STORE_TEST_FIXTURE_H_

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "cas/store.h"
#include "common/testing/temp_dir.h"
#include "gtest/gtest.h"
#include "rocksdb/iterator.h"
#include "storage/database.h"
#include "vault/v1/cas_records.pb.h"

namespace vault::cas {
namespace {

using ::absl::StatusCode;

constexpr size_t kAvg = 64 << 10;         // chunks of (16 KiB, 256 KiB]
constexpr size_t kThreshold = 256 << 10;  // objects this large are chunked

inline std::string RandomBytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string out(n, '\0');
  for (size_t i = 0; i < n; ++i) {
    if (i % 8 == 0) {
      uint64_t v = rng();
      for (size_t b = 0; b < 8 && i + b < n; ++b) out[i + b] = static_cast<char>(v >> (8 * b));
    }
  }
  return out;
}

// The chunks the store is expected to make of `data`.
inline std::vector<std::string> ExpectedChunks(absl::string_view data) {
  absl::StatusOr<ChunkerParams> params = ChunkerParams::ForAverage(kAvg);
  EXPECT_EQ(params.status(), absl::OkStatus());
  std::vector<std::string> chunks;
  for (absl::string_view rest = data; !rest.empty();) {
    size_t cut = FindBoundary(rest, *params);
    chunks.emplace_back(rest.substr(0, cut));
    rest.remove_prefix(cut);
  }
  return chunks;
}

// Offsets at which a chunk ends.
inline absl::flat_hash_set<uint64_t> ChunkEnds(absl::string_view data) {
  absl::flat_hash_set<uint64_t> ends;
  uint64_t at = 0;
  for (const std::string& c : ExpectedChunks(data)) ends.insert(at += c.size());
  return ends;
}

// Compares byte strings without printing megabytes on a mismatch.
[[maybe_unused]] ::testing::AssertionResult SameBytes(absl::string_view got,
                                                      absl::string_view want) {
  if (got == want) return ::testing::AssertionSuccess();
  size_t at = 0;
  while (at < got.size() && at < want.size() && got[at] == want[at]) ++at;
  return ::testing::AssertionFailure() << "got " << got.size() << " bytes, want " << want.size()
                                       << "; first difference at offset " << at;
}

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = tmp_.path();
    options_.chunk_avg_bytes = kAvg;
    options_.chunking_threshold = kThreshold;
    // As vaultd runs it: large values in pack files. Small sync steps so uploads in these tests
    // make their chunks durable as often as before.
    options_.pack_dir = dir_ + "/packs";
    options_.pack_min_bytes = 4 << 10;
    options_.pack_sync_bytes = 1;
    ASSERT_NO_FATAL_FAILURE(Open());
  }
  void TearDown() override {
    store_.reset();
    db_.reset();
  }

  // The database's column families (a test of something beside the store adds its own).
  virtual std::vector<storage::ColumnFamilySpec> Families() { return Store::ColumnFamilies(); }
  // Off by default (faster); on, the pack files are synced too (PackOptions::sync).
  bool sync_writes_ = false;

  void Open() {
    absl::StatusOr<std::unique_ptr<storage::Database>> db = storage::Database::Open(
        {.path = dir_ + "/db", .sync_writes = sync_writes_, .block_cache_mb = 8}, Families());
    ASSERT_EQ(db.status(), absl::OkStatus());
    db_ = std::move(*db);
    absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(db_.get(), options_);
    ASSERT_EQ(store.status(), absl::OkStatus());
    store_ = std::move(*store);
  }
  // Closes the store and the database and opens both again.
  void Reopen() {
    store_.reset();
    db_.reset();
    ASSERT_NO_FATAL_FAILURE(Open());
  }

  PutOutcome PutOk(absl::string_view data) {
    absl::StatusOr<PutOutcome> out = store_->Put(Digest::Of(data), data);
    EXPECT_EQ(out.status(), absl::OkStatus());
    return out.ok() ? *out : PutOutcome{};
  }

  // Streams data[offset, end) into an upload in pieces cycling through `pieces`.
  static absl::Status AppendInPieces(Upload* upload, absl::string_view data, uint64_t offset,
                                     uint64_t end, const std::vector<size_t>& pieces) {
    size_t k = 0;
    for (uint64_t at = offset; at < end; ++k) {
      size_t n = std::min<uint64_t>(pieces[k % pieces.size()], end - at);
      absl::Status s = upload->Append(data.substr(at, n));
      if (!s.ok()) return s;
      at += n;
    }
    return absl::OkStatus();
  }

  absl::StatusOr<PutOutcome> UploadWhole(absl::string_view data,
                                         const std::vector<size_t>& pieces = {100000}) {
    absl::StatusOr<std::unique_ptr<Upload>> up = store_->StartUpload(Digest::Of(data), 0);
    if (!up.ok()) return up.status();
    absl::Status s = AppendInPieces(up->get(), data, 0, data.size(), pieces);
    if (!s.ok()) return s;
    return (*up)->Finish();
  }

  std::string ReadAllOk(const Digest& d) {
    absl::StatusOr<std::string> back = store_->ReadAll(d);
    EXPECT_EQ(back.status(), absl::OkStatus());
    return back.ok() ? *back : "";
  }

  // Bytes [offset, offset + limit) as Read streams them, checking each piece's offset.
  absl::StatusOr<std::string> ReadRange(const Digest& d, uint64_t offset, uint64_t limit,
                                        size_t piece_bytes = 1 << 20) {
    std::string out;
    bool offsets_ok = true;
    absl::Status s =
        store_->Read(d, offset, limit, piece_bytes, [&](uint64_t at, absl::string_view piece) {
          if (at != offset + out.size()) offsets_ok = false;
          if (piece.size() > piece_bytes || piece.empty()) {
            offsets_ok = false;
          }
          out.append(piece.data(), piece.size());
          return absl::OkStatus();
        });
    EXPECT_TRUE(offsets_ok) << "pieces out of order, empty or too large";
    if (!s.ok()) return s;
    return out;
  }

  std::string ReadRangeOk(const Digest& d, uint64_t offset, uint64_t limit,
                          size_t piece_bytes = 1 << 20) {
    absl::StatusOr<std::string> got = ReadRange(d, offset, limit, piece_bytes);
    EXPECT_EQ(got.status(), absl::OkStatus()) << "offset " << offset << " limit " << limit;
    return got.ok() ? *got : "<error>";
  }

  // The content-keyed column families have hash memtables: a full scan needs total order.
  static rocksdb::ReadOptions TotalOrder() {
    rocksdb::ReadOptions ro;
    ro.total_order_seek = true;
    return ro;
  }

  size_t CountRows(absl::string_view cf) const {
    std::unique_ptr<rocksdb::Iterator> it(db_->db()->NewIterator(TotalOrder(), db_->Handle(cf)));
    size_t n = 0;
    for (it->SeekToFirst(); it->Valid(); it->Next()) ++n;
    EXPECT_TRUE(it->status().ok());
    return n;
  }

  std::vector<uint64_t> FeedSeqs() const {
    absl::StatusOr<std::vector<FeedItem>> feed = store_->ReadFeed(0, 0);
    EXPECT_EQ(feed.status(), absl::OkStatus());
    std::vector<uint64_t> seqs;
    if (feed.ok()) {
      for (const FeedItem& item : *feed) seqs.push_back(item.seq);
    }
    return seqs;
  }

  static std::vector<uint64_t> Range(uint64_t first, uint64_t last) {
    std::vector<uint64_t> out;
    for (uint64_t s = first; s <= last; ++s) out.push_back(s);
    return out;
  }

  // Replaces a stored value directly in RocksDB, bypassing the store.
  void Overwrite(absl::string_view cf, absl::string_view key, absl::string_view value) {
    ASSERT_TRUE(db_->db()
                    ->Put(rocksdb::WriteOptions(), db_->Handle(cf), storage::ToSlice(key),
                          storage::ToSlice(value))
                    .ok());
  }

  common::testing::TempDir tmp_{"store_test"};
  std::string dir_;
  StoreOptions options_;
  std::unique_ptr<storage::Database> db_;
  std::unique_ptr<Store> store_;
};

}  // namespace
}  // namespace vault::cas

#endif  // VAULT_CAS_STORE_TEST_FIXTURE_H_
