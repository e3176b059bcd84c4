// vault-sandbox-init: PID 1 of every posix sandbox.
//
//   vault-sandbox-init PROGRAM ARGV0 ARGS...      (environment: the program's)
//
// It is executed by the host's clone child after every fence is up (seccomp, Landlock,
// rlimits, no capabilities), so it runs inside them like the program. First it writes "1000"
// to fd 7, its own /proc/<pid>/oom_score_adj opened by the host, and closes it: the sandbox is
// the first victim of host memory pressure, and the program inherits the value. (The host
// cannot write it before the exec: the clone child shares the host's memory until then, and
// the kernel gives the value to every process sharing it, the host included.) Then it starts
// the program as its child, reaps every orphan the program leaves, and reports on fd 4 (a pipe
// to the host, close-on-exec here so the program never holds it):
//   "R\n"          the program was executed
//   "X <errno>\n"  oom_score_adj could not be written, or execve failed
//   "E <code>\n"   the program exited with code
//   "S <signal>\n" the program was killed by signal
// then exits, which makes the kernel kill whatever is left in the sandbox's PID namespace.
// It is not dumpable, so the program cannot read its descriptors or memory through /proc.
//
// Freestanding: no C library at all (raw system calls, its own _start), so that it starts in
// microseconds — a static glibc spends most of a sandbox's start-up probing the CPU, which traps
// to the hypervisor on virtual machines. x86-64 only, like the seccomp filters.
#include <asm/unistd.h>
#include <linux/fcntl.h>
#include <linux/prctl.h>
#include <linux/wait.h>

namespace {

constexpr int kStatusFd = 4;
constexpr int kOomFd = 7;  // kInsideOomFd (sandbox/posix/internal/child.h)
constexpr long kEintr = 4;
constexpr long kEio = 5;
constexpr long kEchild = 10;
constexpr int kFdCloexec = 1;

long Syscall(long n, long a = 0, long b = 0, long c = 0, long d = 0, long e = 0) {
  long ret;
  register long r10 __asm__("r10") = d;
  register long r8 __asm__("r8") = e;
  __asm__ volatile("syscall"
                   : "=a"(ret)
                   : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8)
                   : "rcx", "r11", "memory");
  return ret;
}

[[noreturn]] void Exit(int code) {
  for (;;) Syscall(__NR_exit_group, code);
}

// "<kind> <value>\n", or "R\n".
void Report(char kind, long value) {
  char line[32];
  int n = 0;
  line[n++] = kind;
  if (kind != 'R') {
    line[n++] = ' ';
    char digits[24];
    int d = 0;
    unsigned long v =
        value < 0 ? static_cast<unsigned long>(-value) : static_cast<unsigned long>(value);
    if (value < 0) line[n++] = '-';
    do {
      digits[d++] = static_cast<char>('0' + v % 10);
      v /= 10;
    } while (v != 0);
    while (d > 0) line[n++] = digits[--d];
  }
  line[n++] = '\n';
  Syscall(__NR_write, kStatusFd, reinterpret_cast<long>(line), n);
}

[[noreturn]] void Main(long argc, char** argv, char** envp) {
  // Fail closed: a sandbox that cannot take its oom_score_adj does not run.
  static const char kOomScoreAdj[] = "1000";
  long written =
      Syscall(__NR_write, kOomFd, reinterpret_cast<long>(kOomScoreAdj), sizeof kOomScoreAdj - 1);
  Syscall(__NR_close, kOomFd);
  if (written != static_cast<long>(sizeof kOomScoreAdj - 1)) {
    Report('X', written < 0 ? -written : kEio);
    Exit(127);
  }
  if (argc < 3) Exit(127);
  Syscall(__NR_prctl, PR_SET_DUMPABLE, 0, 0, 0, 0);
  Syscall(__NR_fcntl, kStatusFd, F_SETFD, kFdCloexec);
  int exec_pipe[2];
  long rc = Syscall(__NR_pipe2, reinterpret_cast<long>(exec_pipe), O_CLOEXEC);
  if (rc < 0) {
    Report('X', -rc);
    Exit(127);
  }
  // fork(): the host's seccomp filter allows clone without namespace flags.
  long child = Syscall(__NR_clone, 17 /* SIGCHLD */, 0, 0, 0, 0);
  if (child < 0) {
    Report('X', -child);
    Exit(127);
  }
  if (child == 0) {
    // Default signal dispositions are inherited from this process, whose own were reset by
    // the host before exec; the mask is empty.
    unsigned long none = 0;
    Syscall(__NR_rt_sigprocmask, 2 /* SIG_SETMASK */, reinterpret_cast<long>(&none), 0, 8);
    long err = Syscall(__NR_execve, reinterpret_cast<long>(argv[1]),
                       reinterpret_cast<long>(argv + 2), reinterpret_cast<long>(envp));
    int code = static_cast<int>(-err);
    Syscall(__NR_write, exec_pipe[1], reinterpret_cast<long>(&code), sizeof code);
    Exit(127);
  }
  Syscall(__NR_close, exec_pipe[1]);
  int exec_errno = 0;
  long n;
  do {
    n = Syscall(__NR_read, exec_pipe[0], reinterpret_cast<long>(&exec_errno), sizeof exec_errno);
  } while (n == -kEintr);
  Syscall(__NR_close, exec_pipe[0]);
  if (n == static_cast<long>(sizeof exec_errno)) {
    Syscall(__NR_wait4, child, 0, 0, 0);
    Report('X', exec_errno);
    Exit(127);
  }
  Report('R', 0);
  // Reap everything; stop when the program itself ends.
  for (;;) {
    int status = 0;
    long pid = Syscall(__NR_wait4, -1, reinterpret_cast<long>(&status), __WALL, 0);
    if (pid == -kEintr) continue;
    if (pid < 0) {
      Report('X', pid == -kEchild ? kEchild : -pid);
      Exit(127);
    }
    if (pid != child) continue;
    if ((status & 0x7f) == 0) {  // exited
      Report('E', (status >> 8) & 0xff);
      Exit(0);
    }
    const int signal = status & 0x7f;
    if (signal != 0 && signal != 0x7f) {  // killed by a signal (0x7f would be "stopped")
      Report('S', signal);
      Exit(0);
    }
  }
}

}  // namespace

// The kernel enters here with the stack holding argc, argv..., NULL, envp..., NULL.
extern "C" [[noreturn]] void InitStart(long* stack) {
  long argc = stack[0];
  char** argv = reinterpret_cast<char**>(stack + 1);
  char** envp = argv + argc + 1;
  Main(argc, argv, envp);
}

__asm__(
    ".text\n"
    ".global _start\n"
    "_start:\n"
    "  xor %rbp, %rbp\n"
    "  mov %rsp, %rdi\n"
    "  and $-16, %rsp\n"
    "  call InitStart\n"
    "  hlt\n");
