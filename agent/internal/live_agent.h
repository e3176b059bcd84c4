// agent/internal/live_agent: one agent as the runtime holds it while it exists here: its record,
// its process and channel, its mailbox, its authority, and the flags of its lifecycle. Fields are
// guarded by the agent's own mutex (`mu`); the reactor-only ones are touched by the reactor
// thread alone. Private to agent/.
#ifndef VAULT_AGENT_INTERNAL_LIVE_AGENT_H_
#define VAULT_AGENT_INTERNAL_LIVE_AGENT_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "agent/connection.h"
#include "agent/effect_log.h"
#include "capability/decision.h"
#include "common/unique_fd.h"
#include "sandbox/sandbox.h"
#include "vault/v1/agent.pb.h"
#include "vault/v1/audit.pb.h"
#include "vault/v1/hostcall.pb.h"

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
  // Its mailbox (docs/messages.md): messages not yet handed to a receive, oldest first. One
  // from another agent or the operator is stored (`n`: its place in the mailbox store) and
  // leaves the store when it is handed over; the vault's own ("vault.*") are not (n == 0).
  struct Mail {
    vault::v1::Message message;
    uint64_t n = 0;
  };
  std::deque<Mail> mailbox ABSL_GUARDED_BY(mu);
  uint64_t next_mail_n ABSL_GUARDED_BY(mu) = 1;
  // Sender -> the last sequence number accepted from it: a message at or below it is a retry
  // or a replay (ALREADY_EXISTS). Durable with each accepted message; travels in a hop.
  absl::flat_hash_map<std::string, uint64_t> seen ABSL_GUARDED_BY(mu);
  // Deliveries between their checks and their durable write, or (handed to a waiting receive)
  // their removal from the store: a hop's freeze waits for them.
  uint32_t accepting ABSL_GUARDED_BY(mu) = 0;
  // Senders with a message being written: another from the same sender waits (UNAVAILABLE),
  // so `seen` only ever holds what is durable, and one sender's writes land in order.
  absl::flat_hash_set<std::string> writing_from ABSL_GUARDED_BY(mu);
  // Handed to its receive since its state was last captured (a checkpoint, a hop's state):
  // still stored, and delivered again if it resumes from that state (docs/messages.md).
  std::vector<uint64_t> handed ABSL_GUARDED_BY(mu);
  // Handed messages the state about to be written covers: they leave the store in the same
  // write as the record (PersistLocked, WriteTransition), never before, never after.
  std::vector<uint64_t> ack_with_record ABSL_GUARDED_BY(mu);
  // Its stored mailbox is loaded (Launch, or an arrival before it is published); false again
  // when its process ends.
  bool mail_loaded ABSL_GUARDED_BY(mu) = false;
  // Its own messages' next sequence number (0: not loaded; record.counters().message_seq is
  // the top of the reserved block).
  uint64_t next_seq ABSL_GUARDED_BY(mu) = 0;
  // Held through a whole send: one agent's messages are numbered, and reach each receiver, in
  // the order it sent them.
  absl::Mutex send_mu ABSL_ACQUIRED_BEFORE(mu);
  struct PendingReceive {
    uint64_t call_id = 0;
    absl::Time deadline;
    absl::Time started;
    std::string request_bytes;
  };
  std::optional<PendingReceive> pending_receive ABSL_GUARDED_BY(mu);
  // Receives that ended with nothing (a poll of an empty mailbox, a wait that timed out) since
  // the last audit entry that counted them: an idle agent polling all day is not one entry per
  // poll. The next receive that gets a message and the next state change (exit, termination,
  // migration...) carry the count as detail "empty_receives".
  uint64_t empty_receives ABSL_GUARDED_BY(mu) = 0;
  absl::flat_hash_set<std::string> shared ABSL_GUARDED_BY(mu);  // sha256 of objects shared with it
  // sha256 of the snapshots its runner uploaded (state uploads) and the one its log starts from:
  // what its checkpoint and migrate may name, nothing else (not readable, not shareable).
  absl::flat_hash_set<std::string> snapshot_objects ABSL_GUARDED_BY(mu);
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

  // An agent whose sandbox type replays (a Scheme agent; agent/replay.cc, docs/replay.md): its
  // effect log; while replay_next < replay_end its calls are answered from the log. Null for the
  // others. `effect_calls`: its calls not answered yet, to be logged with their answer.
  std::unique_ptr<EffectLog> effects ABSL_GUARDED_BY(mu);
  // Its sandbox type captures execution state (wasm): the state its checkpoints and migrates
  // carry is that snapshot, and its log is rebased on it (docs/wasm.md).
  bool snapshots ABSL_GUARDED_BY(mu) = false;
  size_t replay_next ABSL_GUARDED_BY(mu) = 0;
  size_t replay_end ABSL_GUARDED_BY(mu) = 0;
  struct EffectCall {
    std::string op;
    std::string request_sha256;
    bool logged_only_if_ok = false;  // a checkpoint the vault asked for
  };
  absl::flat_hash_map<uint64_t, EffectCall> effect_calls ABSL_GUARDED_BY(mu);
  // Its own migrate while it is pending: the node its written-out log ends with.
  std::optional<EffectLog::Extra> migrate_extra ABSL_GUARDED_BY(mu);
  // Set when it starts again here after a hop that failed: its log's final migrate is made
  // again rather than answered (LoadEffectLog).
  bool drop_final_migrate ABSL_GUARDED_BY(mu) = false;
  // Its calls that reached the gate while it was frozen for a hop: neither answered nor logged,
  // so that the log handed over has none of them; served if the hop fails, dropped if it
  // succeeds (the destination's replay ends before them and the code makes them again there).
  struct HeldCall {
    vault::v1::HostRequest request;
    std::string request_bytes;
    absl::Time received;
  };
  std::vector<HeldCall> held_calls ABSL_GUARDED_BY(mu);
};

}  // namespace vault::agent

#endif  // VAULT_AGENT_INTERNAL_LIVE_AGENT_H_
