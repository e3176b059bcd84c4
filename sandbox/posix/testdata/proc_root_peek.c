/* proc_root_peek: tries to reach another sandbox's work directory.
 *
 *   proc_root_peek SECRET GUESS...
 *
 * Walks its own /proc, trying /proc/<pid>/root/work/secret and /proc/<pid>/cwd/secret for every
 * process it sees ("peek /proc/<pid>/root/work/secret: <ERRNO>"), then each GUESS (host paths of
 * the other sandbox: "read <GUESS>: <ERRNO>"). Reading SECRET anywhere prints "ESCAPED". */
#include <ctype.h>
#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include "hostile.h"

/* Reads path and prints the outcome under `label`; "ESCAPED" when it holds the secret. */
static void Try(const char* label, const char* path, const char* secret) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    say("%s %s: %s", label, path, errno_name(errno));
    return;
  }
  char buffer[4096];
  ssize_t n = read(fd, buffer, sizeof buffer - 1);
  int error = errno;
  close(fd);
  if (n < 0) {
    say("%s %s: %s", label, path, errno_name(error));
    return;
  }
  buffer[n] = '\0';
  if (strstr(buffer, secret) != NULL) {
    say("ESCAPED %s %s", label, path);
  } else {
    say("%s %s: OK %zd bytes", label, path, n);
  }
}

int main(int argc, char** argv) {
  hostile_init();
  if (argc < 2 || argv[1][0] == '\0') return 2;
  const char* secret = argv[1];
  DIR* proc = opendir("/proc");
  if (proc == NULL) {
    say("opendir /proc: %s", errno_name(errno));
  } else {
    struct dirent* entry;
    while ((entry = readdir(proc)) != NULL) {
      if (!isdigit((unsigned char)entry->d_name[0])) continue;
      char path[300];
      snprintf(path, sizeof path, "/proc/%s/root/work/secret", entry->d_name);
      Try("peek", path, secret);
      snprintf(path, sizeof path, "/proc/%s/cwd/secret", entry->d_name);
      Try("peek", path, secret);
    }
    closedir(proc);
  }
  for (int i = 2; i < argc; ++i) Try("read", argv[i], secret);
  return 0;
}
