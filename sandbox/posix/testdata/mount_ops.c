/* mount_ops: tries every way to change the mount table.
 *
 * Prints "<call> <args>: <ERRNO>" per attempt, "ESCAPED ..." on success (and undoes it). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "hostile.h"

#ifndef SYS_fsopen
#define SYS_open_tree 428
#define SYS_move_mount 429
#define SYS_fsopen 430
#define SYS_fsconfig 431
#define SYS_fsmount 432
#define SYS_fspick 433
#endif
#ifndef SYS_mount_setattr
#define SYS_mount_setattr 442
#endif

int main(void) {
  hostile_init();
  mkdir("/work/mnt", 0755);
  int rc = mount("none", "/work/mnt", "tmpfs", 0, "size=1m");
  expect_failure("mount tmpfs /work/mnt", rc);
  if (rc == 0) umount2("/work/mnt", MNT_DETACH);
  rc = mount("/", "/work/mnt", NULL, MS_BIND | MS_REC, NULL);
  expect_failure("mount bind / /work/mnt", rc);
  if (rc == 0) umount2("/work/mnt", MNT_DETACH);
  rc = mount("proc", "/work/mnt", "proc", 0, NULL);
  expect_failure("mount proc /work/mnt", rc);
  if (rc == 0) umount2("/work/mnt", MNT_DETACH);
  expect_failure("mount remount rw /usr", mount(NULL, "/usr", NULL, MS_REMOUNT | MS_BIND, NULL));
  expect_failure("mount remount rw /", mount(NULL, "/", NULL, MS_REMOUNT, NULL));
  expect_failure("mount make-shared /", mount(NULL, "/", NULL, MS_SHARED | MS_REC, NULL));
  expect_failure("umount /proc", umount("/proc"));
  expect_failure("umount2 /usr MNT_DETACH", umount2("/usr", MNT_DETACH));
  expect_failure("umount2 /work MNT_DETACH", umount2("/work", MNT_DETACH));
  mkdir("/work/old", 0755);
  expect_failure("pivot_root /work /work/old", syscall(SYS_pivot_root, "/work", "/work/old"));
  long fd = syscall(SYS_fsopen, "tmpfs", 0);
  expect_failure("fsopen tmpfs", fd);
  if (fd >= 0) close((int)fd);
  fd = syscall(SYS_fspick, AT_FDCWD, "/usr", 0);
  expect_failure("fspick /usr", fd);
  if (fd >= 0) close((int)fd);
  fd = syscall(SYS_open_tree, AT_FDCWD, "/usr", 1 /* OPEN_TREE_CLONE */);
  expect_failure("open_tree /usr OPEN_TREE_CLONE", fd);
  if (fd >= 0) close((int)fd);
  expect_failure("move_mount /usr /work/mnt",
                 syscall(SYS_move_mount, AT_FDCWD, "/usr", AT_FDCWD, "/work/mnt", 0));
  struct {
    unsigned long long attr_set, attr_clr, propagation, userns_fd;
  } attr = {0, 1 /* MOUNT_ATTR_RDONLY */, 0, 0};
  expect_failure("mount_setattr /usr clear rdonly",
                 syscall(SYS_mount_setattr, AT_FDCWD, "/usr", 0, &attr, sizeof attr));
  return 0;
}
