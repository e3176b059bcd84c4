// storage: the vault's single RocksDB database, one column family per kind of record.
//
// Components declare the column families they need; node/ opens the database once with all of
// them and hands the Database to each component:
//
//   std::vector<storage::ColumnFamilySpec> cfs = cas::Store::ColumnFamilies();
//   VAULT_ASSIGN_OR_RETURN(auto db, storage::Database::Open({.path = dir}, cfs));
//   rocksdb::ColumnFamilyHandle* meta = db->Handle("cas_meta");
//
// rocksdb::Status is converted to absl::Status here and nowhere else (ToStatus).
//
// Thread-safety: a Database is thread-safe (RocksDB is); handles live as long as the Database.
#ifndef VAULT_STORAGE_DATABASE_H_
#define VAULT_STORAGE_DATABASE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "rocksdb/db.h"
#include "rocksdb/env.h"

namespace vault::storage {

struct ColumnFamilySpec {
  std::string name;
  // Values at least this large go to RocksDB's integrated blob files (0: no blob files), so
  // compaction never rewrites them.
  uint64_t blob_min_bytes = 0;
  // Point lookups dominate (bloom filters on SST files and on the memtable).
  bool point_lookups = true;
  // Values are content (often already compressed, always hash-checked): do not compress them.
  bool compress = true;
  // Keys start with 8 uniformly random bytes (a content hash) and are mostly looked up: the
  // memtable is a hash of small skiplists bucketed on those bytes, so inserts and lookups cost
  // O(1) instead of a search through one large skiplist, and scans sort a log of the entries
  // (storage/hash_memtable.h). Scans of such a column family need ReadOptions::total_order_seek.
  bool hashed_keys = false;
};

struct DatabaseOptions {
  std::string path;
  // Every OS service goes through this Env; tests pass a fault-injecting one.
  // Default: rocksdb::Env::Default().
  rocksdb::Env* env = nullptr;
  // fsync the WAL before a write returns (power-loss durability).
  bool sync_writes = true;
  uint32_t block_cache_mb = 256;
};

// Our Abseil's string_view is its own type, not std::string_view: convert at the RocksDB edge.
inline absl::string_view View(const rocksdb::Slice& s) {
  return absl::string_view(s.data(), s.size());
}
inline rocksdb::Slice ToSlice(absl::string_view s) { return rocksdb::Slice(s.data(), s.size()); }

// Converts a RocksDB status into the canonical absl code: NotFound -> NOT_FOUND, Corruption ->
// DATA_LOSS, IOError/NoSpace -> UNAVAILABLE/RESOURCE_EXHAUSTED, Busy/TryAgain -> ABORTED, ...
absl::Status ToStatus(const rocksdb::Status& s, absl::string_view what);

class Database {
 public:
  static absl::StatusOr<std::unique_ptr<Database>> Open(const DatabaseOptions& options,
                                                        const std::vector<ColumnFamilySpec>& cfs);
  Database(const Database&) = delete;
  Database& operator=(const Database&) = delete;
  // Flushes nothing extra: every acknowledged write is already in the WAL. Closes the DB.
  ~Database();

  rocksdb::DB* db() const { return db_.get(); }
  // The handle of a column family declared at Open. Aborts on an undeclared name (a bug).
  rocksdb::ColumnFamilyHandle* Handle(absl::string_view name) const;

  // Writes `batch` atomically, durably per DatabaseOptions::sync_writes.
  absl::Status Write(rocksdb::WriteBatch* batch) const;
  // Writes without waiting for fsync: for state that may be lost with a crash of the machine
  // (never of the process alone) because a later synced write covers it.
  absl::Status WriteUnsynced(rocksdb::WriteBatch* batch) const;

  const DatabaseOptions& options() const { return options_; }

 private:
  Database() = default;

  DatabaseOptions options_;
  std::vector<rocksdb::ColumnFamilyHandle*> handles_;
  absl::flat_hash_map<std::string, rocksdb::ColumnFamilyHandle*> by_name_;
  std::unique_ptr<rocksdb::DB> db_;
};

}  // namespace vault::storage

#endif  // VAULT_STORAGE_DATABASE_H_
