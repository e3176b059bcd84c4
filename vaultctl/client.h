// vaultctl: how vaultctl reaches a vault, and the deadline every call carries.
//
// --vault (or VAULT_ADDR) is a Unix socket (a path, or unix:PATH) or host:port. host:port is
// mutual TLS: the client certificate, key and CA come from --tls-cert/--tls-key/--tls-ca, or from
// the [tls] section of a vault config given with --config (acting as that member). Without
// --vault, --config's admin socket is used.
//
// Thread-safety: Connection is immutable after Connect; stubs are thread-safe.
#ifndef VAULT_VAULTCTL_CLIENT_H_
#define VAULT_VAULTCTL_CLIENT_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "vault/v1/admin.grpc.pb.h"
#include "vault/v1/agent.grpc.pb.h"
#include "vault/v1/audit.grpc.pb.h"
#include "vault/v1/cas.grpc.pb.h"
#include "vault/v1/federation.grpc.pb.h"

namespace vault::vaultctl {

struct ConnectOptions {
  std::string vault;        // --vault / VAULT_ADDR
  std::string config;       // --config: a vault config to take addresses and TLS material from
  std::string tls_cert;     // --tls-cert
  std::string tls_key;      // --tls-key
  std::string tls_ca;       // --tls-ca
  std::string server_name;  // --server-name: the vault name expected in the server certificate
  absl::Duration timeout = absl::Seconds(30);
};

class Connection {
 public:
  static absl::StatusOr<Connection> Connect(const ConnectOptions& options);

  vault::v1::Cas::Stub* cas() const { return cas_.get(); }
  vault::v1::Admin::Stub* admin() const { return admin_.get(); }
  // Served only on the admin socket.
  vault::v1::Agents::Stub* agents() const { return agents_.get(); }
  vault::v1::Audit::Stub* audit() const { return audit_.get(); }
  vault::v1::AuditAdmin::Stub* audit_admin() const { return audit_admin_.get(); }
  vault::v1::Federation::Stub* federation() const { return federation_.get(); }
  const std::string& target() const { return target_; }
  // The channel itself, for calls without a stub here (vaultctl health).
  const std::shared_ptr<grpc::Channel>& channel() const { return channel_; }
  absl::Duration timeout() const { return timeout_; }
  // A context whose deadline is now + the call timeout.
  std::unique_ptr<grpc::ClientContext> Context() const;
  // A context for a long stream: the deadline scales with the bytes it moves (at >= 8 MiB/s).
  std::unique_ptr<grpc::ClientContext> StreamContext(uint64_t bytes) const;

 private:
  std::string target_;
  absl::Duration timeout_;
  std::shared_ptr<grpc::Channel> channel_;
  std::shared_ptr<vault::v1::Cas::Stub> cas_;
  std::shared_ptr<vault::v1::Admin::Stub> admin_;
  std::shared_ptr<vault::v1::Agents::Stub> agents_;
  std::shared_ptr<vault::v1::Audit::Stub> audit_;
  std::shared_ptr<vault::v1::AuditAdmin::Stub> audit_admin_;
  std::shared_ptr<vault::v1::Federation::Stub> federation_;
};

}  // namespace vault::vaultctl

#endif  // VAULT_VAULTCTL_CLIENT_H_
