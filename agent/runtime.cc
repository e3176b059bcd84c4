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

absl::StatusOr<cas::Digest> ToDigest(const vault::v1::Digest& d) { return cas::FromProto(d); }

vault::v1::Digest FromDigest(const cas::Digest& d) { return cas::ToProto(d); }

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
  for (storage::ColumnFamilySpec& cf : AgentObjects::ColumnFamilies()) cfs.push_back(cf);
  for (storage::ColumnFamilySpec& cf : TrustPolicy::ColumnFamilies()) cfs.push_back(cf);
  for (storage::ColumnFamilySpec& cf : capability::RevocationStore::ColumnFamilies()) {
    cfs.push_back(cf);
  }
  for (storage::ColumnFamilySpec& cf : messaging::MailboxStore::ColumnFamilies()) {
    cfs.push_back(cf);
  }
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
bool AgentRuntime::HasProcess(const std::string& id) { return impl_->Find(id) != nullptr; }
absl::StatusOr<vault::v1::ControlResponse> AgentRuntime::ControlFromMember(
    const vault::v1::ControlRequest& r) {
  return impl_->Control(r, /*forwarded=*/true);
}
absl::StatusOr<uint64_t> AgentRuntime::SendFromOperator(const std::string& id,
                                                        const std::string& type,
                                                        const std::string& data) {
  return impl_->SendFromOperator(id, type, data, "local-admin");
}
absl::StatusOr<vault::v1::QueryResponse> AgentRuntime::Query(const vault::v1::QueryRequest& r) {
  return impl_->Query(r);
}
TrustPolicy* AgentRuntime::policy() const { return impl_->policy_.get(); }
capability::RevocationStore* AgentRuntime::revocations() const { return impl_->revocations_.get(); }
absl::StatusOr<vault::v1::RevokeResponse> AgentRuntime::Revoke(
    const vault::v1::RevokeRequest& request) {
  return impl_->Revoke(request, "");
}
absl::StatusOr<vault::v1::RevokeResponse> AgentRuntime::RevokeFromMember(
    const vault::v1::RevokeRequest& request, const std::string& caller) {
  return impl_->Revoke(request, caller);
}
AgentStore* AgentRuntime::store() const { return impl_->store_.get(); }
absl::StatusOr<vault::v1::DeliverResponse> AgentRuntime::DeliverFromMember(
    const vault::v1::DeliverRequest& request, const std::string& caller, absl::Time deadline) {
  return impl_->DeliverFromMember(request, caller, deadline);
}

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
  mailboxes_ = std::make_unique<messaging::MailboxStore>(deps_.db);
  VAULT_RETURN_IF_ERROR(LoadUnsent());
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
  VAULT_ASSIGN_OR_RETURN(code_,
                         CodeCache::Open({.root = options_.code_root,
                                          .vault_name = options_.vault_name,
                                          .data_dir = options_.data_dir,
                                          .python_sdk_dir = options_.config.python_sdk_dir()},
                                         deps_.cas));
  SetCloneLocks(&code_->exec_mu());

  VAULT_ASSIGN_OR_RETURN(std::vector<AgentRecord> records, store_->LoadAll());
  // Lock order: an agent's mu before the runtime's mu_, never the other way.
  objects_ = std::make_unique<AgentObjects>(deps_.db);
  for (const AgentRecord& r : records) quota_->Add(r.principal(), r.counters().bytes_written());
  {
    // What the collector gave back (design §12).
    VAULT_ASSIGN_OR_RETURN(auto refunds, objects_->Refunds());
    for (const auto& [principal, bytes] : refunds) quota_->Refund(principal, bytes);
  }
  for (AgentRecord& r : records) {
    if (Ended(r.state())) continue;
    auto live = std::make_shared<LiveAgent>(r.id(), r.principal());
    const std::string name = r.spec().name();
    {
      absl::MutexLock agent_lock(&live->mu);
      live->record = std::move(r);
    }
    absl::MutexLock lock(&mu_);
    agents_[live->id] = live;
    (void)IndexNameLocked(live, name);  // unique when spawned; an arrival may have lost it
  }

  workers_ = std::make_unique<FairQueue>(options_.config.worker_threads());
  lifecycle_ = std::make_unique<common::Executor>(2, 1 << 20);
  VAULT_ASSIGN_OR_RETURN(reactor_, ChannelReactor::Start(this, poll_window_));
  watchdog_ = std::thread([this] { WatchdogLoop(); });
  unsent_thread_ = std::thread([this] { UnsentLoop(); });
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
      // A hop in flight when this vault stopped: its outcome is settled with the destination
      // (it stays frozen, not started, until then).
      if (Migrator* m = migrator(); m != nullptr) {
        m->Settle(live);
      } else {
        common::LogAgent(spdlog::level::err, live->id,
                         "agent {} was migrating, and this vault has no migration to settle it",
                         live->id);
      }
      continue;
    }
    std::string revoked;
    {
      absl::MutexLock lock(&live->mu);
      revoked = RevokedBecause(live->record);
      if (!revoked.empty()) {
        // Cut while the vault was down: it does not start again.
        (void)Transition(*live, vault::v1::TERMINATED, revoked, /*high_priority=*/true);
        ForgetReceived(live->id);
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
  // Arrivals not committed end (their sources learn it from Status); hops in flight leave their
  // outcome to the next start.
  if (Migrator* m = migrator(); m != nullptr) m->Stop();
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
  {
    absl::MutexLock lock(&unsent_mu_);
    unsent_stop_ = true;
    unsent_cv_.Signal();
  }
  if (unsent_thread_.joinable()) unsent_thread_.join();
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
  SetCloneLocks(nullptr);  // no clone of a type's own outlives the code cache's lock
  if (code_ != nullptr) code_->RemoveAll();
}

void AgentRuntime::Impl::SetCloneLocks(absl::Mutex* mu) {
  if (deps_.sandboxes == nullptr) return;
  for (const std::string& type : deps_.sandboxes->Available()) {
    if (absl::StatusOr<sandbox::Sandbox*> box = deps_.sandboxes->Find(type); box.ok()) {
      (*box)->SetCloneLock(mu);
    }
  }
}

}  // namespace vault::agent
