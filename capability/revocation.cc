#include "capability/revocation.h"

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/proto_util.h"
#include "common/status_macros.h"

namespace vault::capability {
namespace {

absl::Status CheckPayload(const vault::v1::RevocationPayload& p) {
  if (p.version() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("revocation version ", p.version(), " is not supported (only 1)"));
  }
  if (p.agent_id().empty() == p.link_hash().empty()) {
    return absl::InvalidArgumentError("a revocation names exactly one agent id or link hash");
  }
  if (!p.link_hash().empty() && p.link_hash().size() != 32) {
    return absl::InvalidArgumentError("a revoked link hash is 32 bytes");
  }
  return PublicKey::FromRaw(p.revoker()).status();
}

}  // namespace

absl::StatusOr<vault::v1::SignedRevocation> SignRevocation(
    const vault::v1::RevocationPayload& payload, const PrivateKey& revoker) {
  VAULT_RETURN_IF_ERROR(CheckPayload(payload));
  if (payload.revoker() != revoker.public_key().raw()) {
    return absl::InvalidArgumentError("the signing key is not the revocation's revoker");
  }
  vault::v1::SignedRevocation out;
  out.set_payload(common::SerializeDeterministic(payload));
  VAULT_ASSIGN_OR_RETURN(std::string sig,
                         revoker.Sign(absl::StrCat(kRevocationDomain, out.payload())));
  out.set_signature(std::move(sig));
  return out;
}

absl::StatusOr<vault::v1::RevocationPayload> OpenRevocation(
    const vault::v1::SignedRevocation& revocation) {
  vault::v1::RevocationPayload p;
  if (!p.ParseFromString(revocation.payload()) || !p.GetReflection()->GetUnknownFields(p).empty() ||
      common::SerializeDeterministic(p) != revocation.payload()) {
    return absl::InvalidArgumentError("revocation payload is malformed or not canonical");
  }
  VAULT_RETURN_IF_ERROR(CheckPayload(p));
  VAULT_ASSIGN_OR_RETURN(PublicKey revoker, PublicKey::FromRaw(p.revoker()));
  VAULT_RETURN_IF_ERROR(revoker.Verify(absl::StrCat(kRevocationDomain, revocation.payload()),
                                       revocation.signature()));
  return p;
}

}  // namespace vault::capability
