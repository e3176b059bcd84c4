#include "sandbox/posix/linux_sandbox.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#endif

#include <algorithm>
#include <atomic>
#include <cstring>
#include <deque>
#include <filesystem>
#include <functional>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "common/status_macros.h"
#include "common/unique_fd.h"
#include "sandbox/posix/cgroup.h"
#include "sandbox/posix/internal/child.h"
#include "sandbox/posix/internal/plan.h"
#include "sandbox/posix/internal/work_dir.h"
#include "sandbox/posix/landlock.h"
#include "sandbox/posix/seccomp.h"
#include "spdlog/spdlog.h"

namespace vault::sandbox {
namespace {

using internal::ChildArgs;
using internal::ChildError;
using internal::ChildMain;
using internal::kInsideId;
using internal::kStepBind;
using internal::kStepLandlock;
using internal::kStepMkdir;
using internal::kStepMountAttr;
using internal::kStepSymlink;
using internal::kStepTouch;
using internal::kStepWriteFile;
using internal::MountOp;
using internal::StepName;

constexpr absl::Duration kSetupTimeout = absl::Seconds(10);
constexpr absl::Duration kCpuPollInterval = absl::Milliseconds(100);
// The longest wait between two CPU readings of a sandbox far from its limit (see SupervisorLoop).
constexpr absl::Duration kCpuPollMax = absl::Seconds(5);

using common::UniqueFd;

// glibc 2.36's <sys/pidfd.h> lacks extern "C"; the system call is simple enough.
int SendSignal(int pidfd, int sig, siginfo_t* info, unsigned flags) {
  return static_cast<int>(syscall(SYS_pidfd_send_signal, pidfd, sig, info, flags));
}

absl::Status Errno(int err, absl::string_view what) { return absl::ErrnoToStatus(err, what); }

absl::Status WriteProcFile(pid_t pid, const char* name, absl::string_view contents) {
  std::string path = absl::StrCat("/proc/", pid, "/", name);
  UniqueFd fd(open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (fd.get() < 0) return Errno(errno, absl::StrCat("open ", path));
  if (write(fd.get(), contents.data(), contents.size()) != static_cast<ssize_t>(contents.size())) {
    return Errno(errno, absl::StrCat("write ", path, " <- \"", contents, "\""));
  }
  return absl::OkStatus();
}

// The child's go-ahead: the byte 'G' with the descriptor of its oom_score_adj (SCM_RIGHTS).
absl::Status SendGo(int sync_fd, int oom_score_adj_fd) {
  char byte = 'G';
  iovec iov{&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
  cmsg->cmsg_level = SOL_SOCKET;
  cmsg->cmsg_type = SCM_RIGHTS;
  cmsg->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(cmsg), &oom_score_adj_fd, sizeof oom_score_adj_fd);
  if (sendmsg(sync_fd, &msg, MSG_NOSIGNAL) != 1) return Errno(errno, "signal the sandbox child");
  return absl::OkStatus();
}

std::string ReadSmallFile(const char* path) {
  std::string out;
  UniqueFd fd(open(path, O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return out;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd.get(), buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  return out;
}

absl::StatusOr<std::string> FindInit(const std::string& configured) {
  std::vector<std::string> candidates;
  if (!configured.empty()) {
    candidates.push_back(configured);
  } else {
    if (const char* env = getenv("VAULT_SANDBOX_INIT"); env != nullptr && *env != '\0') {
      candidates.push_back(env);
    } else {
      std::error_code ec;
      std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
      if (!ec) {
        std::filesystem::path dir = self.parent_path();
        candidates.push_back((dir / "vault-sandbox-init").string());
        candidates.push_back((dir / "../sandbox/vault-sandbox-init").string());
        candidates.push_back((dir / "../../sandbox/vault-sandbox-init").string());
        candidates.push_back((dir / "../libexec/vault/vault-sandbox-init").string());
      }
    }
  }
  for (const std::string& candidate : candidates) {
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return absl::NotFoundError(
      absl::StrCat("vault-sandbox-init not found (looked at: ", absl::StrJoin(candidates, ", "),
                   "); set VAULT_SANDBOX_INIT or install it beside the executable"));
}

constexpr size_t kCloneStackSize = 256 * 1024;

// Under AddressSanitizer the clone child (which shares our memory, CLONE_VM) poisons and
// unpoisons the shadow of its stack frames as it runs; a later mapping at the same address must
// not inherit that state.
void UnpoisonCloneStack(void* stack) {
#if defined(__SANITIZE_ADDRESS__)
  __asan_unpoison_memory_region(stack, kCloneStackSize);
#else
  (void)stack;
#endif
}

// Sandbox ids are "<name>-<pid>-<n>", n counted per process: every LinuxSandbox of a process
// shares the cgroup folder, so their ids must not collide.
std::atomic<uint64_t>& SandboxCounter() {
  static std::atomic<uint64_t> counter{0};
  return counter;
}

bool ProbeUserNamespaces(std::string* why) {
  alignas(16) static char stack[64 * 1024];
  pid_t pid = clone([](void*) -> int { _exit(0); }, stack + sizeof stack,
                    CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC |
                        CLONE_NEWUTS | CLONE_NEWCGROUP | SIGCHLD,
                    nullptr);
  if (pid < 0) {
    *why = absl::StrCat("namespaces: clone failed: ", strerror(errno),
                        " (user namespaces disabled? see /proc/sys/user/max_user_namespaces)");
    return false;
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

}  // namespace

// ---------------------------------------------------------------------------------------------

// What the supervisor thread and a handle share about one sandbox.
struct SandboxState {
  std::string id;
  Limits limits;
  absl::Time started;
  std::function<void(const ExitInfo&)> on_exit;
  UniqueFd pidfd;
  pid_t pid = -1;
  UniqueFd status_fd;  // init's report pipe
  UniqueFd work_fd;    // O_PATH of /work inside (keeps the tmpfs alive)
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

void ReleaseCloneStack(SandboxState& state) {
  absl::MutexLock lock(&state.mu);
  if (state.clone_stack != nullptr) {
    UnpoisonCloneStack(state.clone_stack);
    munmap(state.clone_stack, kCloneStackSize);
  }
  state.clone_stack = nullptr;
}

class LinuxSandbox::Impl : public std::enable_shared_from_this<LinuxSandbox::Impl> {
 public:
  ~Impl();
  absl::Status Init(const LinuxSandboxOptions& options);
  absl::StatusOr<std::unique_ptr<SandboxHandle>> Spawn(const SandboxSpec& spec);
  const FenceReport& fences() const { return fences_; }

  // Sends SIGKILL to the sandbox (thawing it if frozen) and records why.
  void Signal(const std::shared_ptr<SandboxState>& state, LimitHit limit, bool requested);
  void Unregister(const std::shared_ptr<SandboxState>& state);

 private:
  struct CloneRequest {
    ChildArgs* args;
    Cgroup* cgroup = nullptr;  // the child starts in it (see Cgroup::EnterCallingThread)
    bool root_mode;
    uid_t host_uid;
    gid_t host_gid;
    int sync_parent_fd = -1;
    void* stack = nullptr;  // the child's stack, in this process's memory (CLONE_VM)
    UniqueFd sync_parent;   // results: the host's ends, once the child runs
    UniqueFd status_read;
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
  int AllocateSlot();
  void ReleaseSlot(int slot);

  LinuxSandboxOptions options_;
  FenceReport fences_;
  std::unique_ptr<CgroupManager> cgroups_;
  SeccompPrograms seccomp_;
  std::string init_path_;
  UniqueFd init_fd_;
  std::vector<MountOp> system_ops_;  // /usr, /lib..., /etc/ld.so.cache, /dev
  int cap_last_ = 40;
  int64_t cpus_ = std::max<int64_t>(1, sysconf(_SC_NPROCESSORS_ONLN));
  uid_t self_uid_ = 0;
  gid_t self_gid_ = 0;

  UniqueFd epoll_;
  UniqueFd wake_;
  std::thread supervisor_;

  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<CloneRequest*> clone_queue_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<int, std::shared_ptr<SandboxState>> live_ ABSL_GUARDED_BY(mu_);  // by pidfd
  // When the supervisor next looks at every live sandbox (see SupervisorLoop).
  absl::Time scan_at_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  int missing_from_epoll_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<int, int> used_slots_ ABSL_GUARDED_BY(mu_);  // slot -> its lock fd
  std::string id_lock_dir_;
  int next_slot_ ABSL_GUARDED_BY(mu_) = 0;
};

namespace {

class LinuxSandboxHandle : public SandboxHandle {
 public:
  LinuxSandboxHandle(std::shared_ptr<LinuxSandbox::Impl> impl, std::shared_ptr<SandboxState> state)
      : impl_(std::move(impl)), state_(std::move(state)) {}
  ~LinuxSandboxHandle() override {
    absl::Status killed = Kill();
    if (!killed.ok()) spdlog::warn("sandbox {}: {}", state_->id, killed.ToString());
    impl_->Unregister(state_);
  }

  const std::string& id() const override { return state_->id; }

  absl::Status Pause() override {
    absl::MutexLock lock(&state_->mu);
    if (state_->done) return absl::FailedPreconditionError("sandbox has ended");
    if (state_->kill_requested || state_->limit != LimitHit::kNone) {
      return absl::FailedPreconditionError("sandbox is being killed");
    }
    if (state_->cgroup == nullptr) {
      return absl::FailedPreconditionError("pause needs the cgroup freezer, which is not active");
    }
    if (state_->paused) return absl::OkStatus();
    VAULT_RETURN_IF_ERROR(state_->cgroup->Freeze());
    state_->paused = true;
    state_->paused_at = absl::Now();
    return absl::OkStatus();
  }

  absl::Status Resume() override {
    absl::MutexLock lock(&state_->mu);
    if (state_->done) return absl::FailedPreconditionError("sandbox has ended");
    if (!state_->paused) return absl::OkStatus();
    VAULT_RETURN_IF_ERROR(state_->cgroup->Thaw());
    state_->paused = false;
    // Time spent paused does not count against the wall-time limit.
    state_->deadline += absl::Now() - state_->paused_at;
    return absl::OkStatus();
  }

  void RestartWallClock() override {
    absl::MutexLock lock(&state_->mu);
    if (state_->done) return;
    state_->deadline = absl::Now() + state_->limits.wall_time;
    if (state_->paused) state_->paused_at = absl::Now();
  }

  absl::Status Kill() override {
    {
      absl::MutexLock lock(&state_->mu);
      if (state_->done) return absl::OkStatus();
    }
    impl_->Signal(state_, LimitHit::kNone, /*requested=*/true);
    absl::StatusOr<ExitInfo> exit = Wait(absl::Seconds(10));
    if (!exit.ok())
      return absl::InternalError(absl::StrCat(
          "sandbox ", state_->id, " did not end after SIGKILL: ", exit.status().message()));
    return absl::OkStatus();
  }

  absl::StatusOr<ExitInfo> Wait(absl::Duration timeout) override {
    absl::MutexLock lock(&state_->mu);
    state_->mu.AwaitWithTimeout(absl::Condition(&state_->done), timeout);
    if (!state_->done) return absl::DeadlineExceededError("sandbox still running");
    return state_->exit;
  }

  absl::StatusOr<Usage> GetUsage() override {
    {
      absl::MutexLock lock(&state_->mu);
      if (state_->done) return state_->exit.final_usage;
    }
    Usage usage;
    if (state_->cgroup != nullptr) {
      VAULT_ASSIGN_OR_RETURN(CgroupReadings readings, state_->cgroup->Read());
      usage.memory_current_bytes = readings.memory_current;
      usage.memory_peak_bytes = readings.memory_peak;
      usage.cpu_time = absl::Nanoseconds(readings.cpu_usage_ns);
      usage.processes = readings.pids_current;
    }
    struct statfs fs;
    if (fstatfs(state_->work_fd.get(), &fs) == 0) {
      usage.work_bytes = (fs.f_blocks - fs.f_bfree) * static_cast<uint64_t>(fs.f_bsize);
      usage.work_inodes = fs.f_files - fs.f_ffree;
    }
    return usage;
  }

  absl::StatusOr<uint64_t> GetWorkBytes() override {
    {
      absl::MutexLock lock(&state_->mu);
      if (state_->done) return state_->exit.final_usage.work_bytes;
    }
    struct statfs fs;
    if (fstatfs(state_->work_fd.get(), &fs) != 0) return Errno(errno, "statfs /work");
    return (fs.f_blocks - fs.f_bfree) * static_cast<uint64_t>(fs.f_bsize);
  }

  bool paused() const override {
    absl::MutexLock lock(&state_->mu);
    return state_->paused;
  }

  absl::StatusOr<std::string> ReadWorkFile(const std::string& relative_path,
                                           size_t max_bytes) override {
    return internal::ReadWorkFile(state_->work_fd.get(), relative_path, max_bytes);
  }

  absl::StatusOr<CopyStats> CopyWorkDirTo(const std::string& host_dir) override {
    {
      absl::MutexLock lock(&state_->mu);
      if (!state_->done) {
        return absl::FailedPreconditionError("copy the work directory after the sandbox ended");
      }
    }
    CopyStats stats;
    VAULT_RETURN_IF_ERROR(internal::CopyWorkDir(state_->work_fd.get(), host_dir,
                                                state_->limits.storage_bytes, stats));
    return stats;
  }

 private:
  // Keeps the supervisor alive while a handle exists, even past the LinuxSandbox.
  std::shared_ptr<LinuxSandbox::Impl> impl_;
  std::shared_ptr<SandboxState> state_;
};

}  // namespace

LinuxSandbox::Impl::~Impl() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  Wake();
  if (supervisor_.joinable()) supervisor_.join();
}

absl::Status LinuxSandbox::Impl::Init(const LinuxSandboxOptions& options) {
  options_ = options;
  self_uid_ = geteuid();
  self_gid_ = getegid();
  fences_.running_as_root = self_uid_ == 0;
  std::vector<std::string> warnings;
  if (!fences_.running_as_root) {
    gid_t groups[256];
    int n = getgroups(256, groups);
    std::vector<std::string> kept;
    for (int i = 0; i < n; ++i) {
      if (groups[i] != self_gid_) kept.push_back(absl::StrCat(groups[i]));
    }
    fences_.kept_groups = absl::StrJoin(kept, ",");
    if (n < 0) fences_.kept_groups = "unknown (getgroups failed)";
  }
  if (fences_.running_as_root) {
    std::error_code ec;
    std::filesystem::create_directories(options.id_lock_dir, ec);
    if (ec || chmod(options.id_lock_dir.c_str(), 0700) != 0) {
      warnings.push_back(absl::StrCat("host ids: cannot use ", options.id_lock_dir,
                                      " to claim ids across processes (", ec.message(),
                                      "); ids are unique within this process only"));
    } else {
      id_lock_dir_ = options.id_lock_dir;
    }
  }

  std::string why;
  fences_.user_namespaces = ProbeUserNamespaces(&why);
  if (!why.empty()) warnings.push_back(why);
  fences_.seccomp = prctl(PR_GET_SECCOMP, 0, 0, 0, 0) >= 0;
  if (!fences_.seccomp) warnings.push_back("seccomp: the kernel has no seccomp support");
  fences_.landlock_abi = landlock::ProbeAbi();
  if (fences_.landlock_abi <= 0) {
    warnings.push_back("landlock: not available in this kernel (or disabled at boot: lsm=)");
  }
  CgroupManager::Options cgroup_options;
  cgroup_options.folder = options.cgroup_folder;
  cgroup_options.prefer_v2_freezer = options.prefer_v2_freezer;
  absl::StatusOr<std::unique_ptr<CgroupManager>> cgroups = CgroupManager::Detect(cgroup_options);
  if (cgroups.ok()) {
    cgroups_ = std::move(*cgroups);
    fences_.cgroup_memory = cgroups_->Has(CgroupController::kMemory);
    fences_.cgroup_pids = cgroups_->Has(CgroupController::kPids);
    fences_.cgroup_cpu =
        cgroups_->Has(CgroupController::kCpu) && cgroups_->Has(CgroupController::kCpuAcct);
    fences_.cgroup_freezer = cgroups_->Has(CgroupController::kFreezer);
    fences_.cgroup_detail = cgroups_->Describe();
    if (!cgroups_->Warnings().empty()) warnings.push_back(cgroups_->Warnings());
    if (!fences_.cgroups())
      cgroups_.reset();  // all or nothing: a partial cgroup is not a fence
    else
      // Sandbox ids end in "-<pid>-<n>": remove only what a process that is gone left behind,
      // never the fresh cgroup of another process sharing the folder.
      cgroups_->RemoveStale([](const std::string& name) {
        std::vector<std::string> parts = absl::StrSplit(name, '-');
        pid_t pid = 0;
        if (parts.size() < 3 || !absl::SimpleAtoi(parts[parts.size() - 2], &pid) || pid <= 0) {
          return false;
        }
        return kill(pid, 0) != 0 && errno == ESRCH;
      });
  } else {
    fences_.cgroup_detail = "none";
    warnings.push_back(absl::StrCat("cgroups: ", cgroups.status().message()));
  }
  fences_.warnings = absl::StrJoin(warnings, "; ");
  for (const std::string& warning : warnings) spdlog::warn("sandbox fence: {}", warning);
  VAULT_RETURN_IF_ERROR(CheckPolicy(fences_, options.required));

  VAULT_ASSIGN_OR_RETURN(seccomp_, BuildSeccompPrograms());
  VAULT_ASSIGN_OR_RETURN(init_path_, FindInit(options.init_path));
  init_fd_ = UniqueFd(open(init_path_.c_str(), O_PATH | O_CLOEXEC));
  if (init_fd_.get() < 0) return Errno(errno, absl::StrCat("open ", init_path_));
  int cap_last = 0;
  if (absl::SimpleAtoi(absl::StripAsciiWhitespace(ReadSmallFile("/proc/sys/kernel/cap_last_cap")),
                       &cap_last)) {
    cap_last_ = cap_last;
  }

  // The system part of every sandbox's tree.
  system_ops_ = internal::SystemMountOps();

  epoll_ = UniqueFd(epoll_create1(EPOLL_CLOEXEC));
  if (epoll_.get() < 0) return Errno(errno, "epoll_create1");
  wake_ = UniqueFd(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (wake_.get() < 0) return Errno(errno, "eventfd");
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = wake_.get();
  if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, wake_.get(), &ev) != 0)
    return Errno(errno, "epoll_ctl");
  supervisor_ = std::thread([this] { SupervisorLoop(); });
  return absl::OkStatus();
}

void LinuxSandbox::Impl::Wake() {
  uint64_t one = 1;
  ssize_t ignored = write(wake_.get(), &one, sizeof one);
  (void)ignored;
}

// A slot is claimed in this process (used_slots_) and, across processes, by an exclusive
// flock on <id_lock_dir>/<uid>: two vaults on one host never give two live sandboxes the same
// host uid, and a crashed process's claims vanish with it.
int LinuxSandbox::Impl::AllocateSlot() {
  absl::MutexLock lock(&mu_);
  for (uint32_t tries = 0; tries < options_.host_id_count; ++tries) {
    int slot = next_slot_;
    next_slot_ = static_cast<int>((static_cast<uint32_t>(next_slot_) + 1) % options_.host_id_count);
    if (used_slots_.contains(slot)) continue;
    int lock_fd = -1;
    if (!id_lock_dir_.empty()) {
      std::string path =
          absl::StrCat(id_lock_dir_, "/", options_.host_id_base + static_cast<uid_t>(slot));
      lock_fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
      if (lock_fd < 0) continue;
      if (flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
        close(lock_fd);
        continue;  // another process's live sandbox has this id
      }
    }
    used_slots_[slot] = lock_fd;
    return slot;
  }
  return -1;
}

void LinuxSandbox::Impl::ReleaseSlot(int slot) {
  if (slot < 0) return;
  absl::MutexLock lock(&mu_);
  auto it = used_slots_.find(slot);
  if (it == used_slots_.end()) return;
  if (it->second >= 0) close(it->second);
  used_slots_.erase(it);
}

// Runs on the supervisor thread, so that the sandbox's parent-death signal is tied to a thread
// that lives as long as this LinuxSandbox.
void LinuxSandbox::Impl::DoClone(CloneRequest& request) {
  // The child's ends of the sync socket and status pipe exist only around this clone (clones
  // are serialized on this thread), so no other sandbox's child ever holds a copy of them.
  int sync_pair[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sync_pair) != 0) {
    request.status = Errno(errno, "socketpair");
    return;
  }
  UniqueFd sync_parent(sync_pair[0]);
  UniqueFd sync_child(sync_pair[1]);
  int status_pipe[2];
  if (pipe2(status_pipe, O_CLOEXEC) != 0) {
    request.status = Errno(errno, "pipe2");
    return;
  }
  UniqueFd status_read(status_pipe[0]);
  UniqueFd status_write(status_pipe[1]);
  request.args->sync_fd = sync_child.get();
  request.args->status_fd = status_write.get();
  void* stack = mmap(nullptr, kCloneStackSize, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  if (stack == MAP_FAILED) {
    request.status = Errno(errno, "mmap clone stack");
    return;
  }
  UnpoisonCloneStack(stack);
  // The child is born in its cgroup: this thread steps into it for the clone (before its id
  // changes below, which would forbid the write) and straight back out.
  ThreadReturn cgroup_return;
  if (request.cgroup != nullptr) {
    absl::StatusOr<ThreadReturn> entered = request.cgroup->EnterCallingThread();
    if (!entered.ok()) {
      request.status = entered.status();
      munmap(stack, kCloneStackSize);
      return;
    }
    cgroup_return = *std::move(entered);
  }
  // Leaves the cgroup; called on every path from here.
  auto leave_cgroup = [&cgroup_return] {
    ReturnCallingThread(cgroup_return);  // (aborts rather than stay inside)
    cgroup_return = {};
  };
  // As root, this thread takes the sandbox's host id as its effective id for the clone, so
  // that the new user namespace is owned by that id: what the kernel counts per user across
  // namespaces (inotify instances and watches, message queues, pending signals, processes) is
  // then charged to the sandbox's own id, never to root's. Raw system calls change this thread
  // only; the saved id 0 lets it return at once.
  bool switched = false;
  if (request.root_mode) {
    if (syscall(SYS_setresgid, -1, request.host_gid, -1) != 0) {
      request.status = Errno(errno, "setresgid for the clone");
      leave_cgroup();
      munmap(stack, kCloneStackSize);
      return;
    }
    if (syscall(SYS_setresuid, -1, request.host_uid, -1) != 0) {
      request.status = Errno(errno, "setresuid for the clone");
      syscall(SYS_setresgid, -1, 0, -1);
      leave_cgroup();
      munmap(stack, kCloneStackSize);
      return;
    }
    switched = true;
  }
  // CLONE_VM: the child shares this process's memory until its execveat, as with vfork, so
  // the kernel copies no page tables and the child takes no copy-on-write faults (together
  // ~0.8 ms of a spawn). That is sound because the child writes only to its own stack (mapped
  // above, unmapped only once it has executed or died). It also shares this thread's TLS (no
  // CLONE_SETTLS), hence its errno, with this thread and with every other child still setting
  // up: so the child makes only raw system calls (internal/raw_syscall.h), takes each error
  // from the call's result and never touches errno. It never allocates, locks or returns.
  int pidfd = -1;
  pid_t pid = clone(ChildMain, static_cast<char*>(stack) + kCloneStackSize,
                    CLONE_VM | CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC |
                        CLONE_NEWUTS | CLONE_PIDFD | SIGCHLD,  // the child unshares NEWNET
                    request.args, &pidfd);
  int clone_errno = errno;
  if (switched) {
    if (syscall(SYS_setresuid, -1, 0, -1) != 0 || syscall(SYS_setresgid, -1, 0, -1) != 0) {
      // Cannot happen with a saved id of 0; if it did, this thread must not go on as root-less.
      spdlog::critical("sandbox supervisor could not return to root: {}", strerror(errno));
      std::abort();
    }
    prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);  // the id change cleared it for the whole process
  }
  leave_cgroup();
  sync_child.Reset();
  status_write.Reset();
  if (pid < 0) {
    munmap(stack, kCloneStackSize);
    request.status = Errno(clone_errno, "clone with new namespaces");
    return;
  }
  request.stack = stack;
  request.pid = pid;
  request.pidfd = pidfd;
  request.sync_parent_fd = sync_parent.get();
  auto fail = [&](absl::Status status) {
    SendSignal(pidfd, SIGKILL, nullptr, 0);
    siginfo_t info;
    syscall(SYS_waitid, P_PIDFD, pidfd, &info, WEXITED, nullptr);
    close(pidfd);
    UnpoisonCloneStack(request.stack);
    munmap(request.stack, kCloneStackSize);
    request.stack = nullptr;
    request.pidfd = -1;
    request.status = std::move(status);
  };
  // Map the sandbox's uid/gid 1000 to its host id.
  std::string uid_line = absl::StrCat(kInsideId, " ", request.host_uid, " 1\n");
  std::string gid_line = absl::StrCat(kInsideId, " ", request.host_gid, " 1\n");
  absl::Status status = WriteProcFile(pid, "uid_map", uid_line);
  if (status.ok() && !request.root_mode) status = WriteProcFile(pid, "setgroups", "deny");
  if (status.ok()) status = WriteProcFile(pid, "gid_map", gid_line);
  // Under memory pressure on the host, agents go first: oom_score_adj 1000. Not written here:
  // the kernel gives a new value to every process sharing the task's memory, and until it
  // executes the child shares ours (CLONE_VM), so vaultd itself would become the first victim.
  // The child carries the descriptor to its init (kInsideOomFd), which writes it in memory of
  // its own before it starts the program.
  UniqueFd oom_score_adj;
  if (status.ok()) {
    std::string path = absl::StrCat("/proc/", pid, "/oom_score_adj");
    oom_score_adj = UniqueFd(open(path.c_str(), O_WRONLY | O_CLOEXEC));
    if (oom_score_adj.get() < 0) status = Errno(errno, absl::StrCat("open ", path));
  }
  // 'G' with that descriptor: build the mounts. Spawn's thread then completes the child's
  // cgroup placement (v2) and sends 'C'.
  if (status.ok()) status = SendGo(request.sync_parent_fd, oom_score_adj.get());
  oom_score_adj.Reset();
  if (!status.ok()) {
    fail(std::move(status));
    return;
  }
  request.sync_parent = std::move(sync_parent);
  request.status_read = std::move(status_read);
}

absl::StatusOr<std::unique_ptr<SandboxHandle>> LinuxSandbox::Impl::Spawn(const SandboxSpec& spec) {
  const absl::Time started = absl::Now();
  VAULT_RETURN_IF_ERROR(internal::ValidateSpec(spec));

  internal::HostPreparation prepared;
  prepared.system_ops = &system_ops_;
  prepared.seccomp = &seccomp_;
  prepared.init_fd = init_fd_.get();
  prepared.cap_last = cap_last_;
  prepared.cgroups = cgroups_ != nullptr;
  VAULT_ASSIGN_OR_RETURN(std::unique_ptr<ChildArgs> args,
                         internal::BuildChildArgs(spec, fences_, prepared));
  const Limits& limits = spec.limits;

  auto state = std::make_shared<SandboxState>();
  state->id = absl::StrCat(spec.name.empty() ? "sb" : spec.name, "-", getpid(), "-",
                           SandboxCounter().fetch_add(1));
  state->limits = limits;
  state->started = started;
  state->on_exit = spec.on_exit;
  int slot = -1;
  uid_t host_uid = self_uid_;
  gid_t host_gid = self_gid_;
  if (fences_.running_as_root) {
    slot = AllocateSlot();
    if (slot < 0) return absl::ResourceExhaustedError("no free sandbox host id");
    host_uid = options_.host_id_base + static_cast<uid_t>(slot);
    host_gid = options_.host_id_base + static_cast<gid_t>(slot);
  }
  state->uid_slot = slot;

  auto cleanup_early = [&](absl::Status status) {
    if (state->cgroup != nullptr) (void)state->cgroup->Remove();
    ReleaseSlot(slot);
    return status;
  };
  // The cgroup first: the supervisor clones the child into it (on cgroup v1; see
  // Cgroup::EnterCallingThread), and this thread completes the placement elsewhere (v2). The
  // child builds its mounts meanwhile and waits for 'C' before anything else.
  if (cgroups_ != nullptr) {
    CgroupLimits cgroup_limits;
    cgroup_limits.memory_bytes = limits.memory_bytes;
    cgroup_limits.max_pids = limits.max_processes;
    cgroup_limits.cpu_percent = limits.cpu_percent;
    absl::StatusOr<std::unique_ptr<Cgroup>> cgroup = cgroups_->Create(state->id, cgroup_limits);
    if (!cgroup.ok()) return cleanup_early(cgroup.status());
    state->cgroup = std::move(*cgroup);
  }
  CloneRequest request;
  request.args = args.get();
  request.cgroup = state->cgroup.get();
  request.root_mode = fences_.running_as_root;
  request.host_uid = host_uid;
  request.host_gid = host_gid;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return cleanup_early(absl::CancelledError("sandbox is shutting down"));
    clone_queue_.push_back(&request);
  }
  Wake();
  {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&request.finished));
  }
  if (!request.status.ok()) return cleanup_early(request.status);
  UniqueFd sync_parent = std::move(request.sync_parent);
  UniqueFd status_read = std::move(request.status_read);
  absl::Status cgroup_status;
  if (state->cgroup != nullptr) cgroup_status = state->cgroup->AddClonedProcess(request.pid);
  if (cgroup_status.ok()) {
    char placed = 'C';
    if (send(sync_parent.get(), &placed, 1, MSG_NOSIGNAL) != 1) {
      cgroup_status = Errno(errno, "signal the sandbox child");
    }
  }
  if (!cgroup_status.ok()) {
    // Not yet registered with the supervisor: end and reap the child here.
    SendSignal(request.pidfd, SIGKILL, nullptr, 0);
    siginfo_t info;
    syscall(SYS_waitid, P_PIDFD, request.pidfd, &info, WEXITED, nullptr);
    close(request.pidfd);
    UnpoisonCloneStack(request.stack);
    munmap(request.stack, kCloneStackSize);
    if (state->cgroup != nullptr) (void)state->cgroup->KillAll();
    return cleanup_early(cgroup_status);
  }
  state->pid = request.pid;
  state->pidfd = UniqueFd(request.pidfd);
  {
    absl::MutexLock lock(&state->mu);
    state->clone_stack = request.stack;
  }

  {
    absl::MutexLock lock(&state->mu);
    state->deadline = started + limits.wall_time;
  }
  // The setup below fills the state's descriptors (work directory, report pipe). The supervisor
  // sees the sandbox only afterwards, so it never reaps one whose report it cannot read yet.
  absl::Status setup = [&]() -> absl::Status {
    // Setup result: the work directory's descriptor, then EOF (exec done) or an error record.
    const absl::Time deadline = started + kSetupTimeout;
    for (;;) {
      pollfd pfd{sync_parent.get(), POLLIN, 0};
      int ms = static_cast<int>(absl::ToInt64Milliseconds(deadline - absl::Now()));
      int ready = poll(&pfd, 1, std::max(ms, 0));
      if (ready == 0) return absl::DeadlineExceededError("sandbox setup timed out");
      if (ready < 0) {
        if (errno == EINTR) continue;
        return Errno(errno, "poll sandbox setup");
      }
      ChildError error;
      iovec iov{&error, sizeof error};
      alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
      msghdr msg{};
      msg.msg_iov = &iov;
      msg.msg_iovlen = 1;
      msg.msg_control = control;
      msg.msg_controllen = sizeof control;
      ssize_t n = recvmsg(sync_parent.get(), &msg, MSG_CMSG_CLOEXEC);
      if (n < 0) {
        if (errno == EINTR) continue;
        return Errno(errno, "recvmsg sandbox setup");
      }
      if (n == 0) {  // close-on-exec: the init runs, in memory of its own
        ReleaseCloneStack(*state);
        break;
      }
      cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
      if (n == 1 && cmsg != nullptr && cmsg->cmsg_type == SCM_RIGHTS) {
        int fd;
        std::memcpy(&fd, CMSG_DATA(cmsg), sizeof fd);
        state->work_fd = UniqueFd(fd);
        continue;
      }
      if (n == static_cast<ssize_t>(sizeof error)) {
        std::string detail;
        if (error.step == kStepMkdir || error.step == kStepBind || error.step == kStepTouch ||
            error.step == kStepSymlink || error.step == kStepMountAttr ||
            error.step == kStepWriteFile) {
          if (error.detail >= 0 && static_cast<size_t>(error.detail) < args->ops.size()) {
            const MountOp& op = args->ops[static_cast<size_t>(error.detail)];
            detail = absl::StrCat(" (", op.a, op.b.empty() ? "" : " -> ",
                                  op.kind == MountOp::kWriteFile ? "" : op.b, ")");
          }
        } else if (error.step == kStepLandlock && error.detail >= 0 &&
                   static_cast<size_t>(error.detail) < args->landlock.rules.size()) {
          detail = absl::StrCat(" (rule for ",
                                args->landlock.rules[static_cast<size_t>(error.detail)].path, ")");
        }
        std::string message = absl::StrCat("sandbox setup failed at ", StepName(error.step), detail,
                                           ": ", strerror(error.err));
        return absl::Status(error.step == kStepBind && error.err == ENOENT
                                ? absl::StatusCode::kNotFound
                                : absl::ErrnoToStatusCode(error.err),
                            message);
      }
      return absl::InternalError("sandbox setup: malformed message from the child");
    }

    // The init's first report: the program was executed, or why not.
    std::string line;
    for (;;) {
      pollfd pfd{status_read.get(), POLLIN, 0};
      int ms = static_cast<int>(absl::ToInt64Milliseconds(deadline - absl::Now()));
      int ready = poll(&pfd, 1, std::max(ms, 0));
      if (ready == 0) return absl::DeadlineExceededError("sandbox init did not report");
      if (ready < 0) {
        if (errno == EINTR) continue;
        return Errno(errno, "poll sandbox init");
      }
      char c;
      ssize_t n = read(status_read.get(), &c, 1);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return absl::InternalError("sandbox init ended before executing the program");
      if (c == '\n') break;
      line.push_back(c);
      if (line.size() > 32) return absl::InternalError("sandbox init: malformed report");
    }
    if (line != "R") {
      int err = 0;
      if (absl::StartsWith(line, "X ") && absl::SimpleAtoi(line.substr(2), &err)) {
        return absl::Status(
            err == ENOENT ? absl::StatusCode::kNotFound : absl::ErrnoToStatusCode(err),
            absl::StrCat("cannot execute ", spec.program, " in the sandbox: ", strerror(err)));
      }
      return absl::InternalError(absl::StrCat("sandbox init: unexpected report \"", line, "\""));
    }
    state->status_fd = std::move(status_read);
    // Reap reads the init's last report without ever blocking the supervisor.
    fcntl(state->status_fd.get(), F_SETFL, O_NONBLOCK);
    return absl::OkStatus();
  }();
  // Register: from here on the supervisor reaps it (on a failed setup, once the handle's
  // destructor has killed it).
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = state->pidfd.get();
  absl::Status registered = absl::OkStatus();
  {
    absl::MutexLock lock(&mu_);
    live_[state->pidfd.get()] = state;
    if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, state->pidfd.get(), &ev) != 0) {
      registered = Errno(errno, "epoll_ctl pidfd");  // the periodic scan reaps it
      state->missing_from_epoll = true;
      ++missing_from_epoll_;
    }
    // The supervisor's next scan: this sandbox's deadline, and its first CPU reading.
    absl::Time deadline;
    {
      absl::MutexLock state_lock(&state->mu);
      deadline = state->deadline;
    }
    scan_at_ = std::min(scan_at_, deadline);
    if (state->cgroup != nullptr || state->missing_from_epoll) {
      scan_at_ = std::min(scan_at_, absl::Now() + kCpuPollInterval);
    }
  }
  Wake();
  auto handle = std::make_unique<LinuxSandboxHandle>(shared_from_this(), state);
  if (!setup.ok()) return setup;  // the handle's destructor kills and unregisters
  if (!registered.ok()) return registered;
  return handle;
}

void LinuxSandbox::Impl::Signal(const std::shared_ptr<SandboxState>& state, LimitHit limit,
                                bool requested) {
  bool thaw = false;
  {
    // Once this is set, Pause refuses: a freeze can no longer land after the thaw below.
    absl::MutexLock lock(&state->mu);
    if (state->done) return;
    if (requested) state->kill_requested = true;
    if (limit != LimitHit::kNone && state->limit == LimitHit::kNone) state->limit = limit;
    thaw = state->paused;
  }
  // SIGKILL to the sandbox's PID 1 makes the kernel kill every process of its PID namespace.
  SendSignal(state->pidfd.get(), SIGKILL, nullptr, 0);
  if (thaw && state->cgroup != nullptr) {
    (void)state->cgroup->Thaw();  // frozen tasks die only once thawed
  }
}

void LinuxSandbox::Impl::Unregister(const std::shared_ptr<SandboxState>& state) {
  absl::MutexLock lock(&mu_);
  if (live_.erase(state->pidfd.get()) > 0 && state->missing_from_epoll) --missing_from_epoll_;
}

void LinuxSandbox::Impl::Reap(const std::shared_ptr<SandboxState>& state) {
  siginfo_t info{};
  rusage usage{};
  if (syscall(SYS_waitid, P_PIDFD, state->pidfd.get(), &info, WEXITED | WNOHANG, &usage) != 0 ||
      info.si_pid == 0) {
    return;  // not yet
  }
  epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, state->pidfd.get(), nullptr);
  ReleaseCloneStack(*state);
  // The init's last report.
  std::string report;
  if (state->status_fd.get() >= 0) {
    char buf[128];
    ssize_t n;
    while ((n = read(state->status_fd.get(), buf, sizeof buf)) > 0)
      report.append(buf, static_cast<size_t>(n));
  }
  ExitInfo exit;
  char kind = 0;
  int value = 0;
  for (absl::string_view line : absl::StrSplit(report, '\n', absl::SkipEmpty())) {
    if (line.size() > 2 && (line[0] == 'E' || line[0] == 'S') &&
        absl::SimpleAtoi(line.substr(2), &value)) {
      kind = line[0];
    }
  }
  if (kind == 'E') {
    exit.exited = true;
    exit.exit_code = value;
  } else if (kind == 'S') {
    exit.signal = value;
  } else if (info.si_code == CLD_EXITED) {
    // The init itself failed (it reports why on its pipe with "X"); treat as the program's.
    exit.exited = true;
    exit.exit_code = info.si_status;
  } else {
    exit.signal = info.si_status;  // the init was killed: by us, or by the OOM killer
  }
  Usage& final_usage = exit.final_usage;
  final_usage.cpu_time =
      absl::DurationFromTimeval(usage.ru_utime) + absl::DurationFromTimeval(usage.ru_stime);
  final_usage.memory_peak_bytes = static_cast<uint64_t>(usage.ru_maxrss) * 1024;
  uint64_t oom_kills = 0;
  if (state->cgroup != nullptr) {
    absl::StatusOr<CgroupReadings> readings = state->cgroup->Read();
    if (readings.ok()) {
      // The cgroup's peak is what the limit measures (ru_maxrss also counts shared file pages).
      final_usage.memory_peak_bytes = readings->memory_peak;
      final_usage.cpu_time =
          std::max(final_usage.cpu_time, absl::Nanoseconds(readings->cpu_usage_ns));
      oom_kills = readings->oom_kills;
    }
    absl::Status killed = state->cgroup->KillAll();
    if (!killed.ok()) spdlog::warn("sandbox {}: {}", state->id, killed.ToString());
    absl::Status removed = state->cgroup->Remove();
    if (!removed.ok()) spdlog::warn("sandbox {}: {}", state->id, removed.ToString());
  }
  struct statfs fs;
  if (state->work_fd.get() >= 0 && fstatfs(state->work_fd.get(), &fs) == 0) {
    final_usage.work_bytes = (fs.f_blocks - fs.f_bfree) * static_cast<uint64_t>(fs.f_bsize);
    final_usage.work_inodes = fs.f_files - fs.f_ffree;
  }
  ReleaseSlot(state->uid_slot);

  state->mu.Lock();
  exit.killed = state->kill_requested;
  exit.limit = state->limit;
  if (exit.limit == LimitHit::kNone && !exit.exited) {
    if (exit.signal == SIGXCPU) {
      exit.limit = LimitHit::kCpuTime;
    } else if (exit.signal == SIGXFSZ) {
      exit.limit = LimitHit::kFileSize;
    } else if (exit.signal == SIGKILL && oom_kills > 0) {
      exit.limit = LimitHit::kMemory;
    } else if (exit.signal == SIGKILL && !exit.killed &&
               final_usage.cpu_time >=
                   absl::Seconds(static_cast<int64_t>(state->limits.cpu_seconds))) {
      exit.limit = LimitHit::kCpuTime;  // RLIMIT_CPU's hard limit
    }
  }
  exit.wall_time = absl::Now() - state->started;
  state->exit = exit;
  state->paused = false;
  state->done = true;
  state->mu.Unlock();
  if (state->on_exit) state->on_exit(exit);
}

// One thread clones, reaps and enforces the wall-time and CPU limits. A wake-up (a clone
// request, a registration, an exited sandbox's pidfd) costs work for that sandbox only; the
// scan of every live sandbox (deadlines, CPU readings, sandboxes missing from epoll) runs at the
// earliest deadline or next CPU reading, and every kCpuPollInterval while a sandbox is missing
// from epoll.
void LinuxSandbox::Impl::SupervisorLoop() {
  std::vector<int> ready;  // pidfds epoll reported
  for (;;) {
    std::vector<std::shared_ptr<SandboxState>> work;
    bool stopping;
    bool scan;
    const absl::Time now = absl::Now();
    {
      absl::MutexLock lock(&mu_);
      // Clone requests first: they are what a caller is blocked on.
      while (!clone_queue_.empty()) {
        CloneRequest* request = clone_queue_.front();
        clone_queue_.pop_front();
        mu_.Unlock();
        DoClone(*request);
        mu_.Lock();
        request->finished = true;
      }
      stopping = stopping_;
      scan = stopping || now >= scan_at_;
      if (scan) {
        scan_at_ = absl::InfiniteFuture();  // registrations from here on lower it again
        work.reserve(live_.size());
        for (auto& [fd, state] : live_) work.push_back(state);
        std::sort(ready.begin(), ready.end());
      } else {
        for (int fd : ready) {
          auto it = live_.find(fd);
          if (it != live_.end()) work.push_back(it->second);
        }
      }
    }
    const std::vector<int> reported = std::exchange(ready, {});
    absl::Time next = absl::InfiniteFuture();
    for (const auto& state : work) {
      bool done, paused;
      absl::Time deadline;
      {
        absl::MutexLock lock(&state->mu);
        done = state->done;
        paused = state->paused;
        deadline = state->deadline;
      }
      if (done) continue;
      if (stopping) {
        Signal(state, LimitHit::kNone, true);
        continue;
      }
      // (A scan reaps only what epoll reported, or cannot report: not a waitid per sandbox.)
      if (!scan || state->missing_from_epoll ||
          std::binary_search(reported.begin(), reported.end(), state->pidfd.get())) {
        Reap(state);
        absl::MutexLock lock(&state->mu);
        if (state->done) continue;
      }
      if (!scan) continue;
      if (!paused && now >= deadline) {
        Signal(state, LimitHit::kWallTime, false);
        continue;
      }
      if (!paused) next = std::min(next, deadline);
      if (state->cgroup != nullptr) {
        // (Due within half a poll interval: read now, with the others, rather than scan again.)
        if (now + kCpuPollInterval / 2 >= state->next_cpu_check) {
          const absl::Duration limit =
              absl::Seconds(static_cast<int64_t>(state->limits.cpu_seconds));
          absl::StatusOr<uint64_t> cpu_ns = state->cgroup->CpuUsageNs();
          if (cpu_ns.ok() && absl::Nanoseconds(*cpu_ns) > limit) {
            Signal(state, LimitHit::kCpuTime, false);
            continue;
          }
          // Its processes use at most every CPU of the machine, so its total cannot pass the
          // limit before now + remaining / cpus: the next reading comes at half that (never
          // sooner than kCpuPollInterval, never later than kCpuPollMax). Near the limit that is
          // every kCpuPollInterval, as for every sandbox before; an idle agent far from it is read
          // every few seconds instead (1,000 idle agents: 10,000 cgroup reads a second before).
          const absl::Duration remaining =
              cpu_ns.ok() ? limit - absl::Nanoseconds(*cpu_ns) : absl::ZeroDuration();
          state->next_cpu_check =
              now + std::clamp(remaining / (2 * cpus_), kCpuPollInterval, kCpuPollMax);
        }
        next = std::min(next, state->next_cpu_check);
      }
    }
    if (stopping) {
      // Reap what was killed, then leave.
      for (const auto& state : work) {
        siginfo_t info;
        syscall(SYS_waitid, P_PIDFD, state->pidfd.get(), &info, WEXITED, nullptr);
        absl::MutexLock lock(&state->mu);
        if (!state->done) {
          state->exit.signal = SIGKILL;
          state->exit.killed = true;
          state->done = true;
        }
      }
      return;
    }
    absl::Time wake_at;
    {
      absl::MutexLock lock(&mu_);
      if (scan) {
        if (missing_from_epoll_ > 0) next = std::min(next, now + kCpuPollInterval);
        scan_at_ = std::min(scan_at_, next);
      }
      wake_at = scan_at_;
    }
    int timeout_ms = -1;
    if (wake_at != absl::InfiniteFuture()) {
      timeout_ms = static_cast<int>(
          std::max<int64_t>(1, absl::ToInt64Milliseconds(wake_at - absl::Now()) + 1));
    }
    epoll_event events[64];
    int n = epoll_wait(epoll_.get(), events, 64, timeout_ms);
    for (int i = 0; i < n; ++i) {
      if (events[i].data.fd == wake_.get()) {
        uint64_t value;
        ssize_t ignored = read(wake_.get(), &value, sizeof value);
        (void)ignored;
      } else {
        ready.push_back(events[i].data.fd);
      }
    }
  }
}

LinuxSandbox::LinuxSandbox(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
LinuxSandbox::~LinuxSandbox() = default;

absl::StatusOr<std::unique_ptr<LinuxSandbox>> LinuxSandbox::Create(
    const LinuxSandboxOptions& options) {
  auto impl = std::make_shared<Impl>();
  VAULT_RETURN_IF_ERROR(impl->Init(options));
  return std::unique_ptr<LinuxSandbox>(new LinuxSandbox(std::move(impl)));
}

absl::StatusOr<std::unique_ptr<SandboxHandle>> LinuxSandbox::Spawn(const SandboxSpec& spec) {
  if (!spec.restore.empty()) {
    return absl::FailedPreconditionError(
        "the posix sandbox cannot restore a program's execution state: it starts the program "
        "afresh, with the state the agent handed over");
  }
  return impl_->Spawn(spec);
}

const FenceReport& LinuxSandbox::fences() const { return impl_->fences(); }

}  // namespace vault::sandbox
