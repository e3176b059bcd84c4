/* read_host: tries to read host files.
 *
 *   read_host SECRET PATH...
 *
 * For each PATH (the test adds host paths it created: the vault's data directory, a secret
 * file) prints "read <PATH>: <ERRNO>" or "read <PATH>: OK <N> bytes fnv <HASH>" (FNV-1a 64 of
 * the first 64 KiB, so that the test can tell the sandbox's own file from the host's); a file
 * whose contents contain SECRET prints "ESCAPED read <PATH>". Directories are listed instead:
 * "list <PATH>: OK <N> entries". */
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hostile.h"

static unsigned long long Fnv1a(const char* data, size_t size) {
  unsigned long long hash = 14695981039346656037ull;
  for (size_t i = 0; i < size; ++i) {
    hash ^= (unsigned char)data[i];
    hash *= 1099511628211ull;
  }
  return hash;
}

static void Probe(const char* path, const char* secret) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    say("read %s: %s", path, errno_name(errno));
    return;
  }
  struct stat st;
  if (fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
    DIR* dir = fdopendir(fd);
    int entries = 0;
    if (dir != NULL) {
      while (readdir(dir) != NULL) ++entries;
      closedir(dir);
    }
    say("list %s: OK %d entries", path, entries);
    return;
  }
  static char buffer[1 << 16];
  ssize_t n = read(fd, buffer, sizeof buffer - 1);
  close(fd);
  if (n < 0) {
    say("read %s: %s", path, errno_name(errno));
    return;
  }
  buffer[n] = '\0';
  if (*secret != '\0' && strstr(buffer, secret) != NULL) {
    say("ESCAPED read %s", path);
  } else {
    say("read %s: OK %zd bytes fnv %016llx", path, n, Fnv1a(buffer, (size_t)n));
  }
}

int main(int argc, char** argv) {
  hostile_init();
  if (argc < 2) return 2;
  for (int i = 2; i < argc; ++i) Probe(argv[i], argv[1]);
  return 0;
}
