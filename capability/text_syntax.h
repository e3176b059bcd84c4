// capability/text_syntax: the pieces every text form of grants, constraints and specs shares
// (capability/text_form.h reads S-expressions, JSON and protobuf text format with them; vaultctl's
// command-line shorthand reads "read:/vault/pub" and "max-migrations=3" with them): positions
// and errors that name "<source>:<line>:<col>", the lexical rules for hashes, digests, symbols and
// numbers, the check every parsed grant passes, and the table of constraint names.
//
//   return text::ErrorAt(source, text::PosAt(text, offset), "unknown grant kind");
//
// Thread-safety: pure functions and constants.
#ifndef VAULT_CAPABILITY_TEXT_SYNTAX_H_
#define VAULT_CAPABILITY_TEXT_SYNTAX_H_

#include <cstddef>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "vault/v1/capability.pb.h"

namespace vault::capability::text {

// Every format refuses inputs over 1 MiB and nesting deeper than 64 levels.
inline constexpr size_t kMaxInputBytes = size_t{1} << 20;
inline constexpr int kMaxDepth = 64;

// A 1-based line and column; a column counts bytes.
struct Pos {
  int line = 1;
  int col = 1;
};

std::string PosText(Pos pos);
// INVALID_ARGUMENT "<source>:<line>:<col>: <what>".
absl::Status ErrorAt(absl::string_view source, Pos pos, absl::string_view what);
// The position of byte `offset` of `text`.
Pos PosAt(absl::string_view text, size_t offset);
// An input over kMaxInputBytes is refused at 1:1.
absl::Status CheckSize(absl::string_view text, absl::string_view source);
// A value quoted for an error message, cut to a readable length.
std::string Quoted(absl::string_view s);
// 'c' for a printable byte, "byte 0xHH" otherwise.
std::string DescribeByte(char c);
bool IsValidUtf8(absl::string_view s);
bool IsLowerHex(absl::string_view s);
bool IsDigits(absl::string_view s);
// -?[0-9]+
bool IsIntegerLiteral(absl::string_view s);
// [a-z0-9*._/+-]: what a bare symbol is made of.
bool IsSymbolChar(char c);
// "sha256:<64 lowercase hex>" -> 32 bytes.
std::optional<std::string> ParseHash(absl::string_view text);
// "sha256:<64 lowercase hex>/<size>".
std::optional<vault::v1::Digest> ParseDigest(absl::string_view text);
inline constexpr absl::string_view kHashSyntax = "expected \"sha256:<64 lowercase hex digits>\"";
inline constexpr absl::string_view kDigestSyntax =
    "expected \"sha256:<64 lowercase hex digits>/<size in bytes>\"";
// A grant as every format must leave it: ValidateGrant, and a port that is a port.
absl::Status CheckGrant(const vault::v1::Grant& grant);
// People write directories with a trailing '/' ("/vault/papers/"); the canonical form has none.
// Only that one character is dropped ("//" stays, and is refused): nothing else is repaired.
void DropDirectorySlash(std::string* path);
// [begin, end) of `text` without surrounding whitespace.
std::pair<size_t, size_t> Trimmed(absl::string_view text);

// Constraints: the names shared by the S-expression and the key=value shorthand.
struct ConstraintName {
  absl::string_view name;   // "max-runtime"
  absl::string_view field;  // "max_runtime_ms"
  int scale;                // 1000: the text is in seconds, the field in milliseconds
};
// Every constraint name, in the order the canonical form prints them.
absl::Span<const ConstraintName> ConstraintNames();
const ConstraintName* FindConstraintName(absl::string_view name);
// "max-runtime, max-runtime-ms, ...", for error messages.
std::string ConstraintNameList();
// Sets the limit `name` from the decimal literal `literal` (at `pos` of `source`), checking its
// range and the unit conversion as the S-expression form does.
absl::Status SetConstraintFromLiteral(const ConstraintName& name, absl::string_view literal,
                                      absl::string_view source, Pos pos,
                                      vault::v1::Constraints* out);

}  // namespace vault::capability::text

#endif  // VAULT_CAPABILITY_TEXT_SYNTAX_H_
