#include "sandbox/posix/internal/work_dir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"
#include "common/unique_fd.h"

namespace vault::sandbox::internal {
namespace {

// openat2 answers EAGAIN when a ".." under RESOLVE_BENEATH meets a rename or mount anywhere on
// the system during the lookup (it cannot then prove the walk stayed beneath); the kernel asks
// callers to retry.
int OpenAt2(int dir_fd, const char* path, const open_how& how) {
  for (int attempt = 0;; ++attempt) {
    int fd = static_cast<int>(syscall(SYS_openat2, dir_fd, path, &how, sizeof how));
    if (fd >= 0 || errno != EAGAIN || attempt == 64) return fd;
  }
}

using common::UniqueFd;
using CopyStats = SandboxHandle::CopyStats;

absl::Status Errno(int err, absl::string_view what) { return absl::ErrnoToStatus(err, what); }

absl::Status CopyTree(int from, int to, int depth, uint64_t max_bytes, CopyStats& stats) {
  if (depth > 64) return absl::ResourceExhaustedError("work directory nested too deep");
  int dup_fd = fcntl(from, F_DUPFD_CLOEXEC, 0);
  if (dup_fd < 0) return Errno(errno, "dup");
  DIR* dir = fdopendir(dup_fd);
  if (dir == nullptr) {
    close(dup_fd);
    return Errno(errno, "fdopendir");
  }
  std::unique_ptr<DIR, int (*)(DIR*)> closer(dir, closedir);
  while (dirent* entry = readdir(dir)) {
    std::string name = entry->d_name;
    if (name == "." || name == "..") continue;
    struct stat st;
    if (fstatat(from, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return Errno(errno, name);
    if (S_ISDIR(st.st_mode)) {
      UniqueFd sub(openat(from, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (sub.get() < 0) return Errno(errno, absl::StrCat("open ", name));
      if (mkdirat(to, name.c_str(), 0700) != 0) return Errno(errno, absl::StrCat("mkdir ", name));
      UniqueFd sub_to(openat(to, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (sub_to.get() < 0) return Errno(errno, absl::StrCat("open ", name));
      ++stats.directories;
      VAULT_RETURN_IF_ERROR(CopyTree(sub.get(), sub_to.get(), depth + 1, max_bytes, stats));
    } else if (S_ISREG(st.st_mode)) {
      UniqueFd in(openat(from, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
      if (in.get() < 0) return Errno(errno, absl::StrCat("open ", name));
      UniqueFd out(
          openat(to, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
      if (out.get() < 0) return Errno(errno, absl::StrCat("create ", name));
      char buf[64 * 1024];
      ssize_t n;
      while ((n = read(in.get(), buf, sizeof buf)) > 0) {
        if (write(out.get(), buf, static_cast<size_t>(n)) != n) return Errno(errno, "write");
        stats.bytes += static_cast<uint64_t>(n);
        if (stats.bytes > max_bytes) {
          return absl::ResourceExhaustedError(absl::StrCat(
              "the work directory's files add up to more than ", max_bytes,
              " bytes (the storage quota; sparse files or hard links?); copy stopped"));
        }
      }
      if (n < 0) return Errno(errno, absl::StrCat("read ", name));
      ++stats.files;
    } else {
      ++stats.skipped;
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> ReadWorkFile(int work_fd, const std::string& relative_path,
                                         size_t max_bytes) {
  if (relative_path.empty() || relative_path[0] == '/' ||
      relative_path.find('\0') != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("work file path must be relative: \"", relative_path, "\""));
  }
  open_how how{};
  how.flags = O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV;
  UniqueFd fd(OpenAt2(work_fd, relative_path.c_str(), how));
  if (fd.get() < 0) {
    int err = errno;
    if (err == ELOOP) {
      return absl::PermissionDeniedError(
          absl::StrCat("work file ", relative_path, ": symlinks are not followed"));
    }
    if (err == EXDEV) {
      return absl::PermissionDeniedError(
          absl::StrCat("work file ", relative_path, ": escapes the work directory"));
    }
    return Errno(err, absl::StrCat("work file ", relative_path));
  }
  struct stat st;
  if (fstat(fd.get(), &st) != 0) return Errno(errno, "fstat work file");
  if (!S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("work file ", relative_path, " is not a regular file"));
  }
  std::string data;
  char buf[64 * 1024];
  for (;;) {
    ssize_t n = read(fd.get(), buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Errno(errno, "read work file");
    }
    if (n == 0) break;
    data.append(buf, static_cast<size_t>(n));
    if (data.size() > max_bytes) {
      return absl::ResourceExhaustedError(
          absl::StrCat("work file ", relative_path, " is larger than ", max_bytes, " bytes"));
    }
  }
  return data;
}

absl::Status CopyWorkDir(int work_fd, const std::string& host_dir, uint64_t max_bytes,
                         CopyStats& stats) {
  if (mkdir(host_dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return Errno(errno, absl::StrCat("mkdir ", host_dir));
  }
  UniqueFd target(open(host_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (target.get() < 0) return Errno(errno, absl::StrCat("open ", host_dir));
  {
    std::error_code ec;
    if (!std::filesystem::is_empty(host_dir, ec) || ec) {
      return absl::FailedPreconditionError(absl::StrCat(host_dir, " is not empty"));
    }
  }
  open_how how{};
  how.flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV;
  UniqueFd source(OpenAt2(work_fd, ".", how));
  if (source.get() < 0) return Errno(errno, "open the work directory");
  return CopyTree(source.get(), target.get(), 0, max_bytes, stats);
}

}  // namespace vault::sandbox::internal
