#include "common/random.h"

#include <openssl/err.h>
#include <openssl/rand.h>

#include <limits>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace vault::common {

absl::StatusOr<std::string> RandomBytes(size_t n) {
  if (n > static_cast<size_t>(std::numeric_limits<int>::max())) {
    return absl::InvalidArgumentError(absl::StrCat("RandomBytes: ", n, " bytes asked, at most ",
                                                   std::numeric_limits<int>::max()));
  }
  std::string out(n, '\0');
  if (n > 0 && RAND_bytes(reinterpret_cast<unsigned char*>(out.data()), static_cast<int>(n)) != 1) {
    ERR_clear_error();
    return absl::InternalError("RAND_bytes failed: the system has no randomness to give");
  }
  return out;
}

absl::StatusOr<std::string> RandomHex(size_t n) {
  absl::StatusOr<std::string> raw = RandomBytes(n);
  if (!raw.ok()) return raw.status();
  return absl::BytesToHexString(*raw);
}

}  // namespace vault::common
