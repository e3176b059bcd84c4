// The agent's channel to its vault: the handshake, the framing over the socket (with descriptors
// passed beside the bytes) and Agent::Call, which every host call goes through.
#include "sdk/cpp/vault_agent.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "sdk/cpp/internal/protocol_error.h"

namespace vault::sdk {
namespace {

using vault::v1::GuestFrame;
using vault::v1::HostFrame;
using vault::v1::HostRequest;
using vault::v1::HostResponse;

// Descriptors one recvmsg can take; more is a protocol error (MSG_CTRUNC: the kernel drops
// those that do not fit).
constexpr size_t kMaxPassedFds = 8;

int64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

// Between two polls (a hint to the CPU that this thread spins).
inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Busy-polling of the answers (see Latency in vault_agent.h).
constexpr uint32_t kMissesBeforeBackoff = 8;
constexpr uint32_t kProbeEvery = 16;

// True when `fd` became readable (bytes, its end or an error) within `window_ns`; never blocks.
bool PollReadable(int fd, int64_t window_ns) {
  const int64_t start = MonotonicNs();
  for (;;) {
    pollfd pfd{fd, POLLIN, 0};
    int r = poll(&pfd, 1, 0);
    if (r > 0 || (r < 0 && errno != EINTR)) return true;  // the read that follows reports it
    if (MonotonicNs() - start >= window_ns) return false;
    CpuRelax();
  }
}

int64_t PollWindowFromEnv() {
  int64_t us = absl::ToInt64Microseconds(kDefaultPollWindow);
  if (const char* env = std::getenv(kPollWindowEnv); env != nullptr && *env != '\0') {
    int64_t v;
    if (absl::SimpleAtoi(env, &v) && v >= 0) {
      us = std::min(v, absl::ToInt64Microseconds(kMaxPollWindow));
    }
  }
  return us * 1000;
}

void WaitReady(int fd, short events) {
  pollfd pfd{fd, events, 0};
  while (poll(&pfd, 1, -1) < 0 && errno == EINTR) {
  }
}

// A frame: the 4-byte big-endian length, then the serialized message.
absl::StatusOr<std::string> EncodeFrame(const google::protobuf::MessageLite& message,
                                        size_t max_frame_bytes) {
  std::string body;
  if (!message.SerializeToString(&body)) {
    return absl::InternalError("vault-agent: cannot serialize the frame");
  }
  if (body.size() > max_frame_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("vault-agent: a request of ", body.size(),
                                                   " bytes exceeds the vault's frame limit of ",
                                                   max_frame_bytes, " bytes"));
  }
  uint32_t n = static_cast<uint32_t>(body.size());
  std::string frame = {static_cast<char>(n >> 24), static_cast<char>(n >> 16),
                       static_cast<char>(n >> 8), static_cast<char>(n)};
  frame += body;
  return frame;
}

absl::Status WriteAll(int fd, absl::string_view bytes) {
  size_t sent = 0;
  while (sent < bytes.size()) {
    ssize_t w = send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {  // a non-blocking channel: wait
        WaitReady(fd, POLLOUT);
        continue;
      }
      if (errno == EPIPE || errno == ECONNRESET) {
        return absl::UnavailableError("vault-agent: the vault closed the channel");
      }
      return absl::ErrnoToStatus(errno, "vault-agent: send");
    }
    sent += static_cast<size_t>(w);
  }
  return absl::OkStatus();
}

// Reads exactly `n` bytes into `out`, counting them in *got; descriptors that come with them
// are appended to *fds (owned, close-on-exec). The end of the stream is UNAVAILABLE; the caller
// tells a clean end (nothing of the frame read) from a truncated frame by *got.
absl::Status ReadExactly(int fd, char* out, size_t n, size_t* got, std::vector<UniqueFd>* fds) {
  while (*got < n) {
    iovec iov{out + *got, n - *got};
    alignas(cmsghdr) char control[CMSG_SPACE(kMaxPassedFds * sizeof(int))];
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    ssize_t r = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
    if (r < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        WaitReady(fd, POLLIN);
        continue;
      }
      if (errno == ECONNRESET) return absl::UnavailableError("vault-agent: channel reset");
      return absl::ErrnoToStatus(errno, "vault-agent: recvmsg");
    }
    bool other_control = false;
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
        size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < count; ++i) {
          int passed;
          std::memcpy(&passed, CMSG_DATA(c) + i * sizeof(int), sizeof passed);
          fds->emplace_back(passed);
        }
      } else {
        other_control = true;
      }
    }
    if ((msg.msg_flags & MSG_CTRUNC) != 0) {
      return ProtocolError("more descriptors attached to a frame than the one expected");
    }
    if (other_control) return ProtocolError("unexpected control message attached to a frame");
    if (r == 0) return absl::UnavailableError("vault-agent: the vault closed the channel");
    *got += static_cast<size_t>(r);
  }
  return absl::OkStatus();
}

// Reads one frame; refuses a length over `max_frame_bytes` before reading the body.
absl::StatusOr<std::string> ReadFrame(int fd, size_t max_frame_bytes, std::vector<UniqueFd>* fds) {
  unsigned char header[4];
  size_t got = 0;
  absl::Status status = ReadExactly(fd, reinterpret_cast<char*>(header), sizeof header, &got, fds);
  if (!status.ok()) {
    if (absl::IsUnavailable(status) && got > 0) {
      return absl::DataLossError("vault-agent: the channel closed in the middle of a frame");
    }
    return status;
  }
  uint64_t length = (uint64_t{header[0]} << 24) | (uint64_t{header[1]} << 16) |
                    (uint64_t{header[2]} << 8) | uint64_t{header[3]};
  if (length > max_frame_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("vault-agent: an incoming frame of ", length,
                                                     " bytes exceeds the limit of ",
                                                     max_frame_bytes, " bytes"));
  }
  std::string body(length, '\0');
  got = 0;
  status = ReadExactly(fd, body.data(), body.size(), &got, fds);
  if (!status.ok()) {
    if (absl::IsUnavailable(status)) {
      return absl::DataLossError("vault-agent: the channel closed in the middle of a frame");
    }
    return status;
  }
  return body;
}

// The vault's answer to a call that failed: its code (a google.rpc.Code) and message.
absl::Status ResponseStatus(const HostResponse& response) {
  int code = response.code();
  if (code >= static_cast<int>(absl::StatusCode::kCancelled) &&
      code <= static_cast<int>(absl::StatusCode::kUnauthenticated)) {
    return absl::Status(static_cast<absl::StatusCode>(code), response.message());
  }
  return absl::UnknownError(absl::StrCat("code ", code, ": ", response.message()));
}

}  // namespace

void UniqueFd::Reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

absl::StatusOr<std::unique_ptr<Agent>> Agent::Connect(int fd) {
  if (fd < 0) {
    fd = kDefaultChannelFd;
    if (const char* env = std::getenv(kChannelFdEnv); env != nullptr && *env != '\0') {
      if (!absl::SimpleAtoi(env, &fd) || fd < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("vault-agent: ", kChannelFdEnv, " is not a descriptor number: ", env));
      }
    }
  }
  int flags = fcntl(fd, F_GETFD);
  if (flags < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("vault-agent: no channel on descriptor ", fd,
                     ": is this program running as a vault agent?"));
  }
  UniqueFd channel(fd);
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("vault-agent: descriptor ", fd,
                     " is not a socket: is this program running as a vault agent?"));
  }
  // Programs the agent runs must not inherit its authority.
  if (fcntl(fd, F_SETFD, flags | FD_CLOEXEC) != 0) {
    return absl::ErrnoToStatus(errno, "vault-agent: fcntl(F_SETFD)");
  }

  GuestFrame hello;
  hello.mutable_hello()->set_version(kProtocolVersion);
  hello.mutable_hello()->set_sdk(kSdkName);
  absl::StatusOr<std::string> frame = EncodeFrame(hello, kDefaultMaxFrameBytes);
  if (!frame.ok()) return frame.status();
  if (absl::Status s = WriteAll(fd, *frame); !s.ok()) return s;

  std::vector<UniqueFd> fds;
  absl::StatusOr<std::string> body = ReadFrame(fd, kDefaultMaxFrameBytes, &fds);
  if (!body.ok()) return body.status();
  if (!fds.empty()) return ProtocolError("a descriptor attached to the handshake (closed)");
  HostFrame answer;
  if (!answer.ParseFromString(*body)) return ProtocolError("the handshake answer does not parse");
  switch (answer.frame_case()) {
    case HostFrame::kRefused:
      return absl::FailedPreconditionError(
          absl::StrCat("vault-agent: the vault refused the handshake: ", answer.refused()));
    case HostFrame::kWelcome:
      break;
    default:
      return ProtocolError("the vault answered the hello with neither a welcome nor a refusal");
  }
  const vault::v1::Welcome& welcome = answer.welcome();
  if (welcome.version() != kProtocolVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat("vault-agent: the vault speaks protocol version ", welcome.version(),
                     "; this SDK (", kSdkName, ") speaks ", kProtocolVersion));
  }
  return std::unique_ptr<Agent>(new Agent(std::move(channel), welcome));
}

Agent::Agent(UniqueFd fd, const vault::v1::Welcome& welcome)
    : agent_id_(welcome.agent_id()),
      vault_(welcome.vault()),
      incarnation_(welcome.incarnation()),
      max_frame_bytes_(welcome.max_frame_bytes() != 0 ? welcome.max_frame_bytes()
                                                      : kDefaultMaxFrameBytes),
      fd_(std::move(fd)),
      poll_window_ns_(PollWindowFromEnv()) {}

Agent::~Agent() = default;

void Agent::SetPollWindow(absl::Duration window) {
  absl::MutexLock lock(&mu_);
  poll_window_ns_ = std::clamp<int64_t>(absl::ToInt64Nanoseconds(window), 0,
                                        absl::ToInt64Nanoseconds(kMaxPollWindow));
}

absl::Duration Agent::poll_window() {
  absl::MutexLock lock(&mu_);
  return absl::Nanoseconds(poll_window_ns_);
}

void Agent::PollForAnswer(int kind) {
  if (poll_window_ns_ <= 0) return;
  PollStats& stats = poll_stats_[static_cast<size_t>(
      std::clamp<int>(kind, 0, static_cast<int>(poll_stats_.size()) - 1))];
  if (stats.misses >= kMissesBeforeBackoff && ++stats.skipped % kProbeEvery != 0) return;
  if (PollReadable(fd_.get(), poll_window_ns_)) {
    stats = PollStats();
  } else if (stats.misses < kMissesBeforeBackoff) {
    ++stats.misses;
  }
}

absl::Status Agent::Break(absl::Status why) {
  fd_.Reset();
  broken_ = why;
  return why;
}

absl::StatusOr<HostResponse> Agent::Call(HostRequest& request, HostResponse::ResultCase expected,
                                         UniqueFd* passed_fd) {
  absl::MutexLock lock(&mu_);
  return CallLocked(request, expected, passed_fd);
}

absl::StatusOr<HostResponse> Agent::CallLocked(HostRequest& request,
                                               HostResponse::ResultCase expected,
                                               UniqueFd* passed_fd) {
  if (!broken_.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "vault-agent: the channel was closed after an earlier error: ", broken_.ToString()));
  }
  const uint64_t call_id = next_call_id_;
  const int kind = static_cast<int>(request.call_case());
  request.set_call_id(call_id);
  GuestFrame guest;
  guest.mutable_request()->Swap(&request);  // no copy of a large payload
  absl::StatusOr<std::string> frame = EncodeFrame(guest, max_frame_bytes_);
  if (!frame.ok()) return frame.status();  // not sent: the channel is still in step
  ++next_call_id_;
  if (absl::Status s = WriteAll(fd_.get(), *frame); !s.ok()) return Break(s);

  // The answer of a cheap call comes within microseconds: poll for it before sleeping in the
  // read (which then finds it at once, or waits as before: nothing can be missed).
  PollForAnswer(kind);
  std::vector<UniqueFd> fds;
  absl::StatusOr<std::string> body = ReadFrame(fd_.get(), max_frame_bytes_, &fds);
  if (!body.ok()) return Break(body.status());
  HostFrame host;
  if (!host.ParseFromString(*body)) return Break(ProtocolError("a frame that does not parse"));
  if (host.frame_case() != HostFrame::kResponse) {
    if (host.frame_case() == HostFrame::kRefused) {
      return Break(absl::FailedPreconditionError(
          absl::StrCat("vault-agent: the vault refused the agent: ", host.refused())));
    }
    return Break(ProtocolError("a frame that is not a response"));
  }
  HostResponse& response = *host.mutable_response();
  if (response.call_id() != call_id) {
    return Break(ProtocolError(
        absl::StrCat("the response to call ", call_id, " carries call id ", response.call_id())));
  }
  // Descriptors: exactly one with an OK net_connect response, none with anything else. The
  // vector closes any that are not handed out.
  if (!fds.empty() && (passed_fd == nullptr || fds.size() > 1)) {
    return Break(ProtocolError(absl::StrCat(fds.size(), " descriptor(s) attached to the response",
                                            " to call ", call_id, " (closed)")));
  }
  if (response.code() != 0) return ResponseStatus(response);
  if (response.result_case() != expected &&
      response.result_case() != HostResponse::RESULT_NOT_SET) {
    return Break(ProtocolError(absl::StrCat("the response to call ", call_id,
                                            " carries a result of another call (field ",
                                            static_cast<int>(response.result_case()), ")")));
  }
  if (passed_fd != nullptr) {
    if (fds.empty()) {
      return Break(ProtocolError("a net_connect response without its socket"));
    }
    *passed_fd = std::move(fds[0]);
  }
  return std::move(response);
}

}  // namespace vault::sdk
