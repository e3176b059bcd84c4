// The operator's API: listing, status, control, messages and queries.
#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "agent/internal/runtime_impl.h"
#include "capability/grant.h"
#include "cas/digest.h"
#include "cas/digest_proto.h"
#include "common/file_util.h"
#include "common/log_fields.h"
#include "common/random.h"
#include "common/status_macros.h"
#include "spdlog/spdlog.h"

namespace vault::agent {

using vault::v1::AgentRecord;
using vault::v1::AgentState;

// ---------------------------------------------------------------------------------------------
// Operators: listing, status, control, messages.

vault::v1::ListAgentsResponse AgentRuntime::Impl::List(const vault::v1::ListAgentsRequest& req) {
  vault::v1::ListAgentsResponse response;
  absl::StatusOr<std::vector<AgentRecord>> records = store_->LoadAll();
  if (!records.ok()) return response;
  for (AgentRecord& stored : *records) {
    AgentRecord r = std::move(stored);
    uint64_t memory = 0;
    if (std::shared_ptr<LiveAgent> live = Find(r.id()); live != nullptr) {
      absl::MutexLock lock(&live->mu);
      r = live->record;  // newer counters
      if (live->running && live->handle != nullptr) {
        absl::StatusOr<sandbox::Usage> u = live->handle->GetUsage();
        if (u.ok()) memory = u->memory_current_bytes;
      }
    }
    if (req.state() != vault::v1::AGENT_STATE_UNSPECIFIED && r.state() != req.state()) continue;
    if (!req.spawned_by().empty() && r.principal() != req.spawned_by() &&
        r.parent() != req.spawned_by()) {
      continue;
    }
    if (req.has_grant() != vault::v1::Grant::KIND_UNSPECIFIED &&
        std::none_of(r.grants().begin(), r.grants().end(),
                     [&](const vault::v1::Grant& g) { return g.kind() == req.has_grant(); })) {
      continue;
    }
    if (req.min_memory_bytes() > 0 && memory < req.min_memory_bytes()) continue;
    vault::v1::AgentSummary* s = response.add_agents();
    s->set_id(r.id());
    s->set_state(r.state());
    s->set_principal(r.principal());
    s->set_purpose(r.spec().purpose());
    s->set_parent(r.parent());
    s->set_spawned_unix_ms(r.spawned_unix_ms());
    s->set_memory_bytes(memory);
  }
  return response;
}

absl::StatusOr<vault::v1::AgentStatus> AgentRuntime::Impl::Get(const std::string& id) {
  vault::v1::AgentStatus status;
  std::shared_ptr<LiveAgent> live = Find(id);
  if (live == nullptr) {
    VAULT_ASSIGN_OR_RETURN(*status.mutable_record(), store_->Get(id));
    status.set_cpu_ms(status.record().cpu_ms());
    status.set_peak_memory_bytes(status.record().peak_memory_bytes());
    return status;
  }
  absl::MutexLock lock(&live->mu);
  *status.mutable_record() = live->record;
  status.set_cpu_ms(live->record.cpu_ms());
  status.set_peak_memory_bytes(live->record.peak_memory_bytes());
  status.set_mailbox_depth(live->mailbox.size());
  status.set_flagged(live->flagged);
  if (live->running && live->handle != nullptr) {
    status.set_uptime_ms(absl::ToInt64Milliseconds(absl::Now() - live->started));
    absl::StatusOr<sandbox::Usage> u = live->handle->GetUsage();
    if (u.ok()) {
      status.set_memory_bytes(u->memory_current_bytes);
      status.set_peak_memory_bytes(std::max(status.peak_memory_bytes(), u->memory_peak_bytes));
      status.set_cpu_ms(live->record.cpu_ms() +
                        static_cast<uint64_t>(absl::ToInt64Milliseconds(u->cpu_time)));
      status.set_storage_bytes(u->work_bytes);
    }
  }
  return status;
}

absl::StatusOr<uint64_t> AgentRuntime::Impl::SendFromOperator(const std::string& id,
                                                              const std::string& type,
                                                              const std::string& data,
                                                              const std::string& by) {
  std::shared_ptr<LiveAgent> live = Find(id);
  if (live == nullptr) {
    VAULT_RETURN_IF_ERROR(store_->Get(id).status());
    if (std::string note = DepartedNote(id); !note.empty()) {
      return absl::FailedPreconditionError(note + DepartedFix(id));
    }
    return absl::FailedPreconditionError(absl::StrCat("agent ", id, " has ended"));
  }
  if (type.empty() || type.size() > 64) {
    return absl::InvalidArgumentError("a message type is 1-64 characters");
  }
  // Stored like an agent's message (signed by this vault, from "operator"): it waits in the
  // mailbox across a restart, and travels with the agent.
  vault::v1::MessageRecord record;
  record.set_from("operator");
  record.set_to(id);
  record.set_type(type);
  record.set_sending_vault(options_.vault_name);
  record.set_sent_unix_ms(absl::ToUnixMillis(absl::Now()));
  VAULT_ASSIGN_OR_RETURN(vault::v1::SignedMessage signed_message,
                         messaging::SignMessage(record, data, "", *deps_.vault_key));
  VAULT_ASSIGN_OR_RETURN(uint64_t message_id, AcceptMail(live, signed_message, record, {}));
  Audit(audit::MakeEntry(by, "agent.message", id, vault::v1::AuditEntry::ALLOWED, "",
                         {{"type", type},
                          {"bytes", absl::StrCat(data.size())},
                          {"message_id", absl::StrCat(message_id)}}),
        /*durable=*/false);
  return message_id;
}

absl::StatusOr<vault::v1::QueryResponse> AgentRuntime::Impl::Query(
    const vault::v1::QueryRequest& request) {
  std::shared_ptr<LiveAgent> live = Find(request.id());
  if (live == nullptr) {
    VAULT_RETURN_IF_ERROR(store_->Get(request.id()).status());
    if (std::string note = DepartedNote(request.id()); !note.empty()) {
      return absl::FailedPreconditionError(note + DepartedFix(request.id()));
    }
    return absl::FailedPreconditionError(absl::StrCat("agent ", request.id(), " has ended"));
  }
  if (request.timeout_ms() > kMaxQueryTimeoutMs) {
    return absl::InvalidArgumentError("a query's timeout is at most 600 s");
  }
  {
    // A question given to an agent mid-hop would wait in a mailbox that does not travel.
    absl::MutexLock lock(&live->mu);
    if (live->record.state() == vault::v1::MIGRATING) {
      return absl::UnavailableError(
          absl::StrCat("agent ", request.id(), " is migrating: try again in a moment"));
    }
  }
  vault::v1::Message m;
  m.set_from("operator");
  m.set_type("vault.query");
  m.set_data(request.question());
  m.set_attachment(request.data());
  uint64_t id = next_message_id_.fetch_add(1);
  m.set_id(id);
  auto pending = std::make_shared<PendingQuery>();
  pending->agent = request.id();
  {
    absl::MutexLock lock(&mu_);
    queries_[id] = pending;
  }
  absl::StatusOr<uint64_t> delivered = Deliver(live, std::move(m));
  absl::MutexLock lock(&mu_);
  if (!delivered.ok()) {
    queries_.erase(id);
    return delivered.status();
  }
  absl::Duration timeout =
      absl::Milliseconds(request.timeout_ms() == 0 ? 30000 : request.timeout_ms());
  absl::Time deadline = absl::Now() + timeout;
  while (!pending->answered && !stopped_) {
    if (queries_cv_.WaitWithDeadline(&mu_, deadline)) break;
  }
  queries_.erase(id);
  if (!pending->answered) {
    return absl::DeadlineExceededError(absl::StrCat(
        "agent ", request.id(), " did not answer within ", absl::FormatDuration(timeout)));
  }
  if (pending->response.type() == "vault.departed") {
    return absl::FailedPreconditionError(
        absl::StrCat(DepartedNote(request.id()), " before answering", DepartedFix(request.id())));
  }
  if (pending->response.type() == "vault.ended") {
    return absl::AbortedError(absl::StrCat("agent ", request.id(), " ended before answering"));
  }
  return pending->response;
}

}  // namespace vault::agent
