// The store's reads by key range (Store::RangeFingerprint(s), Store::ListKeys): what replication's
// reconciliation compares between two vaults (docs/replication.md).
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cas/store.h"
#include "common/status_macros.h"
#include "rocksdb/iterator.h"
#include "storage/keys.h"

namespace vault::cas {

absl::StatusOr<RangeSummary> Store::RangeFingerprint(absl::string_view start, absl::string_view end,
                                                     uint64_t list_below) const {
  const std::pair<std::string, std::string> range{std::string(start), std::string(end)};
  VAULT_ASSIGN_OR_RETURN(std::vector<RangeSummary> out,
                         RangeFingerprints(absl::MakeConstSpan(&range, 1), list_below));
  return std::move(out[0]);
}

absl::StatusOr<std::vector<RangeSummary>> Store::RangeFingerprints(
    absl::Span<const std::pair<std::string, std::string>> ranges, uint64_t list_below) const {
  rocksdb::ReadOptions ro;
  ro.total_order_seek = true;  // the column family has a prefix extractor
  ro.fill_cache = false;
  std::unique_ptr<rocksdb::Iterator> it(db_->db()->NewIterator(ro, meta_));
  std::vector<RangeSummary> out(ranges.size());
  for (size_t i = 0; i < ranges.size(); ++i) {
    const absl::string_view end = ranges[i].second;
    RangeSummary& sum = out[i];
    Sha256 hash;
    for (it->Seek(storage::ToSlice(ranges[i].first)); it->Valid(); it->Next()) {
      absl::string_view key = storage::View(it->key());
      if (!end.empty() && key >= end) break;
      if (key.size() != kSha256Bytes + 8) continue;  // the totals record
      hash.Update(key);
      ++sum.count;
      if (sum.count <= list_below) {
        VAULT_ASSIGN_OR_RETURN(Digest d, Digest::FromKey(key));
        sum.digests.push_back(std::move(d));
      }
    }
    VAULT_RETURN_IF_ERROR(storage::ToStatus(it->status(), "scan objects"));
    if (sum.count > list_below) sum.digests.clear();
    sum.fingerprint = hash.Finish();
  }
  return out;
}

absl::StatusOr<std::vector<Digest>> Store::ListKeys(absl::string_view start, size_t limit) const {
  rocksdb::ReadOptions ro;
  ro.total_order_seek = true;
  ro.fill_cache = false;
  std::unique_ptr<rocksdb::Iterator> it(db_->db()->NewIterator(ro, meta_));
  std::vector<Digest> out;
  for (it->Seek(storage::ToSlice(start)); it->Valid() && out.size() < limit; it->Next()) {
    absl::string_view key = storage::View(it->key());
    if (key.size() != kSha256Bytes + 8) continue;
    VAULT_ASSIGN_OR_RETURN(Digest d, Digest::FromKey(key));
    out.push_back(std::move(d));
  }
  VAULT_RETURN_IF_ERROR(storage::ToStatus(it->status(), "scan objects"));
  return out;
}

}  // namespace vault::cas
