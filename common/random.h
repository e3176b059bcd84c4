// common/random: cryptographically strong random bytes (OpenSSL's RAND_bytes), for identifiers
// that must not repeat (agent ids, transfer ids, nonces, certificate serials).
//
//   VAULT_ASSIGN_OR_RETURN(std::string raw, common::RandomBytes(16));
//
// A failure (the system has no randomness to give) is an error, never ignored: an id made from
// zero bytes would repeat.
//
// Thread-safety: thread-safe.
#ifndef VAULT_COMMON_RANDOM_H_
#define VAULT_COMMON_RANDOM_H_

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"

namespace vault::common {

// `n` random bytes (n at most INT_MAX). INTERNAL when OpenSSL's generator fails.
absl::StatusOr<std::string> RandomBytes(size_t n);
// Lowercase hex of RandomBytes(n): 2n characters.
absl::StatusOr<std::string> RandomHex(size_t n);

}  // namespace vault::common

#endif  // VAULT_COMMON_RANDOM_H_
