#include "common/env.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/unique_fd.h"

namespace vault::common {
namespace {

class PosixFile : public EnvFile {
 public:
  explicit PosixFile(UniqueFd fd) : fd_(std::move(fd)) {}

  int WriteAt(uint64_t offset, std::vector<iovec> iov) override {
    // pwritev takes at most IOV_MAX pieces and may write fewer bytes than asked: go on from
    // wherever it stopped.
    size_t first = 0;
    uint64_t written = 0;
    while (first < iov.size() && iov[first].iov_len == 0) ++first;  // nothing to write
    while (first < iov.size()) {
      const int count = static_cast<int>(std::min<size_t>(iov.size() - first, IOV_MAX));
      ssize_t n = pwritev(fd_.get(), &iov[first], count, static_cast<off_t>(offset + written));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return n < 0 ? errno : EIO;
      written += static_cast<uint64_t>(n);
      size_t left = static_cast<size_t>(n);
      while (first < iov.size() && left >= iov[first].iov_len) left -= iov[first++].iov_len;
      if (left > 0) {
        iov[first].iov_base = static_cast<char*>(iov[first].iov_base) + left;
        iov[first].iov_len -= left;
      }
    }
    return 0;
  }

  ssize_t ReadAt(uint64_t offset, char* out, size_t n) override {
    for (;;) {
      ssize_t got = pread(fd_.get(), out, n, static_cast<off_t>(offset));
      if (got < 0 && errno == EINTR) continue;
      return got < 0 ? -errno : got;
    }
  }

  int Sync() override { return fdatasync(fd_.get()) == 0 ? 0 : errno; }
  int FullSync() override { return fsync(fd_.get()) == 0 ? 0 : errno; }
  int Close() override { return fd_.Close() == 0 ? 0 : errno; }

  int PunchHole(uint64_t offset, uint64_t length) override {
    return fallocate(fd_.get(), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                     static_cast<off_t>(offset), static_cast<off_t>(length)) == 0
               ? 0
               : errno;
  }

  int Chmod(mode_t mode) override { return fchmod(fd_.get(), mode) == 0 ? 0 : errno; }

 private:
  UniqueFd fd_;
};

class PosixEnv : public Env {
 public:
  std::unique_ptr<EnvFile> Open(const std::string& path, OpenMode open_mode, bool direct, int* err,
                                mode_t mode) override {
    int flags = O_CLOEXEC | (direct ? O_DIRECT : 0);
    switch (open_mode) {
      case OpenMode::kCreateNew:
        flags |= O_RDWR | O_CREAT | O_EXCL;
        break;
      case OpenMode::kReadWrite:
        flags |= O_RDWR;
        break;
      case OpenMode::kReadOnly:
        flags |= O_RDONLY;
        break;
    }
    UniqueFd fd(open(path.c_str(), flags, mode));
    if (!fd.valid()) {
      *err = errno;
      return nullptr;
    }
    return std::make_unique<PosixFile>(std::move(fd));
  }

  int SyncDir(const std::string& dir) override {
    UniqueFd fd(open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!fd.valid()) return errno;
    return fsync(fd.get()) == 0 ? 0 : errno;
  }

  int CreateDir(const std::string& path, mode_t mode) override {
    return mkdir(path.c_str(), mode) == 0 ? 0 : errno;
  }

  int ListDir(const std::string& dir, std::vector<std::string>* names) override {
    DIR* d = opendir(dir.c_str());
    if (d == nullptr) return errno;
    while (dirent* e = readdir(d)) {
      if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) {
        names->emplace_back(e->d_name);
      }
    }
    closedir(d);
    return 0;
  }

  int Rename(const std::string& from, const std::string& to) override {
    return rename(from.c_str(), to.c_str()) == 0 ? 0 : errno;
  }

  int Remove(const std::string& path) override { return unlink(path.c_str()) == 0 ? 0 : errno; }
};

}  // namespace

Env* Env::Default() {
  static Env* const env = new PosixEnv();
  return env;
}

}  // namespace vault::common
