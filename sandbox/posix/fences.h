// fences: which of the sandbox's kernel fences this machine and this process can raise.
//
// Probed once at start-up (ProbeFences); vaultd logs Describe() and refuses to run agents when
// a fence its policy requires is missing (CheckPolicy).
//
// Thread safety: plain values.
#ifndef VAULT_SANDBOX_POSIX_FENCES_H_
#define VAULT_SANDBOX_POSIX_FENCES_H_

#include <string>

#include "absl/status/status.h"

namespace vault::sandbox {

struct FenceReport {
  bool user_namespaces =
      false;             // unprivileged-style isolation: user+mount+pid+net+ipc+uts+cgroup ns
  bool seccomp = false;  // seccomp filters (SECCOMP_MODE_FILTER)
  int landlock_abi = 0;  // 0: no Landlock; else the kernel's ABI version
  bool cgroup_memory = false;
  bool cgroup_pids = false;
  bool cgroup_cpu = false;
  bool cgroup_freezer = false;
  std::string cgroup_detail;     // e.g. "memory=v1 pids=v1 cpu=v1 cpuacct=v1 freezer=v1"
  bool running_as_root = false;  // root: each sandbox gets its own host uid
  // Unprivileged only: supplementary groups of this process other than its own gid, which a
  // sandbox cannot drop (setgroups is denied in a user namespace mapped without privilege).
  // Non-empty means no agent may run: they would keep access to those groups' files.
  std::string kept_groups;
  std::string warnings;  // why a fence is missing, one line each

  bool cgroups() const { return cgroup_memory && cgroup_pids && cgroup_cpu && cgroup_freezer; }
  // One line per fence: "user namespaces: active", "landlock: active (ABI 7)", ...
  std::string Describe() const;
};

// Which fences must be active. Namespaces and seccomp are always required.
struct FencePolicy {
  bool landlock = true;
  bool cgroups = true;
};

// FailedPrecondition naming every required fence that is missing, and why.
absl::Status CheckPolicy(const FenceReport& report, const FencePolicy& policy);

}  // namespace vault::sandbox

#endif  // VAULT_SANDBOX_POSIX_FENCES_H_
