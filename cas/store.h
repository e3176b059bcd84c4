// cas: the content-addressed store over the vault's RocksDB.
//
// Objects are addressed by Digest (SHA-256 + size). Every byte given to the store is hashed
// and checked against the claimed digest; a mismatch is refused (INVALID_ARGUMENT) and no
// object is stored. Objects below the chunking threshold are stored whole (cas_data); larger
// ones as content-defined chunks (cas_chunks) plus a manifest, so identical chunks are stored
// once and uploads resume. With StoreOptions::pack_dir, values of pack_min_bytes and more (inline
// objects and chunks) are written to pack files (cas/pack.h) and RocksDB keeps a ref to them. Every
// newly stored object gets the next change-feed sequence number (cas_feed), assigned in commit
// order with no gaps; a write is acknowledged only once durable, and concurrent writes share one
// RocksDB write (group commit).
//
//   VAULT_ASSIGN_OR_RETURN(auto store, cas::Store::Open(db.get(), cas::StoreOptions{}));
//   VAULT_ASSIGN_OR_RETURN(cas::PutOutcome out, store->Put(Digest::Of(bytes), bytes));
//   VAULT_ASSIGN_OR_RETURN(std::string back, store->ReadAll(digest));
//
//   // Large objects, streamed and resumable:
//   VAULT_ASSIGN_OR_RETURN(auto upload, store->StartUpload(digest, store->UploadOffset(d)));
//   VAULT_RETURN_IF_ERROR(upload->Append(piece)); ...
//   VAULT_ASSIGN_OR_RETURN(cas::PutOutcome out, upload->Finish());
//
// Thread-safety: every Store method is thread-safe. An Upload belongs to one thread at a time;
// a second StartUpload of the same object takes it over, and the first one's next Append or
// Finish answers ABORTED.
#ifndef VAULT_CAS_STORE_H_
#define VAULT_CAS_STORE_H_

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "cas/chunker.h"
#include "cas/digest.h"
#include "cas/pack.h"
#include "common/env.h"
#include "rocksdb/write_batch.h"
#include "storage/database.h"
#include "storage/group_commit.h"
#include "vault/v1/cas_records.pb.h"

namespace vault::cas {

struct StoreOptions {
  uint64_t max_object_bytes = uint64_t{64} << 30;
  uint64_t chunking_threshold = uint64_t{4} << 20;
  size_t chunk_avg_bytes = 512 << 10;
  absl::Duration upload_ttl = absl::Hours(24);
  // Bytes that unfinished uploads of inline objects may buffer at once (RESOURCE_EXHAUSTED past
  // it).
  uint64_t max_upload_buffer_bytes = uint64_t{256} << 20;
  // Pack files (cas/pack.h) for values of at least pack_min_bytes: inline objects and chunks.
  // Empty: every value stays in RocksDB.
  std::string pack_dir;
  // The pack files' Env (common/env.h). Default: common::Env::Default(). The database has its
  // own (storage::DatabaseOptions::env).
  common::Env* env = nullptr;
  uint64_t pack_min_bytes = 1 << 10;
  // Chunks of large objects go to the packs with O_DIRECT where the file system allows it
  // (PackStore::AppendUncached).
  bool direct_chunk_writes = true;
  // An upload makes its chunks durable (one pack sync, one RocksDB write) per this many bytes,
  // and at Finish; the resume point moves by the same steps.
  uint64_t pack_sync_bytes = 8 << 20;
  // Puts are refused (RESOURCE_EXHAUSTED) while the file system of the pack directory (or, without
  // one, nothing is checked) has less than this free: the rest is kept for RocksDB, whose
  // packaged build aborts when its WAL meets a full disk, and for the audit log. 0: no check.
  uint64_t min_free_bytes = 64 << 20;
  // A put of an object already stored rewrites the record's confirmed time when the later of it
  // and the stored time is older than this (half the collector's grace period, design §12): a
  // collection that began before the put then leaves the object alone.
  absl::Duration confirm_after = absl::Minutes(30);
};

struct PutOutcome {
  uint64_t seq = 0;              // the object's feed sequence number
  bool already_present = false;  // stored before; nothing was written
};

struct RemoveOutcome {
  bool removed = false;      // false: it was not stored, or kept_recent
  bool kept_recent = false;  // stored or confirmed at or after RemoveOptions::untouched_before
  uint64_t seq = 0;          // the removed object's feed sequence number
};

struct RemoveOptions {
  // Removes the object only when it was stored and last confirmed before this time (the
  // collector's cutoff); an object a put stored or confirmed since is kept (kept_recent).
  absl::Time untouched_before = absl::InfiniteFuture();
  // Called in the group commit when the object is removed, to add writes that must be atomic
  // with the removal (the refund of the principal it was charged to). Its error fails the
  // removal alone.
  std::function<absl::Status(const Digest&, rocksdb::WriteBatch*)> also;
};

struct CompactOptions {
  // A pack file whose live bytes are under this fraction of its size is rewritten.
  double max_live_fraction = 0.5;
  bool dry_run = false;
  // A rewritten file is closed this long after its name is removed, for reads through a ref
  // read just before it moved (PackStore::Retire).
  absl::Duration retire_delay = absl::Seconds(2);
  // Asked between steps: its error ends the run (what was moved stays moved).
  std::function<absl::Status()> keep_going;
};

// What a compaction found and did (Store::Compact). Files are the pack files present when it
// began, the one being appended to excluded.
struct CompactReport {
  uint64_t files = 0;
  uint64_t file_bytes = 0;   // their size on disk
  uint64_t live_bytes = 0;   // bytes of theirs a ref points to
  uint64_t rewritten = 0;    // files whose live values were copied and that were removed
  uint64_t freed_bytes = 0;  // the size of those files
  uint64_t copied_bytes = 0;
  uint64_t copied_values = 0;
  uint64_t kept_damaged = 0;  // values that failed their hash: their file stays
};

// What a sweep of unreferenced chunks found (Store::SweepChunks).
struct ChunkSweep {
  uint64_t chunks = 0;        // chunks stored when it began
  uint64_t unreferenced = 0;  // named by no object and no open upload
  uint64_t bytes = 0;         // their bytes
  uint64_t removed = 0;       // removed (0 for a dry run)
};

struct PutItem {
  Digest digest;
  absl::string_view data;
};

struct ObjectInfo {
  Digest digest;
  uint64_t seq = 0;
  bool chunked = false;
  uint32_t chunk_count = 0;
  int64_t stored_unix_ms = 0;
  int64_t confirmed_unix_ms = 0;  // 0: never confirmed by a later put
  // The later of the two: what the collector's grace period counts from.
  int64_t touched_unix_ms() const { return std::max(stored_unix_ms, confirmed_unix_ms); }
};

struct FeedItem {
  uint64_t seq = 0;
  Digest digest;
  int64_t stored_unix_ms = 0;
};

// A chunk of a large object: the SHA-256 of its bytes and their count.
struct ChunkInfo {
  std::string sha256;
  uint32_t size = 0;
};

// The stored objects whose keys fall in a range (see Store::RangeFingerprint).
struct RangeSummary {
  uint64_t count = 0;
  std::string fingerprint;      // SHA-256 of the keys in order (32 bytes)
  std::vector<Digest> digests;  // when count <= list_below
};

struct StoreTotals {
  uint64_t objects = 0;
  uint64_t bytes = 0;
  uint64_t removed = 0;  // objects removed since the store began
};

class Store;

// Whether a read checks the stored bytes against their hashes (Store::OpenReader).
enum class ReadCheck { kVerified, kUnverified };

// Reads one stored object: the record and, for a chunked object, its manifest are loaded and
// verified once (an inline object's bytes are read and verified once), then any number of
// ranges are served; a range costs a binary search plus the chunks it covers, each verified
// against its hash. Thread-safety: const methods may be called from several threads.
class ObjectReader {
 public:
  ~ObjectReader();
  ObjectReader(const ObjectReader&) = delete;
  ObjectReader& operator=(const ObjectReader&) = delete;
  const ObjectInfo& info() const { return info_; }
  // A chunked object's chunks in order, (sha256, size) each; empty for an inline object.
  const std::vector<std::pair<std::string, uint32_t>>& chunks() const { return chunks_; }
  // Streams [offset, offset + limit) (limit 0: to the end) to `sink` in pieces of at most
  // `piece_bytes`. OUT_OF_RANGE when offset > size; DATA_LOSS on damaged storage.
  absl::Status Read(
      uint64_t offset, uint64_t limit, size_t piece_bytes,
      const std::function<absl::Status(uint64_t offset, absl::string_view)>& sink) const;
  // Later Reads take packed chunks with O_DIRECT into a buffer of this reader's (see
  // PackStore::ReadUncached): for bulk reads, which would only fill the page cache with bytes
  // read once and evict hotter ones. Such a reader must then be used by one thread at a time.
  void BypassCache() { bypass_cache_ = true; }
  // Reads every chunk (an inline object: its bytes) and checks it: DATA_LOSS naming the object
  // when one is damaged. For a reader opened with ReadCheck::kUnverified.
  absl::Status Verify() const;

 private:
  friend class Store;
  explicit ObjectReader(const Store* store) : store_(store) {}
  absl::Status ReadChunks(
      uint64_t offset, uint64_t limit, size_t piece_bytes, bool verify,
      const std::function<absl::Status(uint64_t offset, absl::string_view)>& sink) const;
  const Store* const store_;
  bool verify_ = true;
  bool bypass_cache_ = false;
  bool registered_ = false;       // its chunks are kept from a sweep (Store::AddChunkReader)
  mutable AlignedBuffer buffer_;  // for bypass_cache_
  ObjectInfo info_;
  std::string inline_bytes_;                              // !chunked
  std::vector<std::pair<std::string, uint32_t>> chunks_;  // (sha256, size), chunked
  std::vector<uint64_t> starts_;                          // object offset of each chunk
};

// A streaming, resumable upload of one object. Destroying it without Finish keeps the durable
// progress (chunk boundaries) for a later resume.
class Upload {
 public:
  ~Upload();
  Upload(const Upload&) = delete;
  Upload& operator=(const Upload&) = delete;

  // Bytes received so far (including those before a resume point).
  uint64_t offset() const { return offset_; }
  // Takes the next bytes. INVALID_ARGUMENT past the claimed size. `chunk_end`: with
  // UseChunkHints, the sender's chunk ends with these bytes.
  absl::Status Append(absl::string_view data, bool chunk_end = false);
  // The sender marks the ends of its own chunks (Append's chunk_end), as a replicating peer
  // does: the bytes between two marks become one chunk here without a search for a
  // content-defined boundary, as long as each is within this store's chunk size bounds (the
  // object's last chunk may be shorter). A mark outside the bounds, or a chunk growing past the
  // largest size, switches the rest of the upload back to content-defined chunking: marks can
  // cost deduplication, never correctness, since every chunk is hashed here all the same.
  void UseChunkHints() { hints_ = chunked_; }
  // Takes as the next bytes a chunk this store already holds (read and verified here, then
  // hashed like received bytes). FAILED_PRECONDITION when the store lacks it.
  absl::Status AppendStoredChunk(absl::string_view sha256, uint32_t size);
  // Verifies the whole content and stores the object. INVALID_ARGUMENT on a digest mismatch
  // (the upload is discarded); FAILED_PRECONDITION when fewer bytes than the size arrived (the
  // durable part stays for a resume).
  absl::StatusOr<PutOutcome> Finish();

 private:
  friend class Store;
  Upload(Store* store, Digest digest);
  absl::Status FlushChunks(bool eof);
  // Hashes, records and writes (to the packs) one chunk: the next bytes of the object.
  absl::Status TakeChunk(absl::string_view chunk);
  // Makes the chunks taken since the last call durable and records them for a resume.
  absl::Status WritePending();

  Store* const store_;
  const Digest digest_;
  const std::string key_;
  uint64_t offset_ = 0;
  bool present_ = false;        // object already stored: data is discarded
  PutOutcome present_outcome_;  // for present_
  bool chunked_ = false;
  std::string inline_data_;  // !chunked_
  std::unique_ptr<Chunker> chunker_;
  bool hints_ = false;  // cutting at the sender's marks (UseChunkHints)
  std::vector<std::pair<std::string, uint32_t>> chunks_;  // (sha256, size) in order
  Sha256 hash_;
  uint64_t committed_offset_ = 0;  // durable bytes (chunk boundaries)
  uint32_t chunk_count_ = 0;       // chunks taken (durable or pending)
  // chunks_[chunks_released_, chunks_noted_) are noted as taken and named by no durable record
  // yet (Store::NoteChunkTaken).
  size_t chunks_noted_ = 0;
  size_t chunks_released_ = 0;
  std::vector<PackRef> pending_leases_;  // pack leases of the chunks in pending_
  std::optional<PackRef> inline_lease_;  // Finish: the pack lease of an inline object's bytes
  // Chunks taken but not yet durable: their RocksDB records, the pack ticket of their bytes,
  // and the offset they end at.
  std::unique_ptr<rocksdb::WriteBatch> pending_;
  uint64_t pending_bytes_ = 0;
  uint64_t pending_ticket_ = 0;
  uint64_t pending_offset_ = 0;
  int64_t started_unix_ms_ = 0;
  bool finished_ = false;
  uint64_t reserved_ = 0;    // bytes of the store's upload buffer budget held
  uint64_t generation_ = 0;  // this upload's claim on the object (see Store::active_uploads_)
};

class Store {
 public:
  // The column families the store needs; node/ opens the Database with them.
  static std::vector<storage::ColumnFamilySpec> ColumnFamilies();
  static absl::StatusOr<std::unique_ptr<Store>> Open(storage::Database* db,
                                                     const StoreOptions& options);
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;
  ~Store();

  // Verifies `data` against `digest` and stores it.
  absl::StatusOr<PutOutcome> Put(const Digest& digest, absl::string_view data);
  // Many small objects, each verified; all valid ones are stored by one durable write.
  std::vector<absl::StatusOr<PutOutcome>> PutMany(absl::Span<const PutItem> items);

  // The digests that are not stored, in input order, without duplicates.
  absl::StatusOr<std::vector<Digest>> FindMissing(absl::Span<const Digest> digests) const;
  absl::StatusOr<bool> Contains(const Digest& digest) const;
  // The chunks (of any object) not stored here, in input order, without duplicates.
  absl::StatusOr<std::vector<ChunkInfo>> FindMissingChunks(
      absl::Span<const ChunkInfo> chunks) const;
  // A stored chunk's bytes, verified. NOT_FOUND when it is not stored; DATA_LOSS when damaged.
  absl::StatusOr<std::string> ReadChunk(absl::string_view sha256, uint32_t size) const;
  // The objects whose 40-byte keys (Digest::Key) lie in [start, end) (end "": no upper bound):
  // their count, the SHA-256 of their keys in order and, when at most `list_below`, their
  // digests. Reads the keys of the range (a full scan for the whole key space).
  absl::StatusOr<RangeSummary> RangeFingerprint(absl::string_view start, absl::string_view end,
                                                uint64_t list_below) const;
  // RangeFingerprint of each range, with one iterator for all of them (an iterator over the
  // hashed memtable costs a copy of it, so many ranges must not each open their own).
  absl::StatusOr<std::vector<RangeSummary>> RangeFingerprints(
      absl::Span<const std::pair<std::string, std::string>> ranges, uint64_t list_below) const;
  // Digests of the stored objects in key order, from the first key >= `start`, at most `limit`.
  absl::StatusOr<std::vector<Digest>> ListKeys(absl::string_view start, size_t limit) const;
  // Rewrites the stored bytes of an object this store holds with `data`, which must hash to
  // `digest` (INVALID_ARGUMENT otherwise): inline bytes, or every chunk of its manifest (a
  // manifest that is itself damaged is replaced). The object keeps its record and feed entry.
  // Used by the scrub to repair damaged storage with a verified copy from a peer.
  absl::Status Repair(const Digest& digest, absl::string_view data);
  // NOT_FOUND when the object is not stored.
  absl::StatusOr<ObjectInfo> Stat(const Digest& digest) const;
  // Removes a stored object: its record and its bytes entry (a chunked object's manifest) and
  // its share of the totals, in one durable write made in the same order as puts (the group
  // commit), so a put committed after it stores the object again and a put before it answered
  // already_present. Its feed entry stays (readers of the feed find the object gone); its chunks
  // and pack bytes stay too, garbage for collection and compaction (design §12). Readers that
  // opened the object before finish reading it.
  absl::StatusOr<RemoveOutcome> Remove(const Digest& digest, const RemoveOptions& options = {});
  // Removes many objects with one durable write per group (RemoveOptions::also is called with
  // the digest of each object removed); the outcomes in input order.
  std::vector<absl::StatusOr<RemoveOutcome>> RemoveMany(absl::Span<const Digest> digests,
                                                        const RemoveOptions& options = {});
  // Confirms a stored object now, whatever its age: something new holds it (a pin, an agent given
  // it), and a removal that began before (a collection's, an operator's) must leave it alone.
  // NOT_FOUND when it is not stored, in the same order as removals: then it is gone for good.
  absl::Status Touch(const Digest& digest);
  // Every stored object, in key order, handed to `page` `page_size` at a time, through one
  // iterator (a new one per page would copy the hashed memtable each time): the objects as they
  // were when the walk began. `page`'s error ends the walk and is returned.
  absl::Status ForEachObjectPage(
      size_t page_size,
      const std::function<absl::Status(std::vector<ObjectInfo>& page)>& page) const;
  // Removes the chunks that no stored object's manifest and no upload names (dry_run: only
  // counts them). Safe while puts, uploads and reads run: a chunk an upload takes while the
  // sweep runs, or that a reader opened before its object was removed still reads, is kept
  // (design §12). `keep_going` is asked between steps and ends the sweep with its error.
  absl::StatusOr<ChunkSweep> SweepChunks(bool dry_run,
                                         const std::function<absl::Status()>& keep_going = nullptr);
  // Rewrites the pack files whose live fraction is under options.max_live_fraction (and removes
  // those with nothing live): their live values are read, checked against their hashes, copied
  // to the file being appended, synced, and their refs moved (each only if it still points where
  // it did: a value removed or stored again meanwhile is left alone); then the file is retired.
  // A crash at any point leaves every ref pointing at good bytes, and at most copies no ref
  // points to, which the next run takes. Safe while puts, reads and removals run.
  absl::StatusOr<CompactReport> Compact(const CompactOptions& options);
  // Durable bytes of an interrupted upload of `digest` (0 when there is none).
  absl::StatusOr<uint64_t> UploadOffset(const Digest& digest) const;

  // Streams bytes [offset, offset + limit) (limit 0: to the end) to `sink` in pieces of at most
  // `piece_bytes`. Stored bytes are verified against their hashes as they are read: DATA_LOSS
  // rather than corrupt bytes. OUT_OF_RANGE when offset > size.
  absl::Status Read(
      const Digest& digest, uint64_t offset, uint64_t limit, size_t piece_bytes,
      const std::function<absl::Status(uint64_t offset, absl::string_view)>& sink) const;
  // ReadCheck::kUnverified: see OpenReader.
  absl::StatusOr<std::string> ReadAll(const Digest& digest,
                                      ReadCheck check = ReadCheck::kVerified) const;
  // NOT_FOUND when the object is not stored; DATA_LOSS when its record or manifest is damaged.
  // kUnverified: the bytes (an inline object's, or a chunked one's chunks) are passed on without
  // being checked against their SHA-256, for a receiver that hashes every byte itself (a
  // member's Put does): they are hashed once instead of twice. Damage then shows there, as a
  // digest mismatch; ObjectReader::Verify tells whether it is this store's. (The record and a
  // manifest are checked either way.)
  absl::StatusOr<std::unique_ptr<ObjectReader>> OpenReader(
      const Digest& digest, ReadCheck check = ReadCheck::kVerified) const;

  // Begins (offset 0) or resumes (offset = UploadOffset) a streaming upload.
  absl::StatusOr<std::unique_ptr<Upload>> StartUpload(const Digest& digest, uint64_t offset);

  // Feed entries with seq > after_seq, at most `limit` (0: no limit).
  absl::StatusOr<std::vector<FeedItem>> ReadFeed(uint64_t after_seq, size_t limit) const;
  uint64_t last_seq() const { return last_seq_.load(std::memory_order_acquire); }
  // Registers `wake`, to be called once from a committing thread (or Close) when
  // last_seq() > after_seq. `wake` must be quick (schedule work elsewhere). `key` names the
  // waiter (one per key at a time, e.g. the address of the waiting stream) for RemoveWaiter.
  // Never calls `wake` itself: kRegistered, or kReady (something newer is there, or the store
  // is closed) or kCancelled (*cancelled was set; checked under the same lock RemoveWaiter
  // takes, so a canceller either sees the waiter registered or the caller sees the flag).
  enum class WaitResult { kRegistered, kReady, kCancelled };
  WaitResult AddWaiter(uintptr_t key, uint64_t after_seq, const std::atomic<bool>* cancelled,
                       std::function<void()> wake);
  // True when the waiter was removed before it was called; then it never will be.
  bool RemoveWaiter(uintptr_t key);
  // Wakes every waiter; later ones are woken at once.
  void Close();
  bool closed() const;
  StoreTotals totals() const;

  const StoreOptions& options() const { return options_; }

 private:
  friend class Upload;
  friend class ObjectReader;
  // Chunks a sweep must not take though no durable record names them yet or any longer
  // (store_gc.cc): those of uploads not yet written, those taken since the sweep began, and
  // those of open readers.
  void NoteChunkTaken(const std::string& sha256);
  void NoteChunksWritten(absl::Span<const std::pair<std::string, uint32_t>> chunks);
  void AddChunkReader(const ObjectReader* reader);
  void RemoveChunkReader(const ObjectReader* reader);
  struct CommitOp {
    const Digest* digest = nullptr;
    absl::string_view data;  // inline bytes, or the serialized manifest
    bool chunked = false;
    uint32_t chunk_count = 0;
    bool from_upload = false;                 // delete the upload's records
    bool remove = false;                      // Remove: delete the object instead of storing it
    int64_t untouched_before_ms = INT64_MAX;  // Remove: RemoveOptions::untouched_before
    const std::function<absl::Status(const Digest&, rocksdb::WriteBatch*)>* also = nullptr;
    bool touch = false;  // Touch: confirm the stored object now (NOT_FOUND when not stored)
    // Compact: replace the object's bytes entry `move_from` (a ref) with `data` (a new ref),
    // only if it still holds move_from; outcome.already_present says whether it did.
    bool move = false;
    absl::string_view move_from;
    bool kept_recent = false;  // Remove: left alone (untouched_before_ms)
    PutOutcome outcome;        // for a remove: seq of the removed object; already_present: it was
                               // stored (and is removed)
    absl::Status status;       // this item's own failure (the group's write may still succeed)
  };

  Store(storage::Database* db, const StoreOptions& options, ChunkerParams chunker);
  absl::Status Recover();
  absl::Status PrepareGroup(absl::Span<CommitOp* const> ops, rocksdb::WriteBatch* batch);
  void FinishGroup(absl::Span<CommitOp* const> ops, const absl::Status& written);
  absl::Status CheckSize(const Digest& digest) const;
  // RESOURCE_EXHAUSTED when storing `bytes` more would leave less than min_free_bytes free.
  absl::Status CheckSpace(uint64_t bytes) const;
  // Looks up object records; (*values)[i] and (*statuses)[i] answer keys[i].
  void LookupMeta(const std::vector<std::string>& keys, std::vector<rocksdb::PinnableSlice>* values,
                  std::vector<rocksdb::Status>* statuses) const;
  void DeleteUploadRecords(const std::string& key, rocksdb::WriteBatch* batch) const;
  // Stores one chunk (once per content) and appends it to the upload's chunk list: its bytes go
  // to a pack file now (raising *ticket), its records into `batch`, which the caller writes
  // once the pack is synced up to *ticket.
  absl::Status PersistChunk(const std::string& upload_key, uint32_t index, absl::string_view chunk,
                            const std::string& chunk_hash, const vault::v1::UploadRecord& rec,
                            rocksdb::WriteBatch* batch, uint64_t* ticket,
                            std::vector<PackRef>* leases);
  bool ShouldPack(size_t bytes) const {
    return packs_ != nullptr && bytes >= options_.pack_min_bytes;
  }
  // Writes `bytes` to a pack file and makes them durable; the ref to store in their place.
  absl::StatusOr<std::string> PackNow(absl::string_view bytes);
  // A stored value of `expected_size` bytes: `value` itself, or the pack bytes it refers to.
  absl::StatusOr<std::string> Resolve(std::string value, uint64_t expected_size) const;
  // As Resolve, for a packed value read with PackStore::ReadUncached into `buffer`; `value`
  // itself when it holds the bytes.
  absl::StatusOr<absl::string_view> ResolveUncached(absl::string_view value, uint64_t expected_size,
                                                    AlignedBuffer* buffer) const;
  // The ref a stored value holds (nullopt: the value is the bytes), checked against the size.
  absl::StatusOr<std::optional<PackRef>> RefOf(absl::string_view value,
                                               uint64_t expected_size) const;
  absl::StatusOr<std::string> GetValue(rocksdb::ColumnFamilyHandle* cf, const std::string& key,
                                       absl::string_view what) const;
  void ReleaseUpload(const std::string& key, uint64_t generation, uint64_t reserved);
  // ABORTED when a newer upload of the object took it over.
  absl::Status CheckCurrentUpload(const std::string& key, uint64_t generation) const;

  storage::Database* const db_;
  const StoreOptions options_;
  const ChunkerParams chunker_params_;
  rocksdb::ColumnFamilyHandle* const meta_;
  rocksdb::ColumnFamilyHandle* const data_;
  rocksdb::ColumnFamilyHandle* const chunks_;
  rocksdb::ColumnFamilyHandle* const chunk_index_;
  rocksdb::ColumnFamilyHandle* const uploads_;
  rocksdb::ColumnFamilyHandle* const feed_;
  std::unique_ptr<PackStore> packs_;  // null without StoreOptions::pack_dir

  // Owned by whichever thread is the group-commit leader (serial by construction).
  uint64_t next_seq_ = 1;
  StoreTotals leader_totals_;
  uint64_t pending_next_seq_ = 1;
  StoreTotals pending_totals_;
  // PutMany's hash of one large object, on a helper thread (on the caller's when none can start).
  static std::future<std::string> HashBeside(absl::string_view data);
  // Gives back the bytes of a put that failed its check (PackStore::Discard); when that fails,
  // turns hashing beside the write off for good.
  void DiscardBeside(const std::optional<PackRef>& written);
  std::atomic<bool> hash_beside_{true};
  std::unique_ptr<storage::GroupCommitter<CommitOp>> committer_;

  std::atomic<uint64_t> last_seq_{0};
  mutable absl::Mutex mu_;
  StoreTotals totals_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  // The current upload of each object, by generation: a newer StartUpload takes the object over
  // (a client that lost its connection must be able to resume at once) and the older upload
  // gets ABORTED at its next step.
  absl::flat_hash_map<std::string, uint64_t> active_uploads_ ABSL_GUARDED_BY(mu_);
  uint64_t upload_generation_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t upload_buffer_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  struct Waiter {
    uint64_t after_seq;
    std::function<void()> wake;
  };
  absl::flat_hash_map<uintptr_t, Waiter> waiters_ ABSL_GUARDED_BY(mu_);
  // See NoteChunkTaken. Taken after mu_ when both are held.
  mutable absl::Mutex chunk_mu_ ABSL_ACQUIRED_AFTER(mu_);
  absl::flat_hash_map<std::string, uint32_t> chunks_in_flight_ ABSL_GUARDED_BY(chunk_mu_);
  bool sweeping_ ABSL_GUARDED_BY(chunk_mu_) = false;
  absl::flat_hash_set<std::string> taken_while_sweeping_ ABSL_GUARDED_BY(chunk_mu_);
  absl::flat_hash_set<const ObjectReader*> chunk_readers_ ABSL_GUARDED_BY(chunk_mu_);
  absl::Mutex sweep_mu_;  // one sweep at a time
  // Removes and returns the waiters due at `seq` (all of them when closed_).
  std::vector<std::function<void()>> TakeDueWaiters(uint64_t seq)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
};

// Store::Touch as an answer to "is it stored?": false when it is not. For a caller about to
// hold the object (design §12).
absl::StatusOr<bool> TouchIfStored(Store& store, const Digest& digest);

// Stores `data` as `digest` whatever its size: one Put below the store's chunking threshold, a
// streaming upload in pieces above it (the CAS checks every byte either way).
absl::StatusOr<PutOutcome> PutObject(Store& store, const Digest& digest, absl::string_view data);

}  // namespace vault::cas

#endif  // VAULT_CAS_STORE_H_
