// common/sha256: SHA-256, the one hash of the project (CAS addresses, chain link hashes, the
// audit log's Merkle tree, key ids). OpenSSL's EVP underneath, kept out of this header.
//
//   std::string raw = common::Sha256::Hash(data);          // 32 bytes
//   std::string raw = common::Sha256::HashParts({a, b, c});  // SHA-256(a || b || c)
//   common::Sha256 h;  h.Update(x);  h.Update(y);  std::string raw = h.Finish();
//
// Hashing memory with a provider fetched once cannot fail short of a broken OpenSSL or no
// memory for a context; then the process aborts rather than hand out a wrong digest (a Status
// here would put an error path that cannot be tested on every hot path that hashes).
//
// Thread-safety: a Sha256 object is used by one thread at a time; the static functions are
// thread-safe.
#ifndef VAULT_COMMON_SHA256_H_
#define VAULT_COMMON_SHA256_H_

#include <cstddef>
#include <initializer_list>
#include <memory>
#include <string>

#include "absl/strings/string_view.h"

namespace vault::common {

inline constexpr size_t kSha256Bytes = 32;

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(Sha256&&) noexcept;
  Sha256& operator=(Sha256&&) noexcept;
  void Update(absl::string_view data);
  // The 32-byte digest. The object is reset and can hash again.
  std::string Finish();
  // Writes the 32-byte digest to `out` and resets the object.
  void FinishInto(unsigned char out[kSha256Bytes]);

  static std::string Hash(absl::string_view data);
  static void HashInto(absl::string_view data, unsigned char out[kSha256Bytes]);
  // SHA-256 of the parts' concatenation.
  static std::string HashParts(std::initializer_list<absl::string_view> parts);

 private:
  struct Ctx;
  std::unique_ptr<Ctx> ctx_;
};

}  // namespace vault::common

#endif  // VAULT_COMMON_SHA256_H_
