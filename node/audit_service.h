// node: the gRPC `Audit` service (every listener) and `AuditAdmin` (admin socket only) over the
// vault's own audit log and its mirrors of its peers' logs (proto/vault/v1/audit.proto).
//
// A request's `log` names the log: "" (or this vault's name) is the vault's own log, a member's
// name is this vault's verified mirror of that member's log. Proofs are served for any size up
// to the entries held; size 0 means the latest checkpoint's size. Entries stream in pages of at
// most 1000 entries or 1 MiB, exactly as stored (the bytes that were hashed).
//
//   AuditService audit(&log, follower.get(), &executor, /*admin=*/false);
//   builder.RegisterService(&audit);
//
// Thread-safety: thread-safe; the log, follower and executor must outlive the services.
#ifndef VAULT_NODE_AUDIT_SERVICE_H_
#define VAULT_NODE_AUDIT_SERVICE_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "audit/log.h"
#include "audit/log_store.h"
#include "audit/note.h"
#include "common/executor.h"
#include "node/audit_follower.h"
#include "vault/v1/audit.grpc.pb.h"

namespace vault::node {

// One log as served: where it is stored, how big it is and its latest checkpoint.
struct ServedLog {
  std::string name;  // the vault whose log it is
  const audit::LogStore* store = nullptr;
  const audit::NoteVerifier* verifier = nullptr;
  uint64_t size = 0;  // entries held
  std::optional<vault::v1::StoredCheckpoint> checkpoint;
  const audit::Mirror* mirror = nullptr;  // null for the own log
};

// Finds `name` ("" = own). NOT_FOUND names the logs there are.
absl::StatusOr<ServedLog> FindLog(const audit::AuditLog* own, const AuditFollower* follower,
                                  const std::string& name);

class AuditService final : public vault::v1::Audit::CallbackService {
 public:
  // `admin`: served on the admin socket (may issue checkpoints on demand).
  AuditService(audit::AuditLog* log, const AuditFollower* follower, common::Executor* executor,
               bool admin)
      : log_(log), follower_(follower), executor_(executor), admin_(admin) {}

  grpc::ServerUnaryReactor* GetCheckpoint(grpc::CallbackServerContext* ctx,
                                          const vault::v1::GetCheckpointRequest* req,
                                          vault::v1::GetCheckpointResponse* resp) override;
  grpc::ServerWriteReactor<vault::v1::GetEntriesResponse>* GetEntries(
      grpc::CallbackServerContext* ctx, const vault::v1::GetEntriesRequest* req) override;
  grpc::ServerUnaryReactor* GetInclusionProof(grpc::CallbackServerContext* ctx,
                                              const vault::v1::GetInclusionProofRequest* req,
                                              vault::v1::GetInclusionProofResponse* resp) override;
  grpc::ServerUnaryReactor* GetConsistencyProof(
      grpc::CallbackServerContext* ctx, const vault::v1::GetConsistencyProofRequest* req,
      vault::v1::GetConsistencyProofResponse* resp) override;
  grpc::ServerUnaryReactor* GetVerifierKey(grpc::CallbackServerContext* ctx,
                                           const vault::v1::GetVerifierKeyRequest* req,
                                           vault::v1::GetVerifierKeyResponse* resp) override;

  static constexpr size_t kPageEntries = 1000;
  static constexpr size_t kPageBytes = 1 << 20;

 private:
  audit::AuditLog* const log_;
  const AuditFollower* const follower_;
  common::Executor* const executor_;
  const bool admin_;
};

class AuditAdminService final : public vault::v1::AuditAdmin::CallbackService {
 public:
  AuditAdminService(const audit::AuditLog* log, const AuditFollower* follower,
                    common::Executor* executor)
      : log_(log), follower_(follower), executor_(executor) {}

  grpc::ServerUnaryReactor* VerifyLog(grpc::CallbackServerContext* ctx,
                                      const vault::v1::VerifyLogRequest* req,
                                      vault::v1::VerifyLogResponse* resp) override;
  grpc::ServerUnaryReactor* ListMirrors(grpc::CallbackServerContext* ctx,
                                        const vault::v1::ListMirrorsRequest* req,
                                        vault::v1::ListMirrorsResponse* resp) override;

 private:
  const audit::AuditLog* const log_;
  const AuditFollower* const follower_;
  common::Executor* const executor_;
};

}  // namespace vault::node

#endif  // VAULT_NODE_AUDIT_SERVICE_H_
