/* channel_truncated: sends the host a frame header promising 100 bytes, then only 10, then
 * closes the channel (fd 3) and exits.
 *
 * Prints "truncated frame: OK" (or the send's ERRNO), then "close: OK". */
#include <unistd.h>

#include "hostile.h"

int main(void) {
  hostile_init();
  static const unsigned char kFrame[] = {0, 0, 0, 100, '0', '1', '2', '3', '4',
                                         '5', '6', '7', '8', '9'};
  report("truncated frame", write(3, kFrame, sizeof kFrame));
  report("close", close(3));
  return 0;
}
