// channel: length-prefixed frames over the sandbox's one channel (fd 3 inside, a Unix stream
// socket), read by the host as it must read anything untrusted.
//
// A frame is a 4-byte big-endian length followed by that many bytes. ReadFrame refuses a frame
// longer than the maximum (ResourceExhausted, and the channel is unusable after), a read that
// takes longer than the timeout (DeadlineExceeded), and any descriptor or credential the peer
// attaches (SCM_RIGHTS / SCM_CREDENTIALS): received descriptors are closed at once and the read
// fails with PermissionDenied. The end of the stream is Unavailable("channel closed"). Every
// error but a timeout before a frame's first byte closes the channel (later calls answer
// FailedPrecondition): a stream out of step is never read again.
//
//   ASSIGN_OR_RETURN(auto pair, Channel::Pair());   // pair.host stays, pair.guest_fd -> spec
//   ASSIGN_OR_RETURN(std::string frame, pair.host.ReadFrame(absl::Seconds(5)));
//
// Thread safety: one reader and one writer thread at a time.
#ifndef VAULT_SANDBOX_CHANNEL_H_
#define VAULT_SANDBOX_CHANNEL_H_

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace vault::sandbox {

inline constexpr size_t kDefaultMaxFrame = 1 << 20;

class Channel {
 public:
  struct PairResult;
  // A connected AF_UNIX stream socketpair: a Channel for the host and the guest's raw fd.
  static absl::StatusOr<PairResult> Pair();
  explicit Channel(int fd, size_t max_frame = kDefaultMaxFrame) : fd_(fd), max_frame_(max_frame) {}
  Channel(Channel&& other) noexcept;
  Channel& operator=(Channel&& other) noexcept;
  Channel(const Channel&) = delete;
  Channel& operator=(const Channel&) = delete;
  ~Channel();

  absl::StatusOr<std::string> ReadFrame(absl::Duration timeout);
  absl::Status WriteFrame(absl::string_view payload, absl::Duration timeout);
  int fd() const { return fd_; }
  // Descriptors the peer tried to pass (all closed unread).
  int refused_descriptors() const { return refused_descriptors_; }

 private:
  absl::Status ReadExactly(char* out, size_t n, absl::Time deadline, size_t* got);
  void Break();  // closes the channel: after a protocol error nothing more is read
  int fd_ = -1;
  size_t max_frame_;
  int refused_descriptors_ = 0;
};

struct Channel::PairResult {
  Channel host;
  int guest_fd = -1;  // owned by the caller: pass as SandboxSpec::channel_fd, then close
};

}  // namespace vault::sandbox

#endif  // VAULT_SANDBOX_CHANNEL_H_
