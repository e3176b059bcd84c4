// replication: gRPC channels to the federation's members over mutual TLS, made from the vault's
// config (its TLS material and its members list). Replication reaches peers through these.
//
//   VAULT_ASSIGN_OR_RETURN(auto channels, MemberChannels::Create(config));
//   VAULT_ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> peer, channels->Get("vault-b"));
//
// Thread-safety: thread-safe; a member's channel is made once, on first use.
#ifndef VAULT_REPLICATION_MEMBER_CHANNELS_H_
#define VAULT_REPLICATION_MEMBER_CHANNELS_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "vault/v1/config.pb.h"

namespace vault::replication {

class MemberChannels {
 public:
  // FAILED_PRECONDITION when the config has no TLS material (members cannot be reached).
  static absl::StatusOr<std::unique_ptr<MemberChannels>> Create(
      const vault::v1::VaultConfig& config);

  // The channel to member `name`; NOT_FOUND when it is not a member (or is this vault).
  absl::StatusOr<std::shared_ptr<grpc::Channel>> Get(const std::string& name);
  // Names of the other members, in config order.
  std::vector<std::string> Peers() const;

 private:
  MemberChannels(vault::v1::VaultConfig config, grpc::SslCredentialsOptions ssl)
      : config_(std::move(config)), ssl_(std::move(ssl)) {}

  const vault::v1::VaultConfig config_;
  const grpc::SslCredentialsOptions ssl_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<grpc::Channel>> channels_ ABSL_GUARDED_BY(mu_);
};

}  // namespace vault::replication

#endif  // VAULT_REPLICATION_MEMBER_CHANNELS_H_
