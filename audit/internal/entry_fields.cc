#include "audit/internal/entry_fields.h"

#include <cstring>

namespace vault::audit::internal {
namespace {

// Wire types (https://protobuf.dev/programming-guides/encoding/).
constexpr uint8_t kVarint = 0;
constexpr uint8_t kLen = 2;

// A varint of at most `max_bytes` (<= 10) bytes whose value fits in 64 bits: protobuf's parser
// accepts every such varint (a 10th byte above 1 or with its continuation bit set is left to it).
bool ReadVarint(const unsigned char*& p, const unsigned char* end, int max_bytes, uint64_t* v) {
  uint64_t result = 0;
  for (int i = 0; i < max_bytes; ++i) {
    if (p == end) return false;
    const unsigned char b = *p++;
    if (i == 9 && b > 1) return false;
    result |= uint64_t{b & 0x7fu} << (7 * i);
    if ((b & 0x80) == 0) {
      *v = result;
      return true;
    }
  }
  return false;
}

uint64_t Load64(const unsigned char* p) {
  uint64_t w;
  std::memcpy(&w, p, sizeof(w));
  return w;
}

uint32_t Load32(const unsigned char* p) {
  uint32_t w;
  std::memcpy(&w, p, sizeof(w));
  return w;
}

// Whether every byte is below 0x80: whole words, the tail as an overlapping word.
bool IsAscii(const unsigned char* p, size_t n) {
  uint64_t acc = 0;
  if (n >= 8) {
    for (size_t i = 0; i + 8 <= n; i += 8) acc |= Load64(p + i);
    acc |= Load64(p + n - 8);
  } else if (n >= 4) {
    acc = Load32(p) | Load32(p + n - 4);
  } else {
    for (size_t i = 0; i < n; ++i) acc |= p[i];
  }
  return (acc & 0x8080808080808080u) == 0;
}

// A length-delimited field's payload. Lengths of up to 3 bytes (2 MiB): protobuf reads sizes of
// up to 5 bytes below 2 GiB, so it accepts all of these when they fit in the bytes.
bool ReadLen(const unsigned char*& p, const unsigned char* end, absl::string_view* out) {
  uint64_t n = 0;
  if (!ReadVarint(p, end, 3, &n) || n > static_cast<uint64_t>(end - p)) return false;
  *out = absl::string_view(reinterpret_cast<const char*>(p), static_cast<size_t>(n));
  p += n;
  return true;
}

// AuditEntry.Detail: key = 1, value = 2, both strings.
bool ReadPlainDetail(absl::string_view bytes) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  const unsigned char* const end = p + bytes.size();
  while (p != end) {
    const unsigned char tag = *p++;
    if (tag != (1 << 3 | kLen) && tag != (2 << 3 | kLen)) return false;
    absl::string_view s;
    if (!ReadLen(p, end, &s) ||
        !IsAscii(reinterpret_cast<const unsigned char*>(s.data()), s.size())) {
      return false;
    }
  }
  return true;
}

}  // namespace

std::optional<EntryFields> ReadPlainEntry(absl::string_view bytes) {
  EntryFields f;
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  const unsigned char* const end = p + bytes.size();
  while (p != end) {
    // Every field number of AuditEntry is below 16: one-byte tags.
    const unsigned char tag = *p++;
    const int field = tag >> 3;
    const int wire_type = tag & 7;
    uint64_t v = 0;
    absl::string_view s;
    switch (field) {
      case 1:  // sequence (uint64)
      case 2:  // time_unix_micros (int64)
      case 7:  // decision (enum)
      case 9:  // priority (enum)
        if (wire_type != kVarint || !ReadVarint(p, end, 10, &v)) return std::nullopt;
        if (field == 1) f.sequence = v;
        break;
      case 3:  // vault
      case 4:  // actor
      case 5:  // action
      case 6:  // subject
      case 8:  // motivation: proto3 strings, which protobuf checks are UTF-8
        if (wire_type != kLen || !ReadLen(p, end, &s) ||
            !IsAscii(reinterpret_cast<const unsigned char*>(s.data()), s.size())) {
          return std::nullopt;
        }
        if (field == 3) f.vault = s;
        break;
      case 10:  // details
        if (wire_type != kLen || !ReadLen(p, end, &s) || !ReadPlainDetail(s)) return std::nullopt;
        break;
      case 11:  // prev_hash (bytes)
        if (wire_type != kLen || !ReadLen(p, end, &s)) return std::nullopt;
        f.prev_hash = s;
        break;
      default:
        return std::nullopt;
    }
  }
  return f;
}

}  // namespace vault::audit::internal
