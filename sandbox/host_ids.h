// sandbox/host_ids: the host uids/gids sandboxes run as, one per live sandbox, claimed within this
// process and, across processes, by an exclusive flock on a file named after the id in a lock
// folder (so two vaults of one machine, or a posix and a container sandbox, never share one).
//
//   HostIdPool ids(200000, 65536, "/run/vault-sandbox/ids");
//   int slot = ids.Claim();             // -1: every id is in use
//   uid_t uid = ids.base() + slot;
//   ids.Release(slot);
//
// Thread safety: thread-safe.
#ifndef VAULT_SANDBOX_HOST_IDS_H_
#define VAULT_SANDBOX_HOST_IDS_H_

#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"

namespace vault::sandbox {

class HostIdPool {
 public:
  // Ids base .. base + count - 1. An empty `lock_dir` claims ids within this process only.
  HostIdPool(uint32_t base, uint32_t count, std::string lock_dir)
      : base_(base), count_(count), lock_dir_(std::move(lock_dir)) {}
  ~HostIdPool();
  HostIdPool(const HostIdPool&) = delete;
  HostIdPool& operator=(const HostIdPool&) = delete;

  uint32_t base() const { return base_; }
  // A free slot (the id is base() + slot), or -1 when every id is in use.
  int Claim();
  // Gives `slot` back; -1 is ignored.
  void Release(int slot);

 private:
  const uint32_t base_;
  const uint32_t count_;
  const std::string lock_dir_;
  absl::Mutex mu_;
  absl::flat_hash_map<int, int> used_ ABSL_GUARDED_BY(mu_);  // slot -> its lock fd (-1: none)
  uint32_t next_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace vault::sandbox

#endif  // VAULT_SANDBOX_HOST_IDS_H_
