#include "sandbox/posix/hostile_fixture.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <random>
#include <string>
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
#include "sandbox/posix/linux_sandbox.h"
#include "sandbox/sandbox.h"

extern char** environ;

namespace vault::sandbox::hostile {

using ::testing::Each;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::StartsWith;

// ---------------------------------------------------------------------------------------------
// Host-side helpers.

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

std::string UniqueMarker(absl::string_view what) {
  static std::atomic<int> counter{0};
  std::random_device random;
  return absl::StrFormat("hostile-%s-%d-%d-%08x", what, getpid(), counter.fetch_add(1), random());
}

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

std::string Fnv1a(absl::string_view data) {
  uint64_t hash = 14695981039346656037ull;
  for (char c : data.substr(0, 65535)) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 1099511628211ull;
  }
  return absl::StrFormat("%016x", hash);
}

HostSleep::HostSleep() {
  char arg0[] = "sleep";
  char arg1[] = "30";
  char* argv[] = {arg0, arg1, nullptr};
  if (posix_spawn(&pid_, "/bin/sleep", nullptr, nullptr, argv, environ) != 0) pid_ = -1;
}

HostSleep::~HostSleep() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
}

bool HostSleep::Alive() const {
  if (pid_ <= 0) return false;
  siginfo_t info{};
  if (waitid(P_PID, pid_, &info, WEXITED | WNOHANG | WNOWAIT) != 0) return false;
  return info.si_pid == 0;
}

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

Program::Program(std::unique_ptr<SandboxHandle> handle, Fd stdout_read, Fd stdin_write)
    : handle_(std::move(handle)), stdout_(std::move(stdout_read)), stdin_(std::move(stdin_write)) {}

bool Program::WriteStdin(absl::string_view data) {
  while (!data.empty()) {
    ssize_t n = write(stdin_.get(), data.data(), data.size());
    if (n <= 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

absl::StatusOr<std::string> Program::ReadLine(absl::Duration timeout) {
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

absl::StatusOr<ExitInfo> Program::Finish(absl::Duration timeout) {
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

void Program::Pump(absl::Duration timeout) {
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

std::vector<std::string> SplitLines(absl::string_view output) {
  return absl::StrSplit(output, '\n', absl::SkipEmpty());
}

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

Sandbox* Hostile::sandbox_ = nullptr;
absl::Status* Hostile::create_status_ = nullptr;

void Hostile::SetUpTestSuite() {
  absl::StatusOr<std::unique_ptr<LinuxSandbox>> created = LinuxSandbox::Create({});
  if (created.ok()) {
    sandbox_ = created->release();
    create_status_ = new absl::Status();
  } else {
    create_status_ = new absl::Status(created.status());
  }
}

void Hostile::TearDownTestSuite() {
  delete sandbox_;
  sandbox_ = nullptr;
  delete create_status_;
  create_status_ = nullptr;
}

void Hostile::SetUp() {
  if (sandbox_ != nullptr) return;
  if (absl::IsFailedPrecondition(*create_status_)) {
    GTEST_SKIP() << "a sandbox fence is missing here: " << create_status_->message();
  }
  FAIL() << "LinuxSandbox::Create: " << *create_status_;
}

absl::StatusOr<std::unique_ptr<Program>> Hostile::Start(const std::string& name, RunOptions options,
                                                        Sandbox* sandbox) {
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

absl::StatusOr<Outcome> Hostile::Run(const std::string& name, RunOptions options) {
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

void Hostile::ExpectNoEscape(const Outcome& outcome) {
  EXPECT_THAT(outcome.lines, Each(Not(StartsWith("ESCAPED")))) << outcome.Describe();
  EXPECT_THAT(outcome.lines, Each(Not(StartsWith("REFUSED")))) << outcome.Describe();
}

void Hostile::ExpectCleanExit(const Outcome& outcome) {
  EXPECT_TRUE(outcome.exit.exited) << outcome.Describe();
  EXPECT_EQ(outcome.exit.exit_code, 0) << outcome.Describe();
  EXPECT_EQ(outcome.exit.limit, LimitHit::kNone) << outcome.Describe();
}

void Hostile::ExpectKilledBy(const Outcome& outcome, int signal, LimitHit limit) {
  EXPECT_FALSE(outcome.exit.exited) << outcome.Describe();
  EXPECT_EQ(outcome.exit.signal, signal) << outcome.Describe();
  EXPECT_EQ(outcome.exit.limit, limit) << outcome.Describe();
}

void Hostile::ExpectNoLeftovers(const std::string& marker) {
  const absl::Time deadline = absl::Now() + absl::Seconds(2);
  std::vector<pid_t> left = HostPidsWithArg(marker);
  while (!left.empty() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(50));
    left = HostPidsWithArg(marker);
  }
  EXPECT_THAT(left, IsEmpty()) << "processes of an ended sandbox are still running";
}

}  // namespace vault::sandbox::hostile
