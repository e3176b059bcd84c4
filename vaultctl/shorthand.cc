#include "vaultctl/shorthand.h"

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "capability/text_form.h"
#include "capability/text_syntax.h"
#include "common/status_macros.h"

namespace vault::vaultctl {
namespace {

using capability::text::CheckGrant;
using capability::text::ConstraintName;
using capability::text::ConstraintNameList;
using capability::text::DropDirectorySlash;
using capability::text::ErrorAt;
using capability::text::FindConstraintName;
using capability::text::IsDigits;
using capability::text::IsIntegerLiteral;
using capability::text::kHashSyntax;
using capability::text::ParseHash;
using capability::text::Pos;
using capability::text::PosAt;
using capability::text::Quoted;
using capability::text::Trimmed;
using vault::v1::Constraints;
using vault::v1::Grant;

// A word of the shorthand: lowercase letters and '-' ("read", "max-runtime").
bool IsShorthandWord(absl::string_view word) {
  return !word.empty() && absl::ascii_islower(word[0]) &&
         std::all_of(word.begin(), word.end(),
                     [](char c) { return absl::ascii_islower(c) || c == '-'; });
}

absl::StatusOr<Grant> GrantFromShorthand(absl::string_view text, absl::string_view source) {
  const std::pair<size_t, size_t> span = Trimmed(text);  // not a structured binding: captured
  const size_t begin = span.first;
  absl::string_view s = text.substr(begin, span.second - begin);
  auto at = [&](size_t offset) { return PosAt(text, begin + offset); };
  size_t colon = s.find(':');
  absl::string_view kind = s.substr(0, colon);
  bool has_arg = colon != absl::string_view::npos;
  absl::string_view arg = has_arg ? s.substr(colon + 1) : absl::string_view();
  size_t arg_offset = has_arg ? colon + 1 : 0;

  Grant grant;
  // "a,b,a" at `offset` of `s`: sorted, without duplicates; an empty name is an error.
  auto name_list = [&](absl::string_view list, absl::string_view what,
                       size_t offset) -> absl::StatusOr<std::vector<std::string>> {
    std::vector<std::string> names;
    for (absl::string_view name : absl::StrSplit(list, ',')) {
      if (name.empty()) return ErrorAt(source, at(offset), absl::StrCat("empty ", what));
      names.emplace_back(name);
      offset += name.size() + 1;
    }
    std::sort(names.begin(), names.end());
    names.erase(std::unique(names.begin(), names.end()), names.end());
    return names;
  };
  auto need = [&](absl::string_view what, absl::string_view example) -> absl::Status {
    if (!arg.empty()) return absl::OkStatus();
    return ErrorAt(source, at(has_arg ? arg_offset : 0),
                   absl::StrCat(kind, " needs ", what, ", e.g. ", example));
  };
  if (kind == "read" || kind == "write") {
    VAULT_RETURN_IF_ERROR(need("a path", absl::StrCat(kind, ":/vault/pub")));
    grant.set_kind(kind == "read" ? Grant::READ : Grant::WRITE);
    grant.set_path(std::string(arg));
    DropDirectorySlash(grant.mutable_path());
  } else if (kind == "read-hash") {
    VAULT_RETURN_IF_ERROR(need("a hash", "read-hash:sha256:<64 hex digits>"));
    std::optional<std::string> hash = ParseHash(arg);
    if (!hash) {
      return ErrorAt(source, at(arg_offset),
                     absl::StrCat("bad hash ", Quoted(arg), ": ", kHashSyntax));
    }
    grant.set_kind(Grant::READ);
    grant.set_hash(*std::move(hash));
  } else if (kind == "cas-read" || kind == "cas-write" || kind == "spawn") {
    if (has_arg) return ErrorAt(source, at(colon), absl::StrCat(kind, " takes no argument"));
    grant.set_kind(kind == "cas-read"    ? Grant::CAS_READ
                   : kind == "cas-write" ? Grant::CAS_WRITE
                                         : Grant::SPAWN);
  } else if (kind == "network") {
    VAULT_RETURN_IF_ERROR(need("a host", "network:*.example.com:443"));
    grant.set_kind(Grant::NETWORK);
    size_t port_colon = arg.rfind(':');
    grant.set_host(std::string(arg.substr(0, port_colon)));
    if (port_colon != absl::string_view::npos) {
      absl::string_view port_text = arg.substr(port_colon + 1);
      uint32_t port = 0;
      if (port_text != "*" &&
          (!IsDigits(port_text) || !absl::SimpleAtoi(port_text, &port) || port > 65535)) {
        return ErrorAt(
            source, at(arg_offset + port_colon + 1),
            absl::StrCat("bad port ", Quoted(port_text), ": expected 0-65535 or * (any)"));
      }
      grant.set_port(port);
    }
  } else if (kind == "send" || kind == "receive") {
    VAULT_RETURN_IF_ERROR(need("an agent id or *", absl::StrCat(kind, ":agent-7")));
    grant.set_kind(kind == "send" ? Grant::SEND : Grant::RECEIVE);
    // "AGENT" or "AGENT:TYPE,TYPE...": agent ids never contain ':'.
    const size_t types_colon = arg.find(':');
    grant.set_agent(std::string(arg.substr(0, types_colon)));
    if (types_colon != absl::string_view::npos) {
      VAULT_ASSIGN_OR_RETURN(
          std::vector<std::string> types,
          name_list(arg.substr(types_colon + 1), "message type", arg_offset + types_colon + 1));
      for (std::string& type : types) grant.add_message_types(std::move(type));
    }
  } else if (kind == "migrate") {
    VAULT_RETURN_IF_ERROR(need("vault names", "migrate:vault-b,vault-c"));
    grant.set_kind(Grant::MIGRATE);
    VAULT_ASSIGN_OR_RETURN(std::vector<std::string> vaults,
                           name_list(arg, "vault name", arg_offset));
    for (std::string& vault : vaults) grant.add_vaults(std::move(vault));
  } else {
    return ErrorAt(source, at(0),
                   absl::StrCat("unknown grant kind ", Quoted(kind),
                                "; expected read, write, read-hash, cas-read, cas-write, spawn, "
                                "network, send, receive or migrate"));
  }
  absl::Status valid = CheckGrant(grant);
  if (!valid.ok()) return ErrorAt(source, at(has_arg ? arg_offset : 0), valid.message());
  return grant;
}

absl::StatusOr<Constraints> ConstraintsFromShorthand(absl::string_view text,
                                                     absl::string_view source) {
  Constraints constraints;
  std::map<std::string, std::string> seen;  // field → the key that set it
  size_t offset = 0;
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    size_t item_offset = offset;
    offset += item.size() + 1;
    auto [b, e] = Trimmed(item);
    item_offset += b;
    item = item.substr(b, e - b);
    Pos pos = PosAt(text, item_offset);
    if (item.empty()) return ErrorAt(source, pos, "empty item; expected key=value");
    size_t eq = item.find('=');
    if (eq == absl::string_view::npos) {
      return ErrorAt(source, pos, absl::StrCat("expected key=value, found ", Quoted(item)));
    }
    absl::string_view key = absl::StripTrailingAsciiWhitespace(item.substr(0, eq));
    const ConstraintName* name = FindConstraintName(key);
    if (name == nullptr) {
      return ErrorAt(
          source, pos,
          absl::StrCat("unknown constraint ", Quoted(key), "; expected ", ConstraintNameList()));
    }
    auto [it, inserted] = seen.emplace(std::string(name->field), std::string(key));
    if (!inserted) {
      return ErrorAt(source, pos,
                     it->second == key ? absl::StrCat("repeated ", key)
                                       : absl::StrCat(key, " conflicts with ", it->second));
    }
    size_t value_offset = eq + 1;
    while (value_offset < item.size() &&
           (item[value_offset] == ' ' || item[value_offset] == '\t')) {
      ++value_offset;
    }
    const Pos value_pos = PosAt(text, item_offset + value_offset);
    const absl::string_view value = item.substr(value_offset);
    if (!IsIntegerLiteral(value)) {
      return ErrorAt(source, value_pos,
                     absl::StrCat(key, " takes a decimal number, found ", Quoted(value)));
    }
    VAULT_RETURN_IF_ERROR(
        capability::text::SetConstraintFromLiteral(*name, value, source, value_pos, &constraints));
  }
  return constraints;
}

}  // namespace

absl::StatusOr<std::vector<Grant>> ParseGrantsFlag(absl::string_view text,
                                                   absl::string_view source) {
  // Past the size limit: text_form's error, whatever the text looks like.
  if (text.size() > capability::text::kMaxInputBytes) return capability::ParseGrants(text, source);
  auto [begin, end] = Trimmed(text);
  if (begin == end) {
    return ErrorAt(source, PosAt(text, begin),
                   "empty input; expected a grant such as read:/vault/pub");
  }
  absl::string_view trimmed = text.substr(begin, end - begin);
  absl::string_view word = trimmed.substr(0, trimmed.find(':'));
  // A shorthand word that is no field of Grant ("kind: READ" is text format).
  if (text.size() <= capability::text::kMaxInputBytes && IsShorthandWord(word) &&
      Grant::descriptor()->FindFieldByName(std::string(word)) == nullptr) {
    VAULT_ASSIGN_OR_RETURN(Grant grant, GrantFromShorthand(text, source));
    return std::vector<Grant>{std::move(grant)};
  }
  return capability::ParseGrants(text, source);
}

absl::StatusOr<Constraints> ParseConstraintsFlag(absl::string_view text, absl::string_view source) {
  auto [begin, end] = Trimmed(text);
  absl::string_view trimmed = text.substr(begin, end - begin);
  const size_t eq = trimmed.find('=');
  if (text.size() <= capability::text::kMaxInputBytes && eq != absl::string_view::npos &&
      IsShorthandWord(absl::StripTrailingAsciiWhitespace(trimmed.substr(0, eq)))) {
    return ConstraintsFromShorthand(text, source);
  }
  return capability::ParseConstraints(text, source);
}

}  // namespace vault::vaultctl
