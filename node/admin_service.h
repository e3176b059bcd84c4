// node: the gRPC `Admin` service, served only on the vault's Unix socket.
//
// Thread-safety: thread-safe; the store must outlive the service.
#ifndef VAULT_NODE_ADMIN_SERVICE_H_
#define VAULT_NODE_ADMIN_SERVICE_H_

#include <string>

#include "cas/store.h"
#include "vault/v1/admin.grpc.pb.h"
#include "vault/v1/config.pb.h"

namespace vault::node {

inline constexpr char kVersion[] = "0.1.0";

class AdminService final : public vault::v1::Admin::CallbackService {
 public:
  // What the agents' sandbox can do here, probed once at start.
  struct SandboxState {
    std::string fences;
    bool agents_enabled = false;
    std::string disabled_reason;
  };
  AdminService(const vault::v1::VaultConfig& config, std::string public_key,
               std::string bound_listen_address, const cas::Store* store, SandboxState sandbox)
      : config_(config),
        public_key_(std::move(public_key)),
        listen_(std::move(bound_listen_address)),
        store_(store),
        sandbox_(std::move(sandbox)),
        started_unix_ms_(absl::ToUnixMillis(absl::Now())) {}

  grpc::ServerUnaryReactor* Status(grpc::CallbackServerContext* ctx,
                                   const vault::v1::StatusRequest* req,
                                   vault::v1::StatusResponse* resp) override;

 private:
  const vault::v1::VaultConfig config_;
  const std::string public_key_;
  const std::string listen_;
  const cas::Store* const store_;
  const SandboxState sandbox_;
  const int64_t started_unix_ms_;
};

}  // namespace vault::node

#endif  // VAULT_NODE_ADMIN_SERVICE_H_
