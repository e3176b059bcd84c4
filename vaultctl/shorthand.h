// vaultctl/shorthand: the command line's own grammar for grants and constraints, beside the text
// forms every tool shares (capability/text_form.h):
//   --grant        read:/vault/pub, write:/x, read-hash:sha256:<hex>, cas-read, cas-write, spawn,
//                  network:*.example.com:443, network:host (any port), send:AGENT, receive:AGENT,
//                  send:AGENT:ping,stop / receive:AGENT:ping (only those message types),
//                  migrate:vault-b,vault-c
//   --constraints  max-runtime=86400,max-memory=1073741824,max-migrations=3 (the S-expression's
//                  names and units)
// A flag's value in any other form (an S-expression, JSON, protobuf text format) goes to
// capability/text_form.h. Errors name the flag, the line and the column, as text_form's do.
//
//   VAULT_ASSIGN_OR_RETURN(std::vector<Grant> grants, ParseGrantsFlag(value, "--grant"));
//
// Thread-safety: pure functions.
#ifndef VAULT_VAULTCTL_SHORTHAND_H_
#define VAULT_VAULTCTL_SHORTHAND_H_

#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "vault/v1/capability.pb.h"

namespace vault::vaultctl {

absl::StatusOr<std::vector<vault::v1::Grant>> ParseGrantsFlag(absl::string_view text,
                                                              absl::string_view source);
absl::StatusOr<vault::v1::Constraints> ParseConstraintsFlag(absl::string_view text,
                                                            absl::string_view source);

}  // namespace vault::vaultctl

#endif  // VAULT_VAULTCTL_SHORTHAND_H_
