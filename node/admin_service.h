// node: the gRPC `Admin` service, served only on the vault's Unix socket.
//
// Replicate pushes objects to a member (replication::Pusher) and Reconcile runs anti-entropy with
// one (replication::Reconciler), each on a thread of its own, streaming progress to the caller;
// cancelling the call stops the work. Both are audited: "replication.push" or
// "replication.reconcile" when they start and when they end, and one DENIED entry per refused
// object (up to 16 per call; the rest share one entry).
//
// Thread-safety: thread-safe; the store, auditor and member channels must outlive the service.
#ifndef VAULT_NODE_ADMIN_SERVICE_H_
#define VAULT_NODE_ADMIN_SERVICE_H_

#include <string>

#include "cas/store.h"
#include "node/auditor.h"
#include "replication/member_channels.h"
#include "vault/v1/admin.grpc.pb.h"
#include "vault/v1/config.pb.h"

namespace vault::node {

inline constexpr char kVersion[] = "0.1.0";

class AdminService final : public vault::v1::Admin::CallbackService {
 public:
  // What the agents' sandbox can do here, probed once at start.
  struct SandboxState {
    std::string fences;
    bool agents_enabled = false;
    std::string disabled_reason;
  };
  // `members` may be null (a vault without TLS material cannot reach members).
  AdminService(const vault::v1::VaultConfig& config, std::string public_key,
               std::string bound_listen_address, cas::Store* store, SandboxState sandbox,
               Auditor* auditor, replication::MemberChannels* members)
      : config_(config),
        public_key_(std::move(public_key)),
        listen_(std::move(bound_listen_address)),
        store_(store),
        sandbox_(std::move(sandbox)),
        started_unix_ms_(absl::ToUnixMillis(absl::Now())),
        auditor_(auditor),
        members_(members) {}

  grpc::ServerUnaryReactor* Status(grpc::CallbackServerContext* ctx,
                                   const vault::v1::StatusRequest* req,
                                   vault::v1::StatusResponse* resp) override;
  grpc::ServerWriteReactor<vault::v1::ReplicationProgress>* Replicate(
      grpc::CallbackServerContext* ctx, const vault::v1::ReplicateRequest* req) override;
  grpc::ServerWriteReactor<vault::v1::ReplicationProgress>* Reconcile(
      grpc::CallbackServerContext* ctx, const vault::v1::ReconcileRequest* req) override;

 private:
  const vault::v1::VaultConfig config_;
  const std::string public_key_;
  const std::string listen_;
  cas::Store* const store_;
  const SandboxState sandbox_;
  const int64_t started_unix_ms_;
  Auditor* const auditor_;
  replication::MemberChannels* const members_;
};

}  // namespace vault::node

#endif  // VAULT_NODE_ADMIN_SERVICE_H_
