#include "audit/log_store.h"

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "rocksdb/iterator.h"
#include "storage/keys.h"

namespace vault::audit {
namespace {

constexpr char kEntries[] = "audit_entries";
constexpr char kNodes[] = "audit_nodes";
constexpr char kMeta[] = "audit_meta";

using storage::BigEndian64;
using storage::ParseBigEndian64;
using storage::ToSlice;
using storage::View;

template <typename Message>
absl::StatusOr<std::optional<Message>> ParseOptional(
    const absl::StatusOr<std::optional<std::string>>& raw, absl::string_view what) {
  if (!raw.ok()) return raw.status();
  if (!raw->has_value()) return std::optional<Message>();
  Message m;
  if (!m.ParseFromString(**raw)) {
    return absl::DataLossError(absl::StrCat("audit: stored ", what, " record is corrupt"));
  }
  return std::optional<Message>(std::move(m));
}

}  // namespace

std::vector<storage::ColumnFamilySpec> LogStore::ColumnFamilies() {
  return {
      // Entries and nodes are read by range (verification, GetEntries) and by key, but only
      // keys that exist are ever looked up (proofs, frontier loads, GetEntries below the head):
      // bloom filters would never save a read, and the memtable's costs a cache miss per put
      // on the group commit's serial path. Nodes are SHA-256 outputs, which never compress:
      // compressing their blocks would only cost CPU on every flush, compaction and scan.
      {.name = kEntries, .point_lookups = false},
      {.name = kNodes, .point_lookups = false, .compress = false},
      {.name = kMeta},
  };
}

LogStore::LogStore(const storage::Database* db, std::string log)
    : db_(db),
      log_(std::move(log)),
      prefix_(log_ + std::string(1, '\0')),
      entries_(db->Handle(kEntries)),
      nodes_(db->Handle(kNodes)),
      meta_(db->Handle(kMeta)) {}

std::string LogStore::EntryKey(uint64_t seq) const {
  return absl::StrCat(prefix_, BigEndian64(seq));
}

std::string LogStore::NodeKey(NodeId id) const {
  return absl::StrCat(prefix_, std::string(1, static_cast<char>(id.level)), BigEndian64(id.index));
}

absl::StatusOr<std::optional<std::string>> LogStore::GetMeta(const std::string& key) const {
  std::string value;
  rocksdb::Status s = db_->db()->Get(rocksdb::ReadOptions(), meta_, key, &value);
  if (s.IsNotFound()) return std::optional<std::string>();
  if (!s.ok()) return storage::ToStatus(s, "audit: read " + key);
  return std::optional<std::string>(std::move(value));
}

absl::StatusOr<vault::v1::LogHead> LogStore::ReadHead() const {
  VAULT_ASSIGN_OR_RETURN(std::optional<vault::v1::LogHead> head,
                         ParseOptional<vault::v1::LogHead>(GetMeta("head/" + log_), "log head"));
  return head.value_or(vault::v1::LogHead());
}

absl::StatusOr<std::optional<vault::v1::StoredCheckpoint>> LogStore::ReadCheckpoint() const {
  return ParseOptional<vault::v1::StoredCheckpoint>(GetMeta("cp/" + log_), "checkpoint");
}

absl::StatusOr<std::optional<vault::v1::MirrorStatus>> LogStore::ReadMirrorStatus() const {
  VAULT_ASSIGN_OR_RETURN(
      std::optional<vault::v1::MirrorStatusRecord> rec,
      ParseOptional<vault::v1::MirrorStatusRecord>(GetMeta("mirror/" + log_), "mirror status"));
  if (!rec.has_value()) return std::optional<vault::v1::MirrorStatus>();
  return std::optional<vault::v1::MirrorStatus>(rec->status());
}

absl::StatusOr<std::string> LogStore::ReadEntry(uint64_t seq) const {
  std::string value;
  rocksdb::Status s = db_->db()->Get(rocksdb::ReadOptions(), entries_, EntryKey(seq), &value);
  if (s.IsNotFound()) {
    return absl::NotFoundError(absl::StrCat("log ", log_, " has no entry ", seq));
  }
  if (!s.ok()) return storage::ToStatus(s, "audit: read entry");
  if (value.size() < kHashSize) {
    return absl::DataLossError(absl::StrCat("log ", log_, ": entry ", seq, " record is corrupt"));
  }
  return value.substr(kHashSize);
}

absl::StatusOr<std::vector<std::string>> LogStore::ReadEntries(uint64_t from, uint64_t to,
                                                               size_t max_count,
                                                               size_t max_bytes) const {
  std::vector<std::string> out;
  if (from >= to) return out;
  size_t bytes = 0;
  uint64_t next = from;
  bool budget_hit = false;
  bool malformed = false;
  VAULT_RETURN_IF_ERROR(
      ScanEntries(from, [&](uint64_t seq, absl::string_view leaf, absl::string_view entry) {
        if (seq != next) return false;  // a gap: reported below
        if (leaf.empty()) {
          malformed = true;
          return false;
        }
        if (!out.empty() && (out.size() >= max_count || bytes + entry.size() > max_bytes)) {
          budget_hit = true;
          return false;
        }
        out.emplace_back(entry);
        bytes += entry.size();
        return ++next < to;
      }));
  if (malformed) {
    return absl::DataLossError(absl::StrCat("log ", log_, ": entry ", next, " record is corrupt"));
  }
  if (next < to && !budget_hit) {
    return absl::DataLossError(absl::StrCat("log ", log_, " is missing entry ", next));
  }
  return out;
}

absl::Status LogStore::ScanEntries(
    uint64_t from, const std::function<bool(uint64_t, absl::string_view, absl::string_view)>& fn,
    bool verify_checksums) const {
  std::string upper = log_ + std::string(1, '\x01');
  rocksdb::Slice upper_slice(upper);
  rocksdb::ReadOptions ro;
  ro.iterate_upper_bound = &upper_slice;
  ro.fill_cache = false;
  ro.readahead_size = 2 << 20;
  ro.verify_checksums = verify_checksums;
  std::unique_ptr<rocksdb::Iterator> it(db_->db()->NewIterator(ro, entries_));
  for (it->Seek(EntryKey(from)); it->Valid(); it->Next()) {
    absl::string_view key = View(it->key());
    absl::string_view value = View(it->value());
    uint64_t seq = ParseBigEndian64(key.substr(prefix_.size()));
    if (key.size() != prefix_.size() + 8) continue;  // not an entry key of this log
    bool more = value.size() < kHashSize
                    ? fn(seq, absl::string_view(), value)
                    : fn(seq, value.substr(0, kHashSize), value.substr(kHashSize));
    if (!more) break;
  }
  return storage::ToStatus(it->status(), "audit: scan entries");
}

uint64_t LogStore::NodeCursor::index() const {
  return ParseBigEndian64(View(it_->key()).substr(lower_.size()));
}

absl::Status LogStore::NodeCursor::status() const {
  return storage::ToStatus(it_->status(), "audit: scan tree nodes");
}

LogStore::NodeCursor LogStore::Nodes(uint8_t level) const {
  NodeCursor cursor;
  cursor.lower_ = absl::StrCat(prefix_, std::string(1, static_cast<char>(level)));
  cursor.upper_ = std::make_unique<NodeCursor::Bound>();
  cursor.upper_->key = level == 0xff
                           ? log_ + std::string(1, '\x01')
                           : absl::StrCat(prefix_, std::string(1, static_cast<char>(level + 1)));
  cursor.upper_->slice = rocksdb::Slice(cursor.upper_->key);
  rocksdb::ReadOptions ro;
  ro.iterate_upper_bound = &cursor.upper_->slice;
  ro.fill_cache = false;
  ro.verify_checksums = false;  // every node read here is recomputed from the entries
  ro.readahead_size = 2 << 20;
  cursor.it_.reset(db_->db()->NewIterator(ro, nodes_));
  cursor.it_->Seek(cursor.lower_);
  return cursor;
}

NodeReader LogStore::Reader() const {
  return [this](absl::Span<const NodeId> ids) -> absl::StatusOr<std::vector<Hash>> {
    std::vector<std::string> keys;
    std::vector<rocksdb::ColumnFamilyHandle*> cfs;
    keys.reserve(ids.size());
    cfs.reserve(ids.size());
    for (const NodeId& id : ids) {
      keys.push_back(id.level == 0 ? EntryKey(id.index) : NodeKey(id));
      cfs.push_back(id.level == 0 ? entries_ : nodes_);
    }
    std::vector<rocksdb::Slice> slices(keys.begin(), keys.end());
    std::vector<rocksdb::PinnableSlice> values(keys.size());
    std::vector<rocksdb::Status> statuses(keys.size());
    db_->db()->MultiGet(rocksdb::ReadOptions(), keys.size(), cfs.data(), slices.data(),
                        values.data(), statuses.data());
    std::vector<Hash> out(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) {
      if (!statuses[i].ok()) {
        if (statuses[i].IsNotFound()) {
          return absl::DataLossError(absl::StrCat("log ", log_, " is missing tree node (level ",
                                                  ids[i].level, ", index ", ids[i].index, ")"));
        }
        return storage::ToStatus(statuses[i], "audit: read tree nodes");
      }
      absl::string_view v = View(values[i]);
      if (ids[i].level == 0 ? v.size() < kHashSize : v.size() != kHashSize) {
        return absl::DataLossError(absl::StrCat("log ", log_, ": tree node (level ", ids[i].level,
                                                ", index ", ids[i].index, ") is corrupt"));
      }
      std::copy_n(v.data(), kHashSize, reinterpret_cast<char*>(out[i].data()));
    }
    return out;
  };
}

void LogStore::AddEntry(rocksdb::WriteBatch* batch, uint64_t seq, const Hash& leaf_hash,
                        absl::string_view entry) const {
  std::string key = EntryKey(seq);
  rocksdb::Slice parts[2] = {ToSlice(AsBytes(leaf_hash)), ToSlice(entry)};
  rocksdb::Slice key_slice(key);
  batch->Put(entries_, rocksdb::SliceParts(&key_slice, 1), rocksdb::SliceParts(parts, 2));
}

void LogStore::AddNode(rocksdb::WriteBatch* batch, NodeId id, const Hash& hash) const {
  if (id.level == 0) return;
  batch->Put(nodes_, NodeKey(id), ToSlice(AsBytes(hash)));
}

void LogStore::SetHead(rocksdb::WriteBatch* batch, const vault::v1::LogHead& head) const {
  batch->Put(meta_, "head/" + log_, head.SerializeAsString());
}

void LogStore::SetCheckpoint(rocksdb::WriteBatch* batch,
                             const vault::v1::StoredCheckpoint& cp) const {
  batch->Put(meta_, "cp/" + log_, cp.SerializeAsString());
}

void LogStore::SetMirrorStatus(rocksdb::WriteBatch* batch,
                               const vault::v1::MirrorStatus& status) const {
  vault::v1::MirrorStatusRecord rec;
  *rec.mutable_status() = status;
  batch->Put(meta_, "mirror/" + log_, rec.SerializeAsString());
}

}  // namespace vault::audit
