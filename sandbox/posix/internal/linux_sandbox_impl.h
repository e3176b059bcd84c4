// linux_sandbox_impl: LinuxSandbox's insides, shared by its parts: linux_sandbox.cc (Create, Init:
// the fences probed), internal/launch.cc (Spawn: the clone and the child's setup, seen from the
// host), internal/supervisor.cc (reaping and the wall-time and CPU limits) and internal/handle.cc
// (a SandboxHandle: pause, resume, kill, wait, usage). Private to sandbox/posix.
//
// Thread safety: see the annotations; a SandboxState is shared by the supervisor thread and a
// handle.
#ifndef VAULT_SANDBOX_POSIX_INTERNAL_LINUX_SANDBOX_IMPL_H_
#define VAULT_SANDBOX_POSIX_INTERNAL_LINUX_SANDBOX_IMPL_H_

#include <signal.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/unique_fd.h"
#include "sandbox/host_ids.h"
#include "sandbox/posix/cgroup.h"
#include "sandbox/posix/fences.h"
#include "sandbox/posix/internal/child.h"
#include "sandbox/posix/linux_sandbox.h"
#include "sandbox/posix/seccomp.h"
#include "sandbox/sandbox.h"

namespace vault::sandbox {

inline constexpr absl::Duration kCpuPollInterval = absl::Milliseconds(100);

// glibc 2.36's <sys/pidfd.h> lacks extern "C"; the system call is simple enough.
inline int SendSignal(int pidfd, int sig, siginfo_t* info, unsigned flags) {
  return static_cast<int>(syscall(SYS_pidfd_send_signal, pidfd, sig, info, flags));
}

inline absl::Status Errno(int err, absl::string_view what) {
  return absl::ErrnoToStatus(err, what);
}

// What the supervisor thread and a handle share about one sandbox.
struct SandboxState {
  std::string id;
  Limits limits;
  absl::Time started;
  std::function<void(const ExitInfo&)> on_exit;
  common::UniqueFd pidfd;
  pid_t pid = -1;
  common::UniqueFd status_fd;  // init's report pipe
  common::UniqueFd work_fd;    // O_PATH of /work inside (keeps the tmpfs alive)
  std::unique_ptr<Cgroup> cgroup;
  int uid_slot = -1;
  bool missing_from_epoll = false;  // its pidfd could not join the epoll set (set once)
  absl::Time next_cpu_check;        // the supervisor's next CPU reading (supervisor only)
  // The clone child's stack (it shares our memory until it executes); freed once the child has
  // executed the init or died.
  void* clone_stack ABSL_GUARDED_BY(mu) = nullptr;

  absl::Mutex mu;
  bool done ABSL_GUARDED_BY(mu) = false;
  bool paused ABSL_GUARDED_BY(mu) = false;
  bool kill_requested ABSL_GUARDED_BY(mu) = false;
  LimitHit limit ABSL_GUARDED_BY(mu) = LimitHit::kNone;
  absl::Time deadline ABSL_GUARDED_BY(mu);
  absl::Time paused_at ABSL_GUARDED_BY(mu);
  ExitInfo exit ABSL_GUARDED_BY(mu);
};

// Unmaps the clone child's stack, once it has executed the init or died (internal/launch.cc).
void ReleaseCloneStack(SandboxState& state);

class LinuxSandbox::Impl : public std::enable_shared_from_this<LinuxSandbox::Impl> {
 public:
  ~Impl();
  absl::Status Init(const LinuxSandboxOptions& options);
  absl::StatusOr<std::unique_ptr<SandboxHandle>> Spawn(const SandboxSpec& spec);
  const FenceReport& fences() const { return fences_; }

  // Sends SIGKILL to the sandbox (thawing it if frozen) and records why.
  void Signal(const std::shared_ptr<SandboxState>& state, LimitHit limit, bool requested);
  void Unregister(const std::shared_ptr<SandboxState>& state);
  // The supervisor's next scan comes at `at` at the latest.
  void ScanBy(absl::Time at);

 private:
  struct CloneRequest {
    internal::ChildArgs* args;
    Cgroup* cgroup = nullptr;  // the child starts in it (see Cgroup::EnterCallingThread)
    bool root_mode;
    uid_t host_uid;
    gid_t host_gid;
    int sync_parent_fd = -1;
    void* stack = nullptr;         // the child's stack, in this process's memory (CLONE_VM)
    common::UniqueFd sync_parent;  // results: the host's ends, once the child runs
    common::UniqueFd status_read;
    // Results.
    absl::Status status;
    pid_t pid = -1;
    int pidfd = -1;
    bool finished = false;
  };

  void SupervisorLoop();
  void DoClone(CloneRequest& request);
  void Reap(const std::shared_ptr<SandboxState>& state);
  void Wake();

  LinuxSandboxOptions options_;
  FenceReport fences_;
  std::unique_ptr<CgroupManager> cgroups_;
  SeccompPrograms seccomp_;
  std::string init_path_;
  common::UniqueFd init_fd_;
  std::vector<internal::MountOp> system_ops_;  // /usr, /lib..., /etc/ld.so.cache, /dev
  int cap_last_ = 40;
  int64_t cpus_ = std::max<int64_t>(1, sysconf(_SC_NPROCESSORS_ONLN));
  uid_t self_uid_ = 0;
  gid_t self_gid_ = 0;

  common::UniqueFd epoll_;
  common::UniqueFd wake_;
  std::thread supervisor_;

  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<CloneRequest*> clone_queue_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<int, std::shared_ptr<SandboxState>> live_ ABSL_GUARDED_BY(mu_);  // by pidfd
  // When the supervisor next looks at every live sandbox (see SupervisorLoop).
  absl::Time scan_at_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  int missing_from_epoll_ ABSL_GUARDED_BY(mu_) = 0;
  // Host ids, claimed across processes by a flock on <id_lock_dir>/<uid>: two vaults on one host
  // never give two live sandboxes the same host uid, and a crashed process's claims vanish with it.
  std::unique_ptr<HostIdPool> host_ids_;
};

// The handle Spawn returns for `state` (internal/handle.cc). It keeps `impl` alive; its destructor
// kills the sandbox and unregisters it.
std::unique_ptr<SandboxHandle> NewLinuxSandboxHandle(std::shared_ptr<LinuxSandbox::Impl> impl,
                                                     std::shared_ptr<SandboxState> state);

}  // namespace vault::sandbox

#endif  // VAULT_SANDBOX_POSIX_INTERNAL_LINUX_SANDBOX_IMPL_H_
