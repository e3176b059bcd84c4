// node: running a unary call's work on a bounded executor (callback API reactors never block).
//
//   return RunUnary(ctx, executor_, [=]() -> absl::Status { ...; return absl::OkStatus(); });
//
// Thread-safety: pure functions.
#ifndef VAULT_NODE_UNARY_H_
#define VAULT_NODE_UNARY_H_

#include <grpcpp/grpcpp.h>

#include <functional>
#include <utility>

#include "absl/status/status.h"
#include "common/executor.h"
#include "node/grpc_status.h"

namespace vault::node {

inline const grpc::Status& BusyStatus() {
  static const grpc::Status* busy =
      new grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                       "vault is busy: storage work queue is full; retry with backoff");
  return *busy;
}

// Runs `work` on `executor` and finishes the call with its status; RESOURCE_EXHAUSTED when the
// executor's queue is full.
inline grpc::ServerUnaryReactor* RunUnary(grpc::CallbackServerContext* ctx,
                                          common::Executor* executor,
                                          std::function<absl::Status()> work) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  // Work whose caller went away (cancelled, or past its deadline) while it queued is not done.
  bool queued = executor->Schedule([ctx, reactor, work = std::move(work)] {
    if (ctx->IsCancelled()) return reactor->Finish(grpc::Status::CANCELLED);
    reactor->Finish(ToGrpc(work()));
  });
  if (!queued) reactor->Finish(BusyStatus());
  return reactor;
}

// As RunUnary, for work that leaves something to do once the answer has left: `work` may set
// its argument, which then runs when the call is done (its status sent, or the call cancelled),
// on a gRPC thread, so it must be quick.
inline grpc::ServerUnaryReactor* RunUnaryThen(
    grpc::CallbackServerContext* ctx, common::Executor* executor,
    std::function<absl::Status(std::function<void()>* after_answer)> work) {
  class Reactor final : public grpc::ServerUnaryReactor {
   public:
    void OnDone() override {
      if (after_answer_) after_answer_();
      delete this;
    }
    std::function<void()> after_answer_;  // set before Finish, read after it
  };
  auto* reactor = new Reactor();
  bool queued = executor->Schedule([reactor, work = std::move(work)] {
    absl::Status s = work(&reactor->after_answer_);
    reactor->Finish(ToGrpc(s));
  });
  if (!queued) reactor->Finish(BusyStatus());
  return reactor;
}

}  // namespace vault::node

#endif  // VAULT_NODE_UNARY_H_
