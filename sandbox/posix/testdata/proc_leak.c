/* proc_leak: looks for host information in /proc.
 *
 *   proc_leak HOST_PID [HOST_PATH]
 *
 * Prints "pids: <the numeric entries of /proc, sorted>" (only the sandbox's own processes),
 * then "read <path>: <ERRNO>" or "read <path>: OK <N> bytes" for /proc/1/environ,
 * /proc/1/cmdline, /proc/HOST_PID/cmdline, /proc/kcore, /proc/kallsyms-like files, and
 * "open for writing /proc/sysrq-trigger: <ERRNO>" (never written), and, given HOST_PATH (the
 * host path of its code directory), "mountinfo shows HOST_PATH: yes|no|<ERRNO>". */
#include <ctype.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include "hostile.h"

static int Compare(const void* a, const void* b) {
  return *(const int*)a - *(const int*)b;
}

static void Read(const char* path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    say("read %s: %s", path, errno_name(errno));
    return;
  }
  char buffer[4096];
  ssize_t n = read(fd, buffer, sizeof buffer);
  int error = errno;
  close(fd);
  if (n < 0) {
    say("read %s: %s", path, errno_name(error));
  } else {
    say("read %s: OK %zd bytes", path, n);
  }
}

int main(int argc, char** argv) {
  hostile_init();
  if (argc < 2) return 2;
  DIR* proc = opendir("/proc");
  if (proc == NULL) {
    say("pids: %s", errno_name(errno));
  } else {
    int pids[256];
    int count = 0;
    struct dirent* entry;
    while ((entry = readdir(proc)) != NULL && count < 256) {
      if (isdigit((unsigned char)entry->d_name[0])) pids[count++] = atoi(entry->d_name);
    }
    closedir(proc);
    qsort(pids, (size_t)count, sizeof pids[0], Compare);
    char line[2048] = "pids:";
    for (int i = 0; i < count; ++i) {
      size_t used = strlen(line);
      snprintf(line + used, sizeof line - used, " %d", pids[i]);
    }
    say("%s", line);
  }
  say("self: %d", (int)getpid());
  Read("/proc/1/environ");
  Read("/proc/1/cmdline");
  char path[64];
  snprintf(path, sizeof path, "/proc/%s/cmdline", argv[1]);
  Read(path);
  snprintf(path, sizeof path, "/proc/%s/environ", argv[1]);
  Read(path);
  Read("/proc/kcore");
  Read("/proc/kallsyms");
  Read("/proc/kmsg");
  Read("/proc/keys");
  Read("/proc/timer_list");
  Read("/proc/sched_debug");
  Read("/proc/1/mountinfo");
  Read("/proc/sys/kernel/core_pattern");
  int fd = open("/proc/sysrq-trigger", O_WRONLY | O_CLOEXEC);
  expect_failure("open for writing /proc/sysrq-trigger", fd);
  if (fd >= 0) close(fd);
  fd = open("/proc/sys/kernel/core_pattern", O_WRONLY | O_CLOEXEC);
  expect_failure("open for writing /proc/sys/kernel/core_pattern", fd);
  if (fd >= 0) close(fd);
  if (argc > 2) {
    FILE* mounts = fopen("/proc/self/mountinfo", "re");
    if (mounts == NULL) {
      say("mountinfo shows HOST_PATH: %s", errno_name(errno));
      return 0;
    }
    int found = 0;
    char line[4096];
    while (fgets(line, sizeof line, mounts) != NULL) {
      if (strstr(line, argv[2]) != NULL) found = 1;
    }
    fclose(mounts);
    say("mountinfo shows HOST_PATH: %s", found ? "yes" : "no");
  }
  return 0;
}
