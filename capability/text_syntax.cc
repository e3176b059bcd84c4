#include "capability/text_syntax.h"

#include <algorithm>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "capability/grant.h"
#include "common/json.h"
#include "common/status_macros.h"

namespace vault::capability::text {

using vault::v1::Grant;

std::string PosText(Pos pos) { return absl::StrCat(pos.line, ":", pos.col); }

absl::Status ErrorAt(absl::string_view source, Pos pos, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(source, ":", PosText(pos), ": ", what));
}

// The position of byte `offset` of `text`.
Pos PosAt(absl::string_view text, size_t offset) {
  Pos pos;
  for (size_t i = 0; i < offset && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++pos.line;
      pos.col = 1;
    } else {
      ++pos.col;
    }
  }
  return pos;
}

absl::Status CheckSize(absl::string_view text, absl::string_view source) {
  if (text.size() > kMaxInputBytes) {
    return ErrorAt(source, Pos{},
                   absl::StrCat("input is ", text.size(), " bytes; at most ", kMaxInputBytes,
                                " are accepted"));
  }
  return absl::OkStatus();
}

// A value quoted for an error message, cut to a readable length.
std::string Quoted(absl::string_view s) {
  constexpr size_t kMax = 80;
  if (s.size() > kMax) return absl::StrCat("\"", absl::CHexEscape(s.substr(0, kMax)), "...\"");
  return absl::StrCat("\"", absl::CHexEscape(s), "\"");
}

std::string DescribeByte(char c) {
  unsigned char u = static_cast<unsigned char>(c);
  if (u > 0x20 && u < 0x7f) return absl::StrCat("'", std::string(1, c), "'");
  return absl::StrCat("byte 0x", absl::Hex(u, absl::kZeroPad2));
}

bool IsValidUtf8(absl::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const size_t n = common::Utf8Length(s.substr(i));
    if (n == 0) return false;
    i += n;
  }
  return true;
}

bool IsLowerHex(absl::string_view s) {
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

bool IsDigits(absl::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), absl::ascii_isdigit);
}

// -?[0-9]+
bool IsIntegerLiteral(absl::string_view s) {
  if (absl::StartsWith(s, "-")) s.remove_prefix(1);
  return IsDigits(s);
}

bool IsSymbolChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '*' || c == '.' || c == '_' ||
         c == '/' || c == '-' || c == '+';
}

// "sha256:<64 lowercase hex>" → 32 bytes.
std::optional<std::string> ParseHash(absl::string_view text) {
  if (!absl::ConsumePrefix(&text, "sha256:") || text.size() != 64 || !IsLowerHex(text)) {
    return std::nullopt;
  }
  return absl::HexStringToBytes(text);
}

// "sha256:<64 lowercase hex>/<size>".
std::optional<vault::v1::Digest> ParseDigest(absl::string_view text) {
  size_t slash = text.find('/');
  if (slash == absl::string_view::npos) return std::nullopt;
  std::optional<std::string> hash = ParseHash(text.substr(0, slash));
  absl::string_view size_text = text.substr(slash + 1);
  uint64_t size = 0;
  if (!hash || !IsDigits(size_text) || !absl::SimpleAtoi(size_text, &size)) return std::nullopt;
  vault::v1::Digest digest;
  digest.set_sha256(*std::move(hash));
  digest.set_size(size);
  return digest;
}

// A grant as every format must leave it: ValidateGrant, and a port that is a port.
absl::Status CheckGrant(const Grant& grant) {
  VAULT_RETURN_IF_ERROR(ValidateGrant(grant));
  if (grant.port() > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("port ", grant.port(), " is out of range"));
  }
  return absl::OkStatus();
}

constexpr ConstraintName kConstraintNames[] = {
    {"max-runtime", "max_runtime_ms", 1000},
    {"max-runtime-ms", "max_runtime_ms", 1},
    {"max-memory", "max_memory_bytes", 1},
    {"max-storage", "max_storage_bytes", 1},
    {"max-cpu", "max_cpu_ms", 1000},
    {"max-cpu-ms", "max_cpu_ms", 1},
    {"max-open-files", "max_open_files", 1},
    {"max-processes", "max_processes", 1},
    {"max-migrations", "max_migrations", 1},
    {"expires", "expires_unix_ms", 1000},
    {"expires-ms", "expires_unix_ms", 1},
    {"max-steps", "max_steps", 1},
    {"max-allocation", "max_allocation_bytes", 1},
};

absl::Span<const ConstraintName> ConstraintNames() { return kConstraintNames; }

const ConstraintName* FindConstraintName(absl::string_view name) {
  for (const ConstraintName& c : kConstraintNames) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

std::string ConstraintNameList() {
  std::vector<absl::string_view> names;
  for (const ConstraintName& c : kConstraintNames) names.push_back(c.name);
  return absl::StrJoin(names, ", ");
}

void DropDirectorySlash(std::string* path) {
  if (path->size() > 1 && path->back() == '/' && (*path)[path->size() - 2] != '/') {
    path->pop_back();
  }
}

std::pair<size_t, size_t> Trimmed(absl::string_view text) {
  size_t begin = text.find_first_not_of(" \t\r\n");
  if (begin == absl::string_view::npos) return {text.size(), text.size()};
  size_t end = text.find_last_not_of(" \t\r\n") + 1;
  return {begin, end};
}

}  // namespace vault::capability::text
