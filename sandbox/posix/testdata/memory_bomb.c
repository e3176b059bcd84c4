/* memory_bomb: allocates and touches memory 1 MiB at a time until something stops it.
 *
 * Prints "memory bomb: started"; the OOM killer should end it. Prints "malloc: <ERRNO> after
 * <N> MiB" if allocation fails instead, and stops at 512 MiB with "ESCAPED" should no limit
 * apply. */
#include <stdlib.h>
#include <string.h>

#include "hostile.h"

enum { kCapMiB = 512 };

int main(void) {
  hostile_init();
  hostile_require_sandbox();
  say("memory bomb: started");
  for (int mib = 0; mib < kCapMiB; ++mib) {
    char* block = malloc(1 << 20);
    if (block == NULL) {
      say("malloc: %s after %d MiB", errno_name(errno), mib);
      return 0;
    }
    memset(block, 0xa5, 1 << 20);
  }
  say("ESCAPED allocated %d MiB", kCapMiB);
  return 0;
}
