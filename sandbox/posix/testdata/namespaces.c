/* namespaces: tries to make new namespaces (unshare, clone flags, clone3) and to join the
 * host's (setns on the /proc/<pid>/ns files).
 *
 * Prints "<call> <flag>: <ERRNO>" per attempt, "ESCAPED ..." on success. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hostile.h"

#ifndef CLONE_NEWTIME
#define CLONE_NEWTIME 0x00000080
#endif

struct Flag {
  int flag;
  const char* name;
};

static const struct Flag kFlags[] = {
    {CLONE_NEWUSER, "CLONE_NEWUSER"}, {CLONE_NEWNS, "CLONE_NEWNS"},
    {CLONE_NEWPID, "CLONE_NEWPID"},   {CLONE_NEWNET, "CLONE_NEWNET"},
    {CLONE_NEWIPC, "CLONE_NEWIPC"},   {CLONE_NEWUTS, "CLONE_NEWUTS"},
    {CLONE_NEWCGROUP, "CLONE_NEWCGROUP"},
};

int main(void) {
  hostile_init();
  char what[128];
  for (size_t i = 0; i < sizeof kFlags / sizeof kFlags[0]; ++i) {
    snprintf(what, sizeof what, "unshare %s", kFlags[i].name);
    expect_failure(what, unshare(kFlags[i].flag));
  }
  expect_failure("unshare CLONE_NEWTIME", unshare(CLONE_NEWTIME));
  expect_failure("unshare CLONE_NEWUSER|CLONE_NEWNS",
                 unshare(CLONE_NEWUSER | CLONE_NEWNS));
  for (size_t i = 0; i < sizeof kFlags / sizeof kFlags[0]; ++i) {
    snprintf(what, sizeof what, "clone %s", kFlags[i].name);
    long pid = syscall(SYS_clone, (unsigned long)kFlags[i].flag | SIGCHLD, 0, 0, 0, 0);
    if (pid == 0) _exit(0);
    expect_failure(what, pid);
    if (pid > 0) waitpid((pid_t)pid, NULL, 0);
  }
  struct {
    unsigned long long flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls;
  } args = {CLONE_NEWUSER, 0, 0, 0, SIGCHLD, 0, 0, 0};
  long pid = syscall(SYS_clone3, &args, sizeof args);
  if (pid == 0) _exit(0);
  expect_failure("clone3 CLONE_NEWUSER", pid);
  if (pid > 0) waitpid((pid_t)pid, NULL, 0);
  args.flags = 0;
  pid = syscall(SYS_clone3, &args, sizeof args);
  if (pid == 0) _exit(0);
  report("clone3 plain", pid);
  if (pid > 0) waitpid((pid_t)pid, NULL, 0);

  static const char* const kNs[] = {"user", "mnt", "pid", "net", "ipc", "uts", "cgroup"};
  for (size_t i = 0; i < sizeof kNs / sizeof kNs[0]; ++i) {
    char path[64];
    snprintf(path, sizeof path, "/proc/self/ns/%s", kNs[i]);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      say("open %s: %s", path, errno_name(errno));
      continue;
    }
    snprintf(what, sizeof what, "setns %s", kNs[i]);
    expect_failure(what, setns(fd, 0));
    close(fd);
  }
  expect_failure("sethostname", sethostname("hostile", 7));
  return 0;
}
