// Spawning and launching agents: the spawn's checks, the record and its transitions, the
// process in its sandbox, its end and its exit.
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
#include "capability/text_form.h"
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
// Spawning.

bool AgentRuntime::Impl::AgentsEnabled() const {
  return deps_.agents_enabled && deps_.sandboxes != nullptr && !deps_.sandboxes->empty();
}

absl::Status AgentRuntime::Impl::CheckAgentsEnabled() const {
  if (AgentsEnabled()) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("agents are disabled on this vault: ", deps_.disabled_reason));
}

absl::StatusOr<sandbox::Sandbox*> AgentRuntime::Impl::SandboxFor(absl::string_view type) const {
  VAULT_RETURN_IF_ERROR(CheckAgentsEnabled());
  return deps_.sandboxes->Find(type);
}

absl::StatusOr<vault::v1::SpawnResponse> AgentRuntime::Impl::Spawn(
    const vault::v1::SpawnRequest& request) {
  // (Before the request is read: SandboxFor below says the same for the spec's type.)
  VAULT_RETURN_IF_ERROR(CheckAgentsEnabled());
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return absl::UnavailableError("the vault is stopping");
  }
  const vault::v1::AgentSpec& spec = request.spec();
  if (absl::StatusOr<sandbox::Sandbox*> type = SandboxFor(spec.sandbox()); !type.ok()) {
    return type.status();
  }
  if (!spec.has_code_digest()) {
    return absl::InvalidArgumentError(
        "the spec must name its code by digest (vaultctl uploads a code file first)");
  }
  VAULT_RETURN_IF_ERROR(CheckSpecForms(spec));
  if (request.chain().links_size() == 0) {
    return absl::InvalidArgumentError("a spawn needs a chain ending in a SPAWN link");
  }
  // The chain: every rule of design §5, rooted in a principal this vault trusts, ending here.
  capability::VerifyContext ctx = BaseContext();
  ctx.trusted_root = [this](const capability::PublicKey& key) {
    return policy_->Lookup(key).has_value();
  };
  capability::ChainVerifier verifier(&link_cache_);
  absl::StatusOr<capability::VerifiedChain> verified = verifier.Verify(request.chain(), ctx);
  if (!verified.ok()) {
    Audit(audit::MakeEntry("unverified", "agent.spawn", "", vault::v1::AuditEntry::DENIED,
                           std::string(verified.status().message()), {{"purpose", spec.purpose()}}),
          /*durable=*/true);
    return absl::PermissionDeniedError(
        absl::StrCat("the spawn chain is refused: ", verified.status().message()));
  }
  absl::StatusOr<vault::v1::LinkPayload> last =
      capability::ParseLinkPayload(request.chain().links().rbegin()->payload());
  if (!last.ok()) return last.status();
  if (last->kind() != vault::v1::LinkPayload::SPAWN) {
    return absl::InvalidArgumentError(
        "the chain's last link must be a SPAWN link (principal -> this vault)");
  }
  VAULT_RETURN_IF_ERROR(ValidateAgentId(verified->agent_id));
  const std::string principal = verified->root->ToText();
  // What the spec claims is checked against what was signed, never taken on its word.
  if (!spec.id().empty() && spec.id() != verified->agent_id) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the spec asks for id ", spec.id(), " but its SPAWN link names ", verified->agent_id));
  }
  if (!spec.spawned_by().empty() && spec.spawned_by() != principal) {
    return absl::PermissionDeniedError(absl::StrCat("the spec says it is spawned by ",
                                                    spec.spawned_by(),
                                                    " but its chain is rooted in ", principal));
  }
  std::optional<vault::v1::TrustEntry> trust = policy_->Lookup(*verified->root);
  if (!trust.has_value()) return absl::PermissionDeniedError("the root principal is not trusted");
  if (verified->code.sha256() != spec.code_digest().sha256() ||
      verified->code.size() != spec.code_digest().size()) {
    return absl::InvalidArgumentError("the spec's code digest differs from the SPAWN link's");
  }
  // The spec and the link must agree on the authority; the link is what was signed.
  google::protobuf::RepeatedPtrField<vault::v1::Grant> chain_grants(verified->grants.begin(),
                                                                    verified->grants.end());
  if (!capability::IsSubset(spec.grants(), chain_grants).ok() ||
      !capability::IsSubset(chain_grants, spec.grants()).ok()) {
    return absl::InvalidArgumentError("the spec's grants differ from the SPAWN link's");
  }
  // The operator's ceiling for this principal.
  if (absl::Status s = capability::IsSubset(chain_grants, trust->ceiling()); !s.ok()) {
    Audit(audit::MakeEntry(principal, "agent.spawn", verified->agent_id,
                           vault::v1::AuditEntry::DENIED, std::string(s.message()),
                           {{"purpose", spec.purpose()}}),
          /*durable=*/true);
    return absl::PermissionDeniedError(CeilingRefusal(chain_grants, *trust));
  }
  uint32_t max_agents = trust->quota().max_agents() != 0 ? trust->quota().max_agents()
                                                         : options_.config.default_max_agents();
  if (CountLive(principal) >= max_agents) {
    return absl::ResourceExhaustedError(absl::StrCat("principal ", principal, " already runs ",
                                                     max_agents, " agents here (its quota)"));
  }
  // The code: present, and signed when the spec asks for it.
  VAULT_ASSIGN_OR_RETURN(cas::Digest code_digest, ToDigest(spec.code_digest()));
  if (code_digest.size() > kMaxCodeBytes) {
    return absl::InvalidArgumentError("the code object is larger than 256 MiB");
  }
  VAULT_ASSIGN_OR_RETURN(bool present, deps_.cas->Contains(code_digest));
  if (!present) {
    return absl::NotFoundError(
        absl::StrCat("the code ", code_digest.ToString(), " is not in this vault's CAS"));
  }
  if (!spec.code_signer().empty()) {
    VAULT_ASSIGN_OR_RETURN(capability::PublicKey signer,
                           capability::PublicKey::FromText(spec.code_signer()));
    absl::Status sig =
        signer.Verify(absl::StrCat(kCodeDomain, code_digest.sha256()), request.code_signature());
    if (!sig.ok()) {
      return absl::PermissionDeniedError(
          absl::StrCat("the code is not signed by ", spec.code_signer(), " (", sig.message(), ")"));
    }
  }
  AgentRecord record;
  record.set_id(verified->agent_id);
  *record.mutable_spec() = spec;
  std::vector<std::string> warnings;
  if (spec.purpose().empty()) {
    record.mutable_spec()->set_purpose(std::string(kDefaultPurpose));
    warnings.push_back(absl::StrCat("the spec has no purpose; recorded as \"", kDefaultPurpose,
                                    "\" (the purpose is the motivation of its audit entries)"));
  }
  *record.mutable_chain() = request.chain();
  for (vault::v1::Grant& g : capability::Intersect(chain_grants, trust->ceiling())) {
    *record.add_grants() = std::move(g);
  }
  *record.mutable_constraints() =
      capability::IntersectConstraints(verified->constraints, trust->ceiling_constraints());
  record.set_principal(principal);
  record.set_hop(verified->hop);
  record.set_home_vault(options_.vault_name);
  VAULT_ASSIGN_OR_RETURN(
      std::shared_ptr<LiveAgent> live,
      CreateAndLaunch(std::move(record),
                      request.has_initial_state() ? &request.initial_state() : nullptr));
  vault::v1::SpawnResponse response;
  absl::MutexLock lock(&live->mu);
  response.set_agent_id(live->id);
  *response.mutable_grants() = live->record.grants();
  *response.mutable_constraints() = live->record.constraints();
  response.set_state(live->record.state());
  for (std::string& w : warnings) response.add_warnings(std::move(w));
  return response;
}

absl::Status CheckSpecForms(const vault::v1::AgentSpec& spec) {
  auto check_name = [](absl::string_view what, const std::string& name) -> absl::Status {
    if (absl::Status s = ValidateAgentId(name); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(what, " \"", absl::CHexEscape(name),
                                                     "\" must be 1-64 of [a-z0-9-], "
                                                     "not starting with '-'"));
    }
    return absl::OkStatus();
  };
  if (!spec.name().empty()) VAULT_RETURN_IF_ERROR(check_name("agent name", spec.name()));
  if (spec.groups_size() > 64) {
    return absl::InvalidArgumentError("an agent belongs to at most 64 groups");
  }
  for (int i = 0; i < spec.groups_size(); ++i) {
    VAULT_RETURN_IF_ERROR(check_name("group", spec.groups(i)));
    if (i > 0 && !(spec.groups(i - 1) < spec.groups(i))) {
      return absl::InvalidArgumentError("the spec's groups must be sorted and unique");
    }
  }
  return capability::CheckSandboxFields(spec);
}

absl::StatusOr<std::shared_ptr<LiveAgent>> AgentRuntime::Impl::CreateAndLaunch(
    AgentRecord record, const std::string* initial_state) {
  if (initial_state != nullptr) {
    // Any size the call carried (server.max_message_bytes): agents read states in pieces.
    cas::Digest d = cas::Digest::Of(*initial_state);
    VAULT_RETURN_IF_ERROR(cas::PutObject(*deps_.cas, d, *initial_state).status());
    *record.mutable_state_digest() = FromDigest(d);
    record.set_has_state(true);
  }
  // The code is confirmed in the CAS: no collection takes it before this record holds it
  // (design §12).
  {
    VAULT_ASSIGN_OR_RETURN(cas::Digest code, ToDigest(record.spec().code_digest()));
    VAULT_ASSIGN_OR_RETURN(bool present, cas::TouchIfStored(*deps_.cas, code));
    if (!present) {
      return absl::NotFoundError(
          absl::StrCat("the code ", code.ToString(), " is not in this vault's CAS"));
    }
  }
  int64_t now_ms = absl::ToUnixMillis(absl::Now());
  record.set_state(vault::v1::SPAWNED);
  record.set_spawned_unix_ms(now_ms);
  record.set_updated_unix_ms(now_ms);
  auto live = std::make_shared<LiveAgent>(record.id(), record.principal());
  const std::string name = record.spec().name();
  {
    absl::MutexLock agent_lock(&live->mu);
    live->record = std::move(record);
  }
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return absl::UnavailableError("the vault is stopping");
    if (agents_.contains(live->id)) {
      return absl::AlreadyExistsError(absl::StrCat("agent ", live->id, " already exists"));
    }
    // Ended agents keep their id forever.
    if (store_->Get(live->id).ok()) {
      return absl::AlreadyExistsError(absl::StrCat("agent ", live->id, " existed here"));
    }
    if (!IndexNameLocked(live, name)) {
      return absl::AlreadyExistsError(
          absl::StrCat("principal ", live->principal, " already has a live agent named \"", name,
                       "\" (", names_[absl::StrCat(live->principal, "\n", name)]->id,
                       "): a name is unique among its principal's live agents"));
    }
    agents_[live->id] = live;
  }
  // The spawn's audit entry is written with the record's first state (one durable write).
  vault::v1::AuditEntry entry;
  {
    absl::MutexLock lock(&live->mu);
    std::vector<std::pair<std::string, std::string>> details = {
        {"principal", live->principal},
        {"code", DigestText(live->record.spec().code_digest())},
        {"parent", live->record.parent()},
    };
    if (live->record.spec().sandbox() == "container") {
      // A container agent's code is its image: the journey shows which (docs/containers.md).
      details.emplace_back(
          "image", absl::StrCat("sha256:", absl::BytesToHexString(
                                               live->record.spec().code_digest().sha256())));
    }
    std::string grants;
    for (const vault::v1::Grant& g : live->record.grants()) {
      absl::StrAppend(&grants, grants.empty() ? "" : "; ", capability::GrantToString(g));
    }
    details.emplace_back("grants", grants);
    const std::string actor =
        live->record.parent().empty() ? live->principal : live->record.parent();
    entry = audit::MakeEntry(actor, "agent.spawn", live->id, vault::v1::AuditEntry::ALLOWED,
                             live->record.spec().purpose(), std::move(details));
  }
  absl::Status launched = Launch(live, std::move(entry));
  if (!launched.ok()) {
    common::LogAgent(spdlog::level::warn, live->id, "agent {} could not start: {}", live->id,
                     launched.ToString());
    return absl::Status(launched.code(),
                        absl::StrCat("agent ", live->id, " could not start: ", launched.message()));
  }
  common::LogAgent(spdlog::level::info, live->id, "agent {} spawned by {}", live->id,
                   live->principal);
  return live;
}

// The process of `live`: its code folder, channel, output pipe and sandbox, started with the
// limits of `constraints`. Its record is not read (an agent started at an Offer has none yet).
absl::Status AgentRuntime::Impl::StartProcess(const std::shared_ptr<LiveAgent>& live,
                                              const cas::Digest& code_digest,
                                              const vault::v1::Constraints& constraints,
                                              const vault::v1::AgentSpec& agent_spec) {
  VAULT_ASSIGN_OR_RETURN(sandbox::Sandbox * box, SandboxFor(agent_spec.sandbox()));
  VAULT_ASSIGN_OR_RETURN(sandbox::CodeObject code, code_->Acquire(code_digest));
  live->code_key = code_digest.sha256();
  auto fail = [&](absl::Status s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(live->mu) {
    code_->Release(std::exchange(live->code_key, ""));
    return s;
  };

  int pair[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) {
    return fail(common::PosixError(errno, "socketpair"));
  }
  common::UniqueFd host_end(pair[0]), guest_end(pair[1]);
  fcntl(host_end.get(), F_SETFL, fcntl(host_end.get(), F_GETFL) | O_NONBLOCK);
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) return fail(common::PosixError(errno, "pipe2"));
  common::UniqueFd out_read(out[0]), out_write(out[1]);
  fcntl(out_read.get(), F_SETFL, fcntl(out_read.get(), F_GETFL) | O_NONBLOCK);

  // How to run the code is the sandbox type's to say.
  sandbox::SandboxSpec spec;
  code.command.assign(agent_spec.command().begin(), agent_spec.command().end());
  if (absl::Status set = box->SetProgram(code, &spec); !set.ok()) return fail(set);
  if (absl::Status set =
          box->SetArguments({agent_spec.args().begin(), agent_spec.args().end()},
                            {agent_spec.env().begin(), agent_spec.env().end()}, &spec);
      !set.ok()) {
    return fail(set);
  }
  spec.env.push_back(absl::StrCat("VAULT_AGENT_ID=", live->id));
  spec.env.push_back(absl::StrCat("VAULT_NAME=", options_.vault_name));
  // A fuel budget, for the types that count it (capability::CheckSandboxFields).
  if (constraints.has_max_steps()) {
    spec.env.push_back(absl::StrCat("VAULT_MAX_STEPS=", constraints.max_steps()));
  }
  if (constraints.has_max_allocation_bytes()) {
    spec.env.push_back(absl::StrCat("VAULT_MAX_ALLOCATION=", constraints.max_allocation_bytes()));
  }
  // The SDKs poll for an answer this long before they sleep (docs/host-calls.md, "Latency").
  spec.env.push_back(
      absl::StrCat(kAgentPollWindowEnv, "=", absl::ToInt64Microseconds(poll_window_)));
  spec.channel_fd = guest_end.get();
  spec.stdout_fd = out_write.get();
  spec.stderr_fd = out_write.get();
  spec.limits = LimitsFor(constraints, options_.config);
  // The RFC's container default, (pids-limit 10), unless the constraints say otherwise.
  if (agent_spec.sandbox() == "container" && !constraints.has_max_processes()) {
    spec.limits.max_processes = 10;
  }
  // An interpreter sizes what it holds for the program from its memory limit.
  spec.env.push_back(absl::StrCat("VAULT_MEMORY_BYTES=", spec.limits.memory_bytes));
  spec.name = live->id;
  std::weak_ptr<LiveAgent> weak = live;
  spec.on_exit = [this, weak](const sandbox::ExitInfo& exit) {
    std::shared_ptr<LiveAgent> l = weak.lock();
    if (l == nullptr) return;
    l->exited.store(true);
    if (!lifecycle_->Schedule([this, l, exit] { OnExit(l, exit); })) OnExit(l, exit);
  };
  live->exited.store(false);
  live->welcomed = false;
  live->out_partial.clear();
  live->end_cause = EndCause::kNone;
  live->end_reason.clear();
  live->exit_requested = false;
  live->exit_deadline = absl::InfiniteFuture();
  live->checkpoint_requested = false;
  live->channel_closed_at = absl::InfiniteFuture();
  live->conn = std::make_shared<AgentConnection>(
      std::move(host_end),
      ConnectionOptions{.max_frame = options_.config.max_frame_bytes(),
                        .max_queued_bytes = 4 * size_t{options_.config.max_frame_bytes()}});
  live->out_fd = std::move(out_read);
  live->started = absl::Now();
  live->last_heartbeat = live->started;
  live->running = true;  // before Spawn: on_exit may come at once
  absl::StatusOr<std::unique_ptr<sandbox::SandboxHandle>> handle;
  {
    // No code file is open for writing while a sandbox is cloned (CodeCache::exec_mu).
    absl::ReaderMutexLock exec_lock(&code_->exec_mu());
    handle = box->Spawn(spec);
  }
  guest_end.Reset();
  out_write.Reset();
  if (!handle.ok()) {
    live->running = false;
    live->conn.reset();
    live->out_fd.Reset();
    return fail(handle.status());
  }
  live->handle = *std::move(handle);
  return absl::OkStatus();
}

absl::Status AgentRuntime::Impl::Launch(const std::shared_ptr<LiveAgent>& live,
                                        std::optional<vault::v1::AuditEntry> entry,
                                        bool sync_started, bool defer_io) {
  absl::MutexLock lock(&live->mu);
  AgentRecord& r = live->record;
  // The record, with `entry` when there is one, in one durable write.
  auto persist = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(live->mu) -> absl::Status {
    if (!entry.has_value() && !sync_started && r.state() == vault::v1::RUNNING) {
      r.set_updated_unix_ms(absl::ToUnixMillis(absl::Now()));
      return store_->PutUnsynced(r);
    }
    if (!entry.has_value()) return PersistLocked(*live);
    r.set_updated_unix_ms(absl::ToUnixMillis(absl::Now()));
    return deps_.log
        ->AppendWith(*std::move(entry),
                     [&](rocksdb::WriteBatch* batch)
                         ABSL_NO_THREAD_SAFETY_ANALYSIS { store_->AddPut(batch, r); })
        .status();
  };
  auto fail = [&](absl::Status s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(live->mu) {
    if (!live->code_key.empty()) code_->Release(std::exchange(live->code_key, ""));
    r.set_state(vault::v1::FAILED);
    r.set_reason(absl::StrCat("could not start: ", s.message()));
    r.set_ended_unix_ms(absl::ToUnixMillis(absl::Now()));
    if (entry.has_value()) {
      vault::v1::AuditEntry::Detail* d = entry->add_details();
      d->set_key("error");
      d->set_value(std::string(s.message()));
    }
    (void)persist();
    ForgetReceived(live->id);  // (no process will read its mailbox)
    {
      absl::MutexLock agents_lock(&mu_);
      ForgetLocked(live);
    }
    return s;
  };
  r.set_incarnation(r.incarnation() + 1);
  // Its stored messages (docs/messages.md), before anything can be delivered to it (an arrival
  // has them already: StartArrival).
  if (!live->mail_loaded) {
    if (absl::Status loaded = LoadMailLocked(*live); !loaded.ok()) return fail(loaded);
  }
  // An agent that replays has its log ready before its process is served.
  {
    absl::StatusOr<sandbox::Sandbox*> box = SandboxFor(r.spec().sandbox());
    if (!box.ok()) return fail(box.status());
    live->snapshots = (*box)->can_snapshot();
    if ((*box)->replays()) {
      if (absl::Status loaded = LoadEffectLog(*live); !loaded.ok()) {
        if (live->held && live->handle != nullptr) (void)live->handle->Kill();
        return fail(loaded);
      }
    } else {
      live->effects.reset();
    }
  }
  // A held process (started at the Offer of this arrival: migration/prestart.cc) is adopted;
  // should it have ended meanwhile, its exit is handled as this start's (unless it was handled
  // already, while held: then a process is started).
  if (!live->held || live->conn == nullptr) {
    absl::StatusOr<cas::Digest> code_digest = ToDigest(r.spec().code_digest());
    if (!code_digest.ok()) return fail(code_digest.status());
    absl::Status started = StartProcess(live, *code_digest, r.constraints(), r.spec());
    if (!started.ok()) return fail(started);
  }
  live->held = false;
  live->authority = std::make_unique<capability::AgentAuthority>(
      std::vector<vault::v1::Grant>(r.grants().begin(), r.grants().end()));
  live->started = absl::Now();
  live->last_heartbeat = live->started;
  if (!defer_io) {
    live->conn_token = reactor_->Register(live, live->conn->fd(), /*output=*/false);
    live->out_token = reactor_->Register(live, live->out_fd.get(), /*output=*/true);
  }
  if (r.state() == vault::v1::SPAWNED || r.state() == vault::v1::AGENT_STATE_UNSPECIFIED) {
    r.set_state(vault::v1::RUNNING);
    r.set_reason("started");
  }
  return persist();
}

absl::Status AgentRuntime::Impl::PersistLocked(LiveAgent& live) {
  live.record.set_updated_unix_ms(absl::ToUnixMillis(absl::Now()));
  if (live.ack_with_record.empty()) return store_->Put(live.record);
  rocksdb::WriteBatch batch;
  store_->AddPut(&batch, live.record);
  AddAcksLocked(&batch, live);
  absl::Status written = deps_.db->Write(&batch);
  if (written.ok()) AppliedAcksLocked(live);
  live.ack_with_record.clear();
  return written;
}

absl::Status AgentRuntime::Impl::Transition(
    LiveAgent& live, AgentState to, const std::string& reason, bool high_priority,
    std::vector<std::pair<std::string, std::string>> details, const std::string& action) {
  return WriteTransition(
      live, ApplyTransition(live, to, reason, high_priority, std::move(details), action));
}

PendingTransition AgentRuntime::Impl::ApplyTransition(
    LiveAgent& live, AgentState to, const std::string& reason, bool high_priority,
    std::vector<std::pair<std::string, std::string>> details, const std::string& action) {
  AgentState from = live.record.state();
  live.record.set_state(to);
  live.record.set_reason(reason);
  if (Ended(to)) live.record.set_ended_unix_ms(absl::ToUnixMillis(absl::Now()));
  live.record.set_updated_unix_ms(absl::ToUnixMillis(absl::Now()));
  std::string transfer;  // a migration's, for the log line
  for (const auto& [key, value] : details) {
    if (key == "transfer_id") transfer = value;
  }
  details.emplace_back("from", StateName(from));
  details.emplace_back("incarnation", absl::StrCat(live.record.incarnation()));
  if (live.empty_receives > 0) {
    details.emplace_back("empty_receives", absl::StrCat(live.empty_receives));
    live.empty_receives = 0;
  }
  vault::v1::AuditEntry e =
      audit::MakeEntry(deps_.vault_key->public_key().ToText(),
                       action.empty() ? absl::StrCat("agent.", StateName(to)) : action, live.id,
                       vault::v1::AuditEntry::ALLOWED, reason, std::move(details));
  if (high_priority) e.set_priority(vault::v1::AuditEntry::HIGH);
  return PendingTransition{std::move(e), std::move(transfer),
                           absl::StrCat(StateName(from), " -> ", StateName(to), ": ", reason)};
}

absl::Status AgentRuntime::Impl::WriteTransition(LiveAgent& live, PendingTransition t) {
  // The record and its audit entry in one durable write (one sync, and they never disagree).
  absl::Status written =
      deps_.log
          ->AppendWith(std::move(t.entry),
                       [&](rocksdb::WriteBatch* batch) ABSL_NO_THREAD_SAFETY_ANALYSIS {
                         store_->AddPut(batch, live.record);
                         AddAcksLocked(batch, live);
                       })
          .status();
  if (written.ok()) AppliedAcksLocked(live);
  live.ack_with_record.clear();
  if (!written.ok()) {
    common::LogAgent(spdlog::level::err, live.id, "agent {}: state change not recorded: {}",
                     live.id, written.ToString());
    return written;
  }
  common::LogWith(spdlog::level::info, {.agent = live.id, .transfer = t.transfer}, "agent {}: {}",
                  live.id, t.what);
  return written;
}

void AgentRuntime::Impl::FlushDeparture(LiveAgent& live) {
  if (!live.departure.has_value()) return;
  PendingTransition t = *std::move(live.departure);
  live.departure.reset();
  // A failure is logged; the record on disk then still reads MIGRATING, which the next start
  // settles with Status.
  (void)WriteTransition(live, std::move(t));
}

std::shared_ptr<LiveAgent> AgentRuntime::Impl::Find(const std::string& id) {
  absl::MutexLock lock(&mu_);
  auto it = agents_.find(id);
  return it == agents_.end() ? nullptr : it->second;
}

bool AgentRuntime::Impl::IndexNameLocked(const std::shared_ptr<LiveAgent>& live,
                                         const std::string& name) {
  if (name.empty()) return true;
  std::string key = absl::StrCat(live->principal, "\n", name);
  auto [it, inserted] = names_.try_emplace(key, live);
  if (!inserted && it->second != live) return false;
  name_keys_[live->id] = std::move(key);
  return true;
}

void AgentRuntime::Impl::UnindexNameLocked(const std::shared_ptr<LiveAgent>& live) {
  auto key = name_keys_.find(live->id);
  if (key == name_keys_.end()) return;
  auto it = names_.find(key->second);
  if (it == names_.end() || it->second != live) return;
  names_.erase(it);
  name_keys_.erase(key);
}

std::shared_ptr<LiveAgent> AgentRuntime::Impl::Resolve(const std::string& principal,
                                                       const std::string& to) {
  absl::MutexLock lock(&mu_);
  if (auto it = agents_.find(to); it != agents_.end()) return it->second;
  auto it = names_.find(absl::StrCat(principal, "\n", to));
  return it == names_.end() ? nullptr : it->second;
}

size_t AgentRuntime::Impl::CountLive(const std::string& principal) {
  absl::MutexLock lock(&mu_);
  size_t n = 0;
  for (const auto& [id, live] : agents_) n += live->principal == principal ? 1 : 0;
  return n;
}

void AgentRuntime::Impl::AppendLog(const std::string& id, const std::string& level,
                                   std::string message, uint64_t incarnation) {
  if (message.size() > kMaxLogLine) message.resize(kMaxLogLine);
  vault::v1::AgentLogLine line;
  line.set_unix_ms(absl::ToUnixMillis(absl::Now()));
  line.set_level(level);
  line.set_message(std::move(message));
  line.set_incarnation(incarnation);
  absl::Status s = store_->AppendLog(id, std::move(line));
  if (!s.ok()) {
    common::LogAgent(spdlog::level::warn, id, "agent {}: log line lost: {}", id, s.ToString());
  }
}

void AgentRuntime::Impl::End(const std::shared_ptr<LiveAgent>& live, EndCause cause,
                             const std::string& reason) {
  absl::MutexLock lock(&live->mu);
  if (!live->running) return;
  if (live->end_cause == EndCause::kNone ||
      (cause == EndCause::kVaultStop && live->end_cause != EndCause::kDeparted)) {
    // The first reason wins, except that a stopping vault keeps the record alive (not a
    // departed agent's: its DEPARTED record is what stays).
    live->end_cause = cause;
    live->end_reason = reason;
  }
  if (live->handle != nullptr) {
    absl::Status s = live->handle->Kill();
    if (!s.ok()) {
      common::LogAgent(spdlog::level::warn, live->id, "agent {}: kill: {}", live->id, s.ToString());
    }
  }
}

void AgentRuntime::Impl::StartIo(const std::shared_ptr<LiveAgent>& live) {
  absl::MutexLock lock(&live->mu);
  // Ended meanwhile (its exit handler unregisters only what it finds): nothing to read.
  if (live->conn_token != 0 || !live->running || live->conn == nullptr || live->exited.load() ||
      live->end_cause != EndCause::kNone) {
    return;
  }
  // Its heartbeats count from now: it could send none before.
  live->last_heartbeat = absl::Now();
  live->conn_token = reactor_->Register(live, live->conn->fd(), /*output=*/false);
  live->out_token = reactor_->Register(live, live->out_fd.get(), /*output=*/true);
  if (live->conn->wants_write()) {  // a frame sent before, waiting for room
    reactor_->WantWrite(live->conn_token, live->conn->fd());
  }
}

void AgentRuntime::Impl::OnExit(const std::shared_ptr<LiveAgent>& live,
                                const sandbox::ExitInfo& exit) {
  std::shared_ptr<AgentConnection> conn;
  uint64_t conn_token, out_token;
  {
    absl::MutexLock lock(&live->mu);
    conn = live->conn;
    conn_token = live->conn_token;
    out_token = live->out_token;
  }
  reactor_->Unregister(conn_token);
  reactor_->Unregister(out_token);
  bool held;
  {
    absl::MutexLock lock(&live->mu);
    held = live->held;
  }
  // What it printed last (not for a held process: no agent of that id runs here).
  if (!held) OnOutput(live);
  if (conn != nullptr) conn->Close();
  absl::MutexLock lock(&live->mu);
  // Adopted (Launch) between the two sections: its registrations are this exit's too.
  if (live->conn_token != conn_token) reactor_->Unregister(live->conn_token);
  if (live->out_token != out_token) reactor_->Unregister(live->out_token);
  live->conn_token = 0;
  live->out_token = 0;
  if (live->held) {
    // Started at an Offer and never adopted: nothing to record here.
    live->running = false;
    live->conn.reset();
    live->out_fd.Reset();
    if (!live->code_key.empty()) code_->Release(std::exchange(live->code_key, ""));
    return;
  }
  live->running = false;
  live->conn.reset();
  live->out_fd.Reset();
  live->pending_receive.reset();
  live->mailbox.clear();
  live->mail_loaded = false;
  DropUploads(*this, *live);  // its streaming CAS puts (host_calls/cas_calls.cc)
  AgentRecord& r = live->record;
  r.set_cpu_ms(r.cpu_ms() +
               static_cast<uint64_t>(absl::ToInt64Milliseconds(exit.final_usage.cpu_time)));
  r.set_peak_memory_bytes(std::max(r.peak_memory_bytes(), exit.final_usage.memory_peak_bytes));
  if (!live->code_key.empty()) code_->Release(std::exchange(live->code_key, ""));
  if (!live->out_partial.empty()) {
    AppendLog(live->id, "output", std::move(live->out_partial), r.incarnation());
    live->out_partial.clear();
  }
  AgentState to;
  std::string reason;
  bool high = false;
  switch (live->end_cause) {
    case EndCause::kVaultStop:
      FlushDeparture(*live);       // (defensive: a departed agent's end stays kDeparted)
      (void)PersistLocked(*live);  // stays RUNNING/PAUSED: resumed at the next start
      return;
    case EndCause::kDeparted: {
      // DEPARTED already; the counters of this last run are kept, unless the agent has come
      // back since (its new record must not be overwritten by this old one).
      FlushDeparture(*live);
      absl::MutexLock agents_lock(&mu_);
      auto it = agents_.find(live->id);
      if (it != agents_.end() && it->second == live) {
        (void)PersistLocked(*live);
        agents_.erase(it);
      }
      UnindexNameLocked(live);
      // A question it had not answered is asked again where it went (Query says where).
      AnswerPendingQueriesLocked(live->id, "vault.departed");
      return;
    }
    case EndCause::kTerminated:
      to = vault::v1::TERMINATED;
      reason = live->end_reason;
      break;
    case EndCause::kWatchdog:
    case EndCause::kProtocol:
    case EndCause::kRevoked:
      to = vault::v1::TERMINATED;
      reason = live->end_reason;
      high = true;
      break;
    case EndCause::kExitCall:
      to = live->exit_code == 0 ? vault::v1::COMPLETED : vault::v1::FAILED;
      reason =
          live->end_reason.empty() ? absl::StrCat("exit(", live->exit_code, ")") : live->end_reason;
      r.set_exit_code(live->exit_code);
      break;
    case EndCause::kNone:
    default:
      if (exit.limit != sandbox::LimitHit::kNone) {
        to = vault::v1::TERMINATED;
        reason = absl::StrCat(sandbox::LimitHitName(exit.limit),
                              " limit: ", sandbox::DescribeExit(exit));
        high = true;
      } else if (exit.exited && exit.exit_code == 0) {
        to = vault::v1::COMPLETED;
        reason = "exited with code 0";
      } else {
        to = vault::v1::FAILED;
        reason = sandbox::DescribeExit(exit);
      }
      r.set_exit_code(exit.exited ? exit.exit_code : -exit.signal);
      break;
  }
  (void)Transition(*live, to, reason, high);
  // Its stored mailbox goes (no process will read it); its outbox still drains.
  ForgetReceived(live->id);
  {
    absl::MutexLock agents_lock(&mu_);
    ForgetLocked(live);
    AnswerPendingQueriesLocked(live->id, "vault.ended");
  }
}

void AgentRuntime::Impl::AnswerPendingQueriesLocked(const std::string& agent,
                                                    const std::string& type) {
  for (auto& [id, q] : queries_) {
    if (q->agent == agent && !q->answered) {
      q->answered = true;
      q->response.set_type(type);
    }
  }
  queries_cv_.SignalAll();
}

}  // namespace vault::agent
