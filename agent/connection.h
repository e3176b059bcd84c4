// agent/connection: the vault's end of an agent's channel (fd 3 inside the sandbox), read and
// written without ever blocking, so one thread can serve every agent.
//
// Frames are a 4-byte big-endian length and that many bytes (hostcall.proto). FrameDecoder turns
// bytes into frames and refuses one longer than the maximum. AgentConnection reads what the
// socket has (recvmsg: any descriptor the agent attaches is closed at once and the read fails
// with PERMISSION_DENIED), and queues outgoing frames, writing what the socket takes; a queue
// that grows past its limit (an agent that does not read its answers) is RESOURCE_EXHAUSTED.
//
//   AgentConnection conn(std::move(host_fd), {.max_frame = 1 << 20});
//   std::vector<std::string> frames;
//   absl::Status s = conn.ReadAvailable(&frames, /*max_frames=*/64);   // on EPOLLIN
//   VAULT_RETURN_IF_ERROR(conn.Send(reply_bytes));                    // from any thread
//   if (conn.wants_write()) ... watch EPOLLOUT, then conn.Flush() ...
//
// BusyPoll: the reactor's wait (epoll_wait), polling briefly before it sleeps after activity.
//
// Thread-safety: ReadAvailable from one thread at a time; Send, Flush, wants_write and Close
// from any thread. A BusyPoll belongs to one thread.
#ifndef VAULT_AGENT_CONNECTION_H_
#define VAULT_AGENT_CONNECTION_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/unique_fd.h"

struct epoll_event;

namespace vault::agent {

class FrameDecoder {
 public:
  explicit FrameDecoder(size_t max_frame) : max_frame_(max_frame) {}
  // Takes more bytes. RESOURCE_EXHAUSTED once a header announces a frame over the maximum (the
  // decoder is unusable after).
  absl::Status Feed(absl::string_view bytes);
  // The next complete frame's payload, if there is one.
  std::optional<std::string> Next();
  // Bytes are buffered that do not (yet) form a whole frame (complete frames waiting to be
  // taken do not count).
  bool partial() const;

 private:
  const size_t max_frame_;
  std::string buffer_;
  size_t pos_ = 0;  // start of the first unconsumed byte
  bool broken_ = false;
};

// 4-byte big-endian length + payload.
std::string EncodeFrame(absl::string_view payload);

struct ConnectionOptions {
  size_t max_frame = 1 << 20;
  // Outgoing bytes that may wait for the agent to read them.
  size_t max_queued_bytes = 8 << 20;
};

class AgentConnection {
 public:
  AgentConnection(common::UniqueFd fd, ConnectionOptions options);
  AgentConnection(const AgentConnection&) = delete;
  AgentConnection& operator=(const AgentConnection&) = delete;

  // Reads what the socket has now and appends up to `max_frames` complete frames. OK when more
  // may come; UNAVAILABLE at the end of the stream; PERMISSION_DENIED for an attached
  // descriptor; RESOURCE_EXHAUSTED for an oversized frame; INTERNAL for a socket error.
  // `*more` is set when frames were left unread because of `max_frames`.
  absl::Status ReadAvailable(std::vector<std::string>* frames, size_t max_frames, bool* more);
  // When the first byte of a frame not yet complete arrived (InfiniteFuture when none). Any
  // thread may ask.
  absl::Time partial_since() const {
    int64_t ns = partial_since_ns_.load(std::memory_order_relaxed);
    return ns == 0 ? absl::InfiniteFuture() : absl::FromUnixNanos(ns);
  }

  // Queues `payload` as a frame (with `pass_fd`, if valid, attached to its first byte) and writes
  // what the socket takes. RESOURCE_EXHAUSTED past max_queued_bytes, FAILED_PRECONDITION once
  // closed, INTERNAL when the peer is gone.
  absl::Status Send(absl::string_view payload, common::UniqueFd pass_fd = common::UniqueFd());
  // Writes queued bytes (on EPOLLOUT).
  absl::Status Flush();
  bool wants_write() const;
  void Close();
  int fd() const { return fd_.get(); }

 private:
  struct Out {
    std::string bytes;
    size_t offset = 0;
    common::UniqueFd fd;
  };
  absl::Status FlushLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);

  common::UniqueFd fd_;
  const ConnectionOptions options_;
  FrameDecoder decoder_;
  std::atomic<int64_t> partial_since_ns_{0};  // 0: none
  mutable absl::Mutex write_mu_;
  std::deque<Out> queue_ ABSL_GUARDED_BY(write_mu_);
  size_t queued_bytes_ ABSL_GUARDED_BY(write_mu_) = 0;
  bool closed_ ABSL_GUARDED_BY(write_mu_) = false;
};

// Bounded adaptive busy-polling (docs/host-calls.md, "Latency"). A thread asleep in epoll_wait on
// an idle CPU takes tens of microseconds to be woken, far more than a cheap host call costs. So
// a thread that expects its next event soon (the reactor, having just answered frames: the next
// request, or the next message of a conversation, follows within microseconds) first polls its
// epoll set without blocking for a bounded window, and sleeps only when nothing came. The window
// is spent only after activity, never while idle; and after kMissesBeforeBackoff spins in a row
// found nothing it polls only one wait in kProbeEvery, until a spin finds an event again. So the
// CPU it burns is at most the window per burst of frames, and far less when traffic is sparse.
//
//   BusyPoll poll(AgentPollWindow());
//   int n = poll.EpollWait(epfd, events, 64, /*spin=*/handled_frames, /*timeout_ms=*/-1);
class BusyPoll {
 public:
  static constexpr uint32_t kMissesBeforeBackoff = 8;
  static constexpr uint32_t kProbeEvery = 16;

  explicit BusyPoll(absl::Duration window);
  absl::Duration window() const { return absl::Nanoseconds(window_ns_); }

  // As epoll_wait(epfd, events, max_events, timeout_ms), but when `spin` (and timeout_ms is not
  // 0, and the window is not zero, and it is not backing off) it first polls with timeout 0 for
  // up to the window. Level-triggered events are never missed: a spin that finds nothing is
  // followed by the ordinary wait.
  int EpollWait(int epfd, epoll_event* events, int max_events, bool spin, int timeout_ms);

  // Spins done, and those that found an event within the window.
  uint64_t spins() const { return spins_; }
  uint64_t hits() const { return hits_; }

 private:
  const int64_t window_ns_;
  uint32_t misses_ = 0;
  uint32_t skipped_ = 0;
  uint64_t spins_ = 0;
  uint64_t hits_ = 0;
};

// The busy-poll window of the agents' channels: $VAULT_AGENT_POLL_US microseconds when set (0
// turns busy-polling off; at most kMaxAgentPollWindow), else kDefaultAgentPollWindow.
inline constexpr char kAgentPollWindowEnv[] = "VAULT_AGENT_POLL_US";
inline constexpr absl::Duration kDefaultAgentPollWindow = absl::Microseconds(50);
inline constexpr absl::Duration kMaxAgentPollWindow = absl::Milliseconds(1);
absl::Duration AgentPollWindow();

}  // namespace vault::agent

#endif  // VAULT_AGENT_CONNECTION_H_
