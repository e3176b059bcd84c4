// capability/revocation: signed revocations and the vault's grow-only set of them (design §5).
//
// A revocation is signed by a principal ("revoker") and names an agent id or a link hash. It
// takes effect on a chain only when its revoker is a principal of that chain at or above the
// revoked link (the chain verifier asks LinkRevoked / AgentRevoked for exactly those pairs), so
// anyone may publish one but only the authority's own principals can cut it. The set only grows;
// a revocation may arrive before the chain it cuts. It is kept in RocksDB (column family
// cap_revocations) and in memory for lookups.
//
//   VAULT_ASSIGN_OR_RETURN(SignedRevocation r, SignRevocation(payload, revoker_key));
//   VAULT_RETURN_IF_ERROR(store->Add(r));          // signature checked, durable, idempotent
//   context.link_revoked = [&](auto h, auto& by) { return store->LinkRevoked(h, by); };
//
// Thread-safety: all methods are thread-safe.
#ifndef VAULT_CAPABILITY_REVOCATION_H_
#define VAULT_CAPABILITY_REVOCATION_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "capability/principal.h"
#include "capability/signing_domains.h"
#include "storage/database.h"
#include "vault/v1/capability.pb.h"

namespace vault::capability {

// Signs `payload` (version 1, exactly one of agent_id / link_hash, revoker = the key's).
absl::StatusOr<vault::v1::SignedRevocation> SignRevocation(
    const vault::v1::RevocationPayload& payload, const PrivateKey& revoker);
// Parses and checks a signed revocation: canonical payload of version 1 without unknown fields,
// exactly one target (a link hash is 32 bytes), a valid revoker key, a valid signature.
// INVALID_ARGUMENT or UNAUTHENTICATED.
absl::StatusOr<vault::v1::RevocationPayload> OpenRevocation(
    const vault::v1::SignedRevocation& revocation);

class RevocationStore {
 public:
  static std::vector<storage::ColumnFamilySpec> ColumnFamilies();
  // Loads every stored revocation.
  static absl::StatusOr<std::unique_ptr<RevocationStore>> Open(const storage::Database* db);

  // Checks and stores `revocation` durably; a revocation already held is OK and changes nothing.
  absl::Status Add(const vault::v1::SignedRevocation& revocation);

  bool LinkRevoked(absl::string_view link_hash, const PublicKey& by) const;
  bool AgentRevoked(absl::string_view agent_id, const PublicKey& by) const;
  // Grows by one with every new revocation: caches of decisions compare it to know they are
  // stale.
  uint64_t epoch() const;
  size_t size() const;
  // Every stored revocation, as signed (for gossip to members that may have missed one).
  absl::StatusOr<std::vector<vault::v1::SignedRevocation>> All() const;

 private:
  explicit RevocationStore(const storage::Database* db);
  static std::string Key(const vault::v1::RevocationPayload& p);
  bool Holds(const std::string& key) const;

  const storage::Database* const db_;
  rocksdb::ColumnFamilyHandle* const cf_;
  mutable absl::Mutex mu_;
  absl::flat_hash_set<std::string> keys_ ABSL_GUARDED_BY(mu_);  // Key(): kind, target, revoker
  uint64_t epoch_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace vault::capability

#endif  // VAULT_CAPABILITY_REVOCATION_H_
