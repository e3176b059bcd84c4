/* setuid_probe: a preload library for setuid_exec. Its constructor runs inside the executed
 * setuid program and appends "euid=<n> uid=<n> secure=<AT_SECURE>" to $HOSTILE_PROBE_OUT.
 *
 * The dynamic loader ignores LD_PRELOAD in a program that really gained privileges (AT_SECURE),
 * so a missing line means the setuid bit took effect. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/auxv.h>
#include <unistd.h>

__attribute__((constructor)) static void Probe(void) {
  const char* out = getenv("HOSTILE_PROBE_OUT");
  if (out == NULL) return;
  int fd = open(out, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return;
  dprintf(fd, "euid=%d uid=%d secure=%lu\n", (int)geteuid(), (int)getuid(),
          getauxval(AT_SECURE));
  close(fd);
}
