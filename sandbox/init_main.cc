// vault-sandbox-init: PID 1 of every posix sandbox.
//
//   vault-sandbox-init PROGRAM ARGV0 ARGS...      (environment: the program's)
//
// It is executed by the host's clone child after every fence is up (seccomp, Landlock,
// rlimits, no capabilities), so it runs inside them like the program. It starts the program as
// its child, reaps every orphan the program leaves, and reports on fd 4 (a pipe to the host,
// close-on-exec here so the program never holds it):
//   "R\n"          the program was executed
//   "X <errno>\n"  execve failed
//   "E <code>\n"   the program exited with code
//   "S <signal>\n" the program was killed by signal
// then exits, which makes the kernel kill whatever is left in the sandbox's PID namespace.
// It is not dumpable, so the program cannot read its descriptors or memory through /proc.
//
// Built static, with no C++ runtime use, so that it starts fast and needs nothing inside.
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

namespace {

constexpr int kStatusFd = 4;

void Report(char kind, int value) {
  char line[32];
  int n = snprintf(line, sizeof line, "%c %d\n", kind, value);
  if (kind == 'R') n = snprintf(line, sizeof line, "R\n");
  ssize_t ignored = write(kStatusFd, line, static_cast<size_t>(n));
  (void)ignored;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) return 127;
  prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  fcntl(kStatusFd, F_SETFD, FD_CLOEXEC);
  int exec_pipe[2];
  if (pipe2(exec_pipe, O_CLOEXEC) != 0) {
    Report('X', errno);
    return 127;
  }
  pid_t child = fork();
  if (child < 0) {
    Report('X', errno);
    return 127;
  }
  if (child == 0) {
    // Default signal dispositions and an empty mask for the program.
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    execv(argv[1], argv + 2);
    int err = errno;
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
    return 127;
  }
  Report('R', 0);
  // Reap everything; stop when the program itself ends.
  for (;;) {
    int status = 0;
    pid_t pid = waitpid(-1, &status, __WALL);
    if (pid < 0) {
      if (errno == EINTR) continue;
      Report('X', errno);
      return 127;
    }
    if (pid != child) continue;
    if (WIFEXITED(status)) {
      Report('E', WEXITSTATUS(status));
      return 0;
    }
    if (WIFSIGNALED(status)) {
      Report('S', WTERMSIG(status));
      return 0;
    }
  }
}
