#include "agent/connection.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace vault::agent {
namespace {

struct Pair {
  std::unique_ptr<AgentConnection> host;
  common::UniqueFd guest;
};

Pair MakePair(size_t max_frame = 64, size_t max_queued = 1 << 20) {
  int fds[2];
  EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
  fcntl(fds[0], F_SETFL, fcntl(fds[0], F_GETFL) | O_NONBLOCK);
  return {std::make_unique<AgentConnection>(
              common::UniqueFd(fds[0]),
              ConnectionOptions{.max_frame = max_frame, .max_queued_bytes = max_queued}),
          common::UniqueFd(fds[1])};
}

void WriteAll(int fd, const std::string& bytes) {
  ASSERT_EQ(write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
}

TEST(FrameDecoder, SplitsFramesFedInPieces) {
  FrameDecoder d(16);
  std::string stream = EncodeFrame("abc") + EncodeFrame("") + EncodeFrame("0123456789");
  for (char c : stream) ASSERT_TRUE(d.Feed(std::string(1, c)).ok());
  EXPECT_EQ(d.Next(), "abc");
  EXPECT_EQ(d.Next(), "");
  EXPECT_EQ(d.Next(), "0123456789");
  EXPECT_EQ(d.Next(), std::nullopt);
  EXPECT_FALSE(d.partial());
}

TEST(FrameDecoder, EncodesBigEndianLength) {
  EXPECT_EQ(EncodeFrame("hi"), std::string("\0\0\0\2hi", 6));
}

TEST(FrameDecoder, RefusesAnOversizedHeaderBeforeItsBody) {
  FrameDecoder d(16);
  absl::Status s = d.Feed(std::string("\0\0\0\x11", 4));  // 17 > 16
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(s.message(), "a frame of 17 bytes exceeds the maximum of 16");
  EXPECT_EQ(d.Feed("x").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(d.Next(), std::nullopt);
}

TEST(FrameDecoder, AnOversizedFrameAfterAGoodOneEndsTheStream) {
  FrameDecoder d(4);
  ASSERT_TRUE(d.Feed(EncodeFrame("ok") + std::string("\xff\xff\xff\xff", 4)).ok());
  EXPECT_EQ(d.Next(), "ok");
  EXPECT_EQ(d.Next(), std::nullopt);
  EXPECT_FALSE(d.Feed("more").ok());
}

TEST(AgentConnection, ReadsFramesAndReportsPartialOnes) {
  Pair p = MakePair();
  WriteAll(p.guest.get(), EncodeFrame("one") + EncodeFrame("two") + std::string("\0\0\0\5ab", 6));
  std::vector<std::string> frames;
  bool more = false;
  ASSERT_TRUE(p.host->ReadAvailable(&frames, 64, &more).ok());
  EXPECT_EQ(frames, (std::vector<std::string>{"one", "two"}));
  EXPECT_FALSE(more);
  EXPECT_LT(p.host->partial_since(), absl::InfiniteFuture());
  WriteAll(p.guest.get(), "cde");
  frames.clear();
  ASSERT_TRUE(p.host->ReadAvailable(&frames, 64, &more).ok());
  EXPECT_EQ(frames, (std::vector<std::string>{"abcde"}));
  EXPECT_EQ(p.host->partial_since(), absl::InfiniteFuture());
}

TEST(AgentConnection, LimitsFramesPerRead) {
  Pair p = MakePair();
  std::string many;
  for (int i = 0; i < 10; ++i) many += EncodeFrame(std::to_string(i));
  WriteAll(p.guest.get(), many);
  std::vector<std::string> frames;
  bool more = false;
  ASSERT_TRUE(p.host->ReadAvailable(&frames, 3, &more).ok());
  EXPECT_EQ(frames.size(), 3u);
  EXPECT_TRUE(more);
  // Whole frames waiting their turn are not an unfinished frame (no read timeout runs).
  EXPECT_EQ(p.host->partial_since(), absl::InfiniteFuture());
  frames.clear();
  ASSERT_TRUE(p.host->ReadAvailable(&frames, 100, &more).ok());
  EXPECT_EQ(frames.size(), 7u);
  EXPECT_EQ(frames.front(), "3");
}

TEST(AgentConnection, EndOfStreamIsUnavailable) {
  Pair p = MakePair();
  p.guest.Reset();
  std::vector<std::string> frames;
  bool more;
  EXPECT_EQ(p.host->ReadAvailable(&frames, 64, &more).code(), absl::StatusCode::kUnavailable);
}

TEST(AgentConnection, AnAttachedDescriptorIsClosedAndRefused) {
  Pair p = MakePair();
  int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(devnull, 0);
  std::string frame = EncodeFrame("x");
  iovec iov{frame.data(), frame.size()};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(c), &devnull, sizeof(int));
  ASSERT_EQ(sendmsg(p.guest.get(), &msg, 0), static_cast<ssize_t>(frame.size()));
  close(devnull);
  // Count our descriptors before and after: the received one must not stay open.
  auto count_fds = [] {
    int n = 0;
    for (int fd = 0; fd < 1024; ++fd) n += fcntl(fd, F_GETFD) != -1 ? 1 : 0;
    return n;
  };
  int before = count_fds();
  std::vector<std::string> frames;
  bool more;
  absl::Status s = p.host->ReadAvailable(&frames, 64, &more);
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(count_fds(), before);
}

TEST(AgentConnection, AnOversizedFrameIsRefused) {
  Pair p = MakePair(/*max_frame=*/8);
  WriteAll(p.guest.get(), std::string("\x7f\xff\xff\xff", 4));
  std::vector<std::string> frames;
  bool more;
  EXPECT_EQ(p.host->ReadAvailable(&frames, 64, &more).code(), absl::StatusCode::kResourceExhausted);
}

TEST(AgentConnection, SendsFramesWithAPassedDescriptor) {
  Pair p = MakePair();
  int pipefd[2];
  ASSERT_EQ(pipe2(pipefd, O_CLOEXEC), 0);
  common::UniqueFd read_end(pipefd[0]);
  ASSERT_TRUE(p.host->Send("abc", common::UniqueFd(pipefd[1])).ok());
  char buf[16];
  iovec iov{buf, sizeof buf};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n = recvmsg(p.guest.get(), &msg, MSG_CMSG_CLOEXEC);
  ASSERT_EQ(n, 7);
  EXPECT_EQ(std::string(buf, 7), std::string("\0\0\0\3abc", 7));
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  ASSERT_NE(c, nullptr);
  int received;
  memcpy(&received, CMSG_DATA(c), sizeof(int));
  // The passed write end works: bytes written there come out of our read end.
  ASSERT_EQ(write(received, "z", 1), 1);
  close(received);
  char z;
  ASSERT_EQ(read(read_end.get(), &z, 1), 1);
  EXPECT_EQ(z, 'z');
}

TEST(AgentConnection, AnAgentThatDoesNotReadIsCutOff) {
  Pair p = MakePair(/*max_frame=*/1 << 20, /*max_queued=*/256 << 10);
  std::string big(64 << 10, 'x');
  absl::Status s;
  int sent = 0;
  for (; sent < 100 && (s = p.host->Send(big)).ok(); ++sent) {
  }
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(p.host->wants_write());
  EXPECT_LT(sent, 100);
}

int64_t ThreadCpuNs() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

// An epoll set watching one end of a socketpair for EPOLLIN; `peer` writes to it.
struct Watched {
  common::UniqueFd epoll;
  common::UniqueFd watched;
  common::UniqueFd peer;
};

Watched MakeWatched() {
  int fds[2];
  EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
  Watched w{common::UniqueFd(epoll_create1(EPOLL_CLOEXEC)), common::UniqueFd(fds[0]),
            common::UniqueFd(fds[1])};
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = 7;
  EXPECT_EQ(epoll_ctl(w.epoll.get(), EPOLL_CTL_ADD, w.watched.get(), &ev), 0);
  return w;
}

// What the reactor does when it is idle: whether or not it had just answered frames (a spin),
// it sleeps in epoll_wait; over a second of waiting its thread uses almost no CPU.
TEST(BusyPoll, AnIdleWaitBurnsNoCpu) {
  for (bool spin : {false, true}) {
    Watched w = MakeWatched();
    BusyPoll poll(kMaxAgentPollWindow);  // the longest window: still bounded
    std::thread writer([fd = w.peer.get()] {
      absl::SleepFor(absl::Seconds(1));
      ASSERT_EQ(write(fd, "x", 1), 1);
    });
    epoll_event events[8];
    const int64_t cpu0 = ThreadCpuNs();
    const absl::Time t0 = absl::Now();
    int n = poll.EpollWait(w.epoll.get(), events, 8, spin, -1);
    const absl::Duration waited = absl::Now() - t0;
    const int64_t cpu = ThreadCpuNs() - cpu0;
    writer.join();
    EXPECT_EQ(n, 1);
    EXPECT_EQ(events[0].data.u64, 7u);
    EXPECT_GE(waited, absl::Milliseconds(900));
    EXPECT_LT(cpu, 20 * 1000 * 1000) << "ns of CPU while idle 1 s (spin " << spin << ")";
    EXPECT_EQ(poll.spins(), spin ? 1u : 0u);
    EXPECT_EQ(poll.hits(), 0u);
  }
}

TEST(BusyPoll, ASpinReturnsWhatIsReadyAtOnce) {
  Watched w = MakeWatched();
  BusyPoll poll(absl::Microseconds(50));
  ASSERT_EQ(write(w.peer.get(), "x", 1), 1);
  epoll_event events[8];
  EXPECT_EQ(poll.EpollWait(w.epoll.get(), events, 8, /*spin=*/true, -1), 1);
  EXPECT_EQ(poll.spins(), 1u);
  EXPECT_EQ(poll.hits(), 1u);
}

// An event that comes during the spin is a hit; one that comes later is still reported by the
// ordinary wait (never missed).
TEST(BusyPoll, AnEventDuringOrAfterTheSpinIsReported) {
  for (absl::Duration delay : {absl::Microseconds(100), absl::Milliseconds(30)}) {
    Watched w = MakeWatched();
    BusyPoll poll(absl::Milliseconds(1));
    std::thread writer([fd = w.peer.get(), delay] {
      absl::SleepFor(delay);
      ASSERT_EQ(write(fd, "x", 1), 1);
    });
    epoll_event events[8];
    EXPECT_EQ(poll.EpollWait(w.epoll.get(), events, 8, /*spin=*/true, 5000), 1);
    writer.join();
    EXPECT_EQ(poll.spins(), 1u);
    // (Whether the 100 us one came within the 1 ms window depends on the machine's load.)
    if (delay >= absl::Milliseconds(30)) {
      EXPECT_EQ(poll.hits(), 0u);
    }
  }
}

TEST(BusyPoll, BacksOffAfterMissesAndRecoversOnAHit) {
  Watched w = MakeWatched();
  BusyPoll poll(absl::Microseconds(10));
  epoll_event events[8];
  for (uint32_t i = 0; i < BusyPoll::kMissesBeforeBackoff; ++i) {
    EXPECT_EQ(poll.EpollWait(w.epoll.get(), events, 8, /*spin=*/true, 1), 0);
  }
  EXPECT_EQ(poll.spins(), BusyPoll::kMissesBeforeBackoff);
  // Backing off: one wait in kProbeEvery spins.
  for (uint32_t i = 1; i < BusyPoll::kProbeEvery; ++i) {
    EXPECT_EQ(poll.EpollWait(w.epoll.get(), events, 8, /*spin=*/true, 1), 0);
  }
  EXPECT_EQ(poll.spins(), BusyPoll::kMissesBeforeBackoff);
  ASSERT_EQ(write(w.peer.get(), "x", 1), 1);  // the probe finds this
  EXPECT_EQ(poll.EpollWait(w.epoll.get(), events, 8, /*spin=*/true, 1), 1);
  EXPECT_EQ(poll.spins(), BusyPoll::kMissesBeforeBackoff + 1);
  EXPECT_EQ(poll.hits(), 1u);
  // Recovered: the next wait spins again.
  EXPECT_EQ(poll.EpollWait(w.epoll.get(), events, 8, /*spin=*/true, 1), 1);
  EXPECT_EQ(poll.spins(), BusyPoll::kMissesBeforeBackoff + 2);
}

TEST(BusyPoll, ZeroWindowOrZeroTimeoutNeverSpins) {
  Watched w = MakeWatched();
  epoll_event events[8];
  BusyPoll off(absl::ZeroDuration());
  EXPECT_EQ(off.EpollWait(w.epoll.get(), events, 8, /*spin=*/true, 1), 0);
  EXPECT_EQ(off.spins(), 0u);
  BusyPoll on(absl::Microseconds(50));
  EXPECT_EQ(on.EpollWait(w.epoll.get(), events, 8, /*spin=*/true, 0), 0);
  EXPECT_EQ(on.spins(), 0u);
}

TEST(BusyPoll, WindowFromTheEnvironment) {
  unsetenv(kAgentPollWindowEnv);
  EXPECT_EQ(AgentPollWindow(), kDefaultAgentPollWindow);
  setenv(kAgentPollWindowEnv, "20", 1);
  EXPECT_EQ(AgentPollWindow(), absl::Microseconds(20));
  setenv(kAgentPollWindowEnv, "0", 1);
  EXPECT_EQ(AgentPollWindow(), absl::ZeroDuration());
  setenv(kAgentPollWindowEnv, "999999999", 1);
  EXPECT_EQ(AgentPollWindow(), kMaxAgentPollWindow);
  setenv(kAgentPollWindowEnv, "fast", 1);
  EXPECT_EQ(AgentPollWindow(), kDefaultAgentPollWindow);
  unsetenv(kAgentPollWindowEnv);
}

}  // namespace
}  // namespace vault::agent
