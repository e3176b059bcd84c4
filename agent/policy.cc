#include "agent/policy.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "capability/grant.h"
#include "common/status_macros.h"

namespace vault::agent {
namespace {

constexpr char kColumnFamily[] = "agent_policy";

vault::v1::Grant Make(vault::v1::Grant::Kind kind) {
  vault::v1::Grant g;
  g.set_kind(kind);
  return g;
}
vault::v1::Grant Path(vault::v1::Grant::Kind kind, const char* path) {
  vault::v1::Grant g = Make(kind);
  g.set_path(path);
  return g;
}
vault::v1::Grant Agent(vault::v1::Grant::Kind kind) {
  vault::v1::Grant g = Make(kind);
  g.set_agent("*");
  return g;
}

}  // namespace

std::vector<storage::ColumnFamilySpec> TrustPolicy::ColumnFamilies() {
  return {{.name = kColumnFamily}};
}

absl::StatusOr<std::unique_ptr<TrustPolicy>> TrustPolicy::Open(const storage::Database* db,
                                                               PolicyOptions options) {
  std::unique_ptr<TrustPolicy> policy(new TrustPolicy(db, std::move(options)));
  VAULT_RETURN_IF_ERROR(policy->Load());
  return policy;
}

absl::Status TrustPolicy::Load() {
  VAULT_ASSIGN_OR_RETURN(std::vector<vault::v1::Grant> full, PresetGrants("full"));
  absl::MutexLock lock(&mu_);
  for (const std::string& text : options_.admins) {
    VAULT_ASSIGN_OR_RETURN(capability::PublicKey key, capability::PublicKey::FromText(text));
    vault::v1::TrustEntry e;
    e.set_principal(key.ToText());
    e.set_preset("full");
    e.set_admin(true);
    for (const vault::v1::Grant& g : full) *e.add_ceiling() = g;
    admins_[key.raw()] = std::move(e);
  }
  std::unique_ptr<rocksdb::Iterator> it(
      db_->db()->NewIterator(rocksdb::ReadOptions(), db_->Handle(kColumnFamily)));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    vault::v1::TrustEntry e;
    if (!e.ParseFromArray(it->value().data(), static_cast<int>(it->value().size()))) {
      return absl::DataLossError(
          absl::StrCat("trust policy entry ", it->key().ToString(true), " does not parse"));
    }
    entries_[std::string(storage::View(it->key()))] = std::move(e);
  }
  return storage::ToStatus(it->status(), "read the trust policy");
}

absl::StatusOr<std::vector<vault::v1::Grant>> TrustPolicy::PresetGrants(
    const std::string& name) const {
  using G = vault::v1::Grant;
  std::vector<G> grants;
  if (name != "read-only" && name != "read-write" && name != "full") {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown preset \"", name, "\" (presets: read-only, read-write, full)"));
  }
  grants.push_back(Path(G::READ, "/vault"));
  grants.push_back(Make(G::CAS_READ));
  grants.push_back(Agent(G::RECEIVE));
  if (name == "read-write" || name == "full") {
    grants.push_back(Path(G::WRITE, "/vault"));
    grants.push_back(Make(G::CAS_WRITE));
    grants.push_back(Agent(G::SEND));
  }
  if (name == "full") {
    grants.push_back(Make(G::SPAWN));
    if (!options_.vaults.empty()) {
      G migrate = Make(G::MIGRATE);
      std::vector<std::string> vaults = options_.vaults;
      std::sort(vaults.begin(), vaults.end());
      vaults.erase(std::unique(vaults.begin(), vaults.end()), vaults.end());
      for (std::string& v : vaults) migrate.add_vaults(std::move(v));
      grants.push_back(std::move(migrate));
    }
  }
  return grants;
}

absl::StatusOr<vault::v1::TrustEntry> TrustPolicy::Trust(vault::v1::TrustEntry entry) {
  VAULT_ASSIGN_OR_RETURN(capability::PublicKey key,
                         capability::PublicKey::FromText(entry.principal()));
  entry.set_principal(key.ToText());
  if (!entry.preset().empty()) {
    if (entry.ceiling_size() > 0) {
      return absl::InvalidArgumentError("give the ceiling as grants or as a preset, not both");
    }
    VAULT_ASSIGN_OR_RETURN(std::vector<vault::v1::Grant> grants, PresetGrants(entry.preset()));
    for (vault::v1::Grant& g : grants) *entry.add_ceiling() = std::move(g);
  } else if (entry.ceiling_size() == 0) {
    return absl::InvalidArgumentError(
        "a ceiling is required: grants, or a preset (read-only, read-write, full)");
  }
  VAULT_RETURN_IF_ERROR(capability::ValidateGrants(entry.ceiling()));
  entry.set_added_unix_ms(absl::ToUnixMillis(absl::Now()));
  absl::MutexLock lock(&mu_);
  if (admins_.contains(key.raw())) {
    return absl::FailedPreconditionError(absl::StrCat(
        key.ToText(), " is an administrator from the config (agents.admins); edit the config"));
  }
  rocksdb::WriteBatch batch;
  batch.Put(db_->Handle(kColumnFamily), storage::ToSlice(key.raw()), entry.SerializeAsString());
  VAULT_RETURN_IF_ERROR(db_->Write(&batch));
  entries_[key.raw()] = entry;
  return entry;
}

absl::Status TrustPolicy::Untrust(const std::string& principal) {
  VAULT_ASSIGN_OR_RETURN(capability::PublicKey key, capability::PublicKey::FromText(principal));
  absl::MutexLock lock(&mu_);
  if (admins_.contains(key.raw())) {
    return absl::FailedPreconditionError(absl::StrCat(
        key.ToText(), " is an administrator from the config (agents.admins); edit the config"));
  }
  if (!entries_.contains(key.raw())) {
    return absl::NotFoundError(absl::StrCat(key.ToText(), " is not trusted here"));
  }
  rocksdb::WriteBatch batch;
  batch.Delete(db_->Handle(kColumnFamily), storage::ToSlice(key.raw()));
  VAULT_RETURN_IF_ERROR(db_->Write(&batch));
  entries_.erase(key.raw());
  return absl::OkStatus();
}

std::optional<vault::v1::TrustEntry> TrustPolicy::Lookup(const capability::PublicKey& key) const {
  absl::MutexLock lock(&mu_);
  if (auto it = admins_.find(key.raw()); it != admins_.end()) return it->second;
  if (auto it = entries_.find(key.raw()); it != entries_.end()) return it->second;
  return std::nullopt;
}

std::vector<vault::v1::TrustEntry> TrustPolicy::List() const {
  absl::MutexLock lock(&mu_);
  std::vector<vault::v1::TrustEntry> admins, stored;
  for (const auto& [k, e] : admins_) admins.push_back(e);
  for (const auto& [k, e] : entries_) stored.push_back(e);
  auto by_principal = [](const vault::v1::TrustEntry& a, const vault::v1::TrustEntry& b) {
    return a.principal() < b.principal();
  };
  std::sort(admins.begin(), admins.end(), by_principal);
  std::sort(stored.begin(), stored.end(), by_principal);
  admins.insert(admins.end(), stored.begin(), stored.end());
  return admins;
}

std::string CeilingRefusal(const google::protobuf::RepeatedPtrField<vault::v1::Grant>& grants,
                           const vault::v1::TrustEntry& trust) {
  std::vector<std::string> above;
  for (const vault::v1::Grant& g : grants) {
    google::protobuf::RepeatedPtrField<vault::v1::Grant> one;
    *one.Add() = g;
    if (!capability::IsSubset(one, trust.ceiling()).ok()) {
      above.push_back(capability::GrantToString(g));
    }
  }
  const std::string what =
      absl::StrCat(above.size() == 1 ? "the grant " : "the grants ", absl::StrJoin(above, "; "));
  std::vector<std::string> held;
  for (const vault::v1::Grant& g : trust.ceiling()) held.push_back(capability::GrantToString(g));
  if (trust.admin() && trust.added_unix_ms() == 0) {  // from the config, not policy trust
    return absl::StrCat(
        what, " ", above.size() == 1 ? "is" : "are",
        " above the ceiling of this vault's administrators (agents.admins in its config: the "
        "preset \"full\": ",
        absl::StrJoin(held, "; "),
        "). Spawn it as a key trusted with them: vaultctl policy trust KEY --ceiling ...");
  }
  const std::string ceiling = trust.preset().empty()
                                  ? absl::StrCat("the grants ", absl::StrJoin(held, "; "))
                                  : absl::StrCat("the preset \"", trust.preset(), "\"");
  return absl::StrCat(what, " ", above.size() == 1 ? "is" : "are", " above the ceiling of ",
                      trust.principal(), " here (", ceiling,
                      ", set by vaultctl policy trust; vaultctl policy ls shows it). Widen it: "
                      "vaultctl policy trust ",
                      trust.principal(), " --ceiling ...");
}

}  // namespace vault::agent
