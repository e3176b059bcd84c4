#include "sandbox/container/scratch.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace vault::sandbox {
namespace {

absl::Status Errno(int err, const std::string& what) { return absl::ErrnoToStatus(err, what); }

}  // namespace

Scratch& Scratch::operator=(Scratch&& other) noexcept {
  if (this != &other) {
    Detach();
    path = std::exchange(other.path, "");
    work_fd = std::move(other.work_fd);
  }
  return *this;
}

void Scratch::Detach() {
  if (path.empty()) return;
  umount2(path.c_str(), MNT_DETACH);
  rmdir(path.c_str());
  path.clear();
}

absl::StatusOr<Scratch> MountScratch(const std::string& path, const Limits& limits,
                                     uint32_t host_id) {
  if (mkdir(path.c_str(), 0700) != 0) return Errno(errno, absl::StrCat("mkdir ", path));
  const std::string options =
      absl::StrCat("mode=0700,size=", limits.storage_bytes, ",nr_inodes=", limits.storage_inodes,
                   ",uid=", host_id, ",gid=", host_id);
  if (mount("tmpfs", path.c_str(), "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, options.c_str()) !=
      0) {
    const int err = errno;
    rmdir(path.c_str());
    return Errno(err, absl::StrCat("mount a tmpfs at ", path));
  }
  Scratch scratch;
  scratch.path = path;
  common::UniqueFd root(open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (root.get() < 0) return Errno(errno, absl::StrCat("open ", path));
  for (const char* sub : {"work", "tmp"}) {
    if (mkdirat(root.get(), sub, 0700) != 0 ||
        fchownat(root.get(), sub, host_id, host_id, AT_SYMLINK_NOFOLLOW) != 0) {
      return Errno(errno, absl::StrCat("make ", path, "/", sub));
    }
  }
  scratch.work_fd =
      common::UniqueFd(openat(root.get(), "work", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (scratch.work_fd.get() < 0) return Errno(errno, absl::StrCat("open ", path, "/work"));
  return scratch;
}

int RemoveStaleScratch(const std::string& parent) {
  DIR* dir = opendir(parent.c_str());
  if (dir == nullptr) return 0;
  int removed = 0;
  while (dirent* entry = readdir(dir)) {
    const std::string name = entry->d_name;
    if (name == "." || name == "..") continue;
    const std::string path = absl::StrCat(parent, "/", name);
    umount2(path.c_str(), MNT_DETACH | UMOUNT_NOFOLLOW);
    if (rmdir(path.c_str()) == 0) ++removed;
  }
  closedir(dir);
  return removed;
}

}  // namespace vault::sandbox
