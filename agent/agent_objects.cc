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

absl::Status AgentObjects::AddRemoval(const cas::Digest& digest,
                                      const std::function<bool(const std::string&)>& keep,
                                      rocksdb::WriteBatch* batch,
                                      std::vector<StorageRefund>* refunds) const {
  const std::string prefix = digest.Key();
  std::vector<std::string> deletes;
  std::vector<std::pair<std::string, std::string>> puts;
  std::vector<StorageRefund> mine;
  std::unique_ptr<rocksdb::Iterator> it(db_->db()->NewIterator(rocksdb::ReadOptions(), objects_));
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) {
    const std::string agent_id = it->key().ToString().substr(prefix.size());
    if (keep(agent_id)) continue;
    vault::v1::AgentObjectRecord r;
    if (!r.ParseFromArray(it->value().data(), static_cast<int>(it->value().size()))) {
      return absl::DataLossError("an agent_objects entry is corrupt");
    }
    deletes.push_back(it->key().ToString());
    if (r.charged_bytes() == 0) continue;
    // (The time tells apart the refunds of an object stored and removed more than once.)
    puts.emplace_back(absl::StrCat(r.principal(), std::string(1, '\0'), prefix, agent_id,
                                   storage::BigEndian64(absl::ToUnixMicros(absl::Now()))),
                      storage::BigEndian64(r.charged_bytes()));
    mine.push_back({r.principal(), r.charged_bytes()});
  }
  VAULT_RETURN_IF_ERROR(storage::ToStatus(it->status(), "read agent_objects"));
  for (const std::string& k : deletes) batch->Delete(objects_, k);
  for (const auto& [k, v] : puts) batch->Put(refunds_, k, v);
  for (StorageRefund& r : mine) refunds->push_back(std::move(r));
  return absl::OkStatus();
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
