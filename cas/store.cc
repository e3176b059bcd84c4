#include "cas/store.h"

#include <sys/statvfs.h>

#include <algorithm>
#include <future>
#include <optional>
#include <system_error>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "rocksdb/iterator.h"
#include "rocksdb/write_batch.h"
#include "storage/keys.h"
#include "vault/v1/cas_records.pb.h"

namespace vault::cas {
namespace {

constexpr char kMeta[] = "cas_meta";
constexpr char kData[] = "cas_data";
constexpr char kChunks[] = "cas_chunks";
constexpr char kChunkIndex[] = "cas_chunk_index";
constexpr char kUploads[] = "cas_uploads";
constexpr char kFeed[] = "cas_feed";
constexpr absl::string_view kTotalsKey("\0stats", 6);
// A put of one object at least this large hashes it on a helper thread while its bytes are
// written to a pack file and synced (PutMany).
constexpr size_t kHashBesideWriteBytes = 256 << 10;

absl::Status DigestMismatch(const Digest& claimed, absl::string_view actual_sha256) {
  absl::StatusOr<Digest> actual = Digest::FromParts(actual_sha256, claimed.size());
  return absl::InvalidArgumentError(
      absl::StrCat("digest mismatch: claimed ", claimed.ToString(), ", content hashes to ",
                   actual.ok() ? actual->ToString() : "?", "; nothing stored"));
}

using storage::BigEndian64;
using storage::ParseBigEndian64;

int64_t NowMs() { return absl::ToUnixMillis(absl::Now()); }

}  // namespace

std::vector<storage::ColumnFamilySpec> Store::ColumnFamilies() {
  return {
      {.name = kMeta, .hashed_keys = true},
      // Key-value separation from 2 KiB: compaction then moves small index entries, not bytes.
      {.name = kData, .blob_min_bytes = 2 << 10, .compress = false, .hashed_keys = true},
      {.name = kChunks, .blob_min_bytes = 2 << 10, .compress = false, .hashed_keys = true},
      {.name = kChunkIndex, .hashed_keys = true},
      {.name = kUploads},
      {.name = kFeed, .point_lookups = false},
  };
}

Store::Store(storage::Database* db, const StoreOptions& options, ChunkerParams chunker)
    : db_(db),
      options_(options),
      chunker_params_(chunker),
      meta_(db->Handle(kMeta)),
      data_(db->Handle(kData)),
      chunks_(db->Handle(kChunks)),
      chunk_index_(db->Handle(kChunkIndex)),
      uploads_(db->Handle(kUploads)),
      feed_(db->Handle(kFeed)) {
  committer_ = std::make_unique<storage::GroupCommitter<CommitOp>>(
      db, storage::GroupCommitter<CommitOp>::Hooks{
              .prepare = [this](absl::Span<CommitOp* const> ops,
                                rocksdb::WriteBatch* batch) { return PrepareGroup(ops, batch); },
              .finish = [this](absl::Span<CommitOp* const> ops,
                               const absl::Status& written) { FinishGroup(ops, written); }});
}

Store::~Store() { Close(); }

absl::StatusOr<std::unique_ptr<Store>> Store::Open(storage::Database* db,
                                                   const StoreOptions& options) {
  VAULT_ASSIGN_OR_RETURN(ChunkerParams chunker, ChunkerParams::ForAverage(options.chunk_avg_bytes));
  if (options.chunking_threshold < chunker.max_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunking threshold ", options.chunking_threshold,
                     " is below the largest chunk (", chunker.max_size, ")"));
  }
  if (!options.pack_dir.empty() && options.pack_min_bytes <= kPackRefBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("pack_min_bytes ", options.pack_min_bytes, " must be above ", kPackRefBytes));
  }
  std::unique_ptr<Store> store(new Store(db, options, chunker));
  if (!options.pack_dir.empty()) {
    VAULT_ASSIGN_OR_RETURN(store->packs_,
                           PackStore::Open({.dir = options.pack_dir,
                                            .env = options.env,
                                            .sync = db->options().sync_writes,
                                            .direct_writes = options.direct_chunk_writes}));
  }
  VAULT_RETURN_IF_ERROR(store->Recover());
  return store;
}

absl::Status Store::Recover() {
  // The newest feed entry gives the next sequence number.
  std::unique_ptr<rocksdb::Iterator> it(db_->db()->NewIterator(rocksdb::ReadOptions(), feed_));
  it->SeekToLast();
  VAULT_RETURN_IF_ERROR(storage::ToStatus(it->status(), "read change feed"));
  uint64_t last = 0;
  if (it->Valid()) {
    if (it->key().size() != 8) return absl::DataLossError("change feed key is not 8 bytes");
    last = ParseBigEndian64(storage::View(it->key()));
  }
  it.reset();
  StoreTotals totals;
  rocksdb::PinnableSlice value;
  rocksdb::Status s =
      db_->db()->Get(rocksdb::ReadOptions(), meta_, storage::ToSlice(kTotalsKey), &value);
  if (s.ok()) {
    vault::v1::StoreTotals t;
    if (!t.ParseFromArray(value.data(), static_cast<int>(value.size()))) {
      return absl::DataLossError("store totals record does not parse");
    }
    totals = {t.objects(), t.bytes(), t.removed()};
  } else if (!s.IsNotFound()) {
    return storage::ToStatus(s, "read store totals");
  }
  if (totals.objects + totals.removed != last) {
    return absl::DataLossError(absl::StrCat("store totals say ", totals.objects, " objects and ",
                                            totals.removed, " removed but the feed ends at ",
                                            last));
  }
  next_seq_ = last + 1;
  leader_totals_ = totals;
  last_seq_.store(last, std::memory_order_release);
  {
    absl::MutexLock lock(&mu_);
    totals_ = totals;
  }

  // Forget uploads abandoned longer than the TTL.
  const int64_t cutoff = NowMs() - absl::ToInt64Milliseconds(options_.upload_ttl);
  rocksdb::WriteBatch batch;
  it.reset(db_->db()->NewIterator(rocksdb::ReadOptions(), uploads_));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    if (it->key().size() != kSha256Bytes + 8) continue;  // chunk-list entries
    vault::v1::UploadRecord rec;
    if (!rec.ParseFromArray(it->value().data(), static_cast<int>(it->value().size())) ||
        rec.updated_unix_ms() < cutoff) {
      DeleteUploadRecords(it->key().ToString(), &batch);
    }
  }
  VAULT_RETURN_IF_ERROR(storage::ToStatus(it->status(), "scan uploads"));
  if (batch.Count() > 0) VAULT_RETURN_IF_ERROR(db_->Write(&batch));
  return absl::OkStatus();
}

absl::Status Store::CheckSize(const Digest& digest) const {
  if (digest.size() > options_.max_object_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("object ", digest.ToString(), " is larger than ",
                                                   "the vault's limit of ",
                                                   options_.max_object_bytes, " bytes"));
  }
  return absl::OkStatus();
}

absl::Status Store::CheckSpace(uint64_t bytes) const {
  if (packs_ == nullptr || options_.min_free_bytes == 0) return absl::OkStatus();
  struct statvfs fs;
  if (statvfs(packs_->dir().c_str(), &fs) != 0) return absl::OkStatus();  // writes will tell
  const uint64_t free = static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize;
  if (free >= bytes && free - bytes >= options_.min_free_bytes) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      "disk almost full: ", free >> 20, " MiB free where the vault keeps ",
      options_.min_free_bytes >> 20, " MiB in reserve for its database; nothing stored"));
}

absl::StatusOr<PutOutcome> Store::Put(const Digest& digest, absl::string_view data) {
  std::vector<absl::StatusOr<PutOutcome>> out = PutMany({PutItem{digest, data}});
  return std::move(out[0]);
}

std::vector<absl::StatusOr<PutOutcome>> Store::PutMany(absl::Span<const PutItem> items) {
  std::vector<absl::StatusOr<PutOutcome>> results(items.size(), PutOutcome{});
  uint64_t total = 0;
  for (const PutItem& item : items) total += item.data.size();
  if (absl::Status space = CheckSpace(total); !space.ok()) {
    for (auto& r : results) r = space;
    return results;
  }
  // One large object is hashed beside its write: the pack file's sync is the disk's time, not
  // the CPU's. Its bytes are checked before anything refers to them, and a mismatch gives them
  // back to the file system (PackStore::Discard).
  std::future<std::string> hashed_beside;
  std::vector<CommitOp> ops;
  ops.reserve(items.size());
  std::vector<size_t> op_index;
  for (size_t i = 0; i < items.size(); ++i) {
    const PutItem& item = items[i];
    absl::Status s = CheckSize(item.digest);
    if (s.ok() && item.data.size() != item.digest.size()) {
      s = absl::InvalidArgumentError(absl::StrCat("size mismatch: ", item.digest.ToString(),
                                                  " claims ", item.digest.size(), " bytes, got ",
                                                  item.data.size()));
    }
    if (s.ok() && item.data.size() >= options_.chunking_threshold) {
      s = absl::InvalidArgumentError(
          absl::StrCat("object ", item.digest.ToString(), " is at least the chunking threshold (",
                       options_.chunking_threshold, " bytes): upload it with the streaming Put"));
    }
    if (s.ok() && items.size() == 1 && item.data.size() >= kHashBesideWriteBytes &&
        ShouldPack(item.data.size()) && hash_beside_.load(std::memory_order_relaxed)) {
      hashed_beside = HashBeside(item.data);
    } else if (s.ok()) {
      std::string actual = Sha256::Hash(item.data);
      if (actual != item.digest.sha256()) s = DigestMismatch(item.digest, actual);
    }
    if (!s.ok()) {
      results[i] = s;
      continue;
    }
    ops.push_back(CommitOp{.digest = &item.digest, .data = item.data});
    op_index.push_back(i);
  }
  if (ops.empty()) return results;
  // Large values go to a pack file first (one sync for all of them); RocksDB gets their refs.
  // Objects already stored are left out, so a repeated put adds no garbage to the packs.
  std::vector<std::string> refs(ops.size());
  std::optional<PackRef> written_beside;  // the bytes written while hashed_beside runs
  // Once the write is over: wrong bytes are refused as such (whatever became of their write),
  // and given back.
  auto refused_beside = [&]() -> bool {
    if (!hashed_beside.valid()) return false;
    const std::string actual = hashed_beside.get();
    if (actual == items[0].digest.sha256()) return false;
    DiscardBeside(written_beside);
    results[0] = DigestMismatch(items[0].digest, actual);
    return true;
  };
  // The pack leases of what this put wrote, given back once its refs are committed (or not).
  std::vector<PackRef> leased;
  absl::Cleanup release = [&] {
    if (!leased.empty()) packs_->Release(leased);
  };
  std::vector<std::string> pack_keys;
  std::vector<size_t> pack_ops;
  for (size_t k = 0; k < ops.size(); ++k) {
    if (ShouldPack(ops[k].data.size())) {
      pack_keys.push_back(ops[k].digest->Key());
      pack_ops.push_back(k);
    }
  }
  if (!pack_ops.empty()) {
    std::vector<rocksdb::PinnableSlice> values;
    std::vector<rocksdb::Status> statuses;
    LookupMeta(pack_keys, &values, &statuses);
    std::vector<absl::string_view> to_pack;
    std::vector<size_t> packed_ops;
    for (size_t j = 0; j < pack_ops.size(); ++j) {
      if (!statuses[j].IsNotFound()) continue;  // stored (or unreadable: the commit says)
      to_pack.push_back(ops[pack_ops[j]].data);
      packed_ops.push_back(pack_ops[j]);
    }
    uint64_t ticket = 0;
    absl::Status packed = absl::OkStatus();
    if (!to_pack.empty()) {
      absl::StatusOr<std::vector<PackRef>> written = packs_->AppendMany(to_pack, &ticket);
      if (written.ok()) {
        leased = *written;
        for (size_t j = 0; j < packed_ops.size(); ++j) {
          refs[packed_ops[j]] = EncodePackRef((*written)[j]);
        }
        if (hashed_beside.valid()) written_beside = written->front();
        packed = packs_->Sync(ticket);
      } else {
        packed = written.status();
      }
    }
    if (!packed.ok()) {
      for (size_t i : op_index) results[i] = packed;
      refused_beside();
      return results;
    }
    for (size_t k = 0; k < ops.size(); ++k) {
      if (!refs[k].empty()) ops[k].data = refs[k];
    }
  }
  if (refused_beside()) return results;
  std::vector<CommitOp*> ptrs;
  ptrs.reserve(ops.size());
  for (CommitOp& op : ops) ptrs.push_back(&op);
  absl::Status written = committer_->CommitMany(ptrs);
  for (size_t k = 0; k < ops.size(); ++k) {
    if (written.ok()) {
      results[op_index[k]] = ops[k].status.ok() ? absl::StatusOr<PutOutcome>(ops[k].outcome)
                                                : absl::StatusOr<PutOutcome>(ops[k].status);
    } else {
      results[op_index[k]] = written;
    }
  }
  return results;
}

std::future<std::string> Store::HashBeside(absl::string_view data) {
  auto hash = [data] { return Sha256::Hash(data); };
  try {
    // (async|deferred: without a thread to spare, get() hashes on the caller's.)
    return std::async(std::launch::async | std::launch::deferred, hash);
  } catch (const std::system_error&) {
    return std::async(std::launch::deferred, hash);
  }
}

void Store::DiscardBeside(const std::optional<PackRef>& written) {
  if (!written.has_value()) return;
  // Where the bytes cannot be given back, wrong puts would each leave theirs: from then on
  // every object is hashed before it is written.
  if (!packs_->Discard(*written).ok()) hash_beside_.store(false, std::memory_order_relaxed);
}

absl::Status Store::PrepareGroup(absl::Span<CommitOp* const> ops, rocksdb::WriteBatch* batch) {
  // Which objects exist already? One sorted MultiGet for the group.
  std::vector<std::string> keys;
  keys.reserve(ops.size());
  for (CommitOp* op : ops) keys.push_back(op->digest->Key());
  std::vector<rocksdb::Status> statuses;
  std::vector<rocksdb::PinnableSlice> values;
  LookupMeta(keys, &values, &statuses);

  const int64_t now = NowMs();
  const int64_t confirm_before = now - absl::ToInt64Milliseconds(options_.confirm_after);
  // Objects of this group, as the group's earlier ops left them: seq when stored, 0 removed.
  absl::flat_hash_map<absl::string_view, uint64_t> in_group;
  // Objects present before the group that an earlier op of it confirmed.
  absl::flat_hash_set<absl::string_view> confirmed;
  StoreTotals totals = leader_totals_;
  uint64_t seq = next_seq_;
  for (size_t i = 0; i < ops.size(); ++i) {
    CommitOp* op = ops[i];
    op->outcome = PutOutcome{};
    op->status = absl::OkStatus();
    if (op->remove) {
      uint64_t seq_of = 0;  // of the object stored now, 0 when none
      int64_t touched = now;
      if (auto it = in_group.find(keys[i]); it != in_group.end()) {
        seq_of = it->second;
      } else if (statuses[i].ok()) {
        vault::v1::ObjectRecord rec;
        if (!rec.ParseFromArray(values[i].data(), static_cast<int>(values[i].size()))) {
          op->status = absl::DataLossError(
              absl::StrCat("object record of ", op->digest->ToString(), " does not parse"));
          continue;
        }
        seq_of = rec.seq();
        if (!confirmed.contains(keys[i])) {
          touched = std::max(rec.stored_unix_ms(), rec.confirmed_unix_ms());
        }
      } else if (!statuses[i].IsNotFound()) {
        return storage::ToStatus(statuses[i], "look up object");
      }
      if (seq_of != 0 && touched >= op->untouched_before_ms) {
        op->kept_recent = true;
        op->outcome = {seq_of, true};
        continue;
      }
      if (seq_of != 0 && op->also != nullptr && *op->also) {
        if (absl::Status s = (*op->also)(*op->digest, batch); !s.ok()) {
          op->status = s;
          continue;
        }
      }
      if (seq_of != 0) {
        batch->Delete(meta_, keys[i]);
        batch->Delete(data_, keys[i]);
        --totals.objects;
        ++totals.removed;
        totals.bytes -= op->digest->size();
        op->outcome = {seq_of, true};
      }
      in_group[keys[i]] = 0;
      continue;
    }
    if (auto it = in_group.find(keys[i]); it != in_group.end() && it->second == 0) {
      // Removed earlier in this group: stored again below, as new.
      statuses[i] = rocksdb::Status::NotFound();
    }
    if (op->move) {
      // (Anything an earlier op of the group did to the object leaves its old ref behind.)
      if (in_group.contains(keys[i])) continue;
      std::string value;
      rocksdb::Status got = db_->db()->Get(rocksdb::ReadOptions(), data_, keys[i], &value);
      if (got.IsNotFound()) continue;
      if (!got.ok()) return storage::ToStatus(got, "read object bytes");
      if (value != op->move_from) continue;
      batch->Put(data_, keys[i], rocksdb::Slice(op->data.data(), op->data.size()));
      op->outcome = {0, true};
      continue;
    }
    if (op->touch) {
      if (auto it = in_group.find(keys[i]); it != in_group.end() && it->second != 0) {
        op->outcome = {it->second, true};  // stored by this group: as new as can be
        continue;
      }
      if (statuses[i].IsNotFound()) {
        op->status =
            absl::NotFoundError(absl::StrCat("object ", op->digest->ToString(), " is not stored"));
        continue;
      }
      if (!statuses[i].ok()) return storage::ToStatus(statuses[i], "look up object");
      vault::v1::ObjectRecord rec;
      if (!rec.ParseFromArray(values[i].data(), static_cast<int>(values[i].size()))) {
        op->status = absl::DataLossError(
            absl::StrCat("object record of ", op->digest->ToString(), " does not parse"));
        continue;
      }
      // Always written (unlike a put's confirmation): an operator's removal that began before
      // now takes its own start as the cutoff.
      if (!confirmed.contains(keys[i])) {
        rec.set_confirmed_unix_ms(now);
        batch->Put(meta_, keys[i], rec.SerializeAsString());
        confirmed.insert(keys[i]);
      }
      op->outcome = {rec.seq(), true};
      continue;
    }
    if (statuses[i].ok()) {
      vault::v1::ObjectRecord rec;
      if (!rec.ParseFromArray(values[i].data(), static_cast<int>(values[i].size()))) {
        // This item's own damage: the rest of the group is written.
        op->status = absl::DataLossError(
            absl::StrCat("object record of ", op->digest->ToString(), " does not parse"));
        continue;
      }
      op->outcome = {rec.seq(), true};
      // Confirmed: a collection that began before this put leaves the object alone.
      if (std::max(rec.stored_unix_ms(), rec.confirmed_unix_ms()) < confirm_before &&
          !confirmed.contains(keys[i])) {
        rec.set_confirmed_unix_ms(now);
        batch->Put(meta_, keys[i], rec.SerializeAsString());
        confirmed.insert(keys[i]);
      }
    } else if (!statuses[i].IsNotFound()) {
      return storage::ToStatus(statuses[i], "look up object");
    } else if (auto it = in_group.find(keys[i]); it != in_group.end() && it->second != 0) {
      op->outcome = {it->second, true};
    } else {
      vault::v1::ObjectRecord rec;
      rec.set_seq(seq);
      rec.set_stored_unix_ms(now);
      rec.set_chunked(op->chunked);
      rec.set_chunk_count(op->chunk_count);
      if (op->chunked) rec.set_manifest_sha256(Sha256::Hash(op->data));
      batch->Put(meta_, keys[i], rec.SerializeAsString());
      batch->Put(data_, keys[i], rocksdb::Slice(op->data.data(), op->data.size()));
      batch->Put(feed_, BigEndian64(seq), absl::StrCat(keys[i], BigEndian64(now)));
      in_group[keys[i]] = seq;
      op->outcome = {seq, false};
      ++seq;
      ++totals.objects;
      totals.bytes += op->digest->size();
    }
    if (op->from_upload) DeleteUploadRecords(keys[i], batch);
  }
  if (totals.objects != leader_totals_.objects || totals.removed != leader_totals_.removed) {
    vault::v1::StoreTotals t;
    t.set_objects(totals.objects);
    t.set_bytes(totals.bytes);
    t.set_removed(totals.removed);
    batch->Put(meta_, storage::ToSlice(kTotalsKey), t.SerializeAsString());
  }
  // Applied to the leader's state only once the write succeeded (FinishGroup).
  pending_next_seq_ = seq;
  pending_totals_ = totals;
  return absl::OkStatus();
}

void Store::FinishGroup(absl::Span<CommitOp* const> ops, const absl::Status& written) {
  if (!written.ok()) return;  // nothing was written: sequence numbers are reused
  next_seq_ = pending_next_seq_;
  leader_totals_ = pending_totals_;
  std::vector<std::function<void()>> due;
  {
    absl::MutexLock lock(&mu_);
    totals_ = leader_totals_;
    last_seq_.store(next_seq_ - 1, std::memory_order_release);
    due = TakeDueWaiters(next_seq_ - 1);
  }
  for (auto& wake : due) wake();
}

std::vector<std::function<void()>> Store::TakeDueWaiters(uint64_t seq) {
  std::vector<std::function<void()>> due;
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    if (closed_ || seq > it->second.after_seq) {
      due.push_back(std::move(it->second.wake));
      waiters_.erase(it++);
    } else {
      ++it;
    }
  }
  return due;
}

Store::WaitResult Store::AddWaiter(uintptr_t key, uint64_t after_seq,
                                   const std::atomic<bool>* cancelled, std::function<void()> wake) {
  absl::MutexLock lock(&mu_);
  if (cancelled != nullptr && cancelled->load()) return WaitResult::kCancelled;
  if (closed_ || last_seq_.load(std::memory_order_acquire) > after_seq) return WaitResult::kReady;
  waiters_[key] = Waiter{after_seq, std::move(wake)};
  return WaitResult::kRegistered;
}

bool Store::RemoveWaiter(uintptr_t key) {
  absl::MutexLock lock(&mu_);
  return waiters_.erase(key) > 0;
}

bool Store::closed() const {
  absl::MutexLock lock(&mu_);
  return closed_;
}

void Store::DeleteUploadRecords(const std::string& key, rocksdb::WriteBatch* batch) const {
  batch->Delete(uploads_, key);
  // Chunk-list entries: key || index. DeleteRange covers every index.
  batch->DeleteRange(uploads_, absl::StrCat(key, std::string(4, '\0')),
                     absl::StrCat(key, std::string(4, '\xff'), std::string(1, '\xff')));
}

void Store::LookupMeta(const std::vector<std::string>& keys,
                       std::vector<rocksdb::PinnableSlice>* values,
                       std::vector<rocksdb::Status>* statuses) const {
  // RocksDB's batched MultiGet is fastest on sorted keys; sort a permutation, look up, and
  // hand the answers back in the caller's order.
  std::vector<uint32_t> order(keys.size());
  for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return keys[a] < keys[b]; });
  std::vector<rocksdb::Slice> sorted;
  sorted.reserve(keys.size());
  for (uint32_t i : order) sorted.emplace_back(keys[i]);
  std::vector<rocksdb::PinnableSlice> sorted_values(keys.size());
  std::vector<rocksdb::Status> sorted_statuses(keys.size());
  db_->db()->MultiGet(rocksdb::ReadOptions(), meta_, sorted.size(), sorted.data(),
                      sorted_values.data(), sorted_statuses.data(), /*sorted_input=*/true);
  values->clear();
  values->resize(keys.size());
  statuses->assign(keys.size(), rocksdb::Status());
  for (size_t k = 0; k < order.size(); ++k) {
    (*values)[order[k]] = std::move(sorted_values[k]);
    (*statuses)[order[k]] = sorted_statuses[k];
  }
}

absl::StatusOr<std::vector<Digest>> Store::FindMissing(absl::Span<const Digest> digests) const {
  std::vector<std::string> keys;
  keys.reserve(digests.size());
  for (const Digest& d : digests) keys.push_back(d.Key());
  std::vector<rocksdb::PinnableSlice> values;
  std::vector<rocksdb::Status> statuses;
  LookupMeta(keys, &values, &statuses);
  std::vector<Digest> missing;
  absl::flat_hash_set<absl::string_view> reported;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (statuses[i].IsNotFound()) {
      if (reported.insert(keys[i]).second) missing.push_back(digests[i]);
    } else if (!statuses[i].ok()) {
      return storage::ToStatus(statuses[i], "look up objects");
    }
  }
  return missing;
}

absl::StatusOr<bool> Store::Contains(const Digest& digest) const {
  absl::StatusOr<ObjectInfo> info = Stat(digest);
  if (info.ok()) return true;
  if (absl::IsNotFound(info.status())) return false;
  return info.status();
}

absl::StatusOr<std::vector<ChunkInfo>> Store::FindMissingChunks(
    absl::Span<const ChunkInfo> chunks) const {
  std::vector<uint32_t> order(chunks.size());
  for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](uint32_t a, uint32_t b) { return chunks[a].sha256 < chunks[b].sha256; });
  std::vector<rocksdb::Slice> sorted;
  sorted.reserve(chunks.size());
  for (uint32_t i : order) sorted.emplace_back(chunks[i].sha256);
  std::vector<rocksdb::PinnableSlice> values(chunks.size());
  std::vector<rocksdb::Status> statuses(chunks.size());
  db_->db()->MultiGet(rocksdb::ReadOptions(), chunk_index_, sorted.size(), sorted.data(),
                      values.data(), statuses.data(), /*sorted_input=*/true);
  std::vector<bool> present(chunks.size(), false);
  for (size_t k = 0; k < order.size(); ++k) {
    if (statuses[k].ok()) {
      // The index holds the chunk's size: a chunk claimed with another size is not this one.
      present[order[k]] = ParseBigEndian64(storage::View(values[k])) == chunks[order[k]].size;
    } else if (!statuses[k].IsNotFound()) {
      return storage::ToStatus(statuses[k], "look up chunks");
    }
  }
  std::vector<ChunkInfo> missing;
  absl::flat_hash_set<absl::string_view> reported;
  for (size_t i = 0; i < chunks.size(); ++i) {
    if (!present[i] && reported.insert(chunks[i].sha256).second) missing.push_back(chunks[i]);
  }
  return missing;
}

absl::StatusOr<std::string> Store::ReadChunk(absl::string_view sha256, uint32_t size) const {
  std::string value;
  rocksdb::Status s =
      db_->db()->Get(rocksdb::ReadOptions(), chunks_, storage::ToSlice(sha256), &value);
  if (s.IsNotFound()) return absl::NotFoundError("chunk is not stored here");
  VAULT_RETURN_IF_ERROR(storage::ToStatus(s, "read chunk"));
  absl::StatusOr<std::string> bytes = Resolve(std::move(value), size);
  if (!bytes.ok()) return bytes.status();
  if (bytes->size() != size || Sha256::Hash(*bytes) != sha256) {
    return absl::DataLossError("stored bytes of a chunk do not match its hash (corrupt storage)");
  }
  return bytes;
}

absl::StatusOr<std::string> Store::PackNow(absl::string_view bytes) {
  uint64_t ticket = 0;
  VAULT_ASSIGN_OR_RETURN(PackRef ref, packs_->Append(bytes, &ticket));
  VAULT_RETURN_IF_ERROR(packs_->Sync(ticket));
  return EncodePackRef(ref);
}

absl::StatusOr<std::optional<PackRef>> Store::RefOf(absl::string_view value,
                                                    uint64_t expected_size) const {
  std::optional<PackRef> ref = DecodePackRef(value, expected_size);
  if (!ref.has_value()) return ref;
  if (ref->size != expected_size) {
    return absl::DataLossError(absl::StrCat("a pack reference names ", ref->size, " bytes where ",
                                            expected_size, " are stored (corrupt storage)"));
  }
  if (packs_ == nullptr) {
    return absl::DataLossError("a value is in a pack file but this store has no pack directory");
  }
  return ref;
}

absl::StatusOr<std::string> Store::Resolve(std::string value, uint64_t expected_size) const {
  VAULT_ASSIGN_OR_RETURN(std::optional<PackRef> ref, RefOf(value, expected_size));
  if (!ref.has_value()) return value;
  return packs_->Read(*ref);
}

absl::StatusOr<absl::string_view> Store::ResolveUncached(absl::string_view value,
                                                         uint64_t expected_size,
                                                         AlignedBuffer* buffer) const {
  VAULT_ASSIGN_OR_RETURN(std::optional<PackRef> ref, RefOf(value, expected_size));
  if (!ref.has_value()) return value;
  return packs_->ReadUncached(*ref, buffer);
}

absl::Status Store::Repair(const Digest& digest, absl::string_view data) {
  if (data.size() != digest.size() || Sha256::Hash(data) != digest.sha256()) {
    return absl::InvalidArgumentError(
        absl::StrCat("repair of ", digest.ToString(), ": the bytes do not match the digest"));
  }
  const std::string key = digest.Key();
  VAULT_ASSIGN_OR_RETURN(std::string rec_value, GetValue(meta_, key, "look up object"));
  vault::v1::ObjectRecord rec;
  if (!rec.ParseFromString(rec_value)) {
    return absl::DataLossError(
        absl::StrCat("object record of ", digest.ToString(), " does not parse"));
  }
  rocksdb::WriteBatch batch;
  if (!rec.chunked()) {
    batch.Put(data_, key, rocksdb::Slice(data.data(), data.size()));
    return db_->Write(&batch);
  }
  // The chunk boundaries: from the stored manifest when it is intact, else chunked again (the
  // same parameters give the same boundaries; the record then gets the new manifest's hash).
  vault::v1::Manifest manifest;
  absl::StatusOr<std::string> stored = GetValue(data_, key, "read manifest");
  if (!stored.ok() && !absl::IsNotFound(stored.status())) return stored.status();
  if (!stored.ok() || Sha256::Hash(*stored) != rec.manifest_sha256() ||
      !manifest.ParseFromString(*stored)) {
    manifest.Clear();
    Chunker chunker(chunker_params_);
    chunker.Append(data);
    while (std::optional<std::string> chunk = chunker.Next(/*eof=*/true)) {
      vault::v1::ChunkRef* ref = manifest.add_chunks();
      ref->set_sha256(Sha256::Hash(*chunk));
      ref->set_size(static_cast<uint32_t>(chunk->size()));
    }
    std::string bytes = manifest.SerializeAsString();
    rec.set_manifest_sha256(Sha256::Hash(bytes));
    rec.set_chunk_count(static_cast<uint32_t>(manifest.chunks_size()));
    batch.Put(data_, key, bytes);
    batch.Put(meta_, key, rec.SerializeAsString());
  }
  uint64_t at = 0;
  for (const vault::v1::ChunkRef& ref : manifest.chunks()) {
    if (at + ref.size() > data.size()) {
      return absl::DataLossError(absl::StrCat("manifest of ", digest.ToString(), " is too long"));
    }
    absl::string_view chunk = data.substr(at, ref.size());
    if (Sha256::Hash(chunk) != ref.sha256()) {
      return absl::DataLossError(
          absl::StrCat("manifest of ", digest.ToString(), " does not describe its bytes"));
    }
    batch.Put(chunks_, ref.sha256(), rocksdb::Slice(chunk.data(), chunk.size()));
    batch.Put(chunk_index_, ref.sha256(), storage::BigEndian32(ref.size()));
    at += ref.size();
  }
  return db_->Write(&batch);
}

absl::StatusOr<std::string> Store::GetValue(rocksdb::ColumnFamilyHandle* cf, const std::string& key,
                                            absl::string_view what) const {
  std::string value;
  rocksdb::Status s = db_->db()->Get(rocksdb::ReadOptions(), cf, key, &value);
  if (!s.ok()) return storage::ToStatus(s, what);
  return value;
}

absl::StatusOr<ObjectInfo> Store::Stat(const Digest& digest) const {
  absl::StatusOr<std::string> value = GetValue(meta_, digest.Key(), "look up object");
  if (absl::IsNotFound(value.status())) {
    return absl::NotFoundError(absl::StrCat("object ", digest.ToString(), " is not stored"));
  }
  if (!value.ok()) return value.status();
  vault::v1::ObjectRecord rec;
  if (!rec.ParseFromString(*value)) {
    return absl::DataLossError(
        absl::StrCat("object record of ", digest.ToString(), " does not parse"));
  }
  return ObjectInfo{.digest = digest,
                    .seq = rec.seq(),
                    .chunked = rec.chunked(),
                    .chunk_count = rec.chunk_count(),
                    .stored_unix_ms = rec.stored_unix_ms(),
                    .confirmed_unix_ms = rec.confirmed_unix_ms()};
}

absl::StatusOr<uint64_t> Store::UploadOffset(const Digest& digest) const {
  absl::StatusOr<std::string> value = GetValue(uploads_, digest.Key(), "look up upload");
  if (absl::IsNotFound(value.status())) return 0;
  if (!value.ok()) return value.status();
  vault::v1::UploadRecord rec;
  if (!rec.ParseFromString(*value)) return absl::DataLossError("upload record does not parse");
  return rec.committed_offset();
}

absl::StatusOr<std::vector<FeedItem>> Store::ReadFeed(uint64_t after_seq, size_t limit) const {
  std::vector<FeedItem> out;
  const uint64_t last = last_seq();   // never show entries of a group still being written
  if (after_seq >= last) return out;  // also keeps after_seq + 1 from overflowing
  std::unique_ptr<rocksdb::Iterator> it(db_->db()->NewIterator(rocksdb::ReadOptions(), feed_));
  for (it->Seek(BigEndian64(after_seq + 1)); it->Valid(); it->Next()) {
    if (limit != 0 && out.size() >= limit) break;
    uint64_t seq = ParseBigEndian64(storage::View(it->key()));
    if (seq > last) break;
    absl::string_view v = storage::View(it->value());
    if (v.size() != kSha256Bytes + 16) return absl::DataLossError("feed entry is malformed");
    VAULT_ASSIGN_OR_RETURN(Digest d, Digest::FromKey(v.substr(0, kSha256Bytes + 8)));
    out.push_back(FeedItem{seq, std::move(d),
                           static_cast<int64_t>(ParseBigEndian64(v.substr(kSha256Bytes + 8)))});
  }
  VAULT_RETURN_IF_ERROR(storage::ToStatus(it->status(), "read change feed"));
  return out;
}

void Store::Close() {
  std::vector<std::function<void()>> due;
  {
    absl::MutexLock lock(&mu_);
    closed_ = true;
    due = TakeDueWaiters(0);
  }
  for (auto& wake : due) wake();
}

StoreTotals Store::totals() const {
  absl::MutexLock lock(&mu_);
  return totals_;
}

}  // namespace vault::cas
