// hostile_test: runs the hostile corpus (sandbox/testdata, one attack per program) inside
// LinuxSandbox and checks that every attack is contained: the exact lines each program printed
// (one per attempt, with the errno name), how it ended (ExitInfo), and that the host was not
// touched (its processes alive, its files unchanged, no process of the sandbox left over, no
// descriptor received).
//
// The corpus programs are never run outside the sandbox. Tests are ordered from the least to
// the most destructive (gtest runs them in this order): reads and sockets first, bombs last.
// Tests marked "SANDBOX BUG" or "FINDING" pin a defect of the sandbox found by this suite; they
// fail until it is fixed. HOSTILE_VERBOSE=1 prints every program's output.
//
// Thread safety: each test runs on one thread (one test starts a second one); one LinuxSandbox
// is shared by the suite.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/inotify.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/testing/temp_dir.h"
#include "common/unique_fd.h"
#include "sandbox/channel.h"
#include "sandbox/linux_sandbox.h"
#include "sandbox/sandbox.h"

extern char** environ;

namespace vault::sandbox {
namespace {

using ::testing::AllOf;
using ::testing::AnyOf;
using ::testing::Contains;
using ::testing::Each;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::StartsWith;

constexpr char kCorpusDir[] = VAULT_HOSTILE_DIR;

// ---------------------------------------------------------------------------------------------
// Host-side helpers.

// Owns one descriptor.
using Fd = common::UniqueFd;

// Small, finite limits; each test changes the one it attacks.
Limits TestLimits() {
  Limits limits;
  limits.memory_bytes = 64ull << 20;
  limits.cpu_seconds = 10;
  limits.cpu_percent = 100;
  limits.max_processes = 32;
  limits.max_open_files = 64;
  limits.max_file_bytes = 8ull << 20;
  limits.wall_time = absl::Seconds(10);
  limits.storage_bytes = 4ull << 20;
  limits.storage_inodes = 256;
  return limits;
}

// A string no other process on the machine has in its argv.
std::string UniqueMarker(absl::string_view what) {
  static std::atomic<int> counter{0};
  std::random_device random;
  return absl::StrFormat("hostile-%s-%d-%d-%08x", what, getpid(), counter.fetch_add(1), random());
}

// Host pids whose argv contains `arg` as one whole argument.
std::vector<pid_t> HostPidsWithArg(const std::string& arg) {
  std::vector<pid_t> pids;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", error)) {
    pid_t pid = 0;
    if (!absl::SimpleAtoi(entry.path().filename().string(), &pid)) continue;
    std::ifstream in(entry.path() / "cmdline", std::ios::binary);
    std::string cmdline((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    for (absl::string_view part : absl::StrSplit(cmdline, '\0')) {
      if (part == arg) {
        pids.push_back(pid);
        break;
      }
    }
  }
  return pids;
}

// The four uids (real, effective, saved, fs) of a host process, empty when it is gone.
std::vector<uint32_t> HostUids(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  std::vector<uint32_t> uids;
  while (std::getline(in, line)) {
    if (!absl::StartsWith(line, "Uid:")) continue;
    for (absl::string_view field :
         absl::StrSplit(line.substr(4), absl::ByAnyChar(" \t"), absl::SkipEmpty())) {
      uint32_t uid = 0;
      if (absl::SimpleAtoi(field, &uid)) uids.push_back(uid);
    }
  }
  return uids;
}

int CountOpenFds() {
  int count = 0;
  std::error_code error;
  for (auto it = std::filesystem::directory_iterator("/proc/self/fd", error);
       it != std::filesystem::directory_iterator(); it.increment(error)) {
    ++count;
  }
  return count;
}

std::string ReadHostFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void WriteHostFile(const std::string& path, const std::string& contents) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << contents;
}

// FNV-1a 64 of the first 64 KiB, as read_host.c prints it.
std::string Fnv1a(absl::string_view data) {
  uint64_t hash = 14695981039346656037ull;
  for (char c : data.substr(0, 65535)) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 1099511628211ull;
  }
  return absl::StrFormat("%016x", hash);
}

// A benign host process ("sleep 30") for the attacks to aim at; killed when destroyed.
class HostSleep {
 public:
  HostSleep() {
    char arg0[] = "sleep";
    char arg1[] = "30";
    char* argv[] = {arg0, arg1, nullptr};
    if (posix_spawn(&pid_, "/bin/sleep", nullptr, nullptr, argv, environ) != 0) pid_ = -1;
  }
  HostSleep(const HostSleep&) = delete;
  HostSleep& operator=(const HostSleep&) = delete;
  ~HostSleep() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  pid_t pid() const { return pid_; }
  // Still running (not a zombie, not reaped).
  bool Alive() const {
    if (pid_ <= 0) return false;
    siginfo_t info{};
    if (waitid(P_PID, pid_, &info, WEXITED | WNOHANG | WNOWAIT) != 0) return false;
    return info.si_pid == 0;
  }

 private:
  pid_t pid_ = -1;
};

// Runs a host program to its end; its exit code, or -1.
int RunOnHost(const char* path) {
  char* argv[] = {const_cast<char*>(path), nullptr};
  pid_t pid;
  if (posix_spawn(&pid, path, nullptr, nullptr, argv, environ) != 0) return -1;
  int status = 0;
  if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

// ---------------------------------------------------------------------------------------------
// Running one corpus program.

struct RunOptions {
  std::vector<std::string> args;
  Limits limits = TestLimits();
  int stdin_fd = -1;  // -1: /dev/null inside, unless pipe_stdin
  bool pipe_stdin = false;
  int channel_fd = -1;
  std::string name;  // SandboxSpec::name; empty: "hostile-<program>"
  std::vector<std::string> read_only_dirs;
};

// A corpus program started in the sandbox, its stdout read through a pipe.
class Program {
 public:
  Program(std::unique_ptr<SandboxHandle> handle, Fd stdout_read, Fd stdin_write)
      : handle_(std::move(handle)),
        stdout_(std::move(stdout_read)),
        stdin_(std::move(stdin_write)) {}

  SandboxHandle& handle() { return *handle_; }
  std::unique_ptr<SandboxHandle> ReleaseHandle() { return std::move(handle_); }
  const std::string& output() const { return output_; }
  void CloseStdin() { stdin_.Reset(); }

  bool WriteStdin(absl::string_view data) {
    while (!data.empty()) {
      ssize_t n = write(stdin_.get(), data.data(), data.size());
      if (n <= 0) return false;
      data.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }

  // The next complete line (without '\n'), reading stdout for up to `timeout`.
  absl::StatusOr<std::string> ReadLine(absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    for (;;) {
      size_t end = output_.find('\n', consumed_);
      if (end != std::string::npos) {
        std::string line = output_.substr(consumed_, end - consumed_);
        consumed_ = end + 1;
        return line;
      }
      if (eof_) return absl::UnavailableError(absl::StrCat("stdout closed; got: ", output_));
      if (absl::Now() >= deadline) {
        return absl::DeadlineExceededError(absl::StrCat("no line yet; got: ", output_));
      }
      Pump(absl::Milliseconds(50));
    }
  }

  // Reads stdout until the sandbox ends (killing it after `timeout`), then until EOF or a grace
  // of 2 s (a process that outlived the program could hold the pipe).
  absl::StatusOr<ExitInfo> Finish(absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    std::optional<ExitInfo> exit;
    absl::Time drain_deadline;
    for (;;) {
      if (!exit.has_value()) {
        absl::StatusOr<ExitInfo> waited = handle_->Wait(absl::ZeroDuration());
        if (waited.ok()) {
          exit = *waited;
          drain_deadline = absl::Now() + absl::Seconds(2);
        } else if (!absl::IsDeadlineExceeded(waited.status())) {
          return waited.status();
        }
      }
      if (exit.has_value() && (eof_ || absl::Now() >= drain_deadline)) return *exit;
      if (!exit.has_value() && absl::Now() >= deadline) {
        (void)handle_->Kill();
        return absl::DeadlineExceededError(absl::StrCat(
            "the sandbox still ran after ", absl::FormatDuration(timeout), "; output: ", output_));
      }
      Pump(absl::Milliseconds(20));
    }
  }

 private:
  // Waits up to `timeout` for stdout and appends what is there.
  void Pump(absl::Duration timeout) {
    if (eof_) {
      absl::SleepFor(timeout);
      return;
    }
    pollfd pfd{stdout_.get(), POLLIN, 0};
    int ready = poll(&pfd, 1, static_cast<int>(absl::ToInt64Milliseconds(timeout)));
    if (ready <= 0) return;
    char buffer[4096];
    ssize_t n = read(stdout_.get(), buffer, sizeof buffer);
    if (n > 0) {
      output_.append(buffer, static_cast<size_t>(n));
    } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
      eof_ = true;
    }
  }

  std::unique_ptr<SandboxHandle> handle_;
  Fd stdout_;
  Fd stdin_;
  std::string output_;
  size_t consumed_ = 0;
  bool eof_ = false;
};

// What a program run to its end left behind.
struct Outcome {
  ExitInfo exit;
  std::string output;
  std::vector<std::string> lines;
  std::unique_ptr<SandboxHandle> handle;  // still readable (ReadWorkFile)

  // For failure messages.
  std::string Describe() const { return absl::StrCat(DescribeExit(exit), "; output:\n", output); }
};

std::vector<std::string> SplitLines(absl::string_view output) {
  return absl::StrSplit(output, '\n', absl::SkipEmpty());
}

// The number in a line "<prefix><number>...", e.g. NumberAfter("fork: EAGAIN after 30",
// "fork: EAGAIN after ") == 30.
std::optional<int64_t> NumberAfter(absl::string_view line, absl::string_view prefix) {
  if (!absl::ConsumePrefix(&line, prefix)) return std::nullopt;
  size_t digits = 0;
  while (digits < line.size() && line[digits] >= '0' && line[digits] <= '9') ++digits;
  int64_t value = 0;
  if (!absl::SimpleAtoi(line.substr(0, digits), &value)) return std::nullopt;
  return value;
}

// ---------------------------------------------------------------------------------------------
// The suite.

class Hostile : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    absl::StatusOr<std::unique_ptr<LinuxSandbox>> created = LinuxSandbox::Create({});
    if (created.ok()) {
      sandbox_ = created->release();
      create_status_ = new absl::Status();
    } else {
      create_status_ = new absl::Status(created.status());
    }
  }

  static void TearDownTestSuite() {
    delete sandbox_;
    sandbox_ = nullptr;
    delete create_status_;
    create_status_ = nullptr;
  }

  void SetUp() override {
    if (sandbox_ != nullptr) return;
    if (absl::IsFailedPrecondition(*create_status_)) {
      GTEST_SKIP() << "a sandbox fence is missing here: " << create_status_->message();
    }
    FAIL() << "LinuxSandbox::Create: " << *create_status_;
  }

  // Starts corpus program `name` with stdout (and, when asked, stdin) on pipes, in `sandbox`
  // (default: the suite's).
  absl::StatusOr<std::unique_ptr<Program>> Start(const std::string& name, RunOptions options,
                                                 Sandbox* sandbox = nullptr) {
    int out[2];
    if (pipe2(out, O_CLOEXEC) != 0) return absl::ErrnoToStatus(errno, "pipe2");
    Fd out_read(out[0]);
    Fd out_write(out[1]);
    Fd in_read;
    Fd in_write;
    if (options.pipe_stdin) {
      int in[2];
      if (pipe2(in, O_CLOEXEC) != 0) return absl::ErrnoToStatus(errno, "pipe2");
      in_read = Fd(in[0]);
      in_write = Fd(in[1]);
      // A program that is gone must not kill the test with SIGPIPE.
      signal(SIGPIPE, SIG_IGN);
    }
    SandboxSpec spec;
    spec.program = "/code/" + name;
    spec.argv = {name};
    spec.argv.insert(spec.argv.end(), options.args.begin(), options.args.end());
    spec.code_dir = kCorpusDir;
    spec.read_only_dirs = options.read_only_dirs;
    spec.stdin_fd = options.pipe_stdin ? in_read.get() : options.stdin_fd;
    spec.stdout_fd = out_write.get();
    spec.channel_fd = options.channel_fd;
    spec.limits = options.limits;
    spec.name = options.name.empty() ? "hostile-" + name : options.name;
    absl::StatusOr<std::unique_ptr<SandboxHandle>> handle =
        (sandbox != nullptr ? sandbox : sandbox_)->Spawn(spec);
    if (!handle.ok()) return handle.status();
    return std::make_unique<Program>(std::move(*handle), std::move(out_read), std::move(in_write));
  }

  // Runs corpus program `name` to its end and collects its output. Every run also checks that
  // the program reported no escape and did not refuse to run.
  absl::StatusOr<Outcome> Run(const std::string& name, RunOptions options) {
    const absl::Duration timeout = options.limits.wall_time + absl::Seconds(5);
    absl::StatusOr<std::unique_ptr<Program>> program = Start(name, std::move(options));
    if (!program.ok()) return program.status();
    absl::StatusOr<ExitInfo> exit = (*program)->Finish(timeout);
    if (!exit.ok()) return exit.status();
    Outcome outcome;
    outcome.exit = *exit;
    outcome.output = (*program)->output();
    outcome.lines = SplitLines(outcome.output);
    outcome.handle = (*program)->ReleaseHandle();
    if (getenv("HOSTILE_VERBOSE") != nullptr) {
      std::cerr << name << ": " << outcome.Describe() << "\n";
    }
    ExpectNoEscape(outcome);
    return outcome;
  }

  static void ExpectNoEscape(const Outcome& outcome) {
    EXPECT_THAT(outcome.lines, Each(Not(StartsWith("ESCAPED")))) << outcome.Describe();
    EXPECT_THAT(outcome.lines, Each(Not(StartsWith("REFUSED")))) << outcome.Describe();
  }

  static void ExpectCleanExit(const Outcome& outcome) {
    EXPECT_TRUE(outcome.exit.exited) << outcome.Describe();
    EXPECT_EQ(outcome.exit.exit_code, 0) << outcome.Describe();
    EXPECT_EQ(outcome.exit.limit, LimitHit::kNone) << outcome.Describe();
  }

  static void ExpectKilledBy(const Outcome& outcome, int signal, LimitHit limit) {
    EXPECT_FALSE(outcome.exit.exited) << outcome.Describe();
    EXPECT_EQ(outcome.exit.signal, signal) << outcome.Describe();
    EXPECT_EQ(outcome.exit.limit, limit) << outcome.Describe();
  }

  // No process whose argv holds `marker` is left on the host (waits up to 2 s for exiting
  // ones).
  static void ExpectNoLeftovers(const std::string& marker) {
    const absl::Time deadline = absl::Now() + absl::Seconds(2);
    std::vector<pid_t> left = HostPidsWithArg(marker);
    while (!left.empty() && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(50));
      left = HostPidsWithArg(marker);
    }
    EXPECT_THAT(left, IsEmpty()) << "processes of an ended sandbox are still running";
  }

  static Sandbox* sandbox_;
  static absl::Status* create_status_;
};

Sandbox* Hostile::sandbox_ = nullptr;
absl::Status* Hostile::create_status_ = nullptr;

// ---------------------------------------------------------------------------------------------
// Smoke: the benign program.

TEST_F(Hostile, Hello) {
  absl::StatusOr<Channel::PairResult> pair = Channel::Pair();
  ASSERT_TRUE(pair.ok()) << pair.status();
  RunOptions options;
  options.channel_fd = pair->guest_fd;
  absl::StatusOr<Outcome> outcome = Run("hello", options);
  close(pair->guest_fd);
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  ExpectCleanExit(*outcome);
  EXPECT_EQ(outcome->output, "hello\n");
  absl::StatusOr<std::string> frame = pair->host.ReadFrame(absl::Seconds(5));
  ASSERT_TRUE(frame.ok()) << frame.status();
  EXPECT_EQ(*frame, "ready");
}

// ---------------------------------------------------------------------------------------------
// Descriptors and limits as given.

TEST_F(Hostile, InheritedDescriptors) {
  common::testing::TempDir tmp("hostile_fds");
  WriteHostFile(tmp.Path("host-secret"), "host secret");
  // Deliberately without O_CLOEXEC: the sandbox must not pass them on anyway.
  Fd leaked_file(open(tmp.Path("host-secret").c_str(), O_RDONLY));
  ASSERT_GE(leaked_file.get(), 0);
  int leaked_pipe[2];
  ASSERT_EQ(pipe(leaked_pipe), 0);
  Fd leaked_read(leaked_pipe[0]);
  Fd leaked_write(leaked_pipe[1]);

  absl::StatusOr<Channel::PairResult> pair = Channel::Pair();
  ASSERT_TRUE(pair.ok()) << pair.status();
  RunOptions options;
  options.channel_fd = pair->guest_fd;
  absl::StatusOr<Outcome> outcome = Run("fd_leak", options);
  close(pair->guest_fd);
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  ExpectCleanExit(*outcome);
  EXPECT_THAT(outcome->lines, ElementsAre("open fds: 0 1 2 3", "fd 0: /dev/null", "fd 1: pipe:[]",
                                          "fd 2: /dev/null", "fd 3: socket:[]"))
      << outcome->Describe();
}

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
// Files: reading the host's, escaping the root, writing outside /work, traps for the host.

TEST_F(Hostile, ReadHostFiles) {
  // The vault's data directory stand-in: a host directory holding a secret.
  common::testing::TempDir data("hostile_vault_data");
  const std::string secret = UniqueMarker("secret");
  WriteHostFile(data.Path("blob"), secret);
  RunOptions options;
  options.args = {secret,  "/etc/shadow", "/etc/passwd",    "/etc/hostname", "/etc/hosts",
                  "/root", "/home",       "/var/lib",       "/run",          "/sys/kernel",
                  "/boot", data.path(),   data.Path("blob")};
  absl::StatusOr<Outcome> outcome = Run("read_host", options);
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  ExpectCleanExit(*outcome);
  EXPECT_THAT(outcome->output, Not(HasSubstr(secret)));
  // The sandbox has an /etc of its own (a passwd naming its user, its hostname), never the
  // host's files.
  for (const char* path : {"/etc/passwd", "/etc/hostname"}) {
    const std::string host_file = ReadHostFile(path);
    EXPECT_THAT(outcome->lines, Not(Contains(absl::StrCat("read ", path, ": OK ", host_file.size(),
                                                          " bytes fnv ", Fnv1a(host_file)))))
        << path << " is the host's";
  }
  EXPECT_THAT(outcome->lines,
              ElementsAre("read /etc/shadow: ENOENT", StartsWith("read /etc/passwd: OK "),
                          StartsWith("read /etc/hostname: OK "), "read /etc/hosts: ENOENT",
                          "read /root: ENOENT", "read /home: ENOENT", "read /var/lib: ENOENT",
                          "read /run: ENOENT", "read /sys/kernel: ENOENT", "read /boot: ENOENT",
                          absl::StrCat("read ", data.path(), ": ENOENT"),
                          absl::StrCat("read ", data.Path("blob"), ": ENOENT")))
      << outcome->Describe();
}

TEST_F(Hostile, DotDotEscapes) {
  common::testing::TempDir tmp("hostile_dotdot");
  const std::string secret = UniqueMarker("secret");
  WriteHostFile(tmp.Path("secret"), secret);
  RunOptions options;
  options.args = {secret, tmp.Path("secret")};
  absl::StatusOr<Outcome> outcome = Run("dotdot_escape", options);
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  ExpectCleanExit(*outcome);
  EXPECT_THAT(outcome->output, Not(HasSubstr(secret)));
  EXPECT_THAT(
      outcome->lines,
      ElementsAre("open /work/../../..HOST: ENOENT", "open ../../..HOST from /work: ENOENT",
                  // init is not dumpable, so hidepid hides /proc/1 from the program.
                  "open /proc/1/root/HOST: ENOENT", "open /proc/self/root/../..HOST: ENOENT",
                  "open /proc/self/cwd/../..HOST: ENOENT", "open /work/rootlink/HOST: ENOENT",
                  "open /work/uplink/HOST: ENOENT", "/work/../../.. is /: yes",
                  "/work/rootlink is /: yes", "/work/uplink is /: yes", "/proc/self/root is /: yes",
                  "/proc/1/root is /: ENOENT", "openat2 RESOLVE_BENEATH ../etc/ld.so.cache: EXDEV",
                  "chroot /work: EPERM"))
      << outcome->Describe();
}

TEST_F(Hostile, WriteOutsideWorkDir) {
  absl::StatusOr<Outcome> outcome = Run("write_outside", {});
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  ExpectCleanExit(*outcome);
  // EROFS: a read-only mount answers first; EACCES: Landlock (the mount itself is writable or
  // the file opens without creating); ENOENT: not there at all (/proc shows only processes).
  EXPECT_THAT(
      outcome->lines,
      ElementsAre(
          "create /hostile: EROFS", "create /usr/hostile: EROFS", "create /usr/bin/hostile: EROFS",
          "create /lib/hostile: EROFS", "create /code/hostile: EROFS", "create /etc/hostile: EROFS",
          "create /proc/hostile: ENOENT", "create /dev/hostile: EROFS",
          "create /sys/hostile: ENOENT", "create /root/hostile: ENOENT",
          "open for writing /usr/bin/ls: EACCES", "open for writing /code/hello: EACCES",
          "open for writing /etc/ld.so.cache: EACCES",
          "open for writing /proc/sys/kernel/hostname: ENOENT",
          "open for writing /proc/sys/vm/drop_caches: ENOENT",
          "open for writing /proc/sysrq-trigger: ENOENT", "open for writing /proc/self/mem: EROFS",
          "open for writing /proc/1/mem: ENOENT", "open for writing /dev/urandom: EACCES",
          "mkdir /hostile-dir: EROFS", "mkdir /usr/hostile-dir: EROFS",
          "mkdir /code/hostile-dir: EROFS", "mkdir /dev/hostile-dir: EROFS",
          "link /code/hello-link: EROFS", "symlink /usr/hostile-link: EROFS",
          "chmod /code/hello: EROFS", "truncate /etc/ld.so.cache: EACCES",
          "rename /code/hello: EROFS", "create /work/control: OK", "create /tmp/control: OK",
          "write /dev/null: OK", "write /dev/zero: OK"))
      << outcome->Describe();
  // Nothing appeared on the host.
  for (const char* name : {"hostile", "hello-link", "hostile-dir"}) {
    EXPECT_FALSE(std::filesystem::exists(std::filesystem::path(kCorpusDir) / name)) << name;
  }
  for (const char* path : {"/hostile", "/usr/hostile", "/usr/bin/hostile", "/etc/hostile",
                           "/hostile-dir", "/usr/hostile-dir", "/usr/hostile-link"}) {
    EXPECT_FALSE(std::filesystem::exists(path)) << path;
  }
}

// Code the sandbox writes cannot be executed from /work or /tmp (a noexec mount and Landlock),
// not even through the dynamic loader, and a setuid bit it sets there means nothing.
// A memfd (fexecve) does run: that is no escape -- any program may map anonymous memory
// executable and load code itself -- but it shows the noexec rule is a hurdle, not a fence.
// (vm.memfd_noexec = 2, set in the sandbox's PID namespace, would close this door.)
TEST_F(Hostile, ExecSelfWrittenCode) {
  absl::StatusOr<Outcome> outcome = Run("work_exec", {});
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  ExpectCleanExit(*outcome);
  std::vector<std::string> expected;
  for (const char* path : {"/work/hello", "/tmp/hello"}) {
    expected.push_back(absl::StrCat("copy ", path, ": OK"));
    expected.push_back(absl::StrCat("chmod 04755 ", path, ": OK"));
    expected.push_back(absl::StrCat(path, " setuid bit: set"));
    expected.push_back(absl::StrCat("exec ", path, ": EACCES"));
    // ld.so starts (it lives in /lib) but cannot map the file executable: it exits 127.
    expected.push_back(
        absl::StrCat("exec ld.so ", path, ": started, hello did not run (exit 127)"));
  }
  expected.push_back("memfd_create: OK");
  expected.push_back("copy memfd: OK");
  expected.push_back("exec memfd: ran hello");
  EXPECT_THAT(outcome->lines, ElementsAreArray(expected)) << outcome->Describe();
}

TEST_F(Hostile, SymlinkPlantedForHost) {
  absl::StatusOr<Outcome> outcome = Run("symlink_plant", {});
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  ExpectCleanExit(*outcome);
  EXPECT_THAT(outcome->lines,
              ElementsAre("plain: OK", "abs: OK", "rel: OK", "rootdir: OK", "sub: OK", "sub/up: OK",
                          "proc: OK", "fifo: OK", "big: OK", "hardlink: EXDEV", "planted"))
      << outcome->Describe();
  SandboxHandle& handle = *outcome->handle;
  // The positive control: the host reads a plain file.
  absl::StatusOr<std::string> plain = handle.ReadWorkFile("plain", 1024);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(*plain, "plain contents");
  for (const char* trap : {"abs", "rel", "rootdir/etc/shadow", "rootdir/etc/passwd", "sub/up/plain",
                           "proc/etc/passwd", "../../../../etc/shadow", "sub/../../etc/shadow"}) {
    absl::StatusOr<std::string> read = handle.ReadWorkFile(trap, 1 << 20);
    EXPECT_TRUE(absl::IsPermissionDenied(read.status())) << trap << ": " << read.status();
    if (read.ok()) {
      EXPECT_THAT(*read, Not(HasSubstr("root:"))) << trap << " returned host bytes";
    }
  }
  // An absolute path is refused before any lookup.
  absl::StatusOr<std::string> absolute = handle.ReadWorkFile("/etc/shadow", 1 << 20);
  EXPECT_TRUE(absl::IsInvalidArgument(absolute.status())) << absolute.status();
  // A FIFO must not block the host.
  const absl::Time before = absl::Now();
  absl::StatusOr<std::string> fifo = handle.ReadWorkFile("fifo", 1024);
  EXPECT_TRUE(absl::IsFailedPrecondition(fifo.status())) << fifo.status();
  EXPECT_LT(absl::Now() - before, absl::Seconds(2));
  absl::StatusOr<std::string> big = handle.ReadWorkFile("big", 1024);
  EXPECT_TRUE(absl::IsResourceExhausted(big.status())) << big.status();
  absl::StatusOr<std::string> missing = handle.ReadWorkFile("missing", 1024);
  EXPECT_TRUE(absl::IsNotFound(missing.status())) << missing.status();
}

TEST_F(Hostile, SymlinkSwapRace) {
  RunOptions options;
  options.pipe_stdin = true;
  absl::StatusOr<std::unique_ptr<Program>> program = Start("symlink_race", options);
  ASSERT_TRUE(program.ok()) << program.status();
  absl::StatusOr<std::string> line = (*program)->ReadLine(absl::Seconds(5));
  ASSERT_TRUE(line.ok()) << line.status();
  ASSERT_EQ(*line, "racing");
  int benign = 0;
  int denied = 0;
  std::vector<std::string> other;
  const absl::Time end = absl::Now() + absl::Milliseconds(1500);
  while (absl::Now() < end) {
    absl::StatusOr<std::string> read = (*program)->handle().ReadWorkFile("race", 4096);
    if (read.ok()) {
      if (*read == "benign") {
        ++benign;
      } else {
        other.push_back(absl::StrCat("read returned ", read->size(), " other bytes"));
      }
    } else if (absl::IsPermissionDenied(read.status())) {
      ++denied;
    } else {
      other.push_back(read.status().ToString());
    }
  }
  (*program)->CloseStdin();
  absl::StatusOr<ExitInfo> exit = (*program)->Finish(absl::Seconds(10));
  ASSERT_TRUE(exit.ok()) << exit.status();
  EXPECT_TRUE(exit->exited && exit->exit_code == 0) << DescribeExit(*exit);
  EXPECT_THAT(other, IsEmpty()) << "benign reads " << benign << ", denied " << denied;
  // Both states were seen: the race really ran under the reads.
  EXPECT_GT(benign, 0);
  EXPECT_GT(denied, 0);
  EXPECT_THAT(SplitLines((*program)->output()), ElementsAre("racing", StartsWith("swaps: ")));
}

TEST_F(Hostile, SecondSandboxSecret) {
  // Sandbox A holds a secret in its work directory.
  const std::string secret = UniqueMarker("secret");
  const std::string marker = UniqueMarker("keeper");
  RunOptions keeper_options;
  keeper_options.pipe_stdin = true;
  keeper_options.args = {marker};
  absl::StatusOr<std::unique_ptr<Program>> keeper = Start("secret_keeper", keeper_options);
  ASSERT_TRUE(keeper.ok()) << keeper.status();
  ASSERT_TRUE((*keeper)->WriteStdin(secret + "\n"));
  absl::StatusOr<std::string> ready = (*keeper)->ReadLine(absl::Seconds(5));
  ASSERT_TRUE(ready.ok()) << ready.status();
  ASSERT_EQ(*ready, "ready");
  absl::StatusOr<std::string> held = (*keeper)->handle().ReadWorkFile("secret", 1024);
  ASSERT_TRUE(held.ok()) << held.status();
  ASSERT_EQ(*held, secret);

  // The host paths of A's work directory, as a guessing attacker would try them; the host
  // itself (root) can open at least one of them, so they are live targets.
  std::vector<pid_t> keeper_pids = HostPidsWithArg(marker);
  ASSERT_FALSE(keeper_pids.empty());
  std::vector<std::string> guesses;
  bool host_reads_it = false;
  for (pid_t pid : keeper_pids) {
    for (const std::string& path : {absl::StrCat("/proc/", pid, "/root/work/secret"),
                                    absl::StrCat("/proc/", pid, "/cwd/secret")}) {
      guesses.push_back(path);
      host_reads_it = host_reads_it || ReadHostFile(path) == secret;
    }
    // Every sandbox process runs as an unprivileged host uid.
    for (uint32_t uid : HostUids(pid)) EXPECT_NE(uid, 0u) << "pid " << pid;
  }
  EXPECT_TRUE(host_reads_it) << "no guessed path holds the secret even for the host";
  const std::string& id = (*keeper)->handle().id();
  guesses.push_back(absl::StrCat("/tmp/vault-sandbox/", id, "/work/secret"));
  guesses.push_back(absl::StrCat("/run/vault-sandbox/", id, "/work/secret"));
  guesses.push_back(absl::StrCat("/var/lib/vault/sandboxes/", id, "/work/secret"));

  // Sandbox B tries them all, and every /proc/<pid>/root it can see.
  RunOptions peek_options;
  peek_options.args = {secret};
  peek_options.args.insert(peek_options.args.end(), guesses.begin(), guesses.end());
  absl::StatusOr<Outcome> peek = Run("proc_root_peek", peek_options);
  ASSERT_TRUE(peek.ok()) << peek.status();
  ExpectCleanExit(*peek);
  EXPECT_THAT(peek->output, Not(HasSubstr(secret)));
  // B sees only itself in its /proc (its init is not dumpable, so hidepid hides it), and its
  // own work directory holds no secret.
  std::vector<std::string> expected = {"peek /proc/2/root/work/secret: ENOENT",
                                       "peek /proc/2/cwd/secret: ENOENT"};
  for (const std::string& guess : guesses) expected.push_back("read " + guess + ": ENOENT");
  EXPECT_THAT(peek->lines, ElementsAreArray(expected)) << peek->Describe();

  (*keeper)->CloseStdin();
  absl::StatusOr<ExitInfo> exit = (*keeper)->Finish(absl::Seconds(10));
  ASSERT_TRUE(exit.ok()) << exit.status();
  EXPECT_TRUE(exit->exited && exit->exit_code == 0) << DescribeExit(*exit);
  EXPECT_THAT(SplitLines((*keeper)->output()), ElementsAre("ready", "bye"));
}

// Two sandboxes must never share a host uid: processes of one host uid share per-user kernel
// accounting (pipe buffers, inotify instances, RLIMIT_NPROC counts in the initial namespace).
//
// SANDBOX BUG (reported, not fixed here): host uid slots are allocated per LinuxSandbox
// instance (LinuxSandbox::Impl::AllocateSlot, from host_id_base), so two instances, in one
// process or in two (two vault nodes on one machine, tests run by ctest -j), give their first
// sandboxes the same host uid 200000. Impact found so far: per-user kernel accounting only
// (the sandboxes cannot see or signal each other); e.g. one sandbox can push the shared uid past
// pipe-user-pages-soft so that the other's new pipes get the minimum size. This test fails until
// slots are unique machine-wide.
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

TEST_F(Hostile, ProcLeaks) {
  const pid_t host = getpid();
  RunOptions options;
  options.args = {absl::StrCat(host)};
  absl::StatusOr<Outcome> outcome = Run("proc_leak", options);
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  ExpectCleanExit(*outcome);
  // /proc shows processes only (no kcore, sysrq-trigger, sys, ...), and of those only the
  // program itself: the init is not dumpable, so hidepid hides it.
  std::vector<std::string> expected = {"pids: 2", "self: 2"};
  for (const std::string& path :
       {std::string("/proc/1/environ"), std::string("/proc/1/cmdline"),
        absl::StrCat("/proc/", host, "/cmdline"), absl::StrCat("/proc/", host, "/environ"),
        std::string("/proc/kcore"), std::string("/proc/kallsyms"), std::string("/proc/kmsg"),
        std::string("/proc/keys"), std::string("/proc/timer_list"),
        std::string("/proc/sched_debug"), std::string("/proc/1/mountinfo"),
        std::string("/proc/sys/kernel/core_pattern")}) {
    expected.push_back(absl::StrCat("read ", path, ": ENOENT"));
  }
  expected.push_back("open for writing /proc/sysrq-trigger: ENOENT");
  expected.push_back("open for writing /proc/sys/kernel/core_pattern: ENOENT");
  EXPECT_THAT(outcome->lines, ElementsAreArray(expected)) << outcome->Describe();
}

// KNOWN LIMITATION (low severity): /proc/self/mountinfo inside shows the host path of every
// bind mount's source (its "root" field is the source's path within its filesystem), e.g. the
// code directory's. The sandbox learns a host directory name, nothing it can open. A bind
// cannot hide it; the agent runtime is to place code under a neutral per-sandbox path. This
// test pins today's behaviour so that a change to it is noticed.
TEST_F(Hostile, MountinfoShowsBindSourcesOnly) {
  RunOptions options;
  options.args = {absl::StrCat(getpid()), std::filesystem::canonical(kCorpusDir).string()};
  absl::StatusOr<Outcome> outcome = Run("proc_leak", options);
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  ExpectCleanExit(*outcome);
  ASSERT_FALSE(outcome->lines.empty());
  EXPECT_EQ(outcome->lines.back(), "mountinfo shows HOST_PATH: yes") << outcome->Describe();
}

TEST_F(Hostile, DeviceNodes) {
  absl::StatusOr<Outcome> outcome = Run("devices", {});
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  ExpectCleanExit(*outcome);
  std::vector<std::string> expected = {
      "dev: fd null random stderr stdin stdout urandom zero",
      "mknod /work/mem char 1:1: EPERM",
      "mknod /work/sda block 8:0: EPERM",
      "mknod /dev/mem char 1:1: EPERM",
      "mknod /tmp/kmsg char 1:11: EPERM",
  };
  for (const char* device : {"/dev/mem", "/dev/kmem", "/dev/port", "/dev/kmsg", "/dev/sda",
                             "/dev/vda", "/dev/nvme0n1", "/dev/tty", "/dev/console", "/dev/tty0",
                             "/dev/ptmx", "/dev/fuse", "/dev/kvm", "/dev/net/tun", "/dev/loop0",
                             "/dev/loop-control", "/dev/shm", "/dev/mqueue", "/dev/pts/ptmx"}) {
    expected.push_back(absl::StrCat("open ", device, ": ENOENT"));
  }
  for (const char* device : {"/dev/null", "/dev/zero", "/dev/random", "/dev/urandom"}) {
    expected.push_back(absl::StrCat("read ", device, ": OK"));
  }
  EXPECT_THAT(outcome->lines, ElementsAreArray(expected)) << outcome->Describe();
}

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
  EXPECT_THAT(outcome->lines, ElementsAre(absl::StrCat("connect @", name, ": EPERM"),
                                          absl::StrCat("sendto @", name, ".dgram: socket EPERM"),
                                          absl::StrCat("connect ", path, ": EPERM"),
                                          "connect /run/systemd/private: EPERM",
                                          "connect /run/dbus/system_bus_socket: EPERM",
                                          "connect /var/run/docker.sock: EPERM",
                                          "connect @/tmp/.X11-unix/X0: EPERM"))
      << outcome->Describe();
  EXPECT_LT(accept4(abstract_stream.get(), nullptr, nullptr, SOCK_CLOEXEC), 0);
  EXPECT_EQ(errno, EAGAIN);
  EXPECT_LT(accept4(path_stream.get(), nullptr, nullptr, SOCK_CLOEXEC), 0);
  EXPECT_EQ(errno, EAGAIN);
  char byte;
  EXPECT_LT(recv(abstract_dgram.get(), &byte, 1, 0), 0);
  EXPECT_EQ(errno, EAGAIN);
}

// ---------------------------------------------------------------------------------------------
// The channel: hostile frames on fd 3.

TEST_F(Hostile, ChannelHugeFrame) {
  absl::StatusOr<Channel::PairResult> pair = Channel::Pair();
  ASSERT_TRUE(pair.ok()) << pair.status();
  RunOptions options;
  options.channel_fd = pair->guest_fd;
  absl::StatusOr<Outcome> outcome = Run("channel_huge_frame", options);
  close(pair->guest_fd);
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  ExpectCleanExit(*outcome);
  EXPECT_THAT(outcome->lines, ElementsAre("huge header: OK"));
  absl::StatusOr<std::string> frame = pair->host.ReadFrame(absl::Seconds(5));
  EXPECT_TRUE(absl::IsResourceExhausted(frame.status())) << frame.status();
}

TEST_F(Hostile, ChannelTruncatedFrame) {
  absl::StatusOr<Channel::PairResult> pair = Channel::Pair();
  ASSERT_TRUE(pair.ok()) << pair.status();
  RunOptions options;
  options.channel_fd = pair->guest_fd;
  absl::StatusOr<Outcome> outcome = Run("channel_truncated", options);
  close(pair->guest_fd);
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  ExpectCleanExit(*outcome);
  EXPECT_THAT(outcome->lines, ElementsAre("truncated frame: OK", "close: OK"));
  absl::StatusOr<std::string> frame = pair->host.ReadFrame(absl::Seconds(5));
  EXPECT_TRUE(absl::IsUnavailable(frame.status())) << frame.status();
}

TEST_F(Hostile, ChannelPassesDescriptors) {
  // A first sandbox lets LinuxSandbox open what it keeps for its lifetime (its supervisor's
  // descriptors), so that the count below sees only what this sandbox leaves behind.
  absl::StatusOr<Outcome> warm_up = Run("hello", {});
  ASSERT_TRUE(warm_up.ok()) << warm_up.status();
  warm_up->handle.reset();
  absl::StatusOr<Channel::PairResult> pair = Channel::Pair();
  ASSERT_TRUE(pair.ok()) << pair.status();
  const int fds_before = CountOpenFds();
  RunOptions options;
  options.channel_fd = pair->guest_fd;
  absl::StatusOr<std::unique_ptr<Program>> program = Start("channel_fd_pass", options);
  ASSERT_TRUE(program.ok()) << program.status();
  // Both messages are in the socket before the host reads.
  for (const char* expected : {"sendmsg SCM_RIGHTS: OK", "sendmsg SCM_CREDENTIALS: OK"}) {
    absl::StatusOr<std::string> line = (*program)->ReadLine(absl::Seconds(5));
    ASSERT_TRUE(line.ok()) << line.status();
    EXPECT_EQ(*line, expected);
  }
  absl::StatusOr<std::string> frame = pair->host.ReadFrame(absl::Seconds(5));
  EXPECT_TRUE(absl::IsPermissionDenied(frame.status())) << frame.status();
  EXPECT_EQ(pair->host.refused_descriptors(), 2);
  // Closing the channel lets the program finish.
  pair->host = Channel(-1);
  absl::StatusOr<ExitInfo> exit = (*program)->Finish(absl::Seconds(10));
  ASSERT_TRUE(exit.ok()) << exit.status();
  EXPECT_TRUE(exit->exited && exit->exit_code == 0) << DescribeExit(*exit);
  EXPECT_THAT(SplitLines((*program)->output()),
              ElementsAre("sendmsg SCM_RIGHTS: OK", "sendmsg SCM_CREDENTIALS: OK",
                          "channel closed by host"));
  program->reset();
  // The host holds no new descriptor: before counted the host end and the guest's fd, both
  // closed now.
  close(pair->guest_fd);
  EXPECT_EQ(CountOpenFds(), fds_before - 2);
}

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
  // the cgroup's exact total every 100 ms, SIGKILLs when it sees more than 2 s. Nearly always
  // SIGXCPU wins, but a poll that lands within that one tick wins instead.
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
}  // namespace vault::sandbox
