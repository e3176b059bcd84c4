#include "migration/receipt.h"

#include "absl/strings/str_cat.h"
#include "capability/signing_domains.h"
#include "common/proto_util.h"
#include "common/status_macros.h"

namespace vault::migration {

absl::StatusOr<vault::v1::SignedReceipt> SignReceipt(const vault::v1::ReceiptPayload& payload,
                                                     const capability::PrivateKey& key) {
  vault::v1::SignedReceipt r;
  r.set_payload(common::SerializeDeterministic(payload));
  VAULT_ASSIGN_OR_RETURN(*r.mutable_signature(),
                         key.Sign(absl::StrCat(capability::kReceiptDomain, r.payload())));
  return r;
}

absl::StatusOr<vault::v1::ReceiptPayload> OpenReceipt(const vault::v1::SignedReceipt& receipt,
                                                      const capability::PublicKey& signer) {
  VAULT_RETURN_IF_ERROR(signer.Verify(absl::StrCat(capability::kReceiptDomain, receipt.payload()),
                                      receipt.signature()));
  vault::v1::ReceiptPayload p;
  if (!p.ParseFromString(receipt.payload()) || p.version() != 1) {
    return absl::InvalidArgumentError("the receipt does not parse (version 1)");
  }
  return p;
}

}  // namespace vault::migration
