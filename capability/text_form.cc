#include "capability/text_form.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "capability/internal/message_checks.h"
#include "capability/internal/parse_message.h"
#include "capability/internal/sexpr.h"
#include "capability/text_syntax.h"
#include "common/status_macros.h"

// Decisions the header leaves open (documented here, tested in text_form_test.cc):
//   - Every format refuses inputs over 1 MiB and nesting deeper than 64 levels (S-expression
//     lists, JSON objects/arrays, text-format messages), reported at 1:1 / the deepest opener.
//   - Lines and columns are 1-based; a column counts bytes (a tab is one column).
//   - S-expression strings also accept \n, \t, \r and \xHH escapes, so that every string a
//     protobuf can hold prints and parses back; the result must be valid UTF-8. Raw newlines in
//     strings are allowed; other raw control characters are not.
//   - (migrate (vaults ...)) names and (send/receive ... (types ...)) message types are sorted and
//     de-duplicated (S-expression and vaultctl's shorthand); JSON and text format are the exact
//     wire form and must already be sorted and unique.
//   - Limits that are not a whole number of seconds print as (max-runtime-ms N), (max-cpu-ms N)
//     and (expires-ms N), which the parser (and vaultctl's key=value shorthand) also accept.
//   - Names (path, host, agent, from, vault names, message types, sandbox) may be bare symbols or
//     strings; purpose, instructions, code, code-file and hash must be strings.
//   - JSON and text format specs get the same semantic checks as S-expressions (ValidateGrant,
//     a 32-byte code digest, a non-empty code-file, UTF-8 strings); the message is prefixed with
//     the field path ("grants[1]: ...") and located at that field. JSON semantic errors from
//     protobuf (wrong types) are located by the field path protobuf reports, resolved against
//     our own JSON parse; when that fails, at the document's start (best effort).
//
// The parts: text_syntax.h (positions, lexical rules, constraint names), internal/sexpr_reader.cc
// and internal/sexpr_mapper.cc (the S-expression form), internal/json_form.cc and
// internal/textproto_form.cc (the protobuf forms, internal/message_checks.cc their semantic
// checks), sexpr_printer.cc (the canonical form). This file detects the format and dispatches.

namespace vault::capability {
namespace {

using internal::CheckNothing;
using internal::CheckOneGrant;
using internal::CheckSpec;
using internal::ParseJson;
using internal::ParseText;
using internal::ReadSexpDocument;
using internal::Sexp;
using internal::SexpToAgentSpec;
using internal::SexpToConstraints;
using internal::SexpToGrants;
using vault::v1::AgentSpec;
using vault::v1::Constraints;
using vault::v1::Grant;

// The first byte that is not blank or in a ';' / '#' comment, or 0.
char FirstSignificant(absl::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    char c = text[i];
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      ++i;
    } else if (c == ';' || c == '#') {
      while (i < text.size() && text[i] != '\n') ++i;
    } else {
      return c;
    }
  }
  return 0;
}

TextFormat Detect(absl::string_view text) {
  char c = FirstSignificant(text);
  if (c == '(') return TextFormat::kSexpr;
  if (c == '{') return TextFormat::kJson;
  return TextFormat::kTextproto;
}

}  // namespace

absl::StatusOr<AgentSpec> ParseAgentSpec(absl::string_view text, absl::string_view source,
                                         TextFormat format) {
  VAULT_RETURN_IF_ERROR(text::CheckSize(text, source));
  if (format == TextFormat::kAuto) format = Detect(text);
  switch (format) {
    case TextFormat::kSexpr: {
      VAULT_ASSIGN_OR_RETURN(Sexp doc, ReadSexpDocument(text, source, "(agent ...)"));
      return SexpToAgentSpec(doc, source);
    }
    case TextFormat::kJson:
      return ParseJson<AgentSpec>(text, source, &CheckSpec);
    case TextFormat::kTextproto:
    case TextFormat::kAuto:
      break;
  }
  return ParseText<AgentSpec>(text, source, &CheckSpec);
}

absl::Status CheckSandboxFields(const AgentSpec& spec) {
  const std::string type = spec.sandbox().empty() ? "posix" : spec.sandbox();
  if ((spec.args_size() > 0 || spec.env_size() > 0) && type != "posix" && type != "wasm" &&
      type != "container") {
    return absl::InvalidArgumentError(
        absl::StrCat("args and env are given to a program: a posix, wasm or container agent's, "
                     "not a ",
                     type, " agent's"));
  }
  if ((!spec.image().empty() || spec.command_size() > 0) && type != "container") {
    return absl::InvalidArgumentError(
        absl::StrCat("(image ...) and (command ...) are a container agent's, not a ", type,
                     " agent's: add (sandbox container)"));
  }
  if (type == "container" && (spec.has_code_file() || spec.has_code_source())) {
    return absl::InvalidArgumentError(
        "a container agent's code is an image the vault imported: (image \"NAME\") or "
        "(image \"sha256:<manifest hex>\"), not a code file");
  }
  if (spec.args_size() > 64 || spec.env_size() > 64 || spec.command_size() > 64) {
    return absl::InvalidArgumentError(
        "a spec has at most 64 args, 64 env entries and 64 command entries");
  }
  for (const auto* list : {&spec.args(), &spec.command()}) {
    for (const std::string& a : *list) {
      if (a.size() > 4096 || a.find('\0') != std::string::npos) {
        return absl::InvalidArgumentError(
            "an arg or command entry is at most 4096 bytes, without NUL");
      }
    }
  }
  if (spec.command_size() > 0 && spec.command(0).empty()) {
    return absl::InvalidArgumentError("(command ...) starts with the program to run");
  }
  for (const std::string& e : spec.env()) {
    const size_t eq = e.find('=');
    const std::string key = e.substr(0, eq);
    bool ok = eq != std::string::npos && eq > 0 && e.size() <= 4096 &&
              e.find('\0') == std::string::npos && !absl::StartsWith(key, "VAULT_") &&
              !absl::ascii_isdigit(static_cast<unsigned char>(key[0]));
    for (char ch : key)
      ok = ok && (absl::ascii_isalnum(static_cast<unsigned char>(ch)) || ch == '_');
    if (!ok) {
      return absl::InvalidArgumentError(absl::StrCat(
          "env entry \"", e.substr(0, 64),
          "\" is not KEY=VALUE with a key of [A-Za-z_][A-Za-z0-9_]* (VAULT_* is the vault's)"));
    }
  }
  const Constraints& c = spec.constraints();
  if (!c.has_max_steps() && !c.has_max_allocation_bytes()) return absl::OkStatus();
  if (spec.sandbox() == "scheme" || spec.sandbox() == "wasm") return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "fuel (max-steps, max-allocation, (fuel ...)) is counted only by the interpreting "
      "sandboxes (scheme, wasm); a ",
      spec.sandbox().empty() ? "posix" : spec.sandbox(),
      " agent is bounded by max-cpu and max-memory instead"));
}

absl::StatusOr<ParsedSpec> ParseAgentSpecWithOptions(absl::string_view text,
                                                     absl::string_view source,
                                                     const SpecOptions& options) {
  VAULT_RETURN_IF_ERROR(text::CheckSize(text, source));
  ParsedSpec out;
  if (Detect(text) != TextFormat::kSexpr) {
    VAULT_ASSIGN_OR_RETURN(out.spec, ParseAgentSpec(text, source));
    if (absl::Status s = CheckSandboxFields(out.spec); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(source, ": ", s.message()));
    }
    if (out.spec.purpose().empty()) {
      out.warnings.push_back(absl::StrCat(source,
                                          ": the spec has no purpose; the vault records "
                                          "a default"));
    }
    return out;
  }
  VAULT_ASSIGN_OR_RETURN(Sexp doc, ReadSexpDocument(text, source, "(agent ...)"));
  VAULT_ASSIGN_OR_RETURN(out.spec, SexpToAgentSpec(doc, source, &options, &out.warnings));
  if (out.spec.has_code_source() && out.spec.sandbox().empty()) out.spec.set_sandbox("scheme");
  if (absl::Status s = CheckSandboxFields(out.spec); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": ", s.message()));
  }
  return out;
}

absl::StatusOr<std::vector<Grant>> ParseGrants(absl::string_view text, absl::string_view source) {
  VAULT_RETURN_IF_ERROR(text::CheckSize(text, source));
  switch (Detect(text)) {
    case TextFormat::kSexpr: {
      VAULT_ASSIGN_OR_RETURN(Sexp doc,
                             ReadSexpDocument(text, source, "(capabilities ...) or a grant form"));
      return SexpToGrants(doc, source);
    }
    case TextFormat::kJson: {
      VAULT_ASSIGN_OR_RETURN(Grant grant, ParseJson<Grant>(text, source, &CheckOneGrant));
      return std::vector<Grant>{std::move(grant)};
    }
    default:
      break;
  }
  auto [begin, end] = text::Trimmed(text);
  if (begin == end) {
    return text::ErrorAt(source, text::PosAt(text, begin),
                         "empty input; expected a grant such as (read (path \"/vault/pub\"))");
  }
  VAULT_ASSIGN_OR_RETURN(Grant grant, ParseText<Grant>(text, source, &CheckOneGrant));
  return std::vector<Grant>{std::move(grant)};
}

absl::StatusOr<Constraints> ParseConstraints(absl::string_view text, absl::string_view source) {
  VAULT_RETURN_IF_ERROR(text::CheckSize(text, source));
  switch (Detect(text)) {
    case TextFormat::kSexpr: {
      VAULT_ASSIGN_OR_RETURN(Sexp doc, ReadSexpDocument(text, source, "(constraints ...)"));
      Constraints constraints;
      VAULT_RETURN_IF_ERROR(SexpToConstraints(doc, source, &constraints));
      return constraints;
    }
    case TextFormat::kJson:
      return ParseJson<Constraints>(text, source, &CheckNothing);
    default:
      break;
  }
  return ParseText<Constraints>(text, source, &CheckNothing);
}

}  // namespace vault::capability
