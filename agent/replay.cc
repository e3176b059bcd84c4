// Replay (design §10, docs/replay.md): the effect log of an agent whose sandbox type replays (a
// Scheme agent). Every answer it is given is logged; its checkpoints and hops write the log out
// as its state; its next start (after a hop or a restart) answers its calls from that log, in
// order, each checked against the request logged, effects not performed again, until the log
// ends, then serves it live. A call that differs from the logged one ends the agent: a replay
// never goes on from a history it does not match.
#include <memory>
#include <optional>
#include <string>

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

absl::Status AgentRuntime::Impl::LoadEffectLog(LiveAgent& live) {
  vault::v1::AgentRecord& r = live.record;
  live.effect_calls.clear();
  live.replay_next = 0;
  live.replay_end = 0;
  std::optional<std::string> state;
  if (r.has_state()) {
    VAULT_ASSIGN_OR_RETURN(cas::Digest d, ToDigest(r.state_digest()));
    if (d.size() > kMaxEffectLogBytes + (1u << 20)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the state is ", d.size(), " bytes; an agent that replays (", r.spec().sandbox(),
          ") keeps its state in its effect log, at most ", kMaxEffectLogBytes >> 20, " MiB"));
    }
    VAULT_ASSIGN_OR_RETURN(state, deps_.cas->ReadAll(d));
  }
  if (!state.has_value() || !IsEffectLog(*state)) {
    live.effects = std::make_unique<EffectLog>(live.id, std::move(state));
    return absl::OkStatus();
  }
  const std::string own = deps_.vault_key->public_key().raw();
  absl::StatusOr<EffectLog> log =
      EffectLog::Read(*state, live.id, [this, &own](absl::string_view raw) {
        return raw == own || MemberNameOfKey(raw).has_value();
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
  // A log that ends with a hop to another vault, started here: the hop failed after the log was
  // written out (a restart settled it so). The migrate is not answered from the log: the code
  // makes it again, live.
  if (live.effects->size() > 0) {
    const vault::v1::EffectNode& last = live.effects->node(live.effects->size() - 1);
    vault::v1::HostResponse answered;
    if (last.op() == "migrate" && answered.ParseFromString(last.response()) &&
        answered.has_migrate() && answered.migrate().vault() != options_.vault_name) {
      live.effects->DropLast();
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
  const HostCallRow* row = FindHostCall(request.call_case());
  const std::string op = row != nullptr ? row->op : "unknown";
  std::string digest = RequestDigest(request);
  vault::v1::HostFrame answer;
  std::string diverged;
  bool finished = false;
  size_t replayed = 0;
  std::string head;
  {
    absl::MutexLock lock(&live->mu);
    if (live->effects == nullptr) return false;
    if (live->replay_next >= live->replay_end) {
      live->effect_calls[request.call_id()] = {op, std::move(digest)};
      return false;
    }
    const size_t i = live->replay_next;
    const vault::v1::EffectNode& n = live->effects->node(i);
    if (n.op() != op) {
      diverged = absl::StrCat("replay diverged at effect ", i, " of ", live->replay_end,
                              ": the code made a ", op, " call where its log has ", n.op());
    } else if (n.request_sha256() != digest) {
      diverged = absl::StrCat("replay diverged at effect ", i, " of ", live->replay_end,
                              ": the code made another ", op, " call than its log has (request ",
                              absl::BytesToHexString(digest.substr(0, 8)), ", logged ",
                              absl::BytesToHexString(n.request_sha256().substr(0, 8)), ")");
    } else {
      answer.mutable_response()->ParseFromString(n.response());  // (checked when read)
      answer.mutable_response()->set_call_id(request.call_id());
      live->replay_next = i + 1;
      finished = live->replay_next == live->replay_end;
      replayed = live->replay_end;
      head = live->effects->head();
    }
  }
  if (!diverged.empty()) {
    vault::v1::AuditEntry e =
        audit::MakeEntry(live->id, "agent.replay.diverged", live->id,
                         vault::v1::AuditEntry::DENIED, diverged, {});
    e.set_priority(vault::v1::AuditEntry::HIGH);
    Audit(std::move(e), /*durable=*/true);
    End(live, EndCause::kProtocol, diverged);
    return true;
  }
  SendFrame(live, answer);  // (not logged again: the call was not noted)
  if (finished) {
    Audit(audit::MakeEntry(live->id, "agent.replay", live->id, vault::v1::AuditEntry::ALLOWED,
                           "", {{"effects", absl::StrCat(replayed)},
                                {"head", absl::BytesToHexString(head)}}),
          /*durable=*/false);
    common::LogAgent(spdlog::level::info, live->id,
                     "agent {}: replayed {} effects from its log; it runs live from here",
                     live->id, replayed);
  }
  return true;
}

void AgentRuntime::Impl::LogAnswer(LiveAgent& live, const vault::v1::HostResponse& response) {
  if (live.effects == nullptr) return;
  auto it = live.effect_calls.find(response.call_id());
  if (it == live.effect_calls.end()) return;
  live.effects->Append(it->second.op, options_.vault_name, it->second.request_sha256, response);
  live.effect_calls.erase(it);
}

absl::StatusOr<std::optional<cas::Digest>> AgentRuntime::Impl::StoreEffectLog(
    const std::shared_ptr<LiveAgent>& live, const EffectLog::Extra* extra) {
  std::string object;
  {
    absl::MutexLock lock(&live->mu);
    if (live->effects == nullptr) return std::nullopt;
    VAULT_ASSIGN_OR_RETURN(object,
                           live->effects->WriteOut(*deps_.vault_key, options_.vault_name, extra));
  }
  cas::Digest d = cas::Digest::Of(object);
  VAULT_RETURN_IF_ERROR(cas::PutObject(*deps_.cas, d, object).status());
  return d;
}

}  // namespace vault::agent
