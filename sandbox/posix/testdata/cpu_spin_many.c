/* cpu_spin_many: burns CPU in several processes at once, each staying under its own
 * RLIMIT_CPU, so that only the sandbox's total CPU limit can stop them.
 *
 *   cpu_spin_many [N]    N spinning children (default 4), SIGXCPU ignored
 *
 * Prints "spin: <N> children", then waits for them. A child that spins 30 s of CPU prints
 * "ESCAPED". */
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "hostile.h"

static double CpuSeconds(void) {
  struct timespec now;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
  return (double)now.tv_sec + (double)now.tv_nsec / 1e9;
}

int main(int argc, char** argv) {
  hostile_init();
  hostile_require_sandbox();
  int children = argc > 1 ? atoi(argv[1]) : 4;
  if (children < 1 || children > 16) children = 4;
  signal(SIGXCPU, SIG_IGN);
  for (int i = 0; i < children; ++i) {
    pid_t pid = fork();
    if (pid < 0) {
      say("fork: %s", errno_name(errno));
      return 1;
    }
    if (pid == 0) {
      volatile unsigned long sink = 0;
      while (CpuSeconds() < 30.0) {
        for (int j = 0; j < 1000000; ++j) sink += (unsigned long)j;
      }
      say("ESCAPED spin: 30 s of CPU in one child");
      _exit(0);
    }
  }
  say("spin: %d children", children);
  while (wait(NULL) > 0) {
  }
  return 0;
}
