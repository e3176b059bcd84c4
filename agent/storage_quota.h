// agent/storage_quota: the bytes each principal's agents wrote on this vault (CAS puts and files,
// since the principal was first trusted here), held against the principal's storage quota.
//
//   StorageQuota quota([&](const std::string& p) { return QuotaOf(p); });
//   VAULT_RETURN_IF_ERROR(quota.Charge(principal, data.size()));   // or RESOURCE_EXHAUSTED
//   if (nothing_was_written) quota.Refund(principal, data.size());
//
// Thread-safety: thread-safe.
#ifndef VAULT_AGENT_STORAGE_QUOTA_H_
#define VAULT_AGENT_STORAGE_QUOTA_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace vault::agent {

class StorageQuota {
 public:
  // `quota_of(principal)`: its quota in bytes, 0 for none. Called without the quota's lock held.
  explicit StorageQuota(std::function<uint64_t(const std::string&)> quota_of)
      : quota_of_(std::move(quota_of)) {}

  // What the principal's agents wrote before (from their records, at start).
  void Add(const std::string& principal, uint64_t bytes);
  // Reserves `bytes`, or RESOURCE_EXHAUSTED naming what was used of what quota.
  absl::Status Charge(const std::string& principal, uint64_t bytes);
  // Gives back a reservation that wrote nothing (never below zero).
  void Refund(const std::string& principal, uint64_t bytes);
  uint64_t Used(const std::string& principal);

 private:
  const std::function<uint64_t(const std::string&)> quota_of_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, uint64_t> used_ ABSL_GUARDED_BY(mu_);
};

}  // namespace vault::agent

#endif  // VAULT_AGENT_STORAGE_QUOTA_H_
