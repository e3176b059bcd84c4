/* double_fork: tries to outlive the sandbox with a daemonised grandchild.
 *
 *   double_fork MARKER     (MARKER makes the grandchild easy to find in the host's /proc)
 *
 * The child calls setsid and forks the grandchild, which ignores SIGHUP and SIGTERM, closes
 * stdout, and writes a heartbeat counter to /work/heartbeat every 50 ms for up to 120 s. The
 * program prints "grandchild <pid> running", then waits for one line (or EOF) on stdin and
 * exits 0 with "parent exiting". */
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "hostile.h"

static void Heartbeat(int ready) {
  signal(SIGHUP, SIG_IGN);
  signal(SIGTERM, SIG_IGN);
  int null = open("/dev/null", O_RDWR);
  dup2(null, 0);
  dup2(null, 1);
  dup2(null, 2);
  for (long beat = 0; beat < 120 * 20; ++beat) {
    int fd = open("/work/heartbeat.tmp", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd >= 0) {
      dprintf(fd, "%ld\n", beat);
      close(fd);
      rename("/work/heartbeat.tmp", "/work/heartbeat");
    }
    if (beat == 0) {
      pid_t self = getpid();
      ssize_t ignored = write(ready, &self, sizeof self);
      (void)ignored;
      close(ready);
    }
    struct timespec pause = {0, 50 * 1000 * 1000};
    nanosleep(&pause, NULL);
  }
  _exit(0);
}

int main(int argc, char** argv) {
  hostile_init();
  hostile_require_sandbox();
  (void)argc;
  (void)argv;
  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) {
    say("pipe: %s", errno_name(errno));
    return 1;
  }
  pid_t child = fork();
  if (child < 0) {
    say("fork: %s", errno_name(errno));
    return 1;
  }
  if (child == 0) {
    close(pipe_fds[0]);
    setsid();
    pid_t grandchild = fork();
    if (grandchild == 0) Heartbeat(pipe_fds[1]);
    _exit(grandchild < 0 ? 1 : 0);
  }
  close(pipe_fds[1]);
  waitpid(child, NULL, 0);
  pid_t grandchild = 0;
  if (read(pipe_fds[0], &grandchild, sizeof grandchild) != sizeof grandchild) {
    say("grandchild: did not start");
    return 1;
  }
  say("grandchild %d running", (int)grandchild);
  char line[16];
  ssize_t ignored = read(0, line, sizeof line);
  (void)ignored;
  say("parent exiting");
  return 0;
}
