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
#include "sandbox/sandbox.h"
#include "vault/v1/hostcall.pb.h"
#include "vault/v1/migration.pb.h"

namespace vault::agent {

// For live->mu.Await*: its process has ended and its exit is handled (live->running is false).
inline bool StoppedRunning(LiveAgent* live) ABSL_EXCLUSIVE_LOCKS_REQUIRED(live->mu) {
  return !live->running;
}

class AgentRuntime::Impl : public HostCallServices, public ChannelReactor::Handler {
 public:
  Impl(RuntimeOptions options, RuntimeDeps deps);
  ~Impl();
  absl::Status Init();

  // ---- runtime.cc: lifecycle ----
  absl::Status ResumeAgents();
  void Stop();
  absl::StatusOr<vault::v1::SpawnResponse> Spawn(const vault::v1::SpawnRequest& request);
  vault::v1::ListAgentsResponse List(const vault::v1::ListAgentsRequest& request);
  absl::StatusOr<vault::v1::AgentStatus> Get(const std::string& id);
  // `forwarded`: it came from a member (never forwarded again).
  absl::StatusOr<vault::v1::ControlResponse> Control(const vault::v1::ControlRequest& request,
                                                     bool forwarded);
  absl::StatusOr<uint64_t> SendFromOperator(const std::string& id, const std::string& type,
                                            const std::string& data);
  absl::StatusOr<vault::v1::QueryResponse> Query(const vault::v1::QueryRequest& request);

  // Records a new agent (already authorized) and starts it. `parent` is "" for an operator.
  absl::StatusOr<std::shared_ptr<LiveAgent>> CreateAndLaunch(
      vault::v1::AgentRecord record, const std::string* initial_state) override;
  // Starts `live`'s process (code folder, channel, output pipe, sandbox) with the limits of
  // `constraints`, without reading its record. On failure nothing is left behind.
  // `sandbox_type`: the spec's (sandbox ...) name.
  absl::Status StartProcess(const std::shared_ptr<LiveAgent>& live, const cas::Digest& code_digest,
                            const vault::v1::Constraints& constraints,
                            absl::string_view sandbox_type) ABSL_EXCLUSIVE_LOCKS_REQUIRED(live->mu);
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
  std::shared_ptr<LiveAgent> Find(const std::string& id) override;
  // Removes `live` from agents_ if it is still the entry of its id (an agent that departed and
  // came back has a new entry, which the old one's end must not remove).
  void ForgetLocked(const std::shared_ptr<LiveAgent>& live) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = agents_.find(live->id);
    if (it != agents_.end() && it->second == live) agents_.erase(it);
  }
  // True when this vault runs agents at all (a sandbox type, agents enabled).
  bool AgentsEnabled() const;
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
  std::optional<std::string> DepartedFor(LiveAgent& sender, const std::string& id) override;
  absl::Status StartMigration(const std::shared_ptr<LiveAgent>& live, uint64_t call_id,
                              const std::string& to, const std::string& state,
                              const std::optional<cas::Digest>& state_digest) override;

  const RuntimeOptions options_;
  const RuntimeDeps deps_;
  std::unique_ptr<TrustPolicy> policy_;
  std::unique_ptr<AgentStore> store_;
  std::unique_ptr<capability::RevocationStore> revocations_;
  // A verification context for this vault: its key, its members, its revocations.
  capability::VerifyContext BaseContext() const;

  // ---- migrate.cc: migration (design §7) ----
  std::optional<capability::PublicKey> MemberKey(absl::string_view name) const;
  // Source: checks, freezes, appends the MIGRATE link, persists MIGRATING, then transfers.
  // `state_digest`: the handed-over state is this object, already in the CAS (then `state` is
  // nullopt).
  absl::StatusOr<vault::v1::MigrateAgentResponse> MigrateOut(
      const std::shared_ptr<LiveAgent>& live, const std::string& to_vault,
      const std::optional<std::string>& state, const std::string& requested_by,
      const std::optional<cas::Digest>& state_digest = std::nullopt);
  vault::v1::MigrationPackage PackageOf(const vault::v1::AgentRecord& record) const;
  // Audits a hop refused by this vault's own checks (agent.migrate.refused); returns `why`.
  absl::Status RefusedAtSource(const std::string& id, const std::string& to,
                               const std::string& requested_by, absl::Status why);
  // When each phase of an outbound hop ended (for its log line).
  struct HopTimes {
    absl::Time start, frozen, persisted, sent, committed;
    absl::Duration offer, objects;  // (on the thread that sent them; read once it is joined)
    size_t objects_sent = 0;
  };
  // The Offer, then the objects the destination lacks: nothing that can commit the hop. A missing
  // state of at most kStateInCommit (1 MiB) is not sent but returned, for the Commit to carry.
  struct Sent {
    std::optional<std::string> state;  // for the Commit
  };
  absl::StatusOr<Sent> OfferAndSend(const std::string& to_vault,
                                    const vault::v1::MigrationPackage& package,
                                    HopTimes* times = nullptr);
  // Offer, objects, Commit; then Status until the outcome is known. `background`: straight to
  // Status (a hop found MIGRATING at start, or one that outlasted its caller). `sent_ahead`: the
  // Offer and objects, already under way (MigrateOut sends them while MIGRATING is persisted).
  absl::StatusOr<vault::v1::MigrateAgentResponse> RunTransfer(
      const std::shared_ptr<LiveAgent>& live, bool background,
      std::future<absl::StatusOr<Sent>>* sent_ahead = nullptr, HopTimes* times = nullptr);
  void ScheduleResolve(const std::shared_ptr<LiveAgent>& live);
  // The migrate host call, on migrations_: answers call `call_id` when the hop fails.
  // `state_digest`: the state named by digest (MigrateRequest.state_digest), checked already.
  void MigrateForAgent(const std::shared_ptr<LiveAgent>& live, uint64_t call_id,
                       const std::string& to, const std::string& state,
                       const std::optional<cas::Digest>& state_digest = std::nullopt);
  std::unique_ptr<common::Executor> migrations_;  // agents' own hops
  absl::StatusOr<vault::v1::MigrateAgentResponse> MigrateOperator(
      const vault::v1::MigrateAgentRequest& request);
  std::vector<std::thread> resolvers_ ABSL_GUARDED_BY(mu_);
  absl::StatusOr<vault::v1::MigrateAgentResponse> Departed(const std::shared_ptr<LiveAgent>& live,
                                                           const vault::v1::SignedReceipt& receipt);
  absl::Status ResumeAfterFailedHop(const std::shared_ptr<LiveAgent>& live, const std::string& why);
  // Destination.
  // The transfer's record; a fence (ABORTED) set by a member other than `source` is ignored.
  absl::StatusOr<std::optional<vault::v1::TransferRecord>> LoadTransfer(
      const std::string& transfer_id, const std::string& source) const;
  absl::StatusOr<capability::VerifiedChain> VerifyArrival(const vault::v1::MigrationPackage& p);
  absl::StatusOr<std::vector<vault::v1::Digest>> OfferIn(const vault::v1::MigrationPackage& p,
                                                         const std::string& caller);
  absl::StatusOr<vault::v1::SignedReceipt> CommitIn(const vault::v1::MigrationPackage& p,
                                                    const std::string& caller,
                                                    const std::string* state,
                                                    std::function<void()>* after_answer);
  absl::StatusOr<vault::v1::TransferStatusResponse> TransferStatus(const std::string& transfer_id,
                                                                   bool abort_if_unknown,
                                                                   const std::string& caller);
  MigrationTransport* transport_ = nullptr;
  // One commit or fence at a time. Lock order: commit_mu_, then an agent's mu, then mu_.
  absl::Mutex commit_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  // An arriving agent's process, started when its Offer is accepted and the code is here, so
  // that the sandbox's start (a cgroup attach and an unmount, each of which can wait for an RCU
  // grace period, ~10-20 ms on an idle machine) overlaps the transfer of its objects. The
  // process gets no Welcome, hence no host call, no state and no authority, until the Commit
  // adopts it (Launch); it is ended when the Commit does not come, comes for another hop, or is
  // refused. Keyed by (source member, transfer id): a member can neither take nor end another's.
  using PrestartId = std::pair<std::string, std::string>;
  struct Prestart {
    std::shared_ptr<LiveAgent> live;  // held
    std::string key;                  // PrestartKey: what it was started for
    absl::Time expires;
    bool ready = false;  // its process is up
  };
  static constexpr size_t kMaxPrestarts = 8;
  static constexpr size_t kMaxPrestartsPerMember = 4;
  static constexpr absl::Duration kPrestartTtl = absl::Seconds(60);
  absl::flat_hash_map<PrestartId, Prestart> prestarts_ ABSL_GUARDED_BY(mu_);
  // Starts the process for an accepted Offer (best effort: the Commit starts one otherwise).
  void PrestartArrival(const vault::v1::MigrationPackage& p, const capability::VerifiedChain& v);
  // The held process for `id` when it was started for `key` and still runs (waiting a moment
  // for a start under way); nullptr otherwise (any held process for `id` is then ended).
  std::shared_ptr<LiveAgent> TakePrestart(const PrestartId& id, const std::string& key);
  // Ends the process held for `id`, if any (a fence, an expiry, the vault's stop).
  void EndPrestart(const PrestartId& id);
  // Ends held processes past their time (all of them with `all`).
  void ExpirePrestarts(bool all);
  // Ends a held process on the lifecycle executor (a kill waits for the reap).
  void EndHeldLater(std::shared_ptr<LiveAgent> live);
  absl::CondVar prestart_cv_;  // with mu_: a start at an Offer finished
  // Why `record`'s chain is cut by a stored revocation ("" when it is not).
  std::string RevokedBecause(const vault::v1::AgentRecord& record);
  // `from_member`: the member that gossiped it ("" when given here); a new one is passed on to
  // every other member.
  absl::StatusOr<vault::v1::RevokeResponse> Revoke(const vault::v1::RevokeRequest& request,
                                                   const std::string& from_member);

  // ---- location.cc: where agents are, journeys, control and revocations across members ----
  std::optional<std::string> MemberNameOfKey(absl::string_view raw) const;
  absl::StatusOr<std::optional<vault::v1::AgentLocation>> LoadLocation(const std::string& id) const;
  vault::v1::WhereResponse Where(const std::string& id);
  // "" unless the agent departed from here; else an error text naming where it went.
  std::string DepartedNote(const std::string& id);
  absl::StatusOr<vault::v1::LocateResponse> Locate(const std::string& id);
  // After a Commit here: tells the agent's home (when it is another vault), through the outbox.
  void ForwardLocation(const std::string& home, const vault::v1::SignedReceipt& receipt,
                       const std::string& agent_id);
  absl::StatusOr<vault::v1::LocatedResponse> Located(const vault::v1::SignedReceipt& receipt,
                                                     const std::string& caller);
  absl::StatusOr<vault::v1::JourneyResponse> Journey(const std::string& id);
  absl::StatusOr<vault::v1::ControlResponse> ForwardControl(
      const vault::v1::ControlRequest& request, absl::string_view for_vault_key);
  void GossipRevocation(const vault::v1::SignedRevocation& revocation, const std::string& except);
  void GossipAllRevocations();
  // Messages to other vaults that nobody waits for (locations, revocations).
  std::unique_ptr<common::RetryQueue> outbox_;
  // One location update at a time. Lock order: location_mu_, then an agent's mu, then mu_.
  absl::Mutex location_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  std::unique_ptr<FileTree> files_;
  // Agents' code laid out for their sandboxes (agent/code_cache.h).
  std::unique_ptr<CodeCache> code_;
  capability::LinkCache link_cache_;

  // The runtime's own state. Taken after commit_mu_, location_mu_ and any agent's mu
  // (LiveAgent::mu), never before them. The parts' own locks (ChannelReactor, CodeCache,
  // StorageQuota, AuditWriter) are leaves: none of them calls back into the runtime while held.
  absl::Mutex mu_ ABSL_ACQUIRED_AFTER(commit_mu_, location_mu_);
  absl::flat_hash_map<std::string, std::shared_ptr<LiveAgent>> agents_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  // Operator queries waiting for an answer: message id -> answer.
  struct PendingQuery {
    std::string agent;
    bool answered = false;
    vault::v1::QueryResponse response;
  };
  absl::flat_hash_map<uint64_t, std::shared_ptr<PendingQuery>> queries_ ABSL_GUARDED_BY(mu_);
  absl::CondVar queries_cv_;
  // Control nonces seen (replay protection), with when they expire.
  absl::flat_hash_map<std::string, absl::Time> nonces_ ABSL_GUARDED_BY(mu_);
  std::atomic<uint64_t> next_message_id_{1};

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
};

// Limits and intervals shared by the runtime's files.
inline constexpr size_t kMaxCodeBytes = 256 << 20;
inline constexpr absl::Duration kTick = absl::Milliseconds(25);  // the watchdog's period
inline constexpr absl::Duration kControlWindow = absl::Minutes(5);
inline constexpr size_t kMaxLogLine = 4096;

// TERMINATED, COMPLETED, FAILED or DEPARTED: no process will run for the record here again.
bool Ended(vault::v1::AgentState s);
// The sandbox limits of an agent's constraints, the config's defaults where it has none.
sandbox::Limits LimitsFor(const vault::v1::Constraints& c, const vault::v1::AgentsConfig& cfg);

// The longest chain an agent may hold here: its SPAWN link and one MIGRATE link per hop (a chain
// grows by a link a hop), so at most 1023 hops whatever max-migrations says.
inline constexpr size_t kMaxAgentChainLinks = 1024;

// Helpers shared by the runtime's files (and agent/internal/runtime_util.h).
absl::Status ValidateAgentId(const std::string& id);
std::string TransferStatusOutcomeName(vault::v1::TransferStatusResponse::Outcome o);
storage::ColumnFamilySpec LocationColumnFamily();
// What a process started at an Offer was started for (prestart.cc): the hop's whole MIGRATE link
// and the constraints this vault narrowed them to.
std::string PrestartKey(const vault::v1::MigrationPackage& p,
                        const vault::v1::Constraints& narrowed);

}  // namespace vault::agent

#endif  // VAULT_AGENT_INTERNAL_RUNTIME_IMPL_H_
