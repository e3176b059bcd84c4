// agent/file_tree: the vault's file tree, the one host directory agents reach, and only through
// the ReadFile / WriteFile / List host calls. Agents name files by vault path: "/vault" is the
// root directory and "/vault/a/b" is <root>/a/b.
//
// Nothing in the tree is trusted to be what its name says, since anyone with access to the host
// directory may have planted things there. Every path is resolved beneath the root, one
// openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV) at a
// time, so:
//   - a symbolic link anywhere on the path is refused (PERMISSION_DENIED), whatever it points
//     to, and so is another mount;
//   - FIFOs, sockets and devices are never opened (FAILED_PRECONDITION): a path is first opened
//     O_PATH, checked with fstat, and only a regular file is reopened (through
//     /proc/self/fd, so the very inode that was checked) to read or append;
//   - a replacing Write renames a new file over the last component, so a symlink there is
//     replaced itself, never written through.
// What path resolution cannot see: a regular file in the tree that is a hard link to a file
// elsewhere on the same file system is read and appended to like any other. The operator owns
// the host directory and must not put such links in it (a replacing Write only swaps the name).
//
//   VAULT_ASSIGN_OR_RETURN(std::unique_ptr<FileTree> tree,
//                          FileTree::Open("/var/lib/vault/a1/files"));
//   VAULT_ASSIGN_OR_RETURN(uint64_t size, tree->Write("/vault/out/report.csv", csv, false));
//   VAULT_ASSIGN_OR_RETURN(FileRead head, tree->Read("/vault/out/report.csv", 0, 4096, 1 << 20));
//   VAULT_ASSIGN_OR_RETURN(std::vector<FileEntry> entries, tree->List("/vault/out", 1000));
//
// Errors: INVALID_ARGUMENT for a path that is not a vault path; PERMISSION_DENIED for a symlink
// on the path or a path that leaves the root's mount; NOT_FOUND for a missing file or parent;
// FAILED_PRECONDITION for the wrong kind of file (a directory where a file is wanted or the
// reverse, a parent that is a file, a FIFO, socket or device); RESOURCE_EXHAUSTED beyond a
// caller's limit; OUT_OF_RANGE for a read offset past the end; other errno values as
// common::PosixError maps them.
//
// Thread safety: thread-safe. A FileTree holds its root's name and descriptor, both immutable,
// and an atomic counter naming temporary files, so every method may run concurrently. Concurrent
// replacing Writes of one path leave one of them whole (the last rename wins); an append racing a
// replacing Write of the same path may land in the file being replaced and be lost, as with any
// POSIX file.
#ifndef VAULT_AGENT_FILE_TREE_H_
#define VAULT_AGENT_FILE_TREE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/unique_fd.h"

namespace vault::agent {

// One entry of a listed directory: a regular file or a directory (size 0).
struct FileEntry {
  std::string name;
  bool directory = false;
  uint64_t size = 0;
};

// The bytes read and the size of the whole file when it was opened.
struct FileRead {
  std::string data;
  uint64_t size = 0;
};

// What the tree holds: regular files (their sizes added up; a file with several hard links in
// the tree counts once per name) and directories, the root excluded.
struct TreeUsage {
  uint64_t bytes = 0;
  uint64_t files = 0;
  uint64_t directories = 0;
};

class FileTree {
 public:
  // Opens the tree at the host directory `root`, creating it (and missing parents) with mode
  // 0700. Symlinks in `root` itself are followed: it is the operator's configuration. Needs
  // openat2 (Linux 5.6) and /proc mounted; FAILED_PRECONDITION otherwise.
  static absl::StatusOr<std::unique_ptr<FileTree>> Open(const std::string& root);

  FileTree(const FileTree&) = delete;
  FileTree& operator=(const FileTree&) = delete;

  // Reads the regular file at `vault_path` from `offset`: `limit` bytes, or to the end when
  // `limit` is 0, fewer when the file ends first. RESOURCE_EXHAUSTED when that range holds more
  // than `max_bytes` bytes (read less, in pieces); OUT_OF_RANGE when `offset` is past the end
  // (an offset equal to the size reads nothing).
  absl::StatusOr<FileRead> Read(absl::string_view vault_path, uint64_t offset, uint64_t limit,
                                uint64_t max_bytes);

  // Replaces the file at `vault_path` with `data`, atomically (a temporary file in the same
  // directory, fsynced, renamed over the name, the directory fsynced: readers see the old or the
  // new content, and descriptors opened before keep the old), or appends `data` to it when
  // `append` (creating it if missing). Missing parent directories are created (0700), each one
  // beneath the root; files it creates or replaces are 0600. Returns the file's new size.
  //
  // A replacing Write replaces a regular file or a symlink (the link, never its target);
  // appending to a symlink is PERMISSION_DENIED. A directory, FIFO, socket or device at
  // `vault_path` is FAILED_PRECONDITION, and "/vault" itself is a directory. A crash during a
  // replacing Write may leave a ".vault-tmp-*" file beside the target; an append that fails
  // part-way (a full disk) may leave part of `data` appended.
  absl::StatusOr<uint64_t> Write(absl::string_view vault_path, absl::string_view data, bool append);

  // The regular files and directories in the directory at `vault_path`, sorted by name (byte
  // order), with file sizes (0 for directories). Symlinks, FIFOs, sockets and devices are left
  // out entirely; a replacing Write's temporary file (".vault-tmp-*") may show while it runs.
  // RESOURCE_EXHAUSTED, rather than a truncated list, when there are more than `max_entries`
  // such entries; it reads no further than that, so memory stays bounded.
  absl::StatusOr<std::vector<FileEntry>> List(absl::string_view vault_path, size_t max_entries);

  // Bytes and files under the root (for quotas and metrics), by walking the tree; approximate
  // when it changes during the walk. Symlinks and special files are not counted.
  absl::StatusOr<TreeUsage> Usage() const;

  // The host directory, as given to Open.
  const std::string& root() const { return root_; }

 private:
  FileTree(std::string root, common::UniqueFd root_fd);

  // The parent directory of `relative` (opened O_RDONLY | O_DIRECTORY), creating missing ones.
  absl::StatusOr<common::UniqueFd> OpenParent(absl::string_view relative,
                                              absl::string_view vault_path);
  absl::StatusOr<uint64_t> Replace(int dir_fd, const std::string& name,
                                   absl::string_view vault_path, absl::string_view data);
  absl::StatusOr<uint64_t> Append(int dir_fd, const std::string& name, absl::string_view vault_path,
                                  absl::string_view data);

  // Constant after construction.
  const std::string root_;
  const common::UniqueFd root_fd_;  // O_PATH | O_DIRECTORY
  // Names this tree's temporary files; atomic, so shared by concurrent Writes.
  std::atomic<uint64_t> temp_counter_{0};
};

}  // namespace vault::agent

#endif  // VAULT_AGENT_FILE_TREE_H_
