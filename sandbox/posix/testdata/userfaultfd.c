/* userfaultfd: tries to get a userfaultfd (a classic way to win kernel races).
 *
 * Prints "userfaultfd: <ERRNO>", "userfaultfd UFFD_USER_MODE_ONLY: <ERRNO>" and
 * "open /dev/userfaultfd: <ERRNO>"; "ESCAPED ..." on success. */
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "hostile.h"

#ifndef UFFD_USER_MODE_ONLY
#define UFFD_USER_MODE_ONLY 1
#endif

int main(void) {
  hostile_init();
  long fd = syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
  expect_failure("userfaultfd", fd);
  if (fd >= 0) close((int)fd);
  fd = syscall(SYS_userfaultfd, O_CLOEXEC | UFFD_USER_MODE_ONLY);
  expect_failure("userfaultfd UFFD_USER_MODE_ONLY", fd);
  if (fd >= 0) close((int)fd);
  fd = open("/dev/userfaultfd", O_RDWR | O_CLOEXEC);
  expect_failure("open /dev/userfaultfd", fd);
  if (fd >= 0) close((int)fd);
  return 0;
}
