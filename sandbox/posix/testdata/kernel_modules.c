/* kernel_modules: tries the calls that load or remove kernel code or reach the machine.
 *
 * Prints "<call>: <ERRNO>" per attempt, "ESCAPED <call>" on success. Every argument is chosen
 * so that even an allowed call would change nothing (an empty module image, reboot's
 * harmless "Ctrl-Alt-Del off", setting the clock to its current value). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/reboot.h>
#include <sys/io.h>
#include <sys/klog.h>
#include <sys/swap.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "hostile.h"

int main(void) {
  hostile_init();
  static char empty_image[64];
  expect_failure("init_module", syscall(SYS_init_module, empty_image, sizeof empty_image, ""));
  int fd = open("/code/hello", O_RDONLY | O_CLOEXEC);
  expect_failure("finit_module", syscall(SYS_finit_module, fd, "", 0));
  if (fd >= 0) close(fd);
  expect_failure("delete_module", syscall(SYS_delete_module, "hostile_nonexistent", O_NONBLOCK));
  expect_failure("kexec_load", syscall(SYS_kexec_load, 0ul, 0ul, NULL, 0ul));
  expect_failure("kexec_file_load", syscall(SYS_kexec_file_load, -1, -1, 0ul, "", 0ul));
  expect_failure("reboot CAD_OFF", syscall(SYS_reboot, LINUX_REBOOT_MAGIC1, LINUX_REBOOT_MAGIC2,
                                           LINUX_REBOOT_CMD_CAD_OFF, NULL));
  static char log[64];
  expect_failure("syslog READ_ALL", klogctl(3 /* SYSLOG_ACTION_READ_ALL */, log, sizeof log));
  expect_failure("iopl 3", iopl(3));
  expect_failure("ioperm 0x80", ioperm(0x80, 1, 1));
  expect_failure("swapon /work/swap", swapon("/work/swap", 0));
  expect_failure("swapoff /work/swap", swapoff("/work/swap"));
  expect_failure("acct /work/acct", acct("/work/acct"));
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  expect_failure("clock_settime REALTIME", clock_settime(CLOCK_REALTIME, &now));
  expect_failure("vhangup", vhangup());
  expect_failure("quotactl", syscall(SYS_quotactl, 0x800007 /* Q_SYNC */, NULL, 0, NULL));
  return 0;
}
