// sandbox/container/oci_config: the OCI runtime configuration (config.json of a bundle, runtime
// spec 1.0) of a container agent, written from its limits and the host id its sandbox holds.
//
// What every container gets, whatever its image says (docs/containers.md, "Running"):
//   - the image's unpacked root, read-only; `noNewPrivileges`; no capabilities in any set;
//   - user, PID, mount, IPC, UTS and network namespaces: the container's root is the one host id
//     of its sandbox (a single-id mapping), its network has only loopback;
//   - cgroup limits from Limits: memory (swap included), pids, CPU shares and quota; no devices;
//   - /proc with the usual paths masked or read-only, a private /dev, read-only /sys, and /work
//     and /tmp the folders work/ and tmp/ of `storage_dir` (a tmpfs of Limits::storage_bytes the
//     vault mounted: container_sandbox.h), noexec; /work is the working directory and HOME;
//   - RLIMIT_NOFILE and RLIMIT_FSIZE from Limits.
//   - the process is vault-container-init (init_main.cc, bound read-only at /.vault/init), which
//     installs the posix sandbox's two seccomp filters, read from fd 4, and executes the agent's
//     program. The runtime config carries no seccomp section of its own: an OCI profile cannot
//     express the filters' argument denials (libseccomp lets an allow rule win over a
//     conditional errno rule on the same call, measured with runc 1.1.5).
// The image's root must hold the mount points: /proc, /dev, /sys, /work, /tmp and the file
// /.vault/init (image::PrepareMountPoints makes them at import).
//
//   ContainerSpec c;
//   c.rootfs = "/var/lib/vault/data/rootfs/<hex>";
//   c.init_path = "/usr/lib/vault/vault-container-init";
//   c.args = {"/bin/agent"};
//   c.storage_dir = "/var/lib/vault/data/containers/scratch/c-41-7";
//   c.host_id = 200051;
//   c.cgroups_path = "vault-sandbox/container-a1";
//   VAULT_ASSIGN_OR_RETURN(std::string json, OciConfigJson(c));
//
// Thread-safety: pure functions.
#ifndef VAULT_SANDBOX_CONTAINER_OCI_CONFIG_H_
#define VAULT_SANDBOX_CONTAINER_OCI_CONFIG_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "sandbox/sandbox.h"

namespace vault::sandbox {

struct ContainerSpec {
  std::string rootfs;     // host path of the read-only root
  std::string init_path;  // host path of vault-container-init
  // The agent's program and its arguments: args[0] an absolute path inside, or a name
  // vault-container-init finds on the image's PATH.
  std::vector<std::string> args;
  std::vector<std::string> env;  // "KEY=VALUE"
  std::string cwd = "/work";
  std::string storage_dir;  // host folder holding work/ and tmp/, bound at /work and /tmp
  uint32_t host_id = 0;     // the container's root (uid and gid 0) is this host id
  Limits limits;
  std::string cgroups_path;  // relative: under the runtime's own cgroup, as posix sandboxes are
  std::string hostname = "agent";
  // Host paths bound read-only at the same or another path inside: (host, inside).
  std::vector<std::pair<std::string, std::string>> read_only_binds;
};

// The config.json text. INVALID_ARGUMENT for a spec that cannot run (no args, a relative
// path, no host id, limits out of bounds).
absl::StatusOr<std::string> OciConfigJson(const ContainerSpec& spec);

}  // namespace vault::sandbox

#endif  // VAULT_SANDBOX_CONTAINER_OCI_CONFIG_H_
