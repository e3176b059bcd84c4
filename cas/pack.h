// cas/pack: append-only pack files that hold the CAS's large values outside RocksDB.
//
// Why: RocksDB writes a value twice (its WAL, then a blob or table file at flush) and checksums
// it both times with CRC32C, which the Debian-packaged library computes in software (a portable
// build): for large objects that was most of vaultd's CPU. A pack value is written once, with
// pwrite, and checked only by the SHA-256 that addresses it, which every read verifies anyway.
// RocksDB keeps a 24-byte PackRef (EncodePackRef) where the bytes would have been.
//
// Files are `pack-<16 hex digits>` in one directory, filled up to a size and never rewritten;
// a process appends only to files it created (a restart starts a new one). Bytes written but
// never referenced (a crash before the commit, a duplicate, a failed write) and those of removed
// objects are garbage until compaction (Store::Compact) copies a file's live values to the file
// being appended and retires it (Retire). (Bytes that failed their check after being written are
// punched out at once: Discard.)
//
//   VAULT_ASSIGN_OR_RETURN(auto packs, PackStore::Open({.dir = dir + "/packs"}));
//   uint64_t ticket = 0;
//   VAULT_ASSIGN_OR_RETURN(PackRef ref, packs->Append(bytes, &ticket));
//   VAULT_RETURN_IF_ERROR(packs->Sync(ticket));  // durable: now refer to it from RocksDB
//   VAULT_ASSIGN_OR_RETURN(std::string back, packs->Read(ref));
//
// Large values can bypass the page cache (AppendUncached: O_DIRECT, each value starting on a
// 4 KiB boundary, the rest of its last block zero-filled). On a VM, copying into page-cache
// pages just freed to the host costs about as much as hashing the bytes; O_DIRECT hands the
// guest's buffer to the device instead, and the later fdatasync finds no dirty pages to write.
// A file system that refuses O_DIRECT (tmpfs, some FUSE) gets ordinary writes.
//
// Thread-safety: every method is thread-safe. Concurrent Appends write disjoint ranges in
// parallel; concurrent Syncs share one fdatasync per file (group sync).
#ifndef VAULT_CAS_PACK_H_
#define VAULT_CAS_PACK_H_

#include <sys/uio.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/env.h"

namespace vault::cas {

struct PackRef {
  uint64_t file = 0;
  uint64_t offset = 0;
  uint32_t size = 0;
};

// A PackRef as stored in RocksDB: "VPK1" + file + offset (big-endian 64-bit) + size (32-bit).
inline constexpr size_t kPackRefBytes = 24;
std::string EncodePackRef(const PackRef& ref);
// The ref in `value` when `value` is one for a value of `expected_size` bytes; nullopt when
// `value` holds the bytes themselves. Only values of at least kPackRefBytes + 1 bytes are ever
// packed, so a stored value of the expected size is never mistaken for a ref.
std::optional<PackRef> DecodePackRef(absl::string_view value, uint64_t expected_size);

// A kDirectAlignment-aligned buffer that is kept between uses: a fresh one would fault in new
// pages every time, the cost O_DIRECT is there to avoid. Not thread-safe.
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  ~AlignedBuffer();
  // At least `bytes` bytes (contents undefined), or nullptr when memory is short.
  char* Get(size_t bytes);

 private:
  char* data_ = nullptr;
  size_t capacity_ = 0;
};

struct PackOptions {
  std::string dir;
  // The files' Env (common/env.h). Default: common::Env::Default().
  common::Env* env = nullptr;
  // A file takes appends until this size (a larger value gets a file of its own).
  uint64_t file_bytes = uint64_t{256} << 20;
  // fdatasync in Sync (false: Sync only orders, for stores whose RocksDB writes are unsynced).
  bool sync = true;
  // AppendUncached and ReadUncached use O_DIRECT where the file system allows (false: ordinary
  // writes, unpadded, and reads).
  bool direct_writes = true;
};

// The alignment of an O_DIRECT write's offset, length and buffer: the largest logical block size
// in common use, so one value serves every device.
inline constexpr uint64_t kDirectAlignment = 4096;

class PackStore {
 public:
  // Creates the directory (0700) when missing. Reads nothing: files are opened when read.
  static absl::StatusOr<std::unique_ptr<PackStore>> Open(const PackOptions& options);
  PackStore(const PackStore&) = delete;
  PackStore& operator=(const PackStore&) = delete;
  ~PackStore();

  // Writes `bytes` (not yet durable) and sets *ticket for Sync. RESOURCE_EXHAUSTED when the
  // disk is full, UNAVAILABLE on other I/O errors; nothing refers to the bytes then.
  absl::StatusOr<PackRef> Append(absl::string_view bytes, uint64_t* ticket);
  // Appends every value, back to back in one file, with as few system calls as the kernel
  // allows (pwritev); the refs in input order.
  absl::StatusOr<std::vector<PackRef>> AppendMany(absl::Span<const absl::string_view> values,
                                                  uint64_t* ticket);
  // As Append, for a value that is unlikely to be read again soon (a chunk of a large object):
  // written with O_DIRECT, from a 4 KiB-aligned copy, at a 4 KiB-aligned offset. Ordinary
  // writes where O_DIRECT is off, refused at open, or refused by a write (EINVAL: the rest of
  // this process then writes ordinarily).
  absl::StatusOr<PackRef> AppendUncached(absl::string_view bytes, uint64_t* ticket);
  // Appends that went through O_DIRECT so far (for tests and metrics).
  uint64_t direct_appends() const { return direct_appends_.load(std::memory_order_relaxed); }
  // Makes every Append whose ticket is <= `ticket` durable. After an fdatasync failure every
  // later Append and Sync fails (the kernel may have dropped the dirty pages).
  absl::Status Sync(uint64_t ticket);
  // Gives the bytes of a value that nothing refers to back to the file system (a hole punched
  // where they were, which reads as zeros): for a value written before its check failed. An
  // error (e.g. UNIMPLEMENTED where the file system cannot punch holes) leaves them as garbage.
  absl::Status Discard(const PackRef& ref);
  // The bytes a ref names, unverified (the caller checks their SHA-256). DATA_LOSS when the
  // file is missing or too short.
  absl::StatusOr<std::string> Read(const PackRef& ref) const;
  // As Read, with O_DIRECT into `buffer` (the 4 KiB blocks around the value), for bulk reads
  // that should neither fill nor evict the page cache: the bytes are valid until the buffer's
  // next use. An ordinary read where O_DIRECT is refused.
  absl::StatusOr<absl::string_view> ReadUncached(const PackRef& ref, AlignedBuffer* buffer) const;

  struct FileInfo {
    uint64_t id = 0;
    uint64_t bytes = 0;      // its size on disk
    bool appending = false;  // this process appends to it now: never rewritten
  };
  // The pack files in the directory, by id (those retired and not yet released left out).
  absl::StatusOr<std::vector<FileInfo>> ListFiles() const;
  // Removes a file whose live values were copied elsewhere (compaction): its name goes now, and
  // reads of it (through a ref read before the move) keep working until ReleaseRetired. Refused
  // (FAILED_PRECONDITION) for the file being appended to.
  absl::Status Retire(uint64_t id);
  // Closes the files retired before `before`: their space goes back to the file system.
  void ReleaseRetired(absl::Time before);
  // Leases: every value appended holds one on its file until the caller says its ref is
  // recorded (or given up) with Release. Compaction leaves a file with leases alone: bytes
  // written there may be about to be referred to. Only the file being appended to gains leases.
  void Release(absl::Span<const PackRef> refs);
  bool Leased(uint64_t id) const;
  // The next append starts a new file, so the one being appended to now can be compacted once
  // its leases are released.
  void Seal();

  const std::string& dir() const { return options_.dir; }

 private:
  struct File {
    uint64_t id = 0;
    std::unique_ptr<common::EnvFile> file;
    // The same file with O_DIRECT (read-write for files of this run, read-only for older
    // ones), or null where refused.
    std::unique_ptr<common::EnvFile> direct;
    bool dirty = false;  // guarded by PackStore::mu_
    std::atomic<int64_t> leases{0};
  };
  explicit PackStore(const PackOptions& options)
      : options_(options), env_(options.env != nullptr ? options.env : common::Env::Default()) {}
  absl::StatusOr<std::shared_ptr<File>> OpenForRead(uint64_t id) const;
  absl::Status NewFileLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string PathOf(uint64_t id) const;
  // Reserves `bytes` at the tail of the current file (a new file when it would overflow), the
  // start rounded up to `align` and the tail after it too.
  absl::StatusOr<std::pair<std::shared_ptr<File>, uint64_t>> Reserve(uint64_t bytes,
                                                                     uint64_t align);
  // Hands out the ticket of a finished write to `file`.
  uint64_t Completed(const std::shared_ptr<File>& file);

  const PackOptions options_;
  common::Env* const env_;
  mutable absl::Mutex mu_;
  std::shared_ptr<File> current_ ABSL_GUARDED_BY(mu_);
  uint64_t tail_ ABSL_GUARDED_BY(mu_) = 0;       // next offset in current_
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 0;    // past every file in the directory
  uint64_t completed_ ABSL_GUARDED_BY(mu_) = 0;  // tickets handed out (writes finished)
  std::vector<std::shared_ptr<File>> dirty_ ABSL_GUARDED_BY(mu_);
  absl::Status failed_ ABSL_GUARDED_BY(mu_);
  mutable absl::flat_hash_map<uint64_t, std::shared_ptr<File>> readers_ ABSL_GUARDED_BY(mu_);
  struct Retired {
    std::shared_ptr<File> file;
    absl::Time at;
  };
  absl::flat_hash_map<uint64_t, Retired> retired_ ABSL_GUARDED_BY(mu_);
  // The files this process created (the only ones it appends to), for their leases.
  absl::flat_hash_map<uint64_t, std::shared_ptr<File>> written_ ABSL_GUARDED_BY(mu_);

  std::atomic<bool> direct_ok_{true};                // cleared when a write refuses O_DIRECT
  mutable std::atomic<bool> direct_reads_ok_{true};  // cleared when a read refuses it
  std::atomic<uint64_t> direct_appends_{0};

  absl::Mutex sync_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  uint64_t synced_ ABSL_GUARDED_BY(sync_mu_) = 0;  // tickets known durable
};

}  // namespace vault::cas

#endif  // VAULT_CAS_PACK_H_
