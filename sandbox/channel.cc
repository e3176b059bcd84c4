#include "sandbox/channel.h"

#include <errno.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace vault::sandbox {
namespace {

int RemainingMs(absl::Time deadline) {
  absl::Duration left = deadline - absl::Now();
  if (left <= absl::ZeroDuration()) return 0;
  if (left > absl::Hours(1)) return 3600 * 1000;
  return static_cast<int>(
      absl::ToInt64Milliseconds(left + absl::Milliseconds(1) - absl::Nanoseconds(1)));
}

absl::Status WaitFor(int fd, short events, absl::Time deadline) {
  for (;;) {
    pollfd pfd{fd, events, 0};
    int n = poll(&pfd, 1, RemainingMs(deadline));
    if (n > 0) return absl::OkStatus();
    if (n == 0) return absl::DeadlineExceededError("channel: timed out");
    if (errno != EINTR) return absl::ErrnoToStatus(errno, "channel: poll");
  }
}

}  // namespace

absl::StatusOr<Channel::PairResult> Channel::Pair() {
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
    return absl::ErrnoToStatus(errno, "channel: socketpair");
  }
  return PairResult{Channel(fds[0]), fds[1]};
}

Channel::Channel(Channel&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      max_frame_(other.max_frame_),
      refused_descriptors_(other.refused_descriptors_) {}

Channel& Channel::operator=(Channel&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    max_frame_ = other.max_frame_;
    refused_descriptors_ = other.refused_descriptors_;
  }
  return *this;
}

Channel::~Channel() {
  if (fd_ >= 0) close(fd_);
}

absl::Status Channel::ReadExactly(char* out, size_t n, absl::Time deadline, size_t* got_out) {
  size_t& got = *got_out;
  got = 0;
  while (got < n) {
    absl::Status ready = WaitFor(fd_, POLLIN, deadline);
    if (!ready.ok()) return ready;
    iovec iov{out + got, n - got};
    alignas(cmsghdr) char control[CMSG_SPACE(64 * sizeof(int))];
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    ssize_t r = recvmsg(fd_, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
    if (r < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return absl::ErrnoToStatus(errno, "channel: recvmsg");
    }
    bool refused = (msg.msg_flags & MSG_CTRUNC) != 0;
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      refused = true;
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
        size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < count; ++i) {
          int passed;
          std::memcpy(&passed, CMSG_DATA(c) + i * sizeof(int), sizeof passed);
          close(passed);
          ++refused_descriptors_;
        }
      }
    }
    if (refused) {
      return absl::PermissionDeniedError(
          "channel: the peer attached descriptors or credentials; refused and closed");
    }
    if (r == 0) return absl::UnavailableError("channel closed");
    got += static_cast<size_t>(r);
  }
  return absl::OkStatus();
}

void Channel::Break() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

absl::StatusOr<std::string> Channel::ReadFrame(absl::Duration timeout) {
  if (fd_ < 0) return absl::FailedPreconditionError("channel: closed");
  absl::Time deadline = absl::Now() + timeout;
  unsigned char header[4];
  size_t got = 0;
  absl::Status status = ReadExactly(reinterpret_cast<char*>(header), sizeof header, deadline, &got);
  // Only a timeout before the first byte leaves the stream in step; anything else (a refused
  // descriptor, a partial frame) ends the channel, so no payload is ever read as a header.
  if (!status.ok()) {
    if (!(absl::IsDeadlineExceeded(status) && got == 0)) Break();
    return status;
  }
  uint64_t length = (uint64_t{header[0]} << 24) | (uint64_t{header[1]} << 16) |
                    (uint64_t{header[2]} << 8) | uint64_t{header[3]};
  if (length > max_frame_) {
    Break();
    return absl::ResourceExhaustedError(
        absl::StrCat("channel: frame of ", length, " bytes exceeds the maximum of ", max_frame_));
  }
  std::string payload(length, '\0');
  status = ReadExactly(payload.data(), payload.size(), deadline, &got);
  if (!status.ok()) {
    Break();
    return status;
  }
  return payload;
}

absl::Status Channel::WriteFrame(absl::string_view payload, absl::Duration timeout) {
  if (fd_ < 0) return absl::FailedPreconditionError("channel: closed");
  if (payload.size() > max_frame_) {
    return absl::InvalidArgumentError("channel: frame exceeds the maximum size");
  }
  absl::Time deadline = absl::Now() + timeout;
  uint32_t n = static_cast<uint32_t>(payload.size());
  unsigned char header[4] = {static_cast<unsigned char>(n >> 24),
                             static_cast<unsigned char>(n >> 16),
                             static_cast<unsigned char>(n >> 8), static_cast<unsigned char>(n)};
  std::string buffer(reinterpret_cast<char*>(header), 4);
  buffer.append(payload.data(), payload.size());
  size_t sent = 0;
  while (sent < buffer.size()) {
    absl::Status ready = WaitFor(fd_, POLLOUT, deadline);
    if (!ready.ok()) return ready;
    ssize_t w = send(fd_, buffer.data() + sent, buffer.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return absl::ErrnoToStatus(errno, "channel: send");
    }
    sent += static_cast<size_t>(w);
  }
  return absl::OkStatus();
}

}  // namespace vault::sandbox
