/* sandbox_bench_guest: the program bench/sandbox_bench starts in every variant. It writes one
 * channel frame "ready" (4-byte big-endian length, then the bytes) on fd 3 and exits 0; exit 3
 * when fd 3 is not open, 4 when the write fails. Nothing on stdout or stderr. */
#include <fcntl.h>
#include <unistd.h>

int main(void) {
  static const char frame[] = {0, 0, 0, 5, 'r', 'e', 'a', 'd', 'y'};
  const char* data = frame;
  size_t left = sizeof frame;
  if (fcntl(3, F_GETFD) < 0) return 3;
  while (left > 0) {
    ssize_t n = write(3, data, left);
    if (n <= 0) return 4;
    data += n;
    left -= (size_t)n;
  }
  return 0;
}
