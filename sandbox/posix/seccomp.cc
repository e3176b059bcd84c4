#include "sandbox/posix/seccomp.h"

#include <errno.h>
#include <linux/kd.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <seccomp.h>
#include <stdint.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <initializer_list>
#include <memory>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "common/file_util.h"
#include "common/status_macros.h"
#include "common/unique_fd.h"
#include "sandbox/posix/internal/raw_syscall.h"

namespace vault::sandbox {
namespace {

using common::PosixError;

// The allowlist's default answer. clone3 must answer ENOSYS so that glibc falls back to clone,
// whose flags (unlike clone3's, which sit behind a pointer) a filter can check. libseccomp
// refuses a rule whose action equals the default (EACCES), so clone3 gets its ENOSYS from the
// default; it is deliberately in neither table below, and this assertion keeps the two tied.
constexpr uint32_t kAllowlistDefault = SCMP_ACT_ERRNO(ENOSYS);
static_assert(kAllowlistDefault == SCMP_ACT_ERRNO(ENOSYS),
              "clone3 must answer ENOSYS; give it an explicit rule if the default changes");

// System calls allowed whatever their arguments. Calls that need an argument check (clone,
// socket, socketpair, mknod, mknodat, personality) are added by BuildAllowlist.
//
// System calls numbered 457 and up (statmount, listmount, lsm_*, mseal, the *xattrat family,
// open_tree_attr, file_getattr/file_setattr, ...) are unknown to libseccomp 2.5.4 and cannot be
// named here; the default ENOSYS answers them, which is also what an older kernel would say.
// Also left to the default, deliberately: clone3 (see above), calls the kernel no longer
// implements (getpmsg, putpmsg, afs_syscall, tuxcall, security, vserver, epoll_ctl_old,
// epoll_wait_old), remap_file_pages (deprecated) and process_mrelease.
constexpr const char* kAllowed[] = {
    // File I/O.
    "read", "write", "open", "openat", "openat2", "creat", "close", "close_range", "pread64",
    "pwrite64", "readv", "writev", "preadv", "pwritev", "preadv2", "pwritev2", "lseek", "sendfile",
    "copy_file_range", "splice", "tee", "vmsplice", "fallocate", "fadvise64", "readahead", "fsync",
    "fdatasync", "sync", "syncfs", "sync_file_range", "truncate", "ftruncate", "flock", "fcntl",
    "dup", "dup2", "dup3", "pipe", "pipe2", "ioctl",
    // File metadata and the directory tree (chmod/chown only act within the sandbox's user
    // namespace mapping).
    "stat", "fstat", "lstat", "newfstatat", "statx", "statfs", "fstatfs", "access", "faccessat",
    "faccessat2", "getdents", "getdents64", "getcwd", "chdir", "fchdir", "rename", "renameat",
    "renameat2", "mkdir", "mkdirat", "rmdir", "unlink", "unlinkat", "link", "linkat", "symlink",
    "symlinkat", "readlink", "readlinkat", "chmod", "fchmod", "fchmodat", "fchmodat2", "chown",
    "fchown", "lchown", "fchownat", "umask", "utime", "utimes", "futimesat", "utimensat",
    "setxattr", "lsetxattr", "fsetxattr", "getxattr", "lgetxattr", "fgetxattr", "listxattr",
    "llistxattr", "flistxattr", "removexattr", "lremovexattr", "fremovexattr", "cachestat",
    // Memory. mlock* are fenced by RLIMIT_MEMLOCK.
    "brk", "mmap", "munmap", "mprotect", "mremap", "madvise", "mincore", "msync", "mlock", "mlock2",
    "munlock", "mlockall", "munlockall", "membarrier", "memfd_create", "pkey_alloc", "pkey_free",
    "pkey_mprotect", "map_shadow_stack", "mbind", "get_mempolicy", "set_mempolicy",
    // Processes and threads (clone is added with its flag check).
    "fork", "vfork", "execve", "execveat", "exit", "exit_group", "wait4", "waitid", "kill", "tkill",
    "tgkill", "getpid", "gettid", "getppid", "set_tid_address", "set_robust_list",
    "get_robust_list", "futex", "futex_waitv", "futex_wake", "futex_wait", "futex_requeue", "rseq",
    "arch_prctl", "prctl", "set_thread_area", "get_thread_area", "pidfd_open", "pidfd_send_signal",
    // Scheduling, limits and accounting. Raising a hard limit or a real-time priority needs
    // capabilities in the initial user namespace, which the sandbox never has.
    "sched_yield", "sched_getaffinity", "sched_setaffinity", "sched_getparam", "sched_setparam",
    "sched_getscheduler", "sched_setscheduler", "sched_getattr", "sched_setattr",
    "sched_get_priority_max", "sched_get_priority_min", "sched_rr_get_interval", "getpriority",
    "setpriority", "ioprio_get", "ioprio_set", "getrlimit", "setrlimit", "prlimit64", "getrusage",
    "times", "sysinfo", "uname", "getcpu",
    // Credentials: the set* calls only move among the ids the sandbox already holds.
    "getuid", "geteuid", "getgid", "getegid", "getresuid", "getresgid", "getgroups", "setuid",
    "setgid", "setreuid", "setregid", "setresuid", "setresgid", "setfsuid", "setfsgid", "setgroups",
    "capget", "capset", "setsid", "setpgid", "getpgid", "getpgrp", "getsid",
    // Signals.
    "rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "rt_sigpending", "rt_sigtimedwait",
    "rt_sigqueueinfo", "rt_tgsigqueueinfo", "rt_sigsuspend", "sigaltstack", "pause",
    "restart_syscall",
    // Time (reading clocks and timers; setting the clock is refused below).
    "nanosleep", "clock_nanosleep", "clock_gettime", "clock_getres", "gettimeofday", "time",
    "alarm", "getitimer", "setitimer", "timer_create", "timer_settime", "timer_gettime",
    "timer_getoverrun", "timer_delete", "timerfd_create", "timerfd_settime", "timerfd_gettime",
    // Polling and event descriptors.
    "poll", "ppoll", "select", "pselect6", "epoll_create", "epoll_create1", "epoll_ctl",
    "epoll_wait", "epoll_pwait", "epoll_pwait2", "eventfd", "eventfd2", "signalfd", "signalfd4",
    "inotify_init", "inotify_init1", "inotify_add_watch", "inotify_rm_watch",
    // Randomness.
    "getrandom",
    // SysV IPC and POSIX message queues: the IPC namespace is private.
    "shmget", "shmat", "shmdt", "shmctl", "semget", "semop", "semtimedop", "semctl", "msgget",
    "msgsnd", "msgrcv", "msgctl", "mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive",
    "mq_notify", "mq_getsetattr",
    // Socket calls that act on an existing descriptor; only AF_UNIX stream and seqpacket ones
    // can be created, on which sendmsg's address is refused or ignored by the kernel. connect
    // is refused and sendto takes no address (rules below): a named host socket in a folder
    // bound into the sandbox (a daemon's, a container runtime's) must stay unreachable, and
    // Landlock cannot yet refuse it.
    "bind", "listen", "accept", "accept4", "recvfrom", "sendmsg", "recvmsg", "sendmmsg", "recvmmsg",
    "shutdown", "getsockname", "getpeername", "setsockopt", "getsockopt",
    // These only add restrictions.
    "seccomp", "landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self"};

// System calls refused with EPERM by name, so the answer does not depend on the default.
constexpr const char* kRefused[] = {
    // Reaching named Unix sockets of the host (see kAllowed).
    "connect",
    // Reaching into other processes.
    "ptrace", "process_vm_readv", "process_vm_writev", "process_madvise", "pidfd_getfd", "kcmp",
    // Mounts and namespaces.
    "mount", "umount2", "pivot_root", "chroot", "fsopen", "fsconfig", "fsmount", "fspick",
    "open_tree", "move_mount", "mount_setattr", "unshare", "setns",
    // Large kernel attack surface.
    "bpf", "keyctl", "add_key", "request_key", "userfaultfd", "perf_event_open", "io_uring_setup",
    "io_uring_enter", "io_uring_register", "io_setup", "io_submit", "io_destroy", "io_getevents",
    "io_pgetevents", "io_cancel", "fanotify_init", "fanotify_mark", "memfd_secret",
    "set_mempolicy_home_node", "move_pages", "migrate_pages", "lookup_dcookie",
    // The machine itself: kernel code, power, logs, accounting, swap, quotas.
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
    "create_module", "get_kernel_syms", "query_module", "reboot", "syslog", "acct", "quotactl",
    "quotactl_fd", "swapon", "swapoff", "_sysctl", "nfsservctl",
    // File handles bypass path-based confinement.
    "open_by_handle_at", "name_to_handle_at",
    // Clocks and host names.
    "settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "sethostname", "setdomainname",
    // x86 hardware and legacy interfaces.
    "iopl", "ioperm", "modify_ldt", "vhangup", "uselib", "ustat", "sysfs"};

// clone() flags that create namespaces. CLONE_NEWTIME (0x80) is left out: for clone() that bit
// is part of the exit-signal byte; time namespaces come only from unshare and clone3, both
// refused.
constexpr uint64_t kCloneNamespaceFlags[] = {
    CLONE_NEWNS,   CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC,
    CLONE_NEWUSER, CLONE_NEWPID,    CLONE_NEWNET,
};

// personality() values allowed, as in Docker's default profile: PER_LINUX, PER_LINUX32,
// UNAME26, UNAME26|PER_LINUX32, and the 0xffffffff query. Others (ADDR_NO_RANDOMIZE,
// READ_IMPLIES_EXEC, ...) fall to the default ENOSYS.
constexpr uint64_t kAllowedPersonalities[] = {0x0, 0x8, 0x20000, 0x20008, 0xffffffff};

// ioctl commands refused by the argument filter, compared on their low 32 bits.
constexpr uint64_t kRefusedIoctls[] = {
    TIOCSTI,       // Pushes bytes into a terminal's input queue: command injection.
    TIOCLINUX,     // Console selection and paste (injection), console control.
    TIOCSETD,      // Line disciplines: module autoload and a history of kernel bugs.
    TIOCCONS,      // Redirects the console's output.
    TIOCSSERIAL,   // Serial port configuration.
    KDSKBENT,      // Keyboard map: what a key sends.
    KDSKBSENT,     // Function-key strings: injection on the next key press.
    KDSETKEYCODE,  // Scancode to keycode map.
    KDSIGACCEPT,   // Signal sent on the keyboard's "spawn console" key.
};

// Low 32 bits of an argument the kernel reads as (unsigned) int.
constexpr uint64_t kLow32 = 0xffffffff;

struct ContextDeleter {
  void operator()(scmp_filter_ctx ctx) const { seccomp_release(ctx); }
};
using Context = std::unique_ptr<void, ContextDeleter>;

using common::UniqueFd;

// libseccomp's state (the kernel feature probes behind seccomp_init and seccomp_attr_set) is
// global and unlocked; builds are serialized.
ABSL_CONST_INIT absl::Mutex libseccomp_mu(absl::kConstInit);

// libseccomp returns -errno.
absl::Status LibseccompError(int rc, absl::string_view what) {
  return PosixError(-rc, absl::StrCat("libseccomp ", what));
}

// SCMP_A0() and friends are C compound literals, which -Wpedantic refuses in C++.
scmp_arg_cmp Arg(unsigned int arg, scmp_compare op, uint64_t datum_a, uint64_t datum_b = 0) {
  return scmp_arg_cmp{arg, op, datum_a, datum_b};
}

absl::StatusOr<Context> NewContext(uint32_t default_action) {
  Context ctx(seccomp_init(default_action));
  if (ctx == nullptr) return absl::InternalError("libseccomp seccomp_init failed");
  // seccomp_init adds only the native architecture (checked to be x86-64 by the caller). On an
  // x86-64-only filter libseccomp 2.5.4 also sends system call numbers with the x32 bit
  // (0x40000000) to the bad-architecture action, so x32 and i386 calls both kill the process.
  if (seccomp_arch_exist(ctx.get(), SCMP_ARCH_X86_64) != 0) {
    return absl::InternalError("libseccomp filter does not cover x86-64");
  }
  if (int rc = seccomp_attr_set(ctx.get(), SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
      rc != 0) {
    return LibseccompError(rc, "set the bad-architecture action");
  }
  // A binary search over system call numbers instead of a linear scan.
  if (int rc = seccomp_attr_set(ctx.get(), SCMP_FLTATR_CTL_OPTIMIZE, 2); rc != 0) {
    return LibseccompError(rc, "set the optimization level");
  }
  return ctx;
}

// Adds a rule for the named system call. Names libseccomp does not know, or that do not exist
// on x86-64 (negative pseudo-numbers), are skipped.
absl::Status AddRule(scmp_filter_ctx ctx, uint32_t action, const char* name,
                     std::initializer_list<scmp_arg_cmp> args = {}) {
  int nr = seccomp_syscall_resolve_name(name);
  if (nr < 0) return absl::OkStatus();
  int rc = seccomp_rule_add_exact_array(ctx, action, nr, static_cast<unsigned int>(args.size()),
                                        args.begin());
  if (rc != 0) return LibseccompError(rc, absl::StrCat("add a rule for ", name));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<sock_filter>> ExportBpf(scmp_filter_ctx ctx) {
  UniqueFd fd(memfd_create("vault-seccomp-bpf", MFD_CLOEXEC));
  if (fd.get() < 0) return PosixError(errno, "memfd_create for the seccomp program");
  if (int rc = seccomp_export_bpf(ctx, fd.get()); rc != 0) {
    return LibseccompError(rc, "seccomp_export_bpf");
  }
  struct stat st;
  if (fstat(fd.get(), &st) != 0) return PosixError(errno, "fstat the exported seccomp program");
  const auto size = static_cast<size_t>(st.st_size);
  if (size == 0 || size % sizeof(sock_filter) != 0) {
    return absl::InternalError(absl::StrCat("exported seccomp program has ", size, " bytes"));
  }
  if (size / sizeof(sock_filter) > BPF_MAXINSNS) {
    return absl::ResourceExhaustedError(
        absl::StrCat("seccomp program has ", size / sizeof(sock_filter),
                     " instructions; the kernel takes ", BPF_MAXINSNS));
  }
  std::vector<sock_filter> program(size / sizeof(sock_filter));
  auto* out = reinterpret_cast<char*>(program.data());
  size_t done = 0;
  while (done < size) {
    ssize_t n = pread(fd.get(), out + done, size - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return PosixError(errno, "read the exported seccomp program");
    if (n == 0) return absl::InternalError("exported seccomp program shrank while read");
    done += static_cast<size_t>(n);
  }
  return program;
}

absl::StatusOr<std::vector<sock_filter>> BuildAllowlist() {
  VAULT_ASSIGN_OR_RETURN(Context ctx, NewContext(kAllowlistDefault));
  for (const char* name : kAllowed) {
    VAULT_RETURN_IF_ERROR(AddRule(ctx.get(), SCMP_ACT_ALLOW, name));
  }
  for (const char* name : kRefused) {
    VAULT_RETURN_IF_ERROR(AddRule(ctx.get(), SCMP_ACT_ERRNO(EPERM), name));
  }

  // clone: allowed without namespace flags; EPERM with any of them.
  uint64_t all_namespace_flags = 0;
  for (uint64_t flag : kCloneNamespaceFlags) {
    all_namespace_flags |= flag;
    VAULT_RETURN_IF_ERROR(AddRule(ctx.get(), SCMP_ACT_ERRNO(EPERM), "clone",
                                  {Arg(0, SCMP_CMP_MASKED_EQ, flag, flag)}));
  }
  VAULT_RETURN_IF_ERROR(AddRule(ctx.get(), SCMP_ACT_ALLOW, "clone",
                                {Arg(0, SCMP_CMP_MASKED_EQ, all_namespace_flags, 0)}));

  // socket, socketpair: AF_UNIX only; every other domain answers EPERM. The two comparisons
  // are exact complements over the whole 64-bit argument, so they never both match.
  // Of AF_UNIX, only SOCK_STREAM and SOCK_SEQPACKET (type compared on its low 4 bits, past
  // SOCK_NONBLOCK / SOCK_CLOEXEC): a datagram socket could sendmsg to any named host socket.
  for (const char* name : {"socket", "socketpair"}) {
    for (uint64_t type : {uint64_t{SOCK_STREAM}, uint64_t{SOCK_SEQPACKET}}) {
      VAULT_RETURN_IF_ERROR(
          AddRule(ctx.get(), SCMP_ACT_ALLOW, name,
                  {Arg(0, SCMP_CMP_EQ, AF_UNIX), Arg(1, SCMP_CMP_MASKED_EQ, 0xf, type)}));
    }
    VAULT_RETURN_IF_ERROR(AddRule(
        ctx.get(), SCMP_ACT_ERRNO(EPERM), name,
        {Arg(0, SCMP_CMP_EQ, AF_UNIX), Arg(1, SCMP_CMP_MASKED_EQ, 0xf, uint64_t{SOCK_DGRAM})}));
    VAULT_RETURN_IF_ERROR(
        AddRule(ctx.get(), SCMP_ACT_ERRNO(EPERM), name, {Arg(0, SCMP_CMP_NE, AF_UNIX)}));
  }
  // sendto without an address only (argument 4, dest_addr).
  VAULT_RETURN_IF_ERROR(AddRule(ctx.get(), SCMP_ACT_ALLOW, "sendto", {Arg(4, SCMP_CMP_EQ, 0)}));
  VAULT_RETURN_IF_ERROR(
      AddRule(ctx.get(), SCMP_ACT_ERRNO(EPERM), "sendto", {Arg(4, SCMP_CMP_NE, 0)}));

  // mknod(path, mode, dev), mknodat(dirfd, path, mode, dev): FIFOs and regular files (a zero
  // type means a regular file); device nodes answer EPERM; other types (sockets, directories,
  // garbage) fall to the default ENOSYS.
  for (auto [name, mode_arg] : {std::pair<const char*, unsigned int>{"mknod", 1}, {"mknodat", 2}}) {
    for (uint64_t type : {uint64_t{S_IFIFO}, uint64_t{S_IFREG}, uint64_t{0}}) {
      VAULT_RETURN_IF_ERROR(AddRule(ctx.get(), SCMP_ACT_ALLOW, name,
                                    {Arg(mode_arg, SCMP_CMP_MASKED_EQ, S_IFMT, type)}));
    }
    for (uint64_t type : {uint64_t{S_IFCHR}, uint64_t{S_IFBLK}}) {
      VAULT_RETURN_IF_ERROR(AddRule(ctx.get(), SCMP_ACT_ERRNO(EPERM), name,
                                    {Arg(mode_arg, SCMP_CMP_MASKED_EQ, S_IFMT, type)}));
    }
  }

  // personality: compared on the low 32 bits, as the kernel reads an unsigned int.
  for (uint64_t persona : kAllowedPersonalities) {
    VAULT_RETURN_IF_ERROR(AddRule(ctx.get(), SCMP_ACT_ALLOW, "personality",
                                  {Arg(0, SCMP_CMP_MASKED_EQ, kLow32, persona)}));
  }
  return ExportBpf(ctx.get());
}

absl::StatusOr<std::vector<sock_filter>> BuildArgumentDenials() {
  VAULT_ASSIGN_OR_RETURN(Context ctx, NewContext(SCMP_ACT_ALLOW));
  // The kernel truncates the command to unsigned int, so 0xffffffff00005412 is TIOCSTI too.
  for (uint64_t command : kRefusedIoctls) {
    VAULT_RETURN_IF_ERROR(AddRule(ctx.get(), SCMP_ACT_ERRNO(EPERM), "ioctl",
                                  {Arg(1, SCMP_CMP_MASKED_EQ, kLow32, command)}));
  }
  return ExportBpf(ctx.get());
}

// Runs in the sandbox's clone child, which shares its errno with the host's supervisor thread
// and other children: a raw system call, its error taken from the result, never from errno.
int InstallProgram(const std::vector<sock_filter>& program) noexcept {
  if (program.empty() || program.size() > BPF_MAXINSNS) return -EINVAL;
  sock_fprog prog{};
  prog.len = static_cast<unsigned short>(program.size());
  // The kernel copies the program; it never writes through this pointer.
  prog.filter = const_cast<sock_filter*>(program.data());
  return static_cast<int>(internal::RawSys(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog));
}

}  // namespace

absl::StatusOr<SeccompPrograms> BuildSeccompPrograms() {
  absl::MutexLock lock(&libseccomp_mu);
  if (seccomp_arch_native() != SCMP_ARCH_X86_64) {
    return absl::UnimplementedError("the seccomp filters are written for x86-64 only");
  }
  SeccompPrograms programs;
  VAULT_ASSIGN_OR_RETURN(programs.allowlist, BuildAllowlist());
  VAULT_ASSIGN_OR_RETURN(programs.argument_denials, BuildArgumentDenials());
  return programs;
}

std::string SerializeSeccompPrograms(const SeccompPrograms& programs) {
  std::string out;
  for (const std::vector<sock_filter>* p : {&programs.argument_denials, &programs.allowlist}) {
    const uint32_t n = static_cast<uint32_t>(p->size());
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
    out.append(reinterpret_cast<const char*>(p->data()), p->size() * sizeof(sock_filter));
  }
  return out;
}

int InstallSeccompPrograms(const SeccompPrograms& programs) noexcept {
  // The argument filter first: installing the allowlist is itself a system call it must let
  // through (it allows everything but some ioctls), and the allowlist then allows seccomp too.
  if (int rc = InstallProgram(programs.argument_denials); rc != 0) return rc;
  return InstallProgram(programs.allowlist);
}

}  // namespace vault::sandbox
