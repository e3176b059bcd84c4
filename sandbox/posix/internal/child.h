// child: the clone child's side of a LinuxSandbox, from the "go" byte to the exec of the
// sandbox's init.
//
// The host fills a ChildArgs (plan.h) and clones ChildMain with new namespaces (see
// docs/sandbox.md for the order of the steps). ChildMain waits for 'G' on the sync socket (with
// the descriptor of its own /proc/<pid>/oom_score_adj, which it passes on to the init as
// kInsideOomFd), builds the sandbox's tree from the MountOps, hands the work directory's
// descriptor to the host, raises every fence and executes the init. When a step fails it sends one
// ChildError on the sync socket and exits with 127; the host names the step with StepName.
//
//   auto args = std::make_unique<ChildArgs>();  // ... filled by BuildChildArgs (plan.h)
//   pid_t pid = clone(ChildMain, stack_top, CLONE_NEWUSER | ... | SIGCHLD, args.get(), &pidfd);
//
// Thread safety: ChildMain runs in the clone child of a multithreaded process, so it is
// async-signal-safe: raw system calls on data prepared by the parent, no allocation, no locks,
// no logging. The host keeps its ChildArgs alive and unchanged until setup has ended (it reads
// the ops and Landlock rules back to describe a failure). StepName is pure.
#ifndef VAULT_SANDBOX_POSIX_INTERNAL_CHILD_H_
#define VAULT_SANDBOX_POSIX_INTERNAL_CHILD_H_

#include <sys/resource.h>
#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "sandbox/posix/landlock.h"
#include "sandbox/posix/seccomp.h"

namespace vault::sandbox::internal {

inline constexpr uid_t kInsideId = 1000;
inline constexpr int kInsideStatusFd = 4;  // vault-sandbox-init writes its reports here
inline constexpr int kInsideSyncFd = 5;
inline constexpr int kInsideInitFd = 6;
// The sandbox's /proc/<pid>/oom_score_adj, open for writing and kept across the exec: the init
// writes "1000" there (the host cannot while the child shares its memory) and closes it.
inline constexpr int kInsideOomFd = 7;

// MOUNT_ATTR_* of mount_setattr(2), defined here because <linux/mount.h> clashes with glibc
// 2.36's <sys/mount.h>.
inline constexpr uint64_t kMountAttrRdonly = 0x1;
inline constexpr uint64_t kMountAttrNosuid = 0x2;
inline constexpr uint64_t kMountAttrNodev = 0x4;
inline constexpr uint64_t kMountAttrNoexec = 0x8;

enum Step : int32_t {
  kStepGo = 1,
  kStepOomFd,
  kStepCgroupNs,
  kStepNetNs,
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

const char* StepName(int32_t step);

// What the child sends on the sync socket when a step fails.
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
  // kBind of an operator's folder: the device and inode the host checked. The child opens the
  // source without following any symlink, compares, and binds that very descriptor, so a
  // folder swapped after the host's check is refused (ESTALE) rather than bound.
  uint64_t dev = 0;
  uint64_t ino = 0;
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
  std::vector<MountOp> ops;  // before the work fd is sent
  landlock::Plan landlock;
  std::vector<RlimitSetting> rlimits;
  const SeccompPrograms* seccomp = nullptr;
  std::vector<std::string> argv_storage;
  std::vector<std::string> env_storage;
  std::vector<char*> argv;
  std::vector<char*> envp;
};

// The clone entry point; `raw` is a const ChildArgs*. Never returns: it executes the init or
// exits with 127 (after sending a ChildError when the host is still listening).
// Async-signal-safe.
int ChildMain(void* raw);

}  // namespace vault::sandbox::internal

#endif  // VAULT_SANDBOX_POSIX_INTERNAL_CHILD_H_
