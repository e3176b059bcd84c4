// Streaming, resumable uploads and streaming reads of the CAS.
#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "cas/store.h"
#include "common/status_macros.h"
#include "rocksdb/write_batch.h"
#include "storage/keys.h"

namespace vault::cas {
namespace {

using storage::BigEndian32;

int64_t NowMs() { return absl::ToUnixMillis(absl::Now()); }

absl::Status VerifyBytes(absl::string_view bytes, absl::string_view sha256, uint64_t size,
                         absl::string_view what) {
  if (bytes.size() != size || Sha256::Hash(bytes) != sha256) {
    return absl::DataLossError(
        absl::StrCat("stored bytes of ", what, " do not match their digest (corrupt storage)"));
  }
  return absl::OkStatus();
}

}  // namespace

Upload::Upload(Store* store, Digest digest)
    : store_(store), digest_(std::move(digest)), key_(digest_.Key()) {}

Upload::~Upload() {
  // Keep what arrived for a resume, unless a newer upload took the object over (its records
  // would be overwritten) or this one ended.
  if (!finished_ && pending_ != nullptr && pending_->Count() > 0 &&
      store_->CheckCurrentUpload(key_, generation_).ok()) {
    WritePending().IgnoreError();  // best effort: only the resume point is at stake
  }
  // Chunks never written: their bytes are garbage, and a sweep may take them now.
  if (!pending_leases_.empty()) store_->packs_->Release(pending_leases_);
  if (chunks_noted_ > chunks_released_) {
    store_->NoteChunksWritten(absl::MakeConstSpan(chunks_).subspan(chunks_released_));
  }
  store_->ReleaseUpload(key_, generation_, reserved_);
}

void Store::ReleaseUpload(const std::string& key, uint64_t generation, uint64_t reserved) {
  absl::MutexLock lock(&mu_);
  upload_buffer_bytes_ -= reserved;
  auto it = active_uploads_.find(key);
  if (it != active_uploads_.end() && it->second == generation) active_uploads_.erase(it);
}

absl::Status Store::CheckCurrentUpload(const std::string& key, uint64_t generation) const {
  absl::MutexLock lock(&mu_);
  auto it = active_uploads_.find(key);
  if (it == active_uploads_.end() || it->second != generation) {
    return absl::AbortedError("a newer upload of this object took over; this one stopped");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Upload>> Store::StartUpload(const Digest& digest, uint64_t offset) {
  VAULT_RETURN_IF_ERROR(CheckSize(digest));
  const std::string key = digest.Key();
  std::unique_ptr<Upload> up(new Upload(this, digest));  // releases its claims when destroyed
  {
    absl::MutexLock lock(&mu_);
    up->generation_ = ++upload_generation_;
    active_uploads_[key] = up->generation_;  // takes over from an older upload, if any
    if (digest.size() < options_.chunking_threshold) {
      // Inline objects are buffered whole until the stream ends: bound the total.
      if (upload_buffer_bytes_ + digest.size() > options_.max_upload_buffer_bytes) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "too many uploads in progress (", upload_buffer_bytes_, " bytes buffered; limit ",
            options_.max_upload_buffer_bytes, "); retry later"));
      }
      upload_buffer_bytes_ += digest.size();
      up->reserved_ = digest.size();
    }
  }
  if (offset > digest.size()) {
    return absl::OutOfRangeError(
        absl::StrCat("offset ", offset, " is past the end of ", digest.ToString()));
  }
  absl::StatusOr<ObjectInfo> info = Stat(digest);
  if (info.ok()) {
    up->present_ = true;
    up->present_outcome_ = {info->seq, true};
    up->offset_ = offset;
    return up;
  }
  if (!absl::IsNotFound(info.status())) return info.status();

  if (digest.size() < options_.chunking_threshold) {
    if (offset != 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot resume ", digest.ToString(), " at offset ", offset,
          ": objects below the chunking threshold keep no partial upload; start at offset 0"));
    }
    return up;
  }

  up->chunked_ = true;
  up->chunker_ = std::make_unique<Chunker>(chunker_params_);
  up->started_unix_ms_ = NowMs();
  absl::StatusOr<std::string> rec_value = GetValue(uploads_, key, "look up upload");
  if (!rec_value.ok() && !absl::IsNotFound(rec_value.status())) return rec_value.status();
  vault::v1::UploadRecord rec;
  if (rec_value.ok() && !rec.ParseFromString(*rec_value)) {
    return absl::DataLossError("upload record does not parse");
  }
  if (offset == 0) {
    if (rec_value.ok()) {  // restart from scratch
      rocksdb::WriteBatch batch;
      DeleteUploadRecords(key, &batch);
      VAULT_RETURN_IF_ERROR(db_->WriteUnsynced(&batch));
    }
    return up;
  }
  if (!rec_value.ok() || rec.committed_offset() != offset) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot resume ", digest.ToString(), " at offset ", offset,
                     ": durable bytes end at ", rec_value.ok() ? rec.committed_offset() : 0));
  }
  // Resume: rebuild the running hash from the durable chunks, verifying each.
  for (uint32_t i = 0; i < rec.chunk_count(); ++i) {
    VAULT_ASSIGN_OR_RETURN(std::string ref_value,
                           GetValue(uploads_, absl::StrCat(key, BigEndian32(i)), "read upload"));
    vault::v1::ChunkRef ref;
    if (!ref.ParseFromString(ref_value)) return absl::DataLossError("upload chunk ref is corrupt");
    VAULT_ASSIGN_OR_RETURN(std::string value, GetValue(chunks_, ref.sha256(), "read chunk"));
    VAULT_ASSIGN_OR_RETURN(std::string chunk, Resolve(std::move(value), ref.size()));
    VAULT_RETURN_IF_ERROR(VerifyBytes(chunk, ref.sha256(), ref.size(), "an uploaded chunk"));
    up->hash_.Update(chunk);
    up->chunks_.emplace_back(ref.sha256(), ref.size());
  }
  up->chunks_noted_ = up->chunks_released_ = up->chunks_.size();
  up->offset_ = up->committed_offset_ = up->pending_offset_ = rec.committed_offset();
  up->chunk_count_ = rec.chunk_count();
  up->started_unix_ms_ = rec.started_unix_ms();
  return up;
}

absl::Status Store::PersistChunk(const std::string& upload_key, uint32_t index,
                                 absl::string_view chunk, const std::string& chunk_hash,
                                 const vault::v1::UploadRecord& rec, rocksdb::WriteBatch* batch,
                                 uint64_t* ticket, std::vector<PackRef>* leases) {
  // Noted before the lookup: a sweep that runs now either keeps the chunk or has removed it
  // already, and then the lookup finds it missing and the bytes are stored again.
  NoteChunkTaken(chunk_hash);
  std::string present;
  rocksdb::Status s = db_->db()->Get(rocksdb::ReadOptions(), chunk_index_, chunk_hash, &present);
  if (s.IsNotFound()) {
    if (ShouldPack(chunk.size())) {
      // A chunk is read again only when the object is: keep it out of the page cache.
      VAULT_ASSIGN_OR_RETURN(PackRef ref, packs_->AppendUncached(chunk, ticket));
      if (leases != nullptr) leases->push_back(ref);  // until the batch is written
      batch->Put(chunks_, chunk_hash, EncodePackRef(ref));
    } else {
      batch->Put(chunks_, chunk_hash, rocksdb::Slice(chunk.data(), chunk.size()));
    }
    batch->Put(chunk_index_, chunk_hash, BigEndian32(static_cast<uint32_t>(chunk.size())));
  } else if (!s.ok()) {
    return storage::ToStatus(s, "look up chunk");
  }
  vault::v1::ChunkRef ref;
  ref.set_sha256(chunk_hash);
  ref.set_size(static_cast<uint32_t>(chunk.size()));
  batch->Put(uploads_, absl::StrCat(upload_key, BigEndian32(index)), ref.SerializeAsString());
  batch->Put(uploads_, upload_key, rec.SerializeAsString());
  return absl::OkStatus();
}

absl::Status Upload::Append(absl::string_view data, bool chunk_end) {
  if (finished_) return absl::FailedPreconditionError("upload already finished");
  VAULT_RETURN_IF_ERROR(store_->CheckCurrentUpload(key_, generation_));
  if (data.size() > digest_.size() - offset_) {
    return absl::InvalidArgumentError(
        absl::StrCat("upload of ", digest_.ToString(), " sends more bytes than its size"));
  }
  if (!present_) VAULT_RETURN_IF_ERROR(store_->CheckSpace(data.size()));
  offset_ += data.size();
  if (present_) return absl::OkStatus();
  hash_.Update(data);
  if (!chunked_) {
    inline_data_.append(data.data(), data.size());
    return absl::OkStatus();
  }
  if (hints_) {
    const ChunkerParams& bounds = store_->chunker_params_;
    const size_t held = chunker_->buffered();
    const uint64_t n = held + data.size();
    if (n <= bounds.max_size && !chunk_end) {
      chunker_->Append(data);  // the rest of the sender's chunk follows
      return absl::OkStatus();
    }
    if (chunk_end && n == 0) return absl::OkStatus();
    if (chunk_end && n <= bounds.max_size && (n >= bounds.min_size || offset_ == digest_.size())) {
      if (held == 0) return TakeChunk(data);  // the usual case: one message, one chunk
      chunker_->Append(data);
      return TakeChunk(chunker_->TakeAll());
    }
    hints_ = false;  // out of bounds: content decides from here on
  }
  chunker_->Append(data);
  return FlushChunks(/*eof=*/false);
}

absl::Status Upload::AppendStoredChunk(absl::string_view sha256, uint32_t size) {
  absl::StatusOr<std::string> chunk = store_->ReadChunk(sha256, size);
  if (absl::IsNotFound(chunk.status())) {
    return absl::FailedPreconditionError(
        absl::StrCat("upload of ", digest_.ToString(),
                     " names a chunk this vault does not store; send its bytes"));
  }
  if (!chunk.ok()) return chunk.status();
  return Append(*chunk, /*chunk_end=*/true);  // a chunk of the sender's, named
}

absl::Status Upload::FlushChunks(bool eof) {
  while (std::optional<std::string> chunk = chunker_->Next(eof)) {
    VAULT_RETURN_IF_ERROR(TakeChunk(*chunk));
  }
  return absl::OkStatus();
}

absl::Status Upload::TakeChunk(absl::string_view chunk) {
  std::string hash = Sha256::Hash(chunk);
  vault::v1::UploadRecord rec;
  rec.set_committed_offset(pending_offset_ + chunk.size());
  rec.set_chunk_count(chunk_count_ + 1);
  rec.set_started_unix_ms(started_unix_ms_);
  rec.set_updated_unix_ms(NowMs());
  if (pending_ == nullptr) pending_ = std::make_unique<rocksdb::WriteBatch>();
  if (absl::Status s = store_->PersistChunk(key_, chunk_count_, chunk, hash, rec, pending_.get(),
                                            &pending_ticket_, &pending_leases_);
      !s.ok()) {
    const std::pair<std::string, uint32_t> taken(hash, static_cast<uint32_t>(chunk.size()));
    store_->NoteChunksWritten(absl::MakeConstSpan(&taken, 1));
    return s;
  }
  ++chunks_noted_;
  pending_offset_ += chunk.size();
  pending_bytes_ += chunk.size();
  ++chunk_count_;
  chunks_.emplace_back(std::move(hash), static_cast<uint32_t>(chunk.size()));
  // Without packs every chunk is written at once, as its own RocksDB write.
  if (store_->packs_ == nullptr || pending_bytes_ >= store_->options_.pack_sync_bytes) {
    VAULT_RETURN_IF_ERROR(WritePending());
  }
  return absl::OkStatus();
}

absl::Status Upload::WritePending() {
  if (pending_ == nullptr || pending_->Count() == 0) return absl::OkStatus();
  // The pack bytes first: once RocksDB holds a chunk's index entry, FindMissingChunks reports
  // it present and nobody sends it again, so its bytes must already be durable.
  if (pending_ticket_ != 0) VAULT_RETURN_IF_ERROR(store_->packs_->Sync(pending_ticket_));
  // Unsynced: the object's own commit syncs the WAL, which holds these writes before it.
  VAULT_RETURN_IF_ERROR(store_->db_->WriteUnsynced(pending_.get()));
  pending_->Clear();
  pending_bytes_ = 0;
  pending_ticket_ = 0;
  committed_offset_ = pending_offset_;
  // Their refs are recorded: their pack leases go. And their upload's chunk list names them now.
  if (!pending_leases_.empty()) {
    store_->packs_->Release(pending_leases_);
    pending_leases_.clear();
  }
  store_->NoteChunksWritten(
      absl::MakeConstSpan(chunks_).subspan(chunks_released_, chunks_noted_ - chunks_released_));
  chunks_released_ = chunks_noted_;
  return absl::OkStatus();
}

absl::StatusOr<PutOutcome> Upload::Finish() {
  if (finished_) return absl::FailedPreconditionError("upload already finished");
  VAULT_RETURN_IF_ERROR(store_->CheckCurrentUpload(key_, generation_));
  if (present_) {
    finished_ = true;
    // Confirmed, as a put of a stored object is: no removal that began before takes it now.
    absl::Status touched = store_->Touch(digest_);
    if (absl::IsNotFound(touched)) {
      return absl::AbortedError(absl::StrCat("object ", digest_.ToString(),
                                             " was removed while this upload ran: upload it "
                                             "again"));
    }
    VAULT_RETURN_IF_ERROR(touched);
    return present_outcome_;
  }
  if (offset_ != digest_.size()) {
    VAULT_RETURN_IF_ERROR(WritePending());
    return absl::FailedPreconditionError(absl::StrCat(
        "upload of ", digest_.ToString(), " ended after ", offset_, " of ", digest_.size(),
        " bytes; ", committed_offset_, " bytes are durable and the upload can resume there"));
  }
  finished_ = true;
  std::string actual = hash_.Finish();
  if (actual != digest_.sha256()) {
    if (pending_ != nullptr) pending_->Clear();
    if (chunked_) {
      rocksdb::WriteBatch batch;
      store_->DeleteUploadRecords(key_, &batch);
      VAULT_RETURN_IF_ERROR(store_->db_->WriteUnsynced(&batch));
    }
    VAULT_ASSIGN_OR_RETURN(Digest got, Digest::FromParts(actual, offset_));
    return absl::InvalidArgumentError(absl::StrCat("digest mismatch: claimed ", digest_.ToString(),
                                                   ", content hashes to ", got.ToString(),
                                                   "; nothing stored"));
  }
  Store::CommitOp op{.digest = &digest_};
  std::string manifest_bytes;
  if (chunked_) {
    VAULT_RETURN_IF_ERROR(FlushChunks(/*eof=*/true));
    VAULT_RETURN_IF_ERROR(WritePending());
    vault::v1::Manifest manifest;
    for (const auto& [hash, size] : chunks_) {
      vault::v1::ChunkRef* ref = manifest.add_chunks();
      ref->set_sha256(hash);
      ref->set_size(size);
    }
    manifest_bytes = manifest.SerializeAsString();
    op.data = manifest_bytes;
    op.chunked = true;
    op.chunk_count = chunk_count_;
    op.from_upload = true;
  } else if (store_->ShouldPack(inline_data_.size())) {
    VAULT_ASSIGN_OR_RETURN(manifest_bytes, store_->PackNow(inline_data_));  // the ref
    op.data = manifest_bytes;
    // Its pack lease goes once the ref is committed (or not).
    if (std::optional<PackRef> ref = DecodePackRef(manifest_bytes, inline_data_.size())) {
      inline_lease_ = *ref;
    }
  } else {
    op.data = inline_data_;
  }
  absl::Status committed = store_->committer_->Commit(&op);
  if (inline_lease_.has_value()) {
    store_->packs_->Release(absl::MakeConstSpan(&*inline_lease_, 1));
    inline_lease_.reset();
  }
  VAULT_RETURN_IF_ERROR(committed);
  VAULT_RETURN_IF_ERROR(op.status);
  return op.outcome;
}

absl::StatusOr<std::unique_ptr<ObjectReader>> Store::OpenReader(const Digest& digest,
                                                                ReadCheck check) const {
  absl::StatusOr<std::string> rec_value = GetValue(meta_, digest.Key(), "look up object");
  if (absl::IsNotFound(rec_value.status())) {
    return absl::NotFoundError(absl::StrCat("object ", digest.ToString(), " is not stored"));
  }
  if (!rec_value.ok()) return rec_value.status();
  vault::v1::ObjectRecord rec;
  if (!rec.ParseFromString(*rec_value)) {
    return absl::DataLossError(
        absl::StrCat("object record of ", digest.ToString(), " does not parse"));
  }
  std::unique_ptr<ObjectReader> reader(new ObjectReader(this));
  reader->verify_ = check == ReadCheck::kVerified;
  reader->info_ = ObjectInfo{.digest = digest,
                             .seq = rec.seq(),
                             .chunked = rec.chunked(),
                             .chunk_count = rec.chunk_count(),
                             .stored_unix_ms = rec.stored_unix_ms(),
                             .confirmed_unix_ms = rec.confirmed_unix_ms()};
  absl::StatusOr<std::string> value = GetValue(data_, digest.Key(), "read object");
  // The object record existed, so missing bytes are damaged storage, not a missing object,
  // unless the object was removed (Store::Remove) since: then its record is gone too.
  if (absl::IsNotFound(value.status())) {
    if (absl::IsNotFound(GetValue(meta_, digest.Key(), "look up object").status())) {
      return absl::NotFoundError(absl::StrCat("object ", digest.ToString(), " is not stored"));
    }
    return absl::DataLossError(absl::StrCat("bytes of ", digest.ToString(), " are missing"));
  }
  if (!value.ok()) return value.status();
  if (!rec.chunked()) {
    VAULT_ASSIGN_OR_RETURN(std::string bytes, Resolve(*std::move(value), digest.size()));
    if (reader->verify_) {
      VAULT_RETURN_IF_ERROR(VerifyBytes(bytes, digest.sha256(), digest.size(), digest.ToString()));
    }
    reader->inline_bytes_ = std::move(bytes);
    return reader;
  }
  vault::v1::Manifest manifest;
  if (Sha256::Hash(*value) != rec.manifest_sha256() || !manifest.ParseFromString(*value)) {
    return absl::DataLossError(absl::StrCat("manifest of ", digest.ToString(), " is corrupt"));
  }
  uint64_t at = 0;
  reader->chunks_.reserve(manifest.chunks_size());
  reader->starts_.reserve(manifest.chunks_size());
  for (const vault::v1::ChunkRef& ref : manifest.chunks()) {
    reader->starts_.push_back(at);
    reader->chunks_.emplace_back(ref.sha256(), ref.size());
    at += ref.size();
  }
  if (at != digest.size()) {
    return absl::DataLossError(absl::StrCat("manifest of ", digest.ToString(), " covers ", at,
                                            " bytes, not ", digest.size()));
  }
  // Its chunks are kept from a sweep while it is open. The object must still be stored once
  // they are: a sweep may have taken them after the object was removed, before this.
  const_cast<Store*>(this)->AddChunkReader(reader.get());
  reader->registered_ = true;
  if (absl::IsNotFound(GetValue(meta_, digest.Key(), "look up object").status())) {
    return absl::NotFoundError(absl::StrCat("object ", digest.ToString(), " is not stored"));
  }
  return reader;
}

absl::Status ObjectReader::Read(
    uint64_t offset, uint64_t limit, size_t piece_bytes,
    const std::function<absl::Status(uint64_t offset, absl::string_view)>& sink) const {
  return ReadChunks(offset, limit, piece_bytes, verify_, sink);
}

absl::Status ObjectReader::Verify() const {
  if (!info_.chunked) {
    return VerifyBytes(inline_bytes_, info_.digest.sha256(), info_.digest.size(),
                       info_.digest.ToString());
  }
  return ReadChunks(0, 0, 0, /*verify=*/true,
                    [](uint64_t, absl::string_view) { return absl::OkStatus(); });
}

absl::Status ObjectReader::ReadChunks(
    uint64_t offset, uint64_t limit, size_t piece_bytes, bool verify,
    const std::function<absl::Status(uint64_t offset, absl::string_view)>& sink) const {
  const Digest& digest = info_.digest;
  if (offset > digest.size()) {
    return absl::OutOfRangeError(
        absl::StrCat("offset ", offset, " is past the end of ", digest.ToString()));
  }
  if (piece_bytes == 0) piece_bytes = 1 << 20;
  const uint64_t end =
      (limit == 0 || limit > digest.size() - offset) ? digest.size() : offset + limit;
  auto emit = [&](absl::string_view bytes, uint64_t at) -> absl::Status {
    // `bytes` starts at object offset `at`; send its part inside [offset, end).
    uint64_t from = std::max(offset, at);
    uint64_t to = std::min<uint64_t>(end, at + bytes.size());
    for (uint64_t pos = from; pos < to; pos += piece_bytes) {
      uint64_t n = std::min<uint64_t>(piece_bytes, to - pos);
      VAULT_RETURN_IF_ERROR(sink(pos, bytes.substr(pos - at, n)));
    }
    return absl::OkStatus();
  };
  if (!info_.chunked) return emit(inline_bytes_, 0);
  // The first chunk that ends after `offset`.
  size_t i = std::upper_bound(starts_.begin(), starts_.end(), offset) - starts_.begin();
  if (i > 0) --i;
  for (; i < chunks_.size() && starts_[i] < end; ++i) {
    const auto& [hash, size] = chunks_[i];
    if (size == 0) continue;
    rocksdb::PinnableSlice chunk;
    // Every chunk is checked against its SHA-256 below (or by whoever receives it, see
    // ReadCheck::kUnverified), which RocksDB's CRC32C (computed in software by the packaged
    // library) would only repeat.
    rocksdb::ReadOptions ro;
    ro.verify_checksums = false;
    rocksdb::Status got = store_->db_->db()->Get(ro, store_->chunks_, hash, &chunk);
    if (got.IsNotFound()) {
      return absl::DataLossError(
          absl::StrCat("a chunk of ", digest.ToString(), " is missing (corrupt storage)"));
    }
    VAULT_RETURN_IF_ERROR(
        storage::ToStatus(got, absl::StrCat("read a chunk of ", digest.ToString())));
    absl::string_view bytes = storage::View(chunk);
    std::string packed;
    if (bypass_cache_) {
      VAULT_ASSIGN_OR_RETURN(bytes, store_->ResolveUncached(bytes, size, &buffer_));
    } else if (DecodePackRef(bytes, size).has_value()) {
      VAULT_ASSIGN_OR_RETURN(packed, store_->Resolve(std::string(bytes), size));
      bytes = packed;
    }
    if (verify) {
      VAULT_RETURN_IF_ERROR(
          VerifyBytes(bytes, hash, size, absl::StrCat("a chunk of ", digest.ToString())));
    }
    VAULT_RETURN_IF_ERROR(emit(bytes, starts_[i]));
  }
  return absl::OkStatus();
}

absl::Status Store::Read(
    const Digest& digest, uint64_t offset, uint64_t limit, size_t piece_bytes,
    const std::function<absl::Status(uint64_t offset, absl::string_view)>& sink) const {
  VAULT_ASSIGN_OR_RETURN(std::unique_ptr<ObjectReader> reader, OpenReader(digest));
  return reader->Read(offset, limit, piece_bytes, sink);
}

absl::StatusOr<std::string> Store::ReadAll(const Digest& digest, ReadCheck check) const {
  VAULT_ASSIGN_OR_RETURN(std::unique_ptr<ObjectReader> reader, OpenReader(digest, check));
  // An object stored whole was read (and verified) whole: no second copy.
  if (!reader->info_.chunked) return std::move(reader->inline_bytes_);
  std::string out;
  out.reserve(digest.size());
  VAULT_RETURN_IF_ERROR(reader->Read(0, 0, 1 << 20, [&](uint64_t, absl::string_view piece) {
    out.append(piece.data(), piece.size());
    return absl::OkStatus();
  }));
  return out;
}

absl::StatusOr<PutOutcome> PutObject(Store& store, const Digest& digest, absl::string_view data) {
  // Pieces of an upload of a large object.
  constexpr size_t kPieceBytes = 1 << 20;
  if (digest.size() < store.options().chunking_threshold) return store.Put(digest, data);
  if (data.size() != digest.size()) {
    return absl::InvalidArgumentError(absl::StrCat("size mismatch: ", digest.ToString(), " claims ",
                                                   digest.size(), " bytes, got ", data.size()));
  }
  VAULT_ASSIGN_OR_RETURN(std::unique_ptr<Upload> upload, store.StartUpload(digest, 0));
  for (size_t at = 0; at < data.size(); at += kPieceBytes) {
    VAULT_RETURN_IF_ERROR(upload->Append(data.substr(at, kPieceBytes)));
  }
  return upload->Finish();
}

}  // namespace vault::cas
