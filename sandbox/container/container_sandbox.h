// sandbox/container/container_sandbox: the "container" sandbox type. An agent's code is an OCI
// image the vault imported (image/image_store.h): its manifest digest is the agent's code digest,
// and the agent runs from the image's unpacked, read-only root under an OCI runtime (runc) with
// every fence the runtime config names (oci_config.h): user, PID, mount, IPC, UTS and network
// namespaces, no capabilities, noNewPrivileges, the posix sandbox's seccomp filters (installed by
// vault-container-init), cgroup limits. docs/containers.md says what an agent sees.
//
// One container's life, seen from the host:
//   1. a host id (host_ids.h), a cgroup (posix/cgroup.h: the vault reads and freezes it
//      itself), and the scratch tmpfs for /work and /tmp (scratch.h);
//   2. the bundle's config.json, then `runc create` with fd 3 the host-call channel, fd 4 the
//      seccomp programs and fd 5 the init's report pipe (--preserve-fds 3), stdio passed through;
//   3. `runc start`; Spawn returns once vault-container-init reports the program executed;
//   4. the end is the report pipe's end of file (the init exits when the program does, and every
//      process of the container dies with it); the supervisor thread reads the last report and
//      the cgroup's final readings, then `runc delete`s the container.
// Pause and resume are the cgroup freezer's; kill is the cgroup's (every task, frozen or not).
// Wall time and total CPU time are enforced by the supervisor thread, as for posix sandboxes.
// Containers a previous process left (a crashed vaultd) are deleted at Create.
//
//   ContainerSandboxOptions options;
//   options.state_dir = "/var/lib/vault/data/containers";
//   options.images = [&](const std::string& hex) { return ImageToRun(hex); };
//   ASSIGN_OR_RETURN(auto containers, ContainerSandbox::Create(options));
//   types.Add(containers.get());
//
// Thread safety: as Sandbox (sandbox.h). Handles may outlive the ContainerSandbox.
#ifndef VAULT_SANDBOX_CONTAINER_CONTAINER_SANDBOX_H_
#define VAULT_SANDBOX_CONTAINER_CONTAINER_SANDBOX_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "sandbox/sandbox.h"

namespace vault::sandbox {

// What the vault knows of an image to run it (from its record, image.proto's ImageRecord).
struct ContainerImage {
  std::string rootfs;  // host path of the unpacked root
  std::vector<std::string> entrypoint;
  std::vector<std::string> cmd;
  std::vector<std::string> env;  // "KEY=VALUE"
  std::string working_dir;       // "": /work
};

struct ContainerSandboxOptions {
  // The OCI runtime: a path, or a name looked up on PATH. Only runc's command line is spoken.
  std::string runtime = "runc";
  // The type's own folder: runc's state (runc/), the bundles (bundles/) and the scratch mounts
  // (scratch/). Made if missing; every folder above it must be searchable by others (the
  // containers' host ids reach their scratch through it), as must those above image roots.
  std::string state_dir;
  // vault-container-init, staged where the containers' host ids reach it (runner_files.h).
  // "": found like the interpreters' runners ($VAULT_CONTAINER_INIT_DIR, beside the executable:
  // ../sandbox/container, ...), staged under `stage_root`.
  std::string init_dir;
  std::string stage_root = "/var/lib/vault-sandbox/runners";
  // Host ids of the containers' root, claimed machine-wide through `id_lock_dir` (host_ids.h).
  // Apart from the posix sandboxes' (200000 + 65536 by default).
  uint32_t host_id_base = 300000;
  uint32_t host_id_count = 65536;
  std::string id_lock_dir = "/run/vault-sandbox/ids";
  // The cgroup folder under this process's own cgroup, one per controller.
  std::string cgroup_folder = "vault-container";
  // Other folders the containers' host ids must reach (where the image roots are): checked as
  // state_dir is.
  std::vector<std::string> reachable;
  // The image whose manifest is the CAS object of SHA-256 `hex` (lowercase) and `size` bytes:
  // NOT_FOUND naming the fix when the vault has no such image. Required.
  std::function<absl::StatusOr<ContainerImage>(const std::string& hex, uint64_t size)> images;
};

class ContainerSandbox : public Sandbox {
 public:
  // FAILED_PRECONDITION, naming the fix, when containers cannot run here: not root, no runtime,
  // a cgroup controller missing, a folder the host ids cannot reach.
  static absl::StatusOr<std::unique_ptr<ContainerSandbox>> Create(
      const ContainerSandboxOptions& options);
  ~ContainerSandbox() override;

  const char* type() const override { return "container"; }
  // The code object is an image (its manifest digest): the program is code.command, else the
  // image's entrypoint and cmd; the image's environment and working directory come with it.
  absl::Status SetProgram(const CodeObject& code, SandboxSpec* spec) const override;
  absl::StatusOr<std::unique_ptr<SandboxHandle>> Spawn(const SandboxSpec& spec) override;
  // "runc 1.1.5 (/usr/sbin/runc), cgroups memory=v1 ..., state in DIR".
  const std::string& description() const;

  class Impl;

 private:
  explicit ContainerSandbox(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;
};

}  // namespace vault::sandbox

#endif  // VAULT_SANDBOX_CONTAINER_CONTAINER_SANDBOX_H_
