// seccomp: the sandbox's two seccomp-BPF filters, compiled once with libseccomp in the host
// process and installed in the child just before it executes the sandbox's init.
//
// 1. The allowlist: a default-deny filter (unknown system calls answer ENOSYS) that allows the
//    calls ordinary programs need, with arguments checked where that matters (clone without
//    namespace flags, socket/socketpair for AF_UNIX only, mknod for FIFOs and regular files,
//    personality only for the harmless personas). Dangerous calls answer EPERM by name
//    (ptrace, process_vm_*, mount family, unshare/setns, bpf, keyctl/add_key/request_key,
//    userfaultfd, perf_event_open, io_uring_*, kexec/modules/reboot/syslog, open_by_handle_at,
//    ...). clone3 answers ENOSYS so libc falls back to clone, whose flags can be checked.
// 2. The argument denials: a default-allow filter that refuses ioctl commands by their low 32
//    bits (TIOCSTI, TIOCLINUX, ...), since an allowlist rule cannot say "any command but".
// The kernel applies the stricter answer of the two. Both kill the process (SECCOMP_RET_KILL_
// PROCESS) for any architecture but x86-64 (i386 int 0x80, x32).
//
// Thread safety: BuildSeccompPrograms is thread-safe; InstallSeccompPrograms is async-signal-
// safe (raw system calls, no allocation) and meant for a freshly cloned child.
#ifndef VAULT_SANDBOX_POSIX_SECCOMP_H_
#define VAULT_SANDBOX_POSIX_SECCOMP_H_

#include <linux/filter.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace vault::sandbox {

struct SeccompPrograms {
  std::vector<sock_filter> allowlist;
  std::vector<sock_filter> argument_denials;
};

absl::StatusOr<SeccompPrograms> BuildSeccompPrograms();

// Both programs as bytes, in the order they are installed (the argument denials, then the
// allowlist), each as a 32-bit little-endian instruction count followed by its instructions:
// what vault-container-init reads and installs in a container (sandbox/container/).
std::string SerializeSeccompPrograms(const SeccompPrograms& programs);

// Installs both programs on the calling thread's process (PR_SET_NO_NEW_PRIVS must be set, or
// CAP_SYS_ADMIN held). Returns 0, or -errno of the failing call. Async-signal-safe.
int InstallSeccompPrograms(const SeccompPrograms& programs) noexcept;

}  // namespace vault::sandbox

#endif  // VAULT_SANDBOX_POSIX_SECCOMP_H_
