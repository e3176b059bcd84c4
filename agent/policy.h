// agent/policy: which principals this vault runs agents for, and the most their agents may be
// granted here (the operator's ceiling), with per-principal quotas.
//
// Entries live in the column family "agent_policy" (keyed by the principal's raw key) and in
// memory. The config's agents.admins are trusted too, with the full ceiling and admin rights;
// they are not stored and cannot be untrusted here.
//
//   VAULT_ASSIGN_OR_RETURN(auto policy, TrustPolicy::Open(db, {.admins = config_admins,
//                                                           .vaults = member_names}));
//   vault::v1::TrustEntry e;  e.set_principal(key.ToText());  e.set_preset("read-only");
//   VAULT_ASSIGN_OR_RETURN(vault::v1::TrustEntry stored, policy->Trust(e));
//   std::optional<vault::v1::TrustEntry> entry = policy->Lookup(key);
//
// Presets: read-only (read /vault, cas-read, receive *), read-write (+ write /vault, cas-write,
// send *), full (+ spawn, migrate to every other member). No preset grants network access:
// name hosts explicitly.
//
// Thread-safety: thread-safe.
#ifndef VAULT_AGENT_POLICY_H_
#define VAULT_AGENT_POLICY_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "capability/principal.h"
#include "storage/database.h"
#include "vault/v1/agent.pb.h"

namespace vault::agent {

struct PolicyOptions {
  std::vector<std::string> admins;  // ed25519:<hex>, from the config
  // The members' names, this vault's included (the full preset's migrate grant); empty without
  // other members (no migrate grant).
  std::vector<std::string> vaults;
};

class TrustPolicy {
 public:
  static std::vector<storage::ColumnFamilySpec> ColumnFamilies();
  static absl::StatusOr<std::unique_ptr<TrustPolicy>> Open(const storage::Database* db,
                                                           PolicyOptions options);

  // The grants of a preset; INVALID_ARGUMENT for an unknown name.
  absl::StatusOr<std::vector<vault::v1::Grant>> PresetGrants(const std::string& name) const;

  // Validates `entry` (principal key, grants or a preset, not both), fills a preset's grants and
  // the time, and stores it, replacing an earlier entry. FAILED_PRECONDITION for a config admin.
  absl::StatusOr<vault::v1::TrustEntry> Trust(vault::v1::TrustEntry entry);
  // NOT_FOUND when not trusted; FAILED_PRECONDITION for a config admin.
  absl::Status Untrust(const std::string& principal);
  std::optional<vault::v1::TrustEntry> Lookup(const capability::PublicKey& key) const;
  // Config admins first, then stored entries by principal.
  std::vector<vault::v1::TrustEntry> List() const;

 private:
  TrustPolicy(const storage::Database* db, PolicyOptions options)
      : db_(db), options_(std::move(options)) {}
  absl::Status Load();

  const storage::Database* const db_;
  const PolicyOptions options_;
  mutable absl::Mutex mu_;
  // Keyed by the raw 32-byte key.
  absl::flat_hash_map<std::string, vault::v1::TrustEntry> entries_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, vault::v1::TrustEntry> admins_ ABSL_GUARDED_BY(mu_);
};

// Why a spawn whose `grants` go above `trust`'s ceiling is refused: which grants, which ceiling
// (the administrators' from the config, or the one `vaultctl policy trust` set) and how to widen
// it.
std::string CeilingRefusal(const google::protobuf::RepeatedPtrField<vault::v1::Grant>& grants,
                           const vault::v1::TrustEntry& trust);

}  // namespace vault::agent

#endif  // VAULT_AGENT_POLICY_H_
