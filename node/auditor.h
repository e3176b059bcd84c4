// node: how vaultd's services write to the audit log — who the caller is (the actor) and the
// entries they record. Every call that changes state is witnessed (design §4).
//
//   Auditor auditor(log, member_keys);
//   VAULT_RETURN_IF_ERROR(auditor.Record(Auditor::Entry(auditor.Actor(ctx), "cas.put", digest,
//                                                       vault::v1::AuditEntry::ALLOWED)));
//
// Thread-safety: thread-safe; the log must outlive the Auditor.
#ifndef VAULT_NODE_AUDITOR_H_
#define VAULT_NODE_AUDITOR_H_

#include <grpcpp/grpcpp.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "audit/log.h"
#include "vault/v1/audit.pb.h"
#include "vault/v1/config.pb.h"

namespace vault::node {

// The actor of calls over the admin socket: whoever can open the 0600 socket (the operator).
inline constexpr char kLocalAdminActor[] = "local-admin";

class Auditor {
 public:
  // `self_key` is this vault's signing key (ed25519:<hex>): the actor of what the vault does on
  // its own (start, stop, mirroring).
  Auditor(audit::AuditLog* log, const vault::v1::VaultConfig& config, std::string self_key);

  // The caller: a member vault's signing key (ed25519:<hex>) when the call came over mutual TLS,
  // kLocalAdminActor on the admin socket.
  std::string Actor(const grpc::ServerContextBase* ctx) const;

  static vault::v1::AuditEntry Entry(std::string actor, std::string action, std::string subject,
                                     vault::v1::AuditEntry::Decision decision,
                                     std::string motivation = "",
                                     std::vector<std::pair<std::string, std::string>> details = {});

  // Appends durably.
  absl::Status Record(vault::v1::AuditEntry entry);
  absl::Status RecordMany(std::vector<vault::v1::AuditEntry> entries);

  audit::AuditLog* log() const { return log_; }
  const std::string& self() const { return self_; }

 private:
  audit::AuditLog* const log_;
  const std::string self_;
  absl::flat_hash_map<std::string, std::string> member_keys_;  // name -> ed25519:<hex>
};

}  // namespace vault::node

#endif  // VAULT_NODE_AUDITOR_H_
