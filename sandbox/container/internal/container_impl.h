// container_impl: ContainerSandbox's insides, shared by container_sandbox.cc (Create, SetProgram,
// Spawn) and container_supervisor.cc (the supervisor thread and the handle). Private to
// sandbox/container.
//
// Thread safety: see the annotations; a ContainerState is shared by the supervisor thread and a
// handle.
#ifndef VAULT_SANDBOX_CONTAINER_INTERNAL_CONTAINER_IMPL_H_
#define VAULT_SANDBOX_CONTAINER_INTERNAL_CONTAINER_IMPL_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/folder_lease.h"
#include "common/unique_fd.h"
#include "sandbox/container/container_sandbox.h"
#include "sandbox/container/scratch.h"
#include "sandbox/host_ids.h"
#include "sandbox/posix/cgroup.h"
#include "sandbox/sandbox.h"

namespace vault::sandbox {

// What the supervisor thread and a handle share about one container.
struct ContainerState {
  std::string id;  // the runtime's container id, also the cgroup's and the bundle's name
  Limits limits;
  absl::Time started;
  std::function<void(const ExitInfo&)> on_exit;
  common::UniqueFd report;   // vault-container-init's report pipe (its end of file: the end)
  std::string report_text;   // what it said so far (supervisor only, after Spawn)
  common::UniqueFd work_fd;  // O_PATH of the scratch's work/ (keeps the tmpfs alive)
  std::unique_ptr<Cgroup> cgroup;
  int host_slot = -1;
  absl::Time next_cpu_check;  // supervisor only

  absl::Mutex mu;
  bool done ABSL_GUARDED_BY(mu) = false;
  bool paused ABSL_GUARDED_BY(mu) = false;
  bool kill_requested ABSL_GUARDED_BY(mu) = false;
  // Its handle is gone before it ended (a kill that timed out): the supervisor forgets it once
  // it is reaped and released.
  bool orphaned ABSL_GUARDED_BY(mu) = false;
  LimitHit limit ABSL_GUARDED_BY(mu) = LimitHit::kNone;
  absl::Time deadline ABSL_GUARDED_BY(mu);
  absl::Time paused_at ABSL_GUARDED_BY(mu);
  ExitInfo exit ABSL_GUARDED_BY(mu);
};

class ContainerSandbox::Impl : public std::enable_shared_from_this<ContainerSandbox::Impl> {
 public:
  ~Impl();
  absl::Status Init(const ContainerSandboxOptions& options);
  absl::Status SetProgram(const CodeObject& code, SandboxSpec* spec) const;
  absl::StatusOr<std::unique_ptr<SandboxHandle>> Spawn(const SandboxSpec& spec);
  const std::string& description() const { return description_; }

  // Kills every process of the container (thawed if frozen) and records why.
  void Signal(const std::shared_ptr<ContainerState>& state, LimitHit limit, bool requested);
  void Unregister(const std::shared_ptr<ContainerState>& state);
  void Wake();
  // runc <args...> with the runtime's --root; its output on failure.
  absl::StatusOr<std::string> Runtime(const std::vector<std::string>& args,
                                      const std::vector<std::pair<int, int>>& fds = {},
                                      absl::Duration timeout = absl::Seconds(30)) const;
  // Deletes the container from the runtime's state, removes its bundle and gives its host id
  // back (after it ended, or when its start failed).
  void Release(const std::shared_ptr<ContainerState>& state);

 private:
  void SupervisorLoop();
  void Reap(const std::shared_ptr<ContainerState>& state);
  void EnforceLimits(const std::shared_ptr<ContainerState>& state, absl::Time now,
                     absl::Time* next);
  // Deletes what a previous process left in the state folder.
  void RemoveStale();

  ContainerSandboxOptions options_;
  std::string runtime_;  // absolute path
  std::string description_;
  std::string runc_root_, bundles_, scratch_;
  common::FolderLease init_lease_;
  std::string init_path_;         // the staged vault-container-init
  std::string seccomp_programs_;  // SerializeSeccompPrograms
  std::unique_ptr<CgroupManager> cgroups_;
  std::unique_ptr<HostIdPool> host_ids_;
  int64_t cpus_ = 1;

  common::UniqueFd epoll_;
  common::UniqueFd wake_;
  std::thread supervisor_;

  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::flat_hash_map<int, std::shared_ptr<ContainerState>> live_ ABSL_GUARDED_BY(mu_);  // by fd
};

std::unique_ptr<SandboxHandle> NewContainerHandle(std::shared_ptr<ContainerSandbox::Impl> impl,
                                                  std::shared_ptr<ContainerState> state);

}  // namespace vault::sandbox

#endif  // VAULT_SANDBOX_CONTAINER_INTERNAL_CONTAINER_IMPL_H_
