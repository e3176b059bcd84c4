#include "agent/agent_objects.h"

#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "rocksdb/iterator.h"
#include "storage/keys.h"
#include "vault/v1/agent.pb.h"

namespace vault::agent {
namespace {

constexpr char kObjects[] = "agent_objects";
constexpr char kRefunds[] = "storage_refunds";
constexpr size_t kObjectKeyBytes = cas::kSha256Bytes + 8;

}  // namespace

std::vector<storage::ColumnFamilySpec> AgentObjects::ColumnFamilies() {
  return {{.name = kObjects, .point_lookups = false}, {.name = kRefunds, .point_lookups = false}};
}

AgentObjects::AgentObjects(const storage::Database* db)
    : db_(db), objects_(db->Handle(kObjects)), refunds_(db->Handle(kRefunds)) {}

absl::Status AgentObjects::Record(const std::string& agent_id, const std::string& principal,
                                  const cas::Digest& digest, uint64_t charged) {
  vault::v1::AgentObjectRecord r;
  r.set_principal(principal);
  r.set_charged_bytes(charged);
  rocksdb::WriteBatch batch;
  batch.Put(objects_, absl::StrCat(digest.Key(), agent_id), r.SerializeAsString());
  return db_->WriteUnsynced(&batch);
}

absl::Status AgentObjects::ForEach(const std::function<void(const AgentObject&)>& fn) const {
  rocksdb::ReadOptions ro;
  ro.fill_cache = false;
  std::unique_ptr<rocksdb::Iterator> it(db_->db()->NewIterator(ro, objects_));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    absl::string_view key = storage::View(it->key());
    if (key.size() <= kObjectKeyBytes) continue;
    absl::StatusOr<cas::Digest> d = cas::Digest::FromKey(key.substr(0, kObjectKeyBytes));
    vault::v1::AgentObjectRecord r;
    if (!d.ok() || !r.ParseFromArray(it->value().data(), static_cast<int>(it->value().size()))) {
      return absl::DataLossError("an agent_objects entry is corrupt");
    }
    fn(AgentObject{.digest = *std::move(d),
                   .agent_id = std::string(key.substr(kObjectKeyBytes)),
                   .principal = r.principal(),
                   .charged = r.charged_bytes()});
  }
  return storage::ToStatus(it->status(), "read agent_objects");
}

absl::Status AgentObjects::AddRemoval(const cas::Digest& digest, rocksdb::WriteBatch* batch,
                                      std::vector<StorageRefund>* refunds) const {
  const std::string prefix = digest.Key();
  std::unique_ptr<rocksdb::Iterator> it(db_->db()->NewIterator(rocksdb::ReadOptions(), objects_));
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) {
    vault::v1::AgentObjectRecord r;
    if (!r.ParseFromArray(it->value().data(), static_cast<int>(it->value().size()))) {
      return absl::DataLossError("an agent_objects entry is corrupt");
    }
    batch->Delete(objects_, it->key());
    if (r.charged_bytes() == 0) continue;
    const std::string agent_id = it->key().ToString().substr(prefix.size());
    // (The time tells apart the refunds of an object stored and removed more than once.)
    batch->Put(refunds_,
               absl::StrCat(r.principal(), std::string(1, '\0'), prefix, agent_id,
                            storage::BigEndian64(absl::ToUnixMicros(absl::Now()))),
               storage::BigEndian64(r.charged_bytes()));
    refunds->push_back({r.principal(), r.charged_bytes()});
  }
  return storage::ToStatus(it->status(), "read agent_objects");
}

absl::StatusOr<absl::flat_hash_map<std::string, uint64_t>> AgentObjects::Refunds() const {
  absl::flat_hash_map<std::string, uint64_t> out;
  std::unique_ptr<rocksdb::Iterator> it(db_->db()->NewIterator(rocksdb::ReadOptions(), refunds_));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    absl::string_view key = storage::View(it->key());
    const size_t nul = key.find('\0');
    if (nul == absl::string_view::npos) return absl::DataLossError("a storage refund is corrupt");
    out[std::string(key.substr(0, nul))] += storage::ParseBigEndian64(storage::View(it->value()));
  }
  VAULT_RETURN_IF_ERROR(storage::ToStatus(it->status(), "read storage refunds"));
  return out;
}

}  // namespace vault::agent
