// audit/log_store: where a log lives in the vault's RocksDB — the vault's own log and its
// mirrors of every peer's log use the same records, keyed by the log's name (a vault name).
//
//   audit_entries  <log> 0x00 <be64 seq>                 -> leaf hash (32) || entry bytes
//   audit_nodes    <log> 0x00 <level u8> <be64 index>    -> 32-byte hash of a perfect subtree,
//                                                           level >= 1 (level 0 is in the entry)
//   audit_meta     "head/" <log>   -> LogHead            (size, last leaf hash)
//                  "cp/" <log>     -> StoredCheckpoint   (latest signed checkpoint)
//                  "mirror/" <log> -> MirrorStatusRecord (mirrors only)
//
// Every perfect subtree is stored (about one node per entry), so a proof or a root for any size
// is O(log n) point reads through Reader(). Writers (AuditLog, Mirror) put records into their own
// WriteBatch with the Add* methods and write it once.
//
//   LogStore store(db, "vault-a");
//   VAULT_ASSIGN_OR_RETURN(vault::v1::LogHead head, store.ReadHead());
//   VAULT_ASSIGN_OR_RETURN(Hash root, RootAt(head.size(), store.Reader()));
//
// Thread-safety: const methods are thread-safe (RocksDB reads); a LogStore is immutable.
#ifndef VAULT_AUDIT_LOG_STORE_H_
#define VAULT_AUDIT_LOG_STORE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "audit/merkle.h"
#include "rocksdb/iterator.h"
#include "rocksdb/write_batch.h"
#include "storage/database.h"
#include "vault/v1/audit.pb.h"

namespace vault::audit {

class LogStore {
 public:
  static std::vector<storage::ColumnFamilySpec> ColumnFamilies();

  LogStore(const storage::Database* db, std::string log);

  const std::string& log() const { return log_; }
  const storage::Database* db() const { return db_; }

  // The head; an empty head (size 0) when the log has no entries yet.
  absl::StatusOr<vault::v1::LogHead> ReadHead() const;
  // The latest stored checkpoint, or nullopt.
  absl::StatusOr<std::optional<vault::v1::StoredCheckpoint>> ReadCheckpoint() const;
  // The entry bytes of `seq`. NOT_FOUND when absent, DATA_LOSS when the record is malformed.
  absl::StatusOr<std::string> ReadEntry(uint64_t seq) const;
  // Entries [from, to): at least one (when from < to), then as many as fit in max_count and
  // max_bytes. DATA_LOSS when a sequence number in the range is missing.
  absl::StatusOr<std::vector<std::string>> ReadEntries(uint64_t from, uint64_t to, size_t max_count,
                                                       size_t max_bytes) const;
  // Reads stored perfect-subtree hashes (level 0 from the entry records) in one MultiGet.
  // DATA_LOSS when one is missing or not 32 bytes.
  NodeReader Reader() const;

  // Visits stored entry records in key order from `from`: fn(seq, leaf hash, entry bytes).
  // A malformed record (short value) is passed with an empty leaf hash view. fn returns false to
  // stop.
  // `verify_checksums` false skips RocksDB's block CRC32C: only for readers that hash every byte
  // themselves (whole-log verification), where it would check the same bytes twice.
  absl::Status ScanEntries(uint64_t from,
                           const std::function<bool(uint64_t seq, absl::string_view leaf_hash,
                                                    absl::string_view entry)>& fn,
                           bool verify_checksums = true) const;
  // Walks the stored nodes of one level (>= 1) in index order.
  class NodeCursor {
   public:
    bool Valid() const { return it_->Valid(); }
    uint64_t index() const;
    absl::string_view hash() const { return storage::View(it_->value()); }
    void Next() { it_->Next(); }
    absl::Status status() const;

   private:
    friend class LogStore;
    struct Bound {
      std::string key;
      rocksdb::Slice slice;
    };
    NodeCursor() = default;
    std::string lower_;
    std::unique_ptr<Bound> upper_;  // the iterator's iterate_upper_bound: must outlive it_
    std::unique_ptr<rocksdb::Iterator> it_;
  };
  NodeCursor Nodes(uint8_t level) const;

  void AddEntry(rocksdb::WriteBatch* batch, uint64_t seq, const Hash& leaf_hash,
                absl::string_view entry) const;
  // Level 0 is ignored: a leaf's hash is stored with its entry.
  void AddNode(rocksdb::WriteBatch* batch, NodeId id, const Hash& hash) const;
  void SetHead(rocksdb::WriteBatch* batch, const vault::v1::LogHead& head) const;
  void SetCheckpoint(rocksdb::WriteBatch* batch, const vault::v1::StoredCheckpoint& cp) const;

  // Mirror bookkeeping (audit_meta "mirror/<log>").
  absl::StatusOr<std::optional<vault::v1::MirrorStatus>> ReadMirrorStatus() const;
  void SetMirrorStatus(rocksdb::WriteBatch* batch, const vault::v1::MirrorStatus& status) const;

  // Key of an entry / a node (exposed for tests that tamper with the records).
  std::string EntryKey(uint64_t seq) const;
  std::string NodeKey(NodeId id) const;
  rocksdb::ColumnFamilyHandle* entries_handle() const { return entries_; }
  rocksdb::ColumnFamilyHandle* nodes_handle() const { return nodes_; }

 private:
  absl::StatusOr<std::optional<std::string>> GetMeta(const std::string& key) const;

  const storage::Database* const db_;
  const std::string log_;
  const std::string prefix_;  // log_ + '\0'
  rocksdb::ColumnFamilyHandle* const entries_;
  rocksdb::ColumnFamilyHandle* const nodes_;
  rocksdb::ColumnFamilyHandle* const meta_;
};

}  // namespace vault::audit

#endif  // VAULT_AUDIT_LOG_STORE_H_
