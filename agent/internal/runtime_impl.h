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
#include "absl/time/time.h"
#include "agent/agent_store.h"
#include "agent/connection.h"
#include "agent/fair_queue.h"
#include "agent/file_tree.h"
#include "agent/policy.h"
#include "agent/runtime.h"
#include "capability/chain.h"
#include "capability/decision.h"
#include "common/executor.h"
#include "common/retry_queue.h"
#include "common/unique_fd.h"
#include "sandbox/sandbox.h"
#include "vault/v1/hostcall.pb.h"
#include "vault/v1/migration.pb.h"

namespace vault::agent {

// Why a process ended, decided before it is killed (or by its exit call).
enum class EndCause {
  kNone = 0,
  kTerminated,  // an operator
  kWatchdog,    // a limit: memory, CPU, runtime, storage, heartbeat, denials
  kProtocol,    // a broken or hostile channel (fail-closed)
  kExitCall,    // the agent's exit host call
  kVaultStop,   // vaultd is stopping: the record stays RUNNING
  kRevoked,     // a revocation cut its chain
  kDeparted,    // it migrated: the record is DEPARTED already
};

// An agent's streaming CAS put (cas_upload_*), defined in host_calls.cc.
struct HostUpload;

// A state change made in memory whose durable write (record and audit entry) is still to come
// (AgentRuntime::Impl::ApplyTransition, WriteTransition).
struct PendingTransition {
  vault::v1::AuditEntry entry;
  std::string transfer;  // for the log line
  std::string what;      // "<from> -> <to>: <reason>"
};

struct LiveAgent {
  LiveAgent(std::string id_, std::string principal_)
      : id(std::move(id_)), principal(std::move(principal_)) {}
  const std::string id;
  const std::string principal;  // ed25519:<hex>: quotas, fairness, isolation

  absl::Mutex mu;
  vault::v1::AgentRecord record ABSL_GUARDED_BY(mu);
  std::unique_ptr<sandbox::SandboxHandle> handle ABSL_GUARDED_BY(mu);
  std::unique_ptr<capability::AgentAuthority> authority ABSL_GUARDED_BY(mu);
  absl::Time started ABSL_GUARDED_BY(mu);
  absl::Time last_heartbeat ABSL_GUARDED_BY(mu);
  bool running ABSL_GUARDED_BY(mu) = false;  // a process is up (running or paused)
  std::deque<vault::v1::Message> mailbox ABSL_GUARDED_BY(mu);
  struct PendingReceive {
    uint64_t call_id = 0;
    absl::Time deadline;
    absl::Time started;
    std::string request_bytes;
  };
  std::optional<PendingReceive> pending_receive ABSL_GUARDED_BY(mu);
  absl::flat_hash_set<std::string> shared ABSL_GUARDED_BY(mu);  // sha256 of objects shared with it
  EndCause end_cause ABSL_GUARDED_BY(mu) = EndCause::kNone;
  std::string end_reason ABSL_GUARDED_BY(mu);
  bool exit_requested ABSL_GUARDED_BY(mu) = false;
  int32_t exit_code ABSL_GUARDED_BY(mu) = 0;
  absl::Time exit_deadline ABSL_GUARDED_BY(mu) = absl::InfiniteFuture();
  bool checkpoint_requested ABSL_GUARDED_BY(mu) = false;
  uint64_t migrate_call_id ABSL_GUARDED_BY(mu) = 0;
  // Set while a hop out is prepared or in flight: its host calls are refused, not run.
  bool migrating_out ABSL_GUARDED_BY(mu) = false;  // a migrate call waiting for its outcome
  // When the agent closed its channel: its process gets a moment to exit by itself (then its
  // exit code decides the state) before it is ended as a protocol breach.
  absl::Time channel_closed_at ABSL_GUARDED_BY(mu) = absl::InfiniteFuture();
  bool flagged ABSL_GUARDED_BY(mu) = false;
  std::string code_key ABSL_GUARDED_BY(mu);  // its code folder's key in code_ (sha256)
  // Its open streaming CAS puts (cas_upload_*) by id; dropped when its process ends.
  absl::flat_hash_map<uint64_t, std::shared_ptr<HostUpload>> uploads ABSL_GUARDED_BY(mu);
  uint64_t next_upload_id ABSL_GUARDED_BY(mu) = 1;
  // Started at an Offer and not yet adopted by its Commit (Prestart): no record, no Welcome.
  bool held ABSL_GUARDED_BY(mu) = false;
  // Set by the sandbox's exit callback, before the exit is handled (OnExit).
  std::atomic<bool> exited{false};

  // The channel: set by Launch, read by the reactor; `conn` outlives the process until the
  // exit is handled.
  std::shared_ptr<AgentConnection> conn ABSL_GUARDED_BY(mu);
  uint64_t conn_token ABSL_GUARDED_BY(mu) = 0;
  uint64_t out_token ABSL_GUARDED_BY(mu) = 0;
  // Reactor-only state.
  bool welcomed = false;
  std::string out_partial;  // agent stdout/stderr: an unfinished line
  common::UniqueFd out_fd;  // read end of its stdout/stderr pipe
  std::atomic<uint32_t> in_flight{0};
  // DEPARTED, applied in memory and answered, its durable write still to come: written by
  // whichever comes first of the departure's own task, the agent's exit and a later arrival of
  // the same agent here (FlushDeparture), never after another write of this record.
  std::optional<PendingTransition> departure ABSL_GUARDED_BY(mu);
};

class AgentRuntime::Impl {
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
  absl::StatusOr<std::shared_ptr<LiveAgent>> CreateAndLaunch(vault::v1::AgentRecord record,
                                                             const std::string* initial_state);
  // Starts `live`'s process (code folder, channel, output pipe, sandbox) with the limits of
  // `constraints`, without reading its record. On failure nothing is left behind.
  absl::Status StartProcess(const std::shared_ptr<LiveAgent>& live, const cas::Digest& code_digest,
                            const vault::v1::Constraints& constraints)
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
  std::shared_ptr<LiveAgent> Find(const std::string& id);
  // Removes `live` from agents_ if it is still the entry of its id (an agent that departed and
  // came back has a new entry, which the old one's end must not remove).
  void ForgetLocked(const std::shared_ptr<LiveAgent>& live) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = agents_.find(live->id);
    if (it != agents_.end() && it->second == live) agents_.erase(it);
  }
  // Live (not ended) agents of `principal`.
  size_t CountLive(const std::string& principal);
  // The principal's storage quota (bytes its agents wrote here, CAS puts and files, since it was
  // first trusted): reserves `bytes` or RESOURCE_EXHAUSTED; Refund gives back a reservation that
  // wrote nothing.
  absl::Status ChargeStorage(const std::string& principal, uint64_t bytes);
  void RefundStorage(const std::string& principal, uint64_t bytes);
  void AppendLog(const std::string& id, const std::string& level, std::string message,
                 uint64_t incarnation);

  // ---- runtime.cc: reactor and watchdog ----
  uint64_t Register(const std::shared_ptr<LiveAgent>& live, int fd, bool output);
  void Unregister(uint64_t token);
  void ReactorLoop();
  // True when frames were left for a later round (fairness between agents).
  bool OnReadable(const std::shared_ptr<LiveAgent>& live);
  void OnOutput(const std::shared_ptr<LiveAgent>& live);
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
                                   vault::v1::Message message);
  // Answers a pending receive that timed out (watchdog).
  void ExpireReceive(const std::shared_ptr<LiveAgent>& live);
  void Audit(vault::v1::AuditEntry entry, bool durable);
  void AuditLoop();
  // Drops the agent's open uploads (cas_upload_*) and gives back the storage they reserved
  // (OnExit: the process ended).
  void DropUploads(LiveAgent& live) ABSL_EXCLUSIVE_LOCKS_REQUIRED(live.mu);
  // May the agent read (and so name as its state) the object whose SHA-256 is `sha256`: its own
  // code or state, what it put or was shared with it, or a read grant covering the hash.
  bool MayReadLocked(const LiveAgent& live, const std::string& sha256)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(live.mu);

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
  absl::Mutex commit_mu_;
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
  absl::Mutex location_mu_;  // one location update at a time
  std::unique_ptr<FileTree> files_;
  std::string python_sdk_dir_;
  std::string code_root_;
  // Code folders under code_root_, one per code object (sha256), with how many agents use each.
  struct CodeLayout {
    std::string dir;
    bool python = false;
    int refs = 0;
    absl::Time idle_since = absl::InfiniteFuture();  // when its last agent ended
  };
  // Folders no agent uses that are kept for the next start of the same code (an arrival after a
  // hop, a restart): its CAS read and its write are off that start's path.
  static constexpr size_t kIdleCodeKept = 8;
  absl::StatusOr<CodeLayout> AcquireCode(const cas::Digest& digest);
  void ReleaseCode(const std::string& sha256);
  absl::Mutex code_mu_;
  absl::flat_hash_map<std::string, CodeLayout> code_ ABSL_GUARDED_BY(code_mu_);
  // Held shared around every sandbox spawn, exclusively while a code file is open for writing.
  absl::Mutex exec_mu_;
  capability::LinkCache link_cache_;

  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<LiveAgent>> agents_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, uint64_t> principal_bytes_ ABSL_GUARDED_BY(mu_);
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

  // Reactor.
  common::UniqueFd epoll_;
  common::UniqueFd wake_;  // eventfd
  absl::Mutex reactor_mu_;
  struct Registration {
    std::weak_ptr<LiveAgent> live;
    bool output = false;
  };
  absl::flat_hash_map<uint64_t, Registration> registrations_ ABSL_GUARDED_BY(reactor_mu_);
  uint64_t next_token_ ABSL_GUARDED_BY(reactor_mu_) = 1;
  std::atomic<bool> quit_{false};
  // How long the reactor (and, through $VAULT_AGENT_POLL_US, the agents' SDKs) poll before they
  // sleep, after activity (BusyPoll in agent/connection.h).
  const absl::Duration poll_window_ = AgentPollWindow();
  uint64_t reactor_frames_ = 0;  // frames the reactor handled (reactor-only)
  std::thread reactor_;
  std::thread watchdog_;

  std::unique_ptr<FairQueue> workers_;
  std::unique_ptr<common::Executor> lifecycle_;  // exit handling, launches of children
  RateLimiter limiter_;

  // Asynchronous audit entries, appended in order by audit_thread_.
  absl::Mutex audit_mu_;
  std::vector<vault::v1::AuditEntry> audit_queue_ ABSL_GUARDED_BY(audit_mu_);
  bool audit_stop_ ABSL_GUARDED_BY(audit_mu_) = false;
  std::thread audit_thread_;
};

// The longest chain an agent may hold here: its SPAWN link and one MIGRATE link per hop (a chain
// grows by a link a hop), so at most 1023 hops whatever max-migrations says.
inline constexpr size_t kMaxAgentChainLinks = 1024;

// Helpers shared by the runtime's files.
std::string StateName(vault::v1::AgentState state);
std::string DigestText(const vault::v1::Digest& d);
absl::StatusOr<cas::Digest> ToDigest(const vault::v1::Digest& d);
vault::v1::Digest FromDigest(const cas::Digest& d);
std::string RandomBytes(size_t n);
// Stores `data` as `digest`: one Put below the CAS's chunking threshold, a streaming upload
// above it (a state or object of up to a frame may be larger than the threshold).
absl::StatusOr<cas::PutOutcome> PutObject(cas::Store& store, const cas::Digest& digest,
                                          absl::string_view data);
absl::Status ValidateAgentId(const std::string& id);
std::string TransferStatusOutcomeName(vault::v1::TransferStatusResponse::Outcome o);
storage::ColumnFamilySpec LocationColumnFamily();
// What a process started at an Offer was started for (prestart.cc): the hop's whole MIGRATE link
// and the constraints this vault narrowed them to.
std::string PrestartKey(const vault::v1::MigrationPackage& p,
                        const vault::v1::Constraints& narrowed);

}  // namespace vault::agent

#endif  // VAULT_AGENT_INTERNAL_RUNTIME_IMPL_H_
