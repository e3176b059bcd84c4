/* write_outside: tries to write everywhere but the work directory and /tmp.
 *
 * Existing files are only opened for writing (O_APPEND, never written or truncated), and
 * metadata changes set what is already there, so that even a broken sandbox loses nothing.
 * Prints "<attempt> <path>: <ERRNO>" per attempt; "ESCAPED <attempt> <path>" on success. The
 * work directory, /tmp, /dev/null and /dev/zero are positive controls ("...: OK"). */
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hostile.h"

static void Create(const char* path) {
  char what[256];
  snprintf(what, sizeof what, "create %s", path);
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  expect_failure(what, fd);
  if (fd >= 0) {
    close(fd);
    unlink(path);
  }
}

static void OpenForWriting(const char* path) {
  char what[256];
  snprintf(what, sizeof what, "open for writing %s", path);
  int fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC);
  expect_failure(what, fd);
  if (fd >= 0) close(fd);
}

static void MakeDirectory(const char* path) {
  char what[256];
  snprintf(what, sizeof what, "mkdir %s", path);
  int rc = mkdir(path, 0700);
  expect_failure(what, rc);
  if (rc == 0) rmdir(path);
}

static void Control(const char* path) {
  char what[256];
  snprintf(what, sizeof what, "create %s", path);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  report(what, fd < 0 ? -1 : write(fd, "ok", 2));
  if (fd >= 0) close(fd);
}

int main(void) {
  hostile_init();
  static const char* const kCreate[] = {
      "/hostile", "/usr/hostile", "/usr/bin/hostile", "/lib/hostile", "/code/hostile",
      "/etc/hostile", "/proc/hostile", "/dev/hostile", "/sys/hostile", "/root/hostile",
  };
  for (size_t i = 0; i < sizeof kCreate / sizeof kCreate[0]; ++i) Create(kCreate[i]);
  static const char* const kOpen[] = {
      "/usr/bin/ls", "/code/hello", "/etc/ld.so.cache", "/proc/sys/kernel/hostname",
      "/proc/sys/vm/drop_caches", "/proc/sysrq-trigger", "/proc/self/mem",
      "/proc/1/mem", "/dev/urandom",
  };
  for (size_t i = 0; i < sizeof kOpen / sizeof kOpen[0]; ++i) OpenForWriting(kOpen[i]);
  static const char* const kMkdir[] = {"/hostile-dir", "/usr/hostile-dir", "/code/hostile-dir",
                                       "/dev/hostile-dir"};
  for (size_t i = 0; i < sizeof kMkdir / sizeof kMkdir[0]; ++i) MakeDirectory(kMkdir[i]);

  int rc = link("/code/hello", "/code/hello-link");
  expect_failure("link /code/hello-link", rc);
  if (rc == 0) unlink("/code/hello-link");
  rc = symlink("/work", "/usr/hostile-link");
  expect_failure("symlink /usr/hostile-link", rc);
  if (rc == 0) unlink("/usr/hostile-link");
  struct stat st;
  if (stat("/code/hello", &st) == 0) {
    expect_failure("chmod /code/hello", chmod("/code/hello", st.st_mode & 07777));
  } else {
    say("stat /code/hello: %s", errno_name(errno));
  }
  if (stat("/etc/ld.so.cache", &st) == 0) {
    expect_failure("truncate /etc/ld.so.cache", truncate("/etc/ld.so.cache", st.st_size));
  } else {
    say("stat /etc/ld.so.cache: %s", errno_name(errno));
  }
  expect_failure("rename /code/hello", rename("/code/hello", "/code/hello"));

  Control("/work/control");
  Control("/tmp/control");
  int fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
  report("write /dev/null", fd < 0 ? -1 : write(fd, "x", 1));
  if (fd >= 0) close(fd);
  fd = open("/dev/zero", O_WRONLY | O_CLOEXEC);
  report("write /dev/zero", fd < 0 ? -1 : write(fd, "x", 1));
  if (fd >= 0) close(fd);
  return 0;
}
