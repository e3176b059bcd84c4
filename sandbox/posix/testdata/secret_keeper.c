/* secret_keeper: the victim of the cross-sandbox tests, benign itself.
 *
 *   secret_keeper MARKER      (stdin: one line, the secret)
 *
 * Writes the secret to /work/secret, prints "ready", then waits for stdin to close and prints
 * "bye". MARKER only makes its processes easy to find in the host's /proc. */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "hostile.h"

int main(int argc, char** argv) {
  hostile_init();
  (void)argc;
  (void)argv;
  char secret[256];
  if (fgets(secret, sizeof secret, stdin) == NULL) {
    say("read secret: %s", errno_name(errno));
    return 1;
  }
  secret[strcspn(secret, "\n")] = '\0';
  int fd = open("/work/secret", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0 || write(fd, secret, strlen(secret)) != (ssize_t)strlen(secret)) {
    say("write /work/secret: %s", errno_name(errno));
    return 1;
  }
  close(fd);
  say("ready");
  char buffer[64];
  while (read(0, buffer, sizeof buffer) > 0) {
  }
  say("bye");
  return 0;
}
