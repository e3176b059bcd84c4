/* channel_huge_frame: sends the host a frame header claiming 4 GiB (0xffffffff bytes) on the
 * channel (fd 3), followed by a little data, and exits.
 *
 * Prints "huge header: OK" (or the send's ERRNO). */
#include <unistd.h>

#include "hostile.h"

int main(void) {
  hostile_init();
  static const unsigned char kFrame[] = {0xff, 0xff, 0xff, 0xff, 'h', 'o', 's', 't', 'i', 'l', 'e'};
  report("huge header", write(3, kFrame, sizeof kFrame));
  return 0;
}
