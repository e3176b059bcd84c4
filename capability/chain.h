// capability/chain: signed, attenuating capability chains (design §5) — signing links, and
// verifying a whole chain at a vault with a specific error and the index of the failing link.
//
// A chain is root first: a trusted principal's DELEGATE/SPAWN link, then one MIGRATE link per
// hop. Each link's signature is Ed25519 over kLinkDomain || payload bytes exactly as received;
// the payload must be the canonical (deterministic) serialization of a LinkPayload of version 1
// with no unknown fields, so one authority has exactly one encoding.
//
//   VAULT_ASSIGN_OR_RETURN(vault::v1::SignedLink link, SignLink(payload, issuer_key));
//
//   ChainVerifier verifier(&link_cache);
//   absl::StatusOr<VerifiedChain> v = verifier.Verify(chain, context);
//   if (!v.ok()) { ChainError e = ChainErrorOf(v.status()); int i = FailingLink(v.status()); }
//
// Verified link signatures are cached by link hash (LinkCache): a chain whose prefix was seen
// costs one signature check for its new link. Everything else is re-checked every time (it
// depends on the time, the revocations and the vault doing the check).
//
// Thread-safety: SignLink/ParseLinkPayload/LinkHash are pure; LinkCache and ChainVerifier are
// thread-safe.
#ifndef VAULT_CAPABILITY_CHAIN_H_
#define VAULT_CAPABILITY_CHAIN_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "capability/principal.h"
#include "capability/signing_domains.h"
#include "vault/v1/capability.pb.h"

namespace vault::capability {

inline constexpr uint32_t kLinkVersion = 1;

// SHA-256(be32(len(payload)) || payload || signature): what `parent` names and revocations cite.
std::string LinkHash(const vault::v1::SignedLink& link);

// Serializes `payload` canonically and signs it. INVALID_ARGUMENT if the key is not the
// payload's issuer.
absl::StatusOr<vault::v1::SignedLink> SignLink(const vault::v1::LinkPayload& payload,
                                               const PrivateKey& issuer);

// Parses payload bytes: refuses (INVALID_ARGUMENT) unknown fields, a version other than 1, and
// bytes that are not the canonical serialization of what they parse to.
absl::StatusOr<vault::v1::LinkPayload> ParseLinkPayload(absl::string_view bytes);

// Why a chain is refused. Every refusal carries one (ChainErrorOf) and the 0-based index of the
// link at fault (FailingLink; -1 for the chain as a whole).
enum class ChainError {
  kNone = 0,
  kMalformed,           // empty chain, unparsable payload, unknown fields, bad field sizes
                        // (a MIGRATE link without a 16-byte transfer id or a state digest)
  kTooLarge,            // more links or bytes than allowed
  kUnsupportedVersion,  // payload version != 1
  kBadKey,              // issuer/audience not a valid Ed25519 key (length, small order, encoding)
  kBadSignature,        // not 64 bytes, or does not verify
  kUntrustedRoot,       // the root issuer is not trusted by this vault
  kBrokenLink,          // issuer != previous audience, or parent hash mismatch
  kWidened,             // grants or constraints not within the previous link's
  kTimeNotNested,       // validity window not inside the previous link's
  kNotYetValid,
  kExpired,
  kIdentityChanged,    // agent id or code digest changed
  kBadHop,             // hop not previous + 1 on MIGRATE (or changed otherwise)
  kHopLimit,           // hop beyond max_migrations
  kMigrateNotGranted,  // MIGRATE audience not a vault named in the previous migrate grant
  kWrongAudience,      // the last audience is not this vault
  kReplayedTransfer,   // transfer id seen here before, or repeated within the chain
  kRevoked,            // a link or the agent was revoked by a principal in the chain
  kBadKind,            // link kinds out of order (DELEGATE* SPAWN MIGRATE*)
};
absl::string_view ChainErrorName(ChainError e);
ChainError ChainErrorOf(const absl::Status& status);
int FailingLink(const absl::Status& status);

// Verified-signature cache, keyed by link hash. Bounded: cleared when full.
class LinkCache {
 public:
  explicit LinkCache(size_t max_entries = 1 << 16) : max_(max_entries) {}
  bool Contains(absl::string_view link_hash) const;
  void Insert(std::string link_hash);
  size_t size() const;

 private:
  const size_t max_;
  mutable absl::Mutex mu_;
  absl::flat_hash_set<std::string> hashes_ ABSL_GUARDED_BY(mu_);
};

// What the verifying vault knows.
struct VerifyContext {
  // This vault's key: the last link's audience must be it.
  std::optional<PublicKey> this_vault;
  // Is `key` a principal this vault trusts as a chain root?
  std::function<bool(const PublicKey& key)> trusted_root;
  // The signing key of federation member `vault_name` (MIGRATE audiences are checked against the
  // migrate grant's vault names through it).
  std::function<std::optional<PublicKey>(absl::string_view vault_name)> vault_key;
  // Has this vault seen `transfer_id` before (a replay)? Null: never.
  std::function<bool(absl::string_view transfer_id)> transfer_seen;
  // Is link `link_hash` revoked by `revoker`, or agent `agent_id` revoked by `revoker`? The
  // verifier asks for every (link, principal in the chain up to it) pair. Null: no revocations.
  std::function<bool(absl::string_view link_hash, const PublicKey& revoker)> link_revoked;
  std::function<bool(absl::string_view agent_id, const PublicKey& revoker)> agent_revoked;
  absl::Time now = absl::Now();
  absl::Duration clock_skew = absl::Seconds(30);
  size_t max_links = 64;
  size_t max_bytes = 1 << 20;
};

struct VerifiedChain {
  std::string agent_id;
  vault::v1::Digest code;
  std::optional<PublicKey> root;         // the trusted principal the authority comes from
  std::vector<vault::v1::Grant> grants;  // the last link's
  vault::v1::Constraints constraints;    // the last link's
  uint32_t hop = 0;
  std::string last_transfer_id;          // of the last MIGRATE link ("" when none)
  std::vector<std::string> link_hashes;  // root first
  int64_t not_after_unix_ms = 0;         // the last link's
  int signatures_checked = 0;            // not served from the cache
};

class ChainVerifier {
 public:
  // `cache` may be null (no caching); it must outlive the verifier.
  explicit ChainVerifier(LinkCache* cache) : cache_(cache) {}
  absl::StatusOr<VerifiedChain> Verify(const vault::v1::Chain& chain,
                                       const VerifyContext& context) const;

 private:
  LinkCache* const cache_;
};

}  // namespace vault::capability

#endif  // VAULT_CAPABILITY_CHAIN_H_
