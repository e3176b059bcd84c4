// migration: agent migration between the vaults of a federation (design §7; docs/migration.md).
// Both sides of a hop and what tells where an agent is:
//  - The source (source.cc): the checks, the freeze, the MIGRATE link, MIGRATING persisted
//    before anything can commit, the Offer and the objects, the Commit, and Status until the
//    outcome is known; then DEPARTED with the destination's receipt, or the agent resumes here.
//  - The destination (destination.cc): the transfer records and fences, the Offer (its process
//    started early: prestart.cc), the Commit that adopts the agent in the same durable write as
//    the transfer record, and the Status that fences an uncommitted transfer off for good. So
//    an agent never runs in two vaults and is never lost.
//  - Where an agent is (location.cc): Where, Locate, Located (its home vault's record of the
//    receipts of its hops) and Journey.
// The agents themselves stay in agent/: this component acts on them only through
// agent::MigrationPort, and the runtime reaches it only through agent::Migrator.
//
//   VAULT_ASSIGN_OR_RETURN(auto m, Migration::Start(options, deps));  // deps.port: the runtime's
//   runtime->SetMigrator(m.get());
//   VAULT_ASSIGN_OR_RETURN(vault::v1::MigrateAgentResponse r, m->Migrate(request));
//
// Thread-safety: thread-safe. Lock order: commit_mu_ and location_mu_ are taken before any lock
// of the runtime (a port call may take an agent's lock and the runtime's), mu_ after them and
// never across a port call that can block.
#ifndef VAULT_MIGRATION_MIGRATION_H_
#define VAULT_MIGRATION_MIGRATION_H_

#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "agent/migration_port.h"
#include "audit/log.h"
#include "capability/chain.h"
#include "capability/principal.h"
#include "cas/store.h"
#include "common/executor.h"
#include "common/retry_queue.h"
#include "migration/transport.h"
#include "storage/database.h"
#include "vault/v1/agent.pb.h"
#include "vault/v1/config.pb.h"
#include "vault/v1/migration.pb.h"

namespace vault::migration {

struct MigrationOptions {
  std::string vault_name;
  std::vector<vault::v1::Member> members;
};

struct MigrationDeps {
  const storage::Database* db = nullptr;
  cas::Store* cas = nullptr;
  const capability::PrivateKey* vault_key = nullptr;
  agent::MigrationPort* port = nullptr;
  // Null when this vault has no federation TLS material: hops out are refused with the reason,
  // and no member can reach it.
  Transport* transport = nullptr;
};

class Migration final : public agent::Migrator {
 public:
  // The transfer records and fences, and the agents' locations (at their home vaults).
  static std::vector<storage::ColumnFamilySpec> ColumnFamilies();
  static absl::StatusOr<std::unique_ptr<Migration>> Start(MigrationOptions options,
                                                          MigrationDeps deps);
  Migration(const Migration&) = delete;
  Migration& operator=(const Migration&) = delete;
  ~Migration() override;

  // ---- Source ----
  // An operator's hop: asks the agent to checkpoint (waits checkpoint_wait_ms), then moves it.
  absl::StatusOr<vault::v1::MigrateAgentResponse> Migrate(
      const vault::v1::MigrateAgentRequest& request);
  // agent::Migrator.
  absl::Status StartForAgent(const agent::AgentRef& agent, uint64_t call_id, std::string to,
                             std::string state, std::optional<cas::Digest> state_digest) override;
  void Settle(const agent::AgentRef& agent) override;
  void Stop() override;
  // agent::Migrator: Locate's answer, the member that hosts the agent.
  absl::StatusOr<std::string> WhereIs(const std::string& id) override;

  // ---- Destination, for the Migration service; `caller` is the calling member's name ----
  absl::StatusOr<std::vector<vault::v1::Digest>> OfferIn(const vault::v1::MigrationPackage& p,
                                                         const std::string& caller);
  // `state`: the state's bytes when the Commit carries them (CommitRequest.state), or null.
  // `after_answer`: when non-null, CommitIn may set it to work that must run once the answer
  // has left (or the call has ended): the agent, whose process is adopted and RUNNING by then,
  // gets its first frame only after it, so that its first steps do not compete with the answer
  // for the CPU. Null: everything happens before CommitIn returns.
  absl::StatusOr<vault::v1::SignedReceipt> CommitIn(const vault::v1::MigrationPackage& p,
                                                    const std::string& caller,
                                                    const std::string* state = nullptr,
                                                    std::function<void()>* after_answer = nullptr);
  // Answers only the member whose transfer it is (`caller`).
  absl::StatusOr<vault::v1::TransferStatusResponse> TransferStatus(const std::string& transfer_id,
                                                                   bool abort_if_unknown,
                                                                   const std::string& caller);

  // ---- Where agents are (docs/migration.md "Location, journey and remote control") ----
  vault::v1::WhereResponse Where(const std::string& id);
  // Follows what the members know to the vault that hosts the agent.
  absl::StatusOr<vault::v1::LocateResponse> Locate(const std::string& id);
  // Every entry about the agent in this vault's audit log and its mirrors of the members'.
  absl::StatusOr<vault::v1::JourneyResponse> Journey(const std::string& id);
  // The home vault's side of location forwarding: a member reports a hop's receipt it signed.
  absl::StatusOr<vault::v1::LocatedResponse> Located(const vault::v1::SignedReceipt& receipt,
                                                     const std::string& caller);

 private:
  Migration(MigrationOptions options, MigrationDeps deps);

  std::optional<capability::PublicKey> MemberKey(absl::string_view name) const;
  bool stopping() const {
    absl::MutexLock lock(&mu_);
    return stopping_;
  }
  // Sleeps `d`, or less when the vault stops. False when it stops.
  bool Sleep(absl::Duration d) { return !stop_.WaitForNotificationWithTimeout(d); }

  // ---- source.cc ----
  // The destination's checks of design §7, step 1: this vault can reach members, and `to_vault`
  // is one of them, not this vault. Returns its key.
  absl::StatusOr<capability::PublicKey> CheckDestination(const std::string& to_vault) const;
  // Audits a hop refused by this vault's own checks (agent.migrate.refused); returns `why`.
  absl::Status RefusedAtSource(const std::string& id, const std::string& to,
                               const std::string& requested_by, absl::Status why);
  // Checks, freezes, appends the MIGRATE link, persists MIGRATING, then transfers.
  // `named_state`: the handed-over state is this object, already in the CAS (then `state` is
  // nullopt).
  absl::StatusOr<vault::v1::MigrateAgentResponse> MigrateOut(
      const agent::AgentRef& agent, const std::string& to_vault,
      const std::optional<std::string>& state, const std::string& requested_by,
      const std::optional<cas::Digest>& named_state = std::nullopt);
  vault::v1::MigrationPackage PackageOf(const vault::v1::AgentRecord& record) const;
  // When each phase of an outbound hop ended (for its log line).
  struct HopTimes {
    absl::Time start, frozen, persisted, sent, committed;
    absl::Duration offer, objects;  // (on the thread that sent them; read once it is joined)
    size_t objects_sent = 0;
  };
  // The Offer, then the objects the destination lacks: nothing that can commit the hop. A
  // missing state of at most kStateInCommit (1 MiB) is not sent but returned, for the Commit.
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
      const agent::AgentRef& agent, bool background,
      std::future<absl::StatusOr<Sent>>* sent_ahead = nullptr, HopTimes* times = nullptr);
  // RunTransfer in the background, until the outcome is known or the vault stops.
  void ScheduleResolve(const agent::AgentRef& agent);
  // Verifies the destination's receipt and marks the agent departed. DATA_LOSS for a receipt
  // that does not verify (the agent then stays frozen: never resumed).
  absl::StatusOr<vault::v1::MigrateAgentResponse> Departed(const agent::AgentRef& agent,
                                                           const vault::v1::SignedReceipt& receipt);

  // ---- destination.cc ----
  // The transfer's record; a fence (ABORTED) set by a member other than `source` is ignored.
  absl::StatusOr<std::optional<vault::v1::TransferRecord>> LoadTransfer(
      const std::string& transfer_id, const std::string& source) const;
  absl::StatusOr<capability::VerifiedChain> VerifyArrival(const vault::v1::MigrationPackage& p);
  // Audits an arrival refused in `phase` ("offer", "commit"); returns `why`.
  absl::Status RefusedArrival(const vault::v1::MigrationPackage& p, const std::string& phase,
                              absl::Status why, bool high_priority = false);

  // ---- prestart.cc ----
  // An arriving agent's process, started when its Offer is accepted and the code is here, so
  // that the sandbox's start (a cgroup attach and an unmount, each of which can wait for an RCU
  // grace period, ~10-20 ms on an idle machine) overlaps the transfer of its objects. The
  // process gets no Welcome, hence no host call, no state and no authority, until the Commit
  // adopts it; it is ended when the Commit does not come, comes for another hop, or is refused.
  // Keyed by (source member, transfer id): a member can neither take nor end another's.
  using PrestartId = std::pair<std::string, std::string>;
  struct Prestart {
    uint64_t token = 0;     // which start this is (a later one for the same id has another)
    agent::AgentRef agent;  // held; set once its process is up
    std::string key;        // PrestartKey: what it was started for
    absl::Time expires;
    bool ready = false;  // its process is up
  };
  static constexpr size_t kMaxPrestarts = 8;
  static constexpr size_t kMaxPrestartsPerMember = 4;
  static constexpr absl::Duration kPrestartTtl = absl::Seconds(60);
  // Starts the process for an accepted Offer (best effort: the Commit starts one otherwise).
  void PrestartArrival(const vault::v1::MigrationPackage& p, const capability::VerifiedChain& v);
  // The held process for `id` when it was started for `key` and still runs (waiting a moment
  // for a start under way); null otherwise (any held process for `id` is then ended).
  agent::AgentRef TakePrestart(const PrestartId& id, const std::string& key);
  // Ends the process held for `id`, if any (a fence, an expiry, the vault's stop).
  void EndPrestart(const PrestartId& id);
  // Ends held processes past their time (all of them with `all`).
  void ExpirePrestarts(bool all);
  // Ends a held process on held_ (a kill waits for the reap).
  void EndHeldLater(agent::AgentRef held);

  // ---- location.cc ----
  absl::StatusOr<std::optional<vault::v1::AgentLocation>> LoadLocation(const std::string& id) const;
  // After a Commit here: tells the agent's home (when it is another vault), through the outbox.
  void ForwardLocation(const std::string& home, const vault::v1::SignedReceipt& receipt,
                       const std::string& agent_id);

  // Constant after construction.
  const MigrationOptions options_;
  const MigrationDeps deps_;
  capability::LinkCache link_cache_;
  std::unique_ptr<common::Executor> hops_;  // agents' own hops
  std::unique_ptr<common::Executor> held_;  // starts and ends of held processes
  // Location updates to agents' home vaults: retried, nobody waits for them.
  std::unique_ptr<common::RetryQueue> outbox_;
  absl::Notification stop_;  // the vault is stopping: waits end early
  std::thread housekeeper_;  // expires held processes

  // One commit or fence at a time.
  absl::Mutex commit_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  // One location update at a time.
  absl::Mutex location_mu_ ABSL_ACQUIRED_BEFORE(mu_);

  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> resolvers_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<PrestartId, Prestart> prestarts_ ABSL_GUARDED_BY(mu_);
  uint64_t next_prestart_token_ ABSL_GUARDED_BY(mu_) = 1;
  absl::CondVar prestart_cv_;  // with mu_: a start at an Offer finished
};

// What a process started at an Offer was started for: the hop's whole MIGRATE link and the
// constraints this vault narrowed them to.
std::string PrestartKey(const vault::v1::MigrationPackage& p,
                        const vault::v1::Constraints& narrowed);

}  // namespace vault::migration

#endif  // VAULT_MIGRATION_MIGRATION_H_
