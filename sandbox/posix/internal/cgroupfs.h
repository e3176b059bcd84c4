// cgroupfs: the cgroup filesystem as sandbox/posix/cgroup uses it: the controllers' names, control
// files written and read in one system call each, and what /proc/self/mountinfo and
// /proc/self/cgroup say. Private to sandbox/posix (cgroup.cc, internal/sandbox_cgroup.cc).
//
// Thread safety: every function here is thread-safe.
#ifndef VAULT_SANDBOX_POSIX_INTERNAL_CGROUPFS_H_
#define VAULT_SANDBOX_POSIX_INTERNAL_CGROUPFS_H_

#include <sys/types.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "sandbox/posix/cgroup.h"

namespace vault::sandbox {

inline constexpr int kNumControllers = 5;
inline constexpr std::array<CgroupController, kNumControllers> kAllControllers = {
    CgroupController::kMemory, CgroupController::kPids, CgroupController::kCpu,
    CgroupController::kCpuAcct, CgroupController::kFreezer};

inline int Index(CgroupController controller) { return static_cast<int>(controller); }

// The v1 subsystem name; on v2 the same name for memory, pids and cpu.
const char* ControllerName(CgroupController controller);

// Writes `value` to a cgroup control file in one write(), as the kernel expects. Returns 0 or
// the errno, for callers that react to a specific one (EBUSY); WriteControl converts it.
int WriteControlErrno(const std::string& path, absl::string_view value);
absl::Status WriteControl(const std::string& path, absl::string_view value);
absl::StatusOr<uint64_t> ParseU64(const std::string& path, absl::string_view text);
absl::StatusOr<uint64_t> ReadU64(const std::string& path);
// The value of the "<key> <number>" line of a flat-keyed file (memory.events, cpu.stat, ...).
absl::StatusOr<uint64_t> ReadKeyedU64(const std::string& path, absl::string_view key);
// Reads an optional file: `fallback` when it does not exist (older kernels lack memory.peak).
absl::StatusOr<uint64_t> ReadOptionalU64(const std::string& path, uint64_t fallback);
// The pids in `dir`/cgroup.procs.
absl::StatusOr<std::vector<pid_t>> ReadProcs(const std::string& dir);
// mkdir that accepts an existing directory.
absl::Status MakeDirectory(const std::string& path);

// ---- Parsing /proc/self/mountinfo and /proc/self/cgroup ----

struct CgroupMount {
  int version = 0;   // 1 or 2
  std::string root;  // the cgroup mounted there ("/" normally)
  std::string mountpoint;
  std::vector<std::string> controllers;  // v1: the known controllers in the super options
};

// "36 25 0:32 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:14 - cgroup cgroup rw,cpu,cpuacct"
absl::StatusOr<std::vector<CgroupMount>> ParseMountInfo(const std::string& path,
                                                        absl::string_view text);

struct ProcCgroups {
  std::vector<std::pair<std::string, std::string>> v1;  // controller -> path
  std::optional<std::string> v2;                        // the "0::" line's path

  std::optional<std::string> V1PathOf(absl::string_view controller) const {
    for (const auto& [name, path] : v1) {
      if (name == controller) return path;
    }
    return std::nullopt;
  }
};

// "4:cpu,cpuacct:/user.slice" for v1 hierarchies, "0::/user.slice/x.service" for v2.
absl::StatusOr<ProcCgroups> ParseProcCgroup(const std::string& path, absl::string_view text);

// The directory of `cgroup_path` under a mount of the cgroup `root`, or nullopt when the path
// lies outside what is mounted there.
std::optional<std::string> DirUnderMount(const CgroupMount& mount, const std::string& cgroup_path);

}  // namespace vault::sandbox

#endif  // VAULT_SANDBOX_POSIX_INTERNAL_CGROUPFS_H_
