// capability/text_form: grants, constraints and agent specs from text — protobuf text format,
// JSON, and the RFC's S-expression form (design §6) — with errors that name the line and column.
//
// S-expression form (the canonical one for people):
//
//   (agent
//     (purpose "gather prices")
//     (instructions "answer (price ITEM) with a number")
//     (code "sha256:<64 hex>/<size>")            ; or (code-file "agent.py")
//     (capabilities
//       (read (path "/vault/pub"))  (write (path "/vault/pub/out"))  (read (hash "sha256:<hex>"))
//       (cas-read) (cas-write) (spawn)
//       (network (host "*.example.com") (port 443))                 ; port omitted: any
//       (send (agent "a-7")) (receive (from "*"))
//       (send (agent "a-8") (types ping stop)) (receive (from "a-8") (types ping))  ; only these
//       (migrate (vaults vault-b vault-c)))
//     (constraints
//       (max-runtime (* 24 3600))          ; seconds
//       (max-memory (* 512 1024 1024))     ; bytes
//       (max-storage (* 1 1024 1024 1024)) (max-cpu 600) (max-open-files 64) (max-processes 8)
//       (max-migrations 3) (expires 1798761600))   ; unix seconds
//     (sandbox posix))
//
// Numbers are decimal integers or arithmetic (+ a b ...), (- a b), (* a b ...) on them, checked
// for overflow. Strings are "..." with \" and \\ escapes (also \n, \t, \r and \xHH; the result
// must be UTF-8); bare symbols ([a-z0-9*._/+-]+) are accepted where a name is expected (path,
// host, agent, from, vault names, message types, sandbox). Comments run from ';' to the end of
// the line. Unknown forms, repeated singletons and values out of range are errors. Every parsed
// grant is checked with ValidateGrant; (vaults ...) and (types ...) are sorted and de-duplicated
// first; (types) with no type is an error (leave it out for any type). Limits that are not whole
// seconds are written (max-runtime-ms N), (max-cpu-ms N), (expires-ms N). Every format refuses
// inputs over 1 MiB and nesting deeper than 64; columns count bytes.
//
//   VAULT_ASSIGN_OR_RETURN(vault::v1::AgentSpec spec, ParseAgentSpec(text, "spec.scm"));
//   // errors: "spec.scm:4:12: (network ...) needs (host ...)"
//
// Thread-safety: pure functions.
#ifndef VAULT_CAPABILITY_TEXT_FORM_H_
#define VAULT_CAPABILITY_TEXT_FORM_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "vault/v1/agent.pb.h"
#include "vault/v1/capability.pb.h"

namespace vault::capability {

enum class TextFormat { kAuto, kSexpr, kJson, kTextproto };

// kAuto: '(' after whitespace/comments → S-expression, '{' → JSON, otherwise text format.
// INVALID_ARGUMENT "<source>:<line>:<col>: <what>" on any error.
absl::StatusOr<vault::v1::AgentSpec> ParseAgentSpec(absl::string_view text,
                                                    absl::string_view source,
                                                    TextFormat format = TextFormat::kAuto);
// A list of grants: S-expression "(capabilities (read (path "/a")) ...)" or a single grant form
// "(read (path "/a"))"; JSON/textproto of vault.v1.Grant (one). (The command line's shorthand,
// "read:/vault/pub", is vaultctl's own: vaultctl/shorthand.h.)
absl::StatusOr<std::vector<vault::v1::Grant>> ParseGrants(absl::string_view text,
                                                          absl::string_view source);
// "(constraints ...)" S-expression, one limit form "(max-migrations 3)", JSON or text format.
// (The "key=value,..." shorthand of vaultctl --constraints is vaultctl/shorthand.h's.)
absl::StatusOr<vault::v1::Constraints> ParseConstraints(absl::string_view text,
                                                        absl::string_view source);

// What a caller adds to a spec's text: values for the symbols it uses as placeholders, as the
// RFC's examples do ((read (hash input-hash)), (spawned-by user-principal)). vaultctl fills it
// from --bind NAME=VALUE.
struct SpecOptions {
  std::map<std::string, std::string> bindings;
};
// A spec and what the parser noticed but accepted ("spec.scm:14:3: (status running) ignored:
// ..."): a missing purpose, an ignored (status ...).
struct ParsedSpec {
  vault::v1::AgentSpec spec;
  std::vector<std::string> warnings;
};
absl::StatusOr<ParsedSpec> ParseAgentSpecWithOptions(absl::string_view text,
                                                     absl::string_view source,
                                                     const SpecOptions& options);

// The fields that only some sandbox types take: fuel (max-steps, max-allocation), counted only by
// the interpreting sandboxes, scheme and wasm; args and env, given to a posix or wasm program
// (and well-formed: at most 64 each, keys [A-Za-z_][A-Za-z0-9_]*, never VAULT_*).
// INVALID_ARGUMENT otherwise (ParseAgentSpecWithOptions and the vault's spawn both check).
absl::Status CheckSandboxFields(const vault::v1::AgentSpec& spec);

// The canonical S-expression of a spec / grants / constraints (parses back to the same).
std::string AgentSpecToSexpr(const vault::v1::AgentSpec& spec);
std::string GrantsToSexpr(const std::vector<vault::v1::Grant>& grants);
std::string ConstraintsToSexpr(const vault::v1::Constraints& constraints);

}  // namespace vault::capability

#endif  // VAULT_CAPABILITY_TEXT_FORM_H_
