#include "agent/storage_quota.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace vault::agent {

void StorageQuota::Add(const std::string& principal, uint64_t bytes) {
  absl::MutexLock lock(&mu_);
  used_[principal] += bytes;
}

absl::Status StorageQuota::Charge(const std::string& principal, uint64_t bytes) {
  const uint64_t quota = quota_of_(principal);
  absl::MutexLock lock(&mu_);
  uint64_t& used = used_[principal];
  if (quota != 0 && (bytes > quota || used > quota - bytes)) {
    return absl::ResourceExhaustedError(
        absl::StrCat("principal ", principal, " has written ", used, " of its ", quota,
                     " bytes here (its storage quota); this write needs ", bytes));
  }
  used += bytes;
  return absl::OkStatus();
}

void StorageQuota::Refund(const std::string& principal, uint64_t bytes) {
  absl::MutexLock lock(&mu_);
  uint64_t& used = used_[principal];
  used -= std::min(used, bytes);
}

uint64_t StorageQuota::Used(const std::string& principal) {
  absl::MutexLock lock(&mu_);
  auto it = used_.find(principal);
  return it == used_.end() ? 0 : it->second;
}

}  // namespace vault::agent
