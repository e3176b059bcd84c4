/* io_uring: tries to set up an io_uring (whose operations bypass system-call filtering).
 *
 * Prints "io_uring_setup: <ERRNO>", "io_uring_enter: <ERRNO>", "io_uring_register: <ERRNO>";
 * "ESCAPED ..." on success. */
#include <linux/io_uring.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "hostile.h"

int main(void) {
  hostile_init();
  struct io_uring_params params;
  memset(&params, 0, sizeof params);
  long fd = syscall(SYS_io_uring_setup, 8, &params);
  expect_failure("io_uring_setup", fd);
  expect_failure("io_uring_enter", syscall(SYS_io_uring_enter, fd >= 0 ? fd : 0, 0, 0, 0, NULL, 0));
  expect_failure("io_uring_register",
                 syscall(SYS_io_uring_register, fd >= 0 ? fd : 0, IORING_REGISTER_PROBE, NULL, 0));
  if (fd >= 0) close((int)fd);
  return 0;
}
