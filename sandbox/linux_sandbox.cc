#include "sandbox/linux_sandbox.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/openat2.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

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
#include "sandbox/cgroup.h"
#include "sandbox/landlock.h"
#include "sandbox/seccomp.h"
#include "spdlog/spdlog.h"

namespace vault::sandbox {
namespace {

constexpr uid_t kInsideId = 1000;
constexpr int kInsideStatusFd = 4;
constexpr int kInsideSyncFd = 5;
constexpr int kInsideInitFd = 6;
constexpr absl::Duration kSetupTimeout = absl::Seconds(10);
constexpr absl::Duration kCpuPollInterval = absl::Milliseconds(100);

// mount_setattr(2), defined here because <linux/mount.h> clashes with glibc 2.36's <sys/mount.h>.
struct MountAttr {
  uint64_t attr_set;
  uint64_t attr_clr;
  uint64_t propagation;
  uint64_t userns_fd;
};
constexpr uint64_t kMountAttrRdonly = 0x1;
constexpr uint64_t kMountAttrNosuid = 0x2;
constexpr uint64_t kMountAttrNodev = 0x4;
constexpr uint64_t kMountAttrNoexec = 0x8;
#ifndef AT_RECURSIVE
#define AT_RECURSIVE 0x8000
#endif

// ---------------------------------------------------------------------------------------------
// The child's side. Everything below runs in the clone child of a multithreaded process: raw
// system calls on data prepared by the parent, no allocation, no locks, no logging.

enum Step : int32_t {
  kStepGo = 1,
  kStepCgroupNs,
  kStepSetsid,
  kStepIds,
  kStepHostname,
  kStepMountPrivate,
  kStepSetupTmpfs,
  kStepPivotSetup,
  kStepRootTmpfs,
  kStepScratchTmpfs,
  kStepMkdir,
  kStepTouch,
  kStepSymlink,
  kStepBind,
  kStepMountAttr,
  kStepWriteFile,
  kStepSendWorkFd,
  kStepProc,
  kStepPivotFinal,
  kStepRlimit,
  kStepNoNewPrivs,
  kStepLandlock,
  kStepCaps,
  kStepParentGone,
  kStepSignals,
  kStepFds,
  kStepSeccomp,
  kStepExec,
};

const char* StepName(int32_t step) {
  switch (step) {
    case kStepGo:
      return "waiting for the host";
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

struct ChildError {
  int32_t step = 0;
  int32_t err = 0;
  int32_t detail = -1;  // index of the mount op or landlock rule, when relevant
};

struct MountOp {
  enum Kind { kMkdir, kTouch, kSymlink, kBind, kAttr, kWriteFile } kind;
  std::string a;           // mkdir/touch/attr/write: path; symlink: target; bind: source
  std::string b;           // symlink: link path; bind: target; write: contents
  uint64_t attr = 0;       // kAttr: MOUNT_ATTR_* to set
  bool recursive = false;  // kAttr: AT_RECURSIVE
  mode_t mode = 0755;
};

struct RlimitSetting {
  int resource;
  rlim_t soft;
  rlim_t hard;
};

struct ChildArgs {
  int sync_fd = -1;
  int status_fd = -1;
  int init_fd = -1;
  int stdio[3] = {-1, -1, -1};
  int channel_fd = -1;
  bool drop_groups = false;
  int cap_last = 40;
  std::string setup_opts;
  std::string root_opts;
  std::string scratch_opts;
  std::string dev_opts;
  std::vector<MountOp> ops;  // before the work fd is sent
  landlock::Plan landlock;
  std::vector<RlimitSetting> rlimits;
  const SeccompPrograms* seccomp = nullptr;
  std::vector<std::string> argv_storage;
  std::vector<std::string> env_storage;
  std::vector<char*> argv;
  std::vector<char*> envp;
};

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

// Moves `fd` to exactly `target` (close-on-exec as asked), whatever numbers the others hold:
// every source was first lifted above the target range by LiftFd.
int LiftFd(int fd) { return fd < 0 ? fd : fcntl(fd, F_DUPFD_CLOEXEC, 16); }

int ChildMain(void* raw) {
  const ChildArgs& a = *static_cast<const ChildArgs*>(raw);
  const int sync = a.sync_fd;
  char go = 0;
  ssize_t got;
  do {
    got = read(sync, &go, 1);
  } while (got < 0 && errno == EINTR);
  if (got != 1 || go != 'G') _exit(127);  // the host gave up on us

  if (unshare(CLONE_NEWCGROUP) != 0) ChildFail(sync, kStepCgroupNs, errno);
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
      case MountOp::kBind:
        if (mount(op.a.c_str(), op.b.c_str(), nullptr, MS_BIND | MS_REC, nullptr) != 0) {
          ChildFail(sync, kStepBind, errno, index);
        }
        break;
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
  if (mount("proc", "/newroot/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC,
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

  for (const RlimitSetting& setting : a.rlimits) {
    rlimit limit{setting.soft, setting.hard};
    if (setrlimit(setting.resource, &limit) != 0)
      ChildFail(sync, kStepRlimit, errno, setting.resource);
  }
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) ChildFail(sync, kStepNoNewPrivs, errno);
  {
    int failed_rule = -1;
    int rc = landlock::Apply(a.landlock, &failed_rule);
    if (rc != 0) ChildFail(sync, kStepLandlock, -rc, failed_rule);
  }
  // Capabilities: the bounding set first (needs CAP_SETPCAP), then ambient, then all sets.
  for (int cap = 0; cap <= a.cap_last; ++cap) {
    if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL) {
      ChildFail(sync, kStepCaps, errno, cap);
    }
  }
  if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0)
    ChildFail(sync, kStepCaps, errno);
  std::memset(caps, 0, sizeof caps);
  if (syscall(SYS_capset, &cap_header, caps) != 0) ChildFail(sync, kStepCaps, errno);
  if (prctl(PR_SET_KEEPCAPS, 0, 0, 0, 0) != 0) ChildFail(sync, kStepCaps, errno);

  // Die with the host's supervisor thread. Set after the last credential change (which
  // clears it), then check the host did not die before it was set.
  if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0) ChildFail(sync, kStepParentGone, errno);
  {
    pollfd pfd{sync, 0, 0};
    if (poll(&pfd, 1, 0) > 0 && (pfd.revents & (POLLHUP | POLLERR)) != 0) _exit(127);
  }

  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig == SIGKILL || sig == SIGSTOP) continue;
    sigaction(sig, &dfl, nullptr);  // fails harmlessly for the numbers glibc reserves
  }
  sigset_t none;
  sigemptyset(&none);
  if (sigprocmask(SIG_SETMASK, &none, nullptr) != 0) ChildFail(sync, kStepSignals, errno);

  // Descriptors: 0-2 stdio (or /dev/null), 3 the channel, 4 the status pipe, 5 the sync
  // socket and 6 the init binary (both close-on-exec), nothing else.
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

  int rc = InstallSeccompPrograms(*a.seccomp);
  if (rc != 0) ChildFail(current_sync, kStepSeccomp, -rc);
  syscall(SYS_execveat, kInsideInitFd, "", a.argv.data(), a.envp.data(), AT_EMPTY_PATH);
  ChildFail(current_sync, kStepExec, errno);
}

// ---------------------------------------------------------------------------------------------
// The host's side.

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

bool ValidName(absl::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') {
      return false;
    }
  }
  return true;
}

bool ValidEnvEntry(absl::string_view entry) {
  size_t eq = entry.find('=');
  if (eq == absl::string_view::npos || eq == 0 || entry.find('\0') != absl::string_view::npos) {
    return false;
  }
  for (size_t i = 0; i < eq; ++i) {
    char c = entry[i];
    if (!(absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_') ||
        (i == 0 && absl::ascii_isdigit(static_cast<unsigned char>(c)))) {
      return false;
    }
  }
  return true;
}

// Absolute, normalized, no "..", no NUL.
absl::Status CheckInsidePath(absl::string_view what, absl::string_view path) {
  if (path.empty() || path[0] != '/' || path.find('\0') != absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " must be an absolute path: \"", path, "\""));
  }
  for (absl::string_view part : absl::StrSplit(path, '/', absl::SkipEmpty())) {
    if (part == "." || part == "..") {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " must not contain . or ..: \"", path, "\""));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ResolveHostDir(absl::string_view what, const std::string& path) {
  std::error_code ec;
  std::filesystem::path resolved = std::filesystem::canonical(path, ec);
  if (ec) {
    return absl::NotFoundError(absl::StrCat(what, " ", path, ": ", ec.message()));
  }
  if (!std::filesystem::is_directory(resolved, ec)) {
    return absl::InvalidArgumentError(absl::StrCat(what, " ", path, " is not a directory"));
  }
  std::string result = resolved.string();
  for (const char* refused : {"/proc", "/sys", "/dev"}) {
    if (result == refused || absl::StartsWith(result, absl::StrCat(refused, "/"))) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " ", path, " is under ", refused, ", which is never mounted in"));
    }
  }
  if (result == "/") {
    return absl::InvalidArgumentError(absl::StrCat(what, " must not be the host's root"));
  }
  return result;
}

// The mkdir ops for every missing parent of `inside` (an absolute path) under /newroot.
void AddMkdirs(std::vector<MountOp>& ops, const std::string& inside, mode_t mode = 0755) {
  std::string prefix = "/newroot";
  for (absl::string_view part : absl::StrSplit(inside, '/', absl::SkipEmpty())) {
    absl::StrAppend(&prefix, "/", part);
    ops.push_back({MountOp::kMkdir, prefix, "", 0, false, mode});
  }
}

void AddReadOnlyBind(std::vector<MountOp>& ops, const std::string& host, const std::string& inside,
                     bool allow_exec) {
  AddMkdirs(ops, inside);
  std::string target = absl::StrCat("/newroot", inside);
  ops.push_back({MountOp::kBind, absl::StrCat("/oldroot", host), target});
  uint64_t attr = kMountAttrRdonly | kMountAttrNosuid | kMountAttrNodev;
  if (!allow_exec) attr |= kMountAttrNoexec;
  ops.push_back({MountOp::kAttr, target, "", attr, true});
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

// Sandbox ids are "<name>-<pid>-<n>", n counted per process: every LinuxSandbox of a process
// shares the cgroup folder, so their ids must not collide.
std::atomic<uint64_t>& SandboxCounter() {
  static std::atomic<uint64_t> counter{0};
  return counter;
}

bool ProbeUserNamespaces(std::string* why) {
  static char stack[64 * 1024] alignas(16);
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
  UniqueFd pidfd;
  pid_t pid = -1;
  UniqueFd status_fd;  // init's report pipe
  UniqueFd work_fd;    // O_PATH of /work inside (keeps the tmpfs alive)
  std::unique_ptr<Cgroup> cgroup;
  int uid_slot = -1;

  absl::Mutex mu;
  bool done ABSL_GUARDED_BY(mu) = false;
  bool paused ABSL_GUARDED_BY(mu) = false;
  bool kill_requested ABSL_GUARDED_BY(mu) = false;
  LimitHit limit ABSL_GUARDED_BY(mu) = LimitHit::kNone;
  absl::Time deadline ABSL_GUARDED_BY(mu);
  absl::Time paused_at ABSL_GUARDED_BY(mu);
  ExitInfo exit ABSL_GUARDED_BY(mu);
};

class LinuxSandbox::Impl {
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
    bool root_mode;
    uid_t host_uid;
    gid_t host_gid;
    Cgroup* cgroup;
    int sync_parent_fd;
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
  uid_t self_uid_ = 0;
  gid_t self_gid_ = 0;

  UniqueFd epoll_;
  UniqueFd wake_;
  std::thread supervisor_;

  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<CloneRequest*> clone_queue_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<int, std::shared_ptr<SandboxState>> live_ ABSL_GUARDED_BY(mu_);  // by pidfd
  absl::flat_hash_map<int, int> used_slots_ ABSL_GUARDED_BY(mu_);  // slot -> its lock fd
  std::string id_lock_dir_;
  int next_slot_ ABSL_GUARDED_BY(mu_) = 0;
};

namespace {

class LinuxSandboxHandle : public SandboxHandle {
 public:
  LinuxSandboxHandle(LinuxSandbox::Impl* impl, std::shared_ptr<SandboxState> state)
      : impl_(impl), state_(std::move(state)) {}
  ~LinuxSandboxHandle() override {
    absl::Status killed = Kill();
    if (!killed.ok()) spdlog::warn("sandbox {}: {}", state_->id, killed.ToString());
    impl_->Unregister(state_);
  }

  const std::string& id() const override { return state_->id; }

  absl::Status Pause() override {
    absl::MutexLock lock(&state_->mu);
    if (state_->done) return absl::FailedPreconditionError("sandbox has ended");
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

  bool paused() const override {
    absl::MutexLock lock(&state_->mu);
    return state_->paused;
  }

  absl::StatusOr<std::string> ReadWorkFile(const std::string& relative_path,
                                           size_t max_bytes) override {
    if (relative_path.empty() || relative_path[0] == '/' ||
        relative_path.find('\0') != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("work file path must be relative: \"", relative_path, "\""));
    }
    open_how how{};
    how.flags = O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY;
    how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV;
    UniqueFd fd(static_cast<int>(
        syscall(SYS_openat2, state_->work_fd.get(), relative_path.c_str(), &how, sizeof how)));
    if (fd.get() < 0) {
      int err = errno;
      if (err == ELOOP) {
        return absl::PermissionDeniedError(
            absl::StrCat("work file ", relative_path, ": symlinks are not followed"));
      }
      if (err == EXDEV) {
        return absl::PermissionDeniedError(
            absl::StrCat("work file ", relative_path, ": escapes the work directory"));
      }
      return Errno(err, absl::StrCat("work file ", relative_path));
    }
    struct stat st;
    if (fstat(fd.get(), &st) != 0) return Errno(errno, "fstat work file");
    if (!S_ISREG(st.st_mode)) {
      return absl::FailedPreconditionError(
          absl::StrCat("work file ", relative_path, " is not a regular file"));
    }
    std::string data;
    char buf[64 * 1024];
    for (;;) {
      ssize_t n = read(fd.get(), buf, sizeof buf);
      if (n < 0) {
        if (errno == EINTR) continue;
        return Errno(errno, "read work file");
      }
      if (n == 0) break;
      data.append(buf, static_cast<size_t>(n));
      if (data.size() > max_bytes) {
        return absl::ResourceExhaustedError(
            absl::StrCat("work file ", relative_path, " is larger than ", max_bytes, " bytes"));
      }
    }
    return data;
  }

  absl::StatusOr<CopyStats> CopyWorkDirTo(const std::string& host_dir) override {
    {
      absl::MutexLock lock(&state_->mu);
      if (!state_->done) {
        return absl::FailedPreconditionError("copy the work directory after the sandbox ended");
      }
    }
    if (mkdir(host_dir.c_str(), 0700) != 0 && errno != EEXIST) {
      return Errno(errno, absl::StrCat("mkdir ", host_dir));
    }
    UniqueFd target(open(host_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (target.get() < 0) return Errno(errno, absl::StrCat("open ", host_dir));
    {
      std::error_code ec;
      if (!std::filesystem::is_empty(host_dir, ec) || ec) {
        return absl::FailedPreconditionError(absl::StrCat(host_dir, " is not empty"));
      }
    }
    open_how how{};
    how.flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW;
    how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV;
    UniqueFd source(
        static_cast<int>(syscall(SYS_openat2, state_->work_fd.get(), ".", &how, sizeof how)));
    if (source.get() < 0) return Errno(errno, "open the work directory");
    CopyStats stats;
    VAULT_RETURN_IF_ERROR(CopyTree(source.get(), target.get(), 0, stats));
    return stats;
  }

 private:
  static absl::Status CopyTree(int from, int to, int depth, CopyStats& stats) {
    if (depth > 64) return absl::ResourceExhaustedError("work directory nested too deep");
    int dup_fd = fcntl(from, F_DUPFD_CLOEXEC, 0);
    if (dup_fd < 0) return Errno(errno, "dup");
    DIR* dir = fdopendir(dup_fd);
    if (dir == nullptr) {
      close(dup_fd);
      return Errno(errno, "fdopendir");
    }
    std::unique_ptr<DIR, int (*)(DIR*)> closer(dir, closedir);
    while (dirent* entry = readdir(dir)) {
      std::string name = entry->d_name;
      if (name == "." || name == "..") continue;
      struct stat st;
      if (fstatat(from, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return Errno(errno, name);
      if (S_ISDIR(st.st_mode)) {
        UniqueFd sub(openat(from, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        if (sub.get() < 0) return Errno(errno, absl::StrCat("open ", name));
        if (mkdirat(to, name.c_str(), 0700) != 0) return Errno(errno, absl::StrCat("mkdir ", name));
        UniqueFd sub_to(openat(to, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        if (sub_to.get() < 0) return Errno(errno, absl::StrCat("open ", name));
        ++stats.directories;
        VAULT_RETURN_IF_ERROR(CopyTree(sub.get(), sub_to.get(), depth + 1, stats));
      } else if (S_ISREG(st.st_mode)) {
        UniqueFd in(openat(from, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
        if (in.get() < 0) return Errno(errno, absl::StrCat("open ", name));
        UniqueFd out(
            openat(to, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
        if (out.get() < 0) return Errno(errno, absl::StrCat("create ", name));
        char buf[64 * 1024];
        ssize_t n;
        while ((n = read(in.get(), buf, sizeof buf)) > 0) {
          if (write(out.get(), buf, static_cast<size_t>(n)) != n) return Errno(errno, "write");
          stats.bytes += static_cast<uint64_t>(n);
        }
        if (n < 0) return Errno(errno, absl::StrCat("read ", name));
        ++stats.files;
      } else {
        ++stats.skipped;
      }
    }
    return absl::OkStatus();
  }

  LinuxSandbox::Impl* impl_;
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

  // The system part of every sandbox's tree. Merged-/usr links are copied as links.
  for (const char* dir : {"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}) {
    struct stat st;
    if (lstat(dir, &st) != 0) continue;
    if (S_ISLNK(st.st_mode)) {
      char target[4096];
      ssize_t n = readlink(dir, target, sizeof target - 1);
      if (n <= 0) continue;
      system_ops_.push_back({MountOp::kSymlink, std::string(target, static_cast<size_t>(n)),
                             absl::StrCat("/newroot", dir)});
    } else if (S_ISDIR(st.st_mode)) {
      AddReadOnlyBind(system_ops_, dir, dir, /*allow_exec=*/true);
    }
  }
  system_ops_.push_back({MountOp::kMkdir, "/newroot/etc"});
  if (access("/etc/ld.so.cache", R_OK) == 0) {
    system_ops_.push_back({MountOp::kTouch, "/newroot/etc/ld.so.cache"});
    system_ops_.push_back({MountOp::kBind, "/oldroot/etc/ld.so.cache", "/newroot/etc/ld.so.cache"});
    system_ops_.push_back(
        {MountOp::kAttr, "/newroot/etc/ld.so.cache", "",
         kMountAttrRdonly | kMountAttrNosuid | kMountAttrNodev | kMountAttrNoexec});
  }
  struct stat alternatives;
  if (stat("/etc/alternatives", &alternatives) == 0 && S_ISDIR(alternatives.st_mode)) {
    AddReadOnlyBind(system_ops_, "/etc/alternatives", "/etc/alternatives", /*allow_exec=*/false);
  }
  system_ops_.push_back({MountOp::kWriteFile, "/newroot/etc/passwd",
                         "agent:x:1000:1000:vault agent:/work:/usr/sbin/nologin\n", 0, false,
                         0644});
  system_ops_.push_back(
      {MountOp::kWriteFile, "/newroot/etc/group", "agent:x:1000:\n", 0, false, 0644});
  system_ops_.push_back(
      {MountOp::kWriteFile, "/newroot/etc/hostname", "vault-sandbox\n", 0, false, 0644});
  // /dev: a small tmpfs with four device nodes bound from the host, read-only once made.
  system_ops_.push_back({MountOp::kMkdir, "/newroot/dev"});
  system_ops_.push_back({MountOp::kMkdir, "/newroot/proc", "", 0, false, 0555});
  for (const char* device : {"null", "zero", "random", "urandom"}) {
    std::string target = absl::StrCat("/newroot/dev/", device);
    system_ops_.push_back({MountOp::kTouch, target});
    system_ops_.push_back({MountOp::kBind, absl::StrCat("/oldroot/dev/", device), target});
    system_ops_.push_back({MountOp::kAttr, target, "", kMountAttrNosuid | kMountAttrNoexec});
  }
  system_ops_.push_back({MountOp::kSymlink, "/proc/self/fd", "/newroot/dev/fd"});
  system_ops_.push_back({MountOp::kSymlink, "/proc/self/fd/0", "/newroot/dev/stdin"});
  system_ops_.push_back({MountOp::kSymlink, "/proc/self/fd/1", "/newroot/dev/stdout"});
  system_ops_.push_back({MountOp::kSymlink, "/proc/self/fd/2", "/newroot/dev/stderr"});
  // The work directory and /tmp: two binds of the one quota'd scratch tmpfs.
  system_ops_.push_back({MountOp::kMkdir, "/newroot/work"});
  system_ops_.push_back({MountOp::kBind, "/scratch/work", "/newroot/work"});
  system_ops_.push_back({MountOp::kMkdir, "/newroot/tmp", "", 0, false, 01777});
  system_ops_.push_back({MountOp::kBind, "/scratch/tmp", "/newroot/tmp"});

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
  constexpr size_t kStackSize = 256 * 1024;
  void* stack = mmap(nullptr, kStackSize, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  if (stack == MAP_FAILED) {
    request.status = Errno(errno, "mmap clone stack");
    return;
  }
  int pidfd = -1;
  pid_t pid = clone(ChildMain, static_cast<char*>(stack) + kStackSize,
                    CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC |
                        CLONE_NEWUTS | CLONE_PIDFD | SIGCHLD,
                    request.args, &pidfd);
  int clone_errno = errno;
  munmap(stack, kStackSize);
  if (pid < 0) {
    request.status = Errno(clone_errno, "clone with new namespaces");
    return;
  }
  request.pid = pid;
  request.pidfd = pidfd;
  auto fail = [&](absl::Status status) {
    SendSignal(pidfd, SIGKILL, nullptr, 0);
    siginfo_t info;
    syscall(SYS_waitid, P_PIDFD, pidfd, &info, WEXITED, nullptr);
    close(pidfd);
    request.pidfd = -1;
    request.status = std::move(status);
  };
  // Map the sandbox's uid/gid 1000 to its host id.
  std::string uid_line = absl::StrCat(kInsideId, " ", request.host_uid, " 1\n");
  std::string gid_line = absl::StrCat(kInsideId, " ", request.host_gid, " 1\n");
  absl::Status status = WriteProcFile(pid, "uid_map", uid_line);
  if (status.ok() && !request.root_mode) status = WriteProcFile(pid, "setgroups", "deny");
  if (status.ok()) status = WriteProcFile(pid, "gid_map", gid_line);
  if (status.ok() && request.cgroup != nullptr) status = request.cgroup->AddProcess(pid);
  if (status.ok()) {
    char go = 'G';
    if (send(request.sync_parent_fd, &go, 1, MSG_NOSIGNAL) != 1) status = Errno(errno, "send go");
  }
  if (!status.ok()) fail(std::move(status));
}

absl::StatusOr<std::unique_ptr<SandboxHandle>> LinuxSandbox::Impl::Spawn(const SandboxSpec& spec) {
  const absl::Time started = absl::Now();
  VAULT_RETURN_IF_ERROR(ValidateLimits(spec.limits));
  VAULT_RETURN_IF_ERROR(CheckInsidePath("program", spec.program));
  if (!spec.name.empty() && !ValidName(spec.name)) {
    return absl::InvalidArgumentError(
        absl::StrCat("sandbox name must match [A-Za-z0-9._-]{1,64}: \"", spec.name, "\""));
  }
  for (const std::string& arg : spec.argv) {
    if (arg.find('\0') != std::string::npos) return absl::InvalidArgumentError("argv contains NUL");
  }
  for (const std::string& entry : spec.env) {
    if (!ValidEnvEntry(entry)) {
      return absl::InvalidArgumentError(
          absl::StrCat("environment entry must be KEY=VALUE: \"", entry, "\""));
    }
  }

  auto args = std::make_unique<ChildArgs>();
  args->drop_groups = fences_.running_as_root;
  args->cap_last = cap_last_;
  args->seccomp = &seccomp_;
  args->setup_opts = "mode=0755,size=64k,nr_inodes=64";
  args->root_opts =
      absl::StrCat("mode=0755,size=1m,nr_inodes=1024,uid=", kInsideId, ",gid=", kInsideId);
  args->scratch_opts = absl::StrCat("mode=0700,size=", spec.limits.storage_bytes,
                                    ",nr_inodes=", spec.limits.storage_inodes, ",uid=", kInsideId,
                                    ",gid=", kInsideId);
  args->ops = system_ops_;
  std::vector<landlock::Rule> rules = {
      {"/", landlock::kReadDir},
      {"/usr", landlock::kReadOnly},
      {"/etc", landlock::kReadFile | landlock::kReadDir},
      {"/proc", landlock::kReadFile | landlock::kReadDir},
      {"/dev/null", landlock::kReadFile | landlock::kWriteFile},
      {"/dev/zero", landlock::kReadFile | landlock::kWriteFile},
      {"/dev/random", landlock::kReadFile},
      {"/dev/urandom", landlock::kReadFile},
      {"/work", landlock::kReadWrite},
      {"/tmp", landlock::kReadWrite},
  };
  for (const char* dir : {"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}) {
    rules.push_back({dir, landlock::kReadOnly, /*optional=*/true});
  }
  if (!spec.code_dir.empty()) {
    VAULT_ASSIGN_OR_RETURN(std::string code, ResolveHostDir("code directory", spec.code_dir));
    AddReadOnlyBind(args->ops, code, "/code", /*allow_exec=*/true);
    rules.push_back({"/code", landlock::kReadOnly});
  }
  for (const std::string& dir : spec.read_only_dirs) {
    VAULT_ASSIGN_OR_RETURN(std::string host, ResolveHostDir("read-only directory", dir));
    for (const char* reserved : {"/work", "/code", "/etc"}) {
      if (host == reserved || absl::StartsWith(host, absl::StrCat(reserved, "/"))) {
        return absl::InvalidArgumentError(
            absl::StrCat("read-only directory ", dir, " would hide the sandbox's own ", reserved));
      }
    }
    if (host == "/tmp")
      return absl::InvalidArgumentError("read-only directory /tmp would hide /tmp");
    AddReadOnlyBind(args->ops, host, host, /*allow_exec=*/true);
    rules.push_back({host, landlock::kReadOnly});
  }
  args->landlock = landlock::MakePlan(fences_.landlock_abi, std::move(rules));
  args->landlock.extra_fd = init_fd_.get();
  args->landlock.extra_access = landlock::kExecute | landlock::kReadFile;

  const Limits& limits = spec.limits;
  args->rlimits = {
      {RLIMIT_CORE, 0, 0},
      {RLIMIT_NOFILE, limits.max_open_files, limits.max_open_files},
      {RLIMIT_FSIZE, limits.max_file_bytes, limits.max_file_bytes},
      {RLIMIT_CPU, limits.cpu_seconds, limits.cpu_seconds + 1},
      {RLIMIT_NPROC, limits.max_processes, limits.max_processes},
      {RLIMIT_MEMLOCK, 64 * 1024, 64 * 1024},
      {RLIMIT_MSGQUEUE, 64 * 1024, 64 * 1024},
      {RLIMIT_SIGPENDING, 1024, 1024},
  };
  if (cgroups_ == nullptr) {
    // Without the memory cgroup the address-space limit is the only memory fence.
    args->rlimits.push_back({RLIMIT_AS, limits.memory_bytes, limits.memory_bytes});
  }

  args->argv_storage = {"vault-sandbox-init", spec.program};
  if (spec.argv.empty()) {
    args->argv_storage.push_back(spec.program);
  } else {
    args->argv_storage.insert(args->argv_storage.end(), spec.argv.begin(), spec.argv.end());
  }
  args->env_storage = {"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/work", "TMPDIR=/tmp",
                       "LANG=C.UTF-8", "USER=agent"};
  if (spec.channel_fd >= 0) args->env_storage.push_back("VAULT_CHANNEL_FD=3");
  args->env_storage.insert(args->env_storage.end(), spec.env.begin(), spec.env.end());
  for (std::string& s : args->argv_storage) args->argv.push_back(s.data());
  args->argv.push_back(nullptr);
  for (std::string& s : args->env_storage) args->envp.push_back(s.data());
  args->envp.push_back(nullptr);

  // Descriptors the child gets.
  int sync_pair[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sync_pair) != 0) {
    return Errno(errno, "socketpair");
  }
  UniqueFd sync_parent(sync_pair[0]);
  UniqueFd sync_child(sync_pair[1]);
  int status_pipe[2];
  if (pipe2(status_pipe, O_CLOEXEC) != 0) return Errno(errno, "pipe2");
  UniqueFd status_read(status_pipe[0]);
  UniqueFd status_write(status_pipe[1]);
  args->sync_fd = sync_child.get();
  args->status_fd = status_write.get();
  args->init_fd = init_fd_.get();
  args->stdio[0] = spec.stdin_fd;
  args->stdio[1] = spec.stdout_fd;
  args->stdio[2] = spec.stderr_fd;
  args->channel_fd = spec.channel_fd;

  auto state = std::make_shared<SandboxState>();
  state->id = absl::StrCat(spec.name.empty() ? "sb" : spec.name, "-", getpid(), "-",
                           SandboxCounter().fetch_add(1));
  state->limits = limits;
  state->started = started;
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
  if (cgroups_ != nullptr) {
    CgroupLimits cgroup_limits;
    cgroup_limits.memory_bytes = limits.memory_bytes;
    cgroup_limits.max_pids = limits.max_processes;
    cgroup_limits.cpu_percent = limits.cpu_percent;
    absl::StatusOr<std::unique_ptr<Cgroup>> cgroup = cgroups_->Create(state->id, cgroup_limits);
    if (!cgroup.ok()) {
      ReleaseSlot(slot);
      return cgroup.status();
    }
    state->cgroup = std::move(*cgroup);
  }
  auto cleanup_early = [&](absl::Status status) {
    if (state->cgroup != nullptr) (void)state->cgroup->Remove();
    ReleaseSlot(slot);
    return status;
  };

  CloneRequest request;
  request.args = args.get();
  request.root_mode = fences_.running_as_root;
  request.host_uid = host_uid;
  request.host_gid = host_gid;
  request.cgroup = state->cgroup.get();
  request.sync_parent_fd = sync_parent.get();
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
  state->pid = request.pid;
  state->pidfd = UniqueFd(request.pidfd);
  sync_child.Reset();
  status_write.Reset();

  // Register now: from here on the supervisor reaps it, whatever happens below.
  {
    absl::MutexLock lock(&state->mu);
    state->deadline = started + limits.wall_time;
  }
  {
    absl::MutexLock lock(&mu_);
    live_[state->pidfd.get()] = state;
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = state->pidfd.get();
  if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, state->pidfd.get(), &ev) != 0) {
    absl::Status status = Errno(errno, "epoll_ctl pidfd");
    auto handle = std::make_unique<LinuxSandboxHandle>(this, state);
    return status;  // the handle's destructor kills and unregisters
  }
  Wake();
  auto handle = std::make_unique<LinuxSandboxHandle>(this, state);

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
    if (n == 0) break;  // close-on-exec: the init runs
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
  return handle;
}

void LinuxSandbox::Impl::Signal(const std::shared_ptr<SandboxState>& state, LimitHit limit,
                                bool requested) {
  bool thaw = false;
  {
    absl::MutexLock lock(&state->mu);
    if (state->done) return;
    if (requested) state->kill_requested = true;
    if (limit != LimitHit::kNone && state->limit == LimitHit::kNone) state->limit = limit;
    thaw = state->paused;
  }
  // SIGKILL to the sandbox's PID 1 makes the kernel kill every process of its PID namespace.
  SendSignal(state->pidfd.get(), SIGKILL, nullptr, 0);
  if (state->cgroup != nullptr) {
    if (thaw) (void)state->cgroup->Thaw();  // frozen tasks die only once thawed
  }
}

void LinuxSandbox::Impl::Unregister(const std::shared_ptr<SandboxState>& state) {
  absl::MutexLock lock(&mu_);
  live_.erase(state->pidfd.get());
}

void LinuxSandbox::Impl::Reap(const std::shared_ptr<SandboxState>& state) {
  siginfo_t info{};
  rusage usage{};
  if (syscall(SYS_waitid, P_PIDFD, state->pidfd.get(), &info, WEXITED | WNOHANG, &usage) != 0 ||
      info.si_pid == 0) {
    return;  // not yet
  }
  epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, state->pidfd.get(), nullptr);
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

  absl::MutexLock lock(&state->mu);
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
}

void LinuxSandbox::Impl::SupervisorLoop() {
  for (;;) {
    // Clone requests first: they are what a caller is blocked on.
    std::vector<std::shared_ptr<SandboxState>> live;
    absl::Time next = absl::InfiniteFuture();
    bool cpu_watch = false;
    {
      absl::MutexLock lock(&mu_);
      while (!clone_queue_.empty()) {
        CloneRequest* request = clone_queue_.front();
        clone_queue_.pop_front();
        mu_.Unlock();
        DoClone(*request);
        mu_.Lock();
        request->finished = true;
      }
      for (auto& [fd, state] : live_) live.push_back(state);
    }
    bool stopping;
    {
      absl::MutexLock lock(&mu_);
      stopping = stopping_;
    }
    const absl::Time now = absl::Now();
    for (const auto& state : live) {
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
      Reap(state);
      {
        absl::MutexLock lock(&state->mu);
        if (state->done) continue;
      }
      if (!paused && now >= deadline) {
        Signal(state, LimitHit::kWallTime, false);
        continue;
      }
      if (!paused) next = std::min(next, deadline);
      if (state->cgroup != nullptr) {
        cpu_watch = true;
        absl::StatusOr<CgroupReadings> readings = state->cgroup->Read();
        if (readings.ok() && absl::Nanoseconds(readings->cpu_usage_ns) >
                                 absl::Seconds(static_cast<int64_t>(state->limits.cpu_seconds))) {
          Signal(state, LimitHit::kCpuTime, false);
        }
      }
    }
    if (stopping) {
      // Reap what was killed, then leave.
      for (const auto& state : live) {
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
    if (cpu_watch) next = std::min(next, now + kCpuPollInterval);
    int timeout_ms = -1;
    if (next != absl::InfiniteFuture()) {
      timeout_ms =
          static_cast<int>(std::max<int64_t>(1, absl::ToInt64Milliseconds(next - absl::Now()) + 1));
    }
    epoll_event events[16];
    int n = epoll_wait(epoll_.get(), events, 16, timeout_ms);
    for (int i = 0; i < n; ++i) {
      if (events[i].data.fd == wake_.get()) {
        uint64_t value;
        ssize_t ignored = read(wake_.get(), &value, sizeof value);
        (void)ignored;
      }
    }
  }
}

LinuxSandbox::LinuxSandbox(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
LinuxSandbox::~LinuxSandbox() = default;

absl::StatusOr<std::unique_ptr<LinuxSandbox>> LinuxSandbox::Create(
    const LinuxSandboxOptions& options) {
  auto impl = std::make_unique<Impl>();
  VAULT_RETURN_IF_ERROR(impl->Init(options));
  return std::unique_ptr<LinuxSandbox>(new LinuxSandbox(std::move(impl)));
}

absl::StatusOr<std::unique_ptr<SandboxHandle>> LinuxSandbox::Spawn(const SandboxSpec& spec) {
  return impl_->Spawn(spec);
}

const FenceReport& LinuxSandbox::fences() const { return impl_->fences(); }

}  // namespace vault::sandbox
