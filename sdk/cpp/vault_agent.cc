#include "sdk/cpp/vault_agent.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace vault::sdk {
namespace {

using vault::v1::GuestFrame;
using vault::v1::HostFrame;
using vault::v1::HostRequest;
using vault::v1::HostResponse;

// Descriptors one recvmsg can take; more is a protocol error (MSG_CTRUNC: the kernel drops
// those that do not fit).
constexpr size_t kMaxPassedFds = 8;

absl::Status ProtocolError(absl::string_view what) {
  return absl::InternalError(absl::StrCat("vault-agent: protocol error: ", what));
}

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

uint32_t ToMillis(absl::Duration d) {
  if (d <= absl::ZeroDuration()) return 0;
  int64_t ms = absl::ToInt64Milliseconds(absl::Ceil(d, absl::Milliseconds(1)));
  if (ms > int64_t{std::numeric_limits<uint32_t>::max()}) {
    return std::numeric_limits<uint32_t>::max();
  }
  return static_cast<uint32_t>(ms);
}

bool IsLowerHex(absl::string_view s) {
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

}  // namespace

namespace {

// SHA-256 (FIPS 180-4), so that the SDK needs no crypto library: an object put in pieces is
// named by its digest before its first byte is sent.
class Sha256 {
 public:
  void Update(absl::string_view data) {
    total_ += data.size();
    if (buffered_ > 0) {
      size_t take = std::min(data.size(), sizeof block_ - buffered_);
      std::memcpy(block_ + buffered_, data.data(), take);
      buffered_ += take;
      data.remove_prefix(take);
      if (buffered_ < sizeof block_) return;
      Compress(block_);
      buffered_ = 0;
    }
    while (data.size() >= sizeof block_) {
      Compress(reinterpret_cast<const unsigned char*>(data.data()));
      data.remove_prefix(sizeof block_);
    }
    std::memcpy(block_, data.data(), data.size());
    buffered_ = data.size();
  }
  std::string Finish() {
    const uint64_t bits = total_ * 8;
    unsigned char pad[72] = {0x80};
    size_t pad_len = (buffered_ < 56 ? 56 : 120) - buffered_;
    for (int i = 0; i < 8; ++i) pad[pad_len + i] = static_cast<unsigned char>(bits >> (56 - 8 * i));
    Update(absl::string_view(reinterpret_cast<const char*>(pad), pad_len + 8));
    std::string out(32, '\0');
    for (int i = 0; i < 8; ++i) {
      for (int j = 0; j < 4; ++j) out[4 * i + j] = static_cast<char>(h_[i] >> (24 - 8 * j));
    }
    return out;
  }

 private:
  static uint32_t Rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }
  void Compress(const unsigned char* p) {
    static constexpr uint32_t k[64] = {
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
        0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
        0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
        0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
        0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
        0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
        0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
        0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
        0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
        0xc67178f2};
    uint32_t w[64];
    for (int i = 0; i < 16; ++i) {
      w[i] = (uint32_t{p[4 * i]} << 24) | (uint32_t{p[4 * i + 1]} << 16) |
             (uint32_t{p[4 * i + 2]} << 8) | uint32_t{p[4 * i + 3]};
    }
    for (int i = 16; i < 64; ++i) {
      uint32_t s0 = Rotr(w[i - 15], 7) ^ Rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
      uint32_t s1 = Rotr(w[i - 2], 17) ^ Rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
      w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = h_[0], b = h_[1], c = h_[2], d = h_[3], e = h_[4], f = h_[5], g = h_[6], h = h_[7];
    for (int i = 0; i < 64; ++i) {
      uint32_t t1 =
          h + (Rotr(e, 6) ^ Rotr(e, 11) ^ Rotr(e, 25)) + ((e & f) ^ (~e & g)) + k[i] + w[i];
      uint32_t t2 = (Rotr(a, 2) ^ Rotr(a, 13) ^ Rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
      h = g;
      g = f;
      f = e;
      e = d + t1;
      d = c;
      c = b;
      b = a;
      a = t1 + t2;
    }
    h_[0] += a;
    h_[1] += b;
    h_[2] += c;
    h_[3] += d;
    h_[4] += e;
    h_[5] += f;
    h_[6] += g;
    h_[7] += h;
  }

  uint32_t h_[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                    0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  unsigned char block_[64];
  size_t buffered_ = 0;
  uint64_t total_ = 0;
};

}  // namespace

vault::v1::Digest DigestOf(absl::string_view data) {
  Sha256 hash;
  hash.Update(data);
  vault::v1::Digest digest;
  digest.set_sha256(hash.Finish());
  digest.set_size(data.size());
  return digest;
}

std::string DigestToText(const vault::v1::Digest& digest) {
  return absl::StrCat("sha256:", absl::BytesToHexString(digest.sha256()), "/", digest.size());
}

absl::StatusOr<vault::v1::Digest> ParseDigest(absl::string_view text) {
  auto invalid = [&] {
    return absl::InvalidArgumentError(absl::StrCat(
        "not a digest (expected \"sha256:<64 lowercase hex>/<size>\"): \"", text, "\""));
  };
  absl::string_view rest = text;
  if (!absl::ConsumePrefix(&rest, "sha256:")) return invalid();
  size_t slash = rest.find('/');
  if (slash != 64) return invalid();
  absl::string_view hex = rest.substr(0, 64);
  absl::string_view size = rest.substr(65);
  if (!IsLowerHex(hex) || size.empty() || (size.size() > 1 && size[0] == '0')) return invalid();
  for (char c : size) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return invalid();
  }
  uint64_t n;
  if (!absl::SimpleAtoi(size, &n)) return invalid();  // overflow
  vault::v1::Digest digest;
  digest.set_sha256(absl::HexStringToBytes(hex));
  digest.set_size(n);
  return digest;
}

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

absl::Status Agent::Log(LogLevel level, absl::string_view message) {
  HostRequest request;
  request.mutable_log()->set_level(level);
  request.mutable_log()->set_message(std::string(message));
  return Call(request, HostResponse::RESULT_NOT_SET).status();
}

absl::StatusOr<bool> Agent::Heartbeat() {
  HostRequest request;
  request.mutable_heartbeat();
  absl::StatusOr<HostResponse> response = Call(request, HostResponse::kHeartbeat);
  if (!response.ok()) return response.status();
  return response->heartbeat().checkpoint_requested();
}

size_t Agent::max_piece_bytes() const {
  return max_frame_bytes_ > 2 * kFrameOverheadBytes ? max_frame_bytes_ - kFrameOverheadBytes
                                                    : max_frame_bytes_ / 2;
}

absl::StatusOr<vault::v1::StateResult> Agent::GetStateRange(uint64_t offset, uint64_t limit) {
  HostRequest request;
  request.mutable_get_state()->set_offset(offset);
  request.mutable_get_state()->set_limit(limit);
  absl::StatusOr<HostResponse> response = Call(request, HostResponse::kGetState);
  if (!response.ok()) return response.status();
  return std::move(*response->mutable_get_state());
}

absl::StatusOr<std::optional<std::string>> Agent::GetState() {
  const size_t piece = max_piece_bytes();
  // The first piece says the whole size (a vault of before ranges answers all of it, without a
  // size); a state that changes meanwhile (another thread checkpoints) is read again.
  for (int attempt = 0;; ++attempt) {
    absl::StatusOr<vault::v1::StateResult> first = GetStateRange(0, piece);
    if (!first.ok()) return first.status();
    if (!first->present()) return std::optional<std::string>();
    std::string state = std::move(*first->mutable_state());
    const uint64_t size = std::max<uint64_t>(first->size(), state.size());
    if (size > state.max_size()) {
      return absl::ResourceExhaustedError(
          absl::StrCat("vault-agent: a state of ", size, " bytes does not fit in memory"));
    }
    state.reserve(size);
    bool changed = false;
    while (state.size() < size) {
      absl::StatusOr<vault::v1::StateResult> next = GetStateRange(state.size(), piece);
      if (!next.ok()) return next.status();
      if (!next->present() || next->size() != size ||
          next->digest().sha256() != first->digest().sha256()) {
        changed = true;
        break;
      }
      if (next->state().empty()) {
        return absl::DataLossError(absl::StrCat("vault-agent: the state ended after ", state.size(),
                                                " of ", size, " bytes"));
      }
      state += next->state();
    }
    if (!changed) return std::optional<std::string>(std::move(state));
    if (attempt >= 3) {
      return absl::AbortedError("vault-agent: the state kept changing while it was read");
    }
  }
}

absl::StatusOr<vault::v1::Digest> Agent::Checkpoint(absl::string_view state) {
  if (state.size() > max_piece_bytes()) {
    // Larger than a frame: put in pieces, then named by its digest.
    absl::StatusOr<vault::v1::Digest> put = UploadObject(state);
    if (!put.ok()) return put.status();
    return CheckpointDigest(*put);
  }
  HostRequest request;
  request.mutable_checkpoint()->set_state(std::string(state));
  absl::StatusOr<HostResponse> response = Call(request, HostResponse::kCheckpoint);
  if (!response.ok()) return response.status();
  return response->checkpoint().digest();
}

absl::StatusOr<vault::v1::Digest> Agent::CheckpointDigest(const vault::v1::Digest& state) {
  HostRequest request;
  *request.mutable_checkpoint()->mutable_state_digest() = state;
  absl::StatusOr<HostResponse> response = Call(request, HostResponse::kCheckpoint);
  if (!response.ok()) return response.status();
  return response->checkpoint().digest();
}

absl::StatusOr<vault::v1::CasUploadStartResult> Agent::CasUploadStart(
    const vault::v1::Digest& digest) {
  HostRequest request;
  *request.mutable_cas_upload_start()->mutable_digest() = digest;
  absl::StatusOr<HostResponse> response = Call(request, HostResponse::kCasUploadStart);
  if (!response.ok()) return response.status();
  return std::move(*response->mutable_cas_upload_start());
}

absl::StatusOr<uint64_t> Agent::CasUploadAppend(uint64_t upload_id, uint64_t offset,
                                                absl::string_view data) {
  HostRequest request;
  vault::v1::CasUploadAppendRequest* append = request.mutable_cas_upload_append();
  append->set_upload_id(upload_id);
  append->set_offset(offset);
  append->set_data(std::string(data));
  absl::StatusOr<HostResponse> response = Call(request, HostResponse::kCasUploadAppend);
  if (!response.ok()) return response.status();
  return response->cas_upload_append().received();
}

absl::StatusOr<vault::v1::CasUploadFinishResult> Agent::CasUploadFinish(uint64_t upload_id,
                                                                        bool abort) {
  HostRequest request;
  request.mutable_cas_upload_finish()->set_upload_id(upload_id);
  request.mutable_cas_upload_finish()->set_abort(abort);
  absl::StatusOr<HostResponse> response = Call(request, HostResponse::kCasUploadFinish);
  if (!response.ok()) return response.status();
  return std::move(*response->mutable_cas_upload_finish());
}

absl::StatusOr<vault::v1::Digest> Agent::UploadObject(absl::string_view data) {
  const vault::v1::Digest digest = DigestOf(data);
  absl::StatusOr<vault::v1::CasUploadStartResult> started = CasUploadStart(digest);
  if (!started.ok()) return started.status();
  size_t piece = max_piece_bytes();
  if (started->max_piece_bytes() != 0 && started->max_piece_bytes() < piece) {
    piece = started->max_piece_bytes();
  }
  for (size_t at = 0; at < data.size(); at += piece) {
    absl::StatusOr<uint64_t> appended =
        CasUploadAppend(started->upload_id(), at, data.substr(at, piece));
    if (!appended.ok()) {
      (void)CasUploadFinish(started->upload_id(), /*abort=*/true);  // its quota back
      return appended.status();
    }
  }
  absl::StatusOr<vault::v1::CasUploadFinishResult> finished = CasUploadFinish(started->upload_id());
  if (!finished.ok()) return finished.status();
  return finished->digest();
}

absl::StatusOr<std::string> Agent::CasGet(const vault::v1::Digest& digest, uint64_t offset,
                                          uint64_t limit) {
  HostRequest request;
  vault::v1::CasGetRequest* get = request.mutable_cas_get();
  *get->mutable_digest() = digest;
  get->set_offset(offset);
  get->set_limit(limit);
  absl::StatusOr<HostResponse> response = Call(request, HostResponse::kCasGet);
  if (!response.ok()) return response.status();
  return std::move(*response->mutable_cas_get()->mutable_data());
}

absl::StatusOr<vault::v1::Digest> Agent::CasPut(absl::string_view data) {
  if (data.size() > max_piece_bytes()) return UploadObject(data);  // larger than a frame
  HostRequest request;
  request.mutable_cas_put()->set_data(std::string(data));
  absl::StatusOr<HostResponse> response = Call(request, HostResponse::kCasPut);
  if (!response.ok()) return response.status();
  return response->cas_put().digest();
}

absl::StatusOr<std::string> Agent::ReadFile(absl::string_view path, uint64_t offset,
                                            uint64_t limit) {
  HostRequest request;
  vault::v1::ReadFileRequest* read = request.mutable_read_file();
  read->set_path(std::string(path));
  read->set_offset(offset);
  read->set_limit(limit);
  absl::StatusOr<HostResponse> response = Call(request, HostResponse::kReadFile);
  if (!response.ok()) return response.status();
  return std::move(*response->mutable_read_file()->mutable_data());
}

absl::StatusOr<uint64_t> Agent::WriteFile(absl::string_view path, absl::string_view data,
                                          bool append) {
  HostRequest request;
  vault::v1::WriteFileRequest* write = request.mutable_write_file();
  write->set_path(std::string(path));
  write->set_data(std::string(data));
  write->set_append(append);
  absl::StatusOr<HostResponse> response = Call(request, HostResponse::kWriteFile);
  if (!response.ok()) return response.status();
  return response->write_file().size();
}

absl::StatusOr<std::vector<vault::v1::ListResult::Entry>> Agent::List(absl::string_view path) {
  HostRequest request;
  request.mutable_list()->set_path(std::string(path));
  absl::StatusOr<HostResponse> response = Call(request, HostResponse::kList);
  if (!response.ok()) return response.status();
  auto* entries = response->mutable_list()->mutable_entries();
  return std::vector<vault::v1::ListResult::Entry>(std::make_move_iterator(entries->begin()),
                                                   std::make_move_iterator(entries->end()));
}

absl::StatusOr<UniqueFd> Agent::NetConnect(absl::string_view host, uint16_t port,
                                           absl::Duration timeout) {
  HostRequest request;
  vault::v1::NetConnectRequest* connect = request.mutable_net_connect();
  connect->set_host(std::string(host));
  connect->set_port(port);
  connect->set_timeout_ms(ToMillis(timeout));
  UniqueFd socket;
  absl::StatusOr<HostResponse> response = Call(request, HostResponse::kNetConnect, &socket);
  if (!response.ok()) return response.status();
  return socket;
}

absl::StatusOr<uint64_t> Agent::Send(absl::string_view to, absl::string_view type,
                                     absl::string_view data, uint64_t reply_to) {
  HostRequest request;
  vault::v1::SendRequest* send = request.mutable_send();
  send->set_to(std::string(to));
  send->set_type(std::string(type));
  send->set_data(std::string(data));
  send->set_reply_to(reply_to);
  absl::StatusOr<HostResponse> response = Call(request, HostResponse::kSend);
  if (!response.ok()) return response.status();
  return response->send().message_id();
}

absl::StatusOr<std::optional<vault::v1::Message>> Agent::Receive(absl::Duration timeout) {
  HostRequest request;
  request.mutable_receive()->set_timeout_ms(ToMillis(timeout));
  absl::StatusOr<HostResponse> response = Call(request, HostResponse::kReceive);
  if (!response.ok()) return response.status();
  vault::v1::ReceiveResult* result = response->mutable_receive();
  if (result->timed_out() || !result->has_message()) {
    return std::optional<vault::v1::Message>();
  }
  return std::optional<vault::v1::Message>(std::move(*result->mutable_message()));
}

absl::Status Agent::Share(const vault::v1::Digest& digest, absl::Span<const std::string> agents) {
  HostRequest request;
  vault::v1::ShareRequest* share = request.mutable_share();
  *share->mutable_digest() = digest;
  for (const std::string& agent : agents) share->add_agents(agent);
  return Call(request, HostResponse::kShare).status();
}

absl::StatusOr<vault::v1::SelfInspectResult> Agent::SelfInspect() {
  HostRequest request;
  request.mutable_self_inspect();
  absl::StatusOr<HostResponse> response = Call(request, HostResponse::kSelfInspect);
  if (!response.ok()) return response.status();
  return std::move(*response->mutable_self_inspect());
}

absl::StatusOr<vault::v1::SpawnChildResult> Agent::SpawnChild(
    const vault::v1::AgentSpec& spec, const std::optional<std::string>& initial_state) {
  HostRequest request;
  vault::v1::SpawnChildRequest* spawn = request.mutable_spawn_child();
  *spawn->mutable_spec() = spec;
  if (initial_state.has_value()) {
    spawn->set_state(*initial_state);
    spawn->set_has_state(true);
  }
  absl::StatusOr<HostResponse> response = Call(request, HostResponse::kSpawnChild);
  if (!response.ok()) return response.status();
  return std::move(*response->mutable_spawn_child());
}

absl::Status Agent::Migrate(absl::string_view vault, absl::string_view state) {
  if (state.size() > max_piece_bytes()) {
    // Larger than a frame: put in pieces, then named by its digest.
    absl::StatusOr<vault::v1::Digest> put = UploadObject(state);
    if (!put.ok()) return put.status();
    return MigrateDigest(vault, *put);
  }
  HostRequest request;
  vault::v1::MigrateRequest* migrate = request.mutable_migrate();
  migrate->set_vault(std::string(vault));
  migrate->set_state(std::string(state));
  return MigrateCall(request);
}

absl::Status Agent::MigrateDigest(absl::string_view vault, const vault::v1::Digest& state) {
  HostRequest request;
  vault::v1::MigrateRequest* migrate = request.mutable_migrate();
  migrate->set_vault(std::string(vault));
  *migrate->mutable_state_digest() = state;
  return MigrateCall(request);
}

absl::Status Agent::MigrateCall(HostRequest& request) {
  absl::MutexLock lock(&mu_);  // held until the process ends, or the hop failed
  absl::StatusOr<HostResponse> response =
      CallLocked(request, HostResponse::RESULT_NOT_SET, nullptr);
  if (!response.ok()) return response.status();
  // Answered only on failure: an OK answer leaves it unknown where the agent now runs.
  return Break(ProtocolError("the vault answered a migrate call with success"));
}

absl::Status Agent::Exit(int code, absl::string_view message,
                         const std::optional<vault::v1::Digest>& result) {
  HostRequest request;
  vault::v1::ExitRequest* exit = request.mutable_exit();
  exit->set_code(code);
  exit->set_message(std::string(message));
  if (result.has_value()) *exit->mutable_result() = *result;
  absl::MutexLock lock(&mu_);  // held to the end: no other call starts after the exit
  absl::StatusOr<HostResponse> response =
      CallLocked(request, HostResponse::RESULT_NOT_SET, nullptr);
  if (!response.ok()) return response.status();
  std::fflush(nullptr);
  _exit(code);
}

}  // namespace vault::sdk
