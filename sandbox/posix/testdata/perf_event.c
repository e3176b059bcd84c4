/* perf_event: tries to open performance counters (for itself, for every process on a CPU,
 * and a kernel tracepoint-like software event).
 *
 * Prints "perf_event_open <what>: <ERRNO>"; "ESCAPED" on success. */
#include <linux/perf_event.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "hostile.h"

static void Open(const char* what, unsigned type, unsigned long long config, int pid, int cpu) {
  struct perf_event_attr attr;
  memset(&attr, 0, sizeof attr);
  attr.size = sizeof attr;
  attr.type = type;
  attr.config = config;
  attr.disabled = 1;
  long fd = syscall(SYS_perf_event_open, &attr, pid, cpu, -1, 0);
  char label[128];
  snprintf(label, sizeof label, "perf_event_open %s", what);
  expect_failure(label, fd);
  if (fd >= 0) close((int)fd);
}

int main(void) {
  hostile_init();
  Open("self cpu-clock", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_CLOCK, 0, -1);
  Open("all processes cpu 0", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_CLOCK, -1, 0);
  Open("self cycles", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES, 0, -1);
  return 0;
}
