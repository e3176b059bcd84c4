// node: the audit mirrors — one thread per peer member that keeps this vault's verified copy of
// that member's audit log (audit::Mirror) up to date over mutual TLS, every
// audit.mirror_interval_ms, each call with a deadline of audit.mirror_rpc_timeout_ms. A fork (or
// an invalid log) is written to this vault's own log as a high-priority entry.
//
//   VAULT_ASSIGN_OR_RETURN(auto follower, AuditFollower::Start(config, db, &auditor));
//   const audit::Mirror* m = follower->Find("vault-b");
//
// Thread-safety: Find/Statuses from any thread; Stop from one.
#ifndef VAULT_NODE_AUDIT_FOLLOWER_H_
#define VAULT_NODE_AUDIT_FOLLOWER_H_

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "audit/mirror.h"
#include "node/auditor.h"
#include "storage/database.h"
#include "vault/v1/audit.pb.h"
#include "vault/v1/config.pb.h"

namespace vault::node {

class AuditFollower {
 public:
  // Loads every peer's mirror; starts following them only when the vault has a TCP listener and
  // TLS material (without them no peer can be reached, and mirrors are only served as held).
  static absl::StatusOr<std::unique_ptr<AuditFollower>> Start(const vault::v1::VaultConfig& config,
                                                              const storage::Database* db,
                                                              Auditor* auditor);
  AuditFollower(const AuditFollower&) = delete;
  AuditFollower& operator=(const AuditFollower&) = delete;
  ~AuditFollower();

  // The mirror of member `peer`, or nullptr.
  const audit::Mirror* Find(const std::string& peer) const;
  std::vector<vault::v1::MirrorStatus> Statuses() const;
  // Stops the threads (a sync in progress finishes its current call). Idempotent.
  void Stop();

 private:
  struct Peer;
  AuditFollower() = default;
  void Run(Peer* peer);

  vault::v1::VaultConfig config_;
  Auditor* auditor_ = nullptr;
  std::vector<std::unique_ptr<Peer>> peers_;
  absl::Notification stop_;
  std::vector<std::thread> threads_;
};

}  // namespace vault::node

#endif  // VAULT_NODE_AUDIT_FOLLOWER_H_
