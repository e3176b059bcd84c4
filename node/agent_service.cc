#include "node/agent_service.h"

#include <functional>

#include "absl/strings/str_cat.h"
#include "capability/grant.h"
#include "common/status_macros.h"
#include "node/grpc_status.h"
#include "node/unary.h"

namespace vault::node {
namespace {

constexpr size_t kLogPage = 500;

// Logs: pages of lines; with follow, waits for new ones until the client goes away or the agent
// will write no more here (it ended, or departed: `finished`), and then ends the stream with OK.
class LogsReactor final : public grpc::ServerWriteReactor<vault::v1::AgentLogLine> {
 public:
  LogsReactor(grpc::CallbackServerContext* ctx, agent::AgentStore* store,
              common::Executor* executor, vault::v1::LogsRequest req,
              std::function<bool()> finished)
      : ctx_(ctx),
        store_(store),
        executor_(executor),
        finished_(std::move(finished)),
        req_(std::move(req)),
        next_(req_.from_seq()) {
    Next();
  }
  void OnWriteDone(bool ok) override {
    if (!ok) return Finish(grpc::Status::CANCELLED);
    WriteOne();
  }
  void OnDone() override { delete this; }

 private:
  void Next() {
    if (!executor_->Schedule([this] { Fetch(); })) Finish(BusyStatus());
  }
  void Fetch() {
    for (;;) {
      lines_ = store_->ReadLogs(req_.id(), next_, kLogPage);
      pos_ = 0;
      if (!lines_.empty() || !req_.follow()) break;
      if (ctx_->IsCancelled()) return Finish(grpc::Status::CANCELLED);
      if (finished_()) {
        // Lines written before the end are in this read; after it there are none.
        lines_ = store_->ReadLogs(req_.id(), next_, kLogPage);
        if (lines_.empty()) return Finish(grpc::Status::OK);
        break;
      }
      // Wait (in slices, to notice a client that left) for new lines.
      store_->WaitForLogs(req_.id(), next_, absl::Now() + absl::Milliseconds(500));
      if (ctx_->IsCancelled()) return Finish(grpc::Status::CANCELLED);
    }
    WriteOne();
  }
  void WriteOne() {
    if (pos_ >= lines_.size()) {
      if (lines_.empty() && !req_.follow()) return Finish(grpc::Status::OK);
      return Next();
    }
    line_ = std::move(lines_[pos_++]);
    next_ = line_.seq() + 1;
    StartWrite(&line_);
  }

  grpc::CallbackServerContext* const ctx_;
  agent::AgentStore* const store_;
  common::Executor* const executor_;
  const std::function<bool()> finished_;
  const vault::v1::LogsRequest req_;
  uint64_t next_;
  std::vector<vault::v1::AgentLogLine> lines_;
  size_t pos_ = 0;
  vault::v1::AgentLogLine line_;
};

class LogsError final : public grpc::ServerWriteReactor<vault::v1::AgentLogLine> {
 public:
  explicit LogsError(const absl::Status& s) { Finish(ToGrpc(s)); }
  void OnDone() override { delete this; }
};

}  // namespace

AgentService::AgentService(agent::AgentRuntime* runtime, migration::Migration* migration,
                           common::Executor* executor, Auditor* auditor)
    : runtime_(runtime),
      migration_(migration),
      executor_(executor),
      auditor_(auditor),
      waiters_(std::make_unique<common::Executor>(8, 1024)) {}

AgentService::~AgentService() { waiters_->Shutdown(); }

grpc::ServerUnaryReactor* AgentService::Spawn(grpc::CallbackServerContext* ctx,
                                              const vault::v1::SpawnRequest* req,
                                              vault::v1::SpawnResponse* resp) {
  return RunUnary(ctx, executor_, [this, req, resp]() -> absl::Status {
    absl::StatusOr<vault::v1::SpawnResponse> r = runtime_->Spawn(*req);
    if (!r.ok()) return r.status();
    *resp = *std::move(r);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* AgentService::List(grpc::CallbackServerContext* ctx,
                                             const vault::v1::ListAgentsRequest* req,
                                             vault::v1::ListAgentsResponse* resp) {
  return RunUnary(ctx, executor_, [this, req, resp]() -> absl::Status {
    *resp = runtime_->List(*req);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* AgentService::Get(grpc::CallbackServerContext* ctx,
                                            const vault::v1::GetAgentRequest* req,
                                            vault::v1::AgentStatus* resp) {
  return RunUnary(ctx, executor_, [this, req, resp]() -> absl::Status {
    absl::StatusOr<vault::v1::AgentStatus> r = runtime_->Get(req->id());
    if (!r.ok()) return r.status();
    *resp = *std::move(r);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* AgentService::Control(grpc::CallbackServerContext* ctx,
                                                const vault::v1::ControlRequest* req,
                                                vault::v1::ControlResponse* resp) {
  return RunUnary(ctx, waiters_.get(), [this, req, resp]() -> absl::Status {
    absl::StatusOr<vault::v1::ControlResponse> r = runtime_->Control(*req);
    if (!r.ok()) return r.status();
    *resp = *std::move(r);
    return absl::OkStatus();
  });
}

grpc::ServerWriteReactor<vault::v1::AgentLogLine>* AgentService::Logs(
    grpc::CallbackServerContext* ctx, const vault::v1::LogsRequest* req) {
  absl::StatusOr<vault::v1::AgentStatus> exists = runtime_->Get(req->id());
  if (!exists.ok()) return new LogsError(exists.status());
  auto finished = [runtime = runtime_, id = req->id()] {
    // (A departing agent's state changes before the output it left in its pipe is read.)
    if (runtime->HasProcess(id)) return false;
    absl::StatusOr<vault::v1::AgentStatus> st = runtime->Get(id);
    if (!st.ok()) return true;
    switch (st->record().state()) {
      case vault::v1::DEPARTED:
      case vault::v1::TERMINATED:
      case vault::v1::COMPLETED:
      case vault::v1::FAILED:
        return true;
      default:
        return false;
    }
  };
  return new LogsReactor(ctx, runtime_->store(), waiters_.get(), *req, std::move(finished));
}

grpc::ServerUnaryReactor* AgentService::Send(grpc::CallbackServerContext* ctx,
                                             const vault::v1::SendMessageRequest* req,
                                             vault::v1::SendMessageResponse* resp) {
  return RunUnary(ctx, executor_, [this, req, resp]() -> absl::Status {
    absl::StatusOr<uint64_t> id = runtime_->SendFromOperator(req->id(), req->type(), req->data());
    if (!id.ok()) return id.status();
    resp->set_message_id(*id);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* AgentService::Query(grpc::CallbackServerContext* ctx,
                                              const vault::v1::QueryRequest* req,
                                              vault::v1::QueryResponse* resp) {
  return RunUnary(ctx, waiters_.get(), [this, req, resp]() -> absl::Status {
    absl::StatusOr<vault::v1::QueryResponse> r = runtime_->Query(*req);
    if (!r.ok()) return r.status();
    *resp = *std::move(r);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* AgentService::Trust(grpc::CallbackServerContext* ctx,
                                              const vault::v1::TrustRequest* req,
                                              vault::v1::TrustResponse* resp) {
  return RunUnary(ctx, executor_, [this, ctx, req, resp]() -> absl::Status {
    absl::StatusOr<vault::v1::TrustEntry> e = runtime_->policy()->Trust(req->entry());
    if (!e.ok()) return e.status();
    std::string ceiling;
    for (const vault::v1::Grant& g : e->ceiling()) {
      absl::StrAppend(&ceiling, ceiling.empty() ? "" : "; ", capability::GrantToString(g));
    }
    VAULT_RETURN_IF_ERROR(auditor_->Record(Auditor::Entry(
        auditor_->Actor(ctx), "policy.trust", e->principal(), vault::v1::AuditEntry::ALLOWED, "",
        {{"ceiling", ceiling}, {"preset", e->preset()}, {"admin", e->admin() ? "yes" : "no"}})));
    *resp->mutable_entry() = *std::move(e);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* AgentService::Untrust(grpc::CallbackServerContext* ctx,
                                                const vault::v1::UntrustRequest* req,
                                                vault::v1::UntrustResponse* resp) {
  return RunUnary(ctx, executor_, [this, ctx, req]() -> absl::Status {
    VAULT_RETURN_IF_ERROR(runtime_->policy()->Untrust(req->principal()));
    return auditor_->Record(Auditor::Entry(auditor_->Actor(ctx), "policy.untrust", req->principal(),
                                           vault::v1::AuditEntry::ALLOWED));
  });
}

grpc::ServerUnaryReactor* AgentService::ListPolicy(grpc::CallbackServerContext* ctx,
                                                   const vault::v1::ListPolicyRequest* req,
                                                   vault::v1::ListPolicyResponse* resp) {
  return RunUnary(ctx, executor_, [this, resp]() -> absl::Status {
    for (vault::v1::TrustEntry& e : runtime_->policy()->List()) *resp->add_entries() = std::move(e);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* AgentService::Revoke(grpc::CallbackServerContext* ctx,
                                               const vault::v1::RevokeRequest* req,
                                               vault::v1::RevokeResponse* resp) {
  return RunUnary(ctx, executor_, [this, req, resp]() -> absl::Status {
    VAULT_ASSIGN_OR_RETURN(*resp, runtime_->Revoke(*req));
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* AgentService::Migrate(grpc::CallbackServerContext* ctx,
                                                const vault::v1::MigrateAgentRequest* req,
                                                vault::v1::MigrateAgentResponse* resp) {
  return RunUnary(ctx, executor_, [this, req, resp]() -> absl::Status {
    VAULT_ASSIGN_OR_RETURN(*resp, migration_->Migrate(*req));
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* AgentService::Locate(grpc::CallbackServerContext* ctx,
                                               const vault::v1::LocateRequest* req,
                                               vault::v1::LocateResponse* resp) {
  return RunUnary(ctx, executor_, [this, req, resp]() -> absl::Status {
    VAULT_ASSIGN_OR_RETURN(*resp, migration_->Locate(req->id()));
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* AgentService::Journey(grpc::CallbackServerContext* ctx,
                                                const vault::v1::JourneyRequest* req,
                                                vault::v1::JourneyResponse* resp) {
  return RunUnary(ctx, executor_, [this, req, resp]() -> absl::Status {
    VAULT_ASSIGN_OR_RETURN(*resp, migration_->Journey(req->id()));
    return absl::OkStatus();
  });
}

}  // namespace vault::node
