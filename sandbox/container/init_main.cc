// vault-container-init: the first program of every container agent, bound read-only at
// /.vault/init in the container by its runtime config (oci_config.h).
//
//   /.vault/init PROGRAM ARGS...        (fd 4: the seccomp programs; environment: the program's)
//
// runc has set up every other fence (namespaces, the read-only root, no capabilities,
// noNewPrivileges, cgroups) and executed this program. It reads from fd 4 the posix sandbox's
// two seccomp filters, which the vault built with libseccomp and serialized
// (SerializeSeccompPrograms: per program a 32-bit little-endian instruction count, then the
// instructions, in install order), installs them, closes fd 4 and executes PROGRAM. So a
// container agent runs under exactly the filters a posix agent does, argument checks included,
// which an OCI seccomp profile cannot express. Anything wrong (fd 4 missing or malformed, a
// filter refused, PROGRAM not executable) ends it with exit code 126 and a line on stderr,
// before PROGRAM ever runs: it fails closed.
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

extern char** environ;

namespace {

constexpr int kProgramsFd = 4;
constexpr int kFailed = 126;
constexpr size_t kMaxBytes = 1 << 20;

[[noreturn]] void Fail(const char* what, int err) {
  std::fprintf(stderr, "vault-container-init: %s: %s\n", what, strerror(err));
  _exit(kFailed);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) Fail("no program to run", EINVAL);
  std::string bytes;
  char buf[65536];
  for (;;) {
    const ssize_t n = read(kProgramsFd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) Fail("read the seccomp programs from fd 4", errno);
    if (n == 0) break;
    bytes.append(buf, static_cast<size_t>(n));
    if (bytes.size() > kMaxBytes) Fail("the seccomp programs are too large", E2BIG);
  }
  close(kProgramsFd);
  std::vector<std::vector<sock_filter>> programs;
  size_t at = 0;
  while (at < bytes.size()) {
    if (bytes.size() - at < 4) Fail("malformed seccomp programs", EINVAL);
    uint32_t n = 0;
    for (int i = 0; i < 4; ++i)
      n |= static_cast<uint32_t>(static_cast<uint8_t>(bytes[at + i])) << (8 * i);
    at += 4;
    if (n == 0 || n > BPF_MAXINSNS || (bytes.size() - at) / sizeof(sock_filter) < n) {
      Fail("malformed seccomp programs", EINVAL);
    }
    std::vector<sock_filter> p(n);
    memcpy(p.data(), bytes.data() + at, n * sizeof(sock_filter));
    at += n * sizeof(sock_filter);
    programs.push_back(std::move(p));
  }
  if (programs.size() != 2) Fail("expected two seccomp programs", EINVAL);
  // runc set it already (noNewPrivileges); without it the kernel would refuse the filters.
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) Fail("PR_SET_NO_NEW_PRIVS", errno);
  for (std::vector<sock_filter>& p : programs) {
    sock_fprog prog{};
    prog.len = static_cast<unsigned short>(p.size());
    prog.filter = p.data();
    if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) != 0) {
      Fail("install a seccomp filter", errno);
    }
  }
  execve(argv[1], argv + 1, environ);
  Fail(argv[1], errno);
}
