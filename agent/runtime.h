// agent/runtime: the vault's agents — spawning them from a signed SPAWN link, running each in a
// sandbox, serving their host calls through the capability proxy, and keeping their lifecycle
// durable (design §6).
//
// One reactor thread reads every agent's channel (epoll; nothing blocks it). Cheap calls (log,
// heartbeat, self-inspect, send, receive, share) are answered there; the others run on a worker
// pool that takes principals in turn (FairQueue), after a per-principal rate limit. Every call
// goes: operation -> required grant -> decision (AgentAuthority, cached) -> handler ->
// audit entry (an effect node: operation, grant, decision, duration, SHA-256 of input and
// output, bytes) -> structured result. Calls that change durable state or reach outside the
// vault (checkpoint, cas-put, write-file, net-connect, spawn-child, exit) are audited durably
// before they are answered; the others asynchronously, in order. Heartbeats are counted, not
// audited. Denials are audited; an agent is flagged after agents.flag_after_denials of them and
// terminated after agents.terminate_after_denials.
//
// States (AgentRecord.state): SPAWNED -> RUNNING <-> PAUSED -> TERMINATED | COMPLETED | FAILED.
// Every transition is a synced RocksDB write and an audit entry. Stop() (SIGTERM) asks every
// agent to checkpoint, waits agents.stop_checkpoint_ms, and ends the processes while their
// records stay RUNNING; ResumeAgents() at the next start runs them again from their last
// checkpoint. After a SIGKILL of vaultd its sandboxes die with it (parent-death signal), so the
// same holds and no agent runs twice.
//
//   VAULT_ASSIGN_OR_RETURN(auto runtime, AgentRuntime::Start(options, deps));
//   VAULT_RETURN_IF_ERROR(runtime->ResumeAgents());
//   VAULT_ASSIGN_OR_RETURN(vault::v1::SpawnResponse r, runtime->Spawn(request));
//   runtime->Stop();
//
// Thread-safety: thread-safe.
#ifndef VAULT_AGENT_RUNTIME_H_
#define VAULT_AGENT_RUNTIME_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "agent/agent_store.h"
#include "agent/migration_port.h"
#include "agent/policy.h"
#include "audit/log.h"
#include "capability/principal.h"
#include "capability/revocation.h"
#include "capability/signing_domains.h"
#include "cas/collector.h"
#include "cas/store.h"
#include "sandbox/registry.h"
#include "sandbox/sandbox.h"
#include "storage/database.h"
#include "vault/v1/agent.pb.h"
#include "vault/v1/config.pb.h"
#include "vault/v1/message.pb.h"
#include "vault/v1/migration.pb.h"

namespace vault::agent {

// The domains of an operator's signed control request and of a code signature
// (capability/signing_domains.h).
using capability::kCodeDomain;
using capability::kControlDomain;

struct RuntimeOptions {
  vault::v1::AgentsConfig config;  // finalized (node/config.h)
  std::string vault_name;
  std::string data_dir;
  std::vector<vault::v1::Member> members;
  // Where agents' code is laid out for their sandboxes. Empty: chosen (see docs/agents.md).
  std::string code_root;
};

// How the runtime reaches another member (migration/ implements it over gRPC with mutual TLS).
// Every call has a deadline.
class MemberClient {
 public:
  virtual ~MemberClient() = default;
  // Forwards a signed control request to the vault it names; `serve_time` is what the request
  // may take there (a query's timeout), added to the call's deadline.
  virtual absl::StatusOr<vault::v1::ControlResponse> Control(
      const std::string& vault, const vault::v1::ControlRequest& request,
      absl::Duration serve_time) = 0;
  // Gossips a revocation to a member.
  virtual absl::StatusOr<vault::v1::RevokeResponse> Revoke(
      const std::string& vault, const vault::v1::RevokeRequest& request) = 0;
  // Hands a message to a member, for the agent it names (docs/messages.md).
  virtual absl::StatusOr<vault::v1::DeliverResponse> Deliver(
      const std::string& vault, const vault::v1::DeliverRequest& request, absl::Time deadline) = 0;
};

struct RuntimeDeps {
  const storage::Database* db = nullptr;
  cas::Store* cas = nullptr;
  audit::AuditLog* log = nullptr;
  const capability::PrivateKey* vault_key = nullptr;
  // The sandbox types this vault runs; an agent's spec picks one by name (sandbox/registry.h).
  // Null or empty, or with agents_enabled false: agents are refused (FAILED_PRECONDITION, with
  // the reason) and records are kept for when they are enabled again.
  const sandbox::SandboxRegistry* sandboxes = nullptr;
  bool agents_enabled = false;
  std::string disabled_reason;
};

class AgentRuntime {
 public:
  static std::vector<storage::ColumnFamilySpec> ColumnFamilies();
  static absl::StatusOr<std::unique_ptr<AgentRuntime>> Start(RuntimeOptions options,
                                                             RuntimeDeps deps);
  AgentRuntime(const AgentRuntime&) = delete;
  AgentRuntime& operator=(const AgentRuntime&) = delete;
  ~AgentRuntime();

  // Starts again every agent whose record says it was running or paused, from its last
  // checkpoint (paused ones are paused again).
  absl::Status ResumeAgents();
  // Asks every agent to checkpoint, waits for them (bounded), ends them; records stay as they
  // are for ResumeAgents. Idempotent.
  void Stop();

  absl::StatusOr<vault::v1::SpawnResponse> Spawn(const vault::v1::SpawnRequest& request);
  vault::v1::ListAgentsResponse List(const vault::v1::ListAgentsRequest& request);
  absl::StatusOr<vault::v1::AgentStatus> Get(const std::string& id);
  // Whether agent `id` has a process here, or one that is ending (its last output may still be
  // read into its log).
  bool HasProcess(const std::string& id);
  // A request whose payload names another member's key is forwarded to that member.
  absl::StatusOr<vault::v1::ControlResponse> Control(const vault::v1::ControlRequest& request);
  // A control request a member forwarded: checked here, never forwarded again.
  absl::StatusOr<vault::v1::ControlResponse> ControlFromMember(
      const vault::v1::ControlRequest& request);
  // A message from the operator ("operator" is the sender).
  absl::StatusOr<uint64_t> SendFromOperator(const std::string& id, const std::string& type,
                                            const std::string& data);
  // Sends a "vault.query" message and waits for the agent's reply (send with reply_to).
  absl::StatusOr<vault::v1::QueryResponse> Query(const vault::v1::QueryRequest& request);

  // A message a member hands over (Messages.Deliver; `caller` is its name): verified, then
  // delivered to the agent here, or forwarded to the member it departed to (docs/messages.md).
  absl::StatusOr<vault::v1::DeliverResponse> DeliverFromMember(
      const vault::v1::DeliverRequest& request, const std::string& caller, absl::Time deadline);

  // Stores a signed revocation (checked, durable, idempotent; audited) and terminates every
  // running agent whose chain it cuts: it counts only when its revoker is a principal of that
  // chain at or above the revoked link (design §5).
  // A new revocation is gossiped to every member (retried until each has it; again at start).
  absl::StatusOr<vault::v1::RevokeResponse> Revoke(const vault::v1::RevokeRequest& request);
  // One gossiped by member `caller`: passed on to the others when it is new here.
  absl::StatusOr<vault::v1::RevokeResponse> RevokeFromMember(
      const vault::v1::RevokeRequest& request, const std::string& caller);

  // ---- The CAS lifecycle (design §12; agent/cas_roots.cc) ----
  // Reports to `sink` the objects this vault's agents hold: the code, state, result and hop in
  // flight of every agent here (running, paused, migrating, or departed before its receipt) or
  // ended within `keep_ended`, and what each of those stored or was given. Every object an agent
  // stored or was given is tracked (AddCasRemoval applies to it).
  absl::Status ListCasRoots(cas::RootSink& sink, absl::Time now, absl::Duration keep_ended);
  // The writes that go with the collector's removal of a tracked object: its agent_objects
  // entries, and the refund of the bytes charged for it.
  absl::Status AddCasRemoval(const cas::Digest& digest, rocksdb::WriteBatch* batch);
  // The collector removed these (durably): their refunds apply to the quotas now.
  void CasObjectsRemoved(const std::vector<cas::Digest>& digests);
  // Bytes held against the principal's storage quota.
  uint64_t StorageUsed(const std::string& principal);

  TrustPolicy* policy() const;
  AgentStore* store() const;
  capability::RevocationStore* revocations() const;

  // Members: set once, before agents can reach other vaults. A new revocation is gossiped to
  // every member, and those given while it was not set are sent now.
  void SetMemberClient(MemberClient* members);
  // Migration (design §7; migration/ owns it): what it may do to this vault's agents, and
  // (set once, before ResumeAgents) where an agent's own migrate call and a hop found in flight
  // at start go. Without a migrator an agent's migrate call is refused.
  MigrationPort* migration_port() const;
  void SetMigrator(Migrator* migrator);

  class Impl;

 private:
  explicit AgentRuntime(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace vault::agent

#endif  // VAULT_AGENT_RUNTIME_H_
