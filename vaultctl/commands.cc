// The helpers commands.h declares for several groups of subcommands (cap, agent, policy): parsing
// principals and byte sizes, printing constraints, tables and text from a vault.
#include "vaultctl/commands.h"

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "capability/principal.h"
#include "capability/text_form.h"
#include "common/file_util.h"
#include "vaultctl/output.h"

namespace vault::vaultctl {
namespace {

using capability::PrivateKey;
using capability::PublicKey;

}  // namespace

absl::StatusOr<PublicKey> PrincipalArg(const std::string& text, absl::string_view flag) {
  if (absl::StartsWith(text, PublicKey::kTextPrefix)) {
    absl::StatusOr<PublicKey> k = PublicKey::FromText(text);
    if (!k.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, ": \"", text, "\" is not an ed25519:<64 lowercase hex> public key"));
    }
    return k;
  }
  absl::StatusOr<std::string> content = common::ReadFile(text);
  if (!content.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": \"", text,
                     "\" is neither a principal id (ed25519:<hex>) nor a readable key file"));
  }
  if (absl::StrContains(*content, "PRIVATE KEY")) {
    absl::StatusOr<PrivateKey> key = PrivateKey::LoadFile(text);
    if (!key.ok()) {
      return absl::Status(key.status().code(), absl::StrCat(flag, ": ", key.status().message()));
    }
    return key->public_key();
  }
  absl::StatusOr<PublicKey> k = PublicKey::FromText(absl::StripAsciiWhitespace(*content));
  if (!k.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        flag, ": ", text, " holds neither a private key (PEM) nor an ed25519:<hex> id"));
  }
  return k;
}

absl::StatusOr<uint64_t> ParseByteSize(absl::string_view flag, absl::string_view text) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": \"", text, "\" ", why, " (a size is e.g. 4096, 10KiB, 512M or 1G)"));
  };
  absl::string_view t = absl::StripAsciiWhitespace(text);
  if (t.empty()) return bad("is empty");
  size_t digits = 0;
  while (digits < t.size() && absl::ascii_isdigit(t[digits])) ++digits;
  if (digits == 0) return bad("does not start with a number");
  absl::string_view unit = absl::StripLeadingAsciiWhitespace(t.substr(digits));
  if (absl::StartsWith(unit, ".") || absl::StartsWith(unit, ",")) {
    return bad("is not a whole number; write 1536M rather than 1.5G");
  }
  const std::string u = absl::AsciiStrToLower(unit);
  int shift = -1;
  for (const auto& [names, s] :
       std::initializer_list<std::pair<std::vector<const char*>, int>>{{{"", "b"}, 0},
                                                                       {{"k", "kb", "kib"}, 10},
                                                                       {{"m", "mb", "mib"}, 20},
                                                                       {{"g", "gb", "gib"}, 30},
                                                                       {{"t", "tb", "tib"}, 40}}) {
    for (const char* n : names) {
      if (u == n) shift = s;
    }
  }
  if (shift < 0) {
    return bad(absl::StrCat("has an unknown unit \"", unit,
                            "\"; expected B, K, M, G or T (or KiB, MiB, GiB, TiB)"));
  }
  uint64_t value = 0;
  if (!absl::SimpleAtoi(t.substr(0, digits), &value) || value > (UINT64_MAX >> shift)) {
    return bad("is too large");
  }
  return value << shift;
}

std::string ConstraintsLine(const vault::v1::Constraints& c) {
  std::string out;
  bool space = false;
  for (char ch : capability::ConstraintsToSexpr(c)) {
    if (ch == '\n' || ch == ' ') {
      space = !out.empty();
      continue;
    }
    if (space && ch != ')') out.push_back(' ');
    space = false;
    out.push_back(ch);
  }
  return out;
}

Json ConstraintsJson(const vault::v1::Constraints& c) {
  Json o = Json::Object();
  if (c.has_max_runtime_ms()) o.Add("max_runtime_ms", c.max_runtime_ms());
  if (c.has_max_memory_bytes()) o.Add("max_memory_bytes", c.max_memory_bytes());
  if (c.has_max_storage_bytes()) o.Add("max_storage_bytes", c.max_storage_bytes());
  if (c.has_max_cpu_ms()) o.Add("max_cpu_ms", c.max_cpu_ms());
  if (c.has_max_open_files()) o.Add("max_open_files", c.max_open_files());
  if (c.has_max_processes()) o.Add("max_processes", c.max_processes());
  if (c.has_max_steps()) o.Add("max_steps", c.max_steps());
  if (c.has_max_allocation_bytes()) o.Add("max_allocation_bytes", c.max_allocation_bytes());
  if (c.has_max_migrations()) o.Add("max_migrations", c.max_migrations());
  if (c.has_expires_unix_ms()) o.Add("expires_unix_ms", c.expires_unix_ms());
  return o;
}

void PrintTable(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const std::vector<std::string>& row : rows) {
    if (width.size() < row.size()) width.resize(row.size(), 0);
    for (size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  }
  for (const std::vector<std::string>& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line.append(width[i] - row[i].size() + 2, ' ');
    }
    std::cout << line << "\n";
  }
}

std::string TerminalSafe(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if ((c < 0x20 && c != '\t' && c != '\n') || c == 0x7f) {
      absl::StrAppend(&out, absl::StrFormat("\\x%02x", c));
    } else if (c == 0xC2 && i + 1 < text.size() &&
               (static_cast<unsigned char>(text[i + 1]) & 0xE0) == 0x80) {
      // U+0080..U+009F: C1 controls (a terminal may take U+009B as CSI).
      absl::StrAppend(&out, absl::StrFormat("\\u%04x", static_cast<unsigned char>(text[++i])));
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  return out;
}

}  // namespace vault::vaultctl
