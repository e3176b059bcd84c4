/* ptrace_host: tries to trace or read the memory of a host process, of the sandbox's init
 * and of its own child.
 *
 *   ptrace_host HOST_PID
 *
 * Prints "<call> <target>: <ERRNO>" per attempt, "ESCAPED ..." on success. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hostile.h"

static void Attach(const char* label, pid_t pid, int request) {
  char what[128];
  snprintf(what, sizeof what, "%s %d", label, (int)pid);
  long rc = ptrace(request, pid, NULL, NULL);
  expect_failure(what, rc);
  if (rc == 0) ptrace(PTRACE_DETACH, pid, NULL, NULL);
}

static void ReadMemory(pid_t pid) {
  char what[128];
  snprintf(what, sizeof what, "process_vm_readv %d", (int)pid);
  char buffer[16];
  struct iovec local = {buffer, sizeof buffer};
  struct iovec remote = {(void*)0x400000, sizeof buffer};
  expect_failure(what, process_vm_readv(pid, &local, 1, &remote, 1, 0));
}

static void WriteMemory(pid_t pid) {
  char what[128];
  snprintf(what, sizeof what, "process_vm_writev %d", (int)pid);
  char byte = 0;
  struct iovec local = {&byte, 1};
  struct iovec remote = {(void*)1, 1}; /* never mapped: EFAULT if the call were allowed */
  long rc = process_vm_writev(pid, &local, 1, &remote, 1, 0);
  expect_failure(what, rc);
}

int main(int argc, char** argv) {
  hostile_init();
  if (argc < 2) return 2;
  pid_t host = (pid_t)atoi(argv[1]);
  Attach("PTRACE_ATTACH", host, PTRACE_ATTACH);
  Attach("PTRACE_SEIZE", host, PTRACE_SEIZE);
  Attach("PTRACE_ATTACH", 1, PTRACE_ATTACH);
  ReadMemory(host);
  ReadMemory(1);
  WriteMemory(host);
  WriteMemory(1);

  char path[64];
  snprintf(path, sizeof path, "/proc/%d/mem", (int)host);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  snprintf(path, sizeof path, "open /proc/%d/mem", (int)host);
  expect_failure(path, fd);
  if (fd >= 0) close(fd);
  fd = open("/proc/1/mem", O_RDONLY | O_CLOEXEC);
  expect_failure("open /proc/1/mem", fd);
  if (fd >= 0) close(fd);

  char what[128];
  long pidfd = syscall(SYS_pidfd_open, host, 0);
  snprintf(what, sizeof what, "pidfd_open %d", (int)host);
  expect_failure(what, pidfd);
  if (pidfd >= 0) {
    long stolen = syscall(SYS_pidfd_getfd, pidfd, 0, 0);
    snprintf(what, sizeof what, "pidfd_getfd %d 0", (int)host);
    expect_failure(what, stolen);
    if (stolen >= 0) close((int)stolen);
    close((int)pidfd);
  }
  snprintf(what, sizeof what, "kcmp %d", (int)host);
  expect_failure(what, syscall(SYS_kcmp, getpid(), host, 0 /* KCMP_FILE */, 0, 0));

  /* Even inside the sandbox, tracing is refused: a traced child could be steered around the
   * seccomp filter. */
  pid_t child = fork();
  if (child == 0) {
    for (;;) pause();
  }
  if (child > 0) {
    long rc = ptrace(PTRACE_ATTACH, child, NULL, NULL);
    expect_failure("PTRACE_ATTACH own child", rc);
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
  }
  expect_failure("PTRACE_TRACEME", ptrace(PTRACE_TRACEME, 0, NULL, NULL));
  return 0;
}
