#include "image/layer_unpack.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/file_util.h"
#include "common/status_macros.h"
#include "common/unique_fd.h"

namespace vault::image {
namespace {

using common::PosixError;
using common::UniqueFd;

// Deeper paths are refused: no image needs them, and removal recurses once a level.
constexpr size_t kMaxDepth = 128;
constexpr absl::string_view kWhiteoutPrefix = ".wh.";
constexpr absl::string_view kOpaqueMarker = ".wh..wh..opq";
constexpr absl::string_view kAufsPrefix = ".wh..wh.";
constexpr size_t kMaxSymlinkTarget = 1024;

struct ArchiveFree {
  void operator()(archive* a) const { archive_read_free(a); }
};

// libarchive pulls the layer's bytes through this.
struct Reader {
  const ByteSource* source;
  absl::Status status;
};

la_ssize_t ReadCallback(archive* a, void* data, const void** buffer) {
  auto* r = static_cast<Reader*>(data);
  absl::StatusOr<absl::string_view> next = (*r->source)();
  if (!next.ok()) {
    r->status = next.status();
    archive_set_error(a, EIO, "the layer's source failed");
    return -1;
  }
  *buffer = next->data();
  return static_cast<la_ssize_t>(next->size());
}

std::string Printable(absl::string_view path) {
  std::string out = absl::CHexEscape(path.substr(0, 200));
  if (path.size() > 200) out += "...";
  return out;
}

absl::Status Refused(absl::string_view path, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("layer entry \"", Printable(path), "\": ", why, "; the layer is refused"));
}

// The path's components, with "." and empty ones dropped. Absolute paths and ".." are refused.
absl::StatusOr<std::vector<std::string>> Components(absl::string_view path) {
  if (path.size() >= PATH_MAX) return Refused(path, "a path longer than 4095 bytes");
  if (absl::StartsWith(path, "/")) return Refused(path, "an absolute path");
  std::vector<std::string> out;
  for (absl::string_view c : absl::StrSplit(path, '/', absl::SkipEmpty())) {
    if (c == ".") continue;
    if (c == "..") return Refused(path, "a `..` component");
    if (c.size() > NAME_MAX) return Refused(path, "a name longer than 255 bytes");
    out.emplace_back(c);
  }
  if (out.size() > kMaxDepth) return Refused(path, "more than 128 levels deep");
  return out;
}

// Opens `rel` (components joined) with the root as "/": symlinks met on the way resolve inside
// the root, never out of it.
absl::StatusOr<UniqueFd> OpenInRoot(int root_fd, const std::string& rel, uint64_t flags) {
  open_how how{};
  how.flags = flags | O_CLOEXEC;
  how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV;
  const long fd = syscall(SYS_openat2, root_fd, rel.empty() ? "." : rel.c_str(), &how, sizeof(how));
  if (fd < 0) return PosixError(errno, absl::StrCat("open \"", Printable(rel), "\" in the root"));
  return UniqueFd(static_cast<int>(fd));
}

absl::Status RemoveAt(int parent, const std::string& name);

absl::Status RemoveChildren(int dir, const absl::flat_hash_set<std::string>* keep) {
  const int copy = fcntl(dir, F_DUPFD_CLOEXEC, 0);
  if (copy < 0) return PosixError(errno, "dup");
  std::unique_ptr<DIR, int (*)(DIR*)> d(fdopendir(copy), closedir);
  if (d == nullptr) {
    close(copy);
    return PosixError(errno, "fdopendir");
  }
  std::vector<std::string> names;
  errno = 0;
  while (dirent* e = readdir(d.get())) {
    const absl::string_view n = e->d_name;
    if (n == "." || n == "..") continue;
    if (keep != nullptr && keep->contains(n)) continue;
    names.emplace_back(n);
  }
  if (errno != 0) return PosixError(errno, "readdir");
  for (const std::string& n : names) VAULT_RETURN_IF_ERROR(RemoveAt(dir, n));
  return absl::OkStatus();
}

// Removes `name` in `parent` and, for a directory, everything under it; never follows a symlink.
// Absent is fine. Depth is bounded by kMaxDepth, since only unpacked paths are removed.
absl::Status RemoveAt(int parent, const std::string& name) {
  struct stat st;
  if (fstatat(parent, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return PosixError(errno, absl::StrCat("stat ", Printable(name)));
  }
  if (S_ISDIR(st.st_mode)) {
    UniqueFd dir(openat(parent, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!dir.valid()) return PosixError(errno, absl::StrCat("open ", Printable(name)));
    VAULT_RETURN_IF_ERROR(RemoveChildren(dir.get(), nullptr));
    if (unlinkat(parent, name.c_str(), AT_REMOVEDIR) != 0) {
      return PosixError(errno, absl::StrCat("rmdir ", Printable(name)));
    }
    return absl::OkStatus();
  }
  if (unlinkat(parent, name.c_str(), 0) != 0 && errno != ENOENT) {
    return PosixError(errno, absl::StrCat("unlink ", Printable(name)));
  }
  return absl::OkStatus();
}

class LayerWriter {
 public:
  LayerWriter(archive* a, int root_fd, UnpackBudget* budget, UnpackReport* report)
      : a_(a), root_fd_(root_fd), budget_(budget), report_(report) {}

  absl::Status Apply(archive_entry* e) {
    const char* raw = archive_entry_pathname(e);
    if (raw == nullptr) return Refused("", "no path");
    const std::string path = raw;
    VAULT_ASSIGN_OR_RETURN(std::vector<std::string> parts, Components(path));
    if (archive_entry_xattr_count(e) > 0) report_->ignored_xattrs += archive_entry_xattr_count(e);
    const mode_t type = archive_entry_filetype(e);
    if (parts.empty()) {
      // The root itself ("./"): its mode is the cache's, not the layer's.
      if (type == AE_IFDIR) return absl::OkStatus();
      return Refused(path, "names the root as a file");
    }
    const std::string name = parts.back();
    parts.pop_back();
    const std::string parent_rel = absl::StrJoin(parts, "/");

    // AUFS's own bookkeeping (.wh..wh.plnk, .wh..wh.aufs, ...) means nothing here: skipped,
    // as containerd does, with everything under it.
    for (const std::string& c : parts) {
      if (absl::StartsWith(c, kAufsPrefix)) return absl::OkStatus();
    }
    if (name == kOpaqueMarker) return Opaque(path, parent_rel);
    if (absl::StartsWith(name, kAufsPrefix)) return absl::OkStatus();
    if (absl::StartsWith(name, kWhiteoutPrefix)) {
      const std::string target = name.substr(kWhiteoutPrefix.size());
      if (target.empty() || target == "." || target == "..") {
        return Refused(path, "a whiteout of no name");
      }
      ++report_->whiteouts;
      // Nothing to remove where the folder is not: no folder is made for a whiteout.
      absl::StatusOr<UniqueFd> parent = OpenInRoot(root_fd_, parent_rel, O_PATH | O_DIRECTORY);
      if (!parent.ok()) {
        if (absl::IsNotFound(parent.status())) return absl::OkStatus();
        return Refused(
            path, absl::StrCat("its directory cannot be opened (", parent.status().message(), ")"));
      }
      return RemoveAt(parent->get(), target);
    }

    // Hard links first: libarchive reports them with the type of what they link to.
    if (const char* target = archive_entry_hardlink(e); target != nullptr) {
      VAULT_ASSIGN_OR_RETURN(UniqueFd parent, Parent(path, parts));
      VAULT_RETURN_IF_ERROR(HardLink(path, parent.get(), name, target));
      return Created(parent.get(), name);
    }
    mode_t mode = archive_entry_perm(e) & 07777;
    if ((mode & (S_ISUID | S_ISGID)) != 0 && type != AE_IFDIR) {
      ++report_->dropped_setid;
    }
    if (type != AE_IFDIR) mode &= ~(S_ISUID | S_ISGID);
    // The root is read-only in every container and shared by all of them: nothing in it is
    // writable but by its owner (the vault), so no local user can plant files in it (the data
    // folder is searchable for the containers' host ids). Inside, the owner is unmapped: agents
    // lose nothing.
    mode &= ~(S_IWGRP | S_IWOTH | S_ISVTX);

    UniqueFd parent;
    if (type == AE_IFDIR || type == AE_IFREG || type == AE_IFLNK) {
      VAULT_ASSIGN_OR_RETURN(parent, Parent(path, parts));
    }
    switch (type) {
      case AE_IFDIR:
        VAULT_RETURN_IF_ERROR(Directory(path, parent.get(), name, mode & ~(S_ISUID | S_ISGID)));
        ++report_->dirs;
        break;
      case AE_IFREG:
        VAULT_RETURN_IF_ERROR(RegularFile(path, e, parent.get(), name, mode));
        ++report_->files;
        break;
      case AE_IFLNK: {
        const char* target = archive_entry_symlink(e);
        if (target == nullptr || *target == '\0') return Refused(path, "a symlink to nothing");
        const size_t len = strlen(target);
        if (len > kMaxSymlinkTarget) return Refused(path, "a symlink target past 1024 bytes");
        VAULT_RETURN_IF_ERROR(Charge(path, len));
        VAULT_RETURN_IF_ERROR(RemoveAt(parent.get(), name));
        if (symlinkat(target, parent.get(), name.c_str()) != 0) {
          return PosixError(errno, absl::StrCat("symlink ", Printable(path)));
        }
        ++report_->symlinks;
        break;
      }
      case AE_IFCHR:
      case AE_IFBLK:
      case AE_IFIFO:
        ++report_->skipped_devices;
        return absl::OkStatus();
      default:
        return Refused(path, absl::StrCat("an entry of file type 0", absl::Hex(type)));
    }
    return Created(parent.get(), name);
  }

 private:
  // The directory holding an entry, made (0755) where the layer did not list it. One openat2
  // when it exists; otherwise one walk from the root, a component at a time, resolving in the
  // root only a component that is a symlink. Refused past kMaxDepth real levels.
  absl::StatusOr<UniqueFd> Parent(absl::string_view path, const std::vector<std::string>& parts) {
    absl::StatusOr<UniqueFd> dir =
        OpenInRoot(root_fd_, absl::StrJoin(parts, "/"), O_PATH | O_DIRECTORY);
    if (!dir.ok()) {
      if (!absl::IsNotFound(dir.status())) {
        return Refused(
            path, absl::StrCat("its directory cannot be opened (", dir.status().message(), ")"));
      }
      dir = Walk(path, parts);
      if (!dir.ok()) return dir.status();
    }
    VAULT_ASSIGN_OR_RETURN(uint32_t depth, DepthOf(path, dir->get()));
    if (depth + 1 > kMaxDepth) return Refused(path, "more than 128 levels deep");
    return dir;
  }

  absl::StatusOr<UniqueFd> Walk(absl::string_view path, const std::vector<std::string>& parts) {
    VAULT_ASSIGN_OR_RETURN(UniqueFd dir, OpenInRoot(root_fd_, "", O_PATH | O_DIRECTORY));
    std::string rel;
    for (const std::string& c : parts) {
      rel = rel.empty() ? c : absl::StrCat(rel, "/", c);
      UniqueFd sub(openat(dir.get(), c.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (!sub.valid() && errno == ENOENT) {
        VAULT_ASSIGN_OR_RETURN(uint32_t depth, DepthOf(path, dir.get()));
        if (depth + 1 > kMaxDepth) return Refused(path, "more than 128 levels deep");
        if (mkdirat(dir.get(), c.c_str(), 0755) != 0) {
          return PosixError(errno, absl::StrCat("mkdir ", Printable(rel)));
        }
        VAULT_RETURN_IF_ERROR(Created(dir.get(), c));
        // Whatever the process's umask: containers' own host ids pass through.
        if (fchmodat(dir.get(), c.c_str(), 0755, 0) != 0) {
          return PosixError(errno, absl::StrCat("chmod ", Printable(rel)));
        }
        sub = UniqueFd(openat(dir.get(), c.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        if (!sub.valid()) return PosixError(errno, absl::StrCat("open ", Printable(rel)));
        VAULT_RETURN_IF_ERROR(RecordDepth(sub.get(), depth + 1));
      } else if (!sub.valid()) {
        // A symlink (or not a folder): resolved, in the root, this once.
        absl::StatusOr<UniqueFd> through = OpenInRoot(root_fd_, rel, O_PATH | O_DIRECTORY);
        if (!through.ok()) {
          return Refused(path,
                         absl::StrCat("its directory \"", Printable(rel), "\" cannot be made (",
                                      through.status().message(), ")"));
        }
        sub = *std::move(through);
      }
      dir = std::move(sub);
    }
    return dir;
  }

  static absl::StatusOr<std::pair<uint64_t, uint64_t>> Key(int fd) {
    struct stat st;
    if (fstat(fd, &st) != 0) return PosixError(errno, "fstat a folder of the root");
    return std::make_pair(static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino));
  }
  absl::StatusOr<uint32_t> DepthOf(absl::string_view path, int dir) {
    if (budget_->depths.empty()) {  // the root, before anything was made
      VAULT_ASSIGN_OR_RETURN(auto root, Key(root_fd_));
      budget_->depths[root] = 0;
    }
    VAULT_ASSIGN_OR_RETURN(auto key, Key(dir));
    auto it = budget_->depths.find(key);
    if (it == budget_->depths.end()) {
      return Refused(path, "its directory is not one the layers made");
    }
    return it->second;
  }
  absl::Status RecordDepth(int dir, uint32_t depth) {
    VAULT_ASSIGN_OR_RETURN(auto key, Key(dir));
    budget_->depths[key] = depth;
    return absl::OkStatus();
  }
  // `name` in `parent` was made by this layer (an opaque marker keeps it).
  absl::Status Created(int parent, const std::string& name) {
    VAULT_ASSIGN_OR_RETURN(auto key, Key(parent));
    created_[key].insert(name);
    return absl::OkStatus();
  }
  absl::Status Charge(absl::string_view path, uint64_t size) {
    if (size > budget_->limits().max_bytes - budget_->bytes) {
      return absl::ResourceExhaustedError(
          absl::StrCat("layer entry \"", Printable(path), "\" of ", size,
                       " bytes takes the image past ", budget_->limits().max_bytes,
                       " bytes of files (containers.max_image_bytes in the vault's config)"));
    }
    budget_->bytes += size;
    return absl::OkStatus();
  }

  absl::Status Directory(absl::string_view path, int parent, const std::string& name, mode_t mode) {
    struct stat st;
    if (fstatat(parent, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISDIR(st.st_mode)) {
      VAULT_RETURN_IF_ERROR(RemoveAt(parent, name));
    }
    VAULT_ASSIGN_OR_RETURN(uint32_t depth, DepthOf(path, parent));
    if (mkdirat(parent, name.c_str(), 0700) != 0 && errno != EEXIST) {
      return PosixError(errno, absl::StrCat("mkdir ", Printable(path)));
    }
    UniqueFd dir(openat(parent, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!dir.valid()) return PosixError(errno, absl::StrCat("open ", Printable(path)));
    VAULT_RETURN_IF_ERROR(RecordDepth(dir.get(), depth + 1));
    if (fchmod(dir.get(), mode) != 0) {
      return PosixError(errno, absl::StrCat("chmod ", Printable(path)));
    }
    return absl::OkStatus();
  }

  absl::Status RegularFile(absl::string_view path, archive_entry* e, int parent,
                           const std::string& name, mode_t mode) {
    const la_int64_t declared = archive_entry_size(e);
    if (declared < 0) return Refused(path, "a negative size");
    const uint64_t size = static_cast<uint64_t>(declared);
    VAULT_RETURN_IF_ERROR(Charge(path, size));
    VAULT_RETURN_IF_ERROR(RemoveAt(parent, name));
    UniqueFd fd(
        openat(parent, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!fd.valid()) return PosixError(errno, absl::StrCat("create ", Printable(path)));
    const void* block = nullptr;
    size_t len = 0;
    la_int64_t offset = 0;
    for (;;) {
      const int r = archive_read_data_block(a_, &block, &len, &offset);
      if (r == ARCHIVE_EOF) break;
      if (r != ARCHIVE_OK && r != ARCHIVE_WARN) {
        return Refused(path,
                       absl::StrCat("its content cannot be read (", archive_error_string(a_), ")"));
      }
      if (offset < 0 || static_cast<uint64_t>(offset) + len > size) {
        return Refused(path, "content past its declared size");
      }
      const char* p = static_cast<const char*>(block);
      while (len > 0) {
        const ssize_t n = pwrite(fd.get(), p, len, offset);
        if (n < 0) {
          if (errno == EINTR) continue;
          return PosixError(errno, absl::StrCat("write ", Printable(path)));
        }
        p += n;
        len -= static_cast<size_t>(n);
        offset += n;
      }
      VAULT_RETURN_IF_ERROR(CheckTarBytes());
    }
    if (ftruncate(fd.get(), static_cast<off_t>(size)) != 0) {
      return PosixError(errno, absl::StrCat("truncate ", Printable(path)));
    }
    if (fchmod(fd.get(), mode) != 0) {
      return PosixError(errno, absl::StrCat("chmod ", Printable(path)));
    }
    report_->bytes += size;
    return absl::OkStatus();
  }

  absl::Status HardLink(absl::string_view path, int parent, const std::string& name,
                        const char* target) {
    VAULT_ASSIGN_OR_RETURN(std::vector<std::string> parts, Components(target));
    if (parts.empty()) return Refused(path, "a hard link to the root");
    absl::StatusOr<UniqueFd> to =
        OpenInRoot(root_fd_, absl::StrJoin(parts, "/"), O_PATH | O_NOFOLLOW);
    if (!to.ok()) {
      return Refused(path, absl::StrCat("a hard link to \"", Printable(target),
                                        "\", which the layers do not hold"));
    }
    struct stat st;
    if (fstat(to->get(), &st) != 0) return PosixError(errno, "stat a link target");
    if (S_ISDIR(st.st_mode)) return Refused(path, "a hard link to a directory");
    struct stat here;
    if (fstatat(parent, name.c_str(), &here, AT_SYMLINK_NOFOLLOW) == 0 &&
        here.st_dev == st.st_dev && here.st_ino == st.st_ino) {
      return absl::OkStatus();  // a link to itself
    }
    VAULT_RETURN_IF_ERROR(RemoveAt(parent, name));
    if (linkat(to->get(), "", parent, name.c_str(), AT_EMPTY_PATH) != 0) {
      return PosixError(errno, absl::StrCat("link ", Printable(path)));
    }
    ++report_->hardlinks;
    return absl::OkStatus();
  }

  // `.wh..wh..opq`: the directory keeps only what this layer put in it. Once per folder.
  absl::Status Opaque(absl::string_view path, const std::string& dir_rel) {
    absl::StatusOr<UniqueFd> dir = OpenInRoot(root_fd_, dir_rel, O_RDONLY | O_DIRECTORY);
    if (!dir.ok()) {
      if (absl::IsNotFound(dir.status())) return absl::OkStatus();
      return Refused(path, absl::StrCat("an opaque marker in a directory that cannot be opened (",
                                        dir.status().message(), ")"));
    }
    VAULT_ASSIGN_OR_RETURN(auto key, Key(dir->get()));
    if (!opaque_.insert(key).second) return Refused(path, "a second opaque marker in its folder");
    ++report_->whiteouts;
    auto it = created_.find(key);
    static const absl::flat_hash_set<std::string>* const kNone =
        new absl::flat_hash_set<std::string>();
    return RemoveChildren(dir->get(), it == created_.end() ? kNone : &it->second);
  }

  absl::Status CheckTarBytes() {
    const la_int64_t read = archive_filter_bytes(a_, 0);
    const UnpackLimits& l = budget_->limits();
    const uint64_t allowed = l.max_bytes + l.max_tar_bytes_per_entry * (budget_->entries + 1);
    if (read > 0 && budget_->tar_bytes + static_cast<uint64_t>(read) > allowed) {
      return absl::ResourceExhaustedError(
          absl::StrCat("the image's layers unpack to more than ", allowed,
                       " bytes of tar for their files and entries (a decompression bomb?); "
                       "containers.max_image_bytes in the vault's config bounds it"));
    }
    return absl::OkStatus();
  }

 public:
  absl::Status CheckLimits() {
    if (budget_->entries > budget_->limits().max_entries) {
      return absl::ResourceExhaustedError(
          absl::StrCat("the image's layers hold more than ", budget_->limits().max_entries,
                       " entries (containers.max_image_entries in the vault's config)"));
    }
    return CheckTarBytes();
  }

  void Finish() {
    const la_int64_t read = archive_filter_bytes(a_, 0);
    if (read > 0) budget_->tar_bytes += static_cast<uint64_t>(read);
  }

 private:
  archive* const a_;
  const int root_fd_;
  UnpackBudget* const budget_;
  UnpackReport* const report_;
  // What this layer made, by folder (device, inode), for opaque markers; the folders made opaque.
  absl::flat_hash_map<std::pair<uint64_t, uint64_t>, absl::flat_hash_set<std::string>> created_;
  absl::flat_hash_set<std::pair<uint64_t, uint64_t>> opaque_;
};

}  // namespace

absl::StatusOr<Compression> CompressionOf(absl::string_view media_type) {
  if (media_type == "application/vnd.oci.image.layer.v1.tar" ||
      media_type == "application/vnd.docker.image.rootfs.diff.tar") {
    return Compression::kNone;
  }
  if (media_type == "application/vnd.oci.image.layer.v1.tar+gzip" ||
      media_type == "application/vnd.docker.image.rootfs.diff.tar.gzip") {
    return Compression::kGzip;
  }
  if (media_type == "application/vnd.oci.image.layer.v1.tar+zstd") return Compression::kZstd;
  return absl::InvalidArgumentError(
      absl::StrCat("layer media type \"", Printable(media_type),
                   "\" is not one this vault unpacks (OCI or Docker tar, plain, gzip or zstd)"));
}

absl::Status PrepareMountPoints(int root_fd) {
  struct stat st;
  if (fstatat(root_fd, ".vault", &st, AT_SYMLINK_NOFOLLOW) == 0) {
    return absl::InvalidArgumentError(
        "the image has /.vault, a name the vault keeps for its own files in containers");
  }
  for (const char* dir : {"proc", "dev", "sys", "work", "tmp", ".vault"}) {
    if (fstatat(root_fd, dir, &st, AT_SYMLINK_NOFOLLOW) == 0) {
      if (!S_ISDIR(st.st_mode)) {
        return absl::InvalidArgumentError(
            absl::StrCat("the image's /", dir,
                         " is not a folder: container agents mount the runtime's own there"));
      }
      continue;
    }
    if (errno != ENOENT) return PosixError(errno, absl::StrCat("stat /", dir));
    const mode_t mode = 0755;  // (/tmp too: the container's own is mounted over it)
    if (mkdirat(root_fd, dir, mode) != 0) return PosixError(errno, absl::StrCat("mkdir /", dir));
    if (fchmodat(root_fd, dir, mode, 0) != 0) {
      return PosixError(errno, absl::StrCat("chmod /", dir));
    }
  }
  UniqueFd init(
      openat(root_fd, ".vault/init", O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0755));
  if (!init.valid()) return PosixError(errno, "create /.vault/init");
  if (fchmod(init.get(), 0755) != 0) return PosixError(errno, "chmod /.vault/init");
  return absl::OkStatus();
}

absl::Status ApplyLayer(const ByteSource& source, Compression compression, int root_fd,
                        UnpackBudget* budget, UnpackReport* report) {
  std::unique_ptr<archive, ArchiveFree> a(archive_read_new());
  if (a == nullptr) return absl::ResourceExhaustedError("archive_read_new");
  archive_read_support_format_tar(a.get());
  int filter = ARCHIVE_FILTER_NONE;
  if (compression == Compression::kGzip) {
    archive_read_support_filter_gzip(a.get());
    filter = ARCHIVE_FILTER_GZIP;
  } else if (compression == Compression::kZstd) {
    archive_read_support_filter_zstd(a.get());
    filter = ARCHIVE_FILTER_ZSTD;
  }
  Reader reader{&source, absl::OkStatus()};
  auto source_error = [&](absl::string_view what) -> absl::Status {
    if (!reader.status.ok()) return reader.status;
    return absl::InvalidArgumentError(
        absl::StrCat("the layer is not a ",
                     compression == Compression::kNone   ? "tar"
                     : compression == Compression::kGzip ? "gzip-compressed tar"
                                                         : "zstd-compressed tar",
                     ": ", what, ": ", archive_error_string(a.get())));
  };
  if (archive_read_open(a.get(), &reader, nullptr, ReadCallback, nullptr) != ARCHIVE_OK) {
    return source_error("cannot open it");
  }
  LayerWriter writer(a.get(), root_fd, budget, report);
  bool checked_filter = false;
  for (;;) {
    archive_entry* e = nullptr;
    const int r = archive_read_next_header(a.get(), &e);
    if (r == ARCHIVE_EOF) break;
    if (r != ARCHIVE_OK && r != ARCHIVE_WARN) return source_error("a header cannot be read");
    if (!checked_filter) {
      // Never an external program: libarchive decompresses in process or not at all.
      if (archive_filter_count(a.get()) > 2 || archive_filter_code(a.get(), 0) != filter) {
        return absl::InvalidArgumentError(absl::StrCat("the layer's compression (",
                                                       archive_filter_name(a.get(), 0),
                                                       ") is not the one its media type names"));
      }
      checked_filter = true;
    }
    ++budget->entries;
    if (budget->keep_going) VAULT_RETURN_IF_ERROR(budget->keep_going());
    VAULT_RETURN_IF_ERROR(writer.CheckLimits());
    VAULT_RETURN_IF_ERROR(writer.Apply(e));
  }
  writer.Finish();
  return absl::OkStatus();
}

}  // namespace vault::image
