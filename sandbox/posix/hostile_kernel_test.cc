// hostile_test, kernel: terminals, ptrace, mounts, namespaces, setuid binaries, and the kernel's
// attack surface the seccomp filter refuses (modules, io_uring, userfaultfd, bpf, perf events,
// keyrings, file handles, the i386 and x32 ABIs). The fixture is in hostile_fixture.h.
//
// Thread safety: each test runs on one thread.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <termios.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "sandbox/posix/hostile_fixture.h"
#include "sandbox/sandbox.h"

namespace vault::sandbox::hostile {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::StartsWith;

// ---------------------------------------------------------------------------------------------
// Terminals, processes, mounts, namespaces, privileges.

TEST_F(Hostile, TtyInjection) {
  // The worst case the spec warns against: a terminal as stdin.
  Fd master(posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC));
  ASSERT_GE(master.get(), 0);
  ASSERT_EQ(grantpt(master.get()), 0);
  ASSERT_EQ(unlockpt(master.get()), 0);
  char name[128];
  ASSERT_EQ(ptsname_r(master.get(), name, sizeof name), 0);
  Fd slave(open(name, O_RDWR | O_NOCTTY | O_CLOEXEC | O_NONBLOCK));
  ASSERT_GE(slave.get(), 0);
  termios raw{};
  ASSERT_EQ(tcgetattr(slave.get(), &raw), 0);
  cfmakeraw(&raw);  // injected bytes would be readable at once, without a newline
  ASSERT_EQ(tcsetattr(slave.get(), TCSANOW, &raw), 0);

  RunOptions options;
  options.stdin_fd = slave.get();
  absl::StatusOr<Outcome> outcome = Run("tty_ioctl", options);
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  ExpectCleanExit(*outcome);
  EXPECT_THAT(
      outcome->lines,
      ElementsAre("open /dev/tty: ENOENT", "isatty 0: yes", "TIOCSTI 0: EPERM",
                  "TIOCSTI high bits 0: EPERM", "TIOCLINUX 0: EPERM", "isatty 1: no",
                  "TIOCSTI 1: EPERM", "TIOCSTI high bits 1: EPERM", "TIOCLINUX 1: EPERM",
                  "isatty 2: no", "TIOCSTI 2: EPERM", "TIOCSTI high bits 2: EPERM",
                  "TIOCLINUX 2: EPERM", "setsid: OK", StartsWith("TIOCSCTTY 0: "),
                  "TIOCSTI 0 after TIOCSCTTY: EPERM", "open /dev/tty after TIOCSCTTY: ENOENT"))
      << outcome->Describe();
  // Nothing was injected into the terminal's input.
  char buffer[64];
  EXPECT_LT(read(slave.get(), buffer, sizeof buffer), 0);
  EXPECT_EQ(errno, EAGAIN);
}

TEST_F(Hostile, Ptrace) {
  HostSleep victim;
  ASSERT_GT(victim.pid(), 0);
  const std::string host = absl::StrCat(victim.pid());
  RunOptions options;
  options.args = {host};
  absl::StatusOr<Outcome> outcome = Run("ptrace_host", options);
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  ExpectCleanExit(*outcome);
  EXPECT_THAT(outcome->lines,
              ElementsAre("PTRACE_ATTACH " + host + ": EPERM", "PTRACE_SEIZE " + host + ": EPERM",
                          "PTRACE_ATTACH 1: EPERM", "process_vm_readv " + host + ": EPERM",
                          "process_vm_readv 1: EPERM", "process_vm_writev " + host + ": EPERM",
                          "process_vm_writev 1: EPERM", "open /proc/" + host + "/mem: ENOENT",
                          "open /proc/1/mem: ENOENT", "pidfd_open " + host + ": ESRCH",
                          "kcmp " + host + ": EPERM", "PTRACE_ATTACH own child: EPERM",
                          "PTRACE_TRACEME: EPERM"))
      << outcome->Describe();
  EXPECT_TRUE(victim.Alive());
}

TEST_F(Hostile, MountFamily) {
  absl::StatusOr<Outcome> outcome = Run("mount_ops", {});
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  ExpectCleanExit(*outcome);
  EXPECT_THAT(
      outcome->lines,
      ElementsAre("mount tmpfs /work/mnt: EPERM", "mount bind / /work/mnt: EPERM",
                  "mount proc /work/mnt: EPERM", "mount remount rw /usr: EPERM",
                  "mount remount rw /: EPERM", "mount make-shared /: EPERM", "umount /proc: EPERM",
                  "umount2 /usr MNT_DETACH: EPERM", "umount2 /work MNT_DETACH: EPERM",
                  "pivot_root /work /work/old: EPERM", "fsopen tmpfs: EPERM", "fspick /usr: EPERM",
                  "open_tree /usr OPEN_TREE_CLONE: EPERM", "move_mount /usr /work/mnt: EPERM",
                  "mount_setattr /usr clear rdonly: EPERM"))
      << outcome->Describe();
}

TEST_F(Hostile, Namespaces) {
  absl::StatusOr<Outcome> outcome = Run("namespaces", {});
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  ExpectCleanExit(*outcome);
  std::vector<std::string> expected;
  const std::vector<std::string> flags = {"CLONE_NEWUSER",  "CLONE_NEWNS",  "CLONE_NEWPID",
                                          "CLONE_NEWNET",   "CLONE_NEWIPC", "CLONE_NEWUTS",
                                          "CLONE_NEWCGROUP"};
  for (const std::string& flag : flags) expected.push_back("unshare " + flag + ": EPERM");
  expected.push_back("unshare CLONE_NEWTIME: EPERM");
  expected.push_back("unshare CLONE_NEWUSER|CLONE_NEWNS: EPERM");
  for (const std::string& flag : flags) expected.push_back("clone " + flag + ": EPERM");
  // clone3 answers ENOSYS whatever its flags (they sit in memory a filter cannot read).
  expected.push_back("clone3 CLONE_NEWUSER: ENOSYS");
  expected.push_back("clone3 plain: ENOSYS");
  for (const char* ns : {"user", "mnt", "pid", "net", "ipc", "uts", "cgroup"}) {
    expected.push_back(absl::StrCat("setns ", ns, ": EPERM"));
  }
  expected.push_back("sethostname: EPERM");
  EXPECT_THAT(outcome->lines, ElementsAreArray(expected)) << outcome->Describe();
}

TEST_F(Hostile, SetuidBinaries) {
  absl::StatusOr<Outcome> outcome = Run("setuid_exec", {});
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  ExpectCleanExit(*outcome);
  std::vector<::testing::Matcher<const std::string&>> expected;
  for (const char* path :
       {"/usr/bin/su", "/usr/bin/passwd", "/usr/bin/mount", "/usr/bin/sudo", "/usr/bin/pkexec"}) {
    struct stat st;
    if (stat(path, &st) != 0) {
      expected.push_back(absl::StrCat(path, ": ENOENT"));
      continue;
    }
    expected.push_back(StartsWith(absl::StrCat(path, ": mode ")));
    // The probe library ran inside the program, so the loader did not see it privileged; and
    // the program ran as the sandbox's user.
    expected.push_back(absl::StrCat(path, ": probe euid=1000 uid=1000 secure=0"));
    expected.push_back(StartsWith(absl::StrCat(path, ": ")));
  }
  expected.push_back("mount via setuid: not mounted");
  EXPECT_THAT(outcome->lines, ElementsAreArray(expected)) << outcome->Describe();
}

// ---------------------------------------------------------------------------------------------
// Kernel attack surface: each refused by the seccomp filter.

TEST_F(Hostile, KernelModules) {
  absl::StatusOr<Outcome> outcome = Run("kernel_modules", {});
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  ExpectCleanExit(*outcome);
  EXPECT_THAT(
      outcome->lines,
      ElementsAre("init_module: EPERM", "finit_module: EPERM", "delete_module: EPERM",
                  "kexec_load: EPERM", "kexec_file_load: EPERM", "reboot CAD_OFF: EPERM",
                  "syslog READ_ALL: EPERM", "iopl 3: EPERM", "ioperm 0x80: EPERM",
                  "swapon /work/swap: EPERM", "swapoff /work/swap: EPERM", "acct /work/acct: EPERM",
                  "clock_settime REALTIME: EPERM", "vhangup: EPERM", "quotactl: EPERM"))
      << outcome->Describe();
}

TEST_F(Hostile, IoUring) {
  absl::StatusOr<Outcome> outcome = Run("io_uring", {});
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  ExpectCleanExit(*outcome);
  EXPECT_THAT(outcome->lines, ElementsAre("io_uring_setup: EPERM", "io_uring_enter: EPERM",
                                          "io_uring_register: EPERM"))
      << outcome->Describe();
}

TEST_F(Hostile, Userfaultfd) {
  absl::StatusOr<Outcome> outcome = Run("userfaultfd", {});
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  ExpectCleanExit(*outcome);
  EXPECT_THAT(outcome->lines,
              ElementsAre("userfaultfd: EPERM", "userfaultfd UFFD_USER_MODE_ONLY: EPERM",
                          "open /dev/userfaultfd: ENOENT"))
      << outcome->Describe();
}

TEST_F(Hostile, Bpf) {
  absl::StatusOr<Outcome> outcome = Run("bpf", {});
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  ExpectCleanExit(*outcome);
  EXPECT_THAT(outcome->lines,
              ElementsAre("bpf BPF_MAP_CREATE: EPERM", "bpf BPF_PROG_LOAD socket filter: EPERM"))
      << outcome->Describe();
}

TEST_F(Hostile, PerfEvents) {
  absl::StatusOr<Outcome> outcome = Run("perf_event", {});
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  ExpectCleanExit(*outcome);
  EXPECT_THAT(outcome->lines, ElementsAre("perf_event_open self cpu-clock: EPERM",
                                          "perf_event_open all processes cpu 0: EPERM",
                                          "perf_event_open self cycles: EPERM"))
      << outcome->Describe();
}

TEST_F(Hostile, Keyring) {
  absl::StatusOr<Outcome> outcome = Run("keyring", {});
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  ExpectCleanExit(*outcome);
  EXPECT_THAT(
      outcome->lines,
      ElementsAre("add_key: EPERM", "request_key: EPERM", "keyctl GET_KEYRING_ID user: EPERM",
                  "keyctl JOIN_SESSION_KEYRING: EPERM", "keyctl READ user keyring: EPERM"))
      << outcome->Describe();
}

TEST_F(Hostile, FileHandles) {
  absl::StatusOr<Outcome> outcome = Run("file_handles", {});
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  ExpectCleanExit(*outcome);
  EXPECT_THAT(outcome->lines, ElementsAre("name_to_handle_at /code/hello: EPERM",
                                          "open_by_handle_at forged root: EPERM"))
      << outcome->Describe();
}

#if defined(__x86_64__)
TEST_F(Hostile, I386SyscallAbi) {
  absl::StatusOr<Outcome> outcome = Run("i386_abi", {});
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  ExpectKilledBy(*outcome, SIGSYS, LimitHit::kNone);
  EXPECT_THAT(outcome->lines, ElementsAre("int80 getpid: trying")) << outcome->Describe();
}

TEST_F(Hostile, X32SyscallAbi) {
  absl::StatusOr<Outcome> outcome = Run("x32_abi", {});
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  ExpectKilledBy(*outcome, SIGSYS, LimitHit::kNone);
  EXPECT_THAT(outcome->lines, ElementsAre("x32 getpid: trying")) << outcome->Describe();
}
#endif

}  // namespace
}  // namespace vault::sandbox::hostile
