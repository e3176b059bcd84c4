#include "common/sd_notify.h"

#include <stddef.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/unique_fd.h"

namespace vault::common {

absl::Status SdNotify(absl::string_view state) {
  const char* socket = std::getenv("NOTIFY_SOCKET");
  if (socket == nullptr || *socket == '\0') return absl::OkStatus();
  return SdNotifyTo(socket, state);
}

absl::Status SdNotifyTo(absl::string_view socket, absl::string_view state) {
  if (state.empty()) return absl::InvalidArgumentError("sd_notify: empty state");
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const bool abstract = !socket.empty() && socket.front() == '@';
  if (!abstract && (socket.empty() || socket.front() != '/')) {
    return absl::InvalidArgumentError(absl::StrCat("sd_notify: NOTIFY_SOCKET \"", socket,
                                                   "\" is neither an absolute path nor @abstract"));
  }
  // A path needs its terminating NUL in sun_path; an abstract name is exactly its bytes after
  // the leading NUL, and the address length says where it ends.
  if (socket.size() + (abstract ? 0 : 1) > sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(
        absl::StrCat("sd_notify: NOTIFY_SOCKET \"", socket, "\" is too long"));
  }
  std::memcpy(addr.sun_path, socket.data(), socket.size());
  if (abstract) addr.sun_path[0] = '\0';
  const socklen_t addr_len =
      static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + socket.size() + (abstract ? 0 : 1));

  UniqueFd fd(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return PosixError(errno, "sd_notify: socket");
  ssize_t sent;
  do {
    sent = ::sendto(fd.get(), state.data(), state.size(), MSG_NOSIGNAL,
                    reinterpret_cast<const sockaddr*>(&addr), addr_len);
  } while (sent < 0 && errno == EINTR);
  if (sent < 0) return PosixError(errno, absl::StrCat("sd_notify: send to ", socket));
  if (static_cast<size_t>(sent) != state.size()) {
    return absl::InternalError(
        absl::StrCat("sd_notify: sent ", sent, " of ", state.size(), " bytes to ", socket));
  }
  return absl::OkStatus();
}

}  // namespace vault::common
