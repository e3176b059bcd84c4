#include "node/cas_admin_service.h"

#include <string>
#include <utility>

#include "node/unary.h"

namespace vault::node {

grpc::ServerUnaryReactor* CasAdminService::Pin(grpc::CallbackServerContext* ctx,
                                               const vault::v1::PinRequest* req,
                                               vault::v1::PinResponse* resp) {
  const std::string actor = auditor_->Actor(ctx);
  return RunUnary(ctx, executor_, [this, req, resp, actor]() -> absl::Status {
    absl::StatusOr<vault::v1::PinResponse> out = lifecycle_->Pin(*req, actor);
    if (!out.ok()) return out.status();
    *resp = *std::move(out);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* CasAdminService::Unpin(grpc::CallbackServerContext* ctx,
                                                 const vault::v1::UnpinRequest* req,
                                                 vault::v1::UnpinResponse* resp) {
  const std::string actor = auditor_->Actor(ctx);
  return RunUnary(ctx, executor_,
                  [this, req, actor]() -> absl::Status { return lifecycle_->Unpin(*req, actor); });
}

grpc::ServerUnaryReactor* CasAdminService::ListPins(grpc::CallbackServerContext* ctx,
                                                    const vault::v1::ListPinsRequest* req,
                                                    vault::v1::ListPinsResponse* resp) {
  return RunUnary(ctx, executor_, [this, resp]() -> absl::Status {
    absl::StatusOr<vault::v1::ListPinsResponse> out = lifecycle_->ListPins();
    if (!out.ok()) return out.status();
    *resp = *std::move(out);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* CasAdminService::Remove(grpc::CallbackServerContext* ctx,
                                                  const vault::v1::RemoveObjectsRequest* req,
                                                  vault::v1::RemoveObjectsResponse* resp) {
  const std::string actor = auditor_->Actor(ctx);
  return RunUnary(ctx, executor_, [this, req, resp, actor]() -> absl::Status {
    absl::StatusOr<vault::v1::RemoveObjectsResponse> out = lifecycle_->Remove(*req, actor);
    if (!out.ok()) return out.status();
    *resp = *std::move(out);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* CasAdminService::Collect(grpc::CallbackServerContext* ctx,
                                                   const vault::v1::CollectRequest* req,
                                                   vault::v1::CollectReport* resp) {
  const std::string actor = auditor_->Actor(ctx);
  return RunUnary(ctx, collections_, [this, req, resp, actor]() -> absl::Status {
    absl::StatusOr<vault::v1::CollectReport> out =
        lifecycle_->Collect({.dry_run = req->dry_run(),
                             .list_limit = req->list_limit(),
                             .actor = actor,
                             .compact = !req->no_compact()});
    if (!out.ok()) return out.status();
    *resp = *std::move(out);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* CasAdminService::Usage(grpc::CallbackServerContext* ctx,
                                                 const vault::v1::UsageRequest* req,
                                                 vault::v1::UsageResponse* resp) {
  return RunUnary(ctx, executor_, [this, resp]() -> absl::Status {
    absl::StatusOr<vault::v1::UsageResponse> out = lifecycle_->Usage();
    if (!out.ok()) return out.status();
    *resp = *std::move(out);
    return absl::OkStatus();
  });
}

}  // namespace vault::node
