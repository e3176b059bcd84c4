#include "capability/chain.h"

#include <memory>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "capability/grant.h"
#include "common/proto_util.h"
#include "common/sha256.h"
#include "common/status_macros.h"

namespace vault::capability {
namespace {

constexpr char kErrorPayloadUrl[] = "type.vault/capability.ChainError";

struct ChainErrorInfo {
  ChainError error;
  absl::string_view name;
  absl::StatusCode code;
};

constexpr ChainErrorInfo kErrors[] = {
    {ChainError::kNone, "NONE", absl::StatusCode::kOk},
    {ChainError::kMalformed, "MALFORMED", absl::StatusCode::kInvalidArgument},
    {ChainError::kTooLarge, "TOO_LARGE", absl::StatusCode::kInvalidArgument},
    {ChainError::kUnsupportedVersion, "UNSUPPORTED_VERSION", absl::StatusCode::kInvalidArgument},
    {ChainError::kBadKey, "BAD_KEY", absl::StatusCode::kInvalidArgument},
    {ChainError::kBadSignature, "BAD_SIGNATURE", absl::StatusCode::kUnauthenticated},
    {ChainError::kUntrustedRoot, "UNTRUSTED_ROOT", absl::StatusCode::kPermissionDenied},
    {ChainError::kBrokenLink, "BROKEN_LINK", absl::StatusCode::kPermissionDenied},
    {ChainError::kWidened, "WIDENED", absl::StatusCode::kPermissionDenied},
    {ChainError::kTimeNotNested, "TIME_NOT_NESTED", absl::StatusCode::kPermissionDenied},
    {ChainError::kNotYetValid, "NOT_YET_VALID", absl::StatusCode::kPermissionDenied},
    {ChainError::kExpired, "EXPIRED", absl::StatusCode::kPermissionDenied},
    {ChainError::kIdentityChanged, "IDENTITY_CHANGED", absl::StatusCode::kPermissionDenied},
    {ChainError::kBadHop, "BAD_HOP", absl::StatusCode::kPermissionDenied},
    {ChainError::kHopLimit, "HOP_LIMIT", absl::StatusCode::kPermissionDenied},
    {ChainError::kMigrateNotGranted, "MIGRATE_NOT_GRANTED", absl::StatusCode::kPermissionDenied},
    {ChainError::kWrongAudience, "WRONG_AUDIENCE", absl::StatusCode::kPermissionDenied},
    {ChainError::kReplayedTransfer, "REPLAYED_TRANSFER", absl::StatusCode::kAlreadyExists},
    {ChainError::kRevoked, "REVOKED", absl::StatusCode::kPermissionDenied},
    {ChainError::kBadKind, "BAD_KIND", absl::StatusCode::kPermissionDenied},
};

const ChainErrorInfo& Info(ChainError e) {
  for (const ChainErrorInfo& i : kErrors) {
    if (i.error == e) return i;
  }
  return kErrors[0];
}

// "link 2: <message>" with the error and index attached as a status payload.
absl::Status Fail(ChainError e, int index, absl::string_view message) {
  const ChainErrorInfo& info = Info(e);
  std::string text = index < 0 ? absl::StrCat("chain: ", message)
                               : absl::StrCat("chain link ", index, ": ", message);
  absl::Status s(info.code, absl::StrCat(text, " [", info.name, "]"));
  s.SetPayload(kErrorPayloadUrl, absl::Cord(absl::StrCat(info.name, ":", index)));
  return s;
}

bool HasUnknownFields(const google::protobuf::Message& m) {
  const google::protobuf::Reflection* r = m.GetReflection();
  if (!r->GetUnknownFields(m).empty()) return true;
  std::vector<const google::protobuf::FieldDescriptor*> fields;
  r->ListFields(m, &fields);
  for (const google::protobuf::FieldDescriptor* f : fields) {
    if (f->cpp_type() != google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE) continue;
    if (f->is_repeated()) {
      for (int i = 0; i < r->FieldSize(m, f); ++i) {
        if (HasUnknownFields(r->GetRepeatedMessage(m, f, i))) return true;
      }
    } else if (HasUnknownFields(r->GetMessage(m, f))) {
      return true;
    }
  }
  return false;
}

bool SameDigest(const vault::v1::Digest& a, const vault::v1::Digest& b) {
  return a.sha256() == b.sha256() && a.size() == b.size();
}

}  // namespace

absl::string_view ChainErrorName(ChainError e) { return Info(e).name; }

ChainError ChainErrorOf(const absl::Status& status) {
  auto p = status.GetPayload(kErrorPayloadUrl);
  if (!p.has_value()) return ChainError::kNone;
  std::string s(*p);
  absl::string_view name = absl::string_view(s).substr(0, s.find(':'));
  for (const ChainErrorInfo& i : kErrors) {
    if (i.name == name) return i.error;
  }
  return ChainError::kNone;
}

int FailingLink(const absl::Status& status) {
  auto p = status.GetPayload(kErrorPayloadUrl);
  if (!p.has_value()) return -1;
  std::string s(*p);
  int index = -1;
  if (size_t colon = s.find(':'); colon != std::string::npos) {
    (void)absl::SimpleAtoi(absl::string_view(s).substr(colon + 1), &index);
  }
  return index;
}

std::string LinkHash(const vault::v1::SignedLink& link) {
  const uint32_t n = static_cast<uint32_t>(link.payload().size());
  const char len[4] = {static_cast<char>(n >> 24), static_cast<char>(n >> 16),
                       static_cast<char>(n >> 8), static_cast<char>(n)};
  return common::Sha256::HashParts({absl::string_view(len, 4), link.payload(), link.signature()});
}

absl::StatusOr<vault::v1::SignedLink> SignLink(const vault::v1::LinkPayload& payload,
                                               const PrivateKey& issuer) {
  if (payload.issuer() != issuer.public_key().raw()) {
    return absl::InvalidArgumentError("the signing key is not the link's issuer");
  }
  vault::v1::SignedLink link;
  link.set_payload(common::SerializeDeterministic(payload));
  VAULT_ASSIGN_OR_RETURN(std::string sig, issuer.Sign(absl::StrCat(kLinkDomain, link.payload())));
  link.set_signature(std::move(sig));
  return link;
}

absl::StatusOr<vault::v1::LinkPayload> ParseLinkPayload(absl::string_view bytes) {
  vault::v1::LinkPayload p;
  if (!p.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return absl::InvalidArgumentError("link payload does not parse");
  }
  if (HasUnknownFields(p)) {
    return absl::InvalidArgumentError("link payload has unknown fields");
  }
  if (p.version() != kLinkVersion) {
    return absl::InvalidArgumentError(
        absl::StrCat("link payload version ", p.version(), " is not supported (only 1)"));
  }
  if (common::SerializeDeterministic(p) != bytes) {
    return absl::InvalidArgumentError("link payload is not canonically encoded");
  }
  return p;
}

bool LinkCache::Contains(absl::string_view link_hash) const {
  absl::MutexLock lock(&mu_);
  return hashes_.contains(link_hash);
}

void LinkCache::Insert(std::string link_hash) {
  absl::MutexLock lock(&mu_);
  if (hashes_.size() >= max_) hashes_.clear();
  hashes_.insert(std::move(link_hash));
}

size_t LinkCache::size() const {
  absl::MutexLock lock(&mu_);
  return hashes_.size();
}

absl::StatusOr<VerifiedChain> ChainVerifier::Verify(const vault::v1::Chain& chain,
                                                    const VerifyContext& ctx) const {
  using vault::v1::LinkPayload;
  const int n = chain.links_size();
  if (n == 0) return Fail(ChainError::kMalformed, -1, "the chain has no links");
  if (static_cast<size_t>(n) > ctx.max_links) {
    return Fail(ChainError::kTooLarge, -1,
                absl::StrCat(n, " links; at most ", ctx.max_links, " are accepted"));
  }
  // Fields outside the signed payloads are signed by no one and would escape the size budget.
  if (!chain.GetReflection()->GetUnknownFields(chain).empty()) {
    return Fail(ChainError::kMalformed, -1,
                "the chain carries fields this vault does not know (outside any signed payload)");
  }
  for (int i = 0; i < n; ++i) {
    if (HasUnknownFields(chain.links(i))) {
      return Fail(ChainError::kMalformed, i,
                  "the link carries fields this vault does not know (outside its signed payload)");
    }
  }
  size_t bytes = 0;
  for (const vault::v1::SignedLink& l : chain.links()) {
    bytes += l.payload().size() + l.signature().size();
  }
  if (bytes > ctx.max_bytes) {
    return Fail(ChainError::kTooLarge, -1,
                absl::StrCat(bytes, " bytes; at most ", ctx.max_bytes, " are accepted"));
  }

  VerifiedChain out;
  std::vector<LinkPayload> payloads;
  std::vector<PublicKey> issuers;
  payloads.reserve(n);
  std::optional<PublicKey> prev_audience;
  absl::flat_hash_set<std::string> transfer_ids;
  const int64_t now_ms = absl::ToUnixMillis(ctx.now);
  const int64_t skew_ms = absl::ToInt64Milliseconds(ctx.clock_skew);

  for (int i = 0; i < n; ++i) {
    const vault::v1::SignedLink& link = chain.links(i);
    // 1. The payload: canonical, known fields, version 1.
    absl::StatusOr<LinkPayload> parsed = ParseLinkPayload(link.payload());
    if (!parsed.ok()) {
      vault::v1::LinkPayload probe;
      bool version = probe.ParseFromString(link.payload()) && probe.version() != kLinkVersion &&
                     !HasUnknownFields(probe);
      return Fail(version ? ChainError::kUnsupportedVersion : ChainError::kMalformed, i,
                  parsed.status().message());
    }
    const LinkPayload& p = *parsed;
    // 2. Keys.
    absl::StatusOr<PublicKey> issuer = PublicKey::FromRaw(p.issuer());
    if (!issuer.ok()) {
      return Fail(ChainError::kBadKey, i, absl::StrCat("issuer: ", issuer.status().message()));
    }
    absl::StatusOr<PublicKey> audience = PublicKey::FromRaw(p.audience());
    if (!audience.ok()) {
      return Fail(ChainError::kBadKey, i, absl::StrCat("audience: ", audience.status().message()));
    }
    // 3. The signature (cached by link hash: same hash, same bytes, same answer).
    std::string hash = LinkHash(link);
    if (link.signature().size() != PublicKey::kSignatureSize) {
      return Fail(ChainError::kBadSignature, i,
                  absl::StrCat("signature is ", link.signature().size(), " bytes, not 64"));
    }
    if (cache_ == nullptr || !cache_->Contains(hash)) {
      absl::Status sig =
          issuer->Verify(absl::StrCat(kLinkDomain, link.payload()), link.signature());
      if (!sig.ok()) return Fail(ChainError::kBadSignature, i, "signature does not verify");
      ++out.signatures_checked;
      if (cache_ != nullptr) cache_->Insert(hash);
    }
    // 4. Kinds: DELEGATE* SPAWN MIGRATE*.
    const LinkPayload::Kind prev_kind =
        i == 0 ? LinkPayload::KIND_UNSPECIFIED : payloads.back().kind();
    switch (p.kind()) {
      case LinkPayload::DELEGATE:
        if (i > 0 && prev_kind != LinkPayload::DELEGATE) {
          return Fail(ChainError::kBadKind, i, "a DELEGATE link after a SPAWN or MIGRATE link");
        }
        break;
      case LinkPayload::SPAWN:
        if (i > 0 && prev_kind != LinkPayload::DELEGATE) {
          return Fail(ChainError::kBadKind, i, "a second SPAWN link");
        }
        break;
      case LinkPayload::MIGRATE:
        if (i == 0 || prev_kind == LinkPayload::DELEGATE) {
          return Fail(ChainError::kBadKind, i, "a MIGRATE link before the SPAWN link");
        }
        break;
      default:
        return Fail(ChainError::kMalformed, i, "link kind is not set");
    }
    // 5. Linkage.
    if (i == 0) {
      if (!p.parent().empty()) return Fail(ChainError::kBrokenLink, i, "the root has a parent");
      if (!ctx.trusted_root || !ctx.trusted_root(*issuer)) {
        return Fail(ChainError::kUntrustedRoot, i,
                    absl::StrCat("root issuer ", issuer->ToText(), " is not trusted here"));
      }
    } else {
      if (!(*issuer == *prev_audience)) {
        return Fail(ChainError::kBrokenLink, i, "issuer is not the previous link's audience");
      }
      if (p.parent() != out.link_hashes.back()) {
        return Fail(ChainError::kBrokenLink, i, "parent is not the previous link's hash");
      }
    }
    // 6. Authority: valid, and within the previous link's.
    if (absl::Status v = ValidateGrants(p.grants()); !v.ok()) {
      return Fail(ChainError::kMalformed, i, v.message());
    }
    if (i > 0) {
      if (absl::Status s = IsSubset(p.grants(), payloads.back().grants()); !s.ok()) {
        return Fail(ChainError::kWidened, i, s.message());
      }
      if (absl::Status s = ConstraintsSubset(p.constraints(), payloads.back().constraints());
          !s.ok()) {
        return Fail(ChainError::kWidened, i, s.message());
      }
    }
    // 7. Time: a window inside the previous one, holding now (with the skew allowance).
    if (p.not_after_unix_ms() <= p.not_before_unix_ms()) {
      return Fail(ChainError::kMalformed, i, "not_after is not after not_before");
    }
    if (i > 0 && (p.not_before_unix_ms() < payloads.back().not_before_unix_ms() ||
                  p.not_after_unix_ms() > payloads.back().not_after_unix_ms())) {
      return Fail(ChainError::kTimeNotNested, i,
                  "validity window is not inside the previous link's");
    }
    if (now_ms + skew_ms < p.not_before_unix_ms()) {
      return Fail(ChainError::kNotYetValid, i, "not valid yet");
    }
    if (now_ms - skew_ms >= p.not_after_unix_ms() ||
        (p.constraints().has_expires_unix_ms() &&
         now_ms - skew_ms >= p.constraints().expires_unix_ms())) {
      return Fail(ChainError::kExpired, i, "expired");
    }
    // 8. Identity: fixed once set; SPAWN sets it.
    if (p.kind() != LinkPayload::DELEGATE &&
        (p.agent_id().empty() || p.code().sha256().size() != 32)) {
      return Fail(ChainError::kMalformed, i, "SPAWN and MIGRATE links name the agent and its code");
    }
    if (i > 0 && !payloads.back().agent_id().empty() &&
        (p.agent_id() != payloads.back().agent_id() ||
         !SameDigest(p.code(), payloads.back().code()))) {
      return Fail(ChainError::kIdentityChanged, i, "agent id or code digest changed");
    }
    // 9. Hops.
    const uint32_t prev_hop = i == 0 ? 0 : payloads.back().hop();
    if (p.kind() == LinkPayload::MIGRATE ? p.hop() != prev_hop + 1 : p.hop() != 0) {
      return Fail(ChainError::kBadHop, i,
                  absl::StrCat("hop is ", p.hop(), ", expected ",
                               p.kind() == LinkPayload::MIGRATE ? prev_hop + 1 : 0));
    }
    if (p.constraints().has_max_migrations() && p.hop() > p.constraints().max_migrations()) {
      return Fail(ChainError::kHopLimit, i,
                  absl::StrCat("hop ", p.hop(), " exceeds max_migrations ",
                               p.constraints().max_migrations()));
    }
    // 10. Migration: to a vault the previous link's migrate grant names, with a fresh transfer.
    if (p.kind() == LinkPayload::MIGRATE) {
      if (p.transfer_id().size() != 16 || p.state().sha256().size() != 32) {
        return Fail(ChainError::kMalformed, i,
                    "a MIGRATE link needs a 16-byte transfer id and a state digest");
      }
      bool named = false;
      for (const vault::v1::Grant& g : payloads.back().grants()) {
        if (g.kind() != vault::v1::Grant::MIGRATE) continue;
        for (const std::string& v : g.vaults()) {
          if (!ctx.vault_key) continue;
          std::optional<PublicKey> key = ctx.vault_key(v);
          if (key.has_value() && *key == *audience) named = true;
        }
      }
      if (!named) {
        return Fail(ChainError::kMigrateNotGranted, i,
                    "its audience is not a vault named in the previous link's migrate grant");
      }
      if (!transfer_ids.insert(p.transfer_id()).second) {
        return Fail(ChainError::kReplayedTransfer, i, "transfer id repeated within the chain");
      }
    } else if (!p.transfer_id().empty() || p.has_state()) {
      return Fail(ChainError::kMalformed, i, "only MIGRATE links carry a transfer id and state");
    }
    // 11. Revocations by any principal of the chain so far.
    issuers.push_back(*issuer);
    for (const PublicKey& by : issuers) {
      if (ctx.link_revoked && ctx.link_revoked(hash, by)) {
        return Fail(ChainError::kRevoked, i, absl::StrCat("link revoked by ", by.ToText()));
      }
      if (ctx.agent_revoked && !p.agent_id().empty() && ctx.agent_revoked(p.agent_id(), by)) {
        return Fail(ChainError::kRevoked, i,
                    absl::StrCat("agent ", p.agent_id(), " revoked by ", by.ToText()));
      }
    }
    if (ctx.link_revoked && ctx.link_revoked(hash, *audience)) {
      return Fail(ChainError::kRevoked, i, absl::StrCat("renounced by ", audience->ToText()));
    }
    if (ctx.agent_revoked && !p.agent_id().empty() && ctx.agent_revoked(p.agent_id(), *audience)) {
      return Fail(ChainError::kRevoked, i,
                  absl::StrCat("agent ", p.agent_id(), " revoked by ", audience->ToText()));
    }
    out.link_hashes.push_back(std::move(hash));
    prev_audience = *audience;
    payloads.push_back(std::move(*parsed));
  }

  const LinkPayload& last = payloads.back();
  if (ctx.this_vault.has_value() && !(*prev_audience == *ctx.this_vault)) {
    return Fail(ChainError::kWrongAudience, n - 1, "the last link is not addressed to this vault");
  }
  if (last.kind() == LinkPayload::MIGRATE && ctx.transfer_seen &&
      ctx.transfer_seen(last.transfer_id())) {
    return Fail(ChainError::kReplayedTransfer, n - 1, "this transfer was seen here before");
  }
  out.root = issuers.front();
  out.agent_id = last.agent_id();
  out.code = last.code();
  out.grants.assign(last.grants().begin(), last.grants().end());
  out.constraints = last.constraints();
  out.hop = last.hop();
  if (last.kind() == LinkPayload::MIGRATE) out.last_transfer_id = last.transfer_id();
  out.not_after_unix_ms = last.not_after_unix_ms();
  return out;
}

}  // namespace vault::capability
