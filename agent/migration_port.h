// agent/migration_port: what migration/ may do to the agents of this vault, and what the
// runtime may ask of migration/. The exactly-once protocol of a hop (design §7: freeze, the
// MIGRATE link, Offer, objects, Commit, Status and its fences, receipts, locations) lives in
// migration/; the agents' records, processes and locks stay here. The arrow is one way:
// migration/ includes agent/, never the other way round.
//
//   MigrationPort* port = runtime->migration_port();    // the runtime implements it
//   VAULT_ASSIGN_OR_RETURN(vault::v1::AgentRecord frozen, port->Freeze(agent, "vault-b",
//   &refused));
//   ...
//   runtime->SetMigrator(&migration);                    // migration/ implements Migrator
//
// An agent is named by an AgentRef, an opaque handle to the agent as the runtime holds it: an
// agent that departed and came back has a new handle, so a hop's steps act on the incarnation
// they started with, never on a newer one.
//
// Thread-safety: every method of both interfaces may be called from any thread. No port method
// is called with a lock of migration/ held that the runtime could wait for.
#ifndef VAULT_AGENT_MIGRATION_PORT_H_
#define VAULT_AGENT_MIGRATION_PORT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "agent/policy.h"
#include "capability/chain.h"
#include "cas/digest.h"
#include "rocksdb/write_batch.h"
#include "vault/v1/agent.pb.h"
#include "vault/v1/audit.pb.h"
#include "vault/v1/message.pb.h"
#include "vault/v1/migration.pb.h"

namespace vault::agent {

struct LiveAgent;  // agent/internal/live_agent.h: opaque outside agent/
using AgentRef = std::shared_ptr<LiveAgent>;

// Implemented by the runtime (AgentRuntime::migration_port()).
class MigrationPort {
 public:
  virtual ~MigrationPort() = default;

  // The agent with this id here (running, paused, migrating or departing), or null.
  virtual AgentRef Find(const std::string& id) = 0;
  // Its record as it is now.
  virtual vault::v1::AgentRecord Record(const AgentRef& agent) = 0;
  // Its record, whether it runs here or is stored (ended, departed); NOT_FOUND otherwise.
  virtual absl::StatusOr<vault::v1::AgentRecord> RecordOf(const std::string& id) = 0;
  // True once the runtime is stopping: no hop starts, none is adopted.
  virtual bool Stopping() = 0;
  virtual void Audit(vault::v1::AuditEntry entry, bool durable) = 0;

  // ---- The source of a hop ----
  // The agent's side of design §7, step 1, changing nothing: it runs (or is paused), has a chain
  // of its own, a migrate grant naming `to_vault`, and a hop left under max-migrations and the
  // chain's length limit.
  virtual absl::Status CheckMayGo(const AgentRef& agent, const std::string& to_vault) = 0;
  // Asks a running agent to checkpoint (a "vault.checkpoint" message) and waits up to `wait`
  // for it. True when it checkpointed.
  virtual bool AskCheckpoint(const AgentRef& agent, absl::Duration wait) = 0;
  // For a frozen agent that replays (a Scheme agent): its effect log as it stands, stored, to
  // hand over as its state (it resumes at the destination where it was frozen). Null for the
  // others (they go with their last checkpoint).
  virtual absl::StatusOr<std::optional<cas::Digest>> ReplayState(const AgentRef& agent) = 0;
  // Freezes the agent for a hop to `to_vault`: CheckMayGo again, then its host calls are
  // refused, its process stops, and the calls already past the gate finish (at most 10 s).
  // Returns its record as frozen. `refused` is set when CheckMayGo refused (nothing changed).
  virtual absl::StatusOr<vault::v1::AgentRecord> Freeze(const AgentRef& agent,
                                                        const std::string& to_vault,
                                                        bool* refused) = 0;
  // Undoes Freeze (a hop that failed before MIGRATING was persisted).
  virtual void Unfreeze(const AgentRef& agent) = 0;
  // Records the outbound hop (its chain with the new MIGRATE link, the handed state, as the
  // agent's state too; its resume_state is the agent's state now) and persists MIGRATING with
  // an audit entry carrying `details`: from here on a restart finds the hop to settle. On failure
  // the record is as it was (still frozen: Unfreeze it).
  // `covers_handed`: as for StoreMailbox (the messages it was handed are then read).
  virtual absl::Status PersistMigrating(const AgentRef& agent,
                                        vault::v1::OutboundMigration migration,
                                        std::vector<std::pair<std::string, std::string>> details,
                                        bool covers_handed) = 0;
  // The destination committed: the record becomes DEPARTED with the receipt (verified by the
  // caller) and the hop it reports, its frozen process ends, and the agent is forgotten here.
  // The answer does not wait for DEPARTED's durable write (a restart settles a lost one).
  virtual absl::Status MarkDeparted(const AgentRef& agent, const vault::v1::SignedReceipt& receipt,
                                    uint32_t hop,
                                    std::vector<std::pair<std::string, std::string>> details) = 0;
  // The hop did not commit: the agent runs (or is paused) here again, its own migrate call
  // fails with `why`, and the audit entry says so. A no-op unless it is MIGRATING.
  virtual absl::Status ResumeAfterFailedHop(const AgentRef& agent, const std::string& why) = 0;
  // Answers the agent's own migrate call `call_id` with `why`, when that call still waits and
  // no hop is in flight (a hop refused before the freeze).
  virtual void FailMigrateCall(const AgentRef& agent, uint64_t call_id,
                               const absl::Status& why) = 0;

  // Its messages for the hop (docs/messages.md): its mailbox, the sequence numbers it has seen
  // and its outbox, stored as one CAS object (a MailboxTransfer); nullopt when it has none.
  // The messages handed to it since its last checkpoint go too, unless `covers_handed`: the
  // hop's state is one the agent made then (its own migrate's, its effect log). Called frozen.
  virtual absl::StatusOr<std::optional<cas::Digest>> StoreMailbox(const AgentRef& agent,
                                                                  bool covers_handed) = 0;

  // ---- The destination of a hop ----
  // An arrival's messages, read from the CAS, each checked (its vault's signature, its
  // sender's chain, that it is to this agent, or from it for the outbox). INVALID_ARGUMENT
  // when one is not.
  virtual absl::StatusOr<vault::v1::MailboxTransfer> ReadArrivalMailbox(
      const std::string& agent_id, const vault::v1::Digest& digest) = 0;
  // For an arrival's commit batch: its messages (null: none) replace whatever this vault kept
  // of it.
  virtual void AddArrivalMailbox(rocksdb::WriteBatch* batch, const std::string& agent_id,
                                 const vault::v1::MailboxTransfer* transfer) = 0;
  // A verification context with this vault's key, members and revocations.
  virtual capability::VerifyContext BaseContext() const = 0;
  virtual TrustPolicy& policy() = 0;
  // OK when this vault runs agents of the spec's sandbox type; else why not (FAILED_PRECONDITION,
  // or INVALID_ARGUMENT for a name that is no type).
  virtual absl::Status CanRun(absl::string_view sandbox_type) = 0;
  // Live agents of `principal` here, and how many it may have.
  virtual size_t CountLive(const std::string& principal) = 0;
  virtual uint32_t MaxAgents(const std::string& principal) = 0;
  // Starts a held process for an arrival that is not committed yet: the code runs in its
  // sandbox with `constraints`' limits, but gets no Welcome (no host call, no state, no
  // authority) until StartArrival adopts it. Blocks for the start.
  virtual absl::StatusOr<AgentRef> StartHeld(const std::string& agent_id,
                                             const std::string& principal, const cas::Digest& code,
                                             const vault::v1::Constraints& constraints,
                                             const vault::v1::AgentSpec& spec) = 0;
  // True while a held process runs and nothing is ending it.
  virtual bool HeldRuns(const AgentRef& held) = 0;
  // Ends a held process and gives its code back. Blocks for the reap.
  virtual void EndHeld(const AgentRef& held) = 0;
  // Never two: an arrival of `id` may land only where the agent is not (or whence it
  // departed; that record's pending write is made and its entry forgotten). Returns the
  // incarnation its stored record had (0 for none); ALREADY_EXISTS when it is here.
  virtual absl::StatusOr<uint64_t> MakeRoomForArrival(const std::string& id) = 0;
  // The commit point of an arrival: `record`, `entry` and whatever `also` adds (the transfer
  // record) in one durable write.
  virtual absl::Status CommitArrival(const vault::v1::AgentRecord& record,
                                     vault::v1::AuditEntry entry,
                                     const std::function<void(rocksdb::WriteBatch*)>& also) = 0;
  // Runs a committed arrival: adopts `held` (a process StartHeld started for exactly this hop;
  // null for none) or starts a process, and pauses it if the record says PAUSED. `after_answer`
  // (may be null): set to work that must run once the Commit's answer has left; the agent reads
  // its first frame only then. A failure is the start's (the record says FAILED): the arrival
  // is committed whatever this returns.
  virtual absl::Status StartArrival(const AgentRef& held, vault::v1::AgentRecord record,
                                    std::function<void()>* after_answer) = 0;
};

// Implemented by migration/; the runtime holds it (AgentRuntime::SetMigrator).
class Migrator {
 public:
  virtual ~Migrator() = default;
  // The agent's own migrate host call `call_id`: the hop runs in the background; its outcome
  // answers the call (a failure), or the agent departs. `state_digest`: the handed-over state
  // is this object, already in the CAS (then `state` is empty).
  virtual absl::Status StartForAgent(const AgentRef& agent, uint64_t call_id, std::string to,
                                     std::string state,
                                     std::optional<cas::Digest> state_digest) = 0;
  // A hop found in flight at start (MIGRATING): its outcome is settled with the destination.
  virtual void Settle(const AgentRef& agent) = 0;
  // The vault is stopping: arrivals not committed are ended, hops in flight leave their
  // outcome to the next start. Idempotent.
  virtual void Stop() = 0;
  // The member that hosts agent `id` now, as far as the federation knows (NOT_FOUND when no
  // member knows it).
  virtual absl::StatusOr<std::string> WhereIs(const std::string& id) = 0;
};

}  // namespace vault::agent

#endif  // VAULT_AGENT_MIGRATION_PORT_H_
