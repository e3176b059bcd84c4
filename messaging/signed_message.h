// messaging/signed_message: a message between agents as its sending vault vouches for it
// (design §11, docs/messages.md). The vault the sender runs on signs a MessageRecord (sender,
// receiver, type, payload digest, the sender's sequence number, the sending vault, the time,
// the sender's principal and the hash of its chain) under kMessageDomain; the receiving vault
// checks the signature against the member's key, the payload against its digest, and the
// sender's chain: its last link must place the sender on the sending vault, so a member can
// speak only for the agents it hosts.
//
//   VAULT_ASSIGN_OR_RETURN(vault::v1::SignedMessage m,
//                          SignMessage(record, data, chain_bytes, vault_key));
//   MessageVerifier verifier(&link_cache);
//   VAULT_ASSIGN_OR_RETURN(VerifiedMessage v, verifier.Verify(m, context));
//
// Thread-safety: SignMessage and ParseRecord are pure; a MessageVerifier is thread-safe.
#ifndef VAULT_MESSAGING_SIGNED_MESSAGE_H_
#define VAULT_MESSAGING_SIGNED_MESSAGE_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "capability/chain.h"
#include "capability/principal.h"
#include "vault/v1/message.pb.h"

namespace vault::messaging {

inline constexpr uint32_t kRecordVersion = 1;
inline constexpr size_t kMaxRecordBytes = 16 << 10;
inline constexpr size_t kMaxChainBytes = 1 << 20;

// Sets the record's version and payload fields from `data`, and signs it with `vault_key`.
// INVALID_ARGUMENT for a record that is not well formed (see ParseRecord).
absl::StatusOr<vault::v1::SignedMessage> SignMessage(vault::v1::MessageRecord record,
                                                     std::string data, std::string chain,
                                                     const capability::PrivateKey& vault_key);

// Parses and checks the form of a record, signature unchecked (INVALID_ARGUMENT): version 1, no
// unknown fields, at most kMaxRecordBytes, valid ids and type, a 32-byte payload digest.
absl::StatusOr<vault::v1::MessageRecord> ParseRecord(absl::string_view bytes);

// SHA-256 of the signed record and its signature: how an audit entry names one message.
std::string MessageHash(const vault::v1::SignedMessage& message);

struct VerifiedMessage {
  vault::v1::MessageRecord record;
  // The sender's chain as verified (absent for "operator", and for a child agent, which has no
  // chain of its own: then the sending vault's signature alone vouches for it).
  std::optional<capability::VerifiedChain> chain;
};

struct MessageContext {
  // The signing key of federation member `name` (this vault included); nullopt: not a member.
  std::function<std::optional<capability::PublicKey>(absl::string_view name)> vault_key;
  // Revocations and the time, as for any chain this vault checks (this_vault and trusted_root
  // are replaced: the chain must end at the sending vault, whatever root it has).
  capability::VerifyContext chain_context;
  size_t max_data_bytes = 4 << 20;
};

class MessageVerifier {
 public:
  // `cache` may be null; it must outlive the verifier.
  explicit MessageVerifier(capability::LinkCache* cache) : chains_(cache) {}
  // UNAUTHENTICATED when the sending vault is not a member, the signature does not verify, the
  // payload is not what was signed, or the chain does not place the sender on the sending vault
  // under the principal the record names. INVALID_ARGUMENT for a malformed record.
  absl::StatusOr<VerifiedMessage> Verify(const vault::v1::SignedMessage& message,
                                         const MessageContext& context) const;

 private:
  capability::ChainVerifier chains_;
};

}  // namespace vault::messaging

#endif  // VAULT_MESSAGING_SIGNED_MESSAGE_H_
