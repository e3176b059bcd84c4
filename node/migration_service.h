// node: the Migration service (design §7), served on the federation listener only (mutual TLS):
// the destination side of a hop. The calling member's name comes from its verified certificate
// and must be the package's source vault.
//
// Thread-safety: gRPC calls it from many threads; migration/ serializes commits.
#ifndef VAULT_NODE_MIGRATION_SERVICE_H_
#define VAULT_NODE_MIGRATION_SERVICE_H_

#include <memory>

#include "agent/runtime.h"
#include "common/executor.h"
#include "migration/migration.h"
#include "vault/v1/migration.grpc.pb.h"

namespace vault::node {

class MigrationService final : public vault::v1::Migration::CallbackService {
 public:
  // `runtime` serves Control and Revoke; `migration` the rest.
  MigrationService(agent::AgentRuntime* runtime, migration::Migration* migration,
                   common::Executor* executor)
      : runtime_(runtime),
        migration_(migration),
        executor_(executor),
        waiters_(std::make_unique<common::Executor>(8, 1024)) {}
  ~MigrationService() override { waiters_->Shutdown(); }

  grpc::ServerUnaryReactor* Offer(grpc::CallbackServerContext* ctx,
                                  const vault::v1::OfferRequest* req,
                                  vault::v1::OfferResponse* resp) override;
  grpc::ServerUnaryReactor* Commit(grpc::CallbackServerContext* ctx,
                                   const vault::v1::CommitRequest* req,
                                   vault::v1::CommitResponse* resp) override;
  grpc::ServerUnaryReactor* Status(grpc::CallbackServerContext* ctx,
                                   const vault::v1::TransferStatusRequest* req,
                                   vault::v1::TransferStatusResponse* resp) override;
  grpc::ServerUnaryReactor* Where(grpc::CallbackServerContext* ctx,
                                  const vault::v1::WhereRequest* req,
                                  vault::v1::WhereResponse* resp) override;
  grpc::ServerUnaryReactor* Located(grpc::CallbackServerContext* ctx,
                                    const vault::v1::LocatedRequest* req,
                                    vault::v1::LocatedResponse* resp) override;
  grpc::ServerUnaryReactor* Control(grpc::CallbackServerContext* ctx,
                                    const vault::v1::ControlRequest* req,
                                    vault::v1::ControlResponse* resp) override;
  grpc::ServerUnaryReactor* Revoke(grpc::CallbackServerContext* ctx,
                                   const vault::v1::RevokeRequest* req,
                                   vault::v1::RevokeResponse* resp) override;

 private:
  agent::AgentRuntime* const runtime_;
  migration::Migration* const migration_;
  common::Executor* const executor_;
  // Control requests that wait (a query for its answer, logs for a line), off executor_.
  // (TERMINATE waits up to 10 s for the exit to be recorded, on executor_.)
  std::unique_ptr<common::Executor> waiters_;
};

}  // namespace vault::node

#endif  // VAULT_NODE_MIGRATION_SERVICE_H_
