// Shared fixture of hostile_test (hostile_files_test.cc, hostile_network_test.cc,
// hostile_kernel_test.cc, hostile_resources_test.cc, one binary): runs the hostile corpus
// (sandbox/posix/testdata, one attack per program) inside LinuxSandbox and checks that every attack is
// contained: the exact lines each program printed (one per attempt, with the errno name), how it
// ended (ExitInfo), and that the host was not touched (its processes alive, its files unchanged,
// no process of the sandbox left over, no descriptor received).
//
//   TEST_F(Hostile, Rlimits) {
//     absl::StatusOr<Outcome> outcome = Run("rlimits", {});
//     ASSERT_TRUE(outcome.ok()) << outcome.status();
//     ExpectCleanExit(*outcome);
//     EXPECT_THAT(outcome->lines, ...) << outcome->Describe();
//   }
//
// The corpus programs are never run outside the sandbox. Tests are ordered from the least to
// the most destructive: the binary links the test files in the order files, network, kernel,
// resources, and gtest runs the tests in that order (reads and sockets first, bombs last).
// Tests marked "SANDBOX BUG" or "FINDING" pin a defect of the sandbox found by this suite; they
// fail until it is fixed. HOSTILE_VERBOSE=1 prints every program's output.
//
// Thread safety: each test runs on one thread (one test starts a second one); one LinuxSandbox
// is shared by the suite, created and destroyed by gtest around it. Program, Outcome and
// HostSleep are for one thread at a time.
#ifndef VAULT_SANDBOX_POSIX_HOSTILE_FIXTURE_H_
#define VAULT_SANDBOX_POSIX_HOSTILE_FIXTURE_H_

#include <gtest/gtest.h>
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/unique_fd.h"
#include "sandbox/sandbox.h"

namespace vault::sandbox::hostile {

inline constexpr char kCorpusDir[] = VAULT_HOSTILE_DIR;

// ---------------------------------------------------------------------------------------------
// Host-side helpers.

// Owns one descriptor.
using Fd = common::UniqueFd;

// Small, finite limits; each test changes the one it attacks.
Limits TestLimits();

// A string no other process on the machine has in its argv.
std::string UniqueMarker(absl::string_view what);

// Host pids whose argv contains `arg` as one whole argument.
std::vector<pid_t> HostPidsWithArg(const std::string& arg);

// The four uids (real, effective, saved, fs) of a host process, empty when it is gone.
std::vector<uint32_t> HostUids(pid_t pid);

int CountOpenFds();

std::string ReadHostFile(const std::string& path);

void WriteHostFile(const std::string& path, const std::string& contents);

// FNV-1a 64 of the first 64 KiB, as read_host.c prints it.
std::string Fnv1a(absl::string_view data);

// A benign host process ("sleep 30") for the attacks to aim at; killed when destroyed.
class HostSleep {
 public:
  HostSleep();
  HostSleep(const HostSleep&) = delete;
  HostSleep& operator=(const HostSleep&) = delete;
  ~HostSleep();
  pid_t pid() const { return pid_; }
  // Still running (not a zombie, not reaped).
  bool Alive() const;

 private:
  pid_t pid_ = -1;
};

// Runs a host program to its end; its exit code, or -1.
int RunOnHost(const char* path);

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
  Program(std::unique_ptr<SandboxHandle> handle, Fd stdout_read, Fd stdin_write);

  SandboxHandle& handle() { return *handle_; }
  std::unique_ptr<SandboxHandle> ReleaseHandle() { return std::move(handle_); }
  const std::string& output() const { return output_; }
  void CloseStdin() { stdin_.Reset(); }

  bool WriteStdin(absl::string_view data);

  // The next complete line (without '\n'), reading stdout for up to `timeout`.
  absl::StatusOr<std::string> ReadLine(absl::Duration timeout);

  // Reads stdout until the sandbox ends (killing it after `timeout`), then until EOF or a grace
  // of 2 s (a process that outlived the program could hold the pipe).
  absl::StatusOr<ExitInfo> Finish(absl::Duration timeout);

 private:
  // Waits up to `timeout` for stdout and appends what is there.
  void Pump(absl::Duration timeout);

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

std::vector<std::string> SplitLines(absl::string_view output);

// The number in a line "<prefix><number>...", e.g. NumberAfter("fork: EAGAIN after 30",
// "fork: EAGAIN after ") == 30.
std::optional<int64_t> NumberAfter(absl::string_view line, absl::string_view prefix);

// ---------------------------------------------------------------------------------------------
// The suite.

class Hostile : public ::testing::Test {
 protected:
  static void SetUpTestSuite();
  static void TearDownTestSuite();
  void SetUp() override;

  // Starts corpus program `name` with stdout (and, when asked, stdin) on pipes, in `sandbox`
  // (default: the suite's).
  absl::StatusOr<std::unique_ptr<Program>> Start(const std::string& name, RunOptions options,
                                                 Sandbox* sandbox = nullptr);

  // Runs corpus program `name` to its end and collects its output. Every run also checks that
  // the program reported no escape and did not refuse to run.
  absl::StatusOr<Outcome> Run(const std::string& name, RunOptions options);

  static void ExpectNoEscape(const Outcome& outcome);
  static void ExpectCleanExit(const Outcome& outcome);
  static void ExpectKilledBy(const Outcome& outcome, int signal, LimitHit limit);

  // No process whose argv holds `marker` is left on the host (waits up to 2 s for exiting
  // ones).
  static void ExpectNoLeftovers(const std::string& marker);

  static Sandbox* sandbox_;
  static absl::Status* create_status_;
};

}  // namespace vault::sandbox::hostile

#endif  // VAULT_SANDBOX_POSIX_HOSTILE_FIXTURE_H_
