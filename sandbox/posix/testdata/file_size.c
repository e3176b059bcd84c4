/* file_size: writes 2 MiB into one file, past RLIMIT_FSIZE.
 *
 *   file_size            default SIGXFSZ: the write kills the program
 *   file_size ignore     SIGXFSZ ignored: the write fails instead
 *
 * Prints "write /work/big: started", then (when it survives) "write /work/big: <ERRNO> after
 * <N> KiB". Writing all 2 MiB prints "ESCAPED". */
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include "hostile.h"

int main(int argc, char** argv) {
  hostile_init();
  hostile_require_sandbox();
  if (argc > 1 && strcmp(argv[1], "ignore") == 0) signal(SIGXFSZ, SIG_IGN);
  int fd = open("/work/big", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    say("open /work/big: %s", errno_name(errno));
    return 1;
  }
  say("write /work/big: started");
  static char chunk[64 * 1024];
  memset(chunk, 'x', sizeof chunk);
  long long total = 0;
  while (total < (2ll << 20)) {
    ssize_t n = write(fd, chunk, sizeof chunk);
    if (n < 0) {
      say("write /work/big: %s after %lld KiB", errno_name(errno), total / 1024);
      return 0;
    }
    total += n;
  }
  say("ESCAPED write /work/big: %lld KiB", total / 1024);
  return 0;
}
