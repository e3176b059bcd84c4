// The posix sandbox's hostile corpus (sandbox/posix/testdata: one attack per program) run through
// the container type: the same programs, as the /code of an image root with the C library they
// load, started by ContainerSandbox under the real runc. Every attack is contained: no program
// reports an escape, the host's secrets never show, its processes live on, and the bombs end by
// the limits they attack. Where the container's answer is pinned (the kernel surface the seccomp
// filters close, the network, ptrace), it is the posix sandbox's answer: vault-container-init
// installs the same filters.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstddef>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/file_util.h"
#include "common/testing/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sandbox/container/container_sandbox.h"
#include "sandbox/posix/hostile_fixture.h"

namespace vault::sandbox::hostile {
namespace {

using ::testing::Contains;
using ::testing::Each;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

constexpr char kImage[] = "00000000000000000000000000000000000000000000000000000000000c0de5";

class HostileContainer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (geteuid() != 0) return;
    tmp_ = new common::testing::TempDir("hostile_container");
    chmod(tmp_->path().c_str(), 0711);
    root_ = new std::string(tmp_->Path("rootfs"));
    const std::string& root = *root_;
    for (const char* d : {"", "/proc", "/dev", "/sys", "/work", "/tmp", "/.vault", "/code"}) {
      mkdir((root + d).c_str(), 0755);
    }
    (void)common::WriteFileAtomic(root + "/.vault/init", "", 0755);
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(kCorpusDir, ec)) {
      if (!entry.is_regular_file()) continue;
      const std::string to = root + "/code/" + entry.path().filename().string();
      std::filesystem::copy_file(entry.path(), to, ec);
      chmod(to.c_str(), 0755);
    }
    // The C library the corpus loads, at the paths its loader expects (ldd of a host program
    // linked the same way: the corpus itself never runs on the host).
    FILE* ldd = popen("ldd /bin/true", "r");
    char line[512];
    while (ldd != nullptr && fgets(line, sizeof line, ldd) != nullptr) {
      for (absl::string_view word : absl::StrSplit(line, absl::ByAnyChar(" \t\n"))) {
        if (word.empty() || word[0] != '/') continue;
        const std::string path(word);
        std::filesystem::create_directories(
            root + std::filesystem::path(path).parent_path().string(), ec);
        std::filesystem::copy_file(std::filesystem::canonical(path, ec), root + path, ec);
        chmod((root + path).c_str(), 0755);
      }
    }
    if (ldd != nullptr) pclose(ldd);
    ContainerSandboxOptions options;
    options.state_dir = tmp_->Path("state");
    options.init_dir = std::filesystem::path(CONTAINER_INIT).parent_path().string();
    options.stage_root = tmp_->Path("stage");
    options.images = [](const std::string&, uint64_t) -> absl::StatusOr<ContainerImage> {
      ContainerImage image;
      image.rootfs = *root_;
      return image;
    };
    absl::StatusOr<std::unique_ptr<ContainerSandbox>> box = ContainerSandbox::Create(options);
    if (box.ok())
      box_ = box->release();
    else
      create_error_ = new std::string(box.status().ToString());
  }
  static void TearDownTestSuite() {
    delete box_;
    box_ = nullptr;
    delete tmp_;
    delete root_;
    delete create_error_;
  }
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "runc runs containers as root here";
    ASSERT_NE(box_, nullptr) << (create_error_ != nullptr ? *create_error_ : "");
  }

  // Runs corpus program `name` in a container to its end.
  Outcome Run(const std::string& name, const std::vector<std::string>& args,
              Limits limits = TestLimits(), int stdin_fd = -1) {
    Outcome outcome;
    CodeObject code;
    code.digest = kImage;
    code.command = {"/code/" + name};
    code.command.insert(code.command.end(), args.begin(), args.end());
    SandboxSpec spec;
    EXPECT_TRUE(box_->SetProgram(code, &spec).ok());
    int out[2];
    EXPECT_EQ(pipe2(out, O_CLOEXEC), 0);
    Fd out_read(out[0]), out_write(out[1]);
    spec.stdout_fd = out_write.get();
    spec.stderr_fd = out_write.get();
    spec.stdin_fd = stdin_fd;
    spec.limits = limits;
    absl::StatusOr<std::unique_ptr<SandboxHandle>> handle = box_->Spawn(spec);
    EXPECT_TRUE(handle.ok()) << handle.status();
    if (!handle.ok()) return outcome;
    out_write.Reset();
    Program program(std::move(*handle), std::move(out_read), Fd());
    absl::StatusOr<ExitInfo> exit = program.Finish(limits.wall_time + absl::Seconds(10));
    EXPECT_TRUE(exit.ok()) << exit.status();
    if (exit.ok()) outcome.exit = *exit;
    outcome.output = program.output();
    outcome.lines = SplitLines(outcome.output);
    outcome.handle = program.ReleaseHandle();
    EXPECT_THAT(outcome.lines, Each(Not(StartsWith("ESCAPED"))))
        << name << ": " << outcome.Describe();
    EXPECT_THAT(outcome.lines, Each(Not(StartsWith("REFUSED"))))
        << name << ": " << outcome.Describe();
    return outcome;
  }
  static void ExpectCleanExit(const Outcome& o) {
    EXPECT_TRUE(o.exit.exited) << o.Describe();
    EXPECT_EQ(o.exit.exit_code, 0) << o.Describe();
    EXPECT_EQ(o.exit.limit, LimitHit::kNone) << o.Describe();
  }

  static common::testing::TempDir* tmp_;
  static std::string* root_;
  static ContainerSandbox* box_;
  static std::string* create_error_;
};

common::testing::TempDir* HostileContainer::tmp_ = nullptr;
std::string* HostileContainer::root_ = nullptr;
ContainerSandbox* HostileContainer::box_ = nullptr;
std::string* HostileContainer::create_error_ = nullptr;

TEST_F(HostileContainer, HostFilesStayUnread) {
  common::testing::TempDir data("hostile_container_data");
  const std::string secret = UniqueMarker("secret");
  WriteHostFile(data.Path("blob"), secret);
  Outcome o = Run("read_host", {secret, "/etc/shadow", "/etc/passwd", "/root", "/var/lib", "/run",
                                "/boot", data.path(), data.Path("blob")});
  ExpectCleanExit(o);
  EXPECT_THAT(o.output, Not(HasSubstr(secret)));
  EXPECT_THAT(o.lines,
              ElementsAre("read /etc/shadow: ENOENT", "read /etc/passwd: ENOENT",
                          "read /root: ENOENT", "read /var/lib: ENOENT", "read /run: ENOENT",
                          "read /boot: ENOENT", absl::StrCat("read ", data.path(), ": ENOENT"),
                          absl::StrCat("read ", data.Path("blob"), ": ENOENT")))
      << o.Describe();

  WriteHostFile(data.Path("secret"), secret);
  o = Run("dotdot_escape", {secret, data.Path("secret")});
  ExpectCleanExit(o);
  EXPECT_THAT(o.output, Not(HasSubstr(secret)));
}

TEST_F(HostileContainer, NoNetworkButLoopbackAndNoHostSockets) {
  Fd tcp(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(tcp.get(), reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  ASSERT_EQ(listen(tcp.get(), 8), 0);
  socklen_t length = sizeof address;
  ASSERT_EQ(getsockname(tcp.get(), reinterpret_cast<sockaddr*>(&address), &length), 0);
  const int port = ntohs(address.sin_port);
  Outcome o = Run("net_connect", {absl::StrCat(port), absl::StrCat(port)});
  ExpectCleanExit(o);
  EXPECT_THAT(o.lines, ElementsAre(absl::StrCat("tcp connect 127.0.0.1:", port, ": EPERM"),
                                   absl::StrCat("tcp connect [::1]:", port, ": EPERM"),
                                   absl::StrCat("udp send 127.0.0.1:", port, ": EPERM")))
      << o.Describe();
  EXPECT_LT(accept4(tcp.get(), nullptr, nullptr, SOCK_CLOEXEC), 0);
  o = Run("net_sockets", {});
  ExpectCleanExit(o);
  std::vector<std::string> expected;
  for (const char* kind :
       {"AF_INET SOCK_STREAM", "AF_INET SOCK_DGRAM", "AF_INET SOCK_DGRAM IPPROTO_ICMP",
        "AF_INET SOCK_RAW IPPROTO_RAW", "AF_INET6 SOCK_STREAM", "AF_INET6 SOCK_DGRAM",
        "AF_PACKET SOCK_RAW", "AF_NETLINK SOCK_RAW NETLINK_ROUTE",
        "AF_NETLINK SOCK_RAW NETLINK_AUDIT", "AF_NETLINK SOCK_DGRAM NETLINK_KOBJECT_UEVENT",
        "AF_VSOCK SOCK_STREAM", "AF_ALG SOCK_SEQPACKET", "AF_KEY SOCK_RAW", "AF_XDP SOCK_RAW",
        "AF_BLUETOOTH SOCK_STREAM"}) {
    expected.push_back(absl::StrCat("socket ", kind, ": EPERM"));
  }
  expected.push_back("socketpair AF_INET SOCK_STREAM: EPERM");
  expected.push_back("socket AF_UNIX SOCK_STREAM: OK");  // as in a posix sandbox
  expected.push_back("socketpair AF_UNIX SOCK_DGRAM: EPERM");
  expected.push_back("interfaces: lo");
  EXPECT_THAT(o.lines, ::testing::ElementsAreArray(expected)) << o.Describe();
  // A host listener on an abstract name and on a path: neither reachable.
  const std::string name = UniqueMarker("abstract");
  Fd listener(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  sockaddr_un unix_address{};
  unix_address.sun_family = AF_UNIX;
  std::memcpy(unix_address.sun_path + 1, name.data(), name.size());
  ASSERT_EQ(bind(listener.get(), reinterpret_cast<sockaddr*>(&unix_address),
                 static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size())),
            0);
  ASSERT_EQ(listen(listener.get(), 4), 0);
  o = Run("abstract_unix", {name, "/tmp/" + name + ".sock"});
  ExpectCleanExit(o);
  EXPECT_LT(accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC), 0);
}

TEST_F(HostileContainer, TheKernelSurfaceIsClosed) {
  HostSleep victim;
  ASSERT_GT(victim.pid(), 0);
  const std::string host = absl::StrCat(victim.pid());
  Outcome o = Run("ptrace_host", {host});
  ExpectCleanExit(o);
  EXPECT_THAT(o.lines, Contains("PTRACE_ATTACH " + host + ": EPERM")) << o.Describe();
  EXPECT_THAT(o.lines, Contains("PTRACE_TRACEME: EPERM")) << o.Describe();
  EXPECT_THAT(o.lines, Contains("process_vm_readv " + host + ": EPERM")) << o.Describe();
  EXPECT_TRUE(victim.Alive());
  for (const char* program : {"mount_ops", "namespaces", "bpf", "io_uring", "keyring", "perf_event",
                              "userfaultfd", "kernel_modules", "devices", "setuid_exec", "rlimits",
                              "work_exec", "write_outside", "symlink_plant", "file_handles"}) {
    SCOPED_TRACE(program);
    o = Run(program, {});
    ExpectCleanExit(o);
  }
  // The other system call ABIs end the program: the filter kills on them.
  for (const char* program : {"i386_abi", "x32_abi"}) {
    SCOPED_TRACE(program);
    o = Run(program, {});
    EXPECT_FALSE(o.exit.exited) << o.Describe();
    EXPECT_EQ(o.exit.signal, SIGSYS) << o.Describe();
  }
  o = Run("kill_all", {host, absl::StrCat(getpid())});
  ExpectCleanExit(o);
  EXPECT_TRUE(victim.Alive());
  o = Run("proc_leak", {absl::StrCat(getpid())});
  ExpectCleanExit(o);
  // Its own processes only: nothing of the host's.
  EXPECT_THAT(o.lines, Contains(absl::StrCat("read /proc/", getpid(), "/cmdline: ENOENT")))
      << o.Describe();
  EXPECT_THAT(o.lines, Contains(absl::StrCat("read /proc/", getpid(), "/environ: ENOENT")))
      << o.Describe();
  EXPECT_THAT(o.lines, Contains("read /proc/kcore: ENOENT")) << o.Describe();
  EXPECT_THAT(o.lines, Contains("open for writing /proc/sys/kernel/core_pattern: EACCES"))
      << o.Describe();
}

TEST_F(HostileContainer, TheTerminalCannotBeDriven) {
  Fd master(posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC));
  ASSERT_GE(master.get(), 0);
  ASSERT_EQ(grantpt(master.get()), 0);
  ASSERT_EQ(unlockpt(master.get()), 0);
  char name[128];
  ASSERT_EQ(ptsname_r(master.get(), name, sizeof name), 0);
  Fd slave(open(name, O_RDWR | O_NOCTTY | O_CLOEXEC | O_NONBLOCK));
  ASSERT_GE(slave.get(), 0);
  Outcome o = Run("tty_ioctl", {}, TestLimits(), slave.get());
  ExpectCleanExit(o);
  EXPECT_THAT(o.lines, Contains("TIOCSTI 0: EPERM")) << o.Describe();
  EXPECT_THAT(o.lines, Contains("TIOCLINUX 0: EPERM")) << o.Describe();
  // Nothing was injected (the runtime may have made the shared descriptor blocking: poll).
  pollfd p{slave.get(), POLLIN, 0};
  EXPECT_EQ(poll(&p, 1, 200), 0);
}

TEST_F(HostileContainer, BombsEndByTheLimitsTheyAttack) {
  Limits limits = TestLimits();
  Outcome o = Run("memory_bomb", {}, limits);
  EXPECT_EQ(o.exit.limit, LimitHit::kMemory) << o.Describe();
  EXPECT_LE(o.exit.final_usage.memory_peak_bytes, limits.memory_bytes);

  limits = TestLimits();
  limits.cpu_seconds = 1;
  o = Run("cpu_spin", {}, limits);
  EXPECT_EQ(o.exit.limit, LimitHit::kCpuTime) << o.Describe();

  limits = TestLimits();
  limits.wall_time = absl::Seconds(2);
  const std::string marker = UniqueMarker("fork");
  o = Run("fork_bomb", {marker}, limits);
  EXPECT_LE(o.exit.final_usage.processes, limits.max_processes);
  EXPECT_TRUE(HostPidsWithArg(marker).empty());

  o = Run("thread_bomb", {}, TestLimits());
  EXPECT_THAT(o.lines, Not(Contains(StartsWith("ESCAPED"))));

  o = Run("disk_fill", {}, TestLimits());
  EXPECT_LE(o.exit.final_usage.work_bytes, TestLimits().storage_bytes);
  o = Run("inode_fill", {}, TestLimits());
  EXPECT_LE(o.exit.final_usage.work_inodes, TestLimits().storage_inodes);
  o = Run("fd_exhaust", {}, TestLimits());
  EXPECT_TRUE(o.exit.exited) << o.Describe();
  limits = TestLimits();
  limits.max_file_bytes = 1 << 20;
  o = Run("file_size", {}, limits);
  EXPECT_FALSE(o.exit.exited) << o.Describe();
  EXPECT_EQ(o.exit.signal, SIGXFSZ) << o.Describe();
  EXPECT_EQ(o.exit.limit, LimitHit::kFileSize) << o.Describe();
  EXPECT_THAT(o.lines, ElementsAre("write /work/big: started")) << o.Describe();
}

}  // namespace
}  // namespace vault::sandbox::hostile
