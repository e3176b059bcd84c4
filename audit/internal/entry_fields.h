// audit/internal/entry_fields: the three fields of a stored AuditEntry that whole-log
// verification checks (sequence, vault, prev_hash), read straight from its wire bytes.
//
// Verification parses every entry of the log; building an AuditEntry message for each (a string
// copy per field, a Detail message per detail, UTF-8 checks through the generic parser) costs
// more than hashing it. ReadPlainEntry walks the bytes once instead, without allocating, and
// accepts only the plain form that Append writes: every field one of AuditEntry's own, with its
// declared wire type; ASCII strings; varints of at most 10 bytes that fit 64 bits; lengths within
// the bytes. Anything else (unknown fields, groups, non-ASCII text, ...) gives nullopt and the
// caller must run the full protobuf parser, which decides. So whenever it returns fields,
// vault::v1::AuditEntry::ParseFromArray accepts the same bytes and yields the same values (the
// last occurrence of a repeated singular field wins, as in protobuf).
//
//   std::optional<EntryFields> f = ReadPlainEntry(bytes);
//   if (!f.has_value()) { /* entry.ParseFromArray(...) decides */ }
//
// Thread-safety: a pure function; the views point into `bytes`.
#ifndef VAULT_AUDIT_INTERNAL_ENTRY_FIELDS_H_
#define VAULT_AUDIT_INTERNAL_ENTRY_FIELDS_H_

#include <cstdint>
#include <optional>

#include "absl/strings/string_view.h"

namespace vault::audit::internal {

struct EntryFields {
  uint64_t sequence = 0;
  absl::string_view vault;
  absl::string_view prev_hash;
};

std::optional<EntryFields> ReadPlainEntry(absl::string_view bytes);

}  // namespace vault::audit::internal

#endif  // VAULT_AUDIT_INTERNAL_ENTRY_FIELDS_H_
