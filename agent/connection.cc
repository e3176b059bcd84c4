#include "agent/connection.h"

#include <errno.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace vault::agent {

absl::Status FrameDecoder::Feed(absl::string_view bytes) {
  if (broken_) return absl::FailedPreconditionError("the frame stream is broken");
  if (pos_ > 0 && pos_ >= buffer_.size() / 2) {  // compact
    buffer_.erase(0, pos_);
    pos_ = 0;
  }
  buffer_.append(bytes.data(), bytes.size());
  if (buffer_.size() - pos_ >= 4) {
    const auto* p = reinterpret_cast<const unsigned char*>(buffer_.data() + pos_);
    uint32_t length =
        (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
    if (length > max_frame_) {
      broken_ = true;
      buffer_.clear();
      pos_ = 0;
      return absl::ResourceExhaustedError(
          absl::StrCat("a frame of ", length, " bytes exceeds the maximum of ", max_frame_));
    }
  }
  return absl::OkStatus();
}

std::optional<std::string> FrameDecoder::Next() {
  if (broken_ || buffer_.size() - pos_ < 4) return std::nullopt;
  const auto* p = reinterpret_cast<const unsigned char*>(buffer_.data() + pos_);
  uint32_t length = (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
  if (length > max_frame_) {  // (Feed refuses it first; kept for safety)
    broken_ = true;
    return std::nullopt;
  }
  if (buffer_.size() - pos_ - 4 < length) return std::nullopt;
  std::string frame = buffer_.substr(pos_ + 4, length);
  pos_ += 4 + length;
  // The header of the next frame, if already here, must be checked too.
  if (buffer_.size() - pos_ >= 4) {
    const auto* q = reinterpret_cast<const unsigned char*>(buffer_.data() + pos_);
    uint32_t next = (uint32_t{q[0]} << 24) | (uint32_t{q[1]} << 16) | (uint32_t{q[2]} << 8) | q[3];
    if (next > max_frame_) broken_ = true;  // the next Feed/Next reports nothing more
  }
  return frame;
}

bool FrameDecoder::partial() const {
  size_t have = buffer_.size() - pos_;
  if (have == 0) return false;
  if (have < 4) return true;
  const auto* p = reinterpret_cast<const unsigned char*>(buffer_.data() + pos_);
  uint32_t length = (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
  return have - 4 < length;
}

std::string EncodeFrame(absl::string_view payload) {
  std::string out(4, '\0');
  uint32_t n = static_cast<uint32_t>(payload.size());
  out[0] = static_cast<char>(n >> 24);
  out[1] = static_cast<char>(n >> 16);
  out[2] = static_cast<char>(n >> 8);
  out[3] = static_cast<char>(n);
  out.append(payload.data(), payload.size());
  return out;
}

AgentConnection::AgentConnection(common::UniqueFd fd, ConnectionOptions options)
    : fd_(std::move(fd)), options_(options), decoder_(options.max_frame) {}

absl::Status AgentConnection::ReadAvailable(std::vector<std::string>* frames, size_t max_frames,
                                            bool* more) {
  *more = false;
  // Frames already decoded first.
  auto drain = [&]() {
    while (frames->size() < max_frames) {
      std::optional<std::string> f = decoder_.Next();
      if (!f.has_value()) break;
      frames->push_back(*std::move(f));
    }
  };
  drain();
  if (frames->size() >= max_frames) {
    *more = true;
    return absl::OkStatus();
  }
  char buf[64 * 1024];
  for (int round = 0; round < 16; ++round) {
    iovec iov{buf, sizeof buf};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 8)];
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    ssize_t n = recvmsg(fd_.get(), &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      return absl::InternalError(absl::StrCat("reading the agent's channel: ", strerror(errno)));
    }
    bool attached = (msg.msg_flags & MSG_CTRUNC) != 0;
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      attached = true;
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
        size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < count; ++i) {
          int received;
          memcpy(&received, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
          close(received);
        }
      }
    }
    if (attached) {
      return absl::PermissionDeniedError(
          "the agent attached a descriptor or credentials to its channel");
    }
    if (n == 0) return absl::UnavailableError("the agent closed its channel");
    if (absl::Status s = decoder_.Feed(absl::string_view(buf, static_cast<size_t>(n))); !s.ok()) {
      return s;
    }
    drain();
    if (frames->size() >= max_frames) {
      *more = true;
      break;
    }
    if (static_cast<size_t>(n) < sizeof buf) break;
  }
  if (decoder_.partial()) {
    if (partial_since_ns_.load(std::memory_order_relaxed) == 0) {
      partial_since_ns_.store(absl::ToUnixNanos(absl::Now()), std::memory_order_relaxed);
    }
  } else {
    partial_since_ns_.store(0, std::memory_order_relaxed);
  }
  return absl::OkStatus();
}

absl::Status AgentConnection::Send(absl::string_view payload, common::UniqueFd pass_fd) {
  absl::MutexLock lock(&write_mu_);
  if (closed_) return absl::FailedPreconditionError("the agent's channel is closed");
  if (queued_bytes_ + payload.size() + 4 > options_.max_queued_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the agent does not read its channel (", queued_bytes_, " bytes waiting)"));
  }
  Out out{EncodeFrame(payload), 0, std::move(pass_fd)};
  queued_bytes_ += out.bytes.size();
  queue_.push_back(std::move(out));
  return FlushLocked();
}

absl::Status AgentConnection::Flush() {
  absl::MutexLock lock(&write_mu_);
  return FlushLocked();
}

absl::Status AgentConnection::FlushLocked() {
  while (!queue_.empty() && !closed_) {
    Out& out = queue_.front();
    iovec iov{out.bytes.data() + out.offset, out.bytes.size() - out.offset};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
    if (out.fd.valid()) {
      memset(control, 0, sizeof control);
      msg.msg_control = control;
      msg.msg_controllen = sizeof control;
      cmsghdr* c = CMSG_FIRSTHDR(&msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int));
      int passed = out.fd.get();
      memcpy(CMSG_DATA(c), &passed, sizeof(int));
    }
    ssize_t n = sendmsg(fd_.get(), &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return absl::OkStatus();
      return absl::InternalError(absl::StrCat("writing the agent's channel: ", strerror(errno)));
    }
    out.fd.Reset();  // passed with the first byte
    out.offset += static_cast<size_t>(n);
    queued_bytes_ -= static_cast<size_t>(n);
    if (out.offset == out.bytes.size()) queue_.pop_front();
  }
  return absl::OkStatus();
}

bool AgentConnection::wants_write() const {
  absl::MutexLock lock(&write_mu_);
  return !queue_.empty() && !closed_;
}

void AgentConnection::Close() {
  absl::MutexLock lock(&write_mu_);
  closed_ = true;
  queue_.clear();
  queued_bytes_ = 0;
  shutdown(fd_.get(), SHUT_RDWR);
}

namespace {

int64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

// Between two polls. Not sched_yield: it costs a pass through the scheduler, whose accounting
// made reading the agent's cgroup statistics (self_inspect) twice as slow in agent_bench.
inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace

BusyPoll::BusyPoll(absl::Duration window)
    : window_ns_(std::clamp<int64_t>(absl::ToInt64Nanoseconds(window), 0,
                                     absl::ToInt64Nanoseconds(kMaxAgentPollWindow))) {}

int BusyPoll::EpollWait(int epfd, epoll_event* events, int max_events, bool spin, int timeout_ms) {
  if (spin && timeout_ms != 0 && window_ns_ > 0 &&
      (misses_ < kMissesBeforeBackoff || ++skipped_ % kProbeEvery == 0)) {
    ++spins_;
    const int64_t start = MonotonicNs();
    for (;;) {
      int n = epoll_wait(epfd, events, max_events, 0);
      if (n > 0) {
        ++hits_;
        misses_ = 0;
        skipped_ = 0;
        return n;
      }
      if (n < 0 && errno != EINTR) return n;
      if (MonotonicNs() - start >= window_ns_) break;
      CpuRelax();
    }
    if (misses_ < kMissesBeforeBackoff) ++misses_;
  }
  return epoll_wait(epfd, events, max_events, timeout_ms);
}

absl::Duration AgentPollWindow() {
  absl::Duration window = kDefaultAgentPollWindow;
  if (const char* env = std::getenv(kAgentPollWindowEnv); env != nullptr && *env != '\0') {
    int64_t us;
    if (absl::SimpleAtoi(env, &us) && us >= 0) {
      window = std::min(absl::Microseconds(us), kMaxAgentPollWindow);
    }
  }
  return window;
}

}  // namespace vault::agent
