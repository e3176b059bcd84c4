// migration/receipt: a hop's receipt, signed by the destination's vault key over
// capability::kReceiptDomain || payload. The source marks an agent departed only with a receipt
// that verifies, and the agent's home vault records where it went from the same receipt.
//
//   VAULT_ASSIGN_OR_RETURN(vault::v1::SignedReceipt r, SignReceipt(payload, vault_key));
//   VAULT_ASSIGN_OR_RETURN(vault::v1::ReceiptPayload p, OpenReceipt(r, destination_key));
//
// Thread-safety: pure functions.
#ifndef VAULT_MIGRATION_RECEIPT_H_
#define VAULT_MIGRATION_RECEIPT_H_

#include "absl/status/statusor.h"
#include "capability/principal.h"
#include "vault/v1/migration.pb.h"

namespace vault::migration {

absl::StatusOr<vault::v1::SignedReceipt> SignReceipt(const vault::v1::ReceiptPayload& payload,
                                                     const capability::PrivateKey& key);
// INVALID_ARGUMENT for a payload that does not parse (version 1); the signature's error when it
// does not verify under `signer`.
absl::StatusOr<vault::v1::ReceiptPayload> OpenReceipt(const vault::v1::SignedReceipt& receipt,
                                                      const capability::PublicKey& signer);

}  // namespace vault::migration

#endif  // VAULT_MIGRATION_RECEIPT_H_
