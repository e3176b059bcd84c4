// vaultctl: uploading one local file to a vault's CAS — the streaming, resuming upload of
// `vaultctl cas put` — for commands that need an object stored first (agent spawn --code).
//
//   VAULT_ASSIGN_OR_RETURN(cas::Digest code, UploadFile(conn, "agent.py"));
//
// Thread-safety: UploadFile may be called from any thread; it draws a progress bar on stderr
// when stderr is a terminal.
#ifndef VAULT_VAULTCTL_CAS_UPLOAD_H_
#define VAULT_VAULTCTL_CAS_UPLOAD_H_

#include <string>

#include "absl/status/statusor.h"
#include "cas/digest.h"
#include "vaultctl/client.h"

namespace vault::vaultctl {

// Hashes the regular file at `path` and stores it (a no-op when the vault has it already),
// resuming an interrupted upload and retrying a broken stream twice. Returns its digest.
// INVALID_ARGUMENT for an empty file or one that is not a regular file; NOT_FOUND when missing.
absl::StatusOr<cas::Digest> UploadFile(const Connection& conn, const std::string& path);

}  // namespace vault::vaultctl

#endif  // VAULT_VAULTCTL_CAS_UPLOAD_H_
