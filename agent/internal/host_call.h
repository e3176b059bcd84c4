// agent/internal/host_call: the host calls as a table. Each call is one row: its operation name,
// the grant kind it needs, whether it is answered on the reactor's fast path, audited, and audited
// durably before its answer, the function that works out its exact subject and grant from the
// request (Authorize), and its handler. The proxy (host_calls.cc) runs every call the same way:
// row -> Authorize -> decision (the agent's cached authority) -> handler -> answer and audit entry.
//
// Handlers are grouped by concern (agent/host_calls/*.cc) and see the runtime only through
// HostCallServices: the few things a call may do beyond its own agent (the CAS, the file tree,
// the storage quota, messages, children, a hop). Adding a host call is one row in
// host_calls/table.cc and one handler.
//
// Private to agent/.
#ifndef VAULT_AGENT_INTERNAL_HOST_CALL_H_
#define VAULT_AGENT_INTERNAL_HOST_CALL_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "agent/file_tree.h"
#include "agent/internal/live_agent.h"
#include "cas/digest.h"
#include "cas/store.h"
#include "common/unique_fd.h"
#include "vault/v1/agent.pb.h"
#include "vault/v1/audit.pb.h"
#include "vault/v1/config.pb.h"
#include "vault/v1/hostcall.pb.h"
#include "vault/v1/message.pb.h"

namespace vault::agent {

// What a host call may reach beyond its own agent. The runtime implements it.
class HostCallServices {
 public:
  virtual ~HostCallServices() = default;
  virtual cas::Store& cas() = 0;
  virtual FileTree& files() = 0;
  virtual const vault::v1::AgentsConfig& config() const = 0;
  virtual const std::string& vault_name() const = 0;

  // The principal's storage quota: reserves `bytes` or RESOURCE_EXHAUSTED; Refund gives back a
  // reservation that wrote nothing.
  virtual absl::Status ChargeStorage(const std::string& principal, uint64_t bytes) = 0;
  virtual void RefundStorage(const std::string& principal, uint64_t bytes) = 0;
  // Records that the agent holds `digest` (agent_objects.h), before the object is stored or
  // given to it; `charged`: the bytes charged to its principal for it.
  virtual absl::Status RecordObject(const LiveAgent& live, const cas::Digest& digest,
                                    uint64_t charged) = 0;
  // Writes the agent's record (synced).
  virtual absl::Status Persist(LiveAgent& live) ABSL_EXCLUSIVE_LOCKS_REQUIRED(live.mu) = 0;
  virtual void AppendLog(const std::string& id, const std::string& level, std::string message,
                         uint64_t incarnation) = 0;
  virtual void Audit(vault::v1::AuditEntry entry, bool durable) = 0;
  // The agent's trust entry's quota of live agents (or the default).
  virtual uint32_t MaxAgents(const std::string& principal) = 0;
  virtual size_t CountLive(const std::string& principal) = 0;

  // Messages.
  virtual std::shared_ptr<LiveAgent> Find(const std::string& id) = 0;
  // The live agent `to` means to an agent of `principal`: an agent id, or the name of one of
  // that principal's live agents (docs/spec.md). Null when none.
  virtual std::shared_ptr<LiveAgent> Resolve(const std::string& principal,
                                             const std::string& to) = 0;
  // Delivers `message` to `to`'s mailbox (or its waiting receive). RESOURCE_EXHAUSTED when full.
  virtual absl::StatusOr<uint64_t> Deliver(const std::shared_ptr<LiveAgent>& to,
                                           vault::v1::Message message) = 0;
  // Answers the operator's query `reply_to` addressed to `agent_id`; NOT_FOUND when none waits.
  virtual absl::Status AnswerQuery(uint64_t reply_to, const std::string& agent_id,
                                   const std::string& type, const std::string& data) = 0;
  // When `id` departed from here and `sender` may address it: the error naming where it went.
  // A message of `live`'s to the agent `to` names (messages.cc): numbered, signed, and
  // delivered here, or across the federation to wherever the receiver runs, or kept in the
  // sender's outbox when its vault cannot be reached now (`*queued`). Returns its sequence
  // number.
  virtual absl::StatusOr<uint64_t> SendMessage(
      const std::shared_ptr<LiveAgent>& live, const std::shared_ptr<LiveAgent>& to_local,
      const vault::v1::SendRequest& send, bool* queued,
      std::vector<std::pair<std::string, std::string>>* details) = 0;
  // The mail `n` was handed to `live`'s receive: it stays stored until the agent's state is
  // next captured (AckHandedLocked), or is given again if the agent resumes from an older one.
  virtual void HandedLocked(LiveAgent& live, uint64_t n) ABSL_EXCLUSIVE_LOCKS_REQUIRED(live.mu) = 0;
  // Its state now covers these messages handed to it (those still handed leave the store).
  virtual void AckHandedLocked(LiveAgent& live, const std::vector<uint64_t>& ns)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(live.mu) = 0;

  // Records a child (already narrowed) and starts it.
  virtual absl::StatusOr<std::shared_ptr<LiveAgent>> CreateAndLaunch(
      vault::v1::AgentRecord record, const std::string* initial_state) = 0;
  // Starts the agent's own hop on the migration pool; call `call_id` is answered when it fails.
  // UNAVAILABLE: the vault is stopping.
  virtual absl::Status StartMigration(const std::shared_ptr<LiveAgent>& live, uint64_t call_id,
                                      const std::string& to, const std::string& state,
                                      const std::optional<cas::Digest>& state_digest) = 0;
  // For an agent that replays: its effect log (ending with its pending migrate when
  // `with_migrate`), written out, signed and stored in the CAS (charged to its principal's
  // storage) as the state it resumes from. Null when the agent does not replay.
  // `instead`: write out this log rather than the agent's own (a rebased copy, made the agent's
  // only once it is stored).
  virtual absl::StatusOr<std::optional<cas::Digest>> StoreEffectLog(
      const std::shared_ptr<LiveAgent>& live, bool with_migrate,
      const EffectLog* instead = nullptr) = 0;
};

// One host call on its way through the proxy.
struct HostCall {
  std::string op;                         // "cas_put"
  std::string subject;                    // path, digest, agent, host:port
  std::optional<vault::v1::Grant> grant;  // the authority it needs (none: every agent may)
  bool allowed_without_grant = false;     // e.g. reading its own state or a shared object
  bool durable = false;                   // audited durably before the answer
  bool audited = true;
  bool deferred = false;  // answered later (a waiting receive, a hop)
  absl::Status status;
  vault::v1::HostResponse response;
  common::UniqueFd pass_fd;
  uint64_t bytes = 0;
  std::string output_bytes;  // what the SHA-256 "out" of the audit entry covers
  std::vector<std::pair<std::string, std::string>> details;  // more for its audit entry
};

// What a handler works with: the call, its agent, its request, and the runtime's services.
struct HostCallContext {
  HostCallServices& services;
  const std::shared_ptr<LiveAgent>& live;
  vault::v1::HostRequest& request;
  std::string& request_bytes;  // the frame (a waiting receive keeps it for its audit entry)
  HostCall& call;
  size_t max_payload;  // bytes of data a response may carry
};

struct HostCallRow {
  vault::v1::HostRequest::CallCase call;
  const char* op;
  // Answered on the reactor thread: cheap and never blocking.
  bool fast_path = false;
  // Audited durably before the answer (it changes durable state or reaches outside).
  bool durable = false;
  // False: counted, not audited (a heartbeat is a liveness signal, not an effect).
  bool audited = true;
  // Works out the call's subject and exact grant from the request (and may refuse a malformed
  // call by setting call.status). Null: no subject, no grant (every agent may).
  void (*authorize)(HostCallContext& ctx) = nullptr;
  // Runs the call once it is allowed: fills call.response, or sets call.status.
  void (*handle)(HostCallContext& ctx) = nullptr;
};

// The row of `call`, or null for a call this vault does not know.
const HostCallRow* FindHostCall(vault::v1::HostRequest::CallCase call);

// Helpers the handlers share.
// The execution state a checkpoint or migrate of an agent that snapshots carries: `state`, or
// the object `named` (read whole; at most kMaxSnapshotBytes).
absl::StatusOr<std::string> SnapshotBytes(HostCallServices& services, const std::string& state,
                                          const vault::v1::Digest* named);
vault::v1::Grant MakeGrant(vault::v1::Grant::Kind kind);
std::string Sha256Hex(absl::string_view bytes);
// May the agent read the object whose SHA-256 is `sha256`: its own code or state, what it put or
// was shared with it, or a read grant covering the hash.
// An upload of the agent's own state (CasUploadStartRequest.state; its append and finish by
// upload id): a runner's transfer of a snapshot, never logged as an effect.
bool IsStateUpload(LiveAgent& live, const vault::v1::HostRequest& request);
// The digest under which an agent that replays logs `request` (RequestDigest), but for an agent
// that snapshots: its checkpoint and migrate are logged without their state, which is the
// snapshot taken in that very call (the call, not its bytes, is what a replay must match).
std::string LogDigest(const LiveAgent& live, const vault::v1::HostRequest& request)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(live.mu);
bool MayReadLocked(const LiveAgent& live, const std::string& sha256)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(live.mu);
// Drops the agent's open uploads (cas_upload_*) and gives back the storage they reserved.
void DropUploads(HostCallServices& services, LiveAgent& live)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(live.mu);

// The handlers, by concern (agent/host_calls/*.cc).
namespace host_calls {
// state_calls.cc
void AuthorizeCheckpoint(HostCallContext& ctx);
void GetState(HostCallContext& ctx);
void Checkpoint(HostCallContext& ctx);
// cas_calls.cc
void AuthorizeCasGet(HostCallContext& ctx);
void AuthorizeCasWrite(HostCallContext& ctx);
void CasGet(HostCallContext& ctx);
void CasPut(HostCallContext& ctx);
void CasUploadStart(HostCallContext& ctx);
void CasUploadAppend(HostCallContext& ctx);
void CasUploadFinish(HostCallContext& ctx);
// file_calls.cc
void AuthorizeReadPath(HostCallContext& ctx);
void AuthorizeWritePath(HostCallContext& ctx);
void ReadFile(HostCallContext& ctx);
void WriteFile(HostCallContext& ctx);
void List(HostCallContext& ctx);
// network_calls.cc
void AuthorizeNetConnect(HostCallContext& ctx);
void NetConnect(HostCallContext& ctx);
// http_calls.cc
void AuthorizeHttpGet(HostCallContext& ctx);
void HttpGet(HostCallContext& ctx);
// message_calls.cc
void AuthorizeSend(HostCallContext& ctx);
// Does `to` take `record` (its receive grants, and the isolation between principals)?
// NOT_FOUND when it is hidden from the sender; PERMISSION_DENIED without a receive grant.
// `sender_grants`: the sender's (its chain's last link's, for a message from a member).
absl::Status ReceiverAccepts(LiveAgent& to, const vault::v1::MessageRecord& record,
                             const std::vector<vault::v1::Grant>& sender_grants);
// The isolation rule alone, for an agent known by its record: true within one principal, else
// only when both sides' grants name the other exactly.
bool MayAddress(const std::string& to_principal,
                const google::protobuf::RepeatedPtrField<vault::v1::Grant>& to_grants,
                const vault::v1::MessageRecord& record,
                const std::vector<vault::v1::Grant>& sender_grants);
void AuthorizeShare(HostCallContext& ctx);
void Send(HostCallContext& ctx);
void Receive(HostCallContext& ctx);
void Share(HostCallContext& ctx);
// lifecycle_calls.cc
void AuthorizeLog(HostCallContext& ctx);
void AuthorizeSpawnChild(HostCallContext& ctx);
void AuthorizeMigrate(HostCallContext& ctx);
void AuthorizeExit(HostCallContext& ctx);
void Log(HostCallContext& ctx);
void Heartbeat(HostCallContext& ctx);
void Clock(HostCallContext& ctx);
void Random(HostCallContext& ctx);
void SelfInspect(HostCallContext& ctx);
void SpawnChild(HostCallContext& ctx);
void Migrate(HostCallContext& ctx);
void Exit(HostCallContext& ctx);
}  // namespace host_calls

}  // namespace vault::agent

#endif  // VAULT_AGENT_INTERNAL_HOST_CALL_H_
