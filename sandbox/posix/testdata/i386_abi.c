/* i386_abi: makes a system call through the 32-bit entry (int $0x80), which a filter written
 * for x86-64 numbers would misread (i386 getpid is 20; x86-64 20 is writev).
 *
 * Prints "int80 getpid: trying" and then should be killed by SIGSYS. If the call returns it
 * prints "ESCAPED int80 getpid returned <N>". */
#include "hostile.h"

int main(void) {
  hostile_init();
  say("int80 getpid: trying");
  long result;
  __asm__ volatile("int $0x80" : "=a"(result) : "a"(20L) : "memory");
  say("ESCAPED int80 getpid returned %ld", result);
  return 0;
}
