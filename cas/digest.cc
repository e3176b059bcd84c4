#include "cas/digest.h"

#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace vault::cas {

absl::StatusOr<Digest> Digest::FromParts(absl::string_view sha256, uint64_t size) {
  if (sha256.size() != kSha256Bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("digest hash must be 32 bytes, got ", sha256.size()));
  }
  return Digest(std::string(sha256), size);
}

absl::StatusOr<Digest> Digest::Parse(absl::string_view text) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("invalid digest \"", absl::CEscape(text), "\": ",
                                                   why, " (expected sha256:<64 hex>/<size>)"));
  };
  constexpr absl::string_view kPrefix = "sha256:";
  if (!absl::StartsWith(text, kPrefix)) return bad("missing sha256: prefix");
  absl::string_view rest = text.substr(kPrefix.size());
  size_t slash = rest.find('/');
  if (slash == absl::string_view::npos) return bad("missing /<size>");
  absl::string_view hex = rest.substr(0, slash);
  absl::string_view size_text = rest.substr(slash + 1);
  if (hex.size() != 2 * kSha256Bytes) return bad("hash must be 64 hex digits");
  for (char c : hex) {
    if (!absl::ascii_isdigit(c) && !(c >= 'a' && c <= 'f')) {
      return bad("hash must be lowercase hex");
    }
  }
  if (size_text.empty()) return bad("empty size");
  for (char c : size_text) {
    if (!absl::ascii_isdigit(c)) return bad("size must be a decimal number");
  }
  if (size_text.size() > 1 && size_text[0] == '0') return bad("size has leading zeros");
  uint64_t size = 0;
  if (!absl::SimpleAtoi(size_text, &size)) return bad("size out of range");
  return Digest(absl::HexStringToBytes(hex), size);
}

Digest Digest::Of(absl::string_view content) {
  return Digest(Sha256::Hash(content), content.size());
}

std::string Digest::hex() const { return absl::BytesToHexString(sha256_); }

std::string Digest::ToString() const { return absl::StrCat("sha256:", hex(), "/", size_); }

std::string Digest::Key() const {
  std::string key = sha256_;
  for (int shift = 56; shift >= 0; shift -= 8) key.push_back(static_cast<char>(size_ >> shift));
  return key;
}

absl::StatusOr<Digest> Digest::FromKey(absl::string_view key) {
  if (key.size() != kSha256Bytes + 8) {
    return absl::DataLossError(absl::StrCat("object key has ", key.size(), " bytes, not 40"));
  }
  uint64_t size = 0;
  for (size_t i = kSha256Bytes; i < key.size(); ++i) {
    size = (size << 8) | static_cast<uint8_t>(key[i]);
  }
  return Digest(std::string(key.substr(0, kSha256Bytes)), size);
}

}  // namespace vault::cas
