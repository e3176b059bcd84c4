#include "cas/pack.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/container/flat_hash_set.h"
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

absl::StatusOr<std::unique_ptr<PackStore>> PackStore::Open(const PackOptions& options) {
  if (options.dir.empty()) return absl::InvalidArgumentError("pack directory is empty");
  std::unique_ptr<PackStore> store(new PackStore(options));
  common::Env* env = store->env_;
  if (int err = env->CreateDir(options.dir, 0700); err != 0 && err != EEXIST) {
    return ErrnoStatus(err, absl::StrCat("create pack directory ", options.dir));
  }
  std::vector<std::string> names;
  if (int err = env->ListDir(options.dir, &names); err != 0) {
    return ErrnoStatus(err, absl::StrCat("open pack directory ", options.dir));
  }
  uint64_t next = 1;
  for (const std::string& entry : names) {
    absl::string_view name(entry);
    uint64_t id = 0;
    if (absl::ConsumePrefix(&name, kPrefix) && name.size() == 16 &&
        absl::SimpleHexAtoi(name, &id) && id >= next) {
      next = id + 1;
    }
  }
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
  int err = 0;
  auto file = std::make_shared<File>();
  file->id = id;
  file->file = env_->Open(path, common::OpenMode::kCreateNew, /*direct=*/false, &err, 0600);
  if (file->file == nullptr) return ErrnoStatus(err, absl::StrCat("create pack file ", path));
  if (options_.direct_writes && direct_ok_.load(std::memory_order_relaxed)) {
    // EINVAL where the file system has no O_DIRECT: AppendUncached then writes through `file`,
    // and no longer aligns (its padding would only leave holes).
    file->direct = env_->Open(path, common::OpenMode::kReadWrite, /*direct=*/true, &err);
    if (file->direct == nullptr) direct_ok_.store(false, std::memory_order_relaxed);
  }
  // The new name must survive a crash before anything in it is referenced. Rare (one file per
  // file_bytes written), so done here, under the lock.
  if (options_.sync) {
    if (int e = env_->SyncDir(options_.dir); e != 0) {
      env_->Remove(path);
      return ErrnoStatus(e, absl::StrCat("fsync ", options_.dir));
    }
  }
  current_ = file;
  written_[id] = file;
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

absl::StatusOr<std::pair<std::shared_ptr<PackStore::File>, uint64_t>> PackStore::Reserve(
    uint64_t bytes, uint64_t align) {
  auto round_up = [align](uint64_t v) { return (v + align - 1) / align * align; };
  absl::MutexLock lock(&mu_);
  if (!failed_.ok()) return failed_;
  if (current_ == nullptr || (tail_ > 0 && round_up(tail_) + bytes > options_.file_bytes)) {
    if (absl::Status s = NewFileLocked(); !s.ok()) return s;
  }
  const uint64_t offset = round_up(tail_);
  tail_ = round_up(offset + bytes);
  return std::make_pair(current_, offset);
}

uint64_t PackStore::Completed(const std::shared_ptr<File>& file) {
  absl::MutexLock lock(&mu_);
  if (!file->dirty) {
    file->dirty = true;
    dirty_.push_back(file);
  }
  return ++completed_;
}

absl::StatusOr<std::vector<PackRef>> PackStore::AppendMany(
    absl::Span<const absl::string_view> values, uint64_t* ticket) {
  uint64_t total = 0;
  for (absl::string_view v : values) total += v.size();
  VAULT_ASSIGN_OR_RETURN(auto reserved, Reserve(total, 1));
  const auto& [file, offset] = reserved;
  file->leases.fetch_add(static_cast<int64_t>(values.size()));
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
  if (int err = file->file->WriteAt(offset, std::move(iov)); err != 0) {
    file->leases.fetch_sub(static_cast<int64_t>(values.size()));
    return ErrnoStatus(err, absl::StrCat("write pack file ", PathOf(file->id)));
  }
  *ticket = Completed(file);
  return refs;
}

AlignedBuffer::~AlignedBuffer() { std::free(data_); }

char* AlignedBuffer::Get(size_t bytes) {
  if (bytes > capacity_) {
    std::free(data_);
    const size_t rounded = (bytes + kDirectAlignment - 1) / kDirectAlignment * kDirectAlignment;
    data_ = static_cast<char*>(std::aligned_alloc(kDirectAlignment, rounded));
    capacity_ = data_ != nullptr ? rounded : 0;
  }
  return data_;
}

absl::StatusOr<PackRef> PackStore::AppendUncached(absl::string_view bytes, uint64_t* ticket) {
  const uint64_t padded =
      (bytes.size() + kDirectAlignment - 1) / kDirectAlignment * kDirectAlignment;
  const bool aligned = options_.direct_writes && direct_ok_.load(std::memory_order_relaxed);
  VAULT_ASSIGN_OR_RETURN(auto reserved, Reserve(bytes.size(), aligned ? kDirectAlignment : 1));
  const auto& [file, offset] = reserved;
  file->leases.fetch_add(1);
  const PackRef ref{
      .file = file->id, .offset = offset, .size = static_cast<uint32_t>(bytes.size())};
  int err = EINVAL;
  if (aligned && file->direct != nullptr && offset % kDirectAlignment == 0 && !bytes.empty()) {
    thread_local AlignedBuffer buffer;  // one per writing thread, kept
    // Values of more than 64 MiB (none: chunks are at most 4 x 4 MiB) would not be kept.
    char* buf = padded <= (uint64_t{64} << 20) ? buffer.Get(padded) : nullptr;
    if (buf != nullptr) {
      std::memcpy(buf, bytes.data(), bytes.size());
      std::memset(buf + bytes.size(), 0, padded - bytes.size());
      err = file->direct->WriteAt(offset, {iovec{buf, padded}});
      if (err == EINVAL) direct_ok_.store(false, std::memory_order_relaxed);
      if (err == 0) direct_appends_.fetch_add(1, std::memory_order_relaxed);
    }
  }
  // Not written directly: an ordinary write of the same range (the padding stays a hole).
  if (err == EINVAL) {
    err = bytes.empty()
              ? 0
              : file->file->WriteAt(offset, {iovec{const_cast<char*>(bytes.data()), bytes.size()}});
  }
  if (err != 0) {
    file->leases.fetch_sub(1);
    return ErrnoStatus(err, absl::StrCat("write pack file ", PathOf(file->id)));
  }
  *ticket = Completed(file);
  return ref;
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
      if (int err = f->file->Sync(); err != 0) {
        absl::Status s = ErrnoStatus(err, absl::StrCat("fdatasync pack file ", PathOf(f->id)));
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
    if (auto r = retired_.find(id); r != retired_.end()) return r->second.file;
  }
  const std::string path = PathOf(id);
  int err = 0;
  auto file = std::make_shared<File>();
  file->id = id;
  file->file = env_->Open(path, common::OpenMode::kReadOnly, /*direct=*/false, &err);
  if (file->file == nullptr) {
    if (err == ENOENT) {
      return absl::DataLossError(absl::StrCat("pack file ", path, " is missing"));
    }
    return ErrnoStatus(err, absl::StrCat("open pack file ", path));
  }
  if (options_.direct_writes) {  // null: not offered
    file->direct = env_->Open(path, common::OpenMode::kReadOnly, /*direct=*/true, &err);
  }
  absl::MutexLock lock(&mu_);
  // Retired meanwhile: the retired entry is the one to use (and to close in time).
  if (auto r = retired_.find(id); r != retired_.end()) return r->second.file;
  if (readers_.size() >= kMaxReaders) readers_.clear();
  auto [it, inserted] = readers_.emplace(id, file);
  return it->second;
}

absl::StatusOr<std::vector<PackStore::FileInfo>> PackStore::ListFiles() const {
  std::vector<std::string> names;
  if (int err = env_->ListDir(options_.dir, &names); err != 0) {
    return ErrnoStatus(err, absl::StrCat("list pack directory ", options_.dir));
  }
  uint64_t appending = 0;
  absl::flat_hash_set<uint64_t> retired;
  {
    absl::MutexLock lock(&mu_);
    if (current_ != nullptr) appending = current_->id;
    for (const auto& [id, r] : retired_) retired.insert(id);
  }
  std::vector<FileInfo> out;
  for (const std::string& entry : names) {
    absl::string_view name(entry);
    uint64_t id = 0;
    if (!absl::ConsumePrefix(&name, kPrefix) || name.size() != 16 ||
        !absl::SimpleHexAtoi(name, &id) || retired.contains(id)) {
      continue;
    }
    std::error_code ec;
    const uintmax_t bytes = std::filesystem::file_size(PathOf(id), ec);
    out.push_back(FileInfo{.id = id, .bytes = ec ? 0 : bytes, .appending = id == appending});
  }
  std::sort(out.begin(), out.end(),
            [](const FileInfo& a, const FileInfo& b) { return a.id < b.id; });
  return out;
}

absl::Status PackStore::Retire(uint64_t id) {
  {
    absl::MutexLock lock(&mu_);
    if (current_ != nullptr && current_->id == id) {
      return absl::FailedPreconditionError(
          absl::StrCat("pack file ", PathOf(id), " is being appended to"));
    }
  }
  // Opened first, so that reads through a ref read before the move still find it.
  VAULT_ASSIGN_OR_RETURN(std::shared_ptr<File> file, OpenForRead(id));
  {
    absl::MutexLock lock(&mu_);
    retired_[id] = Retired{file, absl::Now()};
    readers_.erase(id);
  }
  if (int err = env_->Remove(PathOf(id)); err != 0 && err != ENOENT) {
    absl::MutexLock lock(&mu_);
    retired_.erase(id);
    return ErrnoStatus(err, absl::StrCat("remove pack file ", PathOf(id)));
  }
  return absl::OkStatus();
}

void PackStore::Release(absl::Span<const PackRef> refs) {
  absl::MutexLock lock(&mu_);
  for (const PackRef& r : refs) {
    if (auto it = written_.find(r.file); it != written_.end()) it->second->leases.fetch_sub(1);
  }
}

bool PackStore::Leased(uint64_t id) const {
  absl::MutexLock lock(&mu_);
  auto it = written_.find(id);
  return it != written_.end() && it->second->leases.load() > 0;
}

void PackStore::Seal() {
  absl::MutexLock lock(&mu_);
  if (current_ != nullptr && tail_ > 0) current_.reset();
}

void PackStore::ReleaseRetired(absl::Time before) {
  std::vector<std::shared_ptr<File>> closing;  // closed outside the lock
  absl::MutexLock lock(&mu_);
  for (auto it = retired_.begin(); it != retired_.end();) {
    if (it->second.at < before) {
      closing.push_back(std::move(it->second.file));
      retired_.erase(it++);
    } else {
      ++it;
    }
  }
}

absl::Status PackStore::Discard(const PackRef& ref) {
  if (ref.size == 0) return absl::OkStatus();
  const std::string path = PathOf(ref.file);
  int err = 0;
  std::unique_ptr<common::EnvFile> f =
      env_->Open(path, common::OpenMode::kReadWrite, /*direct=*/false, &err);
  if (f == nullptr) return ErrnoStatus(err, absl::StrCat("open pack file ", path));
  err = f->PunchHole(ref.offset, ref.size);
  if (err == 0) return absl::OkStatus();
  if (err == EOPNOTSUPP) {
    return absl::UnimplementedError(absl::StrCat("the file system of ", path, " has no holes"));
  }
  return ErrnoStatus(err, absl::StrCat("punch a hole in pack file ", path));
}

absl::StatusOr<std::string> PackStore::Read(const PackRef& ref) const {
  absl::StatusOr<std::shared_ptr<File>> file = OpenForRead(ref.file);
  if (!file.ok()) return file.status();
  std::string out(ref.size, '\0');
  size_t done = 0;
  while (done < out.size()) {
    ssize_t n = (*file)->file->ReadAt(ref.offset + done, out.data() + done, out.size() - done);
    if (n < 0)
      return ErrnoStatus(static_cast<int>(-n), absl::StrCat("read pack file ", PathOf(ref.file)));
    if (n == 0) {
      return absl::DataLossError(absl::StrCat("pack file ", PathOf(ref.file), " ends before ",
                                              ref.offset + ref.size, " bytes (truncated)"));
    }
    done += static_cast<size_t>(n);
  }
  return out;
}

absl::StatusOr<absl::string_view> PackStore::ReadUncached(const PackRef& ref,
                                                          AlignedBuffer* buffer) const {
  absl::StatusOr<std::shared_ptr<File>> file = OpenForRead(ref.file);
  if (!file.ok()) return file.status();
  const uint64_t from = ref.offset / kDirectAlignment * kDirectAlignment;
  const uint64_t end = ref.offset + ref.size;  // what must be read
  const uint64_t to = (end + kDirectAlignment - 1) / kDirectAlignment * kDirectAlignment;
  char* buf = buffer->Get(static_cast<size_t>(to - from));
  if (buf == nullptr) return absl::ResourceExhaustedError("no memory for a pack read");
  auto truncated = [&] {
    return absl::DataLossError(
        absl::StrCat("pack file ", PathOf(ref.file), " ends before ", end, " bytes (truncated)"));
  };
  if ((*file)->direct != nullptr && direct_reads_ok_.load(std::memory_order_relaxed)) {
    uint64_t done = 0;
    int err = 0;
    while (from + done < end) {
      ssize_t n =
          (*file)->direct->ReadAt(from + done, buf + done, static_cast<size_t>(to - from - done));
      if (n < 0) {
        err = static_cast<int>(-n);
        break;
      }
      if (n == 0) return truncated();
      done += static_cast<uint64_t>(n);
      // A short read ends at the end of the file, past which an aligned read cannot go on.
      if (from + done < end && done % kDirectAlignment != 0) return truncated();
    }
    if (err == 0) return absl::string_view(buf + (ref.offset - from), ref.size);
    if (err != EINVAL) {
      return ErrnoStatus(err, absl::StrCat("read pack file ", PathOf(ref.file)));
    }
    direct_reads_ok_.store(false, std::memory_order_relaxed);  // ordinary reads from now on
  }
  uint64_t done = 0;
  while (done < ref.size) {
    ssize_t n = (*file)->file->ReadAt(ref.offset + done, buf + done, ref.size - done);
    if (n < 0)
      return ErrnoStatus(static_cast<int>(-n), absl::StrCat("read pack file ", PathOf(ref.file)));
    if (n == 0) return truncated();
    done += static_cast<uint64_t>(n);
  }
  return absl::string_view(buf, ref.size);
}

}  // namespace vault::cas
