// common/json: writing JSON strings, the one escaper of the project (vaultctl's --output json,
// vaultd's JSON log, the benchmarks' result lines).
//
// Strings are escaped per RFC 8259: `"` and `\\`, \n \r \t by name, other control characters
// as \u00XX. Bytes that are not well-formed UTF-8 (RFC 3629: no overlong forms, no surrogates,
// nothing above U+10FFFF) become U+FFFD, so the output is valid JSON whatever the input holds.
//
//   std::string line = "{\"message\":";
//   common::AppendJsonString(message, &line);
//   std::string quoted = common::JsonQuote("a\"b");   // "a\"b" with its quotes
//
// Thread-safety: pure functions.
#ifndef VAULT_COMMON_JSON_H_
#define VAULT_COMMON_JSON_H_

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"

namespace vault::common {

// Appends `text` as a JSON string (quotes included) to `out`.
void AppendJsonString(absl::string_view text, std::string* out);
// `text` as a JSON string, quotes included.
std::string JsonQuote(absl::string_view text);
// The length of the well-formed UTF-8 sequence at the start of `s`, or 0.
size_t Utf8Length(absl::string_view s);

}  // namespace vault::common

#endif  // VAULT_COMMON_JSON_H_
