#include "common/file_util.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/env.h"
#include "common/status_macros.h"
#include "common/unique_fd.h"

namespace vault::common {
namespace {

absl::StatusCode CodeForErrno(int err) {
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      return absl::StatusCode::kNotFound;
    case EEXIST:
      return absl::StatusCode::kAlreadyExists;
    case EACCES:
    case EPERM:
    case EROFS:
      return absl::StatusCode::kPermissionDenied;
    case ENOSPC:
    case EDQUOT:
    case EMFILE:
    case ENFILE:
    case ENOMEM:
      return absl::StatusCode::kResourceExhausted;
    case EINVAL:
    case ENAMETOOLONG:
    case EISDIR:
      return absl::StatusCode::kInvalidArgument;
    case EINTR:
    case EAGAIN:
      return absl::StatusCode::kUnavailable;
    default:
      return absl::StatusCode::kInternal;
  }
}

using Fd = UniqueFd;

absl::Status SyncDir(Env* env, const std::string& dir) {
  if (int err = env->SyncDir(dir); err != 0) return PosixError(err, absl::StrCat("fsync ", dir));
  return absl::OkStatus();
}

// Creates `path` (failing when it exists), writes `data`, sets `mode` and syncs it.
absl::Status WriteAndSync(Env* env, const std::string& path, absl::string_view data, mode_t mode) {
  int err = 0;
  std::unique_ptr<EnvFile> f = env->Open(path, OpenMode::kCreateNew, /*direct=*/false, &err, mode);
  if (f == nullptr) return PosixError(err, absl::StrCat("create ", path));
  // The umask may have removed bits; the caller's mode is what it asked for.
  if (int e = f->Chmod(mode); e != 0) return PosixError(e, absl::StrCat("chmod ", path));
  if (!data.empty()) {
    if (int e = f->WriteAt(0, {iovec{const_cast<char*>(data.data()), data.size()}}); e != 0) {
      return PosixError(e, absl::StrCat("write ", path));
    }
  }
  if (int e = f->FullSync(); e != 0) return PosixError(e, absl::StrCat("fsync ", path));
  if (int e = f->Close(); e != 0) return PosixError(e, absl::StrCat("close ", path));
  return absl::OkStatus();
}

}  // namespace

absl::Status PosixError(int err, absl::string_view what) {
  return absl::Status(CodeForErrno(err), absl::StrCat(what, ": ", strerror(err)));
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  Fd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return PosixError(errno, absl::StrCat("open ", path));
  std::string out;
  char buf[65536];
  while (true) {
    ssize_t n = read(fd.get(), buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      return PosixError(errno, absl::StrCat("read ", path));
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

absl::StatusOr<std::string> ReadPrivateFile(const std::string& path) {
  Fd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return PosixError(errno, absl::StrCat("open ", path));
  struct stat st;
  if (fstat(fd.get(), &st) != 0) return PosixError(errno, absl::StrCat("stat ", path));
  if (!S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("secret file ", path, " is not a regular file"));
  }
  if ((st.st_mode & 077) != 0) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "secret file %s has mode %04o; it must grant no group or other permission (chmod 600 %s)",
        path, st.st_mode & 07777, path));
  }
  return ReadFile(path);
}

absl::Status WriteFileAtomic(const std::string& path, absl::string_view data, mode_t mode,
                             Env* env) {
  if (env == nullptr) env = Env::Default();
  // Unique per process and call: concurrent writers of one path never share a temporary file.
  static std::atomic<uint64_t> counter{0};
  std::string tmp = absl::StrCat(path, ".tmp.", getpid(), ".", counter.fetch_add(1));
  absl::Status s = WriteAndSync(env, tmp, data, mode);
  if (absl::IsAlreadyExists(s)) return s;  // not ours: leave it alone
  if (s.ok()) {
    if (int err = env->Rename(tmp, path); err != 0) {
      s = PosixError(err, absl::StrCat("rename ", tmp, " to ", path));
    }
  }
  if (!s.ok()) {
    env->Remove(tmp);
    return s;
  }
  return SyncDir(env, DirName(path));
}

absl::Status WriteNewFile(const std::string& path, absl::string_view data, mode_t mode, Env* env) {
  if (env == nullptr) env = Env::Default();
  absl::Status s = WriteAndSync(env, path, data, mode);
  if (!s.ok()) {
    if (s.code() != absl::StatusCode::kAlreadyExists) env->Remove(path);
    return s;
  }
  return SyncDir(env, DirName(path));
}

absl::Status MakeDirs(const std::string& path, mode_t mode) {
  if (path.empty()) return absl::InvalidArgumentError("empty directory path");
  std::string current = path[0] == '/' ? "/" : "";
  for (absl::string_view part : absl::StrSplit(path, '/', absl::SkipEmpty())) {
    absl::StrAppend(&current, part, "/");
    if (mkdir(current.c_str(), mode) != 0 && errno != EEXIST) {
      return PosixError(errno, absl::StrCat("mkdir ", current));
    }
  }
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return PosixError(errno, absl::StrCat("stat ", path));
  if (!S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(path, " exists and is not a directory"));
  }
  return absl::OkStatus();
}

bool PathExists(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0;
}

std::string ResolvePath(absl::string_view base_dir, absl::string_view path) {
  if (path.empty() || path[0] == '/' || base_dir.empty()) return std::string(path);
  if (base_dir.back() == '/') return absl::StrCat(base_dir, path);
  return absl::StrCat(base_dir, "/", path);
}

std::string DirName(absl::string_view path) {
  size_t slash = path.rfind('/');
  if (slash == absl::string_view::npos) return ".";
  if (slash == 0) return "/";
  return std::string(path.substr(0, slash));
}

}  // namespace vault::common
