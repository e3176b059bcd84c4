// capability/signing_domains: the domain-separation prefixes of every Ed25519 signature the
// project makes. Each signed message is `domain || payload`, the domain being an ASCII name and a
// NUL, so that a signature made for one purpose never verifies for another (a capability link is
// never a receipt, a control request never a revocation). One place, so that the vault, vaultctl,
// the benchmarks and the tests sign the same bytes. The SDKs (sdk/python) spell the same values
// in their own language.
//
//   key.Sign(absl::StrCat(capability::kControlDomain, payload));
//
// Thread-safety: constants.
#ifndef VAULT_CAPABILITY_SIGNING_DOMAINS_H_
#define VAULT_CAPABILITY_SIGNING_DOMAINS_H_

#include "absl/strings/string_view.h"

namespace vault::capability {

// A link of a capability chain (SignedLink.payload: LinkPayload).
inline constexpr absl::string_view kLinkDomain("vault.capability.link.v1\0", 25);
// A revocation (SignedRevocation.payload: RevocationPayload).
inline constexpr absl::string_view kRevocationDomain("vault.capability.revocation.v1\0", 31);
// A destination's receipt of a hop (SignedReceipt.payload: ReceiptPayload).
inline constexpr absl::string_view kReceiptDomain("vault.migration.receipt.v1\0", 27);
// An operator's control request (ControlRequest.payload: ControlPayload).
inline constexpr absl::string_view kControlDomain("vault.agent.control.v1\0", 23);
// A code signature (AgentSpec.code_signer).
inline constexpr absl::string_view kCodeDomain("vault.agent.code.v1\0", 20);
// The head of an agent's effect log, as the vault that wrote the log out vouches for it
// (EffectLog.signature: agent id, NUL, head).
inline constexpr absl::string_view kEffectLogDomain("vault.agent.effect-log.v1\0", 26);
// A message between agents, as the vault its sender ran on vouches for it
// (SignedMessage.record: MessageRecord).
inline constexpr absl::string_view kMessageDomain("vault.message.v1\0", 17);

}  // namespace vault::capability

#endif  // VAULT_CAPABILITY_SIGNING_DOMAINS_H_
