/* inotify_hog: takes every inotify instance the kernel lets it have, then holds them until its
 * stdin closes. The kernel counts inotify instances per user across user namespaces: charged to
 * root, this would leave the host's root daemons (systemd, vaultd) without inotify.
 *
 * Prints "inotify_init1: <ERRNO> after <N>", then waits. Stops at 100000 with "ESCAPED". */
#include <sys/inotify.h>
#include <unistd.h>

#include "hostile.h"

enum { kCap = 100000 };

int main(void) {
  hostile_init();
  hostile_require_sandbox();
  int count = 0;
  int error = 0;
  while (count < kCap) {
    if (inotify_init1(IN_CLOEXEC) < 0) {
      error = errno;
      break;
    }
    ++count;
  }
  if (count == kCap) {
    say("ESCAPED inotify: %d instances", count);
  } else {
    say("inotify_init1: %s after %d", errno_name(error), count);
  }
  char byte;
  while (read(0, &byte, 1) > 0) {
  }
  return 0;
}
