// Replay (design §10, docs/replay.md): the effect log of an agent whose sandbox type replays (a
// Scheme agent). Every answer it is given is logged; its checkpoints and hops write the log out
// as its state; its next start (after a hop or a restart) answers its calls from that log, in
// order, each checked against the request logged, effects not performed again, until the log
// ends, then serves it live. A call that differs from the logged one ends the agent: a replay
// never goes on from a history it does not match.
#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "agent/internal/host_call.h"
#include "agent/internal/runtime_impl.h"
#include "agent/internal/runtime_util.h"
#include "audit/log.h"
#include "common/log_fields.h"
#include "common/status_macros.h"
#include "spdlog/spdlog.h"

namespace vault::agent {

std::string LogDigest(const LiveAgent& live, const vault::v1::HostRequest& request) {
  if (!live.snapshots || (!request.has_checkpoint() && !request.has_migrate())) {
    return RequestDigest(request);
  }
  vault::v1::HostRequest bare = request;
  if (bare.has_checkpoint()) {
    bare.mutable_checkpoint()->clear_state();
    bare.mutable_checkpoint()->clear_state_digest();
  } else {
    bare.mutable_migrate()->clear_state();
    bare.mutable_migrate()->clear_state_digest();
  }
  return RequestDigest(bare);
}

absl::Status AgentRuntime::Impl::LoadEffectLog(LiveAgent& live) {
  vault::v1::AgentRecord& r = live.record;
  live.effect_calls.clear();
  live.held_calls.clear();
  live.migrate_extra.reset();
  live.replay_next = 0;
  live.replay_end = 0;
  const bool drop_final_migrate = std::exchange(live.drop_final_migrate, false);
  const EffectLog::Owner owner{live.id, r.spec().code_digest().sha256(), live.principal};
  std::optional<std::string> state;
  if (r.has_state()) {
    VAULT_ASSIGN_OR_RETURN(cas::Digest d, ToDigest(r.state_digest()));
    if (d.size() > kMaxEffectLogBytes + (live.snapshots ? kMaxSnapshotBytes : 0) + (1u << 20)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the state is ", d.size(), " bytes; an agent that replays (", r.spec().sandbox(),
          ") keeps its state in its effect log, at most ", kMaxEffectLogBytes >> 20,
          " MiB of effects and a snapshot of at most ", kMaxSnapshotBytes >> 20, " MiB"));
    }
    VAULT_ASSIGN_OR_RETURN(state, deps_.cas->ReadAll(d));
  }
  if (!state.has_value() || !IsEffectLog(*state)) {
    live.effects = std::make_unique<EffectLog>(owner, std::move(state));
    return absl::OkStatus();
  }
  const std::string own = deps_.vault_key->public_key().raw();
  absl::StatusOr<EffectLog> log = EffectLog::Read(*state, owner, [this, &own](absl::string_view k) {
    return k == own || MemberNameOfKey(k).has_value();
  });
  if (!log.ok()) {
    vault::v1::AuditEntry e =
        audit::MakeEntry(live.id, "agent.replay.refused", live.id, vault::v1::AuditEntry::DENIED,
                         std::string(log.status().message()), {});
    e.set_priority(vault::v1::AuditEntry::HIGH);
    Audit(std::move(e), /*durable=*/true);
    return absl::Status(log.status().code(),
                        absl::StrCat("refused its effect log: ", log.status().message()));
  }
  live.effects = std::make_unique<EffectLog>(*std::move(log));
  // Starting again here after its own hop failed (the log was written out with the migrate as
  // answered at the destination): that migrate is made again, live.
  if (drop_final_migrate && live.effects->size() > 0 &&
      live.effects->node(live.effects->size() - 1).op() == "migrate") {
    live.effects->DropLast();
  }
  // Its snapshot, which its runner names again (a checkpoint made again after a restart).
  if (live.effects->has_snapshot()) live.snapshot_objects.insert(live.effects->snapshot_sha256());
  // What it put, it may read back (as it could when it put it).
  for (size_t i = 0; i < live.effects->size(); ++i) {
    const vault::v1::EffectNode& n = live.effects->node(i);
    if (n.op() != "cas_put" && n.op() != "cas_upload_finish") continue;
    vault::v1::HostResponse answered;
    if (!answered.ParseFromString(n.response())) continue;
    if (answered.has_cas_put()) live.shared.insert(answered.cas_put().digest().sha256());
    if (answered.has_cas_upload_finish()) {
      live.shared.insert(answered.cas_upload_finish().digest().sha256());
    }
  }
  live.replay_end = live.effects->size();
  return absl::OkStatus();
}

bool AgentRuntime::Impl::Replay(const std::shared_ptr<LiveAgent>& live,
                                const vault::v1::HostRequest& request) {
  {
    // (Most agents do not replay: nothing is hashed for them.)
    absl::MutexLock lock(&live->mu);
    if (live->effects == nullptr) return false;
  }
  // The runner reading the snapshot it restores from, and its uploads of a snapshot: the
  // runner's own calls, not the program's, outside its log (answered live, never logged).
  if (request.has_get_state() && request.get_state().snapshot()) return false;
  if (IsStateUpload(*live, request)) return false;
  const HostCallRow* row = FindHostCall(request.call_case());
  const std::string op = row != nullptr ? row->op : "unknown";
  std::string digest;
  {
    absl::MutexLock lock(&live->mu);
    digest = LogDigest(*live, request);
  }
  vault::v1::HostFrame answer;
  std::string ended;  // why the agent is ended
  bool diverged = false, finished = false;
  size_t replayed = 0;
  std::string head;
  {
    absl::MutexLock lock(&live->mu);
    if (live->replay_next >= live->replay_end) {
      // Live. One call at a time (the runner makes no other), so that the log's order is the
      // order the agent saw its answers in.
      if (!live->effect_calls.empty()) {
        ended = absl::StrCat("protocol: an agent that replays makes one host call at a time (call ",
                             request.call_id(), " while ", live->effect_calls.begin()->first,
                             " is unanswered)");
      } else {
        live->effect_calls[request.call_id()] = {
            op, std::move(digest), request.has_checkpoint() && request.checkpoint().requested()};
        return false;
      }
    } else {
      const size_t i = live->replay_next;
      const vault::v1::EffectNode& n = live->effects->node(i);
      if (n.op() != op) {
        ended = absl::StrCat("replay diverged at effect ", i, " of ", live->replay_end,
                             ": the code made a ", op, " call where its log has ", n.op());
        diverged = true;
      } else if (n.request_sha256() != digest) {
        ended = absl::StrCat("replay diverged at effect ", i, " of ", live->replay_end,
                             ": the code made another ", op, " call than its log has (request ",
                             absl::BytesToHexString(digest.substr(0, 8)), ", logged ",
                             absl::BytesToHexString(n.request_sha256().substr(0, 8)), ")");
        diverged = true;
      } else {
        vault::v1::HostResponse* resp = answer.mutable_response();
        resp->ParseFromString(n.response());  // (checked when read)
        resp->set_call_id(request.call_id());
        // A get_state answer is logged without the state's bytes: they are the log's own.
        if (resp->code() == 0 && resp->has_get_state() && resp->get_state().present()) {
          const std::string& kept = live->effects->initial_state();
          const uint64_t offset = std::min<uint64_t>(request.get_state().offset(), kept.size());
          const uint64_t limit = request.get_state().limit();
          const uint64_t left = kept.size() - offset;
          resp->mutable_get_state()->set_state(
              kept.substr(offset, limit == 0 ? left : std::min<uint64_t>(limit, left)));
        }
        live->replay_next = i + 1;
        finished = live->replay_next == live->replay_end;
        replayed = live->replay_end;
        head = live->effects->head();
      }
    }
  }
  if (!ended.empty()) {
    if (diverged) {
      vault::v1::AuditEntry e = audit::MakeEntry(live->id, "agent.replay.diverged", live->id,
                                                 vault::v1::AuditEntry::DENIED, ended, {});
      e.set_priority(vault::v1::AuditEntry::HIGH);
      Audit(std::move(e), /*durable=*/true);
    }
    End(live, EndCause::kProtocol, ended);
    return true;
  }
  SendFrame(live, answer);  // (not logged again: the call was not noted)
  if (finished) {
    Audit(audit::MakeEntry(
              live->id, "agent.replay", live->id, vault::v1::AuditEntry::ALLOWED, "",
              {{"effects", absl::StrCat(replayed)}, {"head", absl::BytesToHexString(head)}}),
          /*durable=*/false);
    common::LogAgent(spdlog::level::info, live->id,
                     "agent {}: replayed {} effects from its log; it runs live from here", live->id,
                     replayed);
  }
  return true;
}

void AgentRuntime::Impl::LogAnswer(const std::shared_ptr<LiveAgent>& live,
                                   const vault::v1::HostResponse& response) {
  LiveAgent::EffectCall call;
  {
    absl::MutexLock lock(&live->mu);
    if (live->effects == nullptr) return;
    auto it = live->effect_calls.find(response.call_id());
    if (it == live->effect_calls.end()) return;
    call = std::move(it->second);
    live->effect_calls.erase(it);
    // A checkpoint the vault asked for that failed: as if it had not been made.
    if (call.logged_only_if_ok && response.code() != 0) return;
    // Its migrate answered here: the hop did not happen (the next hop's log must not end with it).
    if (call.op == "migrate") live->migrate_extra.reset();
  }
  // Serialized and hashed without the agent's lock (an answer may be a frame of 16 MiB).
  vault::v1::HostResponse logged = response;
  if (logged.has_get_state()) logged.mutable_get_state()->clear_state();
  vault::v1::EffectNode node =
      EffectLog::Prepare(call.op, options_.vault_name, call.request_sha256, std::move(logged));
  absl::MutexLock lock(&live->mu);
  if (live->effects != nullptr) live->effects->Append(std::move(node));
}

absl::StatusOr<std::optional<cas::Digest>> AgentRuntime::Impl::StoreEffectLog(
    const std::shared_ptr<LiveAgent>& live, bool with_migrate, const EffectLog* instead) {
  std::optional<EffectLog> copy;
  std::optional<EffectLog::Extra> extra;
  {
    absl::MutexLock lock(&live->mu);
    if (live->effects == nullptr) return std::nullopt;
    copy.emplace(instead != nullptr ? *instead : *live->effects);  // written out without the lock
    if (with_migrate) extra = live->migrate_extra;
  }
  if (extra.has_value() && extra->snapshot.has_value()) copy->Rebase(*std::move(extra->snapshot));
  VAULT_ASSIGN_OR_RETURN(std::string object, copy->WriteOut(*deps_.vault_key, options_.vault_name,
                                                            extra.has_value() ? &*extra : nullptr));
  copy.reset();
  cas::Digest d = cas::Digest::Of(object);
  // Charged as the agent's own writes are: a log written out again and again fills its
  // principal's quota, not the vault's disk.
  VAULT_RETURN_IF_ERROR(quota_->Charge(live->principal, object.size()));
  absl::StatusOr<cas::PutOutcome> put = cas::PutObject(*deps_.cas, d, object);
  if (!put.ok() || put->already_present) quota_->Refund(live->principal, object.size());
  if (!put.ok()) return put.status();
  return d;
}

void AgentRuntime::Impl::ReleaseHeldCalls(const std::shared_ptr<LiveAgent>& live) {
  std::vector<LiveAgent::HeldCall> held;
  std::optional<LiveAgent::PendingReceive> waiting;
  std::optional<vault::v1::Message> message;
  {
    absl::MutexLock lock(&live->mu);
    held.swap(live->held_calls);
    // A message that came during the freeze went to the mailbox: it answers the receive that
    // waited.
    if (live->pending_receive.has_value() && !live->mailbox.empty()) {
      waiting = std::move(live->pending_receive);
      live->pending_receive.reset();
      message = std::move(live->mailbox.front().message);
      HandedLocked(*live, live->mailbox.front().n);
      live->mailbox.pop_front();
      ++live->accepting;  // (a freeze waits until it is answered)
    }
  }
  if (waiting.has_value()) {
    AnswerReceive(live, *std::move(waiting), *std::move(message));
    absl::MutexLock lock(&live->mu);
    --live->accepting;
  }
  for (LiveAgent::HeldCall& h : held) {
    live->in_flight.fetch_add(1);
    bool queued = workers_->Schedule(live->principal, [this, live, h = std::move(h)]() mutable {
      RunCall(live, std::move(h.request), std::move(h.request_bytes), h.received);
      live->in_flight.fetch_sub(1);
    });
    if (!queued) live->in_flight.fetch_sub(1);
  }
}

}  // namespace vault::agent
