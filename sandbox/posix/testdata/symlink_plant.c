/* symlink_plant: leaves traps in /work for the host to follow when it reads agent output.
 *
 * Creates, printing "<what>: OK" or "<what>: <ERRNO>" for each:
 *   plain          a regular file "plain contents" (the positive control)
 *   abs            symlink to /etc/shadow
 *   rel            symlink to ../../../../../../etc/shadow
 *   rootdir        symlink to /            (so "rootdir/etc/shadow" walks through it)
 *   sub/up         symlink to ..           (so "sub/up/plain" walks through it)
 *   proc           symlink to /proc/self/root
 *   fifo           a FIFO                  (a reader that opens it blocks for ever)
 *   big            a 64 KiB regular file
 *   hardlink       a hard link to /etc/ld.so.cache (another mount: EXDEV expected)
 * then "planted" and exits 0. */
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hostile.h"

int main(void) {
  hostile_init();
  int fd = open("/work/plain", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  report("plain", fd < 0 ? -1 : write(fd, "plain contents", 14));
  if (fd >= 0) close(fd);
  report("abs", symlink("/etc/shadow", "/work/abs"));
  report("rel", symlink("../../../../../../etc/shadow", "/work/rel"));
  report("rootdir", symlink("/", "/work/rootdir"));
  report("sub", mkdir("/work/sub", 0755));
  report("sub/up", symlink("..", "/work/sub/up"));
  report("proc", symlink("/proc/self/root", "/work/proc"));
  report("fifo", mkfifo("/work/fifo", 0644));
  fd = open("/work/big", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  static char chunk[64 * 1024];
  memset(chunk, 'b', sizeof chunk);
  report("big", fd < 0 ? -1 : write(fd, chunk, sizeof chunk));
  if (fd >= 0) close(fd);
  expect_failure("hardlink", link("/etc/ld.so.cache", "/work/hardlink"));
  say("planted");
  return 0;
}
