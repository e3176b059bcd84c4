// node: the gRPC `Federation` service: a vault's summary of itself (Summary, on both listeners)
// and, on the admin socket only, the federation as this vault sees it (Status: every member's
// summary beside this vault's mirror of its log and its follow cursor of its CAS feed).
//
// Status asks every member at once, each call with its own deadline, on a thread of its own, so a
// member that does not answer costs the caller one timeout, not one per member. An unreachable
// member is listed with the error; it does not fail the call.
//
// Thread-safety: thread-safe; every pointer in Deps must outlive the service.
#ifndef VAULT_NODE_FEDERATION_SERVICE_H_
#define VAULT_NODE_FEDERATION_SERVICE_H_

#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "agent/runtime.h"
#include "audit/log.h"
#include "cas/store.h"
#include "common/executor.h"
#include "node/audit_follower.h"
#include "replication/member_channels.h"
#include "storage/database.h"
#include "vault/v1/config.pb.h"
#include "vault/v1/federation.grpc.pb.h"

namespace vault::node {

class FederationService final : public vault::v1::Federation::CallbackService {
 public:
  struct Deps {
    const vault::v1::VaultConfig* config = nullptr;
    std::string public_key;
    int64_t started_unix_ms = 0;
    cas::Store* store = nullptr;
    audit::AuditLog* log = nullptr;
    agent::AgentRuntime* agents = nullptr;
    AuditFollower* mirrors = nullptr;
    storage::Database* db = nullptr;
    replication::MemberChannels* members = nullptr;  // null: members cannot be reached
    common::Executor* executor = nullptr;
    bool hold_agents = false;  // vaultd --hold-agents: recorded agents are held, not run
  };
  // `admin`: served on the admin socket (Status allowed); otherwise on the members' listener.
  FederationService(Deps deps, bool admin) : deps_(std::move(deps)), admin_(admin) {}

  grpc::ServerUnaryReactor* Summary(grpc::CallbackServerContext* ctx,
                                    const vault::v1::SummaryRequest* req,
                                    vault::v1::VaultSummary* resp) override;
  grpc::ServerUnaryReactor* Status(grpc::CallbackServerContext* ctx,
                                   const vault::v1::FederationStatusRequest* req,
                                   vault::v1::FederationStatusResponse* resp) override;

  // This vault's summary, now. On the members' listener, at most one per second is computed
  // (members asking in a loop get the same answer), without mirrors' errors and notes.
  vault::v1::VaultSummary Summarize() const;

  // Cancels every Status call in flight (its members' calls end at once) and refuses new ones.
  // Called before the server shuts down, so no call outlives the drain.
  void Shutdown();

 private:
  class StatusCall;
  void Forget(StatusCall* call);
  vault::v1::VaultSummary Compute() const;

  const Deps deps_;
  const bool admin_;
  absl::Mutex mu_;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  absl::flat_hash_set<StatusCall*> calls_ ABSL_GUARDED_BY(mu_);
  mutable absl::Mutex cache_mu_;
  mutable vault::v1::VaultSummary cached_ ABSL_GUARDED_BY(cache_mu_);
  mutable absl::Time cached_at_ ABSL_GUARDED_BY(cache_mu_) = absl::InfinitePast();
};

}  // namespace vault::node

#endif  // VAULT_NODE_FEDERATION_SERVICE_H_
