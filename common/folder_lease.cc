#include "common/folder_lease.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/file_util.h"

namespace vault::common {
namespace {

constexpr absl::string_view kRemoving = ".removing-";

UniqueFd OpenFolder(const std::string& dir) {
  return UniqueFd(open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW));
}

// Whether `fd` is still the folder at `dir` (not renamed away or replaced since it was opened).
bool StillAt(int fd, const std::string& dir) {
  struct stat held {};
  struct stat at {};
  return fstat(fd, &held) == 0 && lstat(dir.c_str(), &at) == 0 && held.st_dev == at.st_dev &&
         held.st_ino == at.st_ino;
}

}  // namespace

absl::StatusOr<FolderLease> FolderLease::Take(const std::string& dir, bool exclusive) {
  UniqueFd fd = OpenFolder(dir);
  if (!fd.valid()) return PosixError(errno, absl::StrCat("open ", dir));
  int rc;
  do {
    rc = flock(fd.get(), exclusive ? LOCK_EX : LOCK_SH);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) return PosixError(errno, absl::StrCat("lock ", dir));
  if (!StillAt(fd.get(), dir)) {
    return absl::AbortedError(absl::StrCat(dir, " was removed while this waited for it"));
  }
  return FolderLease(std::move(fd));
}

absl::Status MarkLeased(const std::string& dir) {
  const std::string path = absl::StrCat(dir, "/", kLeaseMark);
  UniqueFd fd(open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644));
  if (!fd.valid()) return PosixError(errno, absl::StrCat("create ", path));
  return absl::OkStatus();
}

int RemoveUnleased(const std::string& parent, absl::FunctionRef<bool(absl::string_view)> matches) {
  std::vector<std::string> names;
  if (DIR* d = opendir(parent.c_str()); d != nullptr) {
    while (const dirent* e = readdir(d)) {
      const absl::string_view name = e->d_name;
      if (name == "." || name == "..") continue;
      if (!absl::StartsWith(name, kRemoving) && !matches(name)) continue;
      names.emplace_back(name);
    }
    closedir(d);
  }
  int removed = 0;
  for (const std::string& name : names) {
    const std::string dir = absl::StrCat(parent, "/", name);
    UniqueFd fd = OpenFolder(dir);
    if (!fd.valid() || flock(fd.get(), LOCK_EX | LOCK_NB) != 0) continue;  // leased, or not ours
    if (!StillAt(fd.get(), dir)) continue;
    std::error_code ec;
    if (absl::StartsWith(name, kRemoving)) {  // a remover died halfway through
      std::filesystem::remove_all(dir, ec);
      continue;
    }
    // Only a folder whose users take leases: another build's may be in use without one.
    if (faccessat(fd.get(), kLeaseMark, F_OK, AT_SYMLINK_NOFOLLOW) != 0) continue;
    // Renamed away under the lock: a Take waiting on the old path sees it gone and retries.
    const std::string doomed = absl::StrCat(parent, "/", kRemoving, name);
    if (rename(dir.c_str(), doomed.c_str()) != 0) continue;
    std::filesystem::remove_all(doomed, ec);
    if (!ec) ++removed;
  }
  return removed;
}

}  // namespace vault::common
