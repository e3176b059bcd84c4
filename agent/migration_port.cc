// The runtime's side of migration (agent/migration_port.h): what migration/ may do to an agent
// here, each step under the agent's own lock. The protocol that orders these steps is
// migration/'s.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "agent/internal/runtime_impl.h"
#include "capability/grant.h"
#include "common/log_fields.h"
#include "common/status_macros.h"
#include "spdlog/spdlog.h"

namespace vault::agent {
namespace {

using vault::v1::AgentRecord;
using vault::v1::AgentState;

// The agent's checks of design §7, step 1 (changing nothing): it runs (or is paused), has a chain
// of its own, a migrate grant naming `to_vault`, and a hop left under max-migrations.
absl::Status CheckAgentMayGo(const LiveAgent& live, const std::string& to_vault)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(live.mu) {
  const AgentRecord& r = live.record;
  if (r.state() != vault::v1::RUNNING && r.state() != vault::v1::PAUSED) {
    return absl::FailedPreconditionError(
        absl::StrCat("agent ", live.id, " is ", StateName(r.state()), ", not running"));
  }
  // One hop at a time: a second one (the operator's beside the agent's own) would thaw the
  // first one's freeze when it is refused, or persist a second transfer over the first.
  if (live.migrating_out) {
    return absl::FailedPreconditionError(
        absl::StrCat("agent ", live.id, " is already migrating: a hop is under way"));
  }
  if (r.chain().links_size() == 0) {
    return absl::FailedPreconditionError(
        "an agent spawned by another agent has no chain of its own and cannot migrate");
  }
  // Recorded as running but its process not (yet) started: after a vault restart or a failed
  // hop it is being started again. Not a denial: its authority is not loaded yet.
  if (!live.running || live.authority == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("agent ", live.id, " is being started on this vault; try again"));
  }
  vault::v1::Grant go;
  go.set_kind(vault::v1::Grant::MIGRATE);
  go.add_vaults(to_vault);
  if (!live.authority->Allows(go)) {
    return absl::PermissionDeniedError(
        absl::StrCat("denied: agent ", live.id, " has no migrate grant naming ", to_vault));
  }
  if (static_cast<size_t>(r.chain().links_size()) + 1 > kMaxAgentChainLinks) {
    return absl::FailedPreconditionError(absl::StrCat(
        "agent ", live.id, " has made ", r.hop(), " hops: its chain (a link per hop) would exceed ",
        kMaxAgentChainLinks, " links"));
  }
  if (r.constraints().has_max_migrations() && r.hop() + 1 > r.constraints().max_migrations()) {
    return absl::PermissionDeniedError(
        absl::StrCat("denied: agent ", live.id, " has made ", r.hop(), " of its ",
                     r.constraints().max_migrations(), " migrations (max-migrations)"));
  }
  return absl::OkStatus();
}

}  // namespace

MigrationPort* AgentRuntime::migration_port() const { return impl_.get(); }

void AgentRuntime::SetMigrator(Migrator* migrator) {
  absl::MutexLock lock(&impl_->mu_);
  impl_->migrator_ = migrator;
}

Migrator* AgentRuntime::Impl::migrator() {
  absl::MutexLock lock(&mu_);
  return migrator_;
}

absl::Status AgentRuntime::Impl::StartMigration(const std::shared_ptr<LiveAgent>& live,
                                                uint64_t call_id, const std::string& to,
                                                const std::string& state,
                                                const std::optional<cas::Digest>& state_digest) {
  Migrator* m = migrator();
  if (m == nullptr) return absl::FailedPreconditionError("this vault cannot migrate agents");
  return m->StartForAgent(live, call_id, to, state, state_digest);
}

// ---------------------------------------------------------------------------------------------
// What every step reads.

AgentRecord AgentRuntime::Impl::Record(const AgentRef& agent) {
  absl::MutexLock lock(&agent->mu);
  return agent->record;
}

absl::StatusOr<AgentRecord> AgentRuntime::Impl::RecordOf(const std::string& id) {
  if (std::shared_ptr<LiveAgent> live = Find(id); live != nullptr) return Record(live);
  return store_->Get(id);
}

bool AgentRuntime::Impl::Stopping() {
  absl::MutexLock lock(&mu_);
  return stopping_;
}

// ---------------------------------------------------------------------------------------------
// The source of a hop.

absl::Status AgentRuntime::Impl::CheckMayGo(const AgentRef& agent, const std::string& to_vault) {
  absl::MutexLock lock(&agent->mu);
  return CheckAgentMayGo(*agent, to_vault);
}

bool AgentRuntime::Impl::AskCheckpoint(const AgentRef& agent, absl::Duration wait) {
  uint64_t before;
  bool interrupt;
  {
    absl::MutexLock lock(&agent->mu);
    if (!agent->running || agent->record.state() != vault::v1::RUNNING) return false;
    // An agent whose runner snapshots (wasm) is interrupted: its runner captures the run at its
    // next fuel slice and checkpoints it, so the hop's log starts there. Another agent that
    // replays is not asked: it goes with its effect log (ReplayState).
    // (Not while it replays: its calls must be the log's, and a capture would not be.)
    interrupt = agent->snapshots && agent->effects != nullptr && agent->handle != nullptr &&
                agent->replay_next >= agent->replay_end;
    if (agent->effects != nullptr && !interrupt) return false;
    before = agent->record.counters().checkpoints();
    if (interrupt) {
      if (!agent->handle->Interrupt().ok()) return false;
    } else {
      agent->checkpoint_requested = true;
    }
  }
  if (!interrupt) {
    vault::v1::Message m;
    m.set_from("vault");
    m.set_type("vault.checkpoint");
    (void)Deliver(agent, std::move(m));
  }
  // Woken by the checkpoint itself (the condition is evaluated whenever the mutex is released),
  // not by polling: the wait is never longer than the checkpoint or the deadline.
  absl::MutexLock lock(&agent->mu);
  LiveAgent* live = agent.get();
  auto done = [live, before]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return live->record.counters().checkpoints() > before || !live->running;
  };
  agent->mu.AwaitWithDeadline(absl::Condition(&done), absl::Now() + wait);
  return agent->record.counters().checkpoints() > before;
}

absl::StatusOr<AgentRecord> AgentRuntime::Impl::Freeze(const AgentRef& agent,
                                                       const std::string& to_vault, bool* refused) {
  *refused = false;
  {
    absl::MutexLock lock(&agent->mu);
    // The checks of design §7, step 1, before anything changes.
    if (absl::Status may = CheckAgentMayGo(*agent, to_vault); !may.ok()) {
      *refused = true;
      return may;
    }
    // Calls not yet handled are refused from now on (the gate), and the process stops.
    agent->migrating_out = true;
    if (agent->handle != nullptr && agent->record.state() == vault::v1::RUNNING) {
      if (absl::Status paused = agent->handle->Pause(); !paused.ok()) {
        agent->migrating_out = false;
        return paused;
      }
    }
  }
  // The calls already past the gate finish before the state is read (the drain). (The agent's
  // own migrate call is not among them: it was deferred before this ran.)
  const absl::Time drain_deadline = absl::Now() + absl::Seconds(10);
  while (agent->in_flight.load() > 0 && absl::Now() < drain_deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  {
    // And the deliveries past their checks (docs/messages.md): what they wrote is in the
    // mailbox that travels, or was handed over before the state is read.
    absl::MutexLock lock(&agent->mu);
    LiveAgent* a = agent.get();
    auto settled = [a]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return a->accepting == 0; };
    if (agent->mu.AwaitWithDeadline(absl::Condition(&settled), drain_deadline) &&
        agent->in_flight.load() == 0) {
      return agent->record;
    }
  }
  Unfreeze(agent);
  return absl::UnavailableError("the agent's host calls did not finish within 10 s");
}

void AgentRuntime::Impl::Unfreeze(const AgentRef& agent) {
  {
    absl::MutexLock lock(&agent->mu);
    agent->migrating_out = false;
    if (agent->record.state() == vault::v1::RUNNING && agent->handle != nullptr) {
      (void)agent->handle->Resume();
    }
  }
  ReleaseHeldCalls(agent);
}

absl::Status AgentRuntime::Impl::PersistMigrating(
    const AgentRef& agent, vault::v1::OutboundMigration migration,
    std::vector<std::pair<std::string, std::string>> details, bool covers_handed) {
  absl::MutexLock lock(&agent->mu);
  AgentRecord& r = agent->record;
  const AgentState resume_state = r.state();
  if (!agent->migrating_out ||
      (resume_state != vault::v1::RUNNING && resume_state != vault::v1::PAUSED)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "agent ", agent->id, " is ", StateName(resume_state), ", not frozen for a hop"));
  }
  const std::string to_vault = migration.to_vault();
  // What it resumes as, or arrives as, is what it is now (an operator may have paused or
  // resumed it since the freeze).
  migration.set_resume_state(resume_state);
  *r.mutable_state_digest() = migration.state();
  r.set_has_state(true);
  *r.mutable_migration() = std::move(migration);
  // Its own state (its migrate's, its effect log) covers the messages it has received: they
  // leave the store in the write that persists MIGRATING.
  if (covers_handed) agent->ack_with_record = agent->handed;
  absl::Status persisted =
      Transition(*agent, vault::v1::MIGRATING, absl::StrCat("migrating to ", to_vault), false,
                 std::move(details));
  if (!persisted.ok()) {
    r.clear_migration();
    r.set_state(resume_state);
  }
  return persisted;
}

absl::Status AgentRuntime::Impl::MarkDeparted(
    const AgentRef& agent, const vault::v1::SignedReceipt& receipt, uint32_t hop,
    std::vector<std::pair<std::string, std::string>> details) {
  bool process;
  {
    absl::MutexLock lock(&agent->mu);
    AgentRecord& r = agent->record;
    // The record still names the hop (whatever ended its frozen process meanwhile: the hop
    // committed, so the agent departed); a hop already settled here has no migration.
    if (!r.has_migration()) {
      return absl::FailedPreconditionError(
          absl::StrCat("agent ", agent->id, " is ", StateName(r.state()), ", not migrating"));
    }
    r.mutable_migration()->set_receipt(receipt.SerializeAsString());
    r.set_hop(hop);
    agent->end_cause = EndCause::kDeparted;
    agent->end_reason = absl::StrCat("departed to ", r.migration().to_vault());
    process = agent->running && agent->handle != nullptr;
    if (process) {
      agent->departure = ApplyTransition(*agent, vault::v1::DEPARTED, agent->end_reason, false,
                                         std::move(details));
    } else {
      // No process (agents off, or a hop settled after a restart): nothing to wait for, and the
      // entry goes at once, so the write is made now.
      VAULT_RETURN_IF_ERROR(
          Transition(*agent, vault::v1::DEPARTED, agent->end_reason, false, std::move(details)));
    }
  }
  // The answer does not wait for DEPARTED's durable write (~1 ms of every hop): the hop is
  // settled already (the destination committed; its receipt is verified), the record reads
  // DEPARTED from now on, and after a crash before the write the record still reads MIGRATING,
  // which the next start settles with Status (COMMITTED, with the receipt) as for a lost answer.
  // Then the frozen process ends (it can do nothing meanwhile: frozen, its calls refused); the
  // exit handler (kDeparted) forgets the agent here. Its messages went with it: what arrives
  // for it from now on is forwarded (docs/messages.md).
  ForgetMailbox(agent->id);
  if (!process) {
    absl::MutexLock lock(&mu_);
    ForgetLocked(agent);
    return absl::OkStatus();
  }
  auto finish = [this, agent]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    absl::MutexLock lock(&agent->mu);
    FlushDeparture(*agent);
    if (agent->running && agent->handle != nullptr) (void)agent->handle->Kill();
  };
  if (!lifecycle_->Schedule(finish)) finish();
  return absl::OkStatus();
}

absl::Status AgentRuntime::Impl::ResumeAfterFailedHop(const AgentRef& agent,
                                                      const std::string& why) {
  bool launch = false;
  uint64_t answer_call = 0;
  {
    absl::MutexLock lock(&agent->mu);
    AgentRecord& r = agent->record;
    if (r.state() != vault::v1::MIGRATING) return absl::OkStatus();
    const AgentState back =
        r.migration().resume_state() == vault::v1::PAUSED ? vault::v1::PAUSED : vault::v1::RUNNING;
    r.clear_migration();
    agent->migrating_out = false;
    VAULT_RETURN_IF_ERROR(Transition(*agent, back, why, /*high_priority=*/true,
                                     {{"outcome", "resumed here"}}, "agent.migrate.failed"));
    if (agent->handle != nullptr && agent->running) {
      if (back == vault::v1::RUNNING) (void)agent->handle->Resume();
      answer_call = std::exchange(agent->migrate_call_id, 0);
    } else {
      launch = true;  // after a restart of this vault: start it again from the handed state
      // (An agent that replays: its own migrate, last in that state, is made again.)
      agent->drop_final_migrate = true;
    }
  }
  if (!launch) ReleaseHeldCalls(agent);
  if (answer_call != 0) {
    // The agent's migrate call fails; it goes on here.
    vault::v1::HostFrame frame;
    frame.mutable_response()->set_call_id(answer_call);
    frame.mutable_response()->set_code(static_cast<int>(absl::StatusCode::kAborted));
    frame.mutable_response()->set_message(why);
    SendFrame(agent, frame);
  }
  if (launch) {
    absl::Status s = Launch(agent);
    if (!s.ok()) {
      common::LogAgent(spdlog::level::err, agent->id, "agent {}: could not resume here: {}",
                       agent->id, s.ToString());
    }
  }
  return absl::OkStatus();
}

void AgentRuntime::Impl::FailMigrateCall(const AgentRef& agent, uint64_t call_id,
                                         const absl::Status& why) {
  {
    absl::MutexLock lock(&agent->mu);
    // Refused before the freeze (or resumed here, already answered): the call fails now.
    if (agent->migrate_call_id != call_id || agent->record.state() == vault::v1::MIGRATING) {
      return;
    }
    agent->migrate_call_id = 0;
  }
  vault::v1::HostFrame frame;
  frame.mutable_response()->set_call_id(call_id);
  frame.mutable_response()->set_code(static_cast<int>(why.code()));
  frame.mutable_response()->set_message(std::string(why.message()));
  SendFrame(agent, frame);
}

// ---------------------------------------------------------------------------------------------
// The destination of a hop.

absl::Status AgentRuntime::Impl::CanRun(absl::string_view sandbox_type) {
  return SandboxFor(sandbox_type).status();
}

absl::StatusOr<AgentRef> AgentRuntime::Impl::StartHeld(const std::string& agent_id,
                                                       const std::string& principal,
                                                       const cas::Digest& code,
                                                       const vault::v1::Constraints& constraints,
                                                       const vault::v1::AgentSpec& spec) {
  auto live = std::make_shared<LiveAgent>(agent_id, principal);
  absl::MutexLock lock(&live->mu);
  live->held = true;
  VAULT_RETURN_IF_ERROR(StartProcess(live, code, constraints, spec));
  return live;
}

bool AgentRuntime::Impl::HeldRuns(const AgentRef& held) {
  absl::MutexLock lock(&held->mu);
  return held->running && !held->exited.load() && held->conn != nullptr &&
         held->end_cause == EndCause::kNone;
}

void AgentRuntime::Impl::EndHeld(const AgentRef& held) {
  absl::MutexLock lock(&held->mu);
  // (A process that would not die keeps its code folder: its exit handler gives it back.)
  if (held->handle != nullptr && !held->handle->Kill().ok()) return;
  if (!held->code_key.empty()) code_->Release(std::exchange(held->code_key, ""));
}

absl::StatusOr<uint64_t> AgentRuntime::Impl::MakeRoomForArrival(const std::string& id) {
  // An agent that departed from here and whose frozen process is still being ended is not here:
  // its entry is forgotten now, so that its end neither persists its old record over the new
  // one nor removes the new entry.
  if (std::shared_ptr<LiveAgent> here = Find(id); here != nullptr) {
    absl::MutexLock lock(&here->mu);
    if (here->record.state() != vault::v1::DEPARTED) {
      return absl::AlreadyExistsError(absl::StrCat("agent ", id, " is already here"));
    }
    FlushDeparture(*here);  // (before the new record: never written over it)
    absl::MutexLock agents_lock(&mu_);
    ForgetLocked(here);
  }
  absl::StatusOr<AgentRecord> stored = store_->Get(id);
  if (!stored.ok()) return 0;
  if (stored->state() != vault::v1::DEPARTED) {
    return absl::AlreadyExistsError(
        absl::StrCat("agent ", id, " ended here (", StateName(stored->state()), ")"));
  }
  return stored->incarnation();
}

absl::Status AgentRuntime::Impl::CommitArrival(
    const AgentRecord& record, vault::v1::AuditEntry entry,
    const std::function<void(rocksdb::WriteBatch*)>& also) {
  return deps_.log
      ->AppendWith(std::move(entry),
                   [&](rocksdb::WriteBatch* batch) {
                     store_->AddPut(batch, record);
                     also(batch);
                   })
      .status();
}

absl::Status AgentRuntime::Impl::StartArrival(const AgentRef& held, AgentRecord record,
                                              std::function<void()>* after_answer) {
  const bool prestarted = held != nullptr;
  const bool paused = record.state() == vault::v1::PAUSED;
  std::shared_ptr<LiveAgent> live =
      prestarted ? held : std::make_shared<LiveAgent>(record.id(), record.principal());
  const std::string name = record.spec().name();
  {
    absl::MutexLock agent_lock(&live->mu);
    live->record = std::move(record);
    // Its messages (committed with it) before it is published: a delivery finds them.
    if (absl::Status loaded = LoadMailLocked(*live); !loaded.ok()) {
      common::LogAgent(spdlog::level::err, live->id, "agent {}: its mailbox: {}", live->id,
                       loaded.ToString());
    }
    // (Before it is published: the watchdog must not see the held process's start time.)
    live->started = absl::Now();
    live->last_heartbeat = live->started;
    // Its wall-time limit counts from now, as a process started now would.
    if (prestarted) live->handle->RestartWallClock();
  }
  {
    absl::MutexLock lock(&mu_);
    agents_[live->id] = live;
    // A name another live agent of its principal holds here stays with that one; this agent
    // is still reached by its id.
    if (!IndexNameLocked(live, name)) {
      common::LogAgent(spdlog::level::warn, live->id,
                       "agent {} arrived named \"{}\", which another live agent of its "
                       "principal has here: it is reached by its id only",
                       live->id, name);
    }
  }
  // Its RUNNING state need not be synced: the committed record starts it again after a crash.
  const bool defer_io = prestarted && after_answer != nullptr;
  // The messages it sent that wait for their receivers' vaults, drained from here now: before
  // it runs, so that none it sends next overtakes them.
  AdoptArrivalOutbox(live->id);
  absl::Status launched = Launch(live, std::nullopt, /*sync_started=*/false, defer_io);
  // (Also after a failed launch: StartIo serves a process that still runs, as Launch would have.)
  if (defer_io) *after_answer = [this, live] { StartIo(live); };
  if (launched.ok() && paused) {
    absl::MutexLock agent_lock(&live->mu);
    if (live->handle != nullptr) {
      absl::Status p = live->handle->Pause();
      if (!p.ok()) {
        common::LogAgent(spdlog::level::warn, live->id, "agent {}: could not pause: {}", live->id,
                         p.ToString());
      }
    }
  }
  return launched;
}

}  // namespace vault::agent
