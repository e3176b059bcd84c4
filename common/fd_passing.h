// common/fd_passing: bytes with descriptors attached (SCM_RIGHTS) over a Unix socket.
//
//   VAULT_RETURN_IF_ERROR(SendWithFds(sock, packet, {channel_fd, module_fd}));
//
// Thread-safety: a plain function.
#ifndef VAULT_COMMON_FD_PASSING_H_
#define VAULT_COMMON_FD_PASSING_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace vault::common {

// Sends `data` (not empty) on `socket` with `fds` attached to its first byte, the receiver getting
// copies of them; the rest of `data` follows when the first send took only part (a stream socket).
// At most 16 descriptors. The caller keeps its own.
absl::Status SendWithFds(int socket, absl::string_view data, absl::Span<const int> fds);

}  // namespace vault::common

#endif  // VAULT_COMMON_FD_PASSING_H_
