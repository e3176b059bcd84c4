// hostile_test, network: sockets of every family, the host's loopback listeners, and the host's
// Unix sockets (abstract and named). The fixture is in hostile_fixture.h.
//
// Thread safety: each test runs on one thread.
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/testing/temp_dir.h"
#include "sandbox/posix/hostile_fixture.h"

namespace vault::sandbox::hostile {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;

// ---------------------------------------------------------------------------------------------
// Network and IPC.

TEST_F(Hostile, NetworkSockets) {
  absl::StatusOr<Outcome> outcome = Run("net_sockets", {});
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  ExpectCleanExit(*outcome);
  std::vector<std::string> expected;
  for (const char* kind :
       {"AF_INET SOCK_STREAM", "AF_INET SOCK_DGRAM", "AF_INET SOCK_DGRAM IPPROTO_ICMP",
        "AF_INET SOCK_RAW IPPROTO_RAW", "AF_INET6 SOCK_STREAM", "AF_INET6 SOCK_DGRAM",
        "AF_PACKET SOCK_RAW", "AF_NETLINK SOCK_RAW NETLINK_ROUTE",
        "AF_NETLINK SOCK_RAW NETLINK_AUDIT", "AF_NETLINK SOCK_DGRAM NETLINK_KOBJECT_UEVENT",
        "AF_VSOCK SOCK_STREAM", "AF_ALG SOCK_SEQPACKET", "AF_KEY SOCK_RAW", "AF_XDP SOCK_RAW",
        "AF_BLUETOOTH SOCK_STREAM"}) {
    // Only AF_UNIX passes the seccomp filter; every other family answers EPERM.
    expected.push_back(absl::StrCat("socket ", kind, ": EPERM"));
  }
  expected.push_back("socketpair AF_INET SOCK_STREAM: EPERM");
  expected.push_back("socket AF_UNIX SOCK_STREAM: OK");
  expected.push_back("socketpair AF_UNIX SOCK_DGRAM: EPERM");  // could sendmsg to host sockets
  expected.push_back("interfaces: lo");
  EXPECT_THAT(outcome->lines, ElementsAreArray(expected)) << outcome->Describe();
}

TEST_F(Hostile, LoopbackHostListener) {
  // A TCP listener and a UDP socket on the host's loopback.
  Fd tcp(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  Fd udp(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  ASSERT_GE(tcp.get(), 0);
  ASSERT_GE(udp.get(), 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(tcp.get(), reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  ASSERT_EQ(listen(tcp.get(), 8), 0);
  ASSERT_EQ(bind(udp.get(), reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  socklen_t length = sizeof address;
  ASSERT_EQ(getsockname(tcp.get(), reinterpret_cast<sockaddr*>(&address), &length), 0);
  const int tcp_port = ntohs(address.sin_port);
  length = sizeof address;
  ASSERT_EQ(getsockname(udp.get(), reinterpret_cast<sockaddr*>(&address), &length), 0);
  const int udp_port = ntohs(address.sin_port);

  RunOptions options;
  options.args = {absl::StrCat(tcp_port), absl::StrCat(udp_port)};
  absl::StatusOr<Outcome> outcome = Run("net_connect", options);
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  ExpectCleanExit(*outcome);
  EXPECT_THAT(outcome->lines,
              ElementsAre(absl::StrCat("tcp connect 127.0.0.1:", tcp_port, ": EPERM"),
                          absl::StrCat("tcp connect [::1]:", tcp_port, ": EPERM"),
                          absl::StrCat("udp send 127.0.0.1:", udp_port, ": EPERM")))
      << outcome->Describe();
  // Nothing arrived.
  EXPECT_LT(accept4(tcp.get(), nullptr, nullptr, SOCK_CLOEXEC), 0);
  EXPECT_EQ(errno, EAGAIN);
  char byte;
  EXPECT_LT(recv(udp.get(), &byte, 1, 0), 0);
  EXPECT_EQ(errno, EAGAIN);
}

TEST_F(Hostile, HostUnixSockets) {
  const std::string name = UniqueMarker("abstract");
  common::testing::TempDir tmp("hostile_unix");
  const std::string path = tmp.Path("listener.sock");
  auto bind_unix = [](int type, const std::string& name, bool abstract) {
    Fd fd(socket(AF_UNIX, type | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::memcpy(address.sun_path + (abstract ? 1 : 0), name.data(), name.size());
    socklen_t length = offsetof(sockaddr_un, sun_path) + name.size() + (abstract ? 1 : 0);
    if (bind(fd.get(), reinterpret_cast<sockaddr*>(&address), length) != 0) return Fd();
    if (type == SOCK_STREAM && listen(fd.get(), 8) != 0) return Fd();
    return fd;
  };
  Fd abstract_stream = bind_unix(SOCK_STREAM, name, true);
  Fd abstract_dgram = bind_unix(SOCK_DGRAM, name + ".dgram", true);
  Fd path_stream = bind_unix(SOCK_STREAM, path, false);
  ASSERT_GE(abstract_stream.get(), 0);
  ASSERT_GE(abstract_dgram.get(), 0);
  ASSERT_GE(path_stream.get(), 0);

  // The listener's folder is bound into the sandbox, as an operator's --ro folder might hold a
  // daemon's socket: the path exists inside, world-writable, and still cannot be reached.
  chmod(tmp.path().c_str(), 0755);
  chmod(path.c_str(), 0666);
  RunOptions options;
  options.args = {name, path};
  options.read_only_dirs = {tmp.path()};
  absl::StatusOr<Outcome> outcome = Run("abstract_unix", options);
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  ExpectCleanExit(*outcome);
  // connect is refused by seccomp (EPERM) for every Unix socket, named or abstract; datagram
  // sockets cannot be created (their sendmsg could name any host socket). Behind that,
  // abstract names live in the sandbox's own network namespace and Landlock scopes them.
  EXPECT_THAT(
      outcome->lines,
      ElementsAre(absl::StrCat("connect @", name, ": EPERM"),
                  absl::StrCat("sendto @", name, ".dgram: socket EPERM"),
                  absl::StrCat("connect ", path, ": EPERM"), "connect /run/systemd/private: EPERM",
                  "connect /run/dbus/system_bus_socket: EPERM",
                  "connect /var/run/docker.sock: EPERM", "connect @/tmp/.X11-unix/X0: EPERM"))
      << outcome->Describe();
  EXPECT_LT(accept4(abstract_stream.get(), nullptr, nullptr, SOCK_CLOEXEC), 0);
  EXPECT_EQ(errno, EAGAIN);
  EXPECT_LT(accept4(path_stream.get(), nullptr, nullptr, SOCK_CLOEXEC), 0);
  EXPECT_EQ(errno, EAGAIN);
  char byte;
  EXPECT_LT(recv(abstract_dgram.get(), &byte, 1, 0), 0);
  EXPECT_EQ(errno, EAGAIN);
}

}  // namespace
}  // namespace vault::sandbox::hostile
