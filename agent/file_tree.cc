#include "agent/file_tree.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "capability/grant.h"
#include "common/file_util.h"
#include "common/status_macros.h"

namespace vault::agent {
namespace {

using common::PosixError;
using common::UniqueFd;

constexpr absl::string_view kVaultRoot = "/vault";
constexpr absl::string_view kTempPrefix = ".vault-tmp-";
constexpr uint64_t kResolve =
    RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV;
// Bounds every retry loop: EAGAIN from openat2, and names that appear or vanish between two
// system calls because someone else is changing the directory.
constexpr int kMaxAttempts = 64;

// openat2(dir_fd, path) beneath `dir_fd` (kResolve), close-on-exec. openat2 answers EAGAIN when
// a rename or mount anywhere on the system races a lookup it then cannot prove stayed beneath
// (only ".." triggers it, and vault paths have none, but the kernel asks callers to retry).
int OpenBeneath(int dir_fd, const char* path, uint64_t flags, mode_t mode = 0) {
  open_how how{};
  how.flags = flags | O_CLOEXEC;
  how.mode = (flags & O_CREAT) != 0 ? mode : 0;  // openat2 refuses a mode without O_CREAT
  how.resolve = kResolve;
  for (int attempt = 0;; ++attempt) {
    int fd = static_cast<int>(syscall(SYS_openat2, dir_fd, path, &how, sizeof how));
    if (fd >= 0 || (errno != EAGAIN && errno != EINTR) || attempt == kMaxAttempts) return fd;
  }
}

// The path below the root: "." for "/vault", "a/b" for "/vault/a/b".
absl::StatusOr<std::string> RelativePath(absl::string_view vault_path) {
  VAULT_RETURN_IF_ERROR(capability::ValidatePath(vault_path));
  if (vault_path == kVaultRoot) return std::string(".");
  if (!absl::StartsWith(vault_path, absl::StrCat(kVaultRoot, "/"))) {
    return absl::InvalidArgumentError(
        absl::StrCat("path \"", vault_path, "\" is not in the vault's tree (\"/vault/...\")"));
  }
  return std::string(vault_path.substr(kVaultRoot.size() + 1));
}

// errno from resolving `what` beneath the root, as the codes the header promises.
absl::Status ResolveError(int err, absl::string_view what) {
  switch (err) {
    case ELOOP:
      return absl::PermissionDeniedError(
          absl::StrCat(what, ": a symbolic link is on the path, and links are not followed"));
    case EXDEV:
      return absl::PermissionDeniedError(
          absl::StrCat(what, ": the path leaves the file tree (another mount)"));
    case ENOENT:
      return absl::NotFoundError(absl::StrCat(what, " does not exist"));
    case ENOTDIR:
      return absl::FailedPreconditionError(
          absl::StrCat(what, ": a parent on the path is not a directory"));
    case EAGAIN:
      return absl::UnavailableError(
          absl::StrCat(what, ": the file system kept changing during the lookup; try again"));
    default:
      return PosixError(err, what);
  }
}

const char* KindOf(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "of an unknown kind";
}

absl::Status WrongKind(absl::string_view vault_path, mode_t mode, absl::string_view wanted) {
  return absl::FailedPreconditionError(
      absl::StrCat(vault_path, " is ", KindOf(mode), ", not ", wanted));
}

// A descriptor and what fstat said of it.
struct Handle {
  UniqueFd fd;
  struct stat st {};
};

// `relative` beneath `dir_fd`, opened O_PATH: nothing is opened for real, so a FIFO cannot block
// and a device sees no open.
absl::StatusOr<Handle> Resolve(int dir_fd, const std::string& relative,
                               absl::string_view vault_path) {
  Handle h;
  h.fd.Reset(OpenBeneath(dir_fd, relative.c_str(), O_PATH));
  if (!h.fd.valid()) return ResolveError(errno, vault_path);
  if (fstat(h.fd.get(), &h.st) != 0) return PosixError(errno, absl::StrCat("stat ", vault_path));
  return h;
}

// Opens for real the regular file `path` (an O_PATH handle) refers to, through /proc/self/fd:
// the very inode that was checked, whatever has been renamed since.
absl::StatusOr<Handle> ReopenRegular(const Handle& path, int flags, absl::string_view vault_path) {
  if (!S_ISREG(path.st.st_mode)) return WrongKind(vault_path, path.st.st_mode, "a regular file");
  const std::string proc = absl::StrCat("/proc/self/fd/", path.fd.get());
  Handle h;
  h.fd.Reset(open(proc.c_str(), flags | O_CLOEXEC | O_NOCTTY | O_NONBLOCK));
  if (!h.fd.valid()) return PosixError(errno, absl::StrCat("open ", vault_path));
  if (fstat(h.fd.get(), &h.st) != 0) return PosixError(errno, absl::StrCat("stat ", vault_path));
  if (h.st.st_dev != path.st.st_dev || h.st.st_ino != path.st.st_ino || !S_ISREG(h.st.st_mode)) {
    return absl::UnavailableError(
        absl::StrCat(vault_path, " changed while it was being opened; try again"));
  }
  return h;
}

absl::Status WriteAll(int fd, absl::string_view data, absl::string_view vault_path) {
  while (!data.empty()) {
    ssize_t n = write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return PosixError(errno, absl::StrCat("write ", vault_path));
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

// Calls `visit(name, st)` (returning a Status; not OK stops) for each entry of the directory
// `dir_fd` (opened O_RDONLY) but "." and "..", with lstat's answer. Entries removed meanwhile
// are skipped.
template <typename Visit>
absl::Status ForEachEntry(int dir_fd, absl::string_view what, Visit visit) {
  UniqueFd dup(fcntl(dir_fd, F_DUPFD_CLOEXEC, 0));
  if (!dup.valid()) return PosixError(errno, absl::StrCat("dup ", what));
  std::unique_ptr<DIR, int (*)(DIR*)> dir(fdopendir(dup.get()), closedir);
  if (dir == nullptr) return PosixError(errno, absl::StrCat("read directory ", what));
  dup.release();  // the DIR owns it now
  for (;;) {
    errno = 0;
    const dirent* entry = readdir(dir.get());
    if (entry == nullptr) {
      if (errno != 0) return PosixError(errno, absl::StrCat("read directory ", what));
      return absl::OkStatus();
    }
    const absl::string_view name = entry->d_name;
    if (name == "." || name == "..") continue;
    struct stat st;
    if (fstatat(dir_fd, entry->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT) continue;
      return PosixError(errno, absl::StrCat("stat ", what, "/", name));
    }
    VAULT_RETURN_IF_ERROR(visit(name, st));
  }
}

}  // namespace

FileTree::FileTree(std::string root, UniqueFd root_fd)
    : root_(std::move(root)), root_fd_(std::move(root_fd)) {}

absl::StatusOr<std::unique_ptr<FileTree>> FileTree::Open(const std::string& root) {
  if (root.empty()) return absl::InvalidArgumentError("the file tree's root directory is empty");
  VAULT_RETURN_IF_ERROR(common::MakeDirs(root, 0700));
  UniqueFd fd(open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!fd.valid()) return PosixError(errno, absl::StrCat("open the file tree's root ", root));
  UniqueFd probe(OpenBeneath(fd.get(), ".", O_PATH | O_DIRECTORY));
  if (!probe.valid()) {
    if (errno == ENOSYS) {
      return absl::FailedPreconditionError(
          "the kernel has no openat2 (Linux 5.6 or later is needed for the file tree)");
    }
    return PosixError(errno, absl::StrCat("openat2 the file tree's root ", root));
  }
  // Files are reopened through /proc/self/fd (ReopenRegular): check that works before use.
  const std::string proc = absl::StrCat("/proc/self/fd/", fd.get());
  probe.Reset(open(proc.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!probe.valid()) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot reopen ", root, " through ", proc, " (", strerror(errno),
                     "); the file tree needs /proc mounted for this process's PID namespace"));
  }
  return std::unique_ptr<FileTree>(new FileTree(root, std::move(fd)));
}

absl::StatusOr<FileRead> FileTree::Read(absl::string_view vault_path, uint64_t offset,
                                        uint64_t limit, uint64_t max_bytes) {
  VAULT_ASSIGN_OR_RETURN(const std::string relative, RelativePath(vault_path));
  VAULT_ASSIGN_OR_RETURN(const Handle path, Resolve(root_fd_.get(), relative, vault_path));
  VAULT_ASSIGN_OR_RETURN(const Handle file, ReopenRegular(path, O_RDONLY, vault_path));
  const uint64_t size = static_cast<uint64_t>(file.st.st_size);
  if (offset > size) {
    return absl::OutOfRangeError(
        absl::StrCat("offset ", offset, " is past the end of ", vault_path, " (", size, " bytes)"));
  }
  uint64_t length = size - offset;
  if (limit != 0 && limit < length) length = limit;
  if (length > max_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("reading ", length, " bytes of ", vault_path, " from offset ", offset,
                     " is more than the ", max_bytes, " allowed at once; read a smaller range"));
  }
  FileRead out;
  out.size = size;
  out.data.resize(static_cast<size_t>(length));
  size_t done = 0;
  while (done < length) {
    ssize_t n = pread(file.fd.get(), out.data.data() + done, length - done,
                      static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return PosixError(errno, absl::StrCat("read ", vault_path));
    }
    if (n == 0) break;  // it was truncated meanwhile
    done += static_cast<size_t>(n);
  }
  out.data.resize(done);
  return out;
}

absl::StatusOr<uint64_t> FileTree::Write(absl::string_view vault_path, absl::string_view data,
                                         bool append) {
  VAULT_ASSIGN_OR_RETURN(const std::string relative, RelativePath(vault_path));
  if (relative == ".") {
    return absl::FailedPreconditionError(
        absl::StrCat(vault_path, " is the tree's root directory, not a file"));
  }
  const size_t slash = relative.rfind('/');
  const std::string name = slash == std::string::npos ? relative : relative.substr(slash + 1);
  VAULT_ASSIGN_OR_RETURN(UniqueFd dir, OpenParent(relative, vault_path));
  return append ? Append(dir.get(), name, vault_path, data)
                : Replace(dir.get(), name, vault_path, data);
}

absl::StatusOr<UniqueFd> FileTree::OpenParent(absl::string_view relative,
                                              absl::string_view vault_path) {
  UniqueFd dir(OpenBeneath(root_fd_.get(), ".", O_RDONLY | O_DIRECTORY));
  if (!dir.valid()) return PosixError(errno, absl::StrCat("open the file tree's root ", root_));
  std::vector<absl::string_view> parts = absl::StrSplit(relative, '/');
  parts.pop_back();  // the file's own name
  std::string prefix(kVaultRoot);
  for (absl::string_view part : parts) {
    absl::StrAppend(&prefix, "/", part);
    const std::string component(part);
    UniqueFd next;
    // One component at a time, each beneath the last: a directory made here is made beneath the
    // root, never through a link. O_DIRECTORY refuses anything else before opening it.
    for (int attempt = 0;; ++attempt) {
      next.Reset(OpenBeneath(dir.get(), component.c_str(), O_RDONLY | O_DIRECTORY));
      if (next.valid()) break;
      const int err = errno;
      if (err == ENOTDIR) {
        return absl::FailedPreconditionError(
            absl::StrCat("cannot write ", vault_path, ": ", prefix, " is not a directory"));
      }
      if (err != ENOENT || attempt == kMaxAttempts) return ResolveError(err, prefix);
      if (mkdirat(dir.get(), component.c_str(), 0700) != 0) {
        // EEXIST: made meanwhile (or a dangling link, which the next open refuses).
        if (errno != EEXIST) return PosixError(errno, absl::StrCat("create directory ", prefix));
      } else if (fsync(dir.get()) != 0) {
        return PosixError(errno, absl::StrCat("fsync the directory holding ", prefix));
      }
    }
    dir = std::move(next);
  }
  return dir;
}

absl::StatusOr<uint64_t> FileTree::Replace(int dir_fd, const std::string& name,
                                           absl::string_view vault_path, absl::string_view data) {
  // A regular file or a symlink is replaced (the link itself); anything else is refused. A
  // directory appearing after this check makes renameat fail below.
  struct stat st;
  if (fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
    if (!S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode)) {
      return WrongKind(vault_path, st.st_mode, "a regular file");
    }
  } else if (errno != ENOENT) {
    return PosixError(errno, absl::StrCat("stat ", vault_path));
  }

  std::string temp_name;
  UniqueFd temp;
  for (int attempt = 0;; ++attempt) {
    temp_name = absl::StrCat(kTempPrefix, getpid(), "-", temp_counter_.fetch_add(1));
    temp.Reset(
        OpenBeneath(dir_fd, temp_name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0600));
    if (temp.valid()) break;
    // EEXIST: left by a crash, or by another FileTree on this root with the same counter.
    if (errno != EEXIST || attempt == kMaxAttempts) {
      return PosixError(errno, absl::StrCat("create a temporary file beside ", vault_path));
    }
  }
  absl::Status s = WriteAll(temp.get(), data, vault_path);
  if (s.ok() && fsync(temp.get()) != 0) s = PosixError(errno, absl::StrCat("fsync ", vault_path));
  if (s.ok() && temp.Close() != 0) s = PosixError(errno, absl::StrCat("close ", vault_path));
  if (s.ok() && renameat(dir_fd, temp_name.c_str(), dir_fd, name.c_str()) != 0) {
    const int err = errno;
    if (err == EISDIR || err == ENOTEMPTY || err == EEXIST || err == EBUSY) {
      s = absl::FailedPreconditionError(absl::StrCat(
          vault_path, " became a directory or mount point during the write; not replaced"));
    } else {
      s = PosixError(err, absl::StrCat("rename a temporary file over ", vault_path));
    }
  }
  if (!s.ok()) {
    unlinkat(dir_fd, temp_name.c_str(), 0);
    return s;
  }
  if (fsync(dir_fd) != 0) {
    return PosixError(errno, absl::StrCat("fsync the directory holding ", vault_path));
  }
  return static_cast<uint64_t>(data.size());
}

absl::StatusOr<uint64_t> FileTree::Append(int dir_fd, const std::string& name,
                                          absl::string_view vault_path, absl::string_view data) {
  Handle file;
  bool created = false;
  for (int attempt = 0;; ++attempt) {
    absl::StatusOr<Handle> path = Resolve(dir_fd, name, vault_path);
    if (path.ok()) {
      // A symlink was refused by Resolve (ELOOP); a directory, FIFO, ... is refused here.
      VAULT_ASSIGN_OR_RETURN(file, ReopenRegular(*path, O_WRONLY | O_APPEND, vault_path));
      break;
    }
    if (!absl::IsNotFound(path.status())) return path.status();
    file.fd.Reset(OpenBeneath(dir_fd, name.c_str(),
                              O_WRONLY | O_APPEND | O_CREAT | O_EXCL | O_NOFOLLOW, 0600));
    if (file.fd.valid()) {
      created = true;
      break;
    }
    // EEXIST: made meanwhile (or a dangling link, which Resolve then refuses).
    if (errno != EEXIST || attempt == kMaxAttempts) {
      return PosixError(errno, absl::StrCat("create ", vault_path));
    }
  }
  VAULT_RETURN_IF_ERROR(WriteAll(file.fd.get(), data, vault_path));
  if (fdatasync(file.fd.get()) != 0) return PosixError(errno, absl::StrCat("fsync ", vault_path));
  struct stat st;
  if (fstat(file.fd.get(), &st) != 0) return PosixError(errno, absl::StrCat("stat ", vault_path));
  if (file.fd.Close() != 0) return PosixError(errno, absl::StrCat("close ", vault_path));
  if (created && fsync(dir_fd) != 0) {
    return PosixError(errno, absl::StrCat("fsync the directory holding ", vault_path));
  }
  return static_cast<uint64_t>(st.st_size);
}

absl::StatusOr<std::vector<FileEntry>> FileTree::List(absl::string_view vault_path,
                                                      size_t max_entries) {
  VAULT_ASSIGN_OR_RETURN(const std::string relative, RelativePath(vault_path));
  VAULT_ASSIGN_OR_RETURN(const Handle path, Resolve(root_fd_.get(), relative, vault_path));
  if (!S_ISDIR(path.st.st_mode)) return WrongKind(vault_path, path.st.st_mode, "a directory");
  // "." beneath the O_PATH handle: the same directory, now readable.
  UniqueFd dir(OpenBeneath(path.fd.get(), ".", O_RDONLY | O_DIRECTORY));
  if (!dir.valid()) return ResolveError(errno, vault_path);
  std::vector<FileEntry> entries;
  VAULT_RETURN_IF_ERROR(ForEachEntry(
      dir.get(), vault_path, [&](absl::string_view name, const struct stat& st) -> absl::Status {
        const bool directory = S_ISDIR(st.st_mode);
        if (!directory && !S_ISREG(st.st_mode)) return absl::OkStatus();
        if (entries.size() == max_entries) {
          return absl::ResourceExhaustedError(
              absl::StrCat(vault_path, " holds more than ", max_entries, " files and directories"));
        }
        entries.push_back(FileEntry{std::string(name), directory,
                                    directory ? 0 : static_cast<uint64_t>(st.st_size)});
        return absl::OkStatus();
      }));
  std::sort(entries.begin(), entries.end(),
            [](const FileEntry& a, const FileEntry& b) { return a.name < b.name; });
  return entries;
}

absl::StatusOr<TreeUsage> FileTree::Usage() const {
  struct stat root_st;
  if (fstat(root_fd_.get(), &root_st) != 0) return PosixError(errno, absl::StrCat("stat ", root_));
  TreeUsage usage;
  // Directories still to visit, relative to the root. One descriptor is open at a time, however
  // deep the tree.
  std::vector<std::string> pending = {"."};
  while (!pending.empty()) {
    const std::string relative = std::move(pending.back());
    pending.pop_back();
    UniqueFd dir(OpenBeneath(root_fd_.get(), relative.c_str(), O_RDONLY | O_DIRECTORY));
    if (!dir.valid()) {
      const int err = errno;
      // Removed, replaced, moved or mounted over since it was listed: the walk is approximate.
      if (err == ENOENT || err == ENOTDIR || err == ELOOP || err == EXDEV) continue;
      return ResolveError(err, absl::StrCat(root_, "/", relative));
    }
    VAULT_RETURN_IF_ERROR(ForEachEntry(
        dir.get(), relative, [&](absl::string_view name, const struct stat& st) -> absl::Status {
          if (S_ISREG(st.st_mode)) {
            usage.bytes += static_cast<uint64_t>(st.st_size);
            ++usage.files;
          } else if (S_ISDIR(st.st_mode) && st.st_dev == root_st.st_dev) {
            ++usage.directories;
            pending.push_back(relative == "." ? std::string(name)
                                              : absl::StrCat(relative, "/", name));
          }
          return absl::OkStatus();
        }));
  }
  return usage;
}

}  // namespace vault::agent
