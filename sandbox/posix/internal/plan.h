// plan: what the host decides for one sandbox before cloning it, written into a ChildArgs
// (child.h) for the child to carry out.
//
// SystemMountOps is computed once (LinuxSandbox's Init): the system part of every sandbox's
// tree (/usr and the library directories, /etc, /dev, /proc, /work and /tmp). For each Spawn,
// ValidateSpec checks the caller's spec and BuildChildArgs adds the spec's own binds (the code
// directory, the read-only directories), the Landlock rules, the tmpfs options, the rlimits,
// argv and the environment. Only the per-spawn sync socket and status pipe are left for the
// caller to fill in.
//
//   std::vector<MountOp> system_ops = SystemMountOps();
//   VAULT_RETURN_IF_ERROR(ValidateSpec(spec));
//   VAULT_ASSIGN_OR_RETURN(std::unique_ptr<ChildArgs> args,
//                          BuildChildArgs(spec, fences, {&system_ops, &seccomp, init_fd, ...}));
//   args->sync_fd = ...; args->status_fd = ...;
//
// Thread safety: every function here is thread-safe. SystemMountOps and BuildChildArgs read the
// host's filesystem (lstat, readlink, realpath) and write nothing.
#ifndef VAULT_SANDBOX_POSIX_INTERNAL_PLAN_H_
#define VAULT_SANDBOX_POSIX_INTERNAL_PLAN_H_

#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sandbox/posix/fences.h"
#include "sandbox/posix/internal/child.h"
#include "sandbox/posix/seccomp.h"
#include "sandbox/sandbox.h"

namespace vault::sandbox::internal {

// What the host prepared once for all its sandboxes. system_ops is copied; seccomp and init_fd
// are borrowed by the ChildArgs and must outlive it.
struct HostPreparation {
  const std::vector<MountOp>* system_ops = nullptr;  // SystemMountOps()
  const SeccompPrograms* seccomp = nullptr;
  int init_fd = -1;      // O_PATH descriptor of vault-sandbox-init
  int cap_last = 40;     // /proc/sys/kernel/cap_last_cap
  bool cgroups = false;  // the cgroup fences are active (else RLIMIT_AS fences memory)
};

// The mount ops of the system part of every sandbox's tree. Merged-/usr links are copied as
// links; paths missing on this host are left out.
std::vector<MountOp> SystemMountOps();

// InvalidArgument (with the offending value) for bad limits, a program path that is not
// absolute and normalized, a bad name, a NUL in argv or an environment entry not KEY=VALUE.
absl::Status ValidateSpec(const SandboxSpec& spec);

// Everything the child needs but the sync socket and the status pipe (sync_fd, status_fd stay
// -1). `spec` must have passed ValidateSpec. NotFound or InvalidArgument for a code or
// read-only directory that is missing, not a directory, refused (/proc, /sys, /dev, the host's
// root) or that would hide /work, /code, /etc or /tmp.
absl::StatusOr<std::unique_ptr<ChildArgs>> BuildChildArgs(const SandboxSpec& spec,
                                                          const FenceReport& fences,
                                                          const HostPreparation& prepared);

}  // namespace vault::sandbox::internal

#endif  // VAULT_SANDBOX_POSIX_INTERNAL_PLAN_H_
