// capability/decision: the check a running agent's host call makes — "does this agent's
// authority cover this operation?" — answered once by the grant algebra and then from a
// per-agent cache, so the hot path is a hash lookup (design §5: target 100 ns).
//
//   AgentAuthority authority(verified.grants);
//   vault::v1::Grant op;  op.set_kind(vault::v1::Grant::READ);  op.set_path("/vault/pub/a");
//   if (!authority.Allows(op)) { ... deny, audit ... }
//   authority.Revoke();   // a revocation cut the chain: every later check is denied
//
// Thread-safety: thread-safe (host calls of one agent may run on several threads).
#ifndef VAULT_CAPABILITY_DECISION_H_
#define VAULT_CAPABILITY_DECISION_H_

#include <atomic>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "vault/v1/capability.pb.h"

namespace vault::capability {

class AgentAuthority {
 public:
  explicit AgentAuthority(std::vector<vault::v1::Grant> grants, size_t max_cached = 4096);

  // True when some grant covers `operation` (a grant describing exactly what the call does).
  bool Allows(const vault::v1::Grant& operation);
  // From now on every check is denied (the cache is dropped).
  void Revoke();
  bool revoked() const { return revoked_.load(std::memory_order_acquire); }
  const std::vector<vault::v1::Grant>& grants() const { return grants_; }

 private:
  const std::vector<vault::v1::Grant> grants_;
  const size_t max_cached_;
  std::atomic<bool> revoked_{false};
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, bool> cache_ ABSL_GUARDED_BY(mu_);
};

// The cache key of an operation: its kind and scope, unambiguous. Appends to `out`.
void OperationKey(const vault::v1::Grant& operation, std::string* out);

}  // namespace vault::capability

#endif  // VAULT_CAPABILITY_DECISION_H_
