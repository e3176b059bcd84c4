#include "sandbox/posix/internal/child.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/openat2.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cstring>

#include "sandbox/posix/internal/raw_syscall.h"

namespace vault::sandbox::internal {

// Runs in the host, naming the step of a ChildError.
const char* StepName(int32_t step) {
  switch (step) {
    case kStepGo:
      return "waiting for the host";
    case kStepOomFd:
      return "receiving the oom_score_adj descriptor";
    case kStepNetNs:
      return "network namespace";
    case kStepCgroupNs:
      return "cgroup namespace";
    case kStepSetsid:
      return "new session";
    case kStepIds:
      return "switching to the sandbox uid/gid";
    case kStepHostname:
      return "hostname";
    case kStepMountPrivate:
      return "making mounts private";
    case kStepSetupTmpfs:
      return "setup tmpfs";
    case kStepPivotSetup:
      return "pivot_root into the setup tmpfs";
    case kStepRootTmpfs:
      return "root tmpfs";
    case kStepScratchTmpfs:
      return "work/tmp tmpfs (storage quota)";
    case kStepMkdir:
      return "mkdir";
    case kStepTouch:
      return "creating a bind target";
    case kStepSymlink:
      return "symlink";
    case kStepBind:
      return "bind mount";
    case kStepMountAttr:
      return "making a mount read-only";
    case kStepWriteFile:
      return "writing /etc";
    case kStepSendWorkFd:
      return "handing the work directory to the host";
    case kStepProc:
      return "mounting /proc";
    case kStepPivotFinal:
      return "final pivot_root";
    case kStepRlimit:
      return "rlimits";
    case kStepNoNewPrivs:
      return "no_new_privs";
    case kStepLandlock:
      return "landlock";
    case kStepCaps:
      return "dropping capabilities";
    case kStepParentGone:
      return "host process gone";
    case kStepSignals:
      return "resetting signals";
    case kStepFds:
      return "arranging descriptors";
    case kStepSeccomp:
      return "seccomp";
    case kStepExec:
      return "executing the sandbox init";
  }
  return "unknown step";
}

// ---------------------------------------------------------------------------------------------
// The child's side. Everything below runs in the clone child of a multithreaded process: raw
// system calls on data prepared by the parent, no allocation, no locks, no logging. The child
// shares the supervisor thread's memory and thread pointer (CLONE_VM, no CLONE_SETTLS), hence
// its errno, which other children of that thread write concurrently: every call goes through
// RawSys (raw_syscall.h) and takes its error from the return value, never from errno.

namespace {

// mount_setattr(2), defined here because <linux/mount.h> clashes with glibc 2.36's <sys/mount.h>.
struct MountAttr {
  uint64_t attr_set;
  uint64_t attr_clr;
  uint64_t propagation;
  uint64_t userns_fd;
};
#ifndef AT_RECURSIVE
#define AT_RECURSIVE 0x8000
#endif

// The kernel's struct sigaction for rt_sigaction(2) (not glibc's), and its sigset size.
struct KernelSigaction {
  void (*handler)(int);
  unsigned long flags;
  void (*restorer)();
  uint64_t mask;
};
constexpr long kKernelSigsetSize = sizeof(uint64_t);

// The kernel's struct rlimit64 for prlimit64(2).
struct KernelRlimit {
  uint64_t cur;
  uint64_t max;
};

// The positive errno of a call that did not return what it should have: its own error, or EIO
// for an unexpected non-error result (a short send).
int ErrOf(long r) { return RawFailed(r) ? RawErrno(r) : EIO; }

[[noreturn]] void ChildExit(int code) {
  for (;;) RawSys(SYS_exit_group, code);
}

[[noreturn]] void ChildFail(int sync_fd, int32_t step, int err, int32_t detail = -1) {
  ChildError error{step, err, detail};
  RawSys(SYS_sendto, sync_fd, &error, sizeof error, MSG_NOSIGNAL, nullptr, 0);
  ChildExit(127);
}

// Returns 0 or the positive errno.
int WriteWholeFile(const char* path, const std::string& contents, mode_t mode) {
  long fd = RawSys(SYS_openat, AT_FDCWD, path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (RawFailed(fd)) return RawErrno(fd);
  size_t done = 0;
  while (done < contents.size()) {
    long n = RawSys(SYS_write, fd, contents.data() + done, contents.size() - done);
    if (RawFailed(n)) {
      RawSys(SYS_close, fd);
      return RawErrno(n);
    }
    done += static_cast<size_t>(n);
  }
  RawSys(SYS_close, fd);
  return 0;
}

// Copies `fd` (close-on-exec) to a number above every final position 0-7, so that the dup3s
// into place never overwrite a source still needed. Returns the new descriptor, `fd` itself
// when it is negative (none), or -errno.
long LiftFd(int fd) { return fd < 0 ? fd : RawSys(SYS_fcntl, fd, F_DUPFD_CLOEXEC, 16); }

// Reads the host's one-byte go-ahead; 0 when none came (the host gave up on us).
char ReadGo(int sync) {
  char go = 0;
  long got;
  do {
    got = RawSys(SYS_read, sync, &go, 1);
  } while (got == -EINTR);
  return got == 1 ? go : 0;
}

// Reads the host's first go-ahead, 'G' with one descriptor (SCM_RIGHTS, received
// close-on-exec); 0 when no byte came (the host gave up on us). *fd is the descriptor, or -1
// when none came.
char ReceiveGo(int sync, int* fd) {
  *fd = -1;
  char go = 0;
  iovec iov{&go, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  long got;
  do {
    got = RawSys(SYS_recvmsg, sync, &msg, MSG_CMSG_CLOEXEC);
  } while (got == -EINTR);
  if (got != 1) return 0;
  const cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
  if ((msg.msg_flags & MSG_CTRUNC) == 0 && cmsg != nullptr && cmsg->cmsg_level == SOL_SOCKET &&
      cmsg->cmsg_type == SCM_RIGHTS && cmsg->cmsg_len == CMSG_LEN(sizeof(int))) {
    std::memcpy(fd, CMSG_DATA(cmsg), sizeof *fd);
  }
  return go;
}

}  // namespace

int ChildMain(void* raw) {
  const ChildArgs& a = *static_cast<const ChildArgs*>(raw);
  const int sync = a.sync_fd;
  long r;
  // The network namespace is the costly one to create (loopback, sysctl tables): made here,
  // while the host writes this child's id maps, rather than by clone() before it returns.
  if (RawFailed(r = RawSys(SYS_unshare, CLONE_NEWNET))) ChildFail(sync, kStepNetNs, RawErrno(r));
  // With 'G' comes the descriptor of this process's oom_score_adj, for the init to write.
  int oom_fd;
  if (ReceiveGo(sync, &oom_fd) != 'G') ChildExit(127);  // the host gave up on us
  if (oom_fd < 0) ChildFail(sync, kStepOomFd, EPROTO);

  if (RawFailed(r = RawSys(SYS_setsid))) ChildFail(sync, kStepSetsid, RawErrno(r));

  // Become uid/gid 1000 inside (the host id the parent mapped), keeping the namespace's
  // capabilities for the mounts below; they are all dropped before exec.
  // Raw system calls (glibc's set*id wrappers would also broadcast to every thread the parent
  // had, and wait forever for threads that do not exist in this child).
  if (a.drop_groups && (r = RawSys(SYS_setgroups, 0, nullptr)) != 0) {
    ChildFail(sync, kStepIds, ErrOf(r));
  }
  if ((r = RawSys(SYS_prctl, PR_SET_KEEPCAPS, 1, 0, 0, 0)) != 0)
    ChildFail(sync, kStepIds, ErrOf(r));
  if ((r = RawSys(SYS_setresgid, kInsideId, kInsideId, kInsideId)) != 0) {
    ChildFail(sync, kStepIds, ErrOf(r));
  }
  if ((r = RawSys(SYS_setresuid, kInsideId, kInsideId, kInsideId)) != 0) {
    ChildFail(sync, kStepIds, ErrOf(r));
  }
  __user_cap_header_struct cap_header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct caps[2];
  if ((r = RawSys(SYS_capget, &cap_header, caps)) != 0) ChildFail(sync, kStepIds, ErrOf(r));
  caps[0].effective = caps[0].permitted;
  caps[1].effective = caps[1].permitted;
  if ((r = RawSys(SYS_capset, &cap_header, caps)) != 0) ChildFail(sync, kStepIds, ErrOf(r));

  static const char kHostname[] = "vault-sandbox";
  if ((r = RawSys(SYS_sethostname, kHostname, sizeof kHostname - 1)) != 0) {
    ChildFail(sync, kStepHostname, ErrOf(r));
  }

  // Mounts: a setup tmpfs becomes the root for a moment so that every host path stays
  // reachable under /oldroot while the real root is built at /newroot (bubblewrap's way).
  if ((r = RawSys(SYS_mount, nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr)) != 0) {
    ChildFail(sync, kStepMountPrivate, ErrOf(r));
  }
  if ((r = RawSys(SYS_mount, "tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV,
                  a.setup_opts.c_str())) != 0) {
    ChildFail(sync, kStepSetupTmpfs, ErrOf(r));
  }
  if ((r = RawSys(SYS_chdir, "/tmp")) != 0 ||
      (r = RawSys(SYS_mkdirat, AT_FDCWD, "oldroot", 0700)) != 0 ||
      (r = RawSys(SYS_mkdirat, AT_FDCWD, "newroot", 0755)) != 0 ||
      (r = RawSys(SYS_mkdirat, AT_FDCWD, "scratch", 0700)) != 0) {
    ChildFail(sync, kStepSetupTmpfs, ErrOf(r));
  }
  if ((r = RawSys(SYS_pivot_root, ".", "oldroot")) != 0) ChildFail(sync, kStepPivotSetup, ErrOf(r));
  if ((r = RawSys(SYS_chdir, "/")) != 0) ChildFail(sync, kStepPivotSetup, ErrOf(r));
  if ((r = RawSys(SYS_mount, "tmpfs", "/newroot", "tmpfs", MS_NOSUID | MS_NODEV,
                  a.root_opts.c_str())) != 0) {
    ChildFail(sync, kStepRootTmpfs, ErrOf(r));
  }
  if ((r = RawSys(SYS_mount, "tmpfs", "/scratch", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
                  a.scratch_opts.c_str())) != 0) {
    ChildFail(sync, kStepScratchTmpfs, ErrOf(r));
  }
  if ((r = RawSys(SYS_mkdirat, AT_FDCWD, "/scratch/work", 0700)) != 0 ||
      (r = RawSys(SYS_mkdirat, AT_FDCWD, "/scratch/tmp", 0700)) != 0) {
    ChildFail(sync, kStepScratchTmpfs, ErrOf(r));
  }
  {
    long opened = RawSys(SYS_openat, AT_FDCWD, "/scratch/work", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (RawFailed(opened)) ChildFail(sync, kStepSendWorkFd, RawErrno(opened));
    int work = static_cast<int>(opened);
    char byte = 'W';
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
    std::memcpy(CMSG_DATA(cmsg), &work, sizeof work);
    if ((r = RawSys(SYS_sendmsg, sync, &msg, MSG_NOSIGNAL)) != 1) {
      ChildFail(sync, kStepSendWorkFd, ErrOf(r));
    }
    RawSys(SYS_close, work);
  }
  for (size_t i = 0; i < a.ops.size(); ++i) {
    const MountOp& op = a.ops[i];
    const int32_t index = static_cast<int32_t>(i);
    switch (op.kind) {
      case MountOp::kMkdir:
        r = RawSys(SYS_mkdirat, AT_FDCWD, op.a.c_str(), op.mode);
        if (r != 0 && r != -EEXIST) ChildFail(sync, kStepMkdir, ErrOf(r), index);
        break;
      case MountOp::kTouch: {
        long fd = RawSys(SYS_openat, AT_FDCWD, op.a.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
        if (RawFailed(fd)) ChildFail(sync, kStepTouch, RawErrno(fd), index);
        RawSys(SYS_close, fd);
        break;
      }
      case MountOp::kSymlink:
        if ((r = RawSys(SYS_symlinkat, op.a.c_str(), AT_FDCWD, op.b.c_str())) != 0) {
          ChildFail(sync, kStepSymlink, ErrOf(r), index);
        }
        break;
      case MountOp::kBind: {
        // Not recursive: whatever is mounted below an operator's folder stays outside.
        if (op.ino == 0) {
          if ((r = RawSys(SYS_mount, op.a.c_str(), op.b.c_str(), nullptr, MS_BIND, nullptr)) != 0) {
            ChildFail(sync, kStepBind, ErrOf(r), index);
          }
          break;
        }
        open_how how{};
        how.flags = O_PATH | O_DIRECTORY | O_CLOEXEC;
        how.resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
        long opened = RawSys(SYS_openat2, AT_FDCWD, op.a.c_str(), &how, sizeof how);
        if (RawFailed(opened)) ChildFail(sync, kStepBind, RawErrno(opened), index);
        int fd = static_cast<int>(opened);
        struct stat st;
        if ((r = RawSys(SYS_newfstatat, fd, "", &st, AT_EMPTY_PATH)) != 0) {
          ChildFail(sync, kStepBind, ErrOf(r), index);
        }
        if (static_cast<uint64_t>(st.st_dev) != op.dev ||
            static_cast<uint64_t>(st.st_ino) != op.ino) {
          ChildFail(sync, kStepBind, ESTALE, index);
        }
        // "/oldroot/proc/self/fd/<fd>": the host's procfs, where "self" is this child.
        char source[64] = "/oldroot/proc/self/fd/";
        size_t n = sizeof "/oldroot/proc/self/fd/" - 1;
        char digits[12];
        int d = 0;
        for (unsigned v = static_cast<unsigned>(fd); d == 0 || v != 0; v /= 10) {
          digits[d++] = static_cast<char>('0' + v % 10);
        }
        while (d > 0) source[n++] = digits[--d];
        source[n] = '\0';
        if ((r = RawSys(SYS_mount, source, op.b.c_str(), nullptr, MS_BIND, nullptr)) != 0) {
          ChildFail(sync, kStepBind, ErrOf(r), index);
        }
        RawSys(SYS_close, fd);
        break;
      }
      case MountOp::kAttr: {
        MountAttr attr{op.attr, 0, 0, 0};
        if ((r = RawSys(SYS_mount_setattr, AT_FDCWD, op.a.c_str(), op.recursive ? AT_RECURSIVE : 0,
                        &attr, sizeof attr)) != 0) {
          ChildFail(sync, kStepMountAttr, ErrOf(r), index);
        }
        break;
      }
      case MountOp::kWriteFile: {
        int err = WriteWholeFile(op.a.c_str(), op.b, op.mode);
        if (err != 0) ChildFail(sync, kStepWriteFile, err, index);
        break;
      }
    }
  }
  if ((r = RawSys(SYS_mount, "proc", "/newroot/proc", "proc",
                  MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "hidepid=invisible,subset=pid")) !=
      0) {
    ChildFail(sync, kStepProc, ErrOf(r));
  }
  {
    // The root itself becomes read-only last (the binds below it keep their own flags).
    MountAttr attr{kMountAttrRdonly | kMountAttrNosuid | kMountAttrNodev, 0, 0, 0};
    if ((r = RawSys(SYS_mount_setattr, AT_FDCWD, "/newroot", 0, &attr, sizeof attr)) != 0) {
      ChildFail(sync, kStepMountAttr, ErrOf(r));
    }
  }
  if ((r = RawSys(SYS_chdir, "/newroot")) != 0) ChildFail(sync, kStepPivotFinal, ErrOf(r));
  if ((r = RawSys(SYS_pivot_root, ".", ".")) != 0) ChildFail(sync, kStepPivotFinal, ErrOf(r));
  if ((r = RawSys(SYS_umount2, ".", MNT_DETACH)) != 0) ChildFail(sync, kStepPivotFinal, ErrOf(r));
  if ((r = RawSys(SYS_chdir, "/")) != 0) ChildFail(sync, kStepPivotFinal, ErrOf(r));

  // This process was born in its cgroup's v1 hierarchies; the host moves it into any v2 one
  // while the mounts above are made. Nothing of the program runs before it says so. Then the
  // cgroup namespace, rooted at that cgroup.
  if (ReadGo(sync) != 'C') ChildExit(127);
  if (RawFailed(r = RawSys(SYS_unshare, CLONE_NEWCGROUP))) {
    ChildFail(sync, kStepCgroupNs, RawErrno(r));
  }

  // Every handler back to the default (best effort; this now also resets the two real-time
  // signals glibc reserves for itself, which its sigaction refused and execve resets anyway),
  // then nothing blocked.
  const KernelSigaction dfl{SIG_DFL, 0, nullptr, 0};
  for (int sig = 1; sig <= 64; ++sig) {
    if (sig == SIGKILL || sig == SIGSTOP) continue;
    RawSys(SYS_rt_sigaction, sig, &dfl, nullptr, kKernelSigsetSize);
  }
  const uint64_t none = 0;
  if ((r = RawSys(SYS_rt_sigprocmask, SIG_SETMASK, &none, nullptr, kKernelSigsetSize)) != 0) {
    ChildFail(sync, kStepSignals, ErrOf(r));
  }

  // Descriptors first, before any limit on them: this child still holds a copy of the host's
  // whole descriptor table. 0-2 stdio (or /dev/null), 3 the channel, 4 the status pipe, 5 the
  // sync socket and 6 the init binary (both close-on-exec), 7 the oom_score_adj the init writes
  // and closes, nothing else.
  long lifted[8];
  const int sources[8] = {a.stdio[0],  a.stdio[1], a.stdio[2], a.channel_fd,
                          a.status_fd, sync,       a.init_fd,  oom_fd};
  for (int i = 0; i < 8; ++i) {
    lifted[i] = LiftFd(sources[i]);
    if (sources[i] >= 0 && RawFailed(lifted[i])) ChildFail(sync, kStepFds, RawErrno(lifted[i]), i);
  }
  int current_sync = static_cast<int>(lifted[5]);
  for (int i = 0; i < 3; ++i) {
    if (lifted[i] < 0) {
      lifted[i] = RawSys(SYS_openat, AT_FDCWD, "/dev/null",
                         i == 0 ? O_RDONLY | O_CLOEXEC : O_WRONLY | O_CLOEXEC);
      if (RawFailed(lifted[i])) ChildFail(current_sync, kStepFds, RawErrno(lifted[i]), i);
    }
  }
  static_assert(kInsideStatusFd == 4, "sources[4] is the status pipe");
  // dup3 for dup2: every lifted descriptor is at least 16, never equal to its target.
  for (int i = 0; i < 5; ++i) {
    if (lifted[i] < 0) continue;  // no channel
    if ((r = RawSys(SYS_dup3, lifted[i], i, 0)) != i)
      ChildFail(current_sync, kStepFds, ErrOf(r), i);
  }
  if ((r = RawSys(SYS_dup3, lifted[5], kInsideSyncFd, O_CLOEXEC)) != kInsideSyncFd) {
    ChildFail(current_sync, kStepFds, ErrOf(r), 5);
  }
  current_sync = kInsideSyncFd;
  if ((r = RawSys(SYS_dup3, lifted[6], kInsideInitFd, O_CLOEXEC)) != kInsideInitFd) {
    ChildFail(current_sync, kStepFds, ErrOf(r), 6);
  }
  if ((r = RawSys(SYS_dup3, lifted[7], kInsideOomFd, 0)) != kInsideOomFd) {
    ChildFail(current_sync, kStepFds, ErrOf(r), 7);
  }
  if (a.channel_fd < 0) RawSys(SYS_close, 3);
  static_assert(kInsideOomFd > kInsideInitFd && kInsideInitFd > kInsideSyncFd,
                "close_range keeps everything up to kInsideOomFd");
  if ((r = RawSys(SYS_close_range, kInsideOomFd + 1, ~0U, 0)) != 0) {
    ChildFail(current_sync, kStepFds, ErrOf(r));
  }

  for (const RlimitSetting& setting : a.rlimits) {
    KernelRlimit limit{static_cast<uint64_t>(setting.soft), static_cast<uint64_t>(setting.hard)};
    if ((r = RawSys(SYS_prlimit64, 0, setting.resource, &limit, nullptr)) != 0) {
      ChildFail(current_sync, kStepRlimit, ErrOf(r), setting.resource);
    }
  }
  if ((r = RawSys(SYS_prctl, PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)) != 0) {
    ChildFail(current_sync, kStepNoNewPrivs, ErrOf(r));
  }
  {
    // The plan names the init binary by its final number, kInsideInitFd.
    int failed_rule = -1;
    int rc = landlock::Apply(a.landlock, &failed_rule);
    if (rc != 0) ChildFail(current_sync, kStepLandlock, -rc, failed_rule);
  }
  // Speculative store bypass and indirect branch speculation off for the sandbox (best effort:
  // the calls fail on CPUs and kernels without the controls).
  RawSys(SYS_prctl, PR_SET_SPECULATION_CTRL, PR_SPEC_STORE_BYPASS, PR_SPEC_FORCE_DISABLE, 0, 0);
  RawSys(SYS_prctl, PR_SET_SPECULATION_CTRL, PR_SPEC_INDIRECT_BRANCH, PR_SPEC_FORCE_DISABLE, 0, 0);
  // Capabilities: the bounding set first (needs CAP_SETPCAP; every number the kernel might
  // know, EINVAL past its last), then ambient, then all sets.
  for (int cap = 0; cap < 64; ++cap) {
    r = RawSys(SYS_prctl, PR_CAPBSET_DROP, cap, 0, 0, 0);
    if (r != 0 && r != -EINVAL) ChildFail(current_sync, kStepCaps, ErrOf(r), cap);
  }
  if ((r = RawSys(SYS_prctl, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)) != 0) {
    ChildFail(current_sync, kStepCaps, ErrOf(r));
  }
  std::memset(caps, 0, sizeof caps);
  if ((r = RawSys(SYS_capset, &cap_header, caps)) != 0)
    ChildFail(current_sync, kStepCaps, ErrOf(r));
  if ((r = RawSys(SYS_prctl, PR_SET_KEEPCAPS, 0, 0, 0, 0)) != 0) {
    ChildFail(current_sync, kStepCaps, ErrOf(r));
  }

  // Die with the host's supervisor thread. Set after the last credential change (which
  // clears it), then check the host did not die before it was set.
  if ((r = RawSys(SYS_prctl, PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0)) != 0) {
    ChildFail(current_sync, kStepParentGone, ErrOf(r));
  }
  {
    pollfd pfd{current_sync, 0, 0};
    const timespec immediately{0, 0};
    if (RawSys(SYS_ppoll, &pfd, 1, &immediately, nullptr, kKernelSigsetSize) > 0 &&
        (pfd.revents & (POLLHUP | POLLERR)) != 0) {
      ChildExit(127);
    }
  }

  int rc = InstallSeccompPrograms(*a.seccomp);
  if (rc != 0) ChildFail(current_sync, kStepSeccomp, -rc);
  r = RawSys(SYS_execveat, kInsideInitFd, "", a.argv.data(), a.envp.data(), AT_EMPTY_PATH);
  ChildFail(current_sync, kStepExec, ErrOf(r));
}

}  // namespace vault::sandbox::internal
