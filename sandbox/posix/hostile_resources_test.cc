// hostile_test, resources: the limits as given, sandbox instances side by side (host ids,
// cgroups), and exhaustion: descriptors, inotify, storage, file size, CPU, memory, threads,
// processes, a daemon outliving its sandbox, and last, kill -1. The fixture is in
// hostile_fixture.h.
//
// Thread safety: each test runs on one thread (one test starts a second one).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/inotify.h>
#include <sys/types.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "sandbox/posix/hostile_fixture.h"
#include "sandbox/posix/linux_sandbox.h"
#include "sandbox/sandbox.h"

namespace vault::sandbox::hostile {
namespace {

using ::testing::AllOf;
using ::testing::AnyOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// ---------------------------------------------------------------------------------------------
// Limits as given.

TEST_F(Hostile, Rlimits) {
  absl::StatusOr<Outcome> outcome = Run("rlimits", {});
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  ExpectCleanExit(*outcome);
  const Limits limits = TestLimits();
  EXPECT_THAT(
      outcome->lines,
      ElementsAre("CORE 0 0", absl::StrCat("CPU ", limits.cpu_seconds, " ", limits.cpu_seconds + 1),
                  absl::StrCat("FSIZE ", limits.max_file_bytes, " ", limits.max_file_bytes),
                  absl::StrCat("NOFILE ", limits.max_open_files, " ", limits.max_open_files),
                  absl::StrCat("NPROC ", limits.max_processes, " ", limits.max_processes),
                  "raise CORE: EPERM", "raise CPU: EPERM", "raise FSIZE: EPERM",
                  "raise NOFILE: EPERM", "raise NPROC: EPERM"))
      << outcome->Describe();
}

// ---------------------------------------------------------------------------------------------
// Sandbox instances side by side: host ids, cgroups.

// Two sandboxes must never share a host uid: processes of one host uid share per-user kernel
// accounting (pipe buffers, inotify instances, RLIMIT_NPROC counts in the initial namespace).
//
// Host ids are claimed machine-wide (sandbox/host_ids.h: a flock per id), so two instances, in one
// process or in two (two vault nodes on one machine, tests run by ctest -j), never give their
// sandboxes the same host uid.
TEST_F(Hostile, DistinctHostUidsAcrossSandboxInstances) {
  if (geteuid() != 0) GTEST_SKIP() << "unprivileged, every sandbox runs as the caller's uid";
  // Two fresh instances, as two vault processes would have.
  absl::StatusOr<std::unique_ptr<LinuxSandbox>> first = LinuxSandbox::Create({});
  ASSERT_TRUE(first.ok()) << first.status();
  absl::StatusOr<std::unique_ptr<LinuxSandbox>> second = LinuxSandbox::Create({});
  ASSERT_TRUE(second.ok()) << second.status();
  Sandbox* sandboxes[2] = {first->get(), second->get()};
  std::unique_ptr<Program> keepers[2];
  uint32_t uids[2] = {0, 0};
  for (int i = 0; i < 2; ++i) {
    const std::string marker = UniqueMarker("uid");
    RunOptions options;
    options.pipe_stdin = true;
    options.args = {marker};
    // Distinct names: each instance numbers its sandboxes from 0, and the cgroup name is
    // "<name>-<pid>-<number>", so equal names would collide (ALREADY_EXISTS).
    options.name = absl::StrCat("hostile-uid-", i);
    absl::StatusOr<std::unique_ptr<Program>> keeper = Start("secret_keeper", options, sandboxes[i]);
    ASSERT_TRUE(keeper.ok()) << keeper.status();
    keepers[i] = std::move(*keeper);
    ASSERT_TRUE(keepers[i]->WriteStdin("not a secret\n"));
    absl::StatusOr<std::string> ready = keepers[i]->ReadLine(absl::Seconds(5));
    ASSERT_TRUE(ready.ok()) << ready.status();
    std::vector<pid_t> pids = HostPidsWithArg(marker);
    ASSERT_FALSE(pids.empty());
    std::vector<uint32_t> ids = HostUids(pids.front());
    ASSERT_FALSE(ids.empty());
    uids[i] = ids.front();
  }
  EXPECT_NE(uids[0], uids[1]) << "two running sandboxes share host uid " << uids[0];
  for (std::unique_ptr<Program>& keeper : keepers) {
    keeper->CloseStdin();
    absl::StatusOr<ExitInfo> exit = keeper->Finish(absl::Seconds(10));
    ASSERT_TRUE(exit.ok()) << exit.status();
  }
}

// SANDBOX BUG (reported, not fixed here): LinuxSandbox::Create calls
// CgroupManager::RemoveStale, which removes every cgroup without tasks under the shared folder
// ("<own cgroup>/vault-sandbox/") -- including one that another LinuxSandbox (in this process
// or another: ctest -j runs each test in its own process) has just created for a Spawn and not
// yet moved its child into. That Spawn then fails with NOT_FOUND ("write ... cgroup.procs: No
// such file or directory"). It fails closed (nothing runs unfenced), but concurrent vault
// processes and parallel test runs fail at random. This test fails until RemoveStale spares
// cgroups that are not stale.
TEST_F(Hostile, CreateLeavesOtherSandboxesCgroupsAlone) {
  std::atomic<bool> stop{false};
  std::atomic<int> created{0};
  std::thread creator([&] {
    while (!stop.load()) {
      absl::StatusOr<std::unique_ptr<LinuxSandbox>> other = LinuxSandbox::Create({});
      if (other.ok()) created.fetch_add(1);
    }
  });
  int failures = 0;
  std::string first_failure;
  for (int i = 0; i < 40; ++i) {
    absl::StatusOr<Outcome> outcome = Run("hello", {});
    if (!outcome.ok()) {
      if (++failures == 1) first_failure = outcome.status().ToString();
    } else {
      EXPECT_EQ(outcome->output, "hello\n");
    }
  }
  stop.store(true);
  creator.join();
  EXPECT_GT(created.load(), 0);
  EXPECT_EQ(failures, 0) << "first failure: " << first_failure;
}

// ---------------------------------------------------------------------------------------------
// Resource exhaustion: descriptors, storage, file size, CPU, memory, threads, processes.

TEST_F(Hostile, FdExhaustion) {
  absl::StatusOr<Outcome> outcome = Run("fd_exhaust", {});
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  ExpectCleanExit(*outcome);
  // fds 0, 1, 2 are open; RLIMIT_NOFILE is the limit.
  const int expected = static_cast<int>(TestLimits().max_open_files) - 3;
  EXPECT_THAT(outcome->lines, ElementsAre(absl::StrCat("open /dev/null: EMFILE after ", expected),
                                          "setrlimit NOFILE 1048576: EPERM", "dup2 0 65535: EBADF"))
      << outcome->Describe();
}

// Per-user kernel counts (inotify instances, message queues, pending signals) are charged up
// the chain of user namespaces to each namespace's owner. The sandbox's namespace is owned by
// its own host id, so an agent that takes every inotify instance it may have leaves root's
// quota whole.
TEST_F(Hostile, InotifyHogLeavesTheHostsQuota) {
  RunOptions options;
  options.pipe_stdin = true;
  options.limits.max_open_files = 4096;  // the kernel's instance count must be what stops it
  absl::StatusOr<std::unique_ptr<Program>> program = Start("inotify_hog", options);
  ASSERT_TRUE(program.ok()) << program.status();
  absl::StatusOr<std::string> line = (*program)->ReadLine(absl::Seconds(5));
  ASSERT_TRUE(line.ok()) << line.status();
  EXPECT_THAT(*line, StartsWith("inotify_init1: EMFILE after "));
  // While the agent holds them, this (root) process can still create instances, up to the
  // host's own limit.
  std::vector<Fd> mine;
  for (int i = 0; i < 8; ++i) {
    Fd fd(inotify_init1(IN_CLOEXEC));
    EXPECT_GE(fd.get(), 0) << "host inotify_init1: " << strerror(errno);
    mine.push_back(std::move(fd));
  }
  (*program)->CloseStdin();
}

TEST_F(Hostile, DiskFill) {
  RunOptions options;
  options.limits.storage_bytes = 4ull << 20;
  // RLIMIT_FSIZE above the quota and the fallocate: the quota, not SIGXFSZ, must stop them.
  options.limits.max_file_bytes = 64ull << 20;
  absl::StatusOr<Outcome> outcome = Run("disk_fill", options);
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  ExpectCleanExit(*outcome);
  ASSERT_EQ(outcome->lines.size(), 4u) << outcome->Describe();
  std::optional<int64_t> kib = NumberAfter(outcome->lines[0], "write /work/fill: ENOSPC after ");
  ASSERT_TRUE(kib.has_value()) << outcome->Describe();
  EXPECT_LE(*kib, 4 * 1024);
  EXPECT_GE(*kib, 3 * 1024);  // the quota is the storage limit, not something smaller
  // /work and /tmp share the one quota.
  EXPECT_EQ(outcome->lines[1], "write /tmp/fill: ENOSPC after 0 KiB");
  EXPECT_EQ(outcome->lines[2], "fallocate /tmp/huge 32 MiB: ENOSPC");
  // Space freed is usable again.
  EXPECT_EQ(outcome->lines[3], "write /tmp/after: OK");
}

TEST_F(Hostile, InodeFill) {
  RunOptions options;
  options.limits.storage_inodes = 256;
  absl::StatusOr<Outcome> outcome = Run("inode_fill", options);
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  ExpectCleanExit(*outcome);
  // The tmpfs root, /work, /tmp and /work/many take four of the 256 inodes.
  EXPECT_THAT(outcome->lines, ElementsAre("create: ENOSPC after 252", "mkdir: ENOSPC",
                                          "symlink: ENOSPC", "mkfifo: ENOSPC"))
      << outcome->Describe();
}

TEST_F(Hostile, FileSizeSignal) {
  RunOptions options;
  options.limits.max_file_bytes = 1ull << 20;
  absl::StatusOr<Outcome> outcome = Run("file_size", options);
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  ExpectKilledBy(*outcome, SIGXFSZ, LimitHit::kFileSize);
  EXPECT_THAT(outcome->lines, ElementsAre("write /work/big: started")) << outcome->Describe();
}

TEST_F(Hostile, FileSizeIgnoringSignal) {
  RunOptions options;
  options.limits.max_file_bytes = 1ull << 20;
  options.args = {"ignore"};
  absl::StatusOr<Outcome> outcome = Run("file_size", options);
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  ExpectCleanExit(*outcome);
  EXPECT_THAT(outcome->lines,
              ElementsAre("write /work/big: started", "write /work/big: EFBIG after 1024 KiB"))
      << outcome->Describe();
}

TEST_F(Hostile, CpuSpin) {
  RunOptions options;
  options.limits.cpu_seconds = 2;
  absl::StatusOr<Outcome> outcome = Run("cpu_spin", options);
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  // RLIMIT_CPU's SIGXCPU comes at the first scheduler tick past 2 s; the supervisor, which reads
  // the cgroup's exact total every 100 ms near the limit, SIGKILLs when it sees more than 2 s.
  // Nearly always SIGXCPU wins, but a poll that lands within that one tick wins instead.
  EXPECT_FALSE(outcome->exit.exited) << outcome->Describe();
  EXPECT_THAT(outcome->exit.signal, AnyOf(SIGXCPU, SIGKILL)) << outcome->Describe();
  EXPECT_EQ(outcome->exit.limit, LimitHit::kCpuTime) << outcome->Describe();
  EXPECT_THAT(outcome->lines, ElementsAre("spin: started")) << outcome->Describe();
  EXPECT_LT(outcome->exit.final_usage.cpu_time, absl::Seconds(4));
}

TEST_F(Hostile, CpuSpinIgnoringSigxcpu) {
  RunOptions options;
  options.limits.cpu_seconds = 2;
  options.args = {"ignore"};
  absl::StatusOr<Outcome> outcome = Run("cpu_spin", options);
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  ExpectKilledBy(*outcome, SIGKILL, LimitHit::kCpuTime);
  EXPECT_THAT(outcome->lines, ElementsAre("spin: started")) << outcome->Describe();
  EXPECT_LT(outcome->exit.final_usage.cpu_time, absl::Seconds(5));
}

TEST_F(Hostile, CpuSpinManyProcesses) {
  // Four processes at 0.5 s each stay under RLIMIT_CPU (2 s per process); only the sandbox's
  // total CPU limit (cgroup) can stop them. cpu_percent 100 shares one core between them.
  const std::string marker = UniqueMarker("spin");
  RunOptions options;
  options.limits.cpu_seconds = 2;
  options.args = {"4", marker};
  absl::StatusOr<Outcome> outcome = Run("cpu_spin_many", options);
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  ExpectKilledBy(*outcome, SIGKILL, LimitHit::kCpuTime);
  EXPECT_THAT(outcome->lines, ElementsAre("spin: 4 children")) << outcome->Describe();
  EXPECT_GE(outcome->exit.final_usage.cpu_time, absl::Seconds(2));
  EXPECT_LT(outcome->exit.wall_time, absl::Seconds(6));
  ExpectNoLeftovers(marker);
}

TEST_F(Hostile, MemoryBomb) {
  RunOptions options;
  options.limits.memory_bytes = 64ull << 20;
  absl::StatusOr<Outcome> outcome = Run("memory_bomb", options);
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  ExpectKilledBy(*outcome, SIGKILL, LimitHit::kMemory);
  EXPECT_THAT(outcome->lines, ElementsAre("memory bomb: started")) << outcome->Describe();
  EXPECT_LE(outcome->exit.final_usage.memory_peak_bytes, 64ull << 20);
}

TEST_F(Hostile, ThreadBomb) {
  absl::StatusOr<Outcome> outcome = Run("thread_bomb", {});
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  ExpectCleanExit(*outcome);
  ASSERT_EQ(outcome->lines.size(), 1u) << outcome->Describe();
  std::optional<int64_t> threads = NumberAfter(outcome->lines[0], "pthread_create: EAGAIN after ");
  ASSERT_TRUE(threads.has_value()) << outcome->Describe();
  // pids.max counts threads too: the init and the program's main thread take two.
  EXPECT_EQ(*threads, TestLimits().max_processes - 2);
}

TEST_F(Hostile, ForkBomb) {
  const std::string marker = UniqueMarker("forkbomb");
  RunOptions options;
  options.args = {marker};
  absl::StatusOr<Outcome> outcome = Run("fork_bomb", options);
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  ExpectCleanExit(*outcome);
  // The init and the program count against max_processes.
  const int children = static_cast<int>(TestLimits().max_processes) - 2;
  EXPECT_THAT(outcome->lines, ElementsAre(absl::StrCat("fork: EAGAIN after ", children),
                                          absl::StrCat("reaped ", children)))
      << outcome->Describe();
  ExpectNoLeftovers(marker);
}

TEST_F(Hostile, ForkStorm) {
  const std::string marker = UniqueMarker("storm");
  RunOptions options;
  options.limits.wall_time = absl::Seconds(3);
  // 32 forking processes peak near 64 MiB of cgroup memory (kernel stacks, page tables): with
  // the suite's 64 MiB the OOM killer sometimes ends the storm first. Room enough that the
  // wall-time limit is what ends it, every time.
  options.limits.memory_bytes = 256ull << 20;
  options.args = {marker};
  absl::StatusOr<Outcome> outcome = Run("fork_storm", options);
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  ExpectKilledBy(*outcome, SIGKILL, LimitHit::kWallTime);
  EXPECT_THAT(outcome->lines, ElementsAre("storm: started")) << outcome->Describe();
  EXPECT_LT(outcome->exit.wall_time, absl::Seconds(6));
  ExpectNoLeftovers(marker);
  // The host can still start processes.
  EXPECT_EQ(RunOnHost("/bin/true"), 0);
}

TEST_F(Hostile, OutliveSandbox) {
  const std::string marker = UniqueMarker("daemon");
  RunOptions options;
  options.pipe_stdin = true;
  options.args = {marker};
  absl::StatusOr<std::unique_ptr<Program>> program = Start("double_fork", options);
  ASSERT_TRUE(program.ok()) << program.status();
  absl::StatusOr<std::string> line = (*program)->ReadLine(absl::Seconds(5));
  ASSERT_TRUE(line.ok()) << line.status();
  EXPECT_THAT(*line, AllOf(StartsWith("grandchild "), HasSubstr(" running")));
  // The host sees the sandbox's processes (init, program, grandchild) under their marker, each
  // with an unprivileged host uid: the scan below is able to find a survivor.
  std::vector<pid_t> running = HostPidsWithArg(marker);
  EXPECT_GE(running.size(), 3u);
  for (pid_t pid : running) {
    for (uint32_t uid : HostUids(pid)) EXPECT_NE(uid, 0u) << "pid " << pid;
  }
  ASSERT_TRUE((*program)->WriteStdin("go\n"));
  absl::StatusOr<ExitInfo> exit = (*program)->Finish(absl::Seconds(10));
  ASSERT_TRUE(exit.ok()) << exit.status();
  EXPECT_TRUE(exit->exited && exit->exit_code == 0) << DescribeExit(*exit);
  EXPECT_THAT(SplitLines((*program)->output()),
              ElementsAre(StartsWith("grandchild "), "parent exiting"));
  ExpectNoLeftovers(marker);
  // And nothing writes the heartbeat any more.
  absl::StatusOr<std::string> first = (*program)->handle().ReadWorkFile("heartbeat", 64);
  ASSERT_TRUE(first.ok()) << first.status();
  absl::SleepFor(absl::Milliseconds(300));
  absl::StatusOr<std::string> second = (*program)->handle().ReadWorkFile("heartbeat", 64);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(*first, *second);
}

// Last: the most destructive should containment fail.
TEST_F(Hostile, KillEverything) {
  HostSleep victim;
  ASSERT_GT(victim.pid(), 0);
  const std::string host = absl::StrCat(victim.pid());
  const std::string test = absl::StrCat(getpid());
  RunOptions options;
  options.args = {host, test};
  absl::StatusOr<Outcome> outcome = Run("kill_all", options);
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  ExpectCleanExit(*outcome);
  EXPECT_THAT(
      outcome->lines,
      ElementsAre("kill -1 SIGKILL: OK", "children killed: 3", "kill " + host + " 0: ESRCH",
                  "kill " + host + " SIGKILL: ESRCH", "kill " + test + " SIGKILL: ESRCH",
                  "kill -" + host + " SIGKILL: ESRCH", "tgkill " + host + " SIGKILL: ESRCH",
                  // A PID namespace's init ignores what it does not handle, even SIGKILL.
                  "kill 1 SIGKILL: OK", "kill 1 SIGTERM: OK", "kill 0 SIGCONT: OK", "alive"))
      << outcome->Describe();
  EXPECT_TRUE(victim.Alive());
}

}  // namespace
}  // namespace vault::sandbox::hostile
