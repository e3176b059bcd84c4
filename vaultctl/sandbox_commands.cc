// vaultctl sandbox: try a program in exactly the sandbox an agent gets.
//
//   vaultctl sandbox fences
//   vaultctl sandbox run [--memory SIZE] [--cpu-seconds N] [--pids N] [--files N]
//                        [--wall-seconds N] [--storage SIZE] [--work DIR] [--ro DIR]...
//                        -- PROGRAM ARGS...
//
// The sandbox runs inside this vaultctl process (no vault is contacted): it is the same
// library, with the same fences, that vaultd uses for agents.
#include <fcntl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <iostream>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "sandbox/posix/linux_sandbox.h"
#include "vaultctl/commands.h"
#include "vaultctl/output.h"

namespace vault::vaultctl {
namespace {

// Exit codes of `sandbox run` when the program did not decide it (as env(1) and timeout(1)).
constexpr int kExitSandboxFailed = 125;
constexpr int kExitCannotExecute = 126;
constexpr int kExitProgramNotFound = 127;

// "256M", "1G", "4096", "64KiB" -> bytes.
absl::StatusOr<uint64_t> ParseSize(const std::string& flag, const std::string& text) {
  std::string t = absl::AsciiStrToUpper(absl::StripAsciiWhitespace(text));
  uint64_t multiplier = 1;
  for (auto [suffix, factor] :
       std::initializer_list<std::pair<const char*, uint64_t>>{{"KIB", 1ull << 10},
                                                               {"MIB", 1ull << 20},
                                                               {"GIB", 1ull << 30},
                                                               {"TIB", 1ull << 40},
                                                               {"K", 1ull << 10},
                                                               {"M", 1ull << 20},
                                                               {"G", 1ull << 30},
                                                               {"T", 1ull << 40},
                                                               {"B", 1}}) {
    if (absl::EndsWith(t, suffix)) {
      t.resize(t.size() - strlen(suffix));
      multiplier = factor;
      break;
    }
  }
  uint64_t value = 0;
  if (t.empty() || !absl::SimpleAtoi(t, &value) || value > (~0ull) / multiplier) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": \"", text, "\" is not a size (e.g. 4096, 64K, 256M, 2G)"));
  }
  return value * multiplier;
}

// Copies a pipe to one of our descriptors until the writers are gone.
std::thread Relay(int from, int to) {
  return std::thread([from, to] {
    char buf[16 * 1024];
    ssize_t n;
    while ((n = read(from, buf, sizeof buf)) > 0) {
      ssize_t done = 0;
      while (done < n) {
        ssize_t w = write(to, buf + done, static_cast<size_t>(n - done));
        if (w <= 0) break;
        done += w;
      }
    }
    close(from);
  });
}

struct RunOptions {
  std::string memory = "256M";
  uint64_t cpu_seconds = 60;
  uint32_t cpu_percent = 100;
  uint32_t pids = 64;
  uint32_t files = 256;
  std::string file_size = "64M";
  double wall_seconds = 60;
  std::string storage = "64M";
  uint64_t inodes = 4096;
  std::string work;
  std::vector<std::string> ro;
  std::string code;
  std::vector<std::string> env;
  std::vector<std::string> allow_missing;
  std::vector<std::string> command;
};

int RunInSandbox(const RunOptions& o, bool json) {
  sandbox::SandboxSpec spec;
  absl::StatusOr<uint64_t> memory = ParseSize("--memory", o.memory);
  absl::StatusOr<uint64_t> storage = ParseSize("--storage", o.storage);
  absl::StatusOr<uint64_t> file_size = ParseSize("--file-size", o.file_size);
  for (const auto* parsed : {&memory, &storage, &file_size}) {
    if (!parsed->ok()) {
      ReportError(parsed->status(), json);
      return kExitUsage;
    }
  }
  spec.limits.memory_bytes = *memory;
  spec.limits.storage_bytes = *storage;
  spec.limits.max_file_bytes = *file_size;
  spec.limits.storage_inodes = o.inodes;
  spec.limits.cpu_seconds = o.cpu_seconds;
  spec.limits.cpu_percent = o.cpu_percent;
  spec.limits.max_processes = o.pids;
  spec.limits.max_open_files = o.files;
  spec.limits.wall_time = absl::Seconds(o.wall_seconds);
  if (absl::Status valid = sandbox::ValidateLimits(spec.limits); !valid.ok()) {
    ReportError(valid, json);
    return kExitUsage;
  }
  spec.program = o.command[0];
  spec.argv = o.command;
  spec.read_only_dirs = o.ro;
  spec.code_dir = o.code;
  spec.env = o.env;
  spec.name = "vaultctl";

  sandbox::LinuxSandboxOptions options;
  for (const std::string& fence : o.allow_missing) {
    if (fence == "landlock") options.required.landlock = false;
    if (fence == "cgroups") options.required.cgroups = false;
  }
  absl::StatusOr<std::unique_ptr<sandbox::LinuxSandbox>> box =
      sandbox::LinuxSandbox::Create(options);
  if (!box.ok()) {
    ReportError(box.status(), json);
    return kExitSandboxFailed;
  }
  // The program's output goes through pipes: it never holds our terminal (TIOCSTI).
  int out_pipe[2], err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0) {
    ReportError(absl::ErrnoToStatus(errno, "pipe"), json);
    return kExitSandboxFailed;
  }
  spec.stdout_fd = out_pipe[1];
  spec.stderr_fd = err_pipe[1];
  // In JSON mode stdout carries only the report; the program's stdout goes to stderr.
  std::thread relay_out = Relay(out_pipe[0], json ? STDERR_FILENO : STDOUT_FILENO);
  std::thread relay_err = Relay(err_pipe[0], STDERR_FILENO);
  absl::StatusOr<std::unique_ptr<sandbox::SandboxHandle>> handle = (*box)->Spawn(spec);
  close(out_pipe[1]);
  close(err_pipe[1]);
  if (!handle.ok()) {
    relay_out.join();
    relay_err.join();
    ReportError(handle.status(), json);
    if (handle.status().code() == absl::StatusCode::kNotFound &&
        absl::StrContains(handle.status().message(), "cannot execute")) {
      return kExitProgramNotFound;
    }
    if (absl::StrContains(handle.status().message(), "cannot execute")) return kExitCannotExecute;
    return kExitSandboxFailed;
  }
  absl::StatusOr<sandbox::ExitInfo> exit = (*handle)->Wait(absl::InfiniteDuration());
  relay_out.join();
  relay_err.join();
  if (!exit.ok()) {
    ReportError(exit.status(), json);
    return kExitSandboxFailed;
  }
  sandbox::SandboxHandle::CopyStats copied;
  absl::Status copy_status;
  if (!o.work.empty()) {
    absl::StatusOr<sandbox::SandboxHandle::CopyStats> stats = (*handle)->CopyWorkDirTo(o.work);
    if (stats.ok())
      copied = *stats;
    else
      copy_status = stats.status();
  }
  const sandbox::Usage& usage = exit->final_usage;
  if (json) {
    Json report = Json::Object();
    report.Add("exited", exit->exited);
    if (exit->exited)
      report.Add("exit_code", exit->exit_code);
    else
      report.Add("signal", exit->signal);
    report.Add("limit", sandbox::LimitHitName(exit->limit))
        .Add("peak_memory_bytes", usage.memory_peak_bytes)
        .Add("cpu_seconds", absl::StrFormat("%.3f", absl::ToDoubleSeconds(usage.cpu_time)))
        .Add("wall_seconds", absl::StrFormat("%.3f", absl::ToDoubleSeconds(exit->wall_time)))
        .Add("work_bytes", usage.work_bytes)
        .Add("work_inodes", usage.work_inodes);
    if (!o.work.empty()) {
      Json work = Json::Object();
      work.Add("dir", o.work)
          .Add("files", copied.files)
          .Add("bytes", copied.bytes)
          .Add("skipped", copied.skipped);
      if (!copy_status.ok()) work.Add("error", std::string(copy_status.message()));
      report.Add("work", work);
    }
    std::cout << report.ToString() << "\n";
  } else {
    std::cerr << absl::StrFormat(
        "sandbox: %s; peak memory %s, CPU %.2f s, wall %.2f s, work directory %s in %d inodes\n",
        sandbox::DescribeExit(*exit), HumanBytes(usage.memory_peak_bytes),
        absl::ToDoubleSeconds(usage.cpu_time), absl::ToDoubleSeconds(exit->wall_time),
        HumanBytes(usage.work_bytes), usage.work_inodes);
    if (!o.work.empty() && copy_status.ok()) {
      std::cerr << absl::StrFormat(
          "sandbox: copied %d files (%s) to %s; skipped %d links or special files\n", copied.files,
          HumanBytes(copied.bytes), o.work, copied.skipped);
    }
  }
  if (!copy_status.ok()) {
    if (!json) ReportError(copy_status, false);
    return kExitSandboxFailed;
  }
  return exit->exited ? exit->exit_code : 128 + exit->signal;
}

}  // namespace

void AddSandboxCommands(CLI::App& app, GlobalOptions& g, Command& command) {
  static RunOptions o;
  auto* sandbox = app.add_subcommand("sandbox", "Run programs in the agents' sandbox, locally");
  sandbox->require_subcommand(1);

  auto* fences = sandbox->add_subcommand(
      "fences",
      "Show which sandbox fences this machine and user can raise (exit 4 if one is missing)");
  fences->callback([&] {
    command = [&g] {
      sandbox::LinuxSandboxOptions options;
      options.required.landlock = false;
      options.required.cgroups = false;
      absl::StatusOr<std::unique_ptr<sandbox::LinuxSandbox>> box =
          sandbox::LinuxSandbox::Create(options);
      if (!box.ok()) return ReportError(box.status(), g.json());
      const sandbox::FenceReport& report = (*box)->fences();
      absl::Status policy = sandbox::CheckPolicy(report, sandbox::FencePolicy{});
      if (g.json()) {
        std::cout << Json::Object()
                         .Add("namespaces", report.user_namespaces)
                         .Add("seccomp", report.seccomp)
                         .Add("landlock_abi", report.landlock_abi)
                         .Add("cgroup_memory", report.cgroup_memory)
                         .Add("cgroup_pids", report.cgroup_pids)
                         .Add("cgroup_cpu", report.cgroup_cpu)
                         .Add("cgroup_freezer", report.cgroup_freezer)
                         .Add("cgroups", report.cgroup_detail)
                         .Add("root", report.running_as_root)
                         .Add("warnings", report.warnings)
                         .Add("complete", policy.ok())
                         .ToString()
                  << "\n";
      } else {
        std::cout << report.Describe() << "\n";
        if (!policy.ok()) std::cout << policy.message() << "\n";
      }
      return policy.ok() ? kExitOk : kExitRefused;
    };
  });

  auto* run = sandbox->add_subcommand(
      "run",
      "Run PROGRAM in exactly the sandbox an agent gets, and report how it ended.\n"
      "PROGRAM is a path inside the sandbox (/usr and the library folders are there read-only;\n"
      "--ro DIR adds a host folder at the same path, --code DIR mounts one at /code).\n"
      "/work and /tmp are the only writable places, both on one tmpfs of --storage bytes.\n"
      "Exit status: the program's, 128+N when killed by signal N, 125 when the sandbox could\n"
      "not be set up, 126 when PROGRAM cannot be executed, 127 when it does not exist.");
  run->add_option("--memory", o.memory, "Memory limit (cgroup; the OOM killer acts inside only)")
      ->capture_default_str();
  run->add_option("--cpu-seconds", o.cpu_seconds, "CPU time of all processes together")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  run->add_option("--cpu-percent", o.cpu_percent, "CPU share; 100 = one core")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  run->add_option("--pids", o.pids, "Processes and threads")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  run->add_option("--files", o.files, "Open files per process")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  run->add_option("--file-size", o.file_size, "Largest file a process may write")
      ->capture_default_str();
  run->add_option("--wall-seconds", o.wall_seconds, "Wall-clock limit")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  run->add_option("--storage", o.storage, "Size of /work + /tmp")->capture_default_str();
  run->add_option("--inodes", o.inodes, "Files in /work + /tmp")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  run->add_option("--work", o.work,
                  "After the end, copy /work's files to this host folder (empty or new); links\n"
                  "and special files are skipped, nothing is followed");
  run->add_option("--ro", o.ro, "Host folder visible read-only at the same path (repeatable)")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  run->add_option("--code", o.code, "Host folder mounted read-only (executable) at /code");
  run->add_option("--env", o.env, "Extra environment entry KEY=VALUE (repeatable)")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  run->add_option("--allow-missing", o.allow_missing,
                  "Run even without this fence: landlock, cgroups (repeatable; for trying only)")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->check(CLI::IsMember({"landlock", "cgroups"}));
  run->add_option("command", o.command, "-- PROGRAM ARGS...");
  run->callback([&] {
    command = [&g] {
      if (o.command.empty()) o.command = g.after_dashes;
      if (o.command.empty()) {
        ReportError(absl::InvalidArgumentError("sandbox run: give the program after --"), g.json());
        return kExitUsage;
      }
      return RunInSandbox(o, g.json());
    };
  });
}

}  // namespace vault::vaultctl
