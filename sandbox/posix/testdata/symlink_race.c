/* symlink_race: swaps /work/race between a regular file and a symlink to /etc/shadow as fast
 * as it can, to catch a host reader between its check and its open.
 *
 *   symlink_race      (stdin: the test closes it to stop the race)
 *
 * Prints "racing", then "swaps: <N>" once stdin closes (or after 20 s). */
#include <fcntl.h>
#include <poll.h>
#include <time.h>
#include <unistd.h>

#include "hostile.h"

int main(void) {
  hostile_init();
  int fd = open("/work/race.file", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0 || write(fd, "benign", 6) != 6) {
    say("create race.file: %s", errno_name(errno));
    return 1;
  }
  close(fd);
  if (symlink("/etc/shadow", "/work/race.link") != 0) {
    say("symlink race.link: %s", errno_name(errno));
    return 1;
  }
  if (link("/work/race.file", "/work/race") != 0) {
    say("link race: %s", errno_name(errno));
    return 1;
  }
  say("racing");
  struct timespec start, now;
  clock_gettime(CLOCK_MONOTONIC, &start);
  long swaps = 0;
  for (;;) {
    /* Alternate atomically: race -> symlink, race -> regular file. */
    if (rename("/work/race.link", "/work/race") != 0) break;
    if (symlink("/etc/shadow", "/work/race.link") != 0) break;
    if (rename("/work/race.file", "/work/race") != 0) break;
    if (link("/work/race", "/work/race.file") != 0) break;
    ++swaps;
    if (swaps % 256 == 0) {
      struct pollfd input = {0, POLLIN, 0};
      if (poll(&input, 1, 0) != 0) break; /* stdin readable or closed */
      clock_gettime(CLOCK_MONOTONIC, &now);
      if (now.tv_sec - start.tv_sec >= 20) break;
    }
  }
  say("swaps: %ld", swaps);
  return 0;
}
