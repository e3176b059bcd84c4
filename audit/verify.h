// audit/verify: re-verification of a whole stored log (the vault's own or a mirror), as
// `vaultctl audit verify` runs it.
//
// It reads every entry in order and checks, for each: the record is present (no gap), its
// bytes parse, its sequence number is its position, it names the log's vault, its prev_hash is
// the previous entry's leaf hash (the hash chain), and the stored leaf hash is the hash of its
// bytes. It rebuilds the Merkle tree from the entries and checks every stored interior node (the
// nodes proofs are served from) and the head. Finally the stored checkpoint: its signature by
// the vault's key, its origin, and its root against the tree rebuilt at its size.
//
//   VerifyReport r = VerifyStoredLog(store, "vault-a", verifier);
//   if (!r.ok) std::cerr << "bad at " << *r.first_bad << ": " << r.error;
//
// Thread-safety: reads only; safe alongside appends (it verifies the prefix that was durable
// when it started).
#ifndef VAULT_AUDIT_VERIFY_H_
#define VAULT_AUDIT_VERIFY_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "audit/log_store.h"
#include "audit/note.h"

namespace vault::audit {

struct VerifyReport {
  bool ok = false;
  uint64_t entries_checked = 0;
  uint64_t checkpoint_size = 0;       // 0: no checkpoint was held
  std::optional<uint64_t> first_bad;  // the first sequence number that fails a check
  std::string error;                  // what failed (empty when ok)
  // A mirror holds fewer entries than its latest checkpoint (it stores the checkpoint first and
  // fetches the entries after it); the checkpoint's root was then not compared here (the mirror
  // proved each stored page against it when it fetched them).
  bool catching_up = false;
};

// Verifies the log stored under `store` (named after `vault_name`, whose checkpoints `verifier`
// checks). `is_mirror`: this vault's mirror of a peer's log (see catching_up).
VerifyReport VerifyStoredLog(const LogStore& store, absl::string_view vault_name,
                             const NoteVerifier& verifier, bool is_mirror = false);

}  // namespace vault::audit

#endif  // VAULT_AUDIT_VERIFY_H_
