#include "audit/note.h"

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/sha256.h"
#include "common/status_macros.h"

namespace vault::audit {
namespace {

constexpr unsigned char kAlgEd25519 = 0x01;
// U+2014 EM DASH followed by a space: the start of every signature line.
constexpr absl::string_view kSignaturePrefix = "\xe2\x80\x94 ";
// The most signature lines a note may carry, as in Go's note.Open (C2SP: at least 16).
constexpr size_t kMaxSignatures = 100;
// A signature blob is a 4-byte key ID followed by at least one signature byte.
constexpr size_t kKeyIdSize = 4;

// Decodes one UTF-8 code point at the start of `s` (non-empty) with the rules of Go's
// utf8.DecodeRune: shortest form only, no surrogates, at most U+10FFFF. Returns false on an
// invalid sequence.
bool DecodeRune(absl::string_view s, char32_t* rune, size_t* size) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char b0 = byte(0);
  if (b0 < 0x80) {
    *rune = b0;
    *size = 1;
    return true;
  }
  size_t n;
  char32_t r;
  char32_t min;
  if ((b0 & 0xe0) == 0xc0) {
    n = 2;
    r = b0 & 0x1f;
    min = 0x80;
  } else if ((b0 & 0xf0) == 0xe0) {
    n = 3;
    r = b0 & 0x0f;
    min = 0x800;
  } else if ((b0 & 0xf8) == 0xf0) {
    n = 4;
    r = b0 & 0x07;
    min = 0x10000;
  } else {
    return false;
  }
  if (s.size() < n) return false;
  for (size_t i = 1; i < n; ++i) {
    if ((byte(i) & 0xc0) != 0x80) return false;
    r = (r << 6) | (byte(i) & 0x3f);
  }
  if (r < min || r > 0x10ffff || (r >= 0xd800 && r <= 0xdfff)) return false;
  *rune = r;
  *size = n;
  return true;
}

// Go's unicode.IsSpace: the Latin-1 spaces plus the Unicode White_Space property.
bool IsUnicodeSpace(char32_t r) {
  switch (r) {
    case '\t':
    case '\n':
    case '\v':
    case '\f':
    case '\r':
    case ' ':
    case 0x85:
    case 0xa0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202f:
    case 0x205f:
    case 0x3000:
      return true;
    default:
      return r >= 0x2000 && r <= 0x200a;
  }
}

// OK when `s` is valid UTF-8 without ASCII control characters other than newline (C2SP
// signed-note). `what` names `s` in the error.
absl::Status CheckNoteChars(absl::string_view s, absl::string_view what) {
  size_t i = 0;
  while (i < s.size()) {
    char32_t r;
    size_t size;
    if (!DecodeRune(s.substr(i), &r, &size)) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " is not valid UTF-8 (at byte ", i, ")"));
    }
    if (r < 0x20 && r != '\n') {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s contains control character 0x%02x (at byte %d)", what, static_cast<int>(r), i));
    }
    i += size;
  }
  return absl::OkStatus();
}

// C2SP signed-note key names: non-empty, valid UTF-8, no Unicode space, no '+'. ASCII control
// characters are refused too, since no well-formed note can carry them.
absl::Status CheckKeyName(absl::string_view name) {
  if (name.empty()) return absl::InvalidArgumentError("note key name is empty");
  size_t i = 0;
  while (i < name.size()) {
    char32_t r;
    size_t size;
    if (!DecodeRune(name.substr(i), &r, &size)) {
      return absl::InvalidArgumentError(
          absl::StrCat("note key name \"", absl::CEscape(name), "\" is not valid UTF-8"));
    }
    if (IsUnicodeSpace(r) || r == '+' || r < 0x20) {
      return absl::InvalidArgumentError(
          absl::StrCat("note key name \"", absl::CEscape(name),
                       "\" contains a space, '+' or control character"));
    }
    i += size;
  }
  return absl::OkStatus();
}

// Standard base64 with padding, in its one canonical form: no whitespace, no missing padding,
// zero trailing bits (stricter than Go's non-Strict decoder, so that a signature or key has
// exactly one encoding).
absl::StatusOr<std::string> DecodeBase64Strict(absl::string_view text, absl::string_view what) {
  std::string bytes;
  if (!absl::Base64Unescape(text, &bytes) || absl::Base64Escape(bytes) != text) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " is not canonical standard base64: \"", absl::CEscape(text), "\""));
  }
  return bytes;
}

std::string BigEndian32(uint32_t v) {
  return std::string{static_cast<char>(v >> 24), static_cast<char>(v >> 16),
                     static_cast<char>(v >> 8), static_cast<char>(v)};
}

uint32_t ReadBigEndian32(absl::string_view b) {
  const auto byte = [&](size_t i) {
    return static_cast<uint32_t>(static_cast<unsigned char>(b[i]));
  };
  return (byte(0) << 24) | (byte(1) << 16) | (byte(2) << 8) | byte(3);
}

// SHA-256(name || '\n' || encoded key)[:4] as a big-endian uint32. `encoded_key` is the
// algorithm byte followed by the key.
uint32_t KeyIdOf(absl::string_view name, absl::string_view encoded_key) {
  const std::string data = absl::StrCat(name, "\n", encoded_key);
  return ReadBigEndian32(absl::string_view(common::Sha256::Hash(data)).substr(0, kKeyIdSize));
}

std::string EncodedKey(const capability::PublicKey& key) {
  return absl::StrCat(absl::string_view(reinterpret_cast<const char*>(&kAlgEd25519), 1), key.raw());
}

bool IsLowerHex(absl::string_view s) {
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

// Strict decimal uint64: digits only, no leading zero except "0" itself, no overflow.
bool ParseTreeSize(absl::string_view s, uint64_t* out) {
  if (s.empty() || (s.size() > 1 && s[0] == '0')) return false;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    const uint64_t digit = static_cast<uint64_t>(c - '0');
    if (v > (std::numeric_limits<uint64_t>::max() - digit) / 10) return false;
    v = v * 10 + digit;
  }
  *out = v;
  return true;
}

}  // namespace

// --- Checkpoints -------------------------------------------------------------------------------

std::string FormatCheckpoint(const Checkpoint& cp) {
  return absl::StrCat(cp.origin, "\n", cp.size, "\n", HashToBase64(cp.root), "\n", cp.extensions);
}

absl::StatusOr<Checkpoint> ParseCheckpoint(absl::string_view body) {
  auto bad = [](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("malformed checkpoint: ", why));
  };
  if (body.empty() || body.back() != '\n') return bad("does not end in a newline");
  // Takes the next line (without its newline) off the front of `rest`.
  absl::string_view rest = body;
  auto next_line = [&rest](absl::string_view* line) {
    const size_t nl = rest.find('\n');
    if (nl == absl::string_view::npos) return false;
    *line = rest.substr(0, nl);
    rest.remove_prefix(nl + 1);
    return true;
  };
  absl::string_view origin, size_line, root_line;
  if (!next_line(&origin) || !next_line(&size_line) || !next_line(&root_line)) {
    return bad("fewer than three lines (origin, size, root hash)");
  }
  if (origin.empty()) return bad("empty origin line");

  Checkpoint cp;
  cp.origin = std::string(origin);
  if (!ParseTreeSize(size_line, &cp.size)) {
    return bad(absl::StrCat("tree size \"", absl::CEscape(size_line),
                            "\" is not a decimal uint64 without sign or leading zeros"));
  }
  absl::StatusOr<Hash> root = HashFromBase64(root_line);
  if (!root.ok()) return bad(absl::StrCat("root hash: ", root.status().message()));
  cp.root = *root;

  cp.extensions = std::string(rest);
  absl::string_view line;
  while (next_line(&line)) {
    if (line.empty()) return bad("empty extension line");
  }
  return cp;
}

// --- Keys --------------------------------------------------------------------------------------

uint32_t NoteKeyId(absl::string_view name, const capability::PublicKey& key) {
  return KeyIdOf(name, EncodedKey(key));
}

absl::StatusOr<NoteVerifier> NoteVerifier::FromKey(absl::string_view name,
                                                   const capability::PublicKey& key) {
  VAULT_RETURN_IF_ERROR(CheckKeyName(name));
  return NoteVerifier(std::string(name), NoteKeyId(name, key), key);
}

absl::StatusOr<NoteVerifier> NoteVerifier::Parse(absl::string_view verifier_key) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid note verifier key \"", absl::CEscape(verifier_key), "\": ", why,
                     " (expected <name>+<8 lowercase hex key ID>+<base64(0x01 || Ed25519 key)>)"));
  };
  // The name ends at the first '+', the key ID at the second; base64 may itself contain '+'.
  const size_t plus1 = verifier_key.find('+');
  if (plus1 == absl::string_view::npos) return bad("missing '+'");
  const absl::string_view name = verifier_key.substr(0, plus1);
  absl::string_view rest = verifier_key.substr(plus1 + 1);
  const size_t plus2 = rest.find('+');
  if (plus2 == absl::string_view::npos) return bad("missing second '+'");
  const absl::string_view id_hex = rest.substr(0, plus2);
  const absl::string_view key64 = rest.substr(plus2 + 1);

  if (absl::Status s = CheckKeyName(name); !s.ok()) return bad(s.message());
  if (id_hex.size() != 2 * kKeyIdSize || !IsLowerHex(id_hex)) {
    return bad("key ID is not 8 lowercase hex characters");
  }
  const uint32_t key_id = ReadBigEndian32(absl::HexStringToBytes(id_hex));
  absl::StatusOr<std::string> encoded = DecodeBase64Strict(key64, "key");
  if (!encoded.ok()) return bad(encoded.status().message());
  if (encoded->empty()) return bad("empty key");
  if (static_cast<unsigned char>((*encoded)[0]) != kAlgEd25519) {
    return bad(absl::StrFormat("unknown signature algorithm 0x%02x (only 0x01, Ed25519)",
                               static_cast<unsigned char>((*encoded)[0])));
  }
  if (encoded->size() != 1 + capability::PublicKey::kRawSize) {
    return bad(absl::StrCat("Ed25519 key is ", encoded->size() - 1, " bytes, want ",
                            capability::PublicKey::kRawSize));
  }
  if (KeyIdOf(name, *encoded) != key_id) {
    return bad(absl::StrFormat("key ID %s does not match the key (want %08x)", id_hex,
                               KeyIdOf(name, *encoded)));
  }
  absl::StatusOr<capability::PublicKey> key =
      capability::PublicKey::FromRaw(absl::string_view(*encoded).substr(1));
  if (!key.ok()) return bad(key.status().message());
  return NoteVerifier(std::string(name), key_id, *std::move(key));
}

std::string NoteVerifier::ToString() const {
  return absl::StrFormat("%s+%08x+%s", name_, key_id_, absl::Base64Escape(EncodedKey(key_)));
}

// --- Notes -------------------------------------------------------------------------------------

absl::StatusOr<std::string> SignNote(absl::string_view text, absl::string_view name,
                                     const capability::PrivateKey& key) {
  if (text.empty()) return absl::InvalidArgumentError("note text is empty");
  if (text.back() != '\n') {
    return absl::InvalidArgumentError("note text does not end in a newline");
  }
  VAULT_RETURN_IF_ERROR(CheckNoteChars(text, "note text"));
  VAULT_RETURN_IF_ERROR(CheckKeyName(name));
  VAULT_ASSIGN_OR_RETURN(std::string signature, key.Sign(text));
  const std::string blob = absl::StrCat(BigEndian32(NoteKeyId(name, key.public_key())), signature);
  return absl::StrCat(text, "\n", kSignaturePrefix, name, " ", absl::Base64Escape(blob), "\n");
}

absl::StatusOr<ParsedNote> ParseNote(absl::string_view note) {
  auto bad = [](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("malformed signed note: ", why));
  };
  if (absl::Status s = CheckNoteChars(note, "note"); !s.ok()) return bad(s.message());
  // The text ends at the last blank line (C2SP signed-note; Go's note.Open).
  const size_t split = note.rfind("\n\n");
  if (split == absl::string_view::npos) return bad("no blank line before the signatures");
  ParsedNote parsed;
  parsed.text = std::string(note.substr(0, split + 1));
  absl::string_view sigs = note.substr(split + 2);
  if (sigs.empty()) return bad("no signature lines");
  if (sigs.back() != '\n') return bad("last signature line does not end in a newline");

  while (!sigs.empty()) {
    const size_t nl = sigs.find('\n');  // found: `sigs` ends in '\n'
    absl::string_view line = sigs.substr(0, nl);
    sigs.remove_prefix(nl + 1);
    if (parsed.signatures.size() == kMaxSignatures) {
      return bad(absl::StrCat("more than ", kMaxSignatures, " signatures"));
    }
    if (line.substr(0, kSignaturePrefix.size()) != kSignaturePrefix) {
      return bad(absl::StrCat("signature line \"", absl::CEscape(line),
                              "\" does not start with U+2014 and a space"));
    }
    line.remove_prefix(kSignaturePrefix.size());
    const size_t space = line.find(' ');
    if (space == absl::string_view::npos) {
      return bad(absl::StrCat("signature line \"", absl::CEscape(line), "\" has no signature"));
    }
    const absl::string_view name = line.substr(0, space);
    const absl::string_view b64 = line.substr(space + 1);
    if (absl::Status s = CheckKeyName(name); !s.ok()) return bad(s.message());
    absl::StatusOr<std::string> blob = DecodeBase64Strict(b64, "signature");
    if (!blob.ok()) return bad(blob.status().message());
    if (blob->size() <= kKeyIdSize) {
      return bad(absl::StrCat("signature by \"", name, "\" is ", blob->size(),
                              " bytes, shorter than a key ID and a signature"));
    }
    NoteSignature sig;
    sig.name = std::string(name);
    sig.key_id = ReadBigEndian32(*blob);
    sig.signature = blob->substr(kKeyIdSize);
    parsed.signatures.push_back(std::move(sig));
  }
  return parsed;
}

absl::StatusOr<std::string> OpenNote(absl::string_view note, const NoteVerifier& verifier) {
  VAULT_ASSIGN_OR_RETURN(ParsedNote parsed, ParseNote(note));
  // Every signature line naming this key must verify (C2SP: a failing signature from a known key
  // rejects the whole note); lines by other keys are ignored.
  bool found = false;
  for (const NoteSignature& sig : parsed.signatures) {
    if (sig.name != verifier.name() || sig.key_id != verifier.key_id()) continue;
    absl::Status s = verifier.key().Verify(parsed.text, sig.signature);
    if (s.code() == absl::StatusCode::kInvalidArgument ||
        s.code() == absl::StatusCode::kUnauthenticated) {
      return absl::UnauthenticatedError(absl::StrFormat(
          "invalid signature for note key %s+%08x: %s", sig.name, sig.key_id, s.message()));
    }
    VAULT_RETURN_IF_ERROR(s);
    found = true;
  }
  if (!found) {
    return absl::NotFoundError(absl::StrFormat("note has no signature by key %s+%08x",
                                               verifier.name(), verifier.key_id()));
  }
  return std::move(parsed.text);
}

}  // namespace vault::audit
