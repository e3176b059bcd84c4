// cas: the content-addressed store. This header: object digests and SHA-256 hashing.
//
// An object's address is the SHA-256 of its full content plus its size, written
// `sha256:<64 lowercase hex>/<size>`, so `sha256sum` agrees with it.
//
//   VAULT_ASSIGN_OR_RETURN(Digest d, Digest::Parse("sha256:e3b0...b855/0"));
//   Digest same = Digest::Of("");       // hashes the bytes
//   Sha256 h; h.Update(a); h.Update(b); std::string raw = h.Finish();
//
// Thread-safety: Digest is a value type. A Sha256 object must not be shared between threads.
#ifndef VAULT_CAS_DIGEST_H_
#define VAULT_CAS_DIGEST_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/sha256.h"

namespace vault::cas {

inline constexpr size_t kSha256Bytes = common::kSha256Bytes;

// Incremental SHA-256 (common/sha256.h).
using Sha256 = common::Sha256;

class Digest {
 public:
  Digest() = default;
  // `sha256` must be 32 bytes (checked by FromParts).
  static absl::StatusOr<Digest> FromParts(absl::string_view sha256, uint64_t size);
  static absl::StatusOr<Digest> Parse(absl::string_view text);
  static Digest Of(absl::string_view content);

  const std::string& sha256() const { return sha256_; }
  uint64_t size() const { return size_; }
  std::string hex() const;
  std::string ToString() const;  // sha256:<hex>/<size>

  // 40-byte storage key: sha256 || size as 8 big-endian bytes. Sorts by hash.
  std::string Key() const;
  static absl::StatusOr<Digest> FromKey(absl::string_view key);

  friend bool operator==(const Digest& a, const Digest& b) {
    return a.size_ == b.size_ && a.sha256_ == b.sha256_;
  }
  template <typename H>
  friend H AbslHashValue(H h, const Digest& d) {
    return H::combine(std::move(h), d.sha256_, d.size_);
  }

 private:
  Digest(std::string sha256, uint64_t size) : sha256_(std::move(sha256)), size_(size) {}
  std::string sha256_;
  uint64_t size_ = 0;
};

}  // namespace vault::cas

#endif  // VAULT_CAS_DIGEST_H_
