/* cpu_spin: burns CPU in one process.
 *
 *   cpu_spin            default SIGXCPU
 *   cpu_spin ignore     SIGXCPU ignored (only the hard limit or the cgroup can stop it)
 *
 * Prints "spin: started". Prints "ESCAPED" after 30 s of CPU time. */
#include <signal.h>
#include <time.h>

#include "hostile.h"

static double CpuSeconds(void) {
  struct timespec now;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
  return (double)now.tv_sec + (double)now.tv_nsec / 1e9;
}

int main(int argc, char** argv) {
  hostile_init();
  hostile_require_sandbox();
  if (argc > 1 && strcmp(argv[1], "ignore") == 0) signal(SIGXCPU, SIG_IGN);
  say("spin: started");
  volatile unsigned long sink = 0;
  while (CpuSeconds() < 30.0) {
    for (int i = 0; i < 1000000; ++i) sink += (unsigned long)i;
  }
  say("ESCAPED spin: 30 s of CPU");
  return 0;
}
