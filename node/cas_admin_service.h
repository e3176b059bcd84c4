// node: the gRPC `CasAdmin` service (cas_admin.proto), served only on the vault's admin socket:
// pins, removals, collections and disk usage, through CasLifecycle.
//
// Thread-safety: thread-safe; the lifecycle and the executor must outlive the service.
#ifndef VAULT_NODE_CAS_ADMIN_SERVICE_H_
#define VAULT_NODE_CAS_ADMIN_SERVICE_H_

#include "common/executor.h"
#include "node/auditor.h"
#include "node/cas_lifecycle.h"
#include "vault/v1/cas_admin.grpc.pb.h"

namespace vault::node {

class CasAdminService final : public vault::v1::CasAdmin::CallbackService {
 public:
  // `executor`: the admin socket's; `collections`: where collections run (one at a time), so
  // that a long one never holds the admin socket's workers.
  CasAdminService(CasLifecycle* lifecycle, common::Executor* executor,
                  common::Executor* collections, Auditor* auditor)
      : lifecycle_(lifecycle), executor_(executor), collections_(collections), auditor_(auditor) {}

  grpc::ServerUnaryReactor* Pin(grpc::CallbackServerContext* ctx, const vault::v1::PinRequest* req,
                                vault::v1::PinResponse* resp) override;
  grpc::ServerUnaryReactor* Unpin(grpc::CallbackServerContext* ctx,
                                  const vault::v1::UnpinRequest* req,
                                  vault::v1::UnpinResponse* resp) override;
  grpc::ServerUnaryReactor* ListPins(grpc::CallbackServerContext* ctx,
                                     const vault::v1::ListPinsRequest* req,
                                     vault::v1::ListPinsResponse* resp) override;
  grpc::ServerUnaryReactor* Remove(grpc::CallbackServerContext* ctx,
                                   const vault::v1::RemoveObjectsRequest* req,
                                   vault::v1::RemoveObjectsResponse* resp) override;
  grpc::ServerUnaryReactor* Collect(grpc::CallbackServerContext* ctx,
                                    const vault::v1::CollectRequest* req,
                                    vault::v1::CollectReport* resp) override;
  grpc::ServerUnaryReactor* Usage(grpc::CallbackServerContext* ctx,
                                  const vault::v1::UsageRequest* req,
                                  vault::v1::UsageResponse* resp) override;

 private:
  CasLifecycle* const lifecycle_;
  common::Executor* const executor_;
  common::Executor* const collections_;
  Auditor* const auditor_;
};

}  // namespace vault::node

#endif  // VAULT_NODE_CAS_ADMIN_SERVICE_H_
