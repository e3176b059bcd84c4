// The memtable of the content-keyed column families (ColumnFamilySpec::hashed_keys): RocksDB's
// hash-bucketed skiplists for inserts and lookups, plus an ordered view that is cheap to build.
//
// RocksDB's hash-skiplist memtable inserts and finds a key in O(1), but every scan in key order
// (each flush, each total-order iterator) rebuilds one large skiplist from all its entries: on
// this machine that is ~2.5 s of CPU per 64 MiB memtable, the whole of a flush's cost, and it
// made a collection of 1,000,000 objects (1.8 million deletions) take 13 s. This memtable keeps
// the bucketed skiplists for writes and point lookups and, beside them, a log of its entries in
// insertion order. A scan sorts a copy of the log: std::sort of (first 8 key bytes, entry)
// pairs, which compares in registers and only reads the keys when those 8 bytes tie. A memtable
// that no longer takes writes sorts once and every later scan shares the result.
//
//   cf.memtable_factory = storage::NewHashMemTableFactory(/*bucket_count=*/1 << 20);
//
// Only for column families with RocksDB's default (bytewise) comparator: the 8-byte prefix
// order is the bytewise order. A memtable whose comparator orders otherwise is RocksDB's hash
// memtable alone. A scan sees the entries as of its start, like RocksDB's hash memtable's scans
// (a tailing iterator does not see later writes to the same memtable).
//
// Thread-safety: as RocksDB requires of a memtable: one writer at a time
// (allow_concurrent_memtable_write off), any number of readers at once with it.
#ifndef VAULT_STORAGE_HASH_MEMTABLE_H_
#define VAULT_STORAGE_HASH_MEMTABLE_H_

#include <cstddef>

#include "rocksdb/memtablerep.h"

namespace vault::storage {

// `log_capacity`: entries a memtable logs at most (rounded up to 16,384); a memtable with more
// (none of 64 MiB has) scans through the hash skiplists' own slow iterator.
rocksdb::MemTableRepFactory* NewHashMemTableFactory(size_t bucket_count,
                                                    size_t log_capacity = size_t{1} << 26);

}  // namespace vault::storage

#endif  // VAULT_STORAGE_HASH_MEMTABLE_H_
