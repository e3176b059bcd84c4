/* inode_fill: creates empty files until the storage quota has no inode left, then tries the
 * other kinds of inode.
 *
 * Prints "create: <ERRNO> after <N>", then "mkdir: <ERRNO>", "symlink: <ERRNO>",
 * "mkfifo: <ERRNO>" (all in /tmp, the same quota). Stops at 100000 files with "ESCAPED". */
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hostile.h"

enum { kCap = 100000 };

int main(void) {
  hostile_init();
  hostile_require_sandbox();
  if (mkdir("/work/many", 0700) != 0) {
    say("mkdir /work/many: %s", errno_name(errno));
    return 1;
  }
  int count = 0;
  int error = 0;
  while (count < kCap) {
    char path[64];
    snprintf(path, sizeof path, "/work/many/%d", count);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
      error = errno;
      break;
    }
    close(fd);
    ++count;
  }
  if (count == kCap) {
    say("ESCAPED create: %d files", count);
    return 0;
  }
  say("create: %s after %d", errno_name(error), count);
  expect_failure("mkdir", mkdir("/tmp/dir", 0700));
  expect_failure("symlink", symlink("/work", "/tmp/link"));
  expect_failure("mkfifo", mkfifo("/tmp/fifo", 0600));
  return 0;
}
