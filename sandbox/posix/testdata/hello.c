/* hello: the benign program. Writes "hello" on stdout and, when the channel (fd 3) is there,
 * one frame "ready" on it. For smoke tests and benchmarks. */
#include <fcntl.h>
#include <unistd.h>

static int write_all(int fd, const char* data, size_t size) {
  while (size > 0) {
    ssize_t n = write(fd, data, size);
    if (n <= 0) return -1;
    data += n;
    size -= (size_t)n;
  }
  return 0;
}

int main(void) {
  if (write_all(1, "hello\n", 6) != 0) return 1;
  if (fcntl(3, F_GETFD) >= 0) {
    static const char frame[] = {0, 0, 0, 5, 'r', 'e', 'a', 'd', 'y'};
    if (write_all(3, frame, sizeof frame) != 0) return 2;
  }
  return 0;
}
