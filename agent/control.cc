// Signed operator requests about one agent (ControlPayload): pause, resume, terminate, send,
// query, status and logs. Given to any member, a request is forwarded to the vault it names, and
// that vault checks it as if it had been given there (docs/migration.md "Remote control").
#include <algorithm>
#include <memory>
#include <string>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "agent/internal/runtime_impl.h"
#include "common/status_macros.h"

namespace vault::agent {
namespace {

using vault::v1::AgentRecord;
using vault::v1::ControlPayload;

constexpr size_t kLogPage = 500;
constexpr size_t kLogPageBytes = 4 << 20;  // (one line may be more: a page has one at least)
constexpr uint32_t kMaxLogWaitMs = 10000;
// Requests that wait (QUERY, LOGS) under way at once per signing key: the executor that runs
// them is shared by every operator of the federation.
constexpr int kMaxWaitingPerSigner = 4;

// What a forwarded request may take at the vault that serves it.
absl::Duration ServeTime(const ControlPayload& p) {
  switch (p.action()) {
    case ControlPayload::QUERY:
      return absl::Milliseconds(p.timeout_ms() == 0 ? 30000 : p.timeout_ms());
    case ControlPayload::LOGS:
      return absl::Milliseconds(p.wait_ms());
    case ControlPayload::TERMINATE:
      return absl::Seconds(10);  // the wait for the exit to be recorded
    default:
      return absl::ZeroDuration();
  }
}

}  // namespace

absl::StatusOr<vault::v1::ControlResponse> AgentRuntime::Impl::Control(
    const vault::v1::ControlRequest& request, bool forwarded) {
  ControlPayload p;
  if (!p.ParseFromString(request.payload())) {
    return absl::InvalidArgumentError("the control payload does not parse");
  }
  VAULT_ASSIGN_OR_RETURN(capability::PublicKey signer, capability::PublicKey::FromRaw(p.signer()));
  if (absl::Status s =
          signer.Verify(absl::StrCat(kControlDomain, request.payload()), request.signature());
      !s.ok()) {
    return absl::UnauthenticatedError(
        absl::StrCat("the control request's signature: ", s.message()));
  }
  if (p.action() == ControlPayload::QUERY && p.timeout_ms() > kMaxQueryTimeoutMs) {
    return absl::InvalidArgumentError("a query's timeout is at most 600 s");
  }
  if (p.action() == ControlPayload::LOGS && p.wait_ms() > kMaxLogWaitMs) {
    return absl::InvalidArgumentError("a logs request waits at most 10 s");
  }
  if (p.vault() != deps_.vault_key->public_key().raw()) {
    // For the member that hosts the agent now: it checks everything again itself.
    if (!forwarded) return ForwardControl(request, p.vault(), ServeTime(p));
    return absl::PermissionDeniedError("the control request is for another vault");
  }
  absl::Time now = absl::Now();
  absl::Time issued = absl::FromUnixMillis(p.issued_unix_ms());
  if (issued < now - kControlWindow || issued > now + kControlWindow) {
    return absl::PermissionDeniedError(
        "the control request is stale or from the future (more than 5 minutes off this "
        "vault's clock)");
  }
  if (p.nonce().size() != 16) return absl::InvalidArgumentError("the nonce must be 16 bytes");
  const std::string action_name = ControlPayload::Action_Name(p.action());
  if (p.action() == ControlPayload::ACTION_UNSPECIFIED || action_name.empty()) {
    return absl::InvalidArgumentError("unknown control action");
  }
  // Who may: the agent's spawning principal, or an administrator of this vault. Asked of the
  // record (an agent that ended or departed here still has one), so reads work after the end.
  std::shared_ptr<LiveAgent> live = Find(p.agent_id());
  std::string principal;
  if (live != nullptr) {
    absl::MutexLock lock(&live->mu);
    principal = live->record.principal();
  } else {
    VAULT_ASSIGN_OR_RETURN(AgentRecord stored, store_->Get(p.agent_id()));
    principal = stored.principal();
  }
  std::optional<vault::v1::TrustEntry> trust = policy_->Lookup(signer);
  bool admin = trust.has_value() && trust->admin();
  if (!admin && signer.ToText() != principal) {
    Audit(audit::MakeEntry(signer.ToText(), "agent.control", p.agent_id(),
                           vault::v1::AuditEntry::DENIED,
                           "neither the spawning principal nor a vault administrator",
                           {{"action", action_name}}),
          /*durable=*/true);
    return absl::PermissionDeniedError(absl::StrCat(
        signer.ToText(), " may not control agent ", p.agent_id(),
        " (only its spawning principal or an administrator of ", options_.vault_name, " may)"));
  }
  {
    absl::MutexLock lock(&mu_);
    std::string key = absl::StrCat(signer.raw(), p.nonce());
    if (nonces_.contains(key)) {
      return absl::AlreadyExistsError("this control request was already used (replay)");
    }
    nonces_[key] = issued + kControlWindow;
  }
  vault::v1::ControlResponse response;
  const bool waits = p.action() == ControlPayload::QUERY || p.action() == ControlPayload::LOGS;
  if (waits) {
    absl::MutexLock lock(&mu_);
    int& n = waiting_by_signer_[signer.raw()];
    if (n >= kMaxWaitingPerSigner) {
      return absl::ResourceExhaustedError(absl::StrCat(
          signer.ShortId(), " has ", kMaxWaitingPerSigner, " queries or log follows under way at ",
          options_.vault_name, " already: wait for one to end"));
    }
    ++n;
  }
  absl::Cleanup done_waiting = [&] {
    if (!waits) return;
    absl::MutexLock lock(&mu_);
    if (--waiting_by_signer_[signer.raw()] <= 0) waiting_by_signer_.erase(signer.raw());
  };
  // Reads: whatever this vault holds of the agent, running here or not.
  if (p.action() == ControlPayload::STATUS) {
    VAULT_ASSIGN_OR_RETURN(*response.mutable_status(), Get(p.agent_id()));
    return response;
  }
  if (p.action() == ControlPayload::LOGS) {
    std::vector<vault::v1::AgentLogLine> lines =
        store_->ReadLogs(p.agent_id(), p.from_seq(), kLogPage);
    // Waits in slices, to answer soon after the agent ends or leaves here.
    const absl::Time deadline = absl::Now() + absl::Milliseconds(p.wait_ms());
    while (lines.empty() && absl::Now() < deadline && Find(p.agent_id()) != nullptr) {
      if (store_->WaitForLogs(p.agent_id(), p.from_seq(),
                              std::min(deadline, absl::Now() + absl::Milliseconds(200)))) {
        break;
      }
    }
    // Whether lines may still come first, then the lines: a line written before the agent's
    // process was gone is in this read. (Its state reads DEPARTED before the output it left in
    // its pipe is read: the process is what says.)
    response.set_final_lines(Find(p.agent_id()) == nullptr);
    VAULT_ASSIGN_OR_RETURN(*response.mutable_status(), Get(p.agent_id()));
    lines = store_->ReadLogs(p.agent_id(), p.from_seq(), kLogPage);
    size_t bytes = 0;
    for (vault::v1::AgentLogLine& l : lines) {
      bytes += l.ByteSizeLong();
      if (bytes > kLogPageBytes && response.lines_size() > 0) {
        response.set_final_lines(false);  // (more wait)
        break;
      }
      *response.add_lines() = std::move(l);
    }
    return response;
  }
  if (live != nullptr) {
    absl::MutexLock lock(&live->mu);
    if (live->record.state() == vault::v1::DEPARTED) live = nullptr;  // (its process is ending)
  }
  if (live == nullptr) {
    if (std::string note = DepartedNote(p.agent_id()); !note.empty()) {
      return absl::FailedPreconditionError(note);
    }
    VAULT_ASSIGN_OR_RETURN(AgentRecord stored, store_->Get(p.agent_id()));
    return absl::FailedPreconditionError(
        absl::StrCat("agent ", p.agent_id(), " has ended (", StateName(stored.state()), ")"));
  }
  const std::string reason =
      p.reason().empty() ? absl::StrCat("by ", signer.ShortId()) : p.reason();
  switch (p.action()) {
    case ControlPayload::PAUSE: {
      absl::MutexLock lock(&live->mu);
      if (live->record.state() != vault::v1::RUNNING || !live->running) {
        return absl::FailedPreconditionError(absl::StrCat(
            "agent ", live->id, " is ", StateName(live->record.state()), ", not running"));
      }
      VAULT_RETURN_IF_ERROR(live->handle->Pause());
      VAULT_RETURN_IF_ERROR(Transition(*live, vault::v1::PAUSED, reason, false));
      response.set_state(vault::v1::PAUSED);
      return response;
    }
    case ControlPayload::RESUME: {
      absl::MutexLock lock(&live->mu);
      if (live->record.state() != vault::v1::PAUSED || !live->running) {
        return absl::FailedPreconditionError(absl::StrCat(
            "agent ", live->id, " is ", StateName(live->record.state()), ", not paused"));
      }
      VAULT_RETURN_IF_ERROR(live->handle->Resume());
      live->last_heartbeat = absl::Now();
      VAULT_RETURN_IF_ERROR(Transition(*live, vault::v1::RUNNING, reason, false));
      response.set_state(vault::v1::RUNNING);
      return response;
    }
    case ControlPayload::TERMINATE: {
      {
        absl::MutexLock lock(&live->mu);
        if (!live->running) {
          // Recorded but not running (agents disabled): end the record itself.
          live->end_cause = EndCause::kTerminated;
          VAULT_RETURN_IF_ERROR(Transition(*live, vault::v1::TERMINATED, reason, false));
          absl::MutexLock agents_lock(&mu_);
          ForgetLocked(live);
          response.set_state(vault::v1::TERMINATED);
          return response;
        }
      }
      End(live, EndCause::kTerminated, absl::StrCat("terminated: ", reason));
      // Wait (bounded) for the exit to be recorded, so the answer is the final state.
      absl::Time deadline = absl::Now() + absl::Seconds(10);
      absl::MutexLock lock(&live->mu);
      live->mu.AwaitWithDeadline(absl::Condition(&StoppedRunning, live.get()), deadline);
      response.set_state(live->record.state());
      return response;
    }
    case ControlPayload::SEND: {
      VAULT_ASSIGN_OR_RETURN(uint64_t id,
                             SendFromOperator(p.agent_id(), p.type(), p.data(), signer.ToText()));
      response.set_message_id(id);
      return response;
    }
    case ControlPayload::QUERY: {
      vault::v1::QueryRequest query;
      query.set_id(p.agent_id());
      query.set_question(p.question());
      query.set_data(p.data());
      query.set_timeout_ms(p.timeout_ms());
      VAULT_ASSIGN_OR_RETURN(*response.mutable_answer(), Query(query));
      return response;
    }
    default:
      return absl::InvalidArgumentError("unknown control action");
  }
}

}  // namespace vault::agent
