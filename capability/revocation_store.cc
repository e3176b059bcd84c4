// RevocationStore: apart from revocation.cc, so that a program that only signs or opens
// revocations (vaultctl) does not link RocksDB and run its static initializers at every start.
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "capability/revocation.h"
#include "common/status_macros.h"
#include "rocksdb/iterator.h"

namespace vault::capability {
namespace {

constexpr char kCf[] = "cap_revocations";

std::string TargetKey(char kind, absl::string_view target, absl::string_view revoker) {
  // kind, 4-byte length of the target, target, revoker (32 bytes): unambiguous.
  const uint32_t n = static_cast<uint32_t>(target.size());
  const char len[4] = {static_cast<char>(n >> 24), static_cast<char>(n >> 16),
                       static_cast<char>(n >> 8), static_cast<char>(n)};
  return absl::StrCat(absl::string_view(&kind, 1), absl::string_view(len, 4), target, revoker);
}

}  // namespace

std::vector<storage::ColumnFamilySpec> RevocationStore::ColumnFamilies() { return {{.name = kCf}}; }

RevocationStore::RevocationStore(const storage::Database* db) : db_(db), cf_(db->Handle(kCf)) {}

std::string RevocationStore::Key(const vault::v1::RevocationPayload& p) {
  return p.link_hash().empty() ? TargetKey('a', p.agent_id(), p.revoker())
                               : TargetKey('l', p.link_hash(), p.revoker());
}

absl::StatusOr<std::unique_ptr<RevocationStore>> RevocationStore::Open(
    const storage::Database* db) {
  std::unique_ptr<RevocationStore> store(new RevocationStore(db));
  std::unique_ptr<rocksdb::Iterator> it(db->db()->NewIterator(rocksdb::ReadOptions(), store->cf_));
  absl::MutexLock lock(&store->mu_);
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    store->keys_.insert(std::string(storage::View(it->key())));
  }
  VAULT_RETURN_IF_ERROR(storage::ToStatus(it->status(), "revocations: load"));
  store->epoch_ = store->keys_.size();
  return store;
}

absl::Status RevocationStore::Add(const vault::v1::SignedRevocation& revocation) {
  VAULT_ASSIGN_OR_RETURN(vault::v1::RevocationPayload p, OpenRevocation(revocation));
  std::string key = Key(p);
  if (Holds(key)) return absl::OkStatus();
  rocksdb::WriteBatch batch;
  batch.Put(cf_, key, revocation.SerializeAsString());
  VAULT_RETURN_IF_ERROR(db_->Write(&batch));
  absl::MutexLock lock(&mu_);
  if (keys_.insert(std::move(key)).second) ++epoch_;
  return absl::OkStatus();
}

absl::StatusOr<std::vector<vault::v1::SignedRevocation>> RevocationStore::All() const {
  std::vector<vault::v1::SignedRevocation> out;
  std::unique_ptr<rocksdb::Iterator> it(db_->db()->NewIterator(rocksdb::ReadOptions(), cf_));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    vault::v1::SignedRevocation r;
    if (!r.ParseFromArray(it->value().data(), static_cast<int>(it->value().size()))) {
      return absl::DataLossError("a stored revocation does not parse");
    }
    out.push_back(std::move(r));
  }
  VAULT_RETURN_IF_ERROR(storage::ToStatus(it->status(), "revocations: read"));
  return out;
}

bool RevocationStore::Holds(const std::string& key) const {
  absl::MutexLock lock(&mu_);
  return keys_.contains(key);
}

bool RevocationStore::LinkRevoked(absl::string_view link_hash, const PublicKey& by) const {
  return Holds(TargetKey('l', link_hash, by.raw()));
}

bool RevocationStore::AgentRevoked(absl::string_view agent_id, const PublicKey& by) const {
  return Holds(TargetKey('a', agent_id, by.raw()));
}

uint64_t RevocationStore::epoch() const {
  absl::MutexLock lock(&mu_);
  return epoch_;
}

size_t RevocationStore::size() const {
  absl::MutexLock lock(&mu_);
  return keys_.size();
}

}  // namespace vault::capability
