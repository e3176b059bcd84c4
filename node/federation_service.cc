#include "node/federation_service.h"

#include <map>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
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

bool Hosted(vault::v1::AgentState s) {
  return s == vault::v1::SPAWNED || s == vault::v1::RUNNING || s == vault::v1::PAUSED ||
         s == vault::v1::MIGRATING;
}

// Asks `name` for its summary; fills `view` (reachable, round trip, summary or error).
void AskMember(replication::MemberChannels* members, const std::string& name,
               absl::Duration timeout, MemberView* view) {
  if (members == nullptr) {
    view->set_error("this vault has no TLS material: members cannot be reached");
    return;
  }
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = members->Get(name);
  if (!channel.ok()) {
    view->set_error(std::string(channel.status().message()));
    return;
  }
  std::unique_ptr<vault::v1::Federation::Stub> stub = vault::v1::Federation::NewStub(*channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  // A member that is down fails the call at once rather than waiting out the deadline for a
  // connection that gRPC's backoff would delay.
  ctx.set_wait_for_ready(false);
  absl::Time start = absl::Now();
  grpc::Status s = stub->Summary(&ctx, vault::v1::SummaryRequest(), view->mutable_summary());
  view->set_round_trip_ms(absl::ToInt64Milliseconds(absl::Now() - start));
  if (s.ok()) {
    view->set_reachable(true);
    return;
  }
  view->clear_summary();
  view->set_error(s.error_code() == grpc::StatusCode::UNIMPLEMENTED
                      ? "the member's vaultd is older: it has no Federation service"
                      : FromGrpc(s).ToString());
}

}  // namespace

VaultSummary FederationService::Summarize() const {
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
    out.set_agents_hosted(hosted);
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

grpc::ServerUnaryReactor* FederationService::Summary(grpc::CallbackServerContext* ctx,
                                                     const vault::v1::SummaryRequest*,
                                                     VaultSummary* resp) {
  return RunUnary(ctx, deps_.executor, [this, resp]() -> absl::Status {
    *resp = Summarize();
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* FederationService::Status(grpc::CallbackServerContext* ctx,
                                                    const vault::v1::FederationStatusRequest* req,
                                                    FederationStatusResponse* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  if (!admin_) {
    reactor->Finish(grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                                 "Federation.Status is served on the admin socket only"));
    return reactor;
  }
  if (req->timeout_ms() > kMaxTimeoutMs) {
    reactor->Finish(
        grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                     absl::StrCat("timeout_ms ", req->timeout_ms(), " is above ", kMaxTimeoutMs)));
    return reactor;
  }
  const absl::Duration timeout =
      absl::Milliseconds(req->timeout_ms() == 0 ? kDefaultTimeoutMs : req->timeout_ms());
  // The members are asked from threads of their own (never gRPC's or the work queue's: each may
  // wait out its deadline); the call ends after the last answer.
  std::thread([this, reactor, resp, timeout] {
    *resp->mutable_self() = Summarize();
    const vault::v1::VaultConfig& config = *deps_.config;
    std::vector<std::thread> askers;
    for (const vault::v1::Member& m : config.members()) {
      if (m.name() == config.name()) continue;
      MemberView* view = resp->add_members();
      view->set_name(m.name());
      view->set_address(m.address());
    }
    for (int i = 0; i < resp->members_size(); ++i) {
      MemberView* view = resp->mutable_members(i);
      askers.emplace_back(
          [this, view, timeout] { AskMember(deps_.members, view->name(), timeout, view); });
    }
    for (std::thread& t : askers) t.join();
    const VaultSummary& self = resp->self();
    for (MemberView& view : *resp->mutable_members()) {
      for (const vault::v1::MirrorStatus& m : self.mirrors()) {
        if (m.peer() != view.name()) continue;
        *view.mutable_mirror() = m;
        if (view.reachable()) {
          uint64_t theirs = view.summary().checkpoint_size();
          view.set_mirror_lag(theirs > m.checkpoint_size() ? theirs - m.checkpoint_size() : 0);
        }
      }
      for (const vault::v1::MirrorStatus& m : view.summary().mirrors()) {
        if (m.peer() != config.name()) continue;
        uint64_t ours = self.checkpoint_size();
        view.set_their_mirror_lag(ours > m.checkpoint_size() ? ours - m.checkpoint_size() : 0);
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
    reactor->Finish(grpc::Status::OK);
  }).detach();
  return reactor;
}

}  // namespace vault::node
