/* x32_abi: makes a system call with the x32 bit set (__X32_SYSCALL_BIT | getpid), an ABI a
 * filter that checks only the architecture word would let through.
 *
 * Prints "x32 getpid: trying" and then should be killed by SIGSYS. If the call returns it
 * prints "x32 getpid: <ERRNO>" (x32 not built into the kernel and nothing killed it) or
 * "ESCAPED x32 getpid returned <N>". */
#include <sys/syscall.h>
#include <unistd.h>

#include "hostile.h"

int main(void) {
  hostile_init();
  say("x32 getpid: trying");
  long result = syscall(0x40000000L | SYS_getpid);
  if (result < 0) {
    say("x32 getpid: %s", errno_name(errno));
  } else {
    say("ESCAPED x32 getpid returned %ld", result);
  }
  return 0;
}
