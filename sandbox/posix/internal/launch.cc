// Spawn, seen from the host: a host id and a cgroup claimed, the child cloned into new namespaces
// on the supervisor thread, its id maps written, its setup awaited and its init's first report.
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#endif

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/fd_passing.h"
#include "common/status_macros.h"
#include "common/unique_fd.h"
#include "sandbox/posix/cgroup.h"
#include "sandbox/posix/internal/child.h"
#include "sandbox/posix/internal/linux_sandbox_impl.h"
#include "sandbox/posix/internal/plan.h"
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

using common::UniqueFd;

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
  absl::Status sent = common::SendWithFds(sync_fd, "G", {oom_score_adj_fd});
  if (sent.ok()) return sent;
  return absl::Status(sent.code(), absl::StrCat("signal the sandbox child: ", sent.message()));
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

}  // namespace

void ReleaseCloneStack(SandboxState& state) {
  absl::MutexLock lock(&state.mu);
  if (state.clone_stack != nullptr) {
    UnpoisonCloneStack(state.clone_stack);
    munmap(state.clone_stack, kCloneStackSize);
  }
  state.clone_stack = nullptr;
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
    slot = host_ids_->Claim();
    if (slot < 0) return absl::ResourceExhaustedError("no free sandbox host id");
    host_uid = options_.host_id_base + static_cast<uid_t>(slot);
    host_gid = options_.host_id_base + static_cast<gid_t>(slot);
  }
  state->uid_slot = slot;

  auto cleanup_early = [&](absl::Status status) {
    if (state->cgroup != nullptr) (void)state->cgroup->Remove();
    host_ids_->Release(slot);
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
        if (err == ENOEXEC) {
          // The agent's code, most likely: say what makes a file executable here.
          return absl::InvalidArgumentError(absl::StrCat(
              "cannot execute ", spec.program, " in the sandbox: ", strerror(err),
              ": it is neither a program for this machine nor a script whose first line names "
              "its interpreter (a Python agent starts with \"#!/usr/bin/env python3\"; Scheme "
              "and wasm agents need (sandbox scheme) or (sandbox wasm) in their spec)"));
        }
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
  std::unique_ptr<SandboxHandle> handle = NewLinuxSandboxHandle(shared_from_this(), state);
  if (!setup.ok()) return setup;  // the handle's destructor kills and unregisters
  if (!registered.ok()) return registered;
  return handle;
}

}  // namespace vault::sandbox
