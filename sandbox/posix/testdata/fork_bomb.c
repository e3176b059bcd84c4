/* fork_bomb: forks children that sleep until it has no more processes to get.
 *
 * Prints "fork: <ERRNO> after <N>" (N children created), then kills and reaps them and prints
 * "reaped <N>". Stops at 2000 children with "ESCAPED" should no limit apply. */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hostile.h"

enum { kCap = 2000 };

int main(void) {
  hostile_init();
  hostile_require_sandbox();
  static pid_t children[kCap];
  int count = 0;
  int error = 0;
  while (count < kCap) {
    pid_t pid = fork();
    if (pid < 0) {
      error = errno;
      break;
    }
    if (pid == 0) {
      for (;;) pause();
    }
    children[count++] = pid;
  }
  if (count == kCap) {
    say("ESCAPED fork: %d children", count);
  } else {
    say("fork: %s after %d", errno_name(error), count);
  }
  for (int i = 0; i < count; ++i) kill(children[i], SIGKILL);
  int reaped = 0;
  for (int i = 0; i < count; ++i) {
    if (waitpid(children[i], NULL, 0) == children[i]) ++reaped;
  }
  say("reaped %d", reaped);
  return 0;
}
