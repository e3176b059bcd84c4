/* thread_bomb: creates threads that block until it can get no more.
 *
 * Prints "pthread_create: <ERRNO> after <N>" and exits 0 (which ends the threads). Stops at
 * 5000 threads with "ESCAPED" should no limit apply. */
#include <pthread.h>
#include <unistd.h>

#include "hostile.h"

enum { kCap = 5000 };

static void* Block(void* unused) {
  (void)unused;
  for (;;) pause();
  return NULL;
}

int main(void) {
  hostile_init();
  hostile_require_sandbox();
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 64 * 1024);
  int count = 0;
  int error = 0;
  while (count < kCap) {
    pthread_t thread;
    error = pthread_create(&thread, &attr, Block, NULL);
    if (error != 0) break;
    ++count;
  }
  if (count == kCap) {
    say("ESCAPED pthread_create: %d threads", count);
  } else {
    say("pthread_create: %s after %d", errno_name(error), count);
  }
  fflush(stdout);
  _exit(0);
}
