// migration/transport: how this vault reaches the other members (design §7). Transport is
// what a hop needs (Offer/Commit/Status/Where/Located on the destination's Migration service,
// and the objects it lacks through its Cas service); agent::MemberClient is what the agent
// runtime needs (forwarded control requests, revocation gossip). GrpcTransport implements both
// over gRPC with mutual TLS. Every call has a deadline. The node serves the other side
// (node/migration_service.cc).
//
//   VAULT_ASSIGN_OR_RETURN(auto transport, GrpcTransport::Create(config, store));
//   runtime->SetMemberClient(transport.get());
//   deps.transport = transport.get();  // MigrationDeps
//
// Thread-safety: all methods are thread-safe; channels are made once per member, on first use.
#ifndef VAULT_MIGRATION_TRANSPORT_H_
#define VAULT_MIGRATION_TRANSPORT_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "agent/runtime.h"
#include "cas/store.h"
#include "vault/v1/cas.grpc.pb.h"
#include "vault/v1/config.pb.h"
#include "vault/v1/message.grpc.pb.h"
#include "vault/v1/migration.grpc.pb.h"

namespace vault::migration {

// What a hop needs of another member.
class Transport {
 public:
  virtual ~Transport() = default;
  // The digests `vault` lacks.
  virtual absl::StatusOr<std::vector<vault::v1::Digest>> Offer(
      const std::string& vault, const vault::v1::MigrationPackage& package) = 0;
  // Copies these objects from this vault's CAS to `vault`'s.
  virtual absl::Status SendObjects(const std::string& vault,
                                   const std::vector<vault::v1::Digest>& digests) = 0;
  // `state`: the state's bytes, carried in the Commit (see CommitRequest.state), or null.
  virtual absl::StatusOr<vault::v1::SignedReceipt> Commit(
      const std::string& vault, const vault::v1::MigrationPackage& package,
      const std::string* state) = 0;
  virtual absl::StatusOr<vault::v1::TransferStatusResponse> Status(const std::string& vault,
                                                                   const std::string& transfer_id,
                                                                   bool abort_if_unknown) = 0;
  // What `vault` knows of an agent (its state there, where it departed to).
  virtual absl::StatusOr<vault::v1::WhereResponse> Where(const std::string& vault,
                                                         const std::string& agent_id) = 0;
  // Tells an agent's home vault the receipt of a hop.
  virtual absl::StatusOr<vault::v1::LocatedResponse> Located(
      const std::string& vault, const vault::v1::SignedReceipt& receipt) = 0;
};

class GrpcTransport final : public Transport, public agent::MemberClient {
 public:
  // FAILED_PRECONDITION without TLS material (a vault without it cannot reach members).
  static absl::StatusOr<std::unique_ptr<GrpcTransport>> Create(const vault::v1::VaultConfig& config,
                                                               const cas::Store* store);

  absl::StatusOr<std::vector<vault::v1::Digest>> Offer(
      const std::string& vault, const vault::v1::MigrationPackage& package) override;
  absl::Status SendObjects(const std::string& vault,
                           const std::vector<vault::v1::Digest>& digests) override;
  absl::StatusOr<vault::v1::SignedReceipt> Commit(const std::string& vault,
                                                  const vault::v1::MigrationPackage& package,
                                                  const std::string* state) override;
  absl::StatusOr<vault::v1::TransferStatusResponse> Status(const std::string& vault,
                                                           const std::string& transfer_id,
                                                           bool abort_if_unknown) override;
  absl::StatusOr<vault::v1::WhereResponse> Where(const std::string& vault,
                                                 const std::string& agent_id) override;
  absl::StatusOr<vault::v1::LocatedResponse> Located(
      const std::string& vault, const vault::v1::SignedReceipt& receipt) override;
  absl::StatusOr<vault::v1::ControlResponse> Control(const std::string& vault,
                                                     const vault::v1::ControlRequest& request,
                                                     absl::Duration serve_time) override;
  absl::StatusOr<vault::v1::RevokeResponse> Revoke(
      const std::string& vault, const vault::v1::RevokeRequest& request) override;
  absl::StatusOr<vault::v1::DeliverResponse> Deliver(const std::string& vault,
                                                     const vault::v1::DeliverRequest& request,
                                                     absl::Time deadline) override;

 private:
  struct Peer {
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<vault::v1::Migration::Stub> migration;
    std::unique_ptr<vault::v1::Cas::Stub> cas;
    std::unique_ptr<vault::v1::Messages::Stub> messages;
  };
  GrpcTransport(vault::v1::VaultConfig config, const cas::Store* store,
                grpc::SslCredentialsOptions ssl)
      : config_(std::move(config)), store_(store), ssl_(std::move(ssl)) {}
  absl::StatusOr<Peer*> PeerOf(const std::string& vault);
  std::unique_ptr<grpc::ClientContext> Context(absl::Duration timeout) const;
  // One unary Migration call to `vault` with the call deadline; errors start "<what> <vault>: ".
  template <typename Request, typename Response>
  absl::StatusOr<Response> Unary(const std::string& vault, absl::string_view what,
                                 grpc::Status (vault::v1::Migration::Stub::*method)(
                                     grpc::ClientContext*, const Request&, Response*),
                                 const Request& request);

  const vault::v1::VaultConfig config_;
  const cas::Store* const store_;
  const grpc::SslCredentialsOptions ssl_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::unique_ptr<Peer>> peers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace vault::migration

#endif  // VAULT_MIGRATION_TRANSPORT_H_
