#include "node/federation_service.h"

#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "node/admin_service.h"
#include "node/grpc_status.h"
#include "node/unary.h"
#include "replication/follower.h"

namespace vault::node {
namespace {

using vault::v1::FederationStatusResponse;
using vault::v1::MemberView;
using vault::v1::VaultSummary;

constexpr uint32_t kDefaultTimeoutMs = 2000;
constexpr uint32_t kMaxTimeoutMs = 60000;
constexpr size_t kMaxStatusCalls = 8;  // in flight at once

bool Hosted(vault::v1::AgentState s) {
  return s == vault::v1::SPAWNED || s == vault::v1::RUNNING || s == vault::v1::PAUSED ||
         s == vault::v1::MIGRATING;
}

}  // namespace

VaultSummary FederationService::Compute() const {
  VaultSummary out;
  const vault::v1::VaultConfig& config = *deps_.config;
  out.set_name(config.name());
  out.set_public_key(deps_.public_key);
  out.set_version(kVersion);
  out.set_started_unix_ms(deps_.started_unix_ms);
  cas::StoreTotals totals = deps_.store->totals();
  out.set_object_count(totals.objects);
  out.set_stored_bytes(totals.bytes);
  out.set_last_seq(deps_.store->last_seq());
  out.set_audit_size(deps_.log->size());
  if (std::optional<vault::v1::StoredCheckpoint> c = deps_.log->LatestCheckpoint()) {
    out.set_checkpoint_size(c->size());
  }
  if (deps_.agents != nullptr) {
    std::map<int, uint64_t> by_state;
    uint64_t hosted = 0;
    const vault::v1::ListAgentsResponse all = deps_.agents->List({});
    for (const vault::v1::AgentSummary& a : all.agents()) {
      ++by_state[a.state()];
      if (Hosted(a.state())) ++hosted;
    }
    for (const auto& [state, count] : by_state) {
      VaultSummary::AgentCount* c = out.add_agents();
      c->set_state(vault::v1::AgentState_Name(static_cast<vault::v1::AgentState>(state)));
      c->set_count(count);
    }
    // Held (vaultd --hold-agents): recorded as running, but nothing runs here.
    if (deps_.hold_agents) {
      out.set_agents_held(hosted);
    } else {
      out.set_agents_hosted(hosted);
    }
  }
  if (deps_.mirrors != nullptr) {
    for (vault::v1::MirrorStatus& m : deps_.mirrors->Statuses()) {
      m.clear_evidence();  // the signed notes of a fork: `audit mirrors` shows them
      *out.add_mirrors() = std::move(m);
    }
  }
  for (const vault::v1::FollowConfig& f : config.follow()) {
    VaultSummary::FollowCursor* c = out.add_follows();
    c->set_peer(f.peer());
    absl::StatusOr<uint64_t> cursor = replication::Follower::LoadCursor(deps_.db, f.peer());
    c->set_cursor(cursor.ok() ? *cursor : 0);
  }
  out.set_now_unix_ms(absl::ToUnixMillis(absl::Now()));
  return out;
}

VaultSummary FederationService::Summarize() const {
  if (admin_) return Compute();
  absl::MutexLock lock(&cache_mu_);
  if (absl::Now() - cached_at_ >= absl::Seconds(1)) {
    cached_ = Compute();
    // What a member needs to compare (state and sizes), not this vault's own diagnostics.
    for (vault::v1::MirrorStatus& m : *cached_.mutable_mirrors()) {
      m.clear_last_error();
      m.clear_checkpoint_note();
      m.clear_evidence();
    }
    cached_at_ = absl::Now();
  }
  return cached_;
}

grpc::ServerUnaryReactor* FederationService::Summary(grpc::CallbackServerContext* ctx,
                                                     const vault::v1::SummaryRequest*,
                                                     VaultSummary* resp) {
  return RunUnary(ctx, deps_.executor, [this, resp]() -> absl::Status {
    *resp = Summarize();
    return absl::OkStatus();
  });
}

// One Status call: the members are asked at once with the async stub (no thread of ours waits);
// the last answer, a cancelled call or the vault's shutdown ends it.
class FederationService::StatusCall final : public grpc::ServerUnaryReactor {
 public:
  StatusCall(FederationService* service, FederationStatusResponse* resp)
      : service_(service), resp_(resp) {}

  // Asks every member; `deadline` is each call's.
  void Start(absl::Time deadline) {
    *resp_->mutable_self() = service_->Summarize();
    const vault::v1::VaultConfig& config = *service_->deps_.config;
    for (const vault::v1::Member& m : config.members()) {
      if (m.name() == config.name()) continue;
      MemberView* view = resp_->add_members();
      view->set_name(m.name());
      view->set_address(m.address());
    }
    std::vector<std::pair<MemberView*, std::shared_ptr<grpc::Channel>>> asks;
    for (MemberView& view : *resp_->mutable_members()) {
      if (service_->deps_.members == nullptr) {
        view.set_error("this vault has no TLS material: members cannot be reached");
        continue;
      }
      absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
          service_->deps_.members->Get(view.name());
      if (!channel.ok()) {
        view.set_error(std::string(channel.status().message()));
        continue;
      }
      asks.emplace_back(&view, *std::move(channel));
    }
    // The calls' contexts: owned by contexts_ (which a cancel walks under mu_), used here.
    std::vector<grpc::ClientContext*> contexts;
    {
      absl::MutexLock lock(&mu_);
      pending_ = asks.size() + 1;  // +1: this function, until every call is started
      for (size_t i = 0; i < asks.size(); ++i) {
        contexts_.push_back(std::make_unique<grpc::ClientContext>());
        contexts_.back()->set_deadline(absl::ToChronoTime(deadline));
        if (cancelled_) contexts_.back()->TryCancel();
        contexts.push_back(contexts_.back().get());
      }
    }
    for (size_t i = 0; i < asks.size(); ++i) {
      MemberView* view = asks[i].first;
      auto stub = std::make_shared<vault::v1::Federation::Stub>(asks[i].second);
      absl::Time start = absl::Now();
      // The stub lives until the callback has run.
      stub->async()->Summary(
          contexts[i], &request_, view->mutable_summary(),
          [this, view, stub, start](grpc::Status s) {
            view->set_round_trip_ms(absl::ToInt64Milliseconds(absl::Now() - start));
            if (s.ok()) {
              view->set_reachable(true);
            } else {
              view->clear_summary();
              view->set_error(s.error_code() == grpc::StatusCode::UNIMPLEMENTED
                                  ? "the member's vaultd is older: it has no Federation "
                                    "service"
                                  : FromGrpc(s).ToString());
            }
            Done();
          });
    }
    Done();
  }

  // Cancels the calls to members still in flight (they end as CANCELLED).
  void Cancel() {
    absl::MutexLock lock(&mu_);
    cancelled_ = true;
    for (auto& c : contexts_) c->TryCancel();
  }

  void OnCancel() override { Cancel(); }
  void OnDone() override {
    service_->Forget(this);
    delete this;
  }

 private:
  void Done() {
    {
      absl::MutexLock lock(&mu_);
      if (--pending_ > 0) return;
    }
    Compare();
    Finish(grpc::Status::OK);
  }

  // Each member's answer beside what this vault holds of it.
  void Compare() {
    const VaultSummary& self = resp_->self();
    const std::string& name = service_->deps_.config->name();
    for (MemberView& view : *resp_->mutable_members()) {
      for (const vault::v1::MirrorStatus& m : self.mirrors()) {
        if (m.peer() != view.name()) continue;
        *view.mutable_mirror() = m;
        if (view.reachable()) {
          uint64_t theirs = view.summary().checkpoint_size();
          view.set_mirror_lag(theirs > m.entries() ? theirs - m.entries() : 0);
        }
      }
      for (const vault::v1::MirrorStatus& m : view.summary().mirrors()) {
        if (m.peer() != name) continue;
        uint64_t ours = self.checkpoint_size();
        view.set_their_mirror_lag(ours > m.entries() ? ours - m.entries() : 0);
      }
      for (const VaultSummary::FollowCursor& f : self.follows()) {
        if (f.peer() != view.name()) continue;
        view.set_followed(true);
        view.set_follow_cursor(f.cursor());
        if (view.reachable()) {
          uint64_t last = view.summary().last_seq();
          view.set_replication_lag(last > f.cursor() ? last - f.cursor() : 0);
        }
      }
    }
  }

  FederationService* const service_;
  FederationStatusResponse* const resp_;
  const vault::v1::SummaryRequest request_;
  absl::Mutex mu_;
  size_t pending_ ABSL_GUARDED_BY(mu_) = 0;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts_ ABSL_GUARDED_BY(mu_);
};

grpc::ServerUnaryReactor* FederationService::Status(grpc::CallbackServerContext* ctx,
                                                    const vault::v1::FederationStatusRequest* req,
                                                    FederationStatusResponse* resp) {
  auto refuse = [ctx](grpc::Status s) {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    reactor->Finish(std::move(s));
    return reactor;
  };
  if (!admin_) {
    return refuse(grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                               "Federation.Status is served on the admin socket only"));
  }
  if (req->timeout_ms() > kMaxTimeoutMs) {
    return refuse(
        grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                     absl::StrCat("timeout_ms ", req->timeout_ms(), " is above ", kMaxTimeoutMs)));
  }
  auto* call = new StatusCall(this, resp);
  {
    absl::MutexLock lock(&mu_);
    if (shut_down_ || calls_.size() >= kMaxStatusCalls) {
      delete call;
      return refuse(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                                 shut_down_ ? "the vault is shutting down"
                                            : "too many federation status calls in flight"));
    }
    calls_.insert(call);
  }
  // Each member's deadline: the request's, never past the caller's own.
  absl::Time deadline =
      absl::Now() +
      absl::Milliseconds(req->timeout_ms() == 0 ? kDefaultTimeoutMs : req->timeout_ms());
  absl::Time caller = absl::FromChrono(ctx->deadline());
  if (caller < deadline) deadline = caller;
  call->Start(deadline);
  return call;
}

void FederationService::Forget(StatusCall* call) {
  absl::MutexLock lock(&mu_);
  calls_.erase(call);
}

void FederationService::Shutdown() {
  absl::MutexLock lock(&mu_);
  shut_down_ = true;
  for (StatusCall* call : calls_) call->Cancel();
}

}  // namespace vault::node
