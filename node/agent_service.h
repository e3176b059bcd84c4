// node: the gRPC `Agents` service (agent.proto), served only on the vault's admin socket. Thin:
// every call runs on a work queue and forwards to agent::AgentRuntime (Migrate, Locate and
// Journey to migration::Migration).
//
// Thread-safety: thread-safe; the runtime and the migration must outlive the service.
#ifndef VAULT_NODE_AGENT_SERVICE_H_
#define VAULT_NODE_AGENT_SERVICE_H_

#include <memory>

#include "agent/runtime.h"
#include "common/executor.h"
#include "migration/migration.h"
#include "node/auditor.h"
#include "vault/v1/agent.grpc.pb.h"

namespace vault::node {

class AgentService final : public vault::v1::Agents::CallbackService {
 public:
  AgentService(agent::AgentRuntime* runtime, migration::Migration* migration,
               common::Executor* executor, Auditor* auditor);
  ~AgentService() override;

  grpc::ServerUnaryReactor* Spawn(grpc::CallbackServerContext* ctx,
                                  const vault::v1::SpawnRequest* req,
                                  vault::v1::SpawnResponse* resp) override;
  grpc::ServerUnaryReactor* List(grpc::CallbackServerContext* ctx,
                                 const vault::v1::ListAgentsRequest* req,
                                 vault::v1::ListAgentsResponse* resp) override;
  grpc::ServerUnaryReactor* Get(grpc::CallbackServerContext* ctx,
                                const vault::v1::GetAgentRequest* req,
                                vault::v1::AgentStatus* resp) override;
  grpc::ServerUnaryReactor* Control(grpc::CallbackServerContext* ctx,
                                    const vault::v1::ControlRequest* req,
                                    vault::v1::ControlResponse* resp) override;
  grpc::ServerWriteReactor<vault::v1::AgentLogLine>* Logs(
      grpc::CallbackServerContext* ctx, const vault::v1::LogsRequest* req) override;
  grpc::ServerUnaryReactor* Send(grpc::CallbackServerContext* ctx,
                                 const vault::v1::SendMessageRequest* req,
                                 vault::v1::SendMessageResponse* resp) override;
  grpc::ServerUnaryReactor* Query(grpc::CallbackServerContext* ctx,
                                  const vault::v1::QueryRequest* req,
                                  vault::v1::QueryResponse* resp) override;
  grpc::ServerUnaryReactor* Trust(grpc::CallbackServerContext* ctx,
                                  const vault::v1::TrustRequest* req,
                                  vault::v1::TrustResponse* resp) override;
  grpc::ServerUnaryReactor* Untrust(grpc::CallbackServerContext* ctx,
                                    const vault::v1::UntrustRequest* req,
                                    vault::v1::UntrustResponse* resp) override;
  grpc::ServerUnaryReactor* ListPolicy(grpc::CallbackServerContext* ctx,
                                       const vault::v1::ListPolicyRequest* req,
                                       vault::v1::ListPolicyResponse* resp) override;
  grpc::ServerUnaryReactor* Revoke(grpc::CallbackServerContext* ctx,
                                   const vault::v1::RevokeRequest* req,
                                   vault::v1::RevokeResponse* resp) override;
  grpc::ServerUnaryReactor* Migrate(grpc::CallbackServerContext* ctx,
                                    const vault::v1::MigrateAgentRequest* req,
                                    vault::v1::MigrateAgentResponse* resp) override;
  grpc::ServerUnaryReactor* Locate(grpc::CallbackServerContext* ctx,
                                   const vault::v1::LocateRequest* req,
                                   vault::v1::LocateResponse* resp) override;
  grpc::ServerUnaryReactor* Journey(grpc::CallbackServerContext* ctx,
                                    const vault::v1::JourneyRequest* req,
                                    vault::v1::JourneyResponse* resp) override;

 private:
  agent::AgentRuntime* const runtime_;
  migration::Migration* const migration_;
  common::Executor* const executor_;
  Auditor* const auditor_;
  // Queries and log follows wait for an agent: they get threads of their own so that they never
  // hold up the admin socket's work queue.
  std::unique_ptr<common::Executor> waiters_;
};

}  // namespace vault::node

#endif  // VAULT_NODE_AGENT_SERVICE_H_
