#include "cas/pack.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"
#include "storage/keys.h"

namespace vault::cas {
namespace {

constexpr absl::string_view kMagic = "VPK1";
constexpr absl::string_view kPrefix = "pack-";
// Read fds kept open at once (a pack is 256 MiB, so this covers 64 GiB without reopening).
constexpr size_t kMaxReaders = 256;

absl::Status ErrnoStatus(int err, absl::string_view what) {
  std::string msg = absl::StrCat(what, ": ", std::strerror(err));
  if (err == ENOSPC || err == EDQUOT || err == EFBIG) return absl::ResourceExhaustedError(msg);
  return absl::UnavailableError(msg);
}

absl::Status SyncDir(const std::string& dir) {
  int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, absl::StrCat("open ", dir));
  int rc = fsync(fd);
  int err = errno;
  close(fd);
  if (rc != 0) return ErrnoStatus(err, absl::StrCat("fsync ", dir));
  return absl::OkStatus();
}

}  // namespace

std::string EncodePackRef(const PackRef& ref) {
  return absl::StrCat(kMagic, storage::BigEndian64(ref.file), storage::BigEndian64(ref.offset),
                      storage::BigEndian32(ref.size));
}

std::optional<PackRef> DecodePackRef(absl::string_view value, uint64_t expected_size) {
  if (value.size() != kPackRefBytes || expected_size <= kPackRefBytes ||
      !absl::StartsWith(value, kMagic)) {
    return std::nullopt;
  }
  PackRef ref{.file = storage::ParseBigEndian64(value.substr(4, 8)),
              .offset = storage::ParseBigEndian64(value.substr(12, 8)),
              .size = static_cast<uint32_t>(storage::ParseBigEndian64(value.substr(20, 4)))};
  return ref;
}

PackStore::File::~File() {
  if (fd >= 0) close(fd);
}

absl::StatusOr<std::unique_ptr<PackStore>> PackStore::Open(const PackOptions& options) {
  if (options.dir.empty()) return absl::InvalidArgumentError("pack directory is empty");
  if (mkdir(options.dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return ErrnoStatus(errno, absl::StrCat("create pack directory ", options.dir));
  }
  std::unique_ptr<PackStore> store(new PackStore(options));
  DIR* d = opendir(options.dir.c_str());
  if (d == nullptr) return ErrnoStatus(errno, absl::StrCat("open pack directory ", options.dir));
  uint64_t next = 1;
  while (dirent* e = readdir(d)) {
    absl::string_view name(e->d_name);
    uint64_t id = 0;
    if (absl::ConsumePrefix(&name, kPrefix) && name.size() == 16 &&
        absl::SimpleHexAtoi(name, &id) && id >= next) {
      next = id + 1;
    }
  }
  closedir(d);
  absl::MutexLock lock(&store->mu_);
  store->next_id_ = next;
  return store;
}

PackStore::~PackStore() = default;

std::string PackStore::PathOf(uint64_t id) const {
  return absl::StrFormat("%s/%s%016x", options_.dir, kPrefix, id);
}

absl::Status PackStore::NewFileLocked() {
  const uint64_t id = next_id_++;
  const std::string path = PathOf(id);
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoStatus(errno, absl::StrCat("create pack file ", path));
  auto file = std::make_shared<File>();
  file->id = id;
  file->fd = fd;
  // The new name must survive a crash before anything in it is referenced. Rare (one file per
  // file_bytes written), so done here, under the lock.
  if (options_.sync) {
    if (absl::Status s = SyncDir(options_.dir); !s.ok()) {
      unlink(path.c_str());
      return s;
    }
  }
  current_ = file;
  tail_ = 0;
  if (readers_.size() >= kMaxReaders) readers_.clear();
  readers_[id] = file;
  return absl::OkStatus();
}

absl::StatusOr<PackRef> PackStore::Append(absl::string_view bytes, uint64_t* ticket) {
  VAULT_ASSIGN_OR_RETURN(std::vector<PackRef> refs,
                         AppendMany(absl::MakeConstSpan(&bytes, 1), ticket));
  return refs[0];
}

absl::StatusOr<std::vector<PackRef>> PackStore::AppendMany(
    absl::Span<const absl::string_view> values, uint64_t* ticket) {
  uint64_t total = 0;
  for (absl::string_view v : values) total += v.size();
  std::shared_ptr<File> file;
  uint64_t offset = 0;
  {
    absl::MutexLock lock(&mu_);
    if (!failed_.ok()) return failed_;
    if (current_ == nullptr || (tail_ > 0 && tail_ + total > options_.file_bytes)) {
      if (absl::Status s = NewFileLocked(); !s.ok()) return s;
    }
    file = current_;
    offset = tail_;
    tail_ += total;
  }
  std::vector<PackRef> refs;
  refs.reserve(values.size());
  std::vector<iovec> iov;
  iov.reserve(values.size());
  uint64_t at = offset;
  for (absl::string_view v : values) {
    refs.push_back(
        PackRef{.file = file->id, .offset = at, .size = static_cast<uint32_t>(v.size())});
    at += v.size();
    if (!v.empty()) iov.push_back(iovec{const_cast<char*>(v.data()), v.size()});
  }
  // pwritev takes at most IOV_MAX pieces and may write fewer bytes than asked: go on from
  // wherever it stopped.
  size_t first = 0;
  uint64_t written = 0;
  while (first < iov.size()) {
    const int count = static_cast<int>(std::min<size_t>(iov.size() - first, IOV_MAX));
    ssize_t n = pwritev(file->fd, &iov[first], count, static_cast<off_t>(offset + written));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      // The range stays a hole or garbage: nothing refers to it.
      return ErrnoStatus(n < 0 ? errno : EIO, absl::StrCat("write pack file ", PathOf(file->id)));
    }
    written += static_cast<uint64_t>(n);
    size_t left = static_cast<size_t>(n);
    while (first < iov.size() && left >= iov[first].iov_len) left -= iov[first++].iov_len;
    if (left > 0) {
      iov[first].iov_base = static_cast<char*>(iov[first].iov_base) + left;
      iov[first].iov_len -= left;
    }
  }
  absl::MutexLock lock(&mu_);
  *ticket = ++completed_;
  if (!file->dirty) {
    file->dirty = true;
    dirty_.push_back(file);
  }
  return refs;
}

absl::Status PackStore::Sync(uint64_t ticket) {
  absl::MutexLock sync_lock(&sync_mu_);
  std::vector<std::shared_ptr<File>> files;
  uint64_t target = 0;
  {
    absl::MutexLock lock(&mu_);
    if (!failed_.ok()) return failed_;
    if (synced_ >= ticket) return absl::OkStatus();
    // Every ticket <= completed_ was handed out after its write finished and its file was
    // marked dirty, so syncing the dirty files now covers them all.
    target = completed_;
    files.swap(dirty_);
    for (const std::shared_ptr<File>& f : files) f->dirty = false;
  }
  if (options_.sync) {
    for (const std::shared_ptr<File>& f : files) {
      if (fdatasync(f->fd) != 0) {
        absl::Status s = ErrnoStatus(errno, absl::StrCat("fdatasync pack file ", PathOf(f->id)));
        absl::MutexLock lock(&mu_);
        failed_ = absl::UnavailableError(
            absl::StrCat(s.message(), "; pack writes are refused until vaultd restarts"));
        return failed_;
      }
    }
  }
  synced_ = target;
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<PackStore::File>> PackStore::OpenForRead(uint64_t id) const {
  {
    absl::MutexLock lock(&mu_);
    auto it = readers_.find(id);
    if (it != readers_.end()) return it->second;
  }
  const std::string path = PathOf(id);
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) {
      return absl::DataLossError(absl::StrCat("pack file ", path, " is missing"));
    }
    return ErrnoStatus(errno, absl::StrCat("open pack file ", path));
  }
  auto file = std::make_shared<File>();
  file->id = id;
  file->fd = fd;
  absl::MutexLock lock(&mu_);
  if (readers_.size() >= kMaxReaders) readers_.clear();
  auto [it, inserted] = readers_.emplace(id, file);
  return it->second;
}

absl::StatusOr<std::string> PackStore::Read(const PackRef& ref) const {
  absl::StatusOr<std::shared_ptr<File>> file = OpenForRead(ref.file);
  if (!file.ok()) return file.status();
  std::string out(ref.size, '\0');
  size_t done = 0;
  while (done < out.size()) {
    ssize_t n = pread((*file)->fd, out.data() + done, out.size() - done,
                      static_cast<off_t>(ref.offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus(errno, absl::StrCat("read pack file ", PathOf(ref.file)));
    if (n == 0) {
      return absl::DataLossError(absl::StrCat("pack file ", PathOf(ref.file), " ends before ",
                                              ref.offset + ref.size, " bytes (truncated)"));
    }
    done += static_cast<size_t>(n);
  }
  return out;
}

}  // namespace vault::cas
