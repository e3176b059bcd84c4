// linux_sandbox: the "posix" sandbox type, built from Linux primitives.
//
// Every sandbox gets new user, mount, PID, network, IPC, UTS and cgroup namespaces; a fresh
// read-only tmpfs root with read-only binds of /usr and the library directories, the code
// directory at /code, and one quota'd tmpfs for /work and /tmp (the only writable places); its
// own /proc (hidepid) and a minimal /dev; an unconfigured loopback as its only network device;
// no capabilities, no_new_privs, a Landlock ruleset, two seccomp filters and rlimits; a cgroup
// for memory, pids, CPU and the freezer. The program runs under a tiny init
// (vault-sandbox-init, PID 1 of the sandbox) that reaps orphans and reports how it ended.
//
// The order of the setup steps, what runs in the host process and what in the child, is
// written down in docs/sandbox.md.
//
//   LinuxSandboxOptions options;               // defaults: every fence required
//   ASSIGN_OR_RETURN(auto sandbox, LinuxSandbox::Create(options));
//   LOG(INFO) << sandbox->fences().Describe();
//   ASSIGN_OR_RETURN(auto handle, sandbox->Spawn(spec));
//
// Thread safety: as Sandbox (sandbox.h). Create probes the kernel once; Spawn may be called
// from any thread. Handles may outlive the LinuxSandbox: they keep its supervisor running,
// and the supervisor stops (killing what is left) once the last of them is destroyed.
#ifndef VAULT_SANDBOX_POSIX_LINUX_SANDBOX_H_
#define VAULT_SANDBOX_POSIX_LINUX_SANDBOX_H_

#include <sys/types.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "sandbox/posix/fences.h"
#include "sandbox/sandbox.h"

namespace vault::sandbox {

struct LinuxSandboxOptions {
  // The vault-sandbox-init binary. Empty: $VAULT_SANDBOX_INIT, else "vault-sandbox-init" next
  // to the running executable, else in the build tree's sandbox/ folder beside it.
  std::string init_path;
  // Fences that must be active; Create fails with FailedPrecondition naming the missing ones.
  FencePolicy required;
  // When the process runs as root, each sandbox gets its own host uid/gid from this range
  // (inside it is uid/gid 1000). Unprivileged, the sandbox maps to the caller's own uid.
  uid_t host_id_base = 200000;
  uint32_t host_id_count = 65536;
  // Where ids are claimed across processes (one flock'ed file per id in use), as root.
  std::string id_lock_dir = "/run/vault-sandbox/ids";
  // Name of the cgroup folder created under this process's own cgroup, one per controller.
  std::string cgroup_folder = "vault-sandbox";
  // Use the cgroup v2 hierarchy for the freezer even where v1 has one (tests of the v2 path).
  bool prefer_v2_freezer = false;
};

class LinuxSandbox : public Sandbox {
 public:
  static absl::StatusOr<std::unique_ptr<LinuxSandbox>> Create(const LinuxSandboxOptions& options);
  ~LinuxSandbox() override;

  const char* type() const override { return "posix"; }
  // A native program runs as itself; a Python script under the system's python3, with the
  // Python SDK on its path.
  absl::Status SetProgram(const CodeObject& code, SandboxSpec* spec) const override;
  absl::StatusOr<std::unique_ptr<SandboxHandle>> Spawn(const SandboxSpec& spec) override;
  // Which fences are active, probed once by Create.
  const FenceReport& fences() const;

  class Impl;

 private:
  explicit LinuxSandbox(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;
};

}  // namespace vault::sandbox

#endif  // VAULT_SANDBOX_POSIX_LINUX_SANDBOX_H_
