#include "common/fd_passing.h"

#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "common/file_util.h"

namespace vault::common {

absl::Status SendWithFds(int socket, absl::string_view data, absl::Span<const int> fds) {
  constexpr size_t kMaxFds = 16;
  if (data.empty() || fds.size() > kMaxFds) {
    return absl::InvalidArgumentError(
        "send with descriptors: 1 byte or more, 16 descriptors at most");
  }
  iovec iov{const_cast<char*>(data.data()), data.size()};
  alignas(cmsghdr) char control[CMSG_SPACE(kMaxFds * sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (!fds.empty()) {
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(fds.size() * sizeof(int));
    cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
    cmsg->cmsg_level = SOL_SOCKET;
    cmsg->cmsg_type = SCM_RIGHTS;
    cmsg->cmsg_len = CMSG_LEN(fds.size() * sizeof(int));
    std::memcpy(CMSG_DATA(cmsg), fds.data(), fds.size() * sizeof(int));
  }
  ssize_t n;
  do {
    n = sendmsg(socket, &msg, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  if (n <= 0) return PosixError(errno, "sendmsg with descriptors");
  for (size_t sent = static_cast<size_t>(n); sent < data.size();) {
    const ssize_t more = send(socket, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (more < 0 && errno == EINTR) continue;
    if (more <= 0) return PosixError(errno, "send");
    sent += static_cast<size_t>(more);
  }
  return absl::OkStatus();
}

}  // namespace vault::common
