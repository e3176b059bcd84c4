#include "node/migration_service.h"

#include <string>

#include "common/status_macros.h"
#include "node/membership.h"
#include "node/unary.h"

namespace vault::node {

grpc::ServerUnaryReactor* MigrationService::Offer(grpc::CallbackServerContext* ctx,
                                                  const vault::v1::OfferRequest* req,
                                                  vault::v1::OfferResponse* resp) {
  return RunUnary(ctx, executor_, [this, req, resp, caller = CallerMember(ctx)]() -> absl::Status {
    VAULT_ASSIGN_OR_RETURN(std::vector<vault::v1::Digest> missing,
                           migration_->OfferIn(req->package(), caller));
    for (vault::v1::Digest& d : missing) *resp->add_missing() = std::move(d);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* MigrationService::Commit(grpc::CallbackServerContext* ctx,
                                                   const vault::v1::CommitRequest* req,
                                                   vault::v1::CommitResponse* resp) {
  return RunUnaryThen(
      ctx, executor_,
      [this, req, resp,
       caller = CallerMember(ctx)](std::function<void()>* after_answer) -> absl::Status {
        VAULT_ASSIGN_OR_RETURN(
            *resp->mutable_receipt(),
            migration_->CommitIn(req->package(), caller,
                                 req->state_carried() ? &req->state() : nullptr, after_answer));
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* MigrationService::Status(grpc::CallbackServerContext* ctx,
                                                   const vault::v1::TransferStatusRequest* req,
                                                   vault::v1::TransferStatusResponse* resp) {
  return RunUnary(ctx, executor_, [this, req, resp, caller = CallerMember(ctx)]() -> absl::Status {
    VAULT_ASSIGN_OR_RETURN(
        *resp, migration_->TransferStatus(req->transfer_id(), req->abort_if_unknown(), caller));
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* MigrationService::Where(grpc::CallbackServerContext* ctx,
                                                  const vault::v1::WhereRequest* req,
                                                  vault::v1::WhereResponse* resp) {
  return RunUnary(ctx, executor_, [this, req, resp]() -> absl::Status {
    *resp = migration_->Where(req->agent_id());
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* MigrationService::Located(grpc::CallbackServerContext* ctx,
                                                    const vault::v1::LocatedRequest* req,
                                                    vault::v1::LocatedResponse* resp) {
  return RunUnary(ctx, executor_, [this, req, resp, caller = CallerMember(ctx)]() -> absl::Status {
    VAULT_ASSIGN_OR_RETURN(*resp, migration_->Located(req->receipt(), caller));
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* MigrationService::Control(grpc::CallbackServerContext* ctx,
                                                    const vault::v1::ControlRequest* req,
                                                    vault::v1::ControlResponse* resp) {
  // Requests that wait (a query for its answer, logs for a line) run apart from the rest, so they
  // cannot hold up a pause or a terminate.
  vault::v1::ControlPayload p;
  const bool waits =
      p.ParseFromString(req->payload()) && (p.action() == vault::v1::ControlPayload::QUERY ||
                                            p.action() == vault::v1::ControlPayload::LOGS);
  return RunUnary(ctx, waits ? waiters_.get() : executor_, [this, req, resp]() -> absl::Status {
    VAULT_ASSIGN_OR_RETURN(*resp, runtime_->ControlFromMember(*req));
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* MigrationService::Revoke(grpc::CallbackServerContext* ctx,
                                                   const vault::v1::RevokeRequest* req,
                                                   vault::v1::RevokeResponse* resp) {
  return RunUnary(ctx, executor_, [this, req, resp, caller = CallerMember(ctx)]() -> absl::Status {
    VAULT_ASSIGN_OR_RETURN(*resp, runtime_->RevokeFromMember(*req, caller));
    return absl::OkStatus();
  });
}

}  // namespace vault::node
