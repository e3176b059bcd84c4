#include "messaging/signed_message.h"

#include <string>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "capability/grant.h"
#include "capability/signing_domains.h"
#include "common/sha256.h"
#include "common/status_macros.h"

namespace vault::messaging {

using vault::v1::MessageRecord;
using vault::v1::SignedMessage;

namespace {

// The record's ids: 1-64 printable bytes (the runtime looks the receiver up; an id that names
// no agent is NOT_FOUND there).
absl::Status CheckId(absl::string_view what, absl::string_view id) {
  bool ok = !id.empty() && id.size() <= 64;
  for (char c : id) ok = ok && c > ' ' && c < 0x7f;
  if (!ok) return absl::InvalidArgumentError(absl::StrCat("a message's ", what, " is malformed"));
  return absl::OkStatus();
}

absl::Status Unauthenticated(absl::string_view why) {
  return absl::UnauthenticatedError(absl::StrCat("message refused: ", why));
}

}  // namespace

absl::StatusOr<MessageRecord> ParseRecord(absl::string_view bytes) {
  if (bytes.size() > kMaxRecordBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("a message record is at most ", kMaxRecordBytes, " bytes"));
  }
  MessageRecord r;
  if (!r.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return absl::InvalidArgumentError("a message record does not parse");
  }
  if (!r.GetReflection()->GetUnknownFields(r).empty()) {
    return absl::InvalidArgumentError("a message record has fields this vault does not know");
  }
  if (r.version() != kRecordVersion) {
    return absl::InvalidArgumentError(
        absl::StrCat("message record version ", r.version(), " is not supported (1 is)"));
  }
  VAULT_RETURN_IF_ERROR(CheckId("sender", r.from()));
  VAULT_RETURN_IF_ERROR(CheckId("receiver", r.to()));
  VAULT_RETURN_IF_ERROR(CheckId("sending vault", r.sending_vault()));
  if (r.from() == "operator") {
    if (r.type().empty() || r.type().size() > 64 || r.seq() != 0 || !r.chain_sha256().empty()) {
      return absl::InvalidArgumentError("an operator's message record is malformed");
    }
  } else {
    VAULT_RETURN_IF_ERROR(capability::ValidateMessageType(r.type()));
    if (r.seq() == 0)
      return absl::InvalidArgumentError("an agent's message has no sequence number");
    if (!r.chain_sha256().empty() && r.chain_sha256().size() != 32) {
      return absl::InvalidArgumentError("a message's chain digest is not 32 bytes");
    }
  }
  if (r.payload_sha256().size() != 32) {
    return absl::InvalidArgumentError("a message's payload digest is not 32 bytes");
  }
  if (r.from_addresses_size() > 64) {
    return absl::InvalidArgumentError("a message names more than 64 addresses of its sender");
  }
  return r;
}

absl::StatusOr<SignedMessage> SignMessage(MessageRecord record, std::string data, std::string chain,
                                          const capability::PrivateKey& vault_key) {
  record.set_version(kRecordVersion);
  record.set_payload_sha256(common::Sha256::Hash(data));
  record.set_payload_size(data.size());
  record.set_chain_sha256(chain.empty() ? std::string() : common::Sha256::Hash(chain));
  SignedMessage out;
  record.SerializeToString(out.mutable_record());
  VAULT_RETURN_IF_ERROR(ParseRecord(out.record()).status());
  VAULT_ASSIGN_OR_RETURN(std::string signature,
                         vault_key.Sign(absl::StrCat(capability::kMessageDomain, out.record())));
  out.set_signature(std::move(signature));
  out.set_data(std::move(data));
  out.set_chain(std::move(chain));
  return out;
}

std::string MessageHash(const SignedMessage& message) {
  return absl::BytesToHexString(common::Sha256::HashParts({message.record(), message.signature()}));
}

absl::StatusOr<VerifiedMessage> MessageVerifier::Verify(const SignedMessage& message,
                                                        const MessageContext& context) const {
  VerifiedMessage out;
  VAULT_ASSIGN_OR_RETURN(out.record, ParseRecord(message.record()));
  const MessageRecord& r = out.record;
  std::optional<capability::PublicKey> key =
      context.vault_key ? context.vault_key(r.sending_vault()) : std::nullopt;
  if (!key.has_value()) {
    return Unauthenticated(
        absl::StrCat("it names \"", r.sending_vault(), "\" as its vault, which is no member"));
  }
  if (!key->Verify(absl::StrCat(capability::kMessageDomain, message.record()), message.signature())
           .ok()) {
    return Unauthenticated(
        absl::StrCat("its signature does not verify against ", r.sending_vault(), "'s key"));
  }
  if (message.data().size() > context.max_data_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("a message's data is at most ", context.max_data_bytes, " bytes here"));
  }
  if (message.data().size() != r.payload_size() ||
      common::Sha256::Hash(message.data()) != r.payload_sha256()) {
    return Unauthenticated(
        absl::StrCat("its payload is not the one ", r.sending_vault(), " signed"));
  }
  if (r.from() == "operator") {
    if (!message.chain().empty()) return Unauthenticated("an operator's message carries a chain");
    return out;
  }
  if (message.chain().empty() != r.chain_sha256().empty() ||
      (!message.chain().empty() && common::Sha256::Hash(message.chain()) != r.chain_sha256())) {
    return Unauthenticated(
        absl::StrCat("the sender's chain is not the one ", r.sending_vault(), " signed"));
  }
  if (message.chain().empty()) return out;  // a child agent: the signature vouches for it
  if (message.chain().size() > kMaxChainBytes) {
    return absl::InvalidArgumentError("a message's chain is too large");
  }
  vault::v1::Chain chain;
  if (!chain.ParseFromString(message.chain())) {
    return Unauthenticated("the sender's chain does not parse");
  }
  capability::VerifyContext ctx = context.chain_context;
  ctx.this_vault = *key;
  ctx.vault_key = context.vault_key;  // (MIGRATE links name members)
  ctx.trusted_root = [](const capability::PublicKey&) { return true; };
  ctx.transfer_seen = nullptr;
  absl::StatusOr<capability::VerifiedChain> v = chains_.Verify(chain, ctx);
  if (!v.ok()) {
    return Unauthenticated(absl::StrCat("the sender's chain does not place agent ", r.from(),
                                        " on ", r.sending_vault(), ": ", v.status().message()));
  }
  if (v->agent_id != r.from()) {
    return Unauthenticated(
        absl::StrCat("the sender's chain is agent ", v->agent_id, "'s, not ", r.from(), "'s"));
  }
  if (!v->root.has_value() || v->root->ToText() != r.from_principal()) {
    return Unauthenticated(absl::StrCat("the sender's principal is not ", r.from_principal()));
  }
  out.chain = *std::move(v);
  return out;
}

}  // namespace vault::messaging
