/* tty_ioctl: tries to inject input into a terminal (TIOCSTI) and to reach the console
 * (TIOCLINUX), on fds 0, 1, 2 and /dev/tty.
 *
 * Prints "open /dev/tty: <ERRNO>", then for each fd "TIOCSTI <fd>: <ERRNO>",
 * "TIOCSTI high bits <fd>: <ERRNO>" (the command with its upper 32 bits set, which the kernel
 * ignores), "TIOCLINUX <fd>: <ERRNO>", and "isatty <fd>: yes|no"; then, as a new session
 * leader, "TIOCSCTTY 0: ..." and TIOCSTI again. Success prints "ESCAPED". */
#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "hostile.h"

static void Attack(int fd) {
  char what[64];
  say("isatty %d: %s", fd, isatty(fd) ? "yes" : "no");
  char c = '#';
  snprintf(what, sizeof what, "TIOCSTI %d", fd);
  expect_failure(what, ioctl(fd, TIOCSTI, &c));
  snprintf(what, sizeof what, "TIOCSTI high bits %d", fd);
  expect_failure(what, syscall(SYS_ioctl, fd, 0xffffffff00000000ul | TIOCSTI, &c));
  char subcode = 2; /* TIOCL_SETSEL: a selection on the console */
  snprintf(what, sizeof what, "TIOCLINUX %d", fd);
  expect_failure(what, ioctl(fd, TIOCLINUX, &subcode));
}

int main(void) {
  hostile_init();
  int tty = open("/dev/tty", O_RDWR | O_CLOEXEC);
  expect_failure("open /dev/tty", tty);
  for (int fd = 0; fd < 3; ++fd) Attack(fd);
  if (tty >= 0) Attack(tty);
  /* Become a session leader and try to make fd 0 the controlling terminal: TIOCSTI on one's
   * own terminal is what the kernel allows without privilege. */
  report("setsid", setsid());
  report("TIOCSCTTY 0", ioctl(0, TIOCSCTTY, 0));
  char c = '#';
  expect_failure("TIOCSTI 0 after TIOCSCTTY", ioctl(0, TIOCSTI, &c));
  tty = open("/dev/tty", O_RDWR | O_CLOEXEC);
  expect_failure("open /dev/tty after TIOCSCTTY", tty);
  if (tty >= 0) close(tty);
  return 0;
}
