// storage/keys: fixed-width big-endian integers for RocksDB keys, so that byte order is numeric
// order and iterators visit records by sequence number.
//
//   batch.Put(feed, storage::BigEndian64(seq), value);
//   uint64_t seq = storage::ParseBigEndian64(View(it->key()));
//
// Thread-safety: pure functions.
#ifndef VAULT_STORAGE_KEYS_H_
#define VAULT_STORAGE_KEYS_H_

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace vault::storage {

inline std::string BigEndian64(uint64_t v) {
  std::string out(8, '\0');
  for (int i = 7; i >= 0; --i, v >>= 8) out[i] = static_cast<char>(v & 0xff);
  return out;
}

inline std::string BigEndian32(uint32_t v) {
  std::string out(4, '\0');
  for (int i = 3; i >= 0; --i, v >>= 8) out[i] = static_cast<char>(v & 0xff);
  return out;
}

// Reads the first 8 bytes of `s` (fewer are read as if zero-padded on the left).
inline uint64_t ParseBigEndian64(absl::string_view s) {
  uint64_t v = 0;
  for (char c : s.substr(0, 8)) v = (v << 8) | static_cast<uint8_t>(c);
  return v;
}

}  // namespace vault::storage

#endif  // VAULT_STORAGE_KEYS_H_
