// UniqueFd: owns one file descriptor and closes it when destroyed (or moved over).
//
//   common::UniqueFd fd(open(path, O_RDONLY | O_CLOEXEC));
//   if (!fd.valid()) return PosixError(errno, path);
//   read(fd.get(), ...);
//
// Thread-safety: a value type; one owner at a time.
#ifndef VAULT_COMMON_UNIQUE_FD_H_
#define VAULT_COMMON_UNIQUE_FD_H_

#include <unistd.h>

#include <utility>

namespace vault::common {

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) Reset(std::exchange(other.fd_, -1));
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { Reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  // Gives the descriptor up without closing it.
  int release() { return std::exchange(fd_, -1); }
  // Closes the descriptor held (if any) and holds `fd` instead.
  void Reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }
  // Closes now and returns close(2)'s result (0, or -1 with errno set): for writers that must
  // know their data reached the file.
  int Close() { return ::close(std::exchange(fd_, -1)); }

 private:
  int fd_ = -1;
};

}  // namespace vault::common

#endif  // VAULT_COMMON_UNIQUE_FD_H_
