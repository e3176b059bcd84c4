/* dotdot_escape: tries to leave the sandbox's root with "..", symlinks, /proc magic links,
 * chroot and openat2.
 *
 *   dotdot_escape SECRET HOST_PATH
 *
 * HOST_PATH is an absolute host path of a file holding SECRET, which exists on the host only.
 * Prints one line per attempt: "<attempt>: <ERRNO>", "<attempt>: OK <N> bytes" (read but not
 * the secret) or "ESCAPED <attempt>". Also checks that each way up from /work ends at the
 * sandbox's own root: "<path> is /: yes". */
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "hostile.h"

static const char* g_secret;

static void ReadAt(int dirfd, const char* label, const char* path) {
  int fd = openat(dirfd, path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    say("%s: %s", label, errno_name(errno));
    return;
  }
  char buffer[4096];
  ssize_t n = read(fd, buffer, sizeof buffer - 1);
  close(fd);
  if (n < 0) {
    say("%s: read %s", label, errno_name(errno));
    return;
  }
  buffer[n] = '\0';
  if (strstr(buffer, g_secret) != NULL) {
    say("ESCAPED %s", label);
  } else {
    say("%s: OK %zd bytes", label, n);
  }
}

static void SameAsRoot(const char* path) {
  struct stat root, st;
  if (stat("/", &root) != 0 || stat(path, &st) != 0) {
    say("%s is /: %s", path, errno_name(errno));
    return;
  }
  say("%s is /: %s", path, root.st_dev == st.st_dev && root.st_ino == st.st_ino ? "yes" : "no");
}

int main(int argc, char** argv) {
  hostile_init();
  if (argc < 3 || argv[1][0] == '\0' || argv[2][0] != '/') return 2;
  g_secret = argv[1];
  const char* host = argv[2];
  char path[4096];

  snprintf(path, sizeof path, "/work/../../../../../..%s", host);
  ReadAt(AT_FDCWD, "open /work/../../..HOST", path);
  if (chdir("/work") != 0) say("chdir /work: %s", errno_name(errno));
  snprintf(path, sizeof path, "../../../../../../..%s", host);
  ReadAt(AT_FDCWD, "open ../../..HOST from /work", path);
  snprintf(path, sizeof path, "/proc/1/root%s", host);
  ReadAt(AT_FDCWD, "open /proc/1/root/HOST", path);
  snprintf(path, sizeof path, "/proc/self/root/../../..%s", host);
  ReadAt(AT_FDCWD, "open /proc/self/root/../..HOST", path);
  snprintf(path, sizeof path, "/proc/self/cwd/../../../..%s", host);
  ReadAt(AT_FDCWD, "open /proc/self/cwd/../..HOST", path);

  if (symlink("/", "/work/rootlink") != 0) say("symlink /work/rootlink: %s", errno_name(errno));
  if (symlink("../../../../../../../..", "/work/uplink") != 0) {
    say("symlink /work/uplink: %s", errno_name(errno));
  }
  snprintf(path, sizeof path, "/work/rootlink%s", host);
  ReadAt(AT_FDCWD, "open /work/rootlink/HOST", path);
  snprintf(path, sizeof path, "/work/uplink%s", host);
  ReadAt(AT_FDCWD, "open /work/uplink/HOST", path);
  SameAsRoot("/work/../../..");
  SameAsRoot("/work/rootlink");
  SameAsRoot("/work/uplink");
  SameAsRoot("/proc/self/root");
  SameAsRoot("/proc/1/root");

  int work = open("/work", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  struct open_how how = {.flags = O_RDONLY | O_CLOEXEC, .resolve = RESOLVE_BENEATH};
  long fd = syscall(SYS_openat2, work, "../etc/ld.so.cache", &how, sizeof how);
  expect_failure("openat2 RESOLVE_BENEATH ../etc/ld.so.cache", fd);
  if (fd >= 0) close((int)fd);

  /* chroot into /work and climb out with the classic fchdir trick. */
  int top = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  int rc = chroot("/work");
  expect_failure("chroot /work", rc);
  if (rc == 0 && top >= 0) {
    if (fchdir(top) == 0) {
      for (int i = 0; i < 64; ++i) {
        if (chdir("..") != 0) break;
      }
      if (chroot(".") == 0) {
        ReadAt(AT_FDCWD, "chroot climb HOST", host);
      }
    }
  }
  if (top >= 0) close(top);
  if (work >= 0) close(work);
  return 0;
}
