#include "sandbox/posix/seccomp.h"

#include <errno.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/audit.h>
#include <linux/io_uring.h>
#include <linux/keyctl.h>
#include <linux/netlink.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>

#include "common/testing/temp_dir.h"

namespace vault::sandbox {
namespace {

// Every probe below runs in a forked child that first sets PR_SET_NO_NEW_PRIVS and installs
// both filters, and exits before the probe if either step fails. Each probe is also chosen to
// be harmless without a filter (invalid arguments, read-only queries, effects confined to the
// child), so a broken filter cannot hurt the machine running the tests.

constexpr int kExitNoNewPrivsFailed = 120;
constexpr int kExitInstallFailed = 121;

// The programs are built once per test process.
const absl::StatusOr<SeccompPrograms>& Programs() {
  static const auto* const programs = [] {
    auto start = std::chrono::steady_clock::now();
    auto* built = new absl::StatusOr<SeccompPrograms>(BuildSeccompPrograms());
    auto elapsed = std::chrono::steady_clock::now() - start;
    std::printf("BuildSeccompPrograms: %.1f ms",
                std::chrono::duration<double, std::milli>(elapsed).count());
    if (built->ok()) {
      std::printf("; allowlist %zu instructions, argument_denials %zu instructions",
                  (*built)->allowlist.size(), (*built)->argument_denials.size());
    }
    std::printf("\n");
    return built;
  }();
  return *programs;
}

// errno when a call returned -1, else 0.
int ErrnoOf(long rc) { return rc == -1 ? errno : 0; }

// For calls that return a descriptor: closes it, and reports 0 or errno.
int CloseIfOpened(long fd) {
  if (fd < 0) return errno;
  close(static_cast<int>(fd));
  return 0;
}

// Runs `probe` in a forked child under both filters. The result reads "ok" (the probe returned
// 0), an errno name ("EPERM"), "killed by SIGSYS", or "exit N" when the child exited (or exec'd
// a program that exited) without reporting.
std::string RunFiltered(const std::function<int()>& probe) {
  const absl::StatusOr<SeccompPrograms>& programs = Programs();
  if (!programs.ok()) return "build failed: " + programs.status().ToString();
  int report[2];
  if (pipe2(report, O_CLOEXEC) != 0) return std::string("pipe2: ") + strerror(errno);
  pid_t pid = fork();
  if (pid < 0) return std::string("fork: ") + strerror(errno);
  if (pid == 0) {
    close(report[0]);
    alarm(30);  // A hung probe fails its test instead of the whole run.
    rlimit no_core{0, 0};
    setrlimit(RLIMIT_CORE, &no_core);  // SIGSYS would otherwise dump core.
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) _exit(kExitNoNewPrivsFailed);
    if (InstallSeccompPrograms(*programs) != 0) _exit(kExitInstallFailed);
    int result = probe();
    (void)!write(report[1], &result, sizeof(result));
    _exit(0);
  }
  close(report[1]);
  int result = 0;
  ssize_t n;
  do {
    n = read(report[0], &result, sizeof(result));
  } while (n < 0 && errno == EINTR);
  close(report[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFSIGNALED(status)) return std::string("killed by SIG") + sigabbrev_np(WTERMSIG(status));
  if (WEXITSTATUS(status) == kExitInstallFailed) return "install failed";
  if (n != static_cast<ssize_t>(sizeof(result)) || WEXITSTATUS(status) != 0) {
    return "exit " + std::to_string(WEXITSTATUS(status));
  }
  if (result == 0) return "ok";
  const char* name = strerrorname_np(result);
  return name != nullptr ? name : "errno " + std::to_string(result);
}

TEST(SeccompPrograms, BothCheckTheArchitectureFirst) {
  ASSERT_TRUE(Programs().ok()) << Programs().status();
  for (const std::vector<sock_filter>* program :
       {&Programs()->allowlist, &Programs()->argument_denials}) {
    ASSERT_GE(program->size(), 2u);
    EXPECT_LE(program->size(), static_cast<size_t>(BPF_MAXINSNS));
    EXPECT_EQ((*program)[0].code, BPF_LD | BPF_W | BPF_ABS);
    EXPECT_EQ((*program)[0].k, offsetof(seccomp_data, arch));
    EXPECT_EQ((*program)[1].code, BPF_JMP | BPF_JEQ | BPF_K);
    EXPECT_EQ((*program)[1].k, AUDIT_ARCH_X86_64);
  }
}

TEST(SeccompPrograms, BuildIsRepeatable) {
  ASSERT_TRUE(Programs().ok()) << Programs().status();
  absl::StatusOr<SeccompPrograms> again = BuildSeccompPrograms();
  ASSERT_TRUE(again.ok()) << again.status();
  ASSERT_EQ(again->allowlist.size(), Programs()->allowlist.size());
  EXPECT_EQ(memcmp(again->allowlist.data(), Programs()->allowlist.data(),
                   again->allowlist.size() * sizeof(sock_filter)),
            0);
}

TEST(InstallSeccompPrograms, RefusesEmptyPrograms) {
  // In a child all the same: if the check were wrong, nothing is installed in the test runner.
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) _exit(kExitNoNewPrivsFailed);
    _exit(InstallSeccompPrograms(SeccompPrograms{}) == -EINVAL ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

TEST(Seccomp, InstallsAndAllowsGetpid) {
  EXPECT_EQ(RunFiltered([] { return getpid() > 0 ? 0 : EPROTO; }), "ok");
}

TEST(Seccomp, AllowsReadingProcSelfStatus) {
  EXPECT_EQ(RunFiltered([] {
              int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
              if (fd < 0) return errno;
              char buf[4096];
              ssize_t n = read(fd, buf, sizeof(buf));
              int err = n < 0 ? errno : 0;
              close(fd);
              if (err != 0) return err;
              // The filters are visible to the process itself.
              return std::string(buf, static_cast<size_t>(n)).find("Seccomp:\t2") !=
                             std::string::npos
                         ? 0
                         : EPROTO;
            }),
            "ok");
}

TEST(Seccomp, AllowsUnixStreamAndSeqpacketSocketsOnly) {
  EXPECT_EQ(
      RunFiltered([] { return CloseIfOpened(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)); }),
      "ok");
  EXPECT_EQ(RunFiltered([] { return CloseIfOpened(socket(AF_UNIX, SOCK_SEQPACKET, 0)); }), "ok");
  EXPECT_EQ(RunFiltered([] {
              int fds[2];
              if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) return errno;
              close(fds[0]);
              close(fds[1]);
              return 0;
            }),
            "ok");
  // Datagram sockets could sendmsg to any named host socket (syslog, journald).
  EXPECT_EQ(RunFiltered([] { return CloseIfOpened(socket(AF_UNIX, SOCK_DGRAM, 0)); }), "EPERM");
  EXPECT_EQ(RunFiltered([] {
              int fds[2];
              return ErrnoOf(socketpair(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK, 0, fds));
            }),
            "EPERM");
}

TEST(Seccomp, RefusesConnectAndAddressedSendto) {
  EXPECT_EQ(RunFiltered([] {
              sockaddr_un addr{};
              addr.sun_family = AF_UNIX;
              std::strcpy(addr.sun_path, "/nonexistent/socket");
              int fd = socket(AF_UNIX, SOCK_STREAM, 0);
              return ErrnoOf(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr));
            }),
            "EPERM");
  EXPECT_EQ(
      RunFiltered([] {
        sockaddr_un addr{};
        addr.sun_family = AF_UNIX;
        std::strcpy(addr.sun_path, "/nonexistent/socket");
        int fds[2];
        if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) return errno;
        return ErrnoOf(sendto(fds[0], "x", 1, 0, reinterpret_cast<sockaddr*>(&addr), sizeof addr));
      }),
      "EPERM");
  EXPECT_EQ(RunFiltered([] {
              int fds[2];
              if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) return errno;
              return sendto(fds[0], "x", 1, 0, nullptr, 0) == 1 ? 0 : errno;
            }),
            "ok");
}

// Other domains answer EPERM through an explicit rule rather than the default ENOSYS.
TEST(Seccomp, RefusesOtherSocketDomainsWithEperm) {
  struct Case {
    int domain;
    int type;
    int protocol;
  };
  for (Case c : {Case{AF_INET, SOCK_STREAM, 0}, Case{AF_INET6, SOCK_DGRAM, 0},
                 Case{AF_NETLINK, SOCK_RAW, NETLINK_ROUTE}, Case{AF_PACKET, SOCK_RAW, 0},
                 Case{AF_VSOCK, SOCK_STREAM, 0}}) {
    EXPECT_EQ(RunFiltered([c] { return CloseIfOpened(socket(c.domain, c.type, c.protocol)); }),
              "EPERM")
        << "domain " << c.domain;
  }
  EXPECT_EQ(RunFiltered([] {
              int fds[2];
              return ErrnoOf(socketpair(AF_INET, SOCK_STREAM, 0, fds));
            }),
            "EPERM");
  // High garbage in the domain register does not turn an AF_UNIX check into a pass-through.
  EXPECT_EQ(RunFiltered([] {
              return CloseIfOpened(syscall(SYS_socket, (1UL << 32) | AF_INET, SOCK_STREAM, 0));
            }),
            "EPERM");
}

TEST(Seccomp, Clone3AnswersEnosys) {
  // A null argument block: without the filter the kernel answers EINVAL or EFAULT.
  EXPECT_EQ(RunFiltered([] { return ErrnoOf(syscall(SYS_clone3, nullptr, 0)); }), "ENOSYS");
}

TEST(Seccomp, RefusesCloneWithNamespaceFlags) {
  for (unsigned long flag : {CLONE_NEWUSER, CLONE_NEWNS, CLONE_NEWNET, CLONE_NEWPID, CLONE_NEWIPC,
                             CLONE_NEWUTS, CLONE_NEWCGROUP}) {
    EXPECT_EQ(RunFiltered([flag] {
                long pid = syscall(SYS_clone, flag | SIGCHLD, nullptr, nullptr, nullptr, nullptr);
                if (pid == 0) _exit(0);  // Only without the filter: leave at once.
                if (pid < 0) return errno;
                waitpid(static_cast<pid_t>(pid), nullptr, 0);
                return 0;
              }),
              "EPERM")
        << "flag " << std::hex << flag;
  }
}

TEST(Seccomp, AllowsForkAndThreads) {
  EXPECT_EQ(RunFiltered([] {
              pid_t pid = fork();
              if (pid == 0) _exit(7);
              if (pid < 0) return errno;
              int status = 0;
              if (waitpid(pid, &status, 0) != pid) return errno;
              return WIFEXITED(status) && WEXITSTATUS(status) == 7 ? 0 : EPROTO;
            }),
            "ok");
  // glibc tries clone3 first and falls back to clone on ENOSYS.
  EXPECT_EQ(RunFiltered([] {
              pthread_t thread;
              int err = pthread_create(
                  &thread, nullptr, [](void*) -> void* { return nullptr; }, nullptr);
              if (err != 0) return err;
              return pthread_join(thread, nullptr);
            }),
            "ok");
}

TEST(Seccomp, RefusesDangerousCallsWithEperm) {
  EXPECT_EQ(RunFiltered([] { return ErrnoOf(ptrace(PTRACE_TRACEME, 0, nullptr, nullptr)); }),
            "EPERM");
  EXPECT_EQ(RunFiltered([] { return ErrnoOf(unshare(CLONE_NEWUTS)); }), "EPERM");
  EXPECT_EQ(RunFiltered([] {
              return ErrnoOf(mount("none", "/nonexistent/vault-seccomp-test", "tmpfs", 0, nullptr));
            }),
            "EPERM");
  EXPECT_EQ(RunFiltered([] { return ErrnoOf(syscall(SYS_bpf, -1, nullptr, 0)); }), "EPERM");
  EXPECT_EQ(
      RunFiltered([] {
        return ErrnoOf(syscall(SYS_keyctl, KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, 0));
      }),
      "EPERM");
  EXPECT_EQ(RunFiltered([] { return CloseIfOpened(syscall(SYS_userfaultfd, O_CLOEXEC)); }),
            "EPERM");
  EXPECT_EQ(
      RunFiltered([] { return ErrnoOf(syscall(SYS_perf_event_open, nullptr, 0, -1, -1, 0)); }),
      "EPERM");
  EXPECT_EQ(RunFiltered([] {
              io_uring_params params{};
              return CloseIfOpened(syscall(SYS_io_uring_setup, 1, &params));
            }),
            "EPERM");
  EXPECT_EQ(RunFiltered([] {
              return ErrnoOf(syscall(SYS_process_vm_readv, getpid(), nullptr, 0, nullptr, 0, 0));
            }),
            "EPERM");
}

TEST(Seccomp, RefusesTerminalInjectionIoctlsOnTheirLow32Bits) {
  for (unsigned long command : {static_cast<unsigned long>(TIOCSTI), 0xffffffff00005412UL,
                                static_cast<unsigned long>(TIOCLINUX)}) {
    EXPECT_EQ(RunFiltered([command] {
                int fds[2];
                if (pipe2(fds, O_CLOEXEC) != 0) return errno;
                char c = 'x';
                // Without the filter a pipe answers ENOTTY.
                return ErrnoOf(ioctl(fds[0], command, &c));
              }),
              "EPERM")
        << "command " << std::hex << command;
  }
}

TEST(Seccomp, AllowsOrdinaryIoctls) {
  EXPECT_EQ(RunFiltered([] {
              int fds[2];
              if (pipe2(fds, O_CLOEXEC) != 0) return errno;
              int pending = -1;
              if (ioctl(fds[0], FIONREAD, &pending) != 0) return errno;
              return pending == 0 ? 0 : EPROTO;
            }),
            "ok");
}

TEST(Seccomp, AllowsFifosAndFilesButNotDeviceNodes) {
  common::testing::TempDir tmp("seccomp_test");
  const std::string fifo = tmp.Path("fifo");
  const std::string file = tmp.Path("file");
  const std::string file2 = tmp.Path("file2");
  const std::string device = tmp.Path("null");
  EXPECT_EQ(RunFiltered([&] { return ErrnoOf(mkfifo(fifo.c_str(), 0600)); }), "ok");
  EXPECT_EQ(RunFiltered([&] { return ErrnoOf(mknod(file.c_str(), S_IFREG | 0600, 0)); }), "ok");
  // The legacy mknod system call checks its mode in a different argument slot.
  EXPECT_EQ(
      RunFiltered([&] { return ErrnoOf(syscall(SYS_mknod, file2.c_str(), S_IFREG | 0600, 0)); }),
      "ok");
  EXPECT_EQ(
      RunFiltered([&] { return ErrnoOf(mknod(device.c_str(), S_IFCHR | 0600, makedev(1, 3))); }),
      "EPERM");
  EXPECT_EQ(RunFiltered([&] {
              return ErrnoOf(syscall(SYS_mknod, device.c_str(), S_IFBLK | 0600, makedev(7, 0)));
            }),
            "EPERM");
  struct stat st;
  EXPECT_EQ(stat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
  EXPECT_NE(stat(device.c_str(), &st), 0);
}

TEST(Seccomp, AllowsOnlyHarmlessPersonalities) {
  EXPECT_EQ(RunFiltered([] { return ErrnoOf(personality(0xffffffff)); }), "ok");
  EXPECT_EQ(RunFiltered([] { return ErrnoOf(personality(PER_LINUX)); }), "ok");
  EXPECT_EQ(RunFiltered([] { return ErrnoOf(personality(ADDR_NO_RANDOMIZE)); }), "ENOSYS");
}

TEST(Seccomp, UnknownSystemCallsAnswerEnosys) {
  EXPECT_EQ(RunFiltered([] { return ErrnoOf(syscall(1000)); }), "ENOSYS");
  // Numbered after libseccomp 2.5.4's table (statmount).
  EXPECT_EQ(RunFiltered([] { return ErrnoOf(syscall(457, nullptr, nullptr, 0, 0)); }), "ENOSYS");
}

TEST(Seccomp, KillsI386SystemCalls) {
  EXPECT_EQ(
      RunFiltered([] {
        long result;
        // getpid (20) through the i386 entry point.
        asm volatile("int $0x80" : "=a"(result) : "a"(20L) : "r8", "r9", "r10", "r11", "memory");
        return result > 0 ? 0 : static_cast<int>(-result);
      }),
      "killed by SIGSYS");
}

TEST(Seccomp, KillsX32SystemCalls) {
  constexpr long kX32SyscallBit = 0x40000000;
  EXPECT_EQ(RunFiltered([] { return ErrnoOf(syscall(kX32SyscallBit | SYS_getpid)); }),
            "killed by SIGSYS");
}

// Exec'd programs exit without reporting: "exit 0" is success.
int Exec(const char* const argv[]) {
  int devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
  if (devnull < 0 || dup2(devnull, STDOUT_FILENO) < 0) return errno;
  const char* const envp[] = {"PATH=/usr/bin:/bin", "LANG=C.UTF-8", nullptr};
  execve(argv[0], const_cast<char* const*>(argv), const_cast<char* const*>(envp));
  return errno;
}

TEST(Seccomp, RunsPython) {
  EXPECT_EQ(RunFiltered([] {
              const char* const argv[] = {"/usr/bin/python3", "-c", "print(1)", nullptr};
              return Exec(argv);
            }),
            "exit 0");
}

TEST(Seccomp, RunsShellAndCoreutils) {
  EXPECT_EQ(RunFiltered([] {
              const char* const argv[] = {"/bin/sh", "-c", "ls / >/dev/null", nullptr};
              return Exec(argv);
            }),
            "exit 0");
}

}  // namespace
}  // namespace vault::sandbox
