#include "sandbox/host_ids.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"

namespace vault::sandbox {

HostIdPool::~HostIdPool() {
  absl::MutexLock lock(&mu_);
  for (const auto& [slot, fd] : used_) {
    if (fd >= 0) close(fd);
  }
}

int HostIdPool::Claim() {
  absl::MutexLock lock(&mu_);
  for (uint32_t tries = 0; tries < count_; ++tries) {
    const int slot = static_cast<int>(next_);
    next_ = (next_ + 1) % count_;
    if (used_.contains(slot)) continue;
    int lock_fd = -1;
    if (!lock_dir_.empty()) {
      const std::string path = absl::StrCat(lock_dir_, "/", base_ + static_cast<uint32_t>(slot));
      lock_fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
      if (lock_fd < 0) continue;
      if (flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
        close(lock_fd);
        continue;  // another process's live sandbox has this id
      }
    }
    used_[slot] = lock_fd;
    return slot;
  }
  return -1;
}

void HostIdPool::Release(int slot) {
  if (slot < 0) return;
  absl::MutexLock lock(&mu_);
  auto it = used_.find(slot);
  if (it == used_.end()) return;
  if (it->second >= 0) close(it->second);
  used_.erase(it);
}

}  // namespace vault::sandbox
