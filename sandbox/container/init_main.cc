// vault-container-init: the first program of every container agent, bound read-only at
// /.vault/init in the container by its runtime config (oci_config.h), and PID 1 of the container.
//
//   /.vault/init PROGRAM ARGS...   (fd 4: the seccomp programs; fd 5: the report pipe; environment:
//                                   the program's)
//
// runc has set up every other fence (namespaces, the read-only root, no capabilities,
// noNewPrivileges, cgroups) and executed this program. Where the kernel has Landlock, it first
// restricts itself and what it starts to the posix sandbox's file rules, made for an image: the
// image's root readable and executable, /proc readable, /dev/null and /dev/zero read-write,
// /dev/random and /dev/urandom readable, /work and /tmp read-write, nothing else writable (not
// /dev, not /proc/self/mem), TCP bind and connect refused. It reads from fd 4 the posix sandbox's
// two seccomp filters, which the vault built with libseccomp and serialized
// (SerializeSeccompPrograms: per program a 32-bit little-endian instruction count, then the
// instructions, in install order), installs them and closes fd 4. So a container agent runs under
// exactly the filters a posix agent does, argument checks included, which an OCI seccomp profile
// cannot express. Anything wrong (fd 4 missing or malformed, a filter refused) ends it with exit
// code 126 and a line on stderr, before PROGRAM ever runs: it fails closed.
//
// Then, like the posix sandbox's init, it starts PROGRAM as its child (found on the image's PATH
// when it has no "/"), reaps every orphan, and reports on fd 5 (close-on-exec, so PROGRAM never
// holds it; absent: no report) in the same words:
//   "R\n"          PROGRAM was executed
//   "X <errno>\n"  it could not be (exit code 127)
//   "E <code>\n"   PROGRAM exited with code (this init exits with it too)
//   "S <signal>\n" PROGRAM was killed by signal (this init exits with 128 + signal)
// Its exit ends the container: the kernel kills whatever is left in its PID namespace. It also
// exits (137) when the vault's end of fd 5 closes: a vault killed with SIGKILL leaves no
// container running unwatched (runc does not tie a container's life to its caller's).
#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "sandbox/posix/landlock.h"

extern char** environ;

namespace {

constexpr int kProgramsFd = 4;
constexpr int kReportFd = 5;
constexpr int kFailed = 126;
constexpr size_t kMaxBytes = 1 << 20;

[[noreturn]] void Fail(const char* what, int err) {
  std::fprintf(stderr, "vault-container-init: %s: %s\n", what, strerror(err));
  _exit(kFailed);
}

void Report(char kind, int value) {
  char line[32];
  const int n = kind == 'R' ? std::snprintf(line, sizeof line, "R\n")
                            : std::snprintf(line, sizeof line, "%c %d\n", kind, value);
  ssize_t ignored = write(kReportFd, line, static_cast<size_t>(n));
  (void)ignored;
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
  namespace landlock = vault::sandbox::landlock;
  if (const int abi = landlock::ProbeAbi(); abi > 0) {
    const landlock::Plan plan =
        landlock::MakePlan(abi, {{"/", landlock::kReadOnly},
                                 {"/proc", landlock::kReadFile | landlock::kReadDir},
                                 {"/dev/null", landlock::kReadFile | landlock::kWriteFile},
                                 {"/dev/zero", landlock::kReadFile | landlock::kWriteFile},
                                 {"/dev/random", landlock::kReadFile},
                                 {"/dev/urandom", landlock::kReadFile},
                                 {"/work", landlock::kReadWrite},
                                 {"/tmp", landlock::kReadWrite}});
    int failed_rule = -1;
    if (const int err = landlock::Apply(plan, &failed_rule); err != 0) {
      Fail(failed_rule >= 0 ? plan.rules[static_cast<size_t>(failed_rule)].path.c_str()
                            : "apply the Landlock ruleset",
           -err);
    }
  }
  for (std::vector<sock_filter>& p : programs) {
    sock_fprog prog{};
    prog.len = static_cast<unsigned short>(p.size());
    prog.filter = p.data();
    if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) != 0) {
      Fail("install a seccomp filter", errno);
    }
  }
  // fd 5 is the vault's: close-on-exec, so the program never holds it, and this process not
  // dumpable, so the program cannot open it through /proc/1/fd (both checked: a spoofed "E 0"
  // would make the vault misjudge how the agent ended).
  const bool lifeline = fcntl(kReportFd, F_GETFD) >= 0;
  if (lifeline && fcntl(kReportFd, F_SETFD, FD_CLOEXEC) != 0) Fail("fd 5 close-on-exec", errno);
  if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) Fail("PR_SET_DUMPABLE", errno);
  // SIGCHLD through a signalfd, so that one poll also watches fd 5: when the vault is gone
  // (its end of the pipe closed), the container ends rather than run unwatched.
  sigset_t chld, old_mask;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  if (sigprocmask(SIG_BLOCK, &chld, &old_mask) != 0) Fail("sigprocmask", errno);
  const int sfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
  if (sfd < 0) Fail("signalfd", errno);
  int exec_pipe[2];
  if (pipe2(exec_pipe, O_CLOEXEC) != 0) Fail("pipe2", errno);
  const pid_t child = fork();
  if (child < 0) {
    Report('X', errno);
    Fail("fork", errno);
  }
  if (child == 0) {
    sigprocmask(SIG_SETMASK, &old_mask, nullptr);
    execvp(argv[1], argv + 1);
    const int err = errno;
    ssize_t ignored = write(exec_pipe[1], &err, sizeof err);
    (void)ignored;
    _exit(127);
  }
  close(exec_pipe[1]);
  int exec_errno = 0;
  ssize_t n;
  do {
    n = read(exec_pipe[0], &exec_errno, sizeof exec_errno);
  } while (n < 0 && errno == EINTR);
  close(exec_pipe[0]);
  if (n == static_cast<ssize_t>(sizeof exec_errno)) {
    waitpid(child, nullptr, 0);
    Report('X', exec_errno);
    std::fprintf(stderr, "vault-container-init: %s: %s\n", argv[1], strerror(exec_errno));
    _exit(127);
  }
  Report('R', 0);
  // Reap everything; stop when the program itself ends, or when the vault is gone.
  for (;;) {
    for (;;) {
      int status = 0;
      const pid_t pid = waitpid(-1, &status, __WALL | WNOHANG);
      if (pid < 0 && errno == EINTR) continue;
      if (pid < 0) {
        Report('X', errno);
        _exit(127);
      }
      if (pid == 0) break;
      if (pid != child) continue;
      if (WIFEXITED(status)) {
        Report('E', WEXITSTATUS(status));
        _exit(WEXITSTATUS(status));
      }
      if (WIFSIGNALED(status)) {
        Report('S', WTERMSIG(status));
        _exit(128 + WTERMSIG(status));
      }
    }
    pollfd watched[2] = {{sfd, POLLIN, 0}, {kReportFd, 0, 0}};
    if (poll(watched, lifeline ? 2 : 1, -1) < 0 && errno != EINTR) Fail("poll", errno);
    if (lifeline && (watched[1].revents & (POLLERR | POLLHUP | POLLNVAL)) != 0) {
      // The vault's end is closed: it was killed. Leaving kills every process of the container.
      _exit(137);
    }
    signalfd_siginfo info;
    while (read(sfd, &info, sizeof info) > 0) {
    }
  }
}
