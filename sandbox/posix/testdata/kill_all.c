/* kill_all: signals everything it can name.
 *
 *   kill_all HOST_PID TEST_PID
 *
 * Forks 3 sleeping children, then prints "kill -1 SIGKILL: <OK|ERRNO>" and "children killed:
 * <N>" (kill(-1) works, but only inside the sandbox), then "kill <pid> <sig>: <ERRNO>" for the
 * host's pids and "kill 1 SIGKILL: ..." for the sandbox's init (which a PID namespace shields),
 * and last "alive". The test checks that its host processes survived. */
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hostile.h"

static void Kill(pid_t pid, int signal, const char* name) {
  char what[64];
  snprintf(what, sizeof what, "kill %d %s", (int)pid, name);
  report(what, kill(pid, signal));
}

int main(int argc, char** argv) {
  hostile_init();
  hostile_require_sandbox();
  if (argc < 3) return 2;
  pid_t host = (pid_t)atoi(argv[1]);
  pid_t test = (pid_t)atoi(argv[2]);
  pid_t children[3];
  for (int i = 0; i < 3; ++i) {
    children[i] = fork();
    if (children[i] == 0) {
      for (;;) pause();
    }
  }
  report("kill -1 SIGKILL", kill(-1, SIGKILL));
  int killed = 0;
  for (int i = 0; i < 3; ++i) {
    int status = 0;
    if (children[i] > 0 && waitpid(children[i], &status, 0) == children[i] &&
        WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) {
      ++killed;
    }
  }
  say("children killed: %d", killed);
  Kill(host, 0, "0");
  Kill(host, SIGKILL, "SIGKILL");
  Kill(test, SIGKILL, "SIGKILL");
  Kill(-host, SIGKILL, "SIGKILL");
  char what[64];
  snprintf(what, sizeof what, "tgkill %d SIGKILL", (int)host);
  report(what, syscall(SYS_tgkill, host, host, SIGKILL));
  Kill(1, SIGKILL, "SIGKILL");
  Kill(1, SIGTERM, "SIGTERM");
  report("kill 0 SIGCONT", kill(0, SIGCONT));
  say("alive");
  return 0;
}
