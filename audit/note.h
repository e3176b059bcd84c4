// audit/note: C2SP signed notes, tlog-checkpoints and verifier keys (design §4).
//
// A checkpoint is the body "<origin>\n<size>\n<base64 root>\n" (C2SP tlog-checkpoint), signed as a
// C2SP signed note with the vault's Ed25519 key, so standard tools (Go's
// golang.org/x/mod/sumdb/note, transparency-dev/formats) verify it:
//
//   <body>\n— <key name> base64(key ID || Ed25519 signature of body)\n
//
// key ID = first 4 bytes (big-endian uint32) of SHA-256(name || 0x0A || 0x01 || public key);
// verifier key string "<name>+<8 hex key ID>+base64(0x01 || public key)".
//
//   VAULT_ASSIGN_OR_RETURN(std::string note,
//                          SignNote(FormatCheckpoint({origin, size, root}), "vault-a", key));
//   VAULT_ASSIGN_OR_RETURN(NoteVerifier v, NoteVerifier::FromKey("vault-a", key.public_key()));
//   VAULT_ASSIGN_OR_RETURN(std::string body, OpenNote(note, v));
//   VAULT_ASSIGN_OR_RETURN(Checkpoint cp, ParseCheckpoint(body));
//
// Thread-safety: pure functions and immutable values; thread-safe.
#ifndef VAULT_AUDIT_NOTE_H_
#define VAULT_AUDIT_NOTE_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "audit/merkle.h"
#include "capability/principal.h"

namespace vault::audit {

// A C2SP tlog-checkpoint body.
struct Checkpoint {
  std::string origin;  // non-empty, no newline
  uint64_t size = 0;
  Hash root{};
  // Optional extension lines, each non-empty and ending in '\n' (kept verbatim).
  std::string extensions;
};
// "<origin>\n<size>\n<base64 root>\n<extensions>".
std::string FormatCheckpoint(const Checkpoint& cp);
// Strict parse: origin non-empty; size decimal uint64 without sign, leading zeros (except "0")
// or overflow; root standard base64 of exactly 32 bytes; final newline; extension lines
// non-empty. INVALID_ARGUMENT naming what is wrong otherwise.
absl::StatusOr<Checkpoint> ParseCheckpoint(absl::string_view body);

// The Ed25519 key ID of C2SP signed-note.
uint32_t NoteKeyId(absl::string_view name, const capability::PublicKey& key);

// Who may sign a note: a key name, its key ID and its Ed25519 public key.
class NoteVerifier {
 public:
  // INVALID_ARGUMENT if `name` is empty or contains whitespace or '+'.
  static absl::StatusOr<NoteVerifier> FromKey(absl::string_view name,
                                              const capability::PublicKey& key);
  // Parses "<name>+<8 lowercase hex>+<base64(0x01 || 32-byte key)>". INVALID_ARGUMENT when
  // malformed, of another algorithm than 0x01, or when the key ID does not match the key.
  static absl::StatusOr<NoteVerifier> Parse(absl::string_view verifier_key);

  // The verifier key string.
  std::string ToString() const;
  const std::string& name() const { return name_; }
  uint32_t key_id() const { return key_id_; }
  const capability::PublicKey& key() const { return key_; }

 private:
  NoteVerifier(std::string name, uint32_t key_id, capability::PublicKey key)
      : name_(std::move(name)), key_id_(key_id), key_(std::move(key)) {}
  std::string name_;
  uint32_t key_id_;
  capability::PublicKey key_;
};

// Signs `text` (non-empty valid UTF-8 ending in '\n', no control characters but newline) as key
// `name`; returns the whole signed note: text, a blank line, the signature line.
absl::StatusOr<std::string> SignNote(absl::string_view text, absl::string_view name,
                                     const capability::PrivateKey& key);

struct NoteSignature {
  std::string name;
  uint32_t key_id = 0;
  std::string signature;  // what follows the key ID (64 bytes for an Ed25519 note signature)
};
struct ParsedNote {
  std::string text;  // everything before the blank line, including its final '\n'
  std::vector<NoteSignature> signatures;
};
// Splits a signed note into its text and signature lines, without verifying anything.
// INVALID_ARGUMENT on malformed notes (no blank line, bad signature line, bad base64, a
// signature blob shorter than 5 bytes, non-UTF-8 text, ...).
absl::StatusOr<ParsedNote> ParseNote(absl::string_view note);

// Parses `note` and checks that it carries a valid signature by `verifier` (matching name and
// key ID). Signatures by other keys are ignored. Returns the note's text. INVALID_ARGUMENT when
// malformed; NOT_FOUND when no signature line names this verifier; UNAUTHENTICATED when one does
// but does not verify.
absl::StatusOr<std::string> OpenNote(absl::string_view note, const NoteVerifier& verifier);

}  // namespace vault::audit

#endif  // VAULT_AUDIT_NOTE_H_
