#include "agent/runtime.h"

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
#include "common/random.h"
#include "agent/internal/runtime_impl.h"
#include "capability/grant.h"
#include "cas/digest_proto.h"
#include "cas/digest.h"
#include "common/file_util.h"
#include "common/log_fields.h"
#include "common/status_macros.h"
#include "spdlog/spdlog.h"

namespace vault::agent {
namespace {

using vault::v1::AgentRecord;
using vault::v1::AgentState;

constexpr size_t kMaxCodeBytes = 256 << 20;
constexpr absl::Duration kTick = absl::Milliseconds(25);
constexpr absl::Duration kControlWindow = absl::Minutes(5);
constexpr size_t kMaxLogLine = 4096;

bool Ended(AgentState s) {
  return s == vault::v1::TERMINATED || s == vault::v1::COMPLETED || s == vault::v1::FAILED ||
         s == vault::v1::DEPARTED;
}

sandbox::Limits LimitsFor(const vault::v1::Constraints& c, const vault::v1::AgentsConfig& cfg) {
  sandbox::Limits l;
  l.memory_bytes = c.has_max_memory_bytes() ? c.max_memory_bytes() : cfg.default_memory_bytes();
  uint64_t cpu_ms = c.has_max_cpu_ms() ? c.max_cpu_ms() : cfg.default_cpu_ms();
  l.cpu_seconds = std::max<uint64_t>(1, (cpu_ms + 999) / 1000);
  uint64_t runtime_ms = c.has_max_runtime_ms() ? c.max_runtime_ms() : cfg.default_runtime_ms();
  l.wall_time = absl::Milliseconds(std::max<uint64_t>(1, runtime_ms));
  l.storage_bytes = c.has_max_storage_bytes() ? c.max_storage_bytes() : cfg.default_storage_bytes();
  if (c.has_max_processes()) l.max_processes = std::max<uint32_t>(1, c.max_processes());
  if (c.has_max_open_files()) l.max_open_files = std::max<uint32_t>(8, c.max_open_files());
  return l;
}

}  // namespace

absl::StatusOr<cas::Digest> ToDigest(const vault::v1::Digest& d) { return cas::FromProto(d); }

vault::v1::Digest FromDigest(const cas::Digest& d) { return cas::ToProto(d); }

// Agent ids: 1-64 of [a-z0-9-], starting with a letter or digit ("a-" + hex by vaultctl).
absl::Status ValidateAgentId(const std::string& id) {
  bool ok = !id.empty() && id.size() <= 64 && id.front() != '-';
  for (char c : id) ok = ok && (absl::ascii_islower(c) || absl::ascii_isdigit(c) || c == '-');
  if (!ok) {
    return absl::InvalidArgumentError(
        absl::StrCat("agent id \"", absl::CHexEscape(id), "\" must be 1-64 of [a-z0-9-]"));
  }
  return absl::OkStatus();
}


std::string StateName(AgentState state) {
  std::string name = vault::v1::AgentState_Name(state);
  return absl::AsciiStrToLower(name);
}

std::string DigestText(const vault::v1::Digest& d) {
  absl::StatusOr<cas::Digest> digest = ToDigest(d);
  return digest.ok() ? digest->ToString() : "(invalid digest)";
}

// ---------------------------------------------------------------------------------------------
// AgentRuntime: forwards to Impl.

AgentRuntime::AgentRuntime(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
AgentRuntime::~AgentRuntime() { impl_->Stop(); }

std::vector<storage::ColumnFamilySpec> AgentRuntime::ColumnFamilies() {
  std::vector<storage::ColumnFamilySpec> cfs = AgentStore::ColumnFamilies();
  for (storage::ColumnFamilySpec& cf : TrustPolicy::ColumnFamilies()) cfs.push_back(cf);
  for (storage::ColumnFamilySpec& cf : capability::RevocationStore::ColumnFamilies()) {
    cfs.push_back(cf);
  }
  for (storage::ColumnFamilySpec& cf : MigrationColumnFamilies()) cfs.push_back(cf);
  return cfs;
}

absl::StatusOr<std::unique_ptr<AgentRuntime>> AgentRuntime::Start(RuntimeOptions options,
                                                                  RuntimeDeps deps) {
  auto impl = std::make_unique<Impl>(std::move(options), std::move(deps));
  VAULT_RETURN_IF_ERROR(impl->Init());
  return std::unique_ptr<AgentRuntime>(new AgentRuntime(std::move(impl)));
}

absl::Status AgentRuntime::ResumeAgents() { return impl_->ResumeAgents(); }
void AgentRuntime::Stop() { impl_->Stop(); }
absl::StatusOr<vault::v1::SpawnResponse> AgentRuntime::Spawn(const vault::v1::SpawnRequest& r) {
  return impl_->Spawn(r);
}
vault::v1::ListAgentsResponse AgentRuntime::List(const vault::v1::ListAgentsRequest& r) {
  return impl_->List(r);
}
absl::StatusOr<vault::v1::AgentStatus> AgentRuntime::Get(const std::string& id) {
  return impl_->Get(id);
}
absl::StatusOr<vault::v1::ControlResponse> AgentRuntime::Control(
    const vault::v1::ControlRequest& r) {
  return impl_->Control(r, /*forwarded=*/false);
}
absl::StatusOr<vault::v1::ControlResponse> AgentRuntime::ControlFromMember(
    const vault::v1::ControlRequest& r) {
  return impl_->Control(r, /*forwarded=*/true);
}
absl::StatusOr<uint64_t> AgentRuntime::SendFromOperator(const std::string& id,
                                                        const std::string& type,
                                                        const std::string& data) {
  return impl_->SendFromOperator(id, type, data);
}
absl::StatusOr<vault::v1::QueryResponse> AgentRuntime::Query(const vault::v1::QueryRequest& r) {
  return impl_->Query(r);
}
TrustPolicy* AgentRuntime::policy() const { return impl_->policy_.get(); }
capability::RevocationStore* AgentRuntime::revocations() const { return impl_->revocations_.get(); }
void AgentRuntime::SetMigrationTransport(MigrationTransport* transport) {
  impl_->transport_ = transport;
  impl_->outbox_ = std::make_unique<common::RetryQueue>(absl::Milliseconds(200), absl::Seconds(10));
  // Members that were down when a revocation was given (or gossiped) get it now.
  impl_->GossipAllRevocations();
}
absl::StatusOr<std::vector<vault::v1::Digest>> AgentRuntime::OfferIn(
    const vault::v1::MigrationPackage& p, const std::string& caller) {
  return impl_->OfferIn(p, caller);
}
absl::StatusOr<vault::v1::SignedReceipt> AgentRuntime::CommitIn(
    const vault::v1::MigrationPackage& p, const std::string& caller, const std::string* state,
    std::function<void()>* after_answer) {
  return impl_->CommitIn(p, caller, state, after_answer);
}
absl::StatusOr<vault::v1::TransferStatusResponse> AgentRuntime::TransferStatus(
    const std::string& transfer_id, bool abort_if_unknown, const std::string& caller) {
  return impl_->TransferStatus(transfer_id, abort_if_unknown, caller);
}
vault::v1::WhereResponse AgentRuntime::Where(const std::string& id) { return impl_->Where(id); }
absl::StatusOr<vault::v1::LocateResponse> AgentRuntime::Locate(const std::string& id) {
  return impl_->Locate(id);
}
absl::StatusOr<vault::v1::JourneyResponse> AgentRuntime::Journey(const std::string& id) {
  return impl_->Journey(id);
}
absl::StatusOr<vault::v1::LocatedResponse> AgentRuntime::Located(
    const vault::v1::SignedReceipt& receipt, const std::string& caller) {
  return impl_->Located(receipt, caller);
}
absl::StatusOr<vault::v1::MigrateAgentResponse> AgentRuntime::Migrate(
    const vault::v1::MigrateAgentRequest& request) {
  return impl_->MigrateOperator(request);
}

absl::StatusOr<vault::v1::RevokeResponse> AgentRuntime::Revoke(
    const vault::v1::RevokeRequest& request) {
  return impl_->Revoke(request, "");
}
absl::StatusOr<vault::v1::RevokeResponse> AgentRuntime::RevokeFromMember(
    const vault::v1::RevokeRequest& request, const std::string& caller) {
  return impl_->Revoke(request, caller);
}
AgentStore* AgentRuntime::store() const { return impl_->store_.get(); }

// ---------------------------------------------------------------------------------------------
// Setup and teardown.

AgentRuntime::Impl::Impl(RuntimeOptions options, RuntimeDeps deps)
    : options_(std::move(options)), deps_(std::move(deps)) {}

AgentRuntime::Impl::~Impl() { Stop(); }

absl::Status AgentRuntime::Impl::Init() {
  PolicyOptions policy_options;
  for (const std::string& a : options_.config.admins()) policy_options.admins.push_back(a);
  // The full preset's migrate grant names every member, this vault too: an agent that moves on
  // under it can come back (a hop to the vault it is on is refused anyway).
  for (const vault::v1::Member& m : options_.members) {
    if (m.name() != options_.vault_name) policy_options.vaults.push_back(m.name());
  }
  if (!policy_options.vaults.empty()) policy_options.vaults.push_back(options_.vault_name);
  VAULT_ASSIGN_OR_RETURN(policy_, TrustPolicy::Open(deps_.db, std::move(policy_options)));
  store_ = std::make_unique<AgentStore>(deps_.db);
  VAULT_ASSIGN_OR_RETURN(revocations_, capability::RevocationStore::Open(deps_.db));
  VAULT_ASSIGN_OR_RETURN(files_, FileTree::Open(options_.config.files_dir()));
  audit_writer_ = std::make_unique<AuditWriter>(deps_.log);
  quota_ = std::make_unique<StorageQuota>([this](const std::string& principal) -> uint64_t {
    if (absl::StatusOr<capability::PublicKey> key = capability::PublicKey::FromText(principal);
        key.ok()) {
      std::optional<vault::v1::TrustEntry> trust = policy_->Lookup(*key);
      if (trust.has_value() && trust->quota().max_storage_bytes() != 0) {
        return trust->quota().max_storage_bytes();
      }
    }
    return options_.config.default_max_storage_bytes();
  });
  VAULT_ASSIGN_OR_RETURN(code_, CodeCache::Open({.root = options_.code_root,
                                                  .vault_name = options_.vault_name,
                                                  .data_dir = options_.data_dir,
                                                  .python_sdk_dir = options_.config.python_sdk_dir()},
                                                 deps_.cas));

  VAULT_ASSIGN_OR_RETURN(std::vector<AgentRecord> records, store_->LoadAll());
  // Lock order: an agent's mu before the runtime's mu_, never the other way.
  for (AgentRecord& r : records) {
    quota_->Add(r.principal(), r.counters().bytes_written());
    if (Ended(r.state())) continue;
    auto live = std::make_shared<LiveAgent>(r.id(), r.principal());
    {
      absl::MutexLock agent_lock(&live->mu);
      live->record = std::move(r);
    }
    absl::MutexLock lock(&mu_);
    agents_[live->id] = live;
  }

  workers_ = std::make_unique<FairQueue>(options_.config.worker_threads());
  lifecycle_ = std::make_unique<common::Executor>(2, 1 << 20);
  migrations_ = std::make_unique<common::Executor>(4, 1 << 16);
  VAULT_ASSIGN_OR_RETURN(reactor_, ChannelReactor::Start(this, poll_window_));
  watchdog_ = std::thread([this] { WatchdogLoop(); });
  return absl::OkStatus();
}

absl::Status AgentRuntime::Impl::ResumeAgents() {
  std::vector<std::shared_ptr<LiveAgent>> to_resume;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [id, live] : agents_) to_resume.push_back(live);
  }
  if (to_resume.empty()) return absl::OkStatus();
  if (!AgentsEnabled()) {
    spdlog::error("{} agents wait to resume, but agents are disabled: {}", to_resume.size(),
                  deps_.disabled_reason);
    return absl::OkStatus();
  }
  size_t resumed = 0;
  for (const std::shared_ptr<LiveAgent>& live : to_resume) {
    bool was_paused;
    {
      absl::MutexLock lock(&live->mu);
      was_paused = live->record.state() == vault::v1::PAUSED;
      live->record.mutable_counters()->set_restarts(live->record.counters().restarts() + 1);
      live->record.set_reason("resumed from its last checkpoint after a vault restart");
    }
    bool migrating;
    {
      absl::MutexLock lock(&live->mu);
      migrating = live->record.state() == vault::v1::MIGRATING;
    }
    if (migrating) {
      // A hop in flight when this vault stopped: its outcome is settled with the destination.
      ScheduleResolve(live);
      continue;
    }
    std::string revoked;
    {
      absl::MutexLock lock(&live->mu);
      revoked = RevokedBecause(live->record);
      if (!revoked.empty()) {
        // Cut while the vault was down: it does not start again.
        (void)Transition(*live, vault::v1::TERMINATED, revoked, /*high_priority=*/true);
      }
    }
    if (!revoked.empty()) {
      absl::MutexLock agents_lock(&mu_);
      ForgetLocked(live);
      continue;
    }
    absl::Status s = Launch(live);
    absl::MutexLock lock(&live->mu);
    if (!s.ok()) {
      common::LogAgent(spdlog::level::err, live->id, "agent {} could not resume: {}", live->id,
                       s.ToString());
      continue;  // Launch recorded FAILED
    }
    ++resumed;
    common::LogAgent(spdlog::level::info, live->id, "agent {} resumed (incarnation {})", live->id,
                     live->record.incarnation());
    Audit(audit::MakeEntry(
              deps_.vault_key->public_key().ToText(), "agent.resume", live->id,
              vault::v1::AuditEntry::ALLOWED, live->record.spec().purpose(),
              {{"incarnation", absl::StrCat(live->record.incarnation())},
               {"state", live->record.has_state_digest() ? DigestText(live->record.state_digest())
                                                         : std::string("none")}}),
          /*durable=*/true);
    if (was_paused && live->handle != nullptr) {
      absl::Status p = live->handle->Pause();
      if (!p.ok()) {
        common::LogAgent(spdlog::level::warn, live->id, "agent {}: could not pause again: {}",
                         live->id, p.ToString());
      }
    }
  }
  spdlog::info("resumed {} of {} agents from their last checkpoints", resumed, to_resume.size());
  return absl::OkStatus();
}

void AgentRuntime::Impl::Stop() {
  std::vector<std::shared_ptr<LiveAgent>> live_agents;
  {
    absl::MutexLock lock(&mu_);
    if (stopped_) return;
    stopping_ = true;
    for (auto& [id, live] : agents_) live_agents.push_back(live);
  }
  ExpirePrestarts(/*all=*/true);  // arrivals not committed: the source learns it from Status
  // Ask every running agent to checkpoint, then give them the configured time.
  absl::flat_hash_map<std::string, uint64_t> checkpoints_before;
  for (const auto& live : live_agents) {
    vault::v1::Message m;
    {
      absl::MutexLock lock(&live->mu);
      // A frozen agent (mid-hop) cannot checkpoint: its hop settles at the next start.
      if (!live->running || live->record.state() == vault::v1::MIGRATING) continue;
      live->checkpoint_requested = true;
      checkpoints_before[live->id] = live->record.counters().checkpoints();
    }
    m.set_from("vault");
    m.set_type("vault.checkpoint");
    (void)Deliver(live, std::move(m));
  }
  absl::Time deadline = absl::Now() + absl::Milliseconds(options_.config.stop_checkpoint_ms());
  for (const auto& live : live_agents) {
    auto it = checkpoints_before.find(live->id);
    if (it == checkpoints_before.end()) continue;
    const uint64_t checkpoints = it->second;
    LiveAgent* agent = live.get();
    // Re-evaluated whenever live->mu is released: a checkpoint, a pause or an exit ends the wait.
    auto done = [agent, checkpoints]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
      return !agent->running || agent->record.state() == vault::v1::PAUSED ||
             agent->record.counters().checkpoints() > checkpoints;
    };
    absl::MutexLock lock(&live->mu);
    live->mu.AwaitWithDeadline(absl::Condition(&done), deadline);
  }
  if (outbox_ != nullptr) outbox_->Stop();
  // Hops the agents asked for: each leaves at its next retry (stopping_), settled at restart.
  if (migrations_ != nullptr) migrations_->Shutdown();
  std::vector<std::thread> resolvers;
  {
    absl::MutexLock lock(&mu_);
    resolvers.swap(resolvers_);
  }
  for (std::thread& t : resolvers) t.join();  // each leaves at its next retry: stopping_
  for (const auto& live : live_agents) End(live, EndCause::kVaultStop, "vault stopping");
  // Wait for the exits to be handled (records written).
  absl::Time exits_deadline = absl::Now() + absl::Seconds(10);
  for (const auto& live : live_agents) {
    absl::MutexLock lock(&live->mu);
    live->mu.AwaitWithDeadline(absl::Condition(&StoppedRunning, live.get()), exits_deadline);
  }
  {
    absl::MutexLock lock(&mu_);
    stopped_ = true;
    queries_cv_.SignalAll();
  }
  if (reactor_ != nullptr) reactor_->Stop();
  if (!watchdog_stop_.HasBeenNotified()) watchdog_stop_.Notify();
  if (watchdog_.joinable()) watchdog_.join();
  if (workers_ != nullptr) workers_->Shutdown();
  if (lifecycle_ != nullptr) lifecycle_->Shutdown();
  if (audit_writer_ != nullptr) audit_writer_->Stop();
  if (store_ != nullptr) store_->WakeAll();
  if (code_ != nullptr) code_->RemoveAll();
}

// ---------------------------------------------------------------------------------------------
// Spawning.

bool AgentRuntime::Impl::AgentsEnabled() const {
  return deps_.agents_enabled && deps_.sandboxes != nullptr && !deps_.sandboxes->empty();
}

absl::StatusOr<sandbox::Sandbox*> AgentRuntime::Impl::SandboxFor(absl::string_view type) const {
  if (!AgentsEnabled()) {
    return absl::FailedPreconditionError(
        absl::StrCat("agents are disabled on this vault: ", deps_.disabled_reason));
  }
  return deps_.sandboxes->Find(type);
}

absl::StatusOr<vault::v1::SpawnResponse> AgentRuntime::Impl::Spawn(
    const vault::v1::SpawnRequest& request) {
  if (!AgentsEnabled()) {
    return absl::FailedPreconditionError(
        absl::StrCat("agents are disabled on this vault: ", deps_.disabled_reason));
  }
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
  if (spec.purpose().empty()) {
    return absl::InvalidArgumentError("the spec needs a purpose (it is the spawn's motivation)");
  }
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
    return absl::PermissionDeniedError(
        absl::StrCat("above this principal's ceiling here: ", s.message()));
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
  return response;
}

absl::StatusOr<std::shared_ptr<LiveAgent>> AgentRuntime::Impl::CreateAndLaunch(
    AgentRecord record, const std::string* initial_state) {
  if (initial_state != nullptr) {
    // Any size the call carried (server.max_message_bytes): agents read states in pieces.
    cas::Digest d = cas::Digest::Of(*initial_state);
    VAULT_RETURN_IF_ERROR(PutObject(*deps_.cas, d, *initial_state).status());
    *record.mutable_state_digest() = FromDigest(d);
    record.set_has_state(true);
  }
  int64_t now_ms = absl::ToUnixMillis(absl::Now());
  record.set_state(vault::v1::SPAWNED);
  record.set_spawned_unix_ms(now_ms);
  record.set_updated_unix_ms(now_ms);
  auto live = std::make_shared<LiveAgent>(record.id(), record.principal());
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
                                              absl::string_view sandbox_type) {
  VAULT_ASSIGN_OR_RETURN(sandbox::Sandbox * box, SandboxFor(sandbox_type));
  VAULT_ASSIGN_OR_RETURN(CodeCache::Layout code, code_->Acquire(code_digest));
  live->code_key = code_digest.sha256();
  auto fail = [&](absl::Status s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(live->mu) {
    code_->Release(std::exchange(live->code_key, ""));
    return s;
  };
  const bool python = code.python;
  const std::string dir = code.dir;

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

  sandbox::SandboxSpec spec;
  if (python) {
    spec.program = "/usr/bin/python3";
    spec.argv = {"python3", "/code/agent.py"};
    spec.env = {absl::StrCat("PYTHONPATH=", code_->python_sdk_dir()), "PYTHONDONTWRITEBYTECODE=1",
                "PYTHONUNBUFFERED=1"};
    spec.read_only_dirs = {code_->python_sdk_dir()};
  } else {
    spec.program = "/code/agent";
    spec.argv = {"agent"};
  }
  spec.env.push_back(absl::StrCat("VAULT_AGENT_ID=", live->id));
  spec.env.push_back(absl::StrCat("VAULT_NAME=", options_.vault_name));
  // The SDKs poll for an answer this long before they sleep (docs/host-calls.md, "Latency").
  spec.env.push_back(
      absl::StrCat(kAgentPollWindowEnv, "=", absl::ToInt64Microseconds(poll_window_)));
  spec.code_dir = dir;
  spec.channel_fd = guest_end.get();
  spec.stdout_fd = out_write.get();
  spec.stderr_fd = out_write.get();
  spec.limits = LimitsFor(constraints, options_.config);
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
    {
      absl::MutexLock agents_lock(&mu_);
      ForgetLocked(live);
    }
    return s;
  };
  r.set_incarnation(r.incarnation() + 1);
  // A held process (started at the Offer of this arrival: migrate.cc, Prestart) is adopted;
  // should it have ended meanwhile, its exit is handled as this start's (unless it was handled
  // already, while held: then a process is started).
  if (!live->held || live->conn == nullptr) {
    absl::StatusOr<cas::Digest> code_digest = ToDigest(r.spec().code_digest());
    if (!code_digest.ok()) return fail(code_digest.status());
    absl::Status started = StartProcess(live, *code_digest, r.constraints(), r.spec().sandbox());
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
  return store_->Put(live.record);
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
                       [&](rocksdb::WriteBatch* batch)
                           ABSL_NO_THREAD_SAFETY_ANALYSIS { store_->AddPut(batch, live.record); })
          .status();
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
  {
    absl::MutexLock agents_lock(&mu_);
    ForgetLocked(live);
    for (auto& [id, q] : queries_) {
      if (q->agent == live->id && !q->answered) {
        q->answered = true;
        q->response.set_type("vault.ended");
      }
    }
    queries_cv_.SignalAll();
  }
}

// ---------------------------------------------------------------------------------------------
// The reactor: every agent's channel and output pipe on one epoll.

bool AgentRuntime::Impl::OnReadable(const std::shared_ptr<LiveAgent>& live, uint64_t* handled) {
  std::shared_ptr<AgentConnection> conn;
  {
    absl::MutexLock lock(&live->mu);
    conn = live->conn;
  }
  if (conn == nullptr) return false;
  std::vector<std::string> frames;
  bool more = false;
  // A bounded number of frames per agent per round: the others get their turn.
  absl::Status s = conn->ReadAvailable(&frames, 64, &more);
  *handled += frames.size();
  for (std::string& f : frames) HandleFrame(live, std::move(f));
  if (!s.ok()) {
    reactor_->Forget(conn->fd());
    if (absl::IsUnavailable(s)) {
      // The end of the stream: most often the process is leaving. The watchdog ends it if it
      // is still there a second later.
      absl::MutexLock lock(&live->mu);
      live->channel_closed_at = absl::Now();
      return false;
    }
    End(live, EndCause::kProtocol, absl::StrCat("channel: ", s.message()));
    return false;
  }
  return more;
}

void AgentRuntime::Impl::OnOutput(const std::shared_ptr<LiveAgent>& live) {
  // Agent stdout/stderr lines become log lines ("output"); partial lines wait (bounded).
  std::vector<std::string> lines;
  uint64_t incarnation;
  {
    absl::MutexLock lock(&live->mu);
    if (!live->out_fd.valid()) return;
    incarnation = live->record.incarnation();
    char buf[16384];
    for (int round = 0; round < 8; ++round) {
      ssize_t n = read(live->out_fd.get(), buf, sizeof buf);
      if (n <= 0) break;
      live->out_partial.append(buf, static_cast<size_t>(n));
      size_t start = 0;
      for (size_t nl; (nl = live->out_partial.find('\n', start)) != std::string::npos;
           start = nl + 1) {
        lines.push_back(live->out_partial.substr(start, nl - start));
      }
      live->out_partial.erase(0, start);
      if (live->out_partial.size() > kMaxLogLine) {
        lines.push_back(live->out_partial.substr(0, kMaxLogLine));
        live->out_partial.clear();
      }
    }
    live->record.mutable_counters()->set_log_lines(live->record.counters().log_lines() +
                                                   lines.size());
  }
  for (std::string& line : lines) AppendLog(live->id, "output", std::move(line), incarnation);
}

void AgentRuntime::Impl::SendFrame(const std::shared_ptr<LiveAgent>& live,
                                   const vault::v1::HostFrame& frame, common::UniqueFd pass_fd) {
  std::shared_ptr<AgentConnection> conn;
  uint64_t token;
  {
    absl::MutexLock lock(&live->mu);
    conn = live->conn;
    token = live->conn_token;
  }
  if (conn == nullptr) return;
  std::string bytes;
  frame.SerializeToString(&bytes);
  absl::Status s = conn->Send(bytes, std::move(pass_fd));
  if (!s.ok()) {
    End(live, EndCause::kProtocol, absl::StrCat("channel: ", s.message()));
    return;
  }
  if (conn->wants_write()) reactor_->WantWrite(token, conn->fd());
}

// ---------------------------------------------------------------------------------------------
// The watchdog: heartbeats, storage, unfinished frames, receive timeouts, exit grace.

void AgentRuntime::Impl::WatchdogLoop() {
  uint64_t tick = 0;
  const absl::Duration read_timeout = absl::Milliseconds(options_.config.read_timeout_ms());
  // Every kTick, until Stop.
  while (!watchdog_stop_.WaitForNotificationWithTimeout(kTick)) {
    ++tick;
    ExpirePrestarts(/*all=*/false);
    std::vector<std::shared_ptr<LiveAgent>> agents;
    {
      absl::MutexLock lock(&mu_);
      agents.reserve(agents_.size());
      for (auto& [id, live] : agents_) agents.push_back(live);
    }
    const absl::Time now = absl::Now();
    for (const std::shared_ptr<LiveAgent>& live : agents) {
      EndCause cause = EndCause::kNone;
      std::string reason;
      bool expire_receive = false;
      std::shared_ptr<AgentConnection> conn;
      {
        absl::MutexLock lock(&live->mu);
        if (!live->running) continue;
        conn = live->conn;
        bool paused = live->record.state() == vault::v1::PAUSED ||
                      live->record.state() == vault::v1::MIGRATING;
        if (live->pending_receive.has_value() && now >= live->pending_receive->deadline) {
          expire_receive = true;
        }
        uint32_t hb = live->record.spec().heartbeat_timeout_ms();
        if (paused) live->last_heartbeat = now;  // a frozen agent cannot beat
        if (live->exit_requested && now >= live->exit_deadline) {
          cause = EndCause::kExitCall;
          reason = live->end_reason;
        } else if (!live->exit_requested && now - live->channel_closed_at > absl::Seconds(1)) {
          cause = EndCause::kProtocol;
          reason = "channel: the agent closed its channel and did not exit";
        } else if (hb > 0 && now - live->last_heartbeat > absl::Milliseconds(hb)) {
          cause = EndCause::kWatchdog;
          reason = absl::StrCat("heartbeat limit: none for ",
                                absl::ToInt64Milliseconds(now - live->last_heartbeat),
                                " ms (limit ", hb, " ms)");
        } else if (conn != nullptr && !paused && now - conn->partial_since() > read_timeout) {
          cause = EndCause::kProtocol;
          reason = absl::StrCat("a frame did not arrive whole within ",
                                options_.config.read_timeout_ms(), " ms");
        } else if (tick % 20 == 0 && live->handle != nullptr) {
          absl::StatusOr<uint64_t> work_bytes = live->handle->GetWorkBytes();
          sandbox::Limits limits = LimitsFor(live->record.constraints(), options_.config);
          if (work_bytes.ok() && *work_bytes >= limits.storage_bytes) {
            cause = EndCause::kWatchdog;
            reason = absl::StrCat("storage limit: ", *work_bytes, " bytes used of ",
                                  limits.storage_bytes);
          }
        }
      }
      if (expire_receive) ExpireReceive(live);
      if (conn != nullptr && conn->wants_write()) (void)conn->Flush();
      if (cause == EndCause::kExitCall) {
        absl::MutexLock lock(&live->mu);
        if (live->handle != nullptr) (void)live->handle->Kill();
      } else if (cause != EndCause::kNone) {
        End(live, cause, reason);
      }
    }
    // Forget control nonces older than the window.
    if (tick % 400 == 0) {
      absl::MutexLock lock(&mu_);
      absl::erase_if(nonces_, [&](const auto& kv) { return kv.second < now; });
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Revocations.

capability::VerifyContext AgentRuntime::Impl::BaseContext() const {
  capability::VerifyContext ctx;
  ctx.this_vault = deps_.vault_key->public_key();
  ctx.max_links = kMaxAgentChainLinks;
  ctx.vault_key = [this](absl::string_view name) -> std::optional<capability::PublicKey> {
    for (const vault::v1::Member& m : options_.members) {
      if (m.name() == name) {
        absl::StatusOr<capability::PublicKey> k = capability::PublicKey::FromText(m.public_key());
        if (k.ok()) return *k;
      }
    }
    return std::nullopt;
  };
  const capability::RevocationStore* store = revocations_.get();
  ctx.link_revoked = [store](absl::string_view hash, const capability::PublicKey& by) {
    return store->LinkRevoked(hash, by);
  };
  ctx.agent_revoked = [store](absl::string_view id, const capability::PublicKey& by) {
    return store->AgentRevoked(id, by);
  };
  return ctx;
}

std::string AgentRuntime::Impl::RevokedBecause(const AgentRecord& record) {
  // The chain as it was accepted (at its spawn time, from its root), asked only about
  // revocations: expiry and trust changes are other rules.
  capability::VerifyContext ctx = BaseContext();
  ctx.trusted_root = [](const capability::PublicKey&) { return true; };
  ctx.now = absl::FromUnixMillis(record.spawned_unix_ms());
  capability::ChainVerifier verifier(&link_cache_);
  absl::StatusOr<capability::VerifiedChain> verified = verifier.Verify(record.chain(), ctx);
  if (verified.ok() ||
      capability::ChainErrorOf(verified.status()) != capability::ChainError::kRevoked) {
    return "";
  }
  return absl::StrCat("revoked: ", verified.status().message());
}

absl::StatusOr<vault::v1::RevokeResponse> AgentRuntime::Impl::Revoke(
    const vault::v1::RevokeRequest& request, const std::string& from_member) {
  VAULT_ASSIGN_OR_RETURN(vault::v1::RevocationPayload payload,
                         capability::OpenRevocation(request.revocation()));
  VAULT_ASSIGN_OR_RETURN(capability::PublicKey revoker,
                         capability::PublicKey::FromRaw(payload.revoker()));
  const uint64_t before = revocations_->epoch();
  VAULT_RETURN_IF_ERROR(revocations_->Add(request.revocation()));
  vault::v1::RevokeResponse response;
  response.set_added(revocations_->epoch() != before);
  const std::string subject =
      payload.agent_id().empty()
          ? absl::StrCat("link:", absl::BytesToHexString(payload.link_hash()))
          : payload.agent_id();
  std::vector<std::pair<std::string, std::string>> details = {
      {"new", response.added() ? "yes" : "no"}};
  if (!from_member.empty()) details.emplace_back("gossiped_by", from_member);
  Audit(audit::MakeEntry(revoker.ToText(), "capability.revoke", subject,
                         vault::v1::AuditEntry::ALLOWED, payload.reason(), std::move(details)),
        /*durable=*/true);
  // Every member learns it (a new one only: gossip ends where it is already known).
  if (response.added()) GossipRevocation(request.revocation(), from_member);
  std::vector<std::shared_ptr<LiveAgent>> running;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [id, live] : agents_) running.push_back(live);
  }
  for (const std::shared_ptr<LiveAgent>& live : running) {
    std::string why;
    {
      absl::MutexLock lock(&live->mu);
      if (!live->running) continue;
      why = RevokedBecause(live->record);
    }
    if (why.empty()) continue;
    End(live, EndCause::kRevoked, why);
    response.add_ended_agents(live->id);
  }
  return response;
}

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

absl::StatusOr<vault::v1::ControlResponse> AgentRuntime::Impl::Control(
    const vault::v1::ControlRequest& request, bool forwarded) {
  vault::v1::ControlPayload p;
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
  if (p.vault() != deps_.vault_key->public_key().raw()) {
    // For the member that hosts the agent now: it checks everything again itself.
    if (!forwarded) return ForwardControl(request, p.vault());
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
  std::shared_ptr<LiveAgent> live = Find(p.agent_id());
  if (live == nullptr) {
    absl::StatusOr<AgentRecord> stored = store_->Get(p.agent_id());
    if (!stored.ok()) return stored.status();
    if (std::string note = DepartedNote(p.agent_id()); !note.empty()) {
      return absl::FailedPreconditionError(note);
    }
    return absl::FailedPreconditionError(
        absl::StrCat("agent ", p.agent_id(), " has ended (", StateName(stored->state()), ")"));
  }
  std::optional<vault::v1::TrustEntry> trust = policy_->Lookup(signer);
  bool admin = trust.has_value() && trust->admin();
  if (!admin && signer.ToText() != live->principal) {
    Audit(
        audit::MakeEntry(signer.ToText(), "agent.control", live->id, vault::v1::AuditEntry::DENIED,
                         "neither the spawning principal nor a vault administrator",
                         {{"action", vault::v1::ControlPayload::Action_Name(p.action())}}),
        /*durable=*/true);
    return absl::PermissionDeniedError(
        absl::StrCat(signer.ToText(), " may not control agent ", live->id,
                     " (only its spawning principal or a vault administrator may)"));
  }
  {
    absl::MutexLock lock(&mu_);
    std::string key = absl::StrCat(signer.raw(), p.nonce());
    if (nonces_.contains(key)) {
      return absl::AlreadyExistsError("this control request was already used (replay)");
    }
    nonces_[key] = issued + kControlWindow;
  }
  const std::string reason =
      p.reason().empty() ? absl::StrCat("by ", signer.ShortId()) : p.reason();
  vault::v1::ControlResponse response;
  switch (p.action()) {
    case vault::v1::ControlPayload::PAUSE: {
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
    case vault::v1::ControlPayload::RESUME: {
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
    case vault::v1::ControlPayload::TERMINATE: {
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
    default:
      return absl::InvalidArgumentError("unknown control action");
  }
}

absl::StatusOr<uint64_t> AgentRuntime::Impl::SendFromOperator(const std::string& id,
                                                              const std::string& type,
                                                              const std::string& data) {
  std::shared_ptr<LiveAgent> live = Find(id);
  if (live == nullptr) {
    VAULT_RETURN_IF_ERROR(store_->Get(id).status());
    if (std::string note = DepartedNote(id); !note.empty()) {
      return absl::FailedPreconditionError(note);
    }
    return absl::FailedPreconditionError(absl::StrCat("agent ", id, " has ended"));
  }
  if (type.empty() || type.size() > 64) {
    return absl::InvalidArgumentError("a message type is 1-64 characters");
  }
  vault::v1::Message m;
  m.set_from("operator");
  m.set_type(type);
  m.set_data(data);
  VAULT_ASSIGN_OR_RETURN(uint64_t message_id, Deliver(live, std::move(m)));
  Audit(audit::MakeEntry("local-admin", "agent.message", id, vault::v1::AuditEntry::ALLOWED, "",
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
      return absl::FailedPreconditionError(note);
    }
    return absl::FailedPreconditionError(absl::StrCat("agent ", request.id(), " has ended"));
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
  if (pending->response.type() == "vault.ended") {
    return absl::AbortedError(absl::StrCat("agent ", request.id(), " ended before answering"));
  }
  return pending->response;
}

}  // namespace vault::agent
