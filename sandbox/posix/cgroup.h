// cgroup: one control group per sandbox, for memory, pids, CPU and the freezer, on cgroup v1,
// v2, or a hybrid of both.
//
// Detect() reads /proc/self/mountinfo and /proc/self/cgroup once and decides, controller by
// controller, where it lives: a v1 hierarchy that has it, else the v2 hierarchy when its
// cgroup.controllers lists it (the v2 freezer and kill are core files, cgroup.freeze and
// cgroup.kill, present in every non-root v2 cgroup). Sandboxes are created under
// "<this process's cgroup>/<folder>/<name>" in each hierarchy used. A controller whose folder
// cannot be created (read-only cgroupfs, no permission, no delegation) is reported missing
// with the reason, never silently skipped.
//
//   ASSIGN_OR_RETURN(auto manager, CgroupManager::Detect({}));
//   ASSIGN_OR_RETURN(auto cg, manager->Create("sb-1", {.memory_bytes = 64 << 20,
//                                                       .max_pids = 32, .cpu_percent = 100}));
//   RETURN_IF_ERROR(cg->AddProcess(pid));
//   RETURN_IF_ERROR(cg->Freeze());
//
// Thread safety: CgroupManager is immutable after Detect and may be shared. A Cgroup may be
// used from several threads; its operations are single file writes/reads.
#ifndef VAULT_SANDBOX_POSIX_CGROUP_H_
#define VAULT_SANDBOX_POSIX_CGROUP_H_

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace vault::sandbox {

enum class CgroupController { kMemory, kPids, kCpu, kCpuAcct, kFreezer };

struct CgroupLimits {
  uint64_t memory_bytes = 0;  // memory limit; swap is limited to 0 where the file exists
  uint32_t max_pids = 0;      // pids.max
  uint32_t cpu_percent = 0;   // CFS quota: 100 = one core per 100 ms period
};

struct CgroupReadings {
  uint64_t memory_current = 0;  // bytes
  uint64_t memory_peak = 0;     // bytes (v1 max_usage_in_bytes, v2 memory.peak)
  uint64_t cpu_usage_ns = 0;    // cpuacct.usage (v1) or cpu.stat usage_usec*1000 (v2)
  uint32_t pids_current = 0;
  uint64_t oom_kills = 0;  // v1 memory.oom_control "oom_kill", v2 memory.events "oom_kill"
};

// Where Cgroup::EnterCallingThread took a thread from: the v1 "tasks" files that take it back
// (ReturnCallingThread).
struct ThreadReturn {
  std::vector<std::string> home_tasks;
  // Where to go instead when a home refuses the thread (an unprivileged vaultd whose own cgroup
  // is not writable, only its delegated folder): that folder, which is never frozen or killed.
  std::vector<std::string> fallback_tasks;
};

// Moves the calling thread back where EnterCallingThread found it (or to the fallback), in
// every hierarchy it left. A thread that cannot leave aborts the process: left inside, it would
// be frozen and killed with the sandbox (a v1 kill lists the whole process's pid).
void ReturnCallingThread(const ThreadReturn& back);

class Cgroup {
 public:
  virtual ~Cgroup() = default;  // best-effort Remove()
  // Moves `pid` (the whole process) into this cgroup in every hierarchy used.
  virtual absl::Status AddProcess(pid_t pid) = 0;
  // Placement at birth, without AddProcess's cost on cgroup v1. A v1 cgroup.procs write takes
  // the kernel's global threadgroup lock for writing, which waits for an RCU grace period (5-20
  // ms on an idle machine; see docs/sandbox.md). A thread that writes "0" to a v1 "tasks" file
  // moves only itself and skips that lock. So: EnterCallingThread moves the calling thread alone
  // into this cgroup in every v1 hierarchy used; a process it clones then starts inside them;
  // ReturnCallingThread takes it back at once (nothing else may happen in between: while inside,
  // the thread is frozen, limited and killed with this cgroup). AddClonedProcess then moves the
  // clone into the rest (the v2 hierarchy, where a thread cannot move alone), if any.
  // Nothing is left moved on failure (the process aborts if it cannot take the thread back).
  virtual absl::StatusOr<ThreadReturn> EnterCallingThread() = 0;
  virtual absl::Status AddClonedProcess(pid_t pid) = 0;
  // Freezes / thaws every task; Freeze returns once the kernel reports the group frozen
  // (DeadlineExceeded after 2 s).
  virtual absl::Status Freeze() = 0;
  virtual absl::Status Thaw() = 0;
  // SIGKILLs every task (v2 cgroup.kill; v1: freeze, kill each pid in cgroup.procs, thaw),
  // and returns once cgroup.procs is empty (DeadlineExceeded after 5 s).
  virtual absl::Status KillAll() = 0;
  // The host pids of its tasks now.
  virtual absl::StatusOr<std::set<pid_t>> Tasks() const = 0;
  virtual absl::StatusOr<CgroupReadings> Read() const = 0;
  // cpu_usage_ns alone, from a descriptor kept open (the supervisor reads it ten times a
  // second for every sandbox). NotFound when the CPU accounting controller is missing.
  virtual absl::StatusOr<uint64_t> CpuUsageNs() const = 0;
  // Removes the cgroup folders (retries EBUSY for up to 2 s while exiting tasks leave).
  virtual absl::Status Remove() = 0;
};

class CgroupManager {
 public:
  struct Options {
    std::string folder = "vault-sandbox";
    bool prefer_v2_freezer = false;
    // For tests: read these instead of /proc/self/{mountinfo,cgroup}. Empty: the real ones.
    std::string mountinfo_path;
    std::string cgroup_path;
  };
  static absl::StatusOr<std::unique_ptr<CgroupManager>> Detect(const Options& options);
  virtual ~CgroupManager() = default;

  virtual bool Has(CgroupController controller) const = 0;
  // "memory=v1 pids=v1 cpu=v1 cpuacct=v1 freezer=v1" (missing ones as "memory=missing").
  virtual std::string Describe() const = 0;
  // One line per missing controller: why.
  virtual std::string Warnings() const = 0;
  // Creates "<folder>/<name>" in every hierarchy used and writes the limits for the controllers
  // present. AlreadyExists if it exists; InvalidArgument for a name outside [A-Za-z0-9._-]{1,64}.
  virtual absl::StatusOr<std::unique_ptr<Cgroup>> Create(const std::string& name,
                                                         const CgroupLimits& limits) const = 0;
  // Removes empty cgroups left in <folder> by a previous process (after a crash), among those
  // `is_stale` accepts (all when it is empty: only safe when no other process shares the
  // folder). Returns how many were removed.
  virtual int RemoveStale(const std::function<bool(const std::string&)>& is_stale = {}) const = 0;
};

}  // namespace vault::sandbox

#endif  // VAULT_SANDBOX_POSIX_CGROUP_H_
