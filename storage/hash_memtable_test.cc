// The hashed column families' memtable (hash_memtable.h), through the real RocksDB database:
// every read path (point lookups, scans both ways, seeks, snapshots, flushes) against a model.
#include "storage/hash_memtable.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/testing/temp_dir.h"
#include "gtest/gtest.h"
#include "rocksdb/comparator.h"
#include "rocksdb/db.h"
#include "rocksdb/iterator.h"
#include "rocksdb/options.h"
#include "rocksdb/slice_transform.h"
#include "rocksdb/snapshot.h"
#include "storage/database.h"

namespace vault::storage {
namespace {

using Model = std::map<std::string, std::string>;  // std::string orders bytes as unsigned

class HashMemTableTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto db =
        Database::Open({.path = tmp_.path() + "/db", .sync_writes = false, .block_cache_mb = 8},
                       {{.name = "hashed", .hashed_keys = true}});
    ASSERT_TRUE(db.ok()) << db.status();
    db_ = *std::move(db);
    cf_ = db_->Handle("hashed");
  }

  rocksdb::DB* raw() const { return db_->db(); }

  std::vector<std::pair<std::string, std::string>> Scan(const rocksdb::Snapshot* snapshot,
                                                        bool backward) const {
    rocksdb::ReadOptions ro;
    ro.total_order_seek = true;
    ro.snapshot = snapshot;
    std::unique_ptr<rocksdb::Iterator> it(raw()->NewIterator(ro, cf_));
    std::vector<std::pair<std::string, std::string>> out;
    if (backward) {
      for (it->SeekToLast(); it->Valid(); it->Prev()) {
        out.emplace_back(it->key().ToString(), it->value().ToString());
      }
    } else {
      for (it->SeekToFirst(); it->Valid(); it->Next()) {
        out.emplace_back(it->key().ToString(), it->value().ToString());
      }
    }
    EXPECT_TRUE(it->status().ok()) << it->status().ToString();
    return out;
  }

  // Checks every read path against the model.
  void Check(const Model& model, std::mt19937_64& rng, const std::vector<std::string>& keys,
             const rocksdb::Snapshot* snapshot = nullptr) const {
    const std::vector<std::pair<std::string, std::string>> want(model.begin(), model.end());
    ASSERT_EQ(Scan(snapshot, false), want);
    const std::vector<std::pair<std::string, std::string>> reversed(want.rbegin(), want.rend());
    ASSERT_EQ(Scan(snapshot, true), reversed);
    rocksdb::ReadOptions ro;
    ro.total_order_seek = true;
    ro.snapshot = snapshot;
    std::unique_ptr<rocksdb::Iterator> it(raw()->NewIterator(ro, cf_));
    for (int i = 0; i < 60; ++i) {
      std::string target = keys[rng() % keys.size()];
      if (i % 3 == 0) target.push_back(static_cast<char>(rng()));  // often not a key
      it->Seek(target);
      auto ge = model.lower_bound(target);
      ASSERT_EQ(it->Valid(), ge != model.end()) << "Seek " << i;
      if (ge != model.end()) {
        ASSERT_EQ(it->key().ToString(), ge->first);
      }
      it->SeekForPrev(target);
      auto gt = model.upper_bound(target);
      ASSERT_EQ(it->Valid(), gt != model.begin()) << "SeekForPrev " << i;
      if (gt != model.begin()) {
        ASSERT_EQ(it->key().ToString(), std::prev(gt)->first);
      }
      // Step both ways from there.
      if (it->Valid()) {
        it->Next();
        ASSERT_EQ(it->Valid(), gt != model.end());
        if (gt != model.end()) {
          ASSERT_EQ(it->key().ToString(), gt->first);
        }
      }
      const std::string& k = keys[rng() % keys.size()];
      std::string value;
      rocksdb::Status s = raw()->Get(ro, cf_, k, &value);
      auto found = model.find(k);
      ASSERT_EQ(s.ok(), found != model.end()) << s.ToString();
      if (found != model.end()) {
        ASSERT_EQ(value, found->second);
      }
    }
  }

  common::testing::TempDir tmp_{"hash_memtable_test"};
  std::unique_ptr<Database> db_;
  rocksdb::ColumnFamilyHandle* cf_ = nullptr;
};

// Keys that order the 8-byte prefixes in every way: random content keys, keys shorter than 8
// bytes, keys that are prefixes of one another, keys that share 8 bytes and differ later, and
// bytes >= 0x80 (unsigned order).
std::vector<std::string> KeyPool(std::mt19937_64& rng) {
  std::vector<std::string> keys;
  for (int i = 0; i < 200; ++i) {
    std::string k(40, '\0');
    for (char& c : k) c = static_cast<char>(rng());
    keys.push_back(k);
  }
  for (const char* k : {"a", "ab", "abc", "b", "\x7f", "\x80", "\xff", "\xff\xff"})
    keys.push_back(k);
  keys.push_back(std::string("ab\0", 3));
  keys.push_back(std::string("ab\0\0\0\0\0\0", 8));
  keys.push_back(std::string("ab\0\0\0\0\0\0\0", 9));
  for (int i = 0; i < 40; ++i) {
    std::string k = "prefix08";
    k.push_back(static_cast<char>(rng()));
    if (i % 2 == 0) k.push_back(static_cast<char>(rng()));
    keys.push_back(k);
  }
  for (int i = 0; i < 20; ++i) keys.push_back(std::string(1 + i % 7, static_cast<char>(0x80 + i)));
  return keys;
}

TEST_F(HashMemTableTest, TheHashedColumnFamiliesUseIt) {
  EXPECT_STREQ(raw()->GetOptions(cf_).memtable_factory->Name(), "VaultHashMemTableFactory");
}

TEST_F(HashMemTableTest, RandomWritesReadBackAsTheModelSaysThroughEveryPath) {
  std::mt19937_64 rng(7);
  const std::vector<std::string> keys = KeyPool(rng);
  Model model;
  const rocksdb::Snapshot* snapshot = nullptr;
  Model at_snapshot;
  for (int op = 1; op <= 12000; ++op) {
    const std::string& k = keys[rng() % keys.size()];
    if (rng() % 4 == 0) {
      ASSERT_TRUE(raw()->Delete(rocksdb::WriteOptions(), cf_, k).ok());
      model.erase(k);
    } else {
      const std::string v = absl::StrCat("v", op);
      ASSERT_TRUE(raw()->Put(rocksdb::WriteOptions(), cf_, k, v).ok());
      model[k] = v;
    }
    if (op % 1000 == 0) {
      ASSERT_NO_FATAL_FAILURE(Check(model, rng, keys));
    }
    if (op % 3000 == 0) {
      // Part of the data moves to an SST file; the memtable that follows overlays it.
      ASSERT_TRUE(raw()->Flush(rocksdb::FlushOptions(), cf_).ok());
      ASSERT_NO_FATAL_FAILURE(Check(model, rng, keys));
    }
    if (op == 4500) {
      snapshot = raw()->GetSnapshot();
      at_snapshot = model;
    }
  }
  ASSERT_NO_FATAL_FAILURE(Check(at_snapshot, rng, keys, snapshot));
  raw()->ReleaseSnapshot(snapshot);
  ASSERT_TRUE(raw()->Flush(rocksdb::FlushOptions(), cf_).ok());
  ASSERT_NO_FATAL_FAILURE(Check(model, rng, keys));
}

TEST_F(HashMemTableTest, ManyVersionsOfOneKeyReadAsTheNewest) {
  // One key rewritten thousands of times (like the store's totals record) between others.
  for (int i = 0; i < 5000; ++i) {
    ASSERT_TRUE(raw()->Put(rocksdb::WriteOptions(), cf_, "totals", absl::StrCat(i)).ok());
    ASSERT_TRUE(raw()->Put(rocksdb::WriteOptions(), cf_, absl::StrCat("k", i), "x").ok());
  }
  std::string value;
  ASSERT_TRUE(raw()->Get(rocksdb::ReadOptions(), cf_, "totals", &value).ok());
  EXPECT_EQ(value, "4999");
  rocksdb::ReadOptions ro;
  ro.total_order_seek = true;
  std::unique_ptr<rocksdb::Iterator> it(raw()->NewIterator(ro, cf_));
  it->Seek("totals");
  ASSERT_TRUE(it->Valid());
  EXPECT_EQ(it->key().ToString(), "totals");
  EXPECT_EQ(it->value().ToString(), "4999");
  it->Next();
  EXPECT_FALSE(it->Valid());
  it->SeekToLast();
  ASSERT_TRUE(it->Valid());
  EXPECT_EQ(it->key().ToString(), "totals");
  it->Prev();
  ASSERT_TRUE(it->Valid());
  EXPECT_EQ(it->key().ToString(), "k999");  // "k999" is the largest "k..." key
}

std::string ContentKey(int i) {
  std::string k(40, '\0');
  std::mt19937_64 r(static_cast<uint64_t>(i));
  for (char& c : k) c = static_cast<char>(r());
  return k;
}

TEST_F(HashMemTableTest, ScansWhileWritingSeeEveryEarlierWriteInOrder) {
  // Several writers, so that RocksDB's write groups batch them while the readers scan.
  constexpr int kWriters = 3;
  constexpr int kWrites = 8000;  // each
  auto key = [](int writer, int i) { return ContentKey(writer * kWrites + i); };
  std::atomic<int> acknowledged[kWriters];
  for (auto& a : acknowledged) a.store(0);
  std::vector<std::thread> writers;
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&, w] {
      for (int i = 0; i < kWrites; ++i) {
        if (!raw()->Put(rocksdb::WriteOptions(), cf_, key(w, i), absl::StrCat(i)).ok()) return;
        acknowledged[w].store(i + 1, std::memory_order_release);
      }
    });
  }
  auto done = [&] {
    for (auto& a : acknowledged) {
      if (a.load(std::memory_order_acquire) < kWrites) return false;
    }
    return true;
  };
  auto reader = [&](std::atomic<int>* failures) {
    while (!done()) {
      int before = 0;
      int last_of[kWriters];
      for (int w = 0; w < kWriters; ++w) {
        last_of[w] = acknowledged[w].load(std::memory_order_acquire);
        before += last_of[w];
      }
      rocksdb::ReadOptions ro;
      ro.total_order_seek = true;
      std::unique_ptr<rocksdb::Iterator> it(raw()->NewIterator(ro, cf_));
      int count = 0;
      std::string last;
      for (it->SeekToFirst(); it->Valid(); it->Next()) {
        if (count > 0 && !(last < it->key().ToString())) ++*failures;
        last = it->key().ToString();
        ++count;
      }
      if (count < before) ++*failures;
      for (int w = 0; w < kWriters; ++w) {
        if (last_of[w] == 0) continue;
        std::string value;
        if (!raw()->Get(rocksdb::ReadOptions(), cf_, key(w, last_of[w] - 1), &value).ok() ||
            value != absl::StrCat(last_of[w] - 1)) {
          ++*failures;
        }
      }
    }
  };
  std::atomic<int> failures{0};
  std::thread r1(reader, &failures);
  std::thread r2(reader, &failures);
  for (std::thread& t : writers) t.join();
  r1.join();
  r2.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(Scan(nullptr, false).size(), static_cast<size_t>(kWriters * kWrites));
}

TEST_F(HashMemTableTest, AMemtableWaitingForItsFlushIsScannedWhileTheNextTakesWrites) {
  for (int i = 0; i < 3000; ++i) {
    ASSERT_TRUE(raw()->Put(rocksdb::WriteOptions(), cf_, ContentKey(i), "old").ok());
  }
  ASSERT_TRUE(raw()->PauseBackgroundWork().ok());
  rocksdb::FlushOptions no_wait;
  no_wait.wait = false;
  no_wait.allow_write_stall = true;
  ASSERT_TRUE(raw()->Flush(no_wait, cf_).ok());  // the memtable is now immutable, not flushed
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    for (int i = 3000; i < 6000 && !stop.load(); ++i) {
      if (!raw()->Put(rocksdb::WriteOptions(), cf_, ContentKey(i), "new").ok()) return;
    }
  });
  // Scans of the immutable memtable share one sort: each sees all 3,000 of its entries.
  rocksdb::ReadOptions ro;
  ro.total_order_seek = true;
  std::unique_ptr<rocksdb::Iterator> held(raw()->NewIterator(ro, cf_));
  for (int round = 0; round < 5; ++round) {
    std::unique_ptr<rocksdb::Iterator> it(raw()->NewIterator(ro, cf_));
    int old_values = 0;
    std::string last;
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      ASSERT_LT(last, it->key().ToString());
      last = it->key().ToString();
      if (it->value() == "old") ++old_values;
    }
    EXPECT_EQ(old_values, 3000);
  }
  writer.join();
  // An iterator kept across the flush still reads what it read.
  ASSERT_TRUE(raw()->ContinueBackgroundWork().ok());
  ASSERT_TRUE(raw()->Flush(rocksdb::FlushOptions(), cf_).ok());
  int seen = 0;
  for (held->SeekToFirst(); held->Valid(); held->Next()) ++seen;
  EXPECT_GE(seen, 3000);
  held.reset();
  EXPECT_EQ(Scan(nullptr, false).size(), 6000u);
}

TEST_F(HashMemTableTest, APinnedTailingIteratorOutlivesTheMemtablesItRead) {
  // RocksDB releases a pinned iterator's old memtable iterators after the memtables themselves:
  // their storage must not belong to the memtable (run under ASan, this is a use after free).
  rocksdb::ReadOptions ro;
  ro.tailing = true;
  ro.pin_data = true;
  ro.total_order_seek = true;
  for (int round = 0; round < 20; ++round) {
    std::unique_ptr<rocksdb::Iterator> it(raw()->NewIterator(ro, cf_));
    it->Seek("");
    ASSERT_TRUE(raw()->Put(rocksdb::WriteOptions(), cf_, ContentKey(round), "a").ok());
    ASSERT_TRUE(raw()->Flush(rocksdb::FlushOptions(), cf_).ok());
    it->Seek("");
    ASSERT_TRUE(it->Valid());
    ASSERT_TRUE(raw()->Put(rocksdb::WriteOptions(), cf_, ContentKey(1000 + round), "b").ok());
    ASSERT_TRUE(raw()->Flush(rocksdb::FlushOptions(), cf_).ok());
    it.reset();
  }
  EXPECT_EQ(Scan(nullptr, false).size(), 40u);
}

// A RocksDB database with the memtable and nothing else of ours.
class RawDb {
 public:
  RawDb(const std::string& path, size_t log_capacity, const rocksdb::Comparator* comparator) {
    rocksdb::Options options;
    options.create_if_missing = true;
    options.allow_concurrent_memtable_write = false;
    options.prefix_extractor.reset(rocksdb::NewCappedPrefixTransform(8));
    options.memtable_factory.reset(NewHashMemTableFactory(1 << 10, log_capacity));
    options.comparator = comparator;
    rocksdb::DB* db = nullptr;
    status_ = rocksdb::DB::Open(options, path, &db);
    db_.reset(db);
  }
  const rocksdb::Status& status() const { return status_; }
  rocksdb::DB* db() const { return db_.get(); }
  std::vector<std::string> Keys() const {
    rocksdb::ReadOptions ro;
    ro.total_order_seek = true;
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro));
    std::vector<std::string> out;
    for (it->SeekToFirst(); it->Valid(); it->Next()) out.push_back(it->key().ToString());
    return out;
  }

 private:
  rocksdb::Status status_;
  std::unique_ptr<rocksdb::DB> db_;
};

TEST(HashMemTableLimits, AMemtableWithMoreEntriesThanItsLogScansInOrderAllTheSame) {
  common::testing::TempDir tmp("hash_memtable_test");
  RawDb db(tmp.path() + "/db", /*log_capacity=*/1, rocksdb::BytewiseComparator());
  ASSERT_TRUE(db.status().ok()) << db.status().ToString();
  Model model;
  for (int i = 0; i < 20000; ++i) {  // the log holds 16,384
    ASSERT_TRUE(db.db()->Put(rocksdb::WriteOptions(), ContentKey(i), "v").ok());
    model[ContentKey(i)] = "v";
  }
  std::vector<std::string> want;
  for (const auto& [k, v] : model) want.push_back(k);
  EXPECT_EQ(db.Keys(), want);
}

TEST(HashMemTableLimits, AnotherComparatorsOrderIsKept) {
  common::testing::TempDir tmp("hash_memtable_test");
  RawDb db(tmp.path() + "/db", size_t{1} << 20, rocksdb::ReverseBytewiseComparator());
  ASSERT_TRUE(db.status().ok()) << db.status().ToString();
  std::vector<std::string> want;
  for (const char* k : {"\x01\xff", "\x02", "\x80", "ab", "abc", "b"}) {
    ASSERT_TRUE(db.db()->Put(rocksdb::WriteOptions(), k, "v").ok());
    want.push_back(k);
  }
  std::sort(want.rbegin(), want.rend());
  EXPECT_EQ(db.Keys(), want);
}

}  // namespace
}  // namespace vault::storage
