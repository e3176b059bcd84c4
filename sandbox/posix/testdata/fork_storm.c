/* fork_storm: the classic fork bomb; every process forks for ever, spinning on EAGAIN.
 *
 * Prints "storm: started" and never ends by itself: only the wall-time limit ends it. A shared
 * counter caps the processes at 2000 should no limit apply ("ESCAPED"), so that an accident
 * cannot take a machine down. */
#include <sys/mman.h>
#include <unistd.h>

#include "hostile.h"

enum { kCap = 2000 };

int main(void) {
  hostile_init();
  hostile_require_sandbox();
  int* created = mmap(NULL, sizeof(int), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                      -1, 0);
  if (created == MAP_FAILED) {
    say("mmap: %s", errno_name(errno));
    return 1;
  }
  say("storm: started");
  for (;;) {
    if (__atomic_load_n(created, __ATOMIC_RELAXED) >= kCap) {
      if (__atomic_fetch_add(created, 1, __ATOMIC_RELAXED) == kCap) {
        say("ESCAPED storm: %d processes", kCap);
      }
      for (;;) pause();
    }
    if (fork() == 0) {
      __atomic_fetch_add(created, 1, __ATOMIC_RELAXED);
    }
  }
}
