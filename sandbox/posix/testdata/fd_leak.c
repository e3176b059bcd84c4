/* fd_leak: lists the descriptors it inherited.
 *
 * Prints "open fds: <each fd in 0..1023 that is open>", then "fd <n>: <what it is>" for each
 * (the target of /proc/self/fd/<n>, with pipe/socket inode numbers blanked). */
#include <fcntl.h>
#include <unistd.h>

#include "hostile.h"

int main(void) {
  hostile_init();
  int open_fds[1024];
  int count = 0;
  for (int fd = 0; fd < 1024; ++fd) {
    if (fcntl(fd, F_GETFD) >= 0) open_fds[count++] = fd;
  }
  char line[8192] = "open fds:";
  for (int i = 0; i < count; ++i) {
    size_t used = strlen(line);
    snprintf(line + used, sizeof line - used, " %d", open_fds[i]);
  }
  say("%s", line);
  for (int i = 0; i < count; ++i) {
    char path[64], target[256];
    snprintf(path, sizeof path, "/proc/self/fd/%d", open_fds[i]);
    ssize_t n = readlink(path, target, sizeof target - 1);
    if (n < 0) {
      say("fd %d: %s", open_fds[i], errno_name(errno));
      continue;
    }
    target[n] = '\0';
    char* bracket = strchr(target, '[');
    if (bracket != NULL) strcpy(bracket, "[]");
    say("fd %d: %s", open_fds[i], target);
  }
  return 0;
}
