// bench/agent_bench_sandbox: the LinuxSandbox-alone baseline of agent_bench's spawn rate, and
// the cleanup of the cgroup folder it leaves under this process's cgroup.
#include "bench/agent_bench_sandbox.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "bench/agent_bench_util.h"
#include "bench/bench_util.h"
#include "sandbox/channel.h"
#include "sandbox/posix/linux_sandbox.h"
#include "sandbox/sandbox.h"

namespace vault::bench {
namespace {

// rmdir of the (empty) cgroup folder LinuxSandbox made under this process's cgroup, per
// controller; rmdir removes nothing else.
void RemoveCgroupFolders(const std::string& folder) {
  for (absl::string_view line : absl::StrSplit(ReadAll("/proc/self/cgroup"), '\n')) {
    std::vector<std::string> f = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (f.size() != 3) continue;
    std::vector<std::string> dirs;
    if (f[1].empty()) {
      dirs = {"/sys/fs/cgroup/unified", "/sys/fs/cgroup"};
    } else {
      for (absl::string_view c : absl::StrSplit(f[1], ',')) {
        absl::string_view name = c;
        absl::ConsumePrefix(&name, "name=");
        dirs.push_back(absl::StrCat("/sys/fs/cgroup/", name));
      }
      dirs.push_back(absl::StrCat("/sys/fs/cgroup/", f[1]));
    }
    for (const std::string& d : dirs) {
      std::string path = absl::StrCat(d, f[2] == "/" ? "" : f[2], "/", folder);
      rmdir(path.c_str());
    }
  }
}

}  // namespace

absl::StatusOr<SandboxRate> MeasureSandbox(const std::string& guest, const std::string& tmp,
                                           int spawns, int clients) {
  const std::string dir = tmp + "/sandbox-code";
  std::filesystem::create_directory(dir);
  chmod(dir.c_str(), 0755);
  std::error_code ec;
  std::filesystem::copy_file(guest, dir + "/guest", ec);
  if (ec) return absl::NotFoundError(absl::StrCat("copying ", guest, ": ", ec.message()));
  chmod((dir + "/guest").c_str(), 0755);
  sandbox::LinuxSandboxOptions options;
  options.cgroup_folder = "agent-bench-sandbox";
  absl::StatusOr<std::unique_ptr<sandbox::LinuxSandbox>> sb =
      sandbox::LinuxSandbox::Create(options);
  if (!sb.ok()) return sb.status();
  sandbox::SandboxSpec spec;
  spec.program = "/code/guest";
  spec.argv = {"guest"};
  spec.code_dir = dir;
  spec.name = "agent-bench";
  spec.limits.wall_time = absl::Seconds(30);
  auto one = [&](int, int) -> absl::Status {
    absl::StatusOr<sandbox::Channel::PairResult> pair = sandbox::Channel::Pair();
    if (!pair.ok()) return pair.status();
    sandbox::SandboxSpec s = spec;
    s.channel_fd = pair->guest_fd;
    absl::StatusOr<std::unique_ptr<sandbox::SandboxHandle>> h = (*sb)->Spawn(s);
    close(pair->guest_fd);
    if (!h.ok()) return h.status();
    absl::StatusOr<std::string> frame = pair->host.ReadFrame(absl::Seconds(10));
    if (!frame.ok()) return frame.status();
    absl::StatusOr<sandbox::ExitInfo> e = (*h)->Wait(absl::Seconds(10));
    return e.status();
  };
  SandboxRate r;
  (void)RunFanout(10, 1, one);  // warm-up
  Fanout serial = RunFanout(std::max(20, spawns / 4), 1, one);
  Fanout par = RunFanout(spawns, clients, one);
  r.rate_serial = static_cast<double>(serial.ms.size()) / serial.wall_s;
  r.rate_parallel = static_cast<double>(par.ms.size()) / par.wall_s;
  r.serial_ms = Summarize(serial.ms);
  r.parallel_ms = Summarize(par.ms);
  r.failures = serial.failures + par.failures;
  r.error = serial.first_error.empty() ? par.first_error : serial.first_error;
  sb->reset();
  RemoveCgroupFolders(options.cgroup_folder);
  return r;
}

}  // namespace vault::bench
