// agent/internal/runtime_impl: the inside of AgentRuntime, shared by runtime.cc (lifecycle,
// spawning, the reactor, the watchdog) and host_calls.cc (the capability proxy and handlers).
// Private to agent/.
#ifndef VAULT_AGENT_INTERNAL_RUNTIME_IMPL_H_
#define VAULT_AGENT_INTERNAL_RUNTIME_IMPL_H_

#include <atomic>
#include <deque>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "agent/agent_objects.h"
#include "agent/agent_store.h"
#include "agent/audit_writer.h"
#include "agent/channel_reactor.h"
#include "agent/code_cache.h"
#include "agent/connection.h"
#include "agent/fair_queue.h"
#include "agent/file_tree.h"
#include "agent/internal/host_call.h"
#include "agent/internal/live_agent.h"
#include "agent/internal/runtime_util.h"
#include "agent/policy.h"
#include "agent/runtime.h"
#include "agent/storage_quota.h"
#include "capability/chain.h"
#include "capability/decision.h"
#include "common/executor.h"
#include "common/retry_queue.h"
#include "common/unique_fd.h"
#include "messaging/mailbox_store.h"
#include "messaging/signed_message.h"
#include "sandbox/sandbox.h"
#include "vault/v1/hostcall.pb.h"
#include "vault/v1/message.pb.h"
#include "vault/v1/migration.pb.h"

namespace vault::agent {

// For live->mu.Await*: its process has ended and its exit is handled (live->running is false).
inline bool StoppedRunning(LiveAgent* live) ABSL_EXCLUSIVE_LOCKS_REQUIRED(live->mu) {
  return !live->running;
}

class AgentRuntime::Impl : public HostCallServices,
                           public ChannelReactor::Handler,
                           public MigrationPort {
 public:
  Impl(RuntimeOptions options, RuntimeDeps deps);
  ~Impl();
  absl::Status Init();

  // ---- runtime.cc: lifecycle ----
  absl::Status ResumeAgents();
  void Stop();
  // Gives every sandbox type the lock around clones it makes on its own (Sandbox::SetCloneLock).
  void SetCloneLocks(absl::Mutex* mu);
  absl::StatusOr<vault::v1::SpawnResponse> Spawn(const vault::v1::SpawnRequest& request);
  vault::v1::ListAgentsResponse List(const vault::v1::ListAgentsRequest& request);
  absl::StatusOr<vault::v1::AgentStatus> Get(const std::string& id);
  // `forwarded`: it came from a member (never forwarded again).
  absl::StatusOr<vault::v1::ControlResponse> Control(const vault::v1::ControlRequest& request,
                                                     bool forwarded);
  // `by`: who the audit entry names ("local-admin", or the principal of a signed request).
  absl::StatusOr<uint64_t> SendFromOperator(const std::string& id, const std::string& type,
                                            const std::string& data, const std::string& by);
  absl::StatusOr<vault::v1::QueryResponse> Query(const vault::v1::QueryRequest& request);

  // Records a new agent (already authorized) and starts it. `parent` is "" for an operator.
  absl::StatusOr<std::shared_ptr<LiveAgent>> CreateAndLaunch(
      vault::v1::AgentRecord record, const std::string* initial_state) override;
  // Starts `live`'s process (code folder, channel, output pipe, sandbox) with the limits of
  // `constraints`, without reading its record. On failure nothing is left behind.
  // `spec`: its sandbox type, and the args and env its program gets.
  absl::Status StartProcess(const std::shared_ptr<LiveAgent>& live, const cas::Digest& code_digest,
                            const vault::v1::Constraints& constraints,
                            const vault::v1::AgentSpec& spec)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(live->mu);
  // Starts a process for `live` (its record says what to run), or adopts the one held for it
  // (`live->held`: started at the Offer). On failure the record is FAILED.
  // `entry`: an audit entry written in the same durable write as the record's new state (the
  // spawn's; on failure it gets an "error" detail). `sync_started`: false when the record's
  // previous state is durable and starts it again anyway after a crash (an arrival: its commit
  // wrote it), so its new state and incarnation need not be synced before this returns.
  // `defer_io`: the agent's channel and output are not read yet (its hello waits): StartIo
  // later does it.
  absl::Status Launch(const std::shared_ptr<LiveAgent>& live,
                      std::optional<vault::v1::AuditEntry> entry = std::nullopt,
                      bool sync_started = true, bool defer_io = false);
  // Starts reading a launched agent's channel and output (Launch with defer_io), unless its
  // process has ended meanwhile.
  void StartIo(const std::shared_ptr<LiveAgent>& live);
  // Ends the process (if any) for `cause`; the exit handler finishes the transition.
  void End(const std::shared_ptr<LiveAgent>& live, EndCause cause, const std::string& reason);
  // Persists a state change and audits it.
  // `action` defaults to "agent.<state>"; `details` are added to the entry's.
  absl::Status Transition(LiveAgent& live, vault::v1::AgentState to, const std::string& reason,
                          bool high_priority,
                          std::vector<std::pair<std::string, std::string>> details = {},
                          const std::string& action = "") ABSL_EXCLUSIVE_LOCKS_REQUIRED(live.mu);
  // Transition in two steps: the record changed in memory, then (later, under live.mu again)
  // its durable write with the audit entry.
  PendingTransition ApplyTransition(LiveAgent& live, vault::v1::AgentState to,
                                    const std::string& reason, bool high_priority,
                                    std::vector<std::pair<std::string, std::string>> details = {},
                                    const std::string& action = "")
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(live.mu);
  absl::Status WriteTransition(LiveAgent& live, PendingTransition t)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(live.mu);
  absl::Status PersistLocked(LiveAgent& live) ABSL_EXCLUSIVE_LOCKS_REQUIRED(live.mu);
  // Writes live.departure, if any (see LiveAgent::departure).
  void FlushDeparture(LiveAgent& live) ABSL_EXCLUSIVE_LOCKS_REQUIRED(live.mu);
  std::shared_ptr<LiveAgent> Find(const std::string& id) override;  // (and MigrationPort)
  // Removes `live` from agents_ if it is still the entry of its id (an agent that departed and
  // came back has a new entry, which the old one's end must not remove).
  void ForgetLocked(const std::shared_ptr<LiveAgent>& live) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = agents_.find(live->id);
    if (it != agents_.end() && it->second == live) agents_.erase(it);
    UnindexNameLocked(live);
  }
  // Names (docs/spec.md): a live agent's name, unique among the live agents of its principal.
  // IndexNameLocked adds `live` under `name` and returns false when another live agent of its
  // principal has it; UnindexNameLocked removes `live`'s name if it is still its entry.
  bool IndexNameLocked(const std::shared_ptr<LiveAgent>& live, const std::string& name)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UnindexNameLocked(const std::shared_ptr<LiveAgent>& live) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The live agent `to` names for an agent of `principal`: an id, or a name of that principal's.
  std::shared_ptr<LiveAgent> Resolve(const std::string& principal, const std::string& to) override;
  // True when this vault runs agents at all (a sandbox type, agents enabled).
  bool AgentsEnabled() const;
  // FAILED_PRECONDITION with the reason unless AgentsEnabled().
  absl::Status CheckAgentsEnabled() const;
  // The sandbox of the type a spec names: FAILED_PRECONDITION when agents are disabled here or
  // the type is not available here, INVALID_ARGUMENT when the name is no sandbox type.
  absl::StatusOr<sandbox::Sandbox*> SandboxFor(absl::string_view type) const;
  // Live (not ended) agents of `principal`.
  size_t CountLive(const std::string& principal) override;
  // The principal's storage quota (bytes its agents wrote here, CAS puts and files, since it was
  // first trusted): reserves `bytes` or RESOURCE_EXHAUSTED; Refund gives back a reservation that
  // wrote nothing.
  absl::Status ChargeStorage(const std::string& principal, uint64_t bytes) override {
    return quota_->Charge(principal, bytes);
  }
  void RefundStorage(const std::string& principal, uint64_t bytes) override {
    quota_->Refund(principal, bytes);
  }
  uint64_t StorageUsed(const std::string& principal) { return quota_->Used(principal); }
  absl::Status RecordObject(const LiveAgent& live, const cas::Digest& digest,
                            uint64_t charged) override;
  // ---- cas_roots.cc: the CAS lifecycle (AgentRuntime's methods of the same names) ----
  absl::Status ListCasRoots(cas::RootSink& sink, absl::Time now, absl::Duration keep_ended);
  absl::Status AddCasRemoval(const cas::Digest& digest, rocksdb::WriteBatch* batch);
  void CasObjectsRemoved(const std::vector<cas::Digest>& digests);
  void AppendLog(const std::string& id, const std::string& level, std::string message,
                 uint64_t incarnation) override;

  // ---- runtime.cc: reactor and watchdog ----
  // ChannelReactor::Handler: frames to the proxy, output lines to the log.
  bool OnReadable(const std::shared_ptr<LiveAgent>& live, uint64_t* frames) override;
  void OnOutput(const std::shared_ptr<LiveAgent>& live) override;
  void WatchdogLoop();
  void OnExit(const std::shared_ptr<LiveAgent>& live, const sandbox::ExitInfo& exit);
  // Sends a frame; a failure ends the agent (kProtocol).
  void SendFrame(const std::shared_ptr<LiveAgent>& live, const vault::v1::HostFrame& frame,
                 common::UniqueFd pass_fd = common::UniqueFd());

  // ---- host_calls.cc: the capability proxy ----
  void HandleFrame(const std::shared_ptr<LiveAgent>& live, std::string frame);
  void RunCall(const std::shared_ptr<LiveAgent>& live, vault::v1::HostRequest request,
               std::string request_bytes, absl::Time received);
  // Delivers `message` to `to`'s mailbox (or its waiting receive). RESOURCE_EXHAUSTED when full.
  absl::StatusOr<uint64_t> Deliver(const std::shared_ptr<LiveAgent>& to,
                                   vault::v1::Message message) override;
  // Answers the receive `waiting` with `message`, and audits it.
  void AnswerReceive(const std::shared_ptr<LiveAgent>& to, LiveAgent::PendingReceive waiting,
                     vault::v1::Message message);
  // Answers a pending receive that timed out (watchdog).
  void ExpireReceive(const std::shared_ptr<LiveAgent>& live);
  void Audit(vault::v1::AuditEntry entry, bool durable) override;

  // ---- HostCallServices (host_calls.cc): what the host-call handlers may reach ----
  cas::Store& cas() override { return *deps_.cas; }
  FileTree& files() override { return *files_; }
  const vault::v1::AgentsConfig& config() const override { return options_.config; }
  const std::string& vault_name() const override { return options_.vault_name; }
  absl::Status Persist(LiveAgent& live) override ABSL_EXCLUSIVE_LOCKS_REQUIRED(live.mu) {
    return PersistLocked(live);
  }
  uint32_t MaxAgents(const std::string& principal) override;
  absl::Status AnswerQuery(uint64_t reply_to, const std::string& agent_id, const std::string& type,
                           const std::string& data) override;
  absl::Status StartMigration(const std::shared_ptr<LiveAgent>& live, uint64_t call_id,
                              const std::string& to, const std::string& state,
                              const std::optional<cas::Digest>& state_digest) override;

  // ---- messages.cc: messages between agents, here and across vaults (docs/messages.md) ----
  // How a message from a member is checked: member keys, revocations, this vault's limits.
  messaging::MessageContext MessageChecks() const;
  // The agent's next message sequence number; a new block is reserved (a synced record write)
  // when the reserved one is used up.
  absl::StatusOr<uint64_t> NextSeqLocked(LiveAgent& live) ABSL_EXCLUSIVE_LOCKS_REQUIRED(live.mu);
  absl::StatusOr<uint64_t> SendMessage(
      const std::shared_ptr<LiveAgent>& live, const std::shared_ptr<LiveAgent>& to_local,
      const vault::v1::SendRequest& send, bool* queued,
      std::vector<std::pair<std::string, std::string>>* details) override;
  // Into `to`'s mailbox, durably (or straight to its waiting receive, once durable): its
  // receive grants checked against the sender (`sender_grants`: the sender's, for another
  // principal's agent). ALREADY_EXISTS for a sequence number it accepted before; UNAVAILABLE
  // while it is frozen for a hop; RESOURCE_EXHAUSTED when its mailbox is full. Returns the
  // message's id here.
  absl::StatusOr<uint64_t> AcceptMail(const std::shared_ptr<LiveAgent>& to,
                                      const vault::v1::SignedMessage& message,
                                      const vault::v1::MessageRecord& record,
                                      const std::vector<vault::v1::Grant>& sender_grants);
  void HandedLocked(LiveAgent& live, uint64_t n) override ABSL_EXCLUSIVE_LOCKS_REQUIRED(live.mu);
  void AckHandedLocked(LiveAgent& live, const std::vector<uint64_t>& ns) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(live.mu);
  // live.ack_with_record: added to the record's write batch, then (once written) no longer
  // handed.
  void AddAcksLocked(rocksdb::WriteBatch* batch, LiveAgent& live)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(live.mu);
  void AppliedAcksLocked(LiveAgent& live) ABSL_EXCLUSIVE_LOCKS_REQUIRED(live.mu);
  // Before its process talks: its stored mailbox and seen numbers.
  absl::Status LoadMailLocked(LiveAgent& live) ABSL_EXCLUSIVE_LOCKS_REQUIRED(live.mu);
  // To the member the receiver runs on (a location learnt before, this vault's departed_to
  // trail, or the migrator's Locate); that member forwards it on if the receiver went on.
  absl::StatusOr<vault::v1::DeliverResponse> RouteRemote(const vault::v1::SignedMessage& message,
                                                         const vault::v1::MessageRecord& record,
                                                         absl::Time deadline);
  absl::StatusOr<vault::v1::DeliverResponse> DeliverFromMember(
      const vault::v1::DeliverRequest& request, const std::string& caller, absl::Time deadline);
  // The outbox: accepted messages whose receiver's vault could not be reached, by sender,
  // delivered in order by UnsentLoop (its thread), retried with backoff until an answer is
  // final.
  absl::Status LoadUnsent();
  size_t UnsentCount(const std::string& sender);
  absl::Status Enqueue(const std::string& sender, uint64_t seq,
                       const vault::v1::SignedMessage& message);
  void DropUnsent(const std::string& sender);
  void UnsentLoop();
  absl::Status DeliverUnsent(const std::string& sender, const vault::v1::SignedMessage& message);
  // A hop: see MigrationPort. AdoptArrivalOutbox (StartArrival) drains what arrived in the
  // agent's outbox; ForgetMailbox (MarkDeparted) drops what left with it.
  absl::StatusOr<std::optional<cas::Digest>> StoreMailbox(const AgentRef& agent,
                                                          bool covers_handed) override;
  absl::StatusOr<vault::v1::MailboxTransfer> ReadArrivalMailbox(
      const std::string& agent_id, const vault::v1::Digest& digest) override;
  void AddArrivalMailbox(rocksdb::WriteBatch* batch, const std::string& agent_id,
                         const vault::v1::MailboxTransfer* transfer) override;
  void AdoptArrivalOutbox(const std::string& agent_id);
  void ForgetMailbox(const std::string& agent_id);
  // An agent that ended: its mailbox and seen numbers go, its outbox stays until delivered.
  void ForgetReceived(const std::string& agent_id);

  // ---- replay.cc: effect logs of agents that replay (docs/replay.md) ----
  absl::StatusOr<std::optional<cas::Digest>> StoreEffectLog(
      const std::shared_ptr<LiveAgent>& live, bool with_migrate,
      const EffectLog* instead = nullptr) override;
  // Before its process talks: the agent's log, from its state (a log written out: verified, then
  // replayed) or new (the state it was spawned with, if any, kept in it).
  absl::Status LoadEffectLog(LiveAgent& live) ABSL_EXCLUSIVE_LOCKS_REQUIRED(live.mu);
  // Every request of an agent that replays comes here first: answered from the log while the
  // replay lasts (true; a divergence ends the agent), else noted to be logged with its answer
  // (false: served as usual).
  bool Replay(const std::shared_ptr<LiveAgent>& live, const vault::v1::HostRequest& request);
  // Logs the answer `response` when it answers a noted call (SendFrame, before it is sent).
  void LogAnswer(const std::shared_ptr<LiveAgent>& live, const vault::v1::HostResponse& response);
  // Serves the calls held while the agent was frozen (a hop that did not happen).
  void ReleaseHeldCalls(const std::shared_ptr<LiveAgent>& live);

  const RuntimeOptions options_;
  const RuntimeDeps deps_;
  std::unique_ptr<TrustPolicy> policy_;
  std::unique_ptr<AgentStore> store_;
  std::unique_ptr<capability::RevocationStore> revocations_;
  // A verification context for this vault: its key, its members, its revocations.
  capability::VerifyContext BaseContext() const override;

  // ---- migration_port.cc: MigrationPort (agent/migration_port.h) ----
  vault::v1::AgentRecord Record(const AgentRef& agent) override;
  absl::StatusOr<vault::v1::AgentRecord> RecordOf(const std::string& id) override;
  bool Stopping() override;
  absl::Status CheckMayGo(const AgentRef& agent, const std::string& to_vault) override;
  bool AskCheckpoint(const AgentRef& agent, absl::Duration wait) override;
  absl::StatusOr<std::optional<cas::Digest>> ReplayState(const AgentRef& agent) override {
    return StoreEffectLog(agent, /*with_migrate=*/true);
  }
  absl::StatusOr<vault::v1::AgentRecord> Freeze(const AgentRef& agent, const std::string& to_vault,
                                                bool* refused) override;
  void Unfreeze(const AgentRef& agent) override;
  absl::Status PersistMigrating(const AgentRef& agent, vault::v1::OutboundMigration migration,
                                std::vector<std::pair<std::string, std::string>> details,
                                bool covers_handed) override;
  absl::Status MarkDeparted(const AgentRef& agent, const vault::v1::SignedReceipt& receipt,
                            uint32_t hop,
                            std::vector<std::pair<std::string, std::string>> details) override;
  absl::Status ResumeAfterFailedHop(const AgentRef& agent, const std::string& why) override;
  void FailMigrateCall(const AgentRef& agent, uint64_t call_id, const absl::Status& why) override;
  TrustPolicy& policy() override { return *policy_; }
  absl::Status CanRun(absl::string_view sandbox_type) override;
  absl::StatusOr<AgentRef> StartHeld(const std::string& agent_id, const std::string& principal,
                                     const cas::Digest& code,
                                     const vault::v1::Constraints& constraints,
                                     const vault::v1::AgentSpec& spec) override;
  bool HeldRuns(const AgentRef& held) override;
  void EndHeld(const AgentRef& held) override;
  absl::StatusOr<uint64_t> MakeRoomForArrival(const std::string& id) override;
  absl::Status CommitArrival(const vault::v1::AgentRecord& record, vault::v1::AuditEntry entry,
                             const std::function<void(rocksdb::WriteBatch*)>& also) override;
  absl::Status StartArrival(const AgentRef& held, vault::v1::AgentRecord record,
                            std::function<void()>* after_answer) override;
  // The migrator (AgentRuntime::SetMigrator), or null.
  Migrator* migrator();

  // Why `record`'s chain is cut by a stored revocation ("" when it is not).
  std::string RevokedBecause(const vault::v1::AgentRecord& record);
  // `from_member`: the member that gossiped it ("" when given here); a new one is passed on to
  // every other member.
  absl::StatusOr<vault::v1::RevokeResponse> Revoke(const vault::v1::RevokeRequest& request,
                                                   const std::string& from_member);

  // ---- members.cc: control forwarding and revocation gossip (control.cc: Control) ----
  std::optional<std::string> MemberNameOfKey(absl::string_view raw) const;
  // "" unless the agent departed from here; else "agent ID has departed to VAULT (hop N)".
  std::string DepartedNote(const std::string& id);
  // What an operator's unsigned request for a departed agent adds to DepartedNote: the fix.
  static std::string DepartedFix(const std::string& id);
  // `serve_time`: what the request may take there (a query's timeout), on top of the call's own.
  absl::StatusOr<vault::v1::ControlResponse> ForwardControl(
      const vault::v1::ControlRequest& request, absl::string_view for_vault_key,
      absl::Duration serve_time);
  void GossipRevocation(const vault::v1::SignedRevocation& revocation, const std::string& except);
  void GossipAllRevocations();
  // The other members (AgentRuntime::SetMemberClient, once, before agents reach them), or null.
  MemberClient* members_ = nullptr;
  // Revocations to other vaults: retried, nobody waits for them.
  std::unique_ptr<common::RetryQueue> outbox_;
  std::unique_ptr<FileTree> files_;
  // Agents' code laid out for their sandboxes (agent/code_cache.h).
  std::unique_ptr<CodeCache> code_;
  capability::LinkCache link_cache_;

  // The runtime's own state. Taken after any agent's mu (LiveAgent::mu), never before it, and
  // after migration/'s locks (a port call may take both). The parts' own locks (ChannelReactor,
  // CodeCache, StorageQuota, AuditWriter) are leaves: none of them calls back into the runtime
  // while held.
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<LiveAgent>> agents_ ABSL_GUARDED_BY(mu_);
  // "principal\nname" → the live agent of that name; id → its key there.
  absl::flat_hash_map<std::string, std::shared_ptr<LiveAgent>> names_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::string> name_keys_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  Migrator* migrator_ ABSL_GUARDED_BY(mu_) = nullptr;
  // Operator queries waiting for an answer: message id -> answer.
  struct PendingQuery {
    std::string agent;
    bool answered = false;
    vault::v1::QueryResponse response;
  };
  absl::flat_hash_map<uint64_t, std::shared_ptr<PendingQuery>> queries_ ABSL_GUARDED_BY(mu_);
  absl::CondVar queries_cv_;
  // Answers `agent`'s unanswered queries with `type` ("vault.ended", "vault.departed").
  void AnswerPendingQueriesLocked(const std::string& agent, const std::string& type)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Signed requests that wait (QUERY, LOGS) under way per signing key (control.cc).
  absl::flat_hash_map<std::string, int> waiting_by_signer_ ABSL_GUARDED_BY(mu_);
  // Control nonces seen (replay protection), with when they expire.
  absl::flat_hash_map<std::string, absl::Time> nonces_ ABSL_GUARDED_BY(mu_);
  std::atomic<uint64_t> next_message_id_{1};
  // Messages (messages.cc): the stored mailboxes, where receivers were found last, the outbox.
  std::unique_ptr<messaging::MailboxStore> mailboxes_;
  absl::flat_hash_map<std::string, std::string> locations_ ABSL_GUARDED_BY(mu_);
  struct Unsent {
    std::deque<std::pair<uint64_t, vault::v1::SignedMessage>> messages;  // by seq
    absl::Time next_try;
    absl::Duration backoff;
  };
  absl::Mutex unsent_mu_ ABSL_ACQUIRED_AFTER(mu_);
  absl::flat_hash_map<std::string, Unsent> unsent_ ABSL_GUARDED_BY(unsent_mu_);
  absl::CondVar unsent_cv_;
  bool unsent_stop_ ABSL_GUARDED_BY(unsent_mu_) = false;
  std::thread unsent_thread_;

  // The agents' channels and output pipes (agent/channel_reactor.h).
  // How long the reactor (and, through $VAULT_AGENT_POLL_US, the agents' SDKs) poll before they
  // sleep, after activity (BusyPoll in agent/connection.h).
  const absl::Duration poll_window_ = AgentPollWindow();
  std::unique_ptr<ChannelReactor> reactor_;
  // The watchdog's thread, every kTick until watchdog_stop_.
  absl::Notification watchdog_stop_;
  std::thread watchdog_;

  std::unique_ptr<FairQueue> workers_;
  std::unique_ptr<common::Executor> lifecycle_;  // exit handling, launches of children
  RateLimiter limiter_;

  // The audit entries of agents' calls and lifecycle (agent/audit_writer.h).
  std::unique_ptr<AuditWriter> audit_writer_;
  // Bytes written by each principal's agents, against its quota (agent/storage_quota.h).
  std::unique_ptr<StorageQuota> quota_;
  std::unique_ptr<AgentObjects> objects_;
  // Refunds of removals being written (AddCasRemoval), applied once durable (CasObjectsRemoved).
  absl::Mutex refunds_mu_;
  absl::flat_hash_map<std::string, std::vector<StorageRefund>> pending_refunds_
      ABSL_GUARDED_BY(refunds_mu_);
};

// Limits and intervals shared by the runtime's files.
inline constexpr size_t kMaxCodeBytes = 256 << 20;
inline constexpr absl::Duration kTick = absl::Milliseconds(25);  // the watchdog's period
inline constexpr absl::Duration kControlWindow = absl::Minutes(5);
// The longest an operator's query waits for its answer.
inline constexpr uint32_t kMaxQueryTimeoutMs = 600000;
inline constexpr size_t kMaxLogLine = 4096;
// Messages an agent may receive between two captures of its state and still get again if it
// resumes from the older one (docs/messages.md): beyond it, the oldest are taken as read.
inline constexpr size_t kMaxHanded = 1024;

// TERMINATED, COMPLETED, FAILED or DEPARTED: no process will run for the record here again.
bool Ended(vault::v1::AgentState s);
// The sandbox limits of an agent's constraints, the config's defaults where it has none.
sandbox::Limits LimitsFor(const vault::v1::Constraints& c, const vault::v1::AgentsConfig& cfg);

// The longest chain an agent may hold here: its SPAWN link and one MIGRATE link per hop (a chain
// grows by a link a hop), so at most 1023 hops whatever max-migrations says.
inline constexpr size_t kMaxAgentChainLinks = 1024;

}  // namespace vault::agent

#endif  // VAULT_AGENT_INTERNAL_RUNTIME_IMPL_H_
