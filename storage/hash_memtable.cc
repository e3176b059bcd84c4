#include "storage/hash_memtable.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "rocksdb/slice.h"

namespace vault::storage {
namespace {

using rocksdb::MemTableRep;
using rocksdb::Slice;
using Entries = std::vector<const char*>;

// The memtable's entries in insertion order: appended by the one writer, read by any thread.
// Entries [0, size()) are complete once size() has returned them.
class EntryLog {
 public:
  static constexpr size_t kChunkBits = 14;
  static constexpr size_t kChunk = size_t{1} << kChunkBits;

  explicit EntryLog(size_t max_chunks)
      : max_chunks_(max_chunks), chunks_(new std::atomic<const char**>[max_chunks]) {
    for (size_t i = 0; i < max_chunks_; ++i) chunks_[i].store(nullptr, std::memory_order_relaxed);
  }
  ~EntryLog() {
    for (size_t i = 0; i < max_chunks_; ++i) delete[] chunks_[i].load(std::memory_order_relaxed);
  }
  EntryLog(const EntryLog&) = delete;
  EntryLog& operator=(const EntryLog&) = delete;

  // False when the log is full (max_chunks * kChunk entries).
  bool Append(const char* entry) {
    const size_t n = size_.load(std::memory_order_relaxed);
    const size_t c = n >> kChunkBits;
    if (c >= max_chunks_) return false;
    const char** chunk = chunks_[c].load(std::memory_order_relaxed);
    if (chunk == nullptr) {
      chunk = new const char*[kChunk];
      chunks_[c].store(chunk, std::memory_order_release);
      bytes_.fetch_add(kChunk * sizeof(const char*), std::memory_order_relaxed);
    }
    chunk[n & (kChunk - 1)] = entry;
    size_.store(n + 1, std::memory_order_release);
    return true;
  }

  // Calls f on entries [0, size()) as of the call, in insertion order.
  template <typename F>
  size_t ForEach(F f) const {
    const size_t n = size_.load(std::memory_order_acquire);
    for (size_t c = 0; c * kChunk < n; ++c) {
      const char* const* chunk = chunks_[c].load(std::memory_order_acquire);
      const size_t end = std::min(kChunk, n - c * kChunk);
      for (size_t i = 0; i < end; ++i) f(chunk[i]);
    }
    return n;
  }

  size_t size() const { return size_.load(std::memory_order_acquire); }
  size_t MemoryUsage() const {
    return max_chunks_ * sizeof(std::atomic<const char**>) + bytes_.load(std::memory_order_relaxed);
  }

 private:
  const size_t max_chunks_;
  std::unique_ptr<std::atomic<const char**>[]> chunks_;
  std::atomic<size_t> size_{0};
  std::atomic<size_t> bytes_{0};
};

// The first 8 bytes of an entry's user key, big-endian, zero-padded. For the bytewise comparator
// a smaller prefix means a smaller key; equal prefixes decide nothing.
uint64_t Prefix(const char* entry) {
  const Slice internal_key = rocksdb::GetLengthPrefixedSlice(entry);
  const size_t user = internal_key.size() >= 8 ? internal_key.size() - 8 : 0;
  const auto* p = reinterpret_cast<const unsigned char*>(internal_key.data());
  uint64_t out = 0;
  for (size_t i = 0; i < 8; ++i) out = (out << 8) | (i < user ? p[i] : 0);
  return out;
}

// The storage of the last iterator destroyed "in an arena" on this thread (see GetIterator).
struct Grave {
  Grave() = default;
  Grave(const Grave&) = delete;
  Grave& operator=(const Grave&) = delete;
  ~Grave() { ::operator delete(body); }
  void* body = nullptr;
};
thread_local Grave grave;

// A scan over a sorted copy of the entries.
class SortedIterator final : public MemTableRep::Iterator {
 public:
  SortedIterator(std::shared_ptr<const Entries> entries, const MemTableRep::KeyComparator& compare,
                 bool in_arena)
      : entries_(std::move(entries)),
        compare_(compare),
        in_arena_(in_arena),
        pos_(entries_->size()) {}
  SortedIterator(const SortedIterator&) = delete;
  SortedIterator& operator=(const SortedIterator&) = delete;

  // RocksDB destroys an iterator it placed in an arena in place and frees the arena, which this
  // one is not in: its storage is freed here, by the next such destruction on the same thread
  // (this one is over by then) or when the thread exits. It may outlive the memtable it scanned
  // (a pinned iterator is released after the memtable), so nothing of the memtable frees it.
  ~SortedIterator() override {
    if (in_arena_) ::operator delete(std::exchange(grave.body, static_cast<void*>(this)));
  }

  bool Valid() const override { return pos_ < entries_->size(); }
  const char* key() const override { return (*entries_)[pos_]; }
  void Next() override { ++pos_; }
  void Prev() override { pos_ = pos_ == 0 ? entries_->size() : pos_ - 1; }
  void Seek(const Slice& internal_key, const char* memtable_key) override {
    pos_ = static_cast<size_t>(
        std::partition_point(
            entries_->begin(), entries_->end(),
            [&](const char* e) { return Compare(e, internal_key, memtable_key) < 0; }) -
        entries_->begin());
  }
  void SeekForPrev(const Slice& internal_key, const char* memtable_key) override {
    const size_t after = static_cast<size_t>(
        std::partition_point(
            entries_->begin(), entries_->end(),
            [&](const char* e) { return Compare(e, internal_key, memtable_key) <= 0; }) -
        entries_->begin());
    pos_ = after == 0 ? entries_->size() : after - 1;
  }
  void SeekToFirst() override { pos_ = 0; }
  void SeekToLast() override { pos_ = entries_->empty() ? 0 : entries_->size() - 1; }

 private:
  int Compare(const char* entry, const Slice& internal_key, const char* memtable_key) const {
    return memtable_key != nullptr ? compare_(entry, memtable_key) : compare_(entry, internal_key);
  }

  const std::shared_ptr<const Entries> entries_;
  const MemTableRep::KeyComparator& compare_;
  const bool in_arena_;
  size_t pos_;
};

class HashMemTable final : public MemTableRep {
 public:
  HashMemTable(std::unique_ptr<MemTableRep> inner, const KeyComparator& compare,
               rocksdb::Allocator* allocator, size_t log_capacity)
      : MemTableRep(allocator),
        inner_(std::move(inner)),
        compare_(compare),
        log_((log_capacity + EntryLog::kChunk - 1) / EntryLog::kChunk) {}

  rocksdb::KeyHandle Allocate(const size_t len, char** buf) override {
    return inner_->Allocate(len, buf);
  }
  void Insert(rocksdb::KeyHandle handle) override {
    inner_->Insert(handle);
    Log(handle);
  }
  bool InsertKey(rocksdb::KeyHandle handle) override {
    if (!inner_->InsertKey(handle)) return false;
    Log(handle);
    return true;
  }
  bool Contains(const char* key) const override { return inner_->Contains(key); }
  void MarkReadOnly() override {
    inner_->MarkReadOnly();
    read_only_.store(true, std::memory_order_release);
  }
  void MarkFlushed() override { inner_->MarkFlushed(); }
  void Get(const rocksdb::LookupKey& k, void* callback_args,
           bool (*callback_func)(void* arg, const char* entry)) override {
    inner_->Get(k, callback_args, callback_func);
  }
  uint64_t ApproximateNumEntries(const Slice& start_ikey, const Slice& end_ikey) override {
    return inner_->ApproximateNumEntries(start_ikey, end_ikey);
  }
  // RocksDB requires the figure to stay as it is once the memtable takes no more writes, and
  // counts it before telling the memtable so: it includes the sorted copy made after that from
  // the start, whether or not it is ever made.
  size_t ApproximateMemoryUsage() override {
    return inner_->ApproximateMemoryUsage() + log_.MemoryUsage() +
           log_.size() * sizeof(const char*);
  }
  bool IsMergeOperatorSupported() const override { return inner_->IsMergeOperatorSupported(); }
  bool IsSnapshotSupported() const override { return inner_->IsSnapshotSupported(); }

  // Point lookups within one bucket: the hash skiplists' own.
  Iterator* GetDynamicPrefixIterator(rocksdb::Arena* arena) override {
    return inner_->GetDynamicPrefixIterator(arena);
  }

  Iterator* GetIterator(rocksdb::Arena* arena) override {
    if (overflowed_.load(std::memory_order_acquire)) return inner_->GetIterator(arena);
    std::shared_ptr<const Entries> entries =
        read_only_.load(std::memory_order_acquire) ? SortedOnce() : Sorted();
    if (arena == nullptr) return new SortedIterator(std::move(entries), compare_, false);
    // rocksdb::Arena is not a public type: the iterator is not placed in it (see ~SortedIterator).
    return new (::operator new(sizeof(SortedIterator)))
        SortedIterator(std::move(entries), compare_, true);
  }

 private:
  void Log(rocksdb::KeyHandle handle) {
    if (!log_.Append(static_cast<const char*>(handle))) {
      overflowed_.store(true, std::memory_order_release);
    }
  }

  std::shared_ptr<const Entries> Sorted() const {
    std::vector<std::pair<uint64_t, const char*>> keyed;
    keyed.reserve(log_.size());
    log_.ForEach([&](const char* e) { keyed.emplace_back(Prefix(e), e); });
    std::sort(keyed.begin(), keyed.end(),
              [this](const std::pair<uint64_t, const char*>& a,
                     const std::pair<uint64_t, const char*>& b) {
                if (a.first != b.first) return a.first < b.first;
                return compare_(a.second, b.second) < 0;
              });
    auto out = std::make_shared<Entries>();
    out->reserve(keyed.size());
    for (const auto& k : keyed) out->push_back(k.second);
    return out;
  }

  // A memtable that takes no more writes is sorted once.
  std::shared_ptr<const Entries> SortedOnce() {
    absl::MutexLock lock(&sort_mu_);
    if (sorted_ == nullptr) sorted_ = Sorted();
    return sorted_;
  }

  const std::unique_ptr<MemTableRep> inner_;
  const KeyComparator& compare_;
  EntryLog log_;
  std::atomic<bool> overflowed_{false};
  std::atomic<bool> read_only_{false};
  absl::Mutex sort_mu_;
  std::shared_ptr<const Entries> sorted_ ABSL_GUARDED_BY(sort_mu_);
};

// An entry as RocksDB lays it out in a memtable, for `user_key` at sequence 1: varint32 length,
// user key, 8-byte sequence and type (a put).
std::string Entry(const std::string& user_key) {
  std::string out;
  out.push_back(static_cast<char>(user_key.size() + 8));  // < 128: one varint byte
  out += user_key;
  const uint64_t tag = (uint64_t{1} << 8) | 1;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>(tag >> (8 * i)));
  return out;
}

// Whether the memtable's comparator orders user keys bytewise, as Prefix() assumes.
bool Bytewise(const MemTableRep::KeyComparator& compare) {
  const std::string a = Entry("\x01\xff"), b = Entry("\x02"), c = Entry("\x80");
  return compare(a.data(), b.data()) < 0 && compare(b.data(), c.data()) < 0;
}

class HashMemTableFactory final : public rocksdb::MemTableRepFactory {
 public:
  HashMemTableFactory(size_t bucket_count, size_t log_capacity)
      : inner_(rocksdb::NewHashSkipListRepFactory(bucket_count)), log_capacity_(log_capacity) {}

  const char* Name() const override { return "VaultHashMemTableFactory"; }

  using MemTableRepFactory::CreateMemTableRep;
  MemTableRep* CreateMemTableRep(const MemTableRep::KeyComparator& compare,
                                 rocksdb::Allocator* allocator,
                                 const rocksdb::SliceTransform* transform,
                                 rocksdb::Logger* logger) override {
    std::unique_ptr<MemTableRep> inner(
        inner_->CreateMemTableRep(compare, allocator, transform, logger));
    // Another order: RocksDB's own hash memtable, slow scans and all.
    if (!Bytewise(compare)) return inner.release();
    return new HashMemTable(std::move(inner), compare, allocator, log_capacity_);
  }

 private:
  const std::unique_ptr<rocksdb::MemTableRepFactory> inner_;
  const size_t log_capacity_;
};

}  // namespace

rocksdb::MemTableRepFactory* NewHashMemTableFactory(size_t bucket_count, size_t log_capacity) {
  return new HashMemTableFactory(bucket_count, log_capacity);
}

}  // namespace vault::storage
