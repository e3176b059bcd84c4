#include "node/message_service.h"

#include <algorithm>
#include <string>

#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "node/membership.h"
#include "node/unary.h"

namespace vault::node {

grpc::ServerUnaryReactor* MessageService::Deliver(grpc::CallbackServerContext* ctx,
                                                  const vault::v1::DeliverRequest* req,
                                                  vault::v1::DeliverResponse* resp) {
  // A forward goes on within the caller's deadline (and 10 s at most).
  const absl::Time deadline =
      std::min(absl::FromChrono(ctx->deadline()), absl::Now() + absl::Seconds(10));
  return RunUnary(
      ctx, executor_, [this, req, resp, deadline, caller = CallerMember(ctx)]() -> absl::Status {
        VAULT_ASSIGN_OR_RETURN(*resp, runtime_->DeliverFromMember(*req, caller, deadline));
        return absl::OkStatus();
      });
}

}  // namespace vault::node
