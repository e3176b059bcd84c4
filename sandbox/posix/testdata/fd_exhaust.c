/* fd_exhaust: opens /dev/null until it has no descriptor left, then tries to raise
 * RLIMIT_NOFILE and to dup onto a descriptor past the limit.
 *
 * Prints "open /dev/null: <ERRNO> after <N>", "setrlimit NOFILE 1048576: <ERRNO>",
 * "dup2 0 65535: <ERRNO>". Stops at 100000 descriptors with "ESCAPED". */
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include "hostile.h"

enum { kCap = 100000 };

int main(void) {
  hostile_init();
  hostile_require_sandbox();
  int count = 0;
  int error = 0;
  while (count < kCap) {
    if (open("/dev/null", O_RDONLY) < 0) {
      error = errno;
      break;
    }
    ++count;
  }
  if (count == kCap) {
    say("ESCAPED open: %d descriptors", count);
  } else {
    say("open /dev/null: %s after %d", errno_name(error), count);
  }
  struct rlimit big = {1048576, 1048576};
  expect_failure("setrlimit NOFILE 1048576", setrlimit(RLIMIT_NOFILE, &big));
  expect_failure("dup2 0 65535", dup2(0, 65535));
  return 0;
}
