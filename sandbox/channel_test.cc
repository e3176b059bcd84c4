#include "sandbox/channel.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

namespace vault::sandbox {
namespace {

// send, not write: a peer that has closed must give EPIPE, not kill the test with SIGPIPE.
bool WriteRaw(int fd, const std::string& bytes) {
  return send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size());
}

TEST(Channel, FramesRoundTrip) {
  absl::StatusOr<Channel::PairResult> pair = Channel::Pair();
  ASSERT_TRUE(pair.ok());
  Channel guest(pair->guest_fd);
  ASSERT_TRUE(guest.WriteFrame("hello", absl::Seconds(1)).ok());
  ASSERT_TRUE(guest.WriteFrame("", absl::Seconds(1)).ok());
  EXPECT_EQ(*pair->host.ReadFrame(absl::Seconds(1)), "hello");
  EXPECT_EQ(*pair->host.ReadFrame(absl::Seconds(1)), "");
}

TEST(Channel, TimeoutBeforeAFrameKeepsTheChannel) {
  absl::StatusOr<Channel::PairResult> pair = Channel::Pair();
  ASSERT_TRUE(pair.ok());
  EXPECT_EQ(pair->host.ReadFrame(absl::Milliseconds(20)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  ASSERT_TRUE(WriteRaw(pair->guest_fd, std::string("\0\0\0\2ok", 6)));
  EXPECT_EQ(*pair->host.ReadFrame(absl::Seconds(1)), "ok");
  close(pair->guest_fd);
}

TEST(Channel, PartialFrameTimeoutBreaksTheChannel) {
  absl::StatusOr<Channel::PairResult> pair = Channel::Pair();
  ASSERT_TRUE(pair.ok());
  ASSERT_TRUE(WriteRaw(pair->guest_fd, std::string("\0\0\0\x08"
                                                   "abc",
                                                   7)));
  EXPECT_EQ(pair->host.ReadFrame(absl::Milliseconds(50)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  // The rest of that frame must never be read as a header: the host end is closed.
  EXPECT_FALSE(WriteRaw(pair->guest_fd, std::string("\0\0\0\x01"
                                                    "x",
                                                    5)));
  EXPECT_EQ(pair->host.ReadFrame(absl::Seconds(1)).status().code(),
            absl::StatusCode::kFailedPrecondition);
  close(pair->guest_fd);
}

TEST(Channel, OversizedFrameIsRefusedAndEndsTheChannel) {
  int fds[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
  Channel host(fds[0], /*max_frame=*/16);
  ASSERT_TRUE(WriteRaw(fds[1], std::string("\0\0\0\x11", 4)));
  absl::Status status = host.ReadFrame(absl::Seconds(1)).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(status.message(), "channel: frame of 17 bytes exceeds the maximum of 16");
  EXPECT_EQ(host.fd(), -1);
  close(fds[1]);
}

TEST(Channel, PassedDescriptorsAreClosedAndRefused) {
  absl::StatusOr<Channel::PairResult> pair = Channel::Pair();
  ASSERT_TRUE(pair.ok());
  int passed[2];
  ASSERT_EQ(pipe(passed), 0);
  char byte = 0;
  iovec iov{&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(2 * sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
  cmsg->cmsg_level = SOL_SOCKET;
  cmsg->cmsg_type = SCM_RIGHTS;
  cmsg->cmsg_len = CMSG_LEN(2 * sizeof(int));
  memcpy(CMSG_DATA(cmsg), passed, sizeof passed);
  ASSERT_EQ(sendmsg(pair->guest_fd, &msg, 0), 1);
  close(passed[0]);
  close(passed[1]);
  EXPECT_EQ(pair->host.ReadFrame(absl::Seconds(1)).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(pair->host.refused_descriptors(), 2);
  EXPECT_EQ(pair->host.fd(), -1);
  close(pair->guest_fd);
}

TEST(Channel, PeerCloseIsUnavailable) {
  absl::StatusOr<Channel::PairResult> pair = Channel::Pair();
  ASSERT_TRUE(pair.ok());
  close(pair->guest_fd);
  absl::Status status = pair->host.ReadFrame(absl::Seconds(1)).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(status.message(), "channel closed");
}

}  // namespace
}  // namespace vault::sandbox
