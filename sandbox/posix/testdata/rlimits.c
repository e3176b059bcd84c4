/* rlimits: prints the resource limits it was given and tries to raise each hard limit.
 *
 * Prints "<NAME> <soft> <hard>" (or "inf") for each limit, then "raise <NAME>: <ERRNO>". */
#include <sys/resource.h>

#include "hostile.h"

static void Format(rlim_t value, char* out, size_t size) {
  if (value == RLIM_INFINITY) {
    snprintf(out, size, "inf");
  } else {
    snprintf(out, size, "%llu", (unsigned long long)value);
  }
}

int main(void) {
  hostile_init();
  static const struct {
    int resource;
    const char* name;
  } kLimits[] = {
      {RLIMIT_CORE, "CORE"},   {RLIMIT_CPU, "CPU"},       {RLIMIT_FSIZE, "FSIZE"},
      {RLIMIT_NOFILE, "NOFILE"}, {RLIMIT_NPROC, "NPROC"},
  };
  for (size_t i = 0; i < sizeof kLimits / sizeof kLimits[0]; ++i) {
    struct rlimit limit;
    if (getrlimit(kLimits[i].resource, &limit) != 0) {
      say("%s: %s", kLimits[i].name, errno_name(errno));
      continue;
    }
    char soft[32], hard[32];
    Format(limit.rlim_cur, soft, sizeof soft);
    Format(limit.rlim_max, hard, sizeof hard);
    say("%s %s %s", kLimits[i].name, soft, hard);
  }
  for (size_t i = 0; i < sizeof kLimits / sizeof kLimits[0]; ++i) {
    struct rlimit limit;
    if (getrlimit(kLimits[i].resource, &limit) != 0) continue;
    if (limit.rlim_max == RLIM_INFINITY) {
      say("raise %s: already unlimited", kLimits[i].name);
      continue;
    }
    limit.rlim_max = limit.rlim_max * 2 + 1;
    char what[64];
    snprintf(what, sizeof what, "raise %s", kLimits[i].name);
    expect_failure(what, setrlimit(kLimits[i].resource, &limit));
  }
  return 0;
}
