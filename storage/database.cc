#include "storage/database.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "rocksdb/cache.h"
#include "rocksdb/filter_policy.h"
#include "rocksdb/memtablerep.h"
#include "rocksdb/slice_transform.h"
#include "rocksdb/table.h"
#include "rocksdb/write_batch.h"
#include "storage/hash_memtable.h"

namespace vault::storage {

absl::Status ToStatus(const rocksdb::Status& s, absl::string_view what) {
  if (s.ok()) return absl::OkStatus();
  std::string msg = absl::StrCat(what, ": ", s.ToString());
  switch (s.code()) {
    case rocksdb::Status::kNotFound:
      return absl::NotFoundError(msg);
    case rocksdb::Status::kCorruption:
      return absl::DataLossError(msg);
    case rocksdb::Status::kNotSupported:
      return absl::UnimplementedError(msg);
    case rocksdb::Status::kInvalidArgument:
      return absl::InvalidArgumentError(msg);
    case rocksdb::Status::kIOError:
      if (s.IsNoSpace()) return absl::ResourceExhaustedError(msg);
      return absl::UnavailableError(msg);
    case rocksdb::Status::kBusy:
    case rocksdb::Status::kTryAgain:
    case rocksdb::Status::kAborted:
      return absl::AbortedError(msg);
    case rocksdb::Status::kTimedOut:
      return absl::DeadlineExceededError(msg);
    case rocksdb::Status::kShutdownInProgress:
      return absl::UnavailableError(msg);
    default:
      return absl::InternalError(msg);
  }
}

absl::StatusOr<std::unique_ptr<Database>> Database::Open(const DatabaseOptions& options,
                                                         const std::vector<ColumnFamilySpec>& cfs) {
  std::unique_ptr<Database> out(new Database());
  out->options_ = options;

  rocksdb::Options db_options;
  db_options.create_if_missing = true;
  db_options.create_missing_column_families = true;
  db_options.env = options.env != nullptr ? options.env : rocksdb::Env::Default();
  db_options.paranoid_checks = true;
  db_options.IncreaseParallelism(2);
  db_options.max_background_jobs = 2;
  db_options.enable_pipelined_write = true;
  // Keep info logs bounded.
  db_options.max_log_file_size = 8 << 20;
  db_options.keep_log_file_num = 3;
  // Column families that rarely fill a memtable would otherwise keep old WAL files alive: bound
  // the WAL, forcing those flushes (restart time and disk use stay bounded).
  db_options.max_total_wal_size = 512 << 20;

  std::shared_ptr<rocksdb::Cache> cache =
      rocksdb::NewLRUCache(static_cast<size_t>(options.block_cache_mb) << 20);
  bool any_hashed = false;
  std::vector<rocksdb::ColumnFamilyDescriptor> descriptors;
  descriptors.emplace_back(rocksdb::kDefaultColumnFamilyName, rocksdb::ColumnFamilyOptions());
  for (const ColumnFamilySpec& spec : cfs) {
    rocksdb::ColumnFamilyOptions cf;
    rocksdb::BlockBasedTableOptions table;
    table.block_cache = cache;
    if (spec.point_lookups) {
      table.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
      table.whole_key_filtering = true;
      table.cache_index_and_filter_blocks = true;
      table.pin_l0_filter_and_index_blocks_in_cache = true;
      // Absent keys (FindMissing's common case) skip the memtable's skiplist search too.
      cf.memtable_whole_key_filtering = true;
      cf.memtable_prefix_bloom_size_ratio = 0.05;
    }
    if (spec.hashed_keys) {
      cf.prefix_extractor.reset(rocksdb::NewCappedPrefixTransform(8));
      cf.memtable_factory.reset(NewHashMemTableFactory(/*bucket_count=*/1 << 20));
      any_hashed = true;
    }
    cf.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
    cf.write_buffer_size = 64 << 20;
    if (!spec.compress) {
      cf.compression = rocksdb::kNoCompression;
      cf.blob_compression_type = rocksdb::kNoCompression;
    }
    if (spec.blob_min_bytes > 0) {
      cf.enable_blob_files = true;
      cf.min_blob_size = spec.blob_min_bytes;
      cf.blob_file_size = 256 << 20;
      // Nothing is deleted yet, so garbage collection would only rewrite live blobs.
      cf.enable_blob_garbage_collection = false;
    }
    descriptors.emplace_back(spec.name, cf);
  }

  // Hash memtables take one writer at a time, which group commit provides anyway.
  if (any_hashed) db_options.allow_concurrent_memtable_write = false;
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s =
      rocksdb::DB::Open(db_options, options.path, descriptors, &out->handles_, &raw);
  if (!s.ok()) return ToStatus(s, absl::StrCat("open database ", options.path));
  out->db_.reset(raw);
  for (size_t i = 1; i < descriptors.size(); ++i) {
    out->by_name_[descriptors[i].name] = out->handles_[i];
  }
  return out;
}

Database::~Database() {
  if (db_ == nullptr) return;
  for (rocksdb::ColumnFamilyHandle* h : handles_) db_->DestroyColumnFamilyHandle(h);
  handles_.clear();
  db_->Close().PermitUncheckedError();
  db_.reset();
}

rocksdb::ColumnFamilyHandle* Database::Handle(absl::string_view name) const {
  auto it = by_name_.find(name);
  if (it == by_name_.end()) std::abort();  // undeclared column family: a programming error
  return it->second;
}

absl::Status Database::Write(rocksdb::WriteBatch* batch) const {
  rocksdb::WriteOptions wo;
  wo.sync = options_.sync_writes;
  return ToStatus(db_->Write(wo, batch), "write");
}

absl::Status Database::WriteUnsynced(rocksdb::WriteBatch* batch) const {
  rocksdb::WriteOptions wo;
  wo.sync = false;
  return ToStatus(db_->Write(wo, batch), "write");
}

}  // namespace vault::storage
