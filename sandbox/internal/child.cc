#include "sandbox/internal/child.h"

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
#include <unistd.h>

#include <cstring>

namespace vault::sandbox::internal {

// Runs in the host, naming the step of a ChildError.
const char* StepName(int32_t step) {
  switch (step) {
    case kStepGo:
      return "waiting for the host";
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
// system calls on data prepared by the parent, no allocation, no locks, no logging.

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

[[noreturn]] void ChildFail(int sync_fd, int32_t step, int err, int32_t detail = -1) {
  ChildError error{step, err, detail};
  ssize_t ignored = send(sync_fd, &error, sizeof error, MSG_NOSIGNAL);
  (void)ignored;
  _exit(127);
}

int WriteWholeFile(const char* path, const std::string& contents, mode_t mode) {
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0) return errno;
  size_t done = 0;
  while (done < contents.size()) {
    ssize_t n = write(fd, contents.data() + done, contents.size() - done);
    if (n < 0) {
      int err = errno;
      close(fd);
      return err;
    }
    done += static_cast<size_t>(n);
  }
  close(fd);
  return 0;
}

// Copies `fd` (close-on-exec) to a number above every final position 0-6, so that the dup2s
// into place never overwrite a source still needed.
int LiftFd(int fd) { return fd < 0 ? fd : fcntl(fd, F_DUPFD_CLOEXEC, 16); }

}  // namespace

int ChildMain(void* raw) {
  const ChildArgs& a = *static_cast<const ChildArgs*>(raw);
  const int sync = a.sync_fd;
  // The network namespace is the costly one to create (loopback, sysctl tables): made here,
  // while the host writes this child's id maps, rather than by clone() before it returns.
  if (unshare(CLONE_NEWNET) != 0) ChildFail(sync, kStepNetNs, errno);
  char go = 0;
  ssize_t got;
  do {
    got = read(sync, &go, 1);
  } while (got < 0 && errno == EINTR);
  if (got != 1 || go != 'G') _exit(127);  // the host gave up on us

  if (setsid() < 0) ChildFail(sync, kStepSetsid, errno);

  // Become uid/gid 1000 inside (the host id the parent mapped), keeping the namespace's
  // capabilities for the mounts below; they are all dropped before exec.
  // Raw system calls: glibc's set*id wrappers broadcast to every thread the parent had, and
  // would wait forever for threads that do not exist in this child.
  if (a.drop_groups && syscall(SYS_setgroups, 0, nullptr) != 0) ChildFail(sync, kStepIds, errno);
  if (prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0) != 0) ChildFail(sync, kStepIds, errno);
  if (syscall(SYS_setresgid, kInsideId, kInsideId, kInsideId) != 0)
    ChildFail(sync, kStepIds, errno);
  if (syscall(SYS_setresuid, kInsideId, kInsideId, kInsideId) != 0)
    ChildFail(sync, kStepIds, errno);
  __user_cap_header_struct cap_header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct caps[2];
  if (syscall(SYS_capget, &cap_header, caps) != 0) ChildFail(sync, kStepIds, errno);
  caps[0].effective = caps[0].permitted;
  caps[1].effective = caps[1].permitted;
  if (syscall(SYS_capset, &cap_header, caps) != 0) ChildFail(sync, kStepIds, errno);

  static const char kHostname[] = "vault-sandbox";
  if (sethostname(kHostname, sizeof kHostname - 1) != 0) ChildFail(sync, kStepHostname, errno);

  // Mounts: a setup tmpfs becomes the root for a moment so that every host path stays
  // reachable under /oldroot while the real root is built at /newroot (bubblewrap's way).
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
    ChildFail(sync, kStepMountPrivate, errno);
  }
  if (mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, a.setup_opts.c_str()) != 0) {
    ChildFail(sync, kStepSetupTmpfs, errno);
  }
  if (chdir("/tmp") != 0 || mkdir("oldroot", 0700) != 0 || mkdir("newroot", 0755) != 0 ||
      mkdir("scratch", 0700) != 0) {
    ChildFail(sync, kStepSetupTmpfs, errno);
  }
  if (syscall(SYS_pivot_root, ".", "oldroot") != 0) ChildFail(sync, kStepPivotSetup, errno);
  if (chdir("/") != 0) ChildFail(sync, kStepPivotSetup, errno);
  if (mount("tmpfs", "/newroot", "tmpfs", MS_NOSUID | MS_NODEV, a.root_opts.c_str()) != 0) {
    ChildFail(sync, kStepRootTmpfs, errno);
  }
  if (mount("tmpfs", "/scratch", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
            a.scratch_opts.c_str()) != 0) {
    ChildFail(sync, kStepScratchTmpfs, errno);
  }
  if (mkdir("/scratch/work", 0700) != 0 || mkdir("/scratch/tmp", 0700) != 0) {
    ChildFail(sync, kStepScratchTmpfs, errno);
  }
  {
    int work = open("/scratch/work", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (work < 0) ChildFail(sync, kStepSendWorkFd, errno);
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
    if (sendmsg(sync, &msg, MSG_NOSIGNAL) != 1) ChildFail(sync, kStepSendWorkFd, errno);
    close(work);
  }
  for (size_t i = 0; i < a.ops.size(); ++i) {
    const MountOp& op = a.ops[i];
    const int32_t index = static_cast<int32_t>(i);
    switch (op.kind) {
      case MountOp::kMkdir:
        if (mkdir(op.a.c_str(), op.mode) != 0 && errno != EEXIST) {
          ChildFail(sync, kStepMkdir, errno, index);
        }
        break;
      case MountOp::kTouch: {
        int fd = open(op.a.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0) ChildFail(sync, kStepTouch, errno, index);
        close(fd);
        break;
      }
      case MountOp::kSymlink:
        if (symlink(op.a.c_str(), op.b.c_str()) != 0) ChildFail(sync, kStepSymlink, errno, index);
        break;
      case MountOp::kBind: {
        // Not recursive: whatever is mounted below an operator's folder stays outside.
        if (op.ino == 0) {
          if (mount(op.a.c_str(), op.b.c_str(), nullptr, MS_BIND, nullptr) != 0) {
            ChildFail(sync, kStepBind, errno, index);
          }
          break;
        }
        open_how how{};
        how.flags = O_PATH | O_DIRECTORY | O_CLOEXEC;
        how.resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
        int fd = static_cast<int>(syscall(SYS_openat2, AT_FDCWD, op.a.c_str(), &how, sizeof how));
        if (fd < 0) ChildFail(sync, kStepBind, errno, index);
        struct stat st;
        if (fstat(fd, &st) != 0) ChildFail(sync, kStepBind, errno, index);
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
        if (mount(source, op.b.c_str(), nullptr, MS_BIND, nullptr) != 0) {
          ChildFail(sync, kStepBind, errno, index);
        }
        close(fd);
        break;
      }
      case MountOp::kAttr: {
        MountAttr attr{op.attr, 0, 0, 0};
        if (syscall(SYS_mount_setattr, AT_FDCWD, op.a.c_str(), op.recursive ? AT_RECURSIVE : 0,
                    &attr, sizeof attr) != 0) {
          ChildFail(sync, kStepMountAttr, errno, index);
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
  if (mount("proc", "/newroot/proc", "proc", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
            "hidepid=invisible,subset=pid") != 0) {
    ChildFail(sync, kStepProc, errno);
  }
  {
    // The root itself becomes read-only last (the binds below it keep their own flags).
    MountAttr attr{kMountAttrRdonly | kMountAttrNosuid | kMountAttrNodev, 0, 0, 0};
    if (syscall(SYS_mount_setattr, AT_FDCWD, "/newroot", 0, &attr, sizeof attr) != 0) {
      ChildFail(sync, kStepMountAttr, errno);
    }
  }
  if (chdir("/newroot") != 0) ChildFail(sync, kStepPivotFinal, errno);
  if (syscall(SYS_pivot_root, ".", ".") != 0) ChildFail(sync, kStepPivotFinal, errno);
  if (umount2(".", MNT_DETACH) != 0) ChildFail(sync, kStepPivotFinal, errno);
  if (chdir("/") != 0) ChildFail(sync, kStepPivotFinal, errno);

  // The host moves this process into its cgroup while the mounts above are made (a v1
  // cgroup.procs write can wait for an RCU grace period); nothing of the program runs before
  // it says so. Then the cgroup namespace, rooted at that cgroup.
  do {
    got = read(sync, &go, 1);
  } while (got < 0 && errno == EINTR);
  if (got != 1 || go != 'C') _exit(127);
  if (unshare(CLONE_NEWCGROUP) != 0) ChildFail(sync, kStepCgroupNs, errno);

  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig == SIGKILL || sig == SIGSTOP) continue;
    sigaction(sig, &dfl, nullptr);  // fails harmlessly for the numbers glibc reserves
  }
  sigset_t none;
  sigemptyset(&none);
  if (sigprocmask(SIG_SETMASK, &none, nullptr) != 0) ChildFail(sync, kStepSignals, errno);

  // Descriptors first, before any limit on them: this child still holds a copy of the host's
  // whole descriptor table. 0-2 stdio (or /dev/null), 3 the channel, 4 the status pipe, 5 the
  // sync socket and 6 the init binary (both close-on-exec), nothing else.
  int lifted[7];
  const int sources[7] = {a.stdio[0],  a.stdio[1], a.stdio[2], a.channel_fd,
                          a.status_fd, sync,       a.init_fd};
  for (int i = 0; i < 7; ++i) {
    lifted[i] = LiftFd(sources[i]);
    if (sources[i] >= 0 && lifted[i] < 0) ChildFail(sync, kStepFds, errno, i);
  }
  int current_sync = lifted[5];
  for (int i = 0; i < 3; ++i) {
    if (lifted[i] < 0) {
      lifted[i] = open("/dev/null", i == 0 ? O_RDONLY | O_CLOEXEC : O_WRONLY | O_CLOEXEC);
      if (lifted[i] < 0) ChildFail(current_sync, kStepFds, errno, i);
    }
  }
  static_assert(kInsideStatusFd == 4, "sources[4] is the status pipe");
  for (int i = 0; i < 5; ++i) {
    if (lifted[i] < 0) continue;  // no channel
    if (dup2(lifted[i], i) != i) ChildFail(current_sync, kStepFds, errno, i);
  }
  if (dup3(lifted[5], kInsideSyncFd, O_CLOEXEC) != kInsideSyncFd) {
    ChildFail(current_sync, kStepFds, errno, 5);
  }
  current_sync = kInsideSyncFd;
  if (dup3(lifted[6], kInsideInitFd, O_CLOEXEC) != kInsideInitFd) {
    ChildFail(current_sync, kStepFds, errno, 6);
  }
  if (a.channel_fd < 0) close(3);
  if (syscall(SYS_close_range, kInsideInitFd + 1, ~0U, 0) != 0) {
    ChildFail(current_sync, kStepFds, errno);
  }

  for (const RlimitSetting& setting : a.rlimits) {
    rlimit limit{setting.soft, setting.hard};
    if (setrlimit(setting.resource, &limit) != 0) {
      ChildFail(current_sync, kStepRlimit, errno, setting.resource);
    }
  }
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) ChildFail(current_sync, kStepNoNewPrivs, errno);
  {
    // The plan names the init binary by its final number, kInsideInitFd.
    int failed_rule = -1;
    int rc = landlock::Apply(a.landlock, &failed_rule);
    if (rc != 0) ChildFail(current_sync, kStepLandlock, -rc, failed_rule);
  }
  // Speculative store bypass and indirect branch speculation off for the sandbox (best effort:
  // the calls fail on CPUs and kernels without the controls).
  prctl(PR_SET_SPECULATION_CTRL, PR_SPEC_STORE_BYPASS, PR_SPEC_FORCE_DISABLE, 0, 0);
  prctl(PR_SET_SPECULATION_CTRL, PR_SPEC_INDIRECT_BRANCH, PR_SPEC_FORCE_DISABLE, 0, 0);
  // Capabilities: the bounding set first (needs CAP_SETPCAP; every number the kernel might
  // know, EINVAL past its last), then ambient, then all sets.
  for (int cap = 0; cap < 64; ++cap) {
    if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL) {
      ChildFail(current_sync, kStepCaps, errno, cap);
    }
  }
  if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0) {
    ChildFail(current_sync, kStepCaps, errno);
  }
  std::memset(caps, 0, sizeof caps);
  if (syscall(SYS_capset, &cap_header, caps) != 0) ChildFail(current_sync, kStepCaps, errno);
  if (prctl(PR_SET_KEEPCAPS, 0, 0, 0, 0) != 0) ChildFail(current_sync, kStepCaps, errno);

  // Die with the host's supervisor thread. Set after the last credential change (which
  // clears it), then check the host did not die before it was set.
  if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0) {
    ChildFail(current_sync, kStepParentGone, errno);
  }
  {
    pollfd pfd{current_sync, 0, 0};
    if (poll(&pfd, 1, 0) > 0 && (pfd.revents & (POLLHUP | POLLERR)) != 0) _exit(127);
  }

  int rc = InstallSeccompPrograms(*a.seccomp);
  if (rc != 0) ChildFail(current_sync, kStepSeccomp, -rc);
  syscall(SYS_execveat, kInsideInitFd, "", a.argv.data(), a.envp.data(), AT_EMPTY_PATH);
  ChildFail(current_sync, kStepExec, errno);
}

}  // namespace vault::sandbox::internal
