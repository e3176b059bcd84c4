// node: a running vault — its database, store and gRPC servers (vaultd's body).
//
// Two servers share one store and one audit log: the federation listener (TCP, mutual TLS,
// members only) with Cas, Audit, health and reflection; and the admin socket (Unix, 0600) with
// the same plus Admin and AuditAdmin. Start appends "vault.start" to the audit log and starts
// mirroring the peers' logs; Shutdown appends "vault.stop" and signs a final checkpoint.
//
//   VAULT_ASSIGN_OR_RETURN(auto node, node::VaultNode::Start(config));
//   ... wait for SIGTERM ...
//   node->Shutdown(absl::Milliseconds(config.server().drain_timeout_ms()));
//
// Thread-safety: Start/Shutdown from one thread; the servers are thread-safe.
#ifndef VAULT_NODE_VAULT_NODE_H_
#define VAULT_NODE_VAULT_NODE_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "agent/runtime.h"
#include "audit/log.h"
#include "capability/principal.h"
#include "cas/store.h"
#include "common/executor.h"
#include "migration/migration.h"
#include "migration/transport.h"
#include "node/admin_service.h"
#include "node/agent_service.h"
#include "node/audit_follower.h"
#include "node/audit_service.h"
#include "node/auditor.h"
#include "node/cas_admin_service.h"
#include "node/cas_lifecycle.h"
#include "node/cas_service.h"
#include "node/federation_service.h"
#include "node/image_service.h"
#include "node/message_service.h"
#include "node/metrics.h"
#include "node/migration_service.h"
#include "replication/follower.h"
#include "replication/member_channels.h"
#include "replication/scrubber.h"
#include "sandbox/container/container_sandbox.h"
#include "sandbox/posix/linux_sandbox.h"
#include "sandbox/registry.h"
#include "sandbox/scheme/scheme_sandbox.h"
#include "sandbox/wasm/wasm_sandbox.h"
#include "storage/database.h"
#include "vault/v1/config.pb.h"

namespace vault::node {

class VaultNode {
 public:
  struct StartOptions {
    // Resume no agent recorded as running (after a restore from a backup, until the operator
    // has checked with the federation which of them run elsewhere now: docs/operations.md).
    bool hold_agents = false;
  };
  // `config` must have passed FinalizeConfig.
  static absl::StatusOr<std::unique_ptr<VaultNode>> Start(const vault::v1::VaultConfig& config,
                                                          StartOptions options);
  static absl::StatusOr<std::unique_ptr<VaultNode>> Start(const vault::v1::VaultConfig& config) {
    return Start(config, StartOptions());
  }
  // Every column family of the vault's database (tests open a stopped vault's database).
  static std::vector<storage::ColumnFamilySpec> ColumnFamilies();
  VaultNode(const VaultNode&) = delete;
  VaultNode& operator=(const VaultNode&) = delete;
  ~VaultNode();

  // Stops accepting calls, lets calls in flight finish for up to `drain`, cancels the rest, and
  // closes the database. Idempotent.
  void Shutdown(absl::Duration drain);

  // The TCP address actually bound ("" without a listener); resolves port 0.
  const std::string& listen_address() const { return listen_address_; }
  const std::string& admin_socket() const { return config_.admin_socket(); }
  // The metrics listener's address, port 0 resolved ("" without one).
  const std::string& metrics_address() const { return metrics_->address(); }
  cas::Store* store() const { return store_.get(); }
  audit::AuditLog* audit_log() const { return audit_log_.get(); }
  agent::AgentRuntime* agents() const { return agents_.get(); }

 private:
  VaultNode() = default;

  // What both Federation services are made of (`executor`: the listener's work queue).
  FederationService::Deps FederationDeps(common::Executor* executor);

  vault::v1::VaultConfig config_;
  int64_t started_unix_ms_ = 0;
  bool hold_agents_ = false;
  std::string listen_address_;
  std::unique_ptr<capability::PrivateKey> key_;
  std::unique_ptr<storage::Database> db_;
  std::unique_ptr<cas::Store> store_;
  std::unique_ptr<audit::AuditLog> audit_log_;
  std::unique_ptr<Auditor> auditor_;
  // Before everything it counts (servers' interceptors, the counted sandbox): it outlives them.
  std::unique_ptr<Metrics> metrics_;
  // The posix sandbox type; null when even its base fences are missing.
  std::unique_ptr<sandbox::LinuxSandbox> sandbox_;
  std::unique_ptr<sandbox::Sandbox> counted_sandbox_;   // sandbox_, its spawns counted
  std::unique_ptr<sandbox::Sandbox> scheme_sandbox_;    // runs its runner in counted_sandbox_
  std::unique_ptr<sandbox::WasmSandbox> wasm_sandbox_;  // likewise
  std::unique_ptr<sandbox::ContainerSandbox> container_sandbox_;  // runs images_' images
  // The sandbox types agents can ask for: counted_sandbox_ as "posix", the others unavailable
  // with the reason.
  sandbox::SandboxRegistry sandbox_types_;
  AdminService::SandboxState sandbox_state_;
  std::unique_ptr<migration::GrpcTransport> transport_;  // before agents_: it outlives them
  std::unique_ptr<agent::AgentRuntime> agents_;
  std::unique_ptr<migration::Migration> migration_;  // after agents_: its port is the runtime
  std::unique_ptr<MigrationService> migration_service_;
  std::unique_ptr<MessageService> message_service_;
  std::unique_ptr<FederationService> tcp_federation_;
  std::unique_ptr<FederationService> unix_federation_;
  std::unique_ptr<AgentService> agent_service_;
  std::unique_ptr<image::ImageStore> images_;
  std::unique_ptr<common::Executor> import_executor_;  // imports, one at a time
  std::unique_ptr<ImageService> image_service_;
  std::unique_ptr<CasLifecycle> cas_lifecycle_;         // after agents_ and images_: reads them
  std::unique_ptr<common::Executor> collect_executor_;  // collections, one at a time
  std::unique_ptr<CasAdminService> cas_admin_;
  std::unique_ptr<AuditFollower> follower_;
  std::unique_ptr<common::Executor> tcp_executor_;
  std::unique_ptr<common::Executor> unix_executor_;
  std::unique_ptr<CasService> tcp_cas_;
  std::unique_ptr<CasService> unix_cas_;
  std::unique_ptr<replication::MemberChannels> members_;  // null without TLS material
  std::unique_ptr<AdminService> admin_;
  std::unique_ptr<replication::Follower> replication_follower_;
  std::unique_ptr<replication::Scrubber> scrubber_;  // null unless scrub.bytes_per_second > 0
  std::unique_ptr<AuditService> tcp_audit_;
  std::unique_ptr<AuditService> unix_audit_;
  std::unique_ptr<AuditAdminService> audit_admin_;
  std::unique_ptr<grpc::Server> tcp_server_;
  std::unique_ptr<grpc::Server> unix_server_;
  bool shut_down_ = false;
  bool owns_socket_ = false;
};

}  // namespace vault::node

#endif  // VAULT_NODE_VAULT_NODE_H_
