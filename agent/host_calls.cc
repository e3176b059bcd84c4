// The capability proxy: every host call an agent makes, from its frame to its answer (the calls
// themselves are rows of host_calls/table.cc, their handlers in host_calls/*.cc), the runtime's
// side of HostCallServices, and the audit writer of agents' calls.
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "agent/internal/host_call.h"
#include "agent/internal/runtime_impl.h"
#include "capability/grant.h"
#include "common/status_macros.h"
#include "spdlog/spdlog.h"

namespace vault::agent {
namespace {

using vault::v1::Grant;
using vault::v1::HostRequest;
using vault::v1::HostResponse;

constexpr uint32_t kProtocolVersion = 1;
constexpr uint32_t kMaxInFlight = 32;
constexpr size_t kFrameOverhead = 1024;  // room for the response's other fields

}  // namespace

// ---- HostCallServices ----

uint32_t AgentRuntime::Impl::MaxAgents(const std::string& principal) {
  std::optional<vault::v1::TrustEntry> trust;
  if (absl::StatusOr<capability::PublicKey> k = capability::PublicKey::FromText(principal);
      k.ok()) {
    trust = policy_->Lookup(*k);
  }
  return trust.has_value() && trust->quota().max_agents() != 0
             ? trust->quota().max_agents()
             : options_.config.default_max_agents();
}

absl::Status AgentRuntime::Impl::AnswerQuery(uint64_t reply_to, const std::string& agent_id,
                                             const std::string& type, const std::string& data) {
  absl::MutexLock lock(&mu_);
  auto it = queries_.find(reply_to);
  if (reply_to == 0 || it == queries_.end() || it->second->agent != agent_id) {
    return absl::NotFoundError("no query from the operator is waiting for this reply");
  }
  it->second->answered = true;
  it->second->response.set_type(type);
  it->second->response.set_answer(data);
  queries_cv_.SignalAll();
  return absl::OkStatus();
}

void AgentRuntime::Impl::Audit(vault::v1::AuditEntry entry, bool durable) {
  audit_writer_->Append(std::move(entry), durable);
}

void AgentRuntime::Impl::HandleFrame(const std::shared_ptr<LiveAgent>& live, std::string frame) {
  vault::v1::GuestFrame g;
  if (!g.ParseFromString(frame)) {
    End(live, EndCause::kProtocol, "protocol: a frame that does not parse");
    return;
  }
  if (!live->welcomed) {
    if (!g.has_hello()) {
      End(live, EndCause::kProtocol, "protocol: the first frame must be a hello");
      return;
    }
    vault::v1::HostFrame reply;
    if (g.hello().version() != kProtocolVersion) {
      std::string why =
          absl::StrCat("host-call protocol version ", g.hello().version(),
                       " is not supported; this vault speaks version ", kProtocolVersion);
      reply.set_refused(why);
      SendFrame(live, reply);
      End(live, EndCause::kProtocol, why);
      return;
    }
    live->welcomed = true;
    vault::v1::Welcome* w = reply.mutable_welcome();
    w->set_version(kProtocolVersion);
    w->set_agent_id(live->id);
    w->set_vault(options_.vault_name);
    w->set_max_frame_bytes(options_.config.max_frame_bytes());
    {
      absl::MutexLock lock(&live->mu);
      w->set_incarnation(live->record.incarnation());
    }
    SendFrame(live, reply);
    return;
  }
  if (!g.has_request()) {
    End(live, EndCause::kProtocol,
        g.has_hello() ? "protocol: a second hello" : "protocol: an empty frame");
    return;
  }
  {
    // Once the agent is being ended nothing more it asks is served.
    absl::MutexLock lock(&live->mu);
    if (live->end_cause != EndCause::kNone) return;
  }
  HostRequest request = std::move(*g.mutable_request());
  // An agent that replays: answered from its log while the replay lasts (agent/replay.cc).
  if (Replay(live, request)) return;
  const uint64_t call_id = request.call_id();
  auto refuse = [&](absl::Status s) {
    vault::v1::HostFrame reply;
    reply.mutable_response()->set_call_id(call_id);
    reply.mutable_response()->set_code(static_cast<int32_t>(s.code()));
    reply.mutable_response()->set_message(std::string(s.message()));
    SendFrame(live, reply);
  };
  if (request.call_case() == HostRequest::CALL_NOT_SET) {
    refuse(absl::UnimplementedError("unknown host call (this vault speaks protocol version 1)"));
    return;
  }
  {
    absl::MutexLock lock(&live->mu);
    live->record.mutable_counters()->set_host_calls(live->record.counters().host_calls() + 1);
  }
  // Heartbeats and exits are never limited (nor do they need the principal's quota looked up).
  if (request.call_case() != HostRequest::kHeartbeat && request.call_case() != HostRequest::kExit) {
    std::optional<vault::v1::TrustEntry> trust;
    if (absl::StatusOr<capability::PublicKey> k = capability::PublicKey::FromText(live->principal);
        k.ok()) {
      trust = policy_->Lookup(*k);
    }
    const uint32_t rate = trust.has_value() && trust->quota().max_calls_per_second() != 0
                              ? trust->quota().max_calls_per_second()
                              : options_.config.default_max_calls_per_second();
    if (!limiter_.Admit(live->principal, rate, absl::Now())) {
      refuse(absl::ResourceExhaustedError(
          absl::StrCat("host-call rate limit: ", rate, " per second for this principal's agents")));
      return;
    }
  }
  if (live->in_flight.load() >= kMaxInFlight) {
    refuse(absl::ResourceExhaustedError(
        absl::StrCat("too many host calls in flight (at most ", kMaxInFlight, ")")));
    return;
  }
  absl::Time received = absl::Now();
  if (const HostCallRow* row = FindHostCall(request.call_case());
      row != nullptr && row->fast_path) {
    // Cheap and never blocking: answered here (counted in flight like the others, so that a
    // migration's drain waits for it).
    live->in_flight.fetch_add(1);
    RunCall(live, std::move(request), std::move(frame), received);
    live->in_flight.fetch_sub(1);
    return;
  }
  live->in_flight.fetch_add(1);
  bool queued = workers_->Schedule(live->principal, [this, live, request = std::move(request),
                                                     frame = std::move(frame), received]() mutable {
    RunCall(live, std::move(request), std::move(frame), received);
    live->in_flight.fetch_sub(1);
  });
  if (!queued) {
    live->in_flight.fetch_sub(1);
    refuse(absl::UnavailableError("the vault is stopping"));
  }
}

void AgentRuntime::Impl::RunCall(const std::shared_ptr<LiveAgent>& live, HostRequest request,
                                 std::string request_bytes, absl::Time received) {
  HostCall c;
  HostCallContext ctx{.services = *this,
                      .live = live,
                      .request = request,
                      .request_bytes = request_bytes,
                      .call = c,
                      .max_payload = options_.config.max_frame_bytes() - kFrameOverhead};
  // 1. The operation and the authority it needs (its row in host_calls/table.cc).
  const HostCallRow* row = FindHostCall(request.call_case());
  if (row == nullptr) {
    c.op = "unknown";
    c.status = absl::UnimplementedError("unknown host call");
  } else {
    c.op = row->op;
    c.durable = row->durable;
    c.audited = row->audited;
    if (row->authorize != nullptr) row->authorize(ctx);
  }
  // Paths name the vault's tree: anything else is a malformed call, not a denial.
  if (c.grant.has_value() && !c.grant->path().empty() && c.grant->path() != "/vault" &&
      !absl::StartsWith(c.grant->path(), "/vault/")) {
    c.status = absl::InvalidArgumentError(
        absl::StrCat("path \"", c.grant->path(), "\" is not in the vault's tree (/vault/...)"));
  }
  // 2. The decision: a lookup in the agent's cached authority.
  bool allowed = true;
  if (c.status.ok() && c.grant.has_value() && !c.allowed_without_grant) {
    if (absl::Status valid = capability::ValidateGrant(*c.grant); !valid.ok()) {
      c.status = absl::InvalidArgumentError(valid.message());
    } else {
      absl::MutexLock lock(&live->mu);
      allowed = live->authority != nullptr && live->authority->Allows(*c.grant);
    }
    if (c.status.ok() && !allowed) {
      c.status = absl::PermissionDeniedError(absl::StrCat(
          "denied: ", c.op, " needs the grant \"", capability::GrantToString(*c.grant), "\""));
    }
  }
  // 3. The handler; none runs once the agent is being handed over (its effects would be lost
  // or duplicated).
  if (c.status.ok()) {
    absl::MutexLock lock(&live->mu);
    if (live->migrating_out && live->effects != nullptr) {
      // An agent that replays: held, unanswered and unlogged (ReleaseHeldCalls).
      live->held_calls.push_back({std::move(request), std::move(request_bytes), received});
      return;
    }
    if (live->migrating_out) {
      c.status = absl::UnavailableError("the agent is migrating: no host call runs during a hop");
    }
  }
  if (c.status.ok() && row != nullptr) row->handle(ctx);
  if (c.deferred) return;  // answered by Deliver or ExpireReceive
  // 4. The answer, and the audit entry for it.
  HostResponse& resp = c.response;
  resp.set_call_id(request.call_id());
  if (!c.status.ok()) {
    resp.clear_result();
    resp.set_code(static_cast<int32_t>(c.status.code()));
    resp.set_message(std::string(c.status.message()));
  }
  bool denied = c.status.code() == absl::StatusCode::kPermissionDenied;
  // Calls of one agent may run on several workers at once: the denial is counted, and the
  // decision to end the agent taken, under its lock before anything is answered, and a call
  // that finds the agent being ended is dropped unanswered.
  uint64_t denials = 0;
  bool newly_flagged = false, end_now = false;
  std::string end_reason;
  {
    absl::MutexLock lock(&live->mu);
    if (live->end_cause != EndCause::kNone && live->end_cause != EndCause::kExitCall) return;
    if (denied) {
      denials = live->record.counters().denials() + 1;
      live->record.mutable_counters()->set_denials(denials);
      if (denials >= options_.config.flag_after_denials() && !live->flagged) {
        live->flagged = true;
        newly_flagged = true;
      }
      if (denials >= options_.config.terminate_after_denials()) {
        end_now = true;
        end_reason = absl::StrCat("denial limit: ", denials, " denied host calls");
        live->end_cause = EndCause::kWatchdog;
        live->end_reason = end_reason;
      }
    }
  }
  // The audit entry: durable ones are written before the answer; asynchronous ones (most calls,
  // denials included) after it, so that hashing and queueing them do not delay the answer.
  std::string out_bytes;
  if (c.audited) {
    out_bytes = c.output_bytes;
    if (out_bytes.empty() && resp.result_case() != HostResponse::RESULT_NOT_SET) {
      resp.SerializeToString(&out_bytes);
    }
  }
  const absl::Duration duration = absl::Now() - received;
  auto audit = [&](bool durable) {
    std::vector<std::pair<std::string, std::string>> details = {
        {"call_id", absl::StrCat(request.call_id())},
        {"duration_us", absl::StrCat(absl::ToInt64Microseconds(duration))},
        {"in", Sha256Hex(request_bytes)},
        {"out", Sha256Hex(out_bytes)},
        {"bytes", absl::StrCat(c.bytes)},
    };
    if (c.grant.has_value()) details.emplace_back("grant", capability::GrantToString(*c.grant));
    if (!c.status.ok() && !denied) details.emplace_back("error", std::string(c.status.message()));
    for (auto& d : c.details) details.push_back(std::move(d));
    Audit(audit::MakeEntry(live->id, absl::StrCat("host.", c.op), c.subject,
                           denied ? vault::v1::AuditEntry::DENIED : vault::v1::AuditEntry::ALLOWED,
                           denied ? std::string(c.status.message()) : std::string(),
                           std::move(details)),
          durable);
  };
  const bool durable = c.durable && !denied;
  if (c.audited && durable) audit(/*durable=*/true);
  vault::v1::HostFrame frame;
  *frame.mutable_response() = std::move(resp);
  SendFrame(live, frame, std::move(c.pass_fd));
  if (c.audited && !durable) audit(/*durable=*/false);
  if (newly_flagged) {
    vault::v1::AuditEntry e =
        audit::MakeEntry(deps_.vault_key->public_key().ToText(), "agent.flagged", live->id,
                         vault::v1::AuditEntry::ALLOWED, "repeated denied host calls",
                         {{"denials", absl::StrCat(denials)}});
    e.set_priority(vault::v1::AuditEntry::HIGH);
    Audit(std::move(e), /*durable=*/true);
  }
  if (end_now) End(live, EndCause::kWatchdog, end_reason);
}

absl::StatusOr<uint64_t> AgentRuntime::Impl::Deliver(const std::shared_ptr<LiveAgent>& to,
                                                     vault::v1::Message message) {
  if (message.id() == 0) message.set_id(next_message_id_.fetch_add(1));
  message.set_sent_unix_ms(absl::ToUnixMillis(absl::Now()));
  const uint64_t id = message.id();
  std::optional<LiveAgent::PendingReceive> waiting;
  {
    absl::MutexLock lock(&to->mu);
    if (!to->running) {
      return absl::FailedPreconditionError(absl::StrCat("agent ", to->id, " is not running"));
    }
    to->record.mutable_counters()->set_messages_received(to->record.counters().messages_received() +
                                                         1);
    // (A frozen agent that replays is not answered: its log is being handed over.)
    if (to->pending_receive.has_value() && !(to->migrating_out && to->effects != nullptr)) {
      waiting = std::move(to->pending_receive);
      to->pending_receive.reset();
    } else {
      if (to->mailbox.size() >= options_.config.mailbox_capacity()) {
        to->record.mutable_counters()->set_messages_received(
            to->record.counters().messages_received() - 1);
        return absl::ResourceExhaustedError(
            absl::StrCat("the mailbox of agent ", to->id, " is full (",
                         options_.config.mailbox_capacity(), " messages)"));
      }
      to->mailbox.push_back({std::move(message), 0});
      return id;
    }
  }
  // Its receive was waiting: answer it now.
  AnswerReceive(to, *std::move(waiting), std::move(message));
  return id;
}

void AgentRuntime::Impl::AnswerReceive(const std::shared_ptr<LiveAgent>& to,
                                       LiveAgent::PendingReceive waiting,
                                       vault::v1::Message message) {
  vault::v1::HostFrame frame;
  HostResponse* resp = frame.mutable_response();
  resp->set_call_id(waiting.call_id);
  const std::string from = message.from();
  const size_t bytes = message.data().size();
  *resp->mutable_receive()->mutable_message() = std::move(message);
  std::string out;
  resp->SerializeToString(&out);
  const absl::Duration waited = absl::Now() - waiting.started;
  // The empty receives before this one (taken before the answer: the agent may poll again at
  // once, and those come after it).
  uint64_t empty_before = 0;
  {
    absl::MutexLock lock(&to->mu);
    empty_before = std::exchange(to->empty_receives, 0);
  }
  // The receiver first (it waits for this message); its asynchronous audit entry after.
  SendFrame(to, frame);
  std::vector<std::pair<std::string, std::string>> details = {
      {"call_id", absl::StrCat(waiting.call_id)},
      {"duration_us", absl::StrCat(absl::ToInt64Microseconds(waited))},
      {"in", Sha256Hex(waiting.request_bytes)},
      {"out", Sha256Hex(out)},
      {"bytes", absl::StrCat(bytes)}};
  if (empty_before > 0) details.emplace_back("empty_receives", absl::StrCat(empty_before));
  Audit(audit::MakeEntry(to->id, "host.receive", from, vault::v1::AuditEntry::ALLOWED, "",
                         std::move(details)),
        /*durable=*/false);
}

void AgentRuntime::Impl::ExpireReceive(const std::shared_ptr<LiveAgent>& live) {
  std::optional<LiveAgent::PendingReceive> waiting;
  {
    absl::MutexLock lock(&live->mu);
    if (!live->pending_receive.has_value() || absl::Now() < live->pending_receive->deadline) return;
    waiting = std::move(live->pending_receive);
    live->pending_receive.reset();
    ++live->empty_receives;  // counted, not an entry of its own (see LiveAgent)
  }
  vault::v1::HostFrame frame;
  frame.mutable_response()->set_call_id(waiting->call_id);
  frame.mutable_response()->mutable_receive()->set_timed_out(true);
  SendFrame(live, frame);
}

}  // namespace vault::agent
