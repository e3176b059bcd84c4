// The store's part of the CAS lifecycle (design §12): removing objects, listing them for the
// collector, and sweeping the chunks nothing names any more.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "cas/store.h"
#include "common/status_macros.h"
#include "rocksdb/iterator.h"
#include "rocksdb/snapshot.h"
#include "rocksdb/write_batch.h"
#include "storage/keys.h"
#include "vault/v1/cas_records.pb.h"

namespace vault::cas {
namespace {

// Unreferenced chunks are removed this many at a time, each batch one write.
constexpr size_t kSweepBatch = 1024;

// Releases a RocksDB snapshot when it goes out of scope.
class SnapshotHolder {
 public:
  explicit SnapshotHolder(rocksdb::DB* db) : db_(db), snapshot_(db->GetSnapshot()) {}
  ~SnapshotHolder() { db_->ReleaseSnapshot(snapshot_); }
  SnapshotHolder(const SnapshotHolder&) = delete;
  SnapshotHolder& operator=(const SnapshotHolder&) = delete;
  const rocksdb::Snapshot* get() const { return snapshot_; }

 private:
  rocksdb::DB* const db_;
  const rocksdb::Snapshot* const snapshot_;
};

}  // namespace

absl::StatusOr<RemoveOutcome> Store::Remove(const Digest& digest, const RemoveOptions& options) {
  std::vector<absl::StatusOr<RemoveOutcome>> out =
      RemoveMany(absl::MakeConstSpan(&digest, 1), options);
  return std::move(out[0]);
}

std::vector<absl::StatusOr<RemoveOutcome>> Store::RemoveMany(absl::Span<const Digest> digests,
                                                             const RemoveOptions& options) {
  std::vector<absl::StatusOr<RemoveOutcome>> out(digests.size(), RemoveOutcome{});
  std::vector<CommitOp> ops;
  std::vector<size_t> index;
  ops.reserve(digests.size());
  for (size_t i = 0; i < digests.size(); ++i) {
    if (absl::Status s = CheckSize(digests[i]); !s.ok()) {
      out[i] = s;
      continue;
    }
    CommitOp op{.digest = &digests[i], .remove = true};
    if (options.untouched_before != absl::InfiniteFuture()) {
      op.untouched_before_ms = absl::ToUnixMillis(options.untouched_before);
    }
    if (options.also) op.also = &options.also;
    ops.push_back(op);
    index.push_back(i);
  }
  if (ops.empty()) return out;
  std::vector<CommitOp*> ptrs;
  ptrs.reserve(ops.size());
  for (CommitOp& op : ops) ptrs.push_back(&op);
  const absl::Status written = committer_->CommitMany(ptrs);
  for (size_t k = 0; k < ops.size(); ++k) {
    if (!written.ok()) {
      out[index[k]] = written;
    } else if (!ops[k].status.ok()) {
      out[index[k]] = ops[k].status;
    } else {
      out[index[k]] =
          RemoveOutcome{.removed = ops[k].outcome.already_present && !ops[k].kept_recent,
                        .kept_recent = ops[k].kept_recent,
                        .seq = ops[k].outcome.seq};
    }
  }
  return out;
}

absl::Status Store::Touch(const Digest& digest) {
  VAULT_RETURN_IF_ERROR(CheckSize(digest));
  CommitOp op{.digest = &digest, .touch = true};
  VAULT_RETURN_IF_ERROR(committer_->Commit(&op));
  return op.status;
}

absl::StatusOr<bool> TouchIfStored(Store& store, const Digest& digest) {
  absl::Status s = store.Touch(digest);
  if (s.ok()) return true;
  if (absl::IsNotFound(s)) return false;
  return s;
}

absl::Status Store::ForEachObjectPage(
    size_t page_size,
    const std::function<absl::Status(std::vector<ObjectInfo>& page)>& page) const {
  rocksdb::ReadOptions ro;
  ro.total_order_seek = true;  // the column family has a prefix extractor
  ro.fill_cache = false;
  std::unique_ptr<rocksdb::Iterator> it(db_->db()->NewIterator(ro, meta_));
  std::vector<ObjectInfo> out;
  out.reserve(page_size);
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    absl::string_view key = storage::View(it->key());
    if (key.size() != kSha256Bytes + 8) continue;  // the totals record
    VAULT_ASSIGN_OR_RETURN(Digest d, Digest::FromKey(key));
    vault::v1::ObjectRecord rec;
    if (!rec.ParseFromArray(it->value().data(), static_cast<int>(it->value().size()))) {
      return absl::DataLossError(
          absl::StrCat("object record of ", d.ToString(), " does not parse"));
    }
    out.push_back(ObjectInfo{.digest = std::move(d),
                             .seq = rec.seq(),
                             .chunked = rec.chunked(),
                             .chunk_count = rec.chunk_count(),
                             .stored_unix_ms = rec.stored_unix_ms(),
                             .confirmed_unix_ms = rec.confirmed_unix_ms()});
    if (out.size() >= page_size) {
      VAULT_RETURN_IF_ERROR(page(out));
      out.clear();
    }
  }
  VAULT_RETURN_IF_ERROR(storage::ToStatus(it->status(), "scan objects"));
  if (!out.empty()) VAULT_RETURN_IF_ERROR(page(out));
  return absl::OkStatus();
}

void Store::NoteChunkTaken(const std::string& sha256) {
  absl::MutexLock lock(&chunk_mu_);
  ++chunks_in_flight_[sha256];
  if (sweeping_) taken_while_sweeping_.insert(sha256);
}

void Store::NoteChunksWritten(absl::Span<const std::pair<std::string, uint32_t>> chunks) {
  absl::MutexLock lock(&chunk_mu_);
  for (const auto& [sha256, size] : chunks) {
    // A sweep under way may have read its records before these chunks were written: they stay
    // protected until it ends.
    if (sweeping_) taken_while_sweeping_.insert(sha256);
    auto it = chunks_in_flight_.find(sha256);
    if (it == chunks_in_flight_.end()) continue;
    if (--it->second == 0) chunks_in_flight_.erase(it);
  }
}

void Store::AddChunkReader(const ObjectReader* reader) {
  absl::MutexLock lock(&chunk_mu_);
  chunk_readers_.insert(reader);
}

void Store::RemoveChunkReader(const ObjectReader* reader) {
  absl::MutexLock lock(&chunk_mu_);
  chunk_readers_.erase(reader);
}

ObjectReader::~ObjectReader() {
  if (registered_) const_cast<Store*>(store_)->RemoveChunkReader(this);
}

absl::StatusOr<ChunkSweep> Store::SweepChunks(bool dry_run,
                                              const std::function<absl::Status()>& keep_going) {
  absl::MutexLock one_sweep(&sweep_mu_);
  {
    absl::MutexLock lock(&chunk_mu_);
    sweeping_ = true;
    taken_while_sweeping_.clear();
  }
  struct EndSweep {
    Store* store;
    ~EndSweep() {
      absl::MutexLock lock(&store->chunk_mu_);
      store->sweeping_ = false;
      store->taken_while_sweeping_.clear();
    }
  } end_sweep{this};
  auto check = [&]() -> absl::Status { return keep_going ? keep_going() : absl::OkStatus(); };

  // One snapshot, taken once every chunk an upload takes from now on is noted: what it shows is
  // named by a durable record (an object's manifest or an upload's chunk list; a put moves a
  // chunk from one to the other in one write), everything after it by the notes.
  SnapshotHolder snapshot(db_->db());
  rocksdb::ReadOptions ro;
  ro.snapshot = snapshot.get();
  ro.total_order_seek = true;
  ro.fill_cache = false;
  absl::flat_hash_set<std::string> named;
  {
    std::unique_ptr<rocksdb::Iterator> it(db_->db()->NewIterator(ro, uploads_));
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      if (it->key().size() != kSha256Bytes + 8 + 4) continue;  // an upload's own record
      vault::v1::ChunkRef ref;
      if (ref.ParseFromArray(it->value().data(), static_cast<int>(it->value().size()))) {
        named.insert(ref.sha256());
      }
    }
    VAULT_RETURN_IF_ERROR(storage::ToStatus(it->status(), "scan uploads"));
  }
  VAULT_RETURN_IF_ERROR(check());
  {
    std::unique_ptr<rocksdb::Iterator> meta(db_->db()->NewIterator(ro, meta_));
    for (meta->SeekToFirst(); meta->Valid(); meta->Next()) {
      if (meta->key().size() != kSha256Bytes + 8) continue;
      vault::v1::ObjectRecord rec;
      if (!rec.ParseFromArray(meta->value().data(), static_cast<int>(meta->value().size()))) {
        return absl::DataLossError("an object record does not parse: no chunk is swept");
      }
      if (!rec.chunked()) continue;
      std::string value;
      rocksdb::Status s = db_->db()->Get(ro, data_, meta->key(), &value);
      vault::v1::Manifest manifest;
      if (!s.ok() || !manifest.ParseFromString(value)) {
        // Without the manifest nothing says which chunks the object needs: keep them all.
        return absl::DataLossError(absl::StrCat("the manifest of a stored object is ",
                                                s.ok() ? "corrupt" : "unreadable",
                                                ": no chunk is swept"));
      }
      for (const vault::v1::ChunkRef& ref : manifest.chunks()) named.insert(ref.sha256());
    }
    VAULT_RETURN_IF_ERROR(storage::ToStatus(meta->status(), "scan objects"));
  }
  VAULT_RETURN_IF_ERROR(check());

  ChunkSweep sweep;
  std::vector<std::pair<std::string, uint32_t>> candidates;
  auto remove_candidates = [&]() -> absl::Status {
    if (candidates.empty() || dry_run) {
      candidates.clear();
      return absl::OkStatus();
    }
    rocksdb::WriteBatch batch;
    uint64_t removed = 0;
    {
      absl::MutexLock lock(&chunk_mu_);
      absl::flat_hash_set<absl::string_view> read_now;
      for (const ObjectReader* reader : chunk_readers_) {
        for (const auto& [sha256, size] : reader->chunks_) read_now.insert(sha256);
      }
      for (const auto& [sha256, size] : candidates) {
        if (chunks_in_flight_.contains(sha256) || taken_while_sweeping_.contains(sha256) ||
            read_now.contains(sha256)) {
          continue;
        }
        batch.Delete(chunks_, sha256);
        batch.Delete(chunk_index_, sha256);
        ++removed;
      }
      // Written under the lock: an upload that takes one of these chunks now finds it gone
      // and stores it again.
      if (batch.Count() > 0) {
        VAULT_RETURN_IF_ERROR(db_->WriteUnsynced(&batch));
      }
    }
    sweep.removed += removed;
    candidates.clear();
    return check();
  };
  std::unique_ptr<rocksdb::Iterator> it(db_->db()->NewIterator(ro, chunk_index_));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    ++sweep.chunks;
    std::string sha256 = it->key().ToString();
    if (named.contains(sha256)) continue;
    const uint32_t size =
        static_cast<uint32_t>(storage::ParseBigEndian64(storage::View(it->value())));
    ++sweep.unreferenced;
    sweep.bytes += size;
    candidates.emplace_back(std::move(sha256), size);
    if (candidates.size() >= kSweepBatch) VAULT_RETURN_IF_ERROR(remove_candidates());
  }
  VAULT_RETURN_IF_ERROR(storage::ToStatus(it->status(), "scan chunks"));
  VAULT_RETURN_IF_ERROR(remove_candidates());
  return sweep;
}

}  // namespace vault::cas
