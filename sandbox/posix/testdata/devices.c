/* devices: tries to create device nodes and to open the host's devices.
 *
 * Prints "dev: <the entries of /dev, sorted>", "mknod <path> <kind>: <ERRNO>" per attempt
 * ("ESCAPED" on success, undone), "open <device>: <ERRNO>" for devices that must be absent,
 * and "open /dev/null: OK" etc. for the four that must be there. */
#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "hostile.h"

static int Compare(const void* a, const void* b) {
  return strcmp(*(const char* const*)a, *(const char* const*)b);
}

static void Mknod(const char* path, mode_t mode, dev_t device, const char* kind) {
  char what[128];
  snprintf(what, sizeof what, "mknod %s %s", path, kind);
  int rc = mknod(path, mode, device);
  expect_failure(what, rc);
  if (rc == 0) unlink(path);
}

int main(void) {
  hostile_init();
  DIR* dev = opendir("/dev");
  if (dev == NULL) {
    say("dev: %s", errno_name(errno));
  } else {
    char* names[128];
    size_t count = 0;
    struct dirent* entry;
    while ((entry = readdir(dev)) != NULL && count < 128) {
      if (strcmp(entry->d_name, ".") == 0 || strcmp(entry->d_name, "..") == 0) continue;
      names[count++] = strdup(entry->d_name);
    }
    closedir(dev);
    qsort(names, count, sizeof names[0], Compare);
    char line[4096] = "dev:";
    for (size_t i = 0; i < count; ++i) {
      size_t used = strlen(line);
      snprintf(line + used, sizeof line - used, " %s", names[i]);
    }
    say("%s", line);
  }
  Mknod("/work/mem", S_IFCHR | 0600, makedev(1, 1), "char 1:1");
  Mknod("/work/sda", S_IFBLK | 0600, makedev(8, 0), "block 8:0");
  Mknod("/dev/mem", S_IFCHR | 0600, makedev(1, 1), "char 1:1");
  Mknod("/tmp/kmsg", S_IFCHR | 0600, makedev(1, 11), "char 1:11");
  static const char* const kAbsent[] = {
      "/dev/mem",   "/dev/kmem",  "/dev/port",    "/dev/kmsg", "/dev/sda",  "/dev/vda",
      "/dev/nvme0n1", "/dev/tty",  "/dev/console", "/dev/tty0", "/dev/ptmx", "/dev/fuse",
      "/dev/kvm",   "/dev/net/tun", "/dev/loop0", "/dev/loop-control", "/dev/shm",
      "/dev/mqueue", "/dev/pts/ptmx",
  };
  for (size_t i = 0; i < sizeof kAbsent / sizeof kAbsent[0]; ++i) {
    char what[128];
    snprintf(what, sizeof what, "open %s", kAbsent[i]);
    int fd = open(kAbsent[i], O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    expect_failure(what, fd);
    if (fd >= 0) close(fd);
  }
  static const char* const kPresent[] = {"/dev/null", "/dev/zero", "/dev/random",
                                         "/dev/urandom"};
  for (size_t i = 0; i < sizeof kPresent / sizeof kPresent[0]; ++i) {
    char what[128];
    snprintf(what, sizeof what, "read %s", kPresent[i]);
    int fd = open(kPresent[i], O_RDONLY | O_CLOEXEC);
    char byte;
    report(what, fd < 0 ? -1 : read(fd, &byte, 1));
    if (fd >= 0) close(fd);
  }
  return 0;
}
