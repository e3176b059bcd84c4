/* file_handles: the "shocker" escape: open a file by a forged handle, which skips path
 * resolution and so leaves any chroot or mount namespace.
 *
 * Prints "name_to_handle_at /code/hello: <OK|ERRNO>", "open_by_handle_at forged root:
 * <ERRNO>", "open_by_handle_at own handle: <ERRNO>"; "ESCAPED" when a handle opens. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <unistd.h>

#include "hostile.h"

int main(void) {
  hostile_init();
  struct {
    struct file_handle handle;
    unsigned char bytes[MAX_HANDLE_SZ];
  } storage;
  memset(&storage, 0, sizeof storage);
  storage.handle.handle_bytes = MAX_HANDLE_SZ;
  int mount_id = 0;
  int rc = name_to_handle_at(AT_FDCWD, "/code/hello", &storage.handle, &mount_id, 0);
  report("name_to_handle_at /code/hello", rc);
  int dir = open("/code", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (rc == 0) {
    int fd = open_by_handle_at(dir, &storage.handle, O_RDONLY | O_CLOEXEC);
    expect_failure("open_by_handle_at own handle", fd);
    if (fd >= 0) close(fd);
  }
  /* ext4's root directory is inode 2, generation 0: the handle shocker forged. */
  memset(&storage, 0, sizeof storage);
  storage.handle.handle_bytes = 8;
  storage.handle.handle_type = 1; /* FILEID_INO32_GEN */
  storage.bytes[0] = 2;
  int fd = open_by_handle_at(dir, &storage.handle, O_RDONLY | O_CLOEXEC);
  expect_failure("open_by_handle_at forged root", fd);
  if (fd >= 0) close(fd);
  if (dir >= 0) close(dir);
  return 0;
}
