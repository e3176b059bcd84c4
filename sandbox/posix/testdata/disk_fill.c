/* disk_fill: fills the work directory's storage quota and looks past it.
 *
 * Prints "write /work/fill: <ERRNO> after <N> KiB", "write /tmp/fill: <ERRNO> after <N> KiB"
 * (the same quota), "fallocate /tmp/huge 32 MiB: <ERRNO>", then deletes /work/fill and prints
 * "write /tmp/after: OK". Stops at 64 MiB with "ESCAPED". */
#include <fcntl.h>
#include <unistd.h>

#include "hostile.h"

static const long long kCapBytes = 64ll << 20;

/* Writes until an error; returns the bytes written and leaves the errno in *error. */
static long long Fill(const char* path, int* error) {
  static char chunk[64 * 1024];
  memset(chunk, 'x', sizeof chunk);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    *error = errno;
    return 0;
  }
  long long total = 0;
  *error = 0;
  while (total < kCapBytes) {
    ssize_t n = write(fd, chunk, sizeof chunk);
    if (n < 0) {
      *error = errno;
      break;
    }
    total += n;
  }
  close(fd);
  return total;
}

int main(void) {
  hostile_init();
  hostile_require_sandbox();
  int error = 0;
  long long total = Fill("/work/fill", &error);
  if (total >= kCapBytes) {
    say("ESCAPED write /work/fill: %lld bytes", total);
    return 0;
  }
  say("write /work/fill: %s after %lld KiB", errno_name(error), total / 1024);
  total = Fill("/tmp/fill", &error);
  say("write /tmp/fill: %s after %lld KiB", errno_name(error), total / 1024);
  int fd = open("/tmp/huge", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    say("open /tmp/huge: %s", errno_name(errno));
  } else {
    int rc = posix_fallocate(fd, 0, 32ll << 20);
    if (rc == 0) {
      say("ESCAPED fallocate /tmp/huge 32 MiB");
    } else {
      say("fallocate /tmp/huge 32 MiB: %s", errno_name(rc));
    }
    close(fd);
  }
  unlink("/tmp/huge");
  unlink("/tmp/fill");
  unlink("/work/fill");
  fd = open("/tmp/after", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  report("write /tmp/after", fd < 0 ? -1 : write(fd, "after", 5));
  return 0;
}
