// Regressions of the posix sandbox's clone child and init, each once seen: the host's
// oom_score_adj changed by a spawn, the init's own, errno shared by CLONE_VM children, the
// kernel's error reaching the host. The lifecycle tests are in linux_sandbox_test.cc.
#include <errno.h>
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/fd_passing.h"
#include "common/testing/temp_dir.h"
#include "sandbox/posix/internal/child.h"
#include "sandbox/posix/landlock.h"
#include "sandbox/posix/linux_sandbox_testing.h"
#include "sandbox/posix/seccomp.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#endif

namespace vault::sandbox {
namespace {

using ::testing::HasSubstr;

std::string ReadOwnOomScoreAdj() {
  std::string text;
  std::ifstream("/proc/self/oom_score_adj") >> text;
  return text;
}

bool WriteOwnOomScoreAdj(const std::string& value) {
  std::ofstream file("/proc/self/oom_score_adj");
  file << value;
  file.flush();
  return file.good();
}

// Regression: the host wrote the sandbox's oom_score_adj (1000) while the clone child still
// shared its memory (CLONE_VM), and the kernel applies a new value to every process sharing
// the task's memory: vaultd itself became the OOM killer's first victim.
TEST(LinuxSandbox, SpawnsLeaveTheHostsOomScoreAdjAlone) {
  REQUIRE_SANDBOX();
  std::string before = ReadOwnOomScoreAdj();
  ASSERT_FALSE(before.empty());
  if (before == "1000") {
    // A spawn earlier in this process may have raised it: start from a value a spawn would
    // change (lowering needs CAP_SYS_RESOURCE).
    if (!WriteOwnOomScoreAdj("0")) GTEST_SKIP() << "this process's oom_score_adj is 1000";
    before = "0";
  }
  absl::StatusOr<std::unique_ptr<SandboxHandle>> running = Shared()->Spawn(Shell("sleep 100"));
  ASSERT_TRUE(running.ok()) << running.status();
  for (int i = 0; i < 3; ++i) {
    ExitInfo exit = RunToEnd(Shell("true"));
    EXPECT_EQ(exit.exit_code, 0);
  }
  EXPECT_EQ(ReadOwnOomScoreAdj(), before);
  ASSERT_TRUE((*running)->Kill().ok());
  EXPECT_EQ(ReadOwnOomScoreAdj(), before);
}

// Under memory pressure on the host, the sandbox goes first: its program, and what that
// program starts, have oom_score_adj 1000.
TEST(LinuxSandbox, ProgramAndItsChildrenHaveOomScoreAdj1000) {
  REQUIRE_SANDBOX();
  SandboxSpec cat;
  cat.program = "/bin/cat";
  cat.argv = {"cat", "/proc/self/oom_score_adj"};
  std::string out;
  ExitInfo exit = RunToEnd(cat, &out);
  EXPECT_EQ(exit.exit_code, 0) << out;
  EXPECT_EQ(out, "1000\n");
  // sh forks cat: the program's children inherit the value. And the sandbox cannot lower it
  // (the init, without CAP_SYS_RESOURCE, could not raise its floor, oom_score_adj_min; the
  // read-only /proc keeps the sandbox from writing).
  exit = RunToEnd(Shell("{ echo 0 > /proc/self/oom_score_adj; } 2>/dev/null || echo refused; "
                        "cat /proc/self/oom_score_adj; exit 3"),
                  &out);
  EXPECT_EQ(exit.exit_code, 3) << out;
  EXPECT_EQ(out, "refused\n1000\n");
}

// Runs vault-sandbox-init (the one this build made) on /bin/true outside any sandbox, with its
// status pipe at 4 and `oom_fd` (none when negative) at 7; returns its reports and sets *status.
std::string RunInit(int oom_fd, int* status) {
  const std::string init = VAULT_SANDBOX_INIT_PATH;
  if (access(init.c_str(), X_OK) != 0) return "no init";
  int report[2];
  if (pipe2(report, O_CLOEXEC) != 0) return "pipe2 failed";
  const char* argv[] = {init.c_str(), "/bin/true", "true", nullptr};
  const char* envp[] = {nullptr};
  pid_t pid = fork();
  if (pid == 0) {
    // Only async-signal-safe calls: this process has other threads. Both sources are moved
    // above 7 first, so that neither is already at its target (dup2 would keep it close-on-exec)
    // nor overwritten by the other's dup2.
    int report_fd = fcntl(report[1], F_DUPFD_CLOEXEC, 16);
    int oom_source = oom_fd >= 0 ? fcntl(oom_fd, F_DUPFD_CLOEXEC, 16) : -1;
    if (report_fd < 0 || (oom_fd >= 0 && oom_source < 0)) _exit(90);
    if (dup2(report_fd, 4) != 4) _exit(90);
    if (oom_source >= 0) {
      if (dup2(oom_source, 7) != 7) _exit(91);
    } else {
      close(7);
    }
    execve(argv[0], const_cast<char* const*>(argv), const_cast<char* const*>(envp));
    _exit(92);
  }
  close(report[1]);
  std::string text;
  char buf[256];
  ssize_t n;
  while ((n = read(report[0], buf, sizeof buf)) > 0) text.append(buf, static_cast<size_t>(n));
  close(report[0]);
  if (pid < 0 || waitpid(pid, status, 0) != pid) return "fork or wait failed";
  return text;
}

// The init writes the oom_score_adj before anything else, and fails closed when it cannot.
TEST(LinuxSandbox, InitWritesTheOomScoreAdjOrFailsClosed) {
  int oom[2];
  ASSERT_EQ(pipe2(oom, O_CLOEXEC), 0);  // stands for /proc/<pid>/oom_score_adj
  int status = 0;
  std::string reports = RunInit(oom[1], &status);
  close(oom[1]);
  char written[16] = {};
  ssize_t got = read(oom[0], written, sizeof written - 1);
  close(oom[0]);
  ASSERT_NE(reports, "no init") << "vault-sandbox-init is not at " << VAULT_SANDBOX_INIT_PATH;
  EXPECT_EQ(got, 4);
  EXPECT_STREQ(written, "1000");
  EXPECT_EQ(reports, "R\nE 0\n");
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;

  reports = RunInit(-1, &status);
  EXPECT_EQ(reports, absl::StrCat("X ", EBADF, "\n"));
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 127) << status;
}

// Regression: the clone child (CLONE_VM, no CLONE_SETTLS) shares errno with the supervisor
// thread and with every other child still setting up. When the child read errno after a libc
// call, a concurrent child's EINVAL (the capability bounding-set loop) or the supervisor's
// errno could replace its own: "mkdir (/newroot/etc): Invalid argument", "dropping
// capabilities: Operation not permitted", about once in 300-600 spawns with 4 spawners. The
// read-only directories add mkdirs of existing folders (EEXIST, tolerated) to every setup.
TEST(LinuxSandbox, ConcurrentSpawnsAllSucceed) {
  REQUIRE_SANDBOX();
  constexpr int kThreads = 4;
  constexpr int kPerThread = 200;
  absl::Mutex mu;
  std::vector<std::string> failures;
  int succeeded = 0;
  auto spawner = [&](int t) {
    for (int i = 0; i < kPerThread; ++i) {
      SandboxSpec spec;
      spec.program = "/bin/true";
      spec.argv = {"true"};
      spec.read_only_dirs = {"/usr/share", "/usr/lib"};
      spec.limits.wall_time = absl::Seconds(30);
      std::string failure;
      absl::StatusOr<std::unique_ptr<SandboxHandle>> handle = Shared()->Spawn(spec);
      if (!handle.ok()) {
        failure = absl::StrCat("spawn ", t, "/", i, ": ", handle.status().ToString());
      } else {
        absl::StatusOr<ExitInfo> exit = (*handle)->Wait(absl::Seconds(30));
        if (!exit.ok()) {
          failure = absl::StrCat("wait ", t, "/", i, ": ", exit.status().ToString());
        } else if (!exit->exited || exit->exit_code != 0) {
          failure = absl::StrCat("sandbox ", t, "/", i, ": ", DescribeExit(*exit));
        }
      }
      absl::MutexLock lock(&mu);
      if (failure.empty()) {
        ++succeeded;
      } else {
        failures.push_back(std::move(failure));
      }
    }
  };
  const absl::Time start = absl::Now();
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(spawner, t);
  for (std::thread& thread : threads) thread.join();
  const absl::Duration took = absl::Now() - start;
  for (const std::string& failure : failures) ADD_FAILURE() << failure;
  EXPECT_EQ(succeeded, kThreads * kPerThread);
  printf("%d concurrent spawns in %s\n", kThreads * kPerThread, absl::FormatDuration(took).c_str());
}

// The same shared errno, deterministically: a CLONE_VM child shares this thread's errno, and
// ChildMain's failure paths (here: a bad sync descriptor, EBADF) must leave it untouched.
TEST(LinuxSandbox, CloneChildLeavesTheSharedErrnoAlone) {
  constexpr size_t kStackSize = 256 * 1024;
  void* stack = mmap(nullptr, kStackSize, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  ASSERT_NE(stack, MAP_FAILED);
  internal::ChildArgs args;  // sync_fd -1: the first read (or report) fails with EBADF
  constexpr int kSentinel = 4242;
  errno = kSentinel;
  pid_t pid =
      clone(internal::ChildMain, static_cast<char*>(stack) + kStackSize, CLONE_VM | SIGCHLD, &args);
  int clone_errno = errno;
  int status = 0;
  pid_t waited = pid > 0 ? waitpid(pid, &status, 0) : -1;
  int after = errno;
#if defined(__SANITIZE_ADDRESS__)
  __asan_unpoison_memory_region(stack, kStackSize);
#endif
  munmap(stack, kStackSize);
  ASSERT_GT(pid, 0) << strerror(clone_errno);
  ASSERT_EQ(waited, pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 127) << status;
  EXPECT_EQ(after, kSentinel) << "the child set errno to " << after << " (" << strerror(after)
                              << ")";
}

constexpr int kErrnoSentinel = 4242;

struct CloneChildRun {
  pid_t pid = -1;
  int clone_errno = 0;
  int status = 0;
  ssize_t got = -1;  // bytes of `error` received
  internal::ChildError error;
  int errno_after = 0;  // this thread's errno afterwards (kErrnoSentinel before the clone)
};

// Clones ChildMain with CLONE_VM into a fresh user namespace with no id map, sends it 'G' (with
// `go_fd` unless negative) and reads the step it reports failing.
CloneChildRun RunCloneChildToItsFailure(int go_fd) {
  constexpr size_t kStackSize = 256 * 1024;
  CloneChildRun run;
  int sync[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sync) != 0) {
    ADD_FAILURE() << "socketpair: " << strerror(errno);
    return run;
  }
  void* stack = mmap(nullptr, kStackSize, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  if (stack == MAP_FAILED) {
    ADD_FAILURE() << "mmap: " << strerror(errno);
    close(sync[0]);
    close(sync[1]);
    return run;
  }
  internal::ChildArgs args;
  args.sync_fd = sync[1];
  errno = kErrnoSentinel;
  run.pid = clone(internal::ChildMain, static_cast<char*>(stack) + kStackSize,
                  CLONE_VM | CLONE_NEWUSER | SIGCHLD, &args);
  run.clone_errno = errno;
  if (run.pid > 0) {
    // The host's first go-ahead: 'G', with `go_fd` unless it is negative.
    EXPECT_TRUE(
        common::SendWithFds(sync[0], "G", go_fd >= 0 ? std::vector<int>{go_fd} : std::vector<int>{})
            .ok());
    run.got = recv(sync[0], &run.error, sizeof run.error, 0);
    EXPECT_EQ(waitpid(run.pid, &run.status, 0), run.pid);
  }
  run.errno_after = errno;
#if defined(__SANITIZE_ADDRESS__)
  __asan_unpoison_memory_region(stack, kStackSize);
#endif
  munmap(stack, kStackSize);
  close(sync[0]);
  close(sync[1]);
  return run;
}

// A failing step reaches the host with the kernel's own error: in a fresh user namespace with no
// id map, switching to uid/gid 1000 fails with EINVAL; errno here stays untouched.
TEST(LinuxSandbox, CloneChildReportsTheKernelsError) {
  int fd = open("/dev/null", O_WRONLY | O_CLOEXEC);  // stands for the oom_score_adj
  ASSERT_GE(fd, 0);
  CloneChildRun run = RunCloneChildToItsFailure(fd);
  close(fd);
  if (run.pid < 0) GTEST_SKIP() << "no user namespaces here: " << strerror(run.clone_errno);
  EXPECT_TRUE(WIFEXITED(run.status) && WEXITSTATUS(run.status) == 127) << run.status;
  ASSERT_EQ(run.got, static_cast<ssize_t>(sizeof run.error));
  EXPECT_EQ(run.error.step, internal::kStepIds) << internal::StepName(run.error.step);
  EXPECT_EQ(run.error.err, EINVAL) << strerror(run.error.err);
  EXPECT_EQ(run.errno_after, kErrnoSentinel);
}

// The init needs the oom_score_adj descriptor that comes with 'G'; without it the child stops
// there and says why.
TEST(LinuxSandbox, CloneChildRefusesAGoWithoutTheOomScoreAdjDescriptor) {
  CloneChildRun run = RunCloneChildToItsFailure(-1);
  if (run.pid < 0) GTEST_SKIP() << "no user namespaces here: " << strerror(run.clone_errno);
  EXPECT_TRUE(WIFEXITED(run.status) && WEXITSTATUS(run.status) == 127) << run.status;
  ASSERT_EQ(run.got, static_cast<ssize_t>(sizeof run.error));
  EXPECT_EQ(run.error.step, internal::kStepOomFd) << internal::StepName(run.error.step);
  EXPECT_EQ(run.error.err, EPROTO) << strerror(run.error.err);
  EXPECT_STREQ(internal::StepName(run.error.step), "receiving the oom_score_adj descriptor");
  EXPECT_EQ(run.errno_after, kErrnoSentinel);
}

// landlock::Apply runs in that child too; its failures come back in the return value only.
TEST(LinuxSandbox, LandlockApplyLeavesErrnoAlone) {
  int abi = landlock::ProbeAbi();
  if (abi <= 0) GTEST_SKIP() << "no Landlock";
  // The first rule is skipped (optional, missing), the second fails before anything is
  // restricted.
  landlock::Plan plan =
      landlock::MakePlan(abi, {{"/nonexistent-vault-test/a", landlock::kReadOnly, true},
                               {"/nonexistent-vault-test/b", landlock::kReadOnly, false}});
  int failed_rule = -1;
  constexpr int kSentinel = 4242;
  errno = kSentinel;
  int rc = landlock::Apply(plan, &failed_rule);
  int after = errno;
  EXPECT_EQ(rc, -ENOENT);
  EXPECT_EQ(failed_rule, 1);
  EXPECT_EQ(after, kSentinel);
}

// And InstallSeccompPrograms (in a forked child, in case the kernel took the program).
TEST(LinuxSandbox, InstallSeccompProgramsLeavesErrnoAlone) {
  SeccompPrograms programs;
  // One load and no return: the kernel refuses it (EINVAL; EACCES without privileges).
  programs.argument_denials = {sock_filter{BPF_LD | BPF_W | BPF_ABS, 0, 0, 0}};
  programs.allowlist = programs.argument_denials;
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    constexpr int kSentinel = 4242;
    errno = kSentinel;
    int rc = InstallSeccompPrograms(programs);
    _exit(rc < 0 && errno == kSentinel ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

}  // namespace
}  // namespace vault::sandbox
