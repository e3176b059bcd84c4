// Store::Compact (design §12): pack files whose live fraction fell are rewritten, and their space
// goes back to the file system.
#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "cas/store.h"
#include "common/status_macros.h"
#include "rocksdb/iterator.h"
#include "rocksdb/write_batch.h"
#include "storage/keys.h"

namespace vault::cas {
namespace {

// Live values are copied in batches of about this many bytes: one pack sync and one ref move
// per batch.
constexpr uint64_t kCopyBatchBytes = 4 << 20;

// A value a ref points to: where it is recorded, and where it is.
struct Located {
  bool chunk = false;  // cas_chunks (key: the SHA-256), else cas_data (key: the object key)
  std::string key;
  std::string value;  // the ref as stored
  PackRef ref;
};

}  // namespace

absl::StatusOr<CompactReport> Store::Compact(const CompactOptions& options) {
  if (packs_ == nullptr) return CompactReport{};
  absl::MutexLock one_run(&sweep_mu_);  // not beside a chunk sweep: both read every ref
  auto check = [&]() -> absl::Status {
    return options.keep_going ? options.keep_going() : absl::OkStatus();
  };
  // The file being appended to is sealed first: once its leases are gone, it is a file like the
  // others (this run, or the next).
  if (!options.dry_run) packs_->Seal();
  VAULT_ASSIGN_OR_RETURN(std::vector<PackStore::FileInfo> files, packs_->ListFiles());
  absl::flat_hash_map<uint64_t, uint64_t> live;  // file -> live bytes
  absl::flat_hash_set<uint64_t> candidates;
  CompactReport report;
  for (const PackStore::FileInfo& f : files) {
    if (f.appending) continue;
    live[f.id] = 0;
    ++report.files;
    report.file_bytes += f.bytes;
  }
  if (live.empty()) return report;

  // Every ref, once: the live bytes of each file. The files a ref points into that are not
  // listed (the one being appended to, or made since) are not touched.
  rocksdb::ReadOptions ro;
  ro.total_order_seek = true;
  ro.fill_cache = false;
  auto scan = [&](bool chunks, const std::function<void(Located)>& each) -> absl::Status {
    std::unique_ptr<rocksdb::Iterator> it(db_->db()->NewIterator(ro, chunks ? chunks_ : data_));
    // A chunk's size is in cas_chunk_index, under the same key: walked beside it, so that a
    // chunk whose own bytes look like a ref is not taken for one.
    std::unique_ptr<rocksdb::Iterator> sizes;
    if (chunks) {
      sizes.reset(db_->db()->NewIterator(ro, chunk_index_));
      sizes->SeekToFirst();
    }
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      absl::string_view key = storage::View(it->key());
      uint64_t size = 0;
      if (!chunks) {
        if (key.size() != kSha256Bytes + 8) continue;
        size = storage::ParseBigEndian64(key.substr(kSha256Bytes));
      } else {
        while (sizes->Valid() && storage::View(sizes->key()) < key) sizes->Next();
        if (!sizes->Valid() || storage::View(sizes->key()) != key) continue;  // no index: no ref
        size = storage::ParseBigEndian64(storage::View(sizes->value()));
      }
      absl::string_view value = storage::View(it->value());
      std::optional<PackRef> ref = DecodePackRef(value, size);
      if (!ref.has_value()) continue;
      each(Located{
          .chunk = chunks, .key = std::string(key), .value = std::string(value), .ref = *ref});
    }
    if (sizes != nullptr) VAULT_RETURN_IF_ERROR(storage::ToStatus(sizes->status(), "scan chunks"));
    return storage::ToStatus(it->status(), "scan refs");
  };
  for (bool chunks : {false, true}) {
    VAULT_RETURN_IF_ERROR(scan(chunks, [&](Located l) {
      if (auto it = live.find(l.ref.file); it != live.end()) it->second += l.ref.size;
    }));
  }
  for (const PackStore::FileInfo& f : files) {
    if (f.appending) continue;
    const uint64_t n = live[f.id];
    report.live_bytes += n;
    // A file with leases may hold bytes about to be referred to (a put not yet committed, an
    // upload's chunks not yet recorded): its refs are not all known. It gains none any more, so
    // with none now, every value it holds is referred to by now or never will be, and the scan
    // below sees them all.
    if (packs_->Leased(f.id)) continue;
    if (static_cast<double>(n) < options.max_live_fraction * static_cast<double>(f.bytes) ||
        n == 0) {
      candidates.insert(f.id);
    }
  }
  if (options.dry_run || candidates.empty()) return report;

  // The values to move, then moved batch by batch.
  std::vector<Located> to_move;
  for (bool chunks : {false, true}) {
    VAULT_RETURN_IF_ERROR(scan(chunks, [&](Located l) {
      if (candidates.contains(l.ref.file)) to_move.push_back(std::move(l));
    }));
  }
  VAULT_RETURN_IF_ERROR(check());
  // In file order, so that each old file is read front to back.
  std::sort(to_move.begin(), to_move.end(), [](const Located& a, const Located& b) {
    return std::tie(a.ref.file, a.ref.offset) < std::tie(b.ref.file, b.ref.offset);
  });
  absl::flat_hash_set<uint64_t> keep;  // files with a value that could not be moved
  size_t next = 0;
  while (next < to_move.size()) {
    std::vector<std::string> bytes;
    std::vector<const Located*> batch;
    uint64_t batch_bytes = 0;
    for (; next < to_move.size() && batch_bytes < kCopyBatchBytes; ++next) {
      const Located& l = to_move[next];
      absl::StatusOr<std::string> value = packs_->Read(l.ref);
      const absl::string_view sha256 = absl::string_view(l.key).substr(0, kSha256Bytes);
      if (!value.ok() || Sha256::Hash(*value) != sha256) {
        // Damaged (the scrub repairs it from a peer): its file stays, so does the ref.
        ++report.kept_damaged;
        keep.insert(l.ref.file);
        continue;
      }
      batch_bytes += value->size();
      bytes.push_back(*std::move(value));
      batch.push_back(&l);
    }
    if (batch.empty()) continue;
    std::vector<absl::string_view> views(bytes.begin(), bytes.end());
    uint64_t ticket = 0;
    VAULT_ASSIGN_OR_RETURN(std::vector<PackRef> refs, packs_->AppendMany(views, &ticket));
    absl::Cleanup release = [&] { packs_->Release(refs); };
    VAULT_RETURN_IF_ERROR(packs_->Sync(ticket));
    // The refs move: objects' through the group commit, ordered with puts and removals; chunks'
    // under chunk_mu_, as the sweep removes them.
    std::vector<std::string> new_refs;
    new_refs.reserve(refs.size());
    for (const PackRef& r : refs) new_refs.push_back(EncodePackRef(r));
    std::vector<CommitOp> ops;
    std::vector<Digest> digests;
    digests.reserve(batch.size());
    for (size_t k = 0; k < batch.size(); ++k) {
      if (batch[k]->chunk) continue;
      VAULT_ASSIGN_OR_RETURN(Digest d, Digest::FromKey(batch[k]->key));
      digests.push_back(std::move(d));
    }
    ops.reserve(digests.size());
    size_t d = 0;
    rocksdb::WriteBatch chunk_batch;
    {
      absl::MutexLock lock(&chunk_mu_);
      for (size_t k = 0; k < batch.size(); ++k) {
        const Located& l = *batch[k];
        if (l.chunk) {
          std::string now;
          rocksdb::Status got = db_->db()->Get(rocksdb::ReadOptions(), chunks_, l.key, &now);
          if (!got.ok() && !got.IsNotFound()) return storage::ToStatus(got, "read chunk");
          if (got.ok() && now == l.value) chunk_batch.Put(chunks_, l.key, new_refs[k]);
        } else {
          ops.push_back(CommitOp{
              .digest = &digests[d++], .data = new_refs[k], .move = true, .move_from = l.value});
        }
      }
      // Durable before any file is retired; a crash before leaves the old refs, whose files are
      // still there.
      if (chunk_batch.Count() > 0) VAULT_RETURN_IF_ERROR(db_->Write(&chunk_batch));
    }
    if (!ops.empty()) {
      std::vector<CommitOp*> ptrs;
      for (CommitOp& op : ops) ptrs.push_back(&op);
      VAULT_RETURN_IF_ERROR(committer_->CommitMany(ptrs));
      for (CommitOp& op : ops) VAULT_RETURN_IF_ERROR(op.status);
    }
    report.copied_values += batch.size();
    report.copied_bytes += batch_bytes;
    VAULT_RETURN_IF_ERROR(check());
  }
  // Every ref into these files moved (or its value was removed or stored again): they go. The
  // WAL first: the sweep's removals of chunks are unsynced, and a power cut must not bring back
  // a chunk whose ref points into a file that is gone.
  VAULT_RETURN_IF_ERROR(storage::ToStatus(db_->db()->SyncWAL(), "sync the write-ahead log"));
  const absl::Time retired_at = absl::Now();
  for (const PackStore::FileInfo& f : files) {
    if (!candidates.contains(f.id) || keep.contains(f.id)) continue;
    VAULT_RETURN_IF_ERROR(packs_->Retire(f.id));
    ++report.rewritten;
    report.freed_bytes += f.bytes;
  }
  if (options.retire_delay > absl::ZeroDuration()) absl::SleepFor(options.retire_delay);
  packs_->ReleaseRetired(retired_at + absl::Nanoseconds(1));
  return report;
}

}  // namespace vault::cas
