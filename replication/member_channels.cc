#include "replication/member_channels.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/member_channel.h"
#include "common/status_macros.h"

namespace vault::replication {

absl::StatusOr<std::unique_ptr<MemberChannels>> MemberChannels::Create(
    const vault::v1::VaultConfig& config) {
  if (config.tls().cert_file().empty() || config.tls().key_file().empty() ||
      config.tls().ca_file().empty()) {
    return absl::FailedPreconditionError("no TLS material: members cannot be reached");
  }
  grpc::SslCredentialsOptions ssl;
  VAULT_ASSIGN_OR_RETURN(ssl.pem_cert_chain, common::ReadFile(config.tls().cert_file()));
  VAULT_ASSIGN_OR_RETURN(ssl.pem_private_key, common::ReadPrivateFile(config.tls().key_file()));
  VAULT_ASSIGN_OR_RETURN(ssl.pem_root_certs, common::ReadFile(config.tls().ca_file()));
  return std::unique_ptr<MemberChannels>(new MemberChannels(config, std::move(ssl)));
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> MemberChannels::Get(const std::string& name) {
  absl::MutexLock lock(&mu_);
  auto it = channels_.find(name);
  if (it != channels_.end()) return it->second;
  for (const vault::v1::Member& m : config_.members()) {
    if (m.name() != name || m.name() == config_.name()) continue;
    // A connection of its own: replication's bulk streams do not queue in front of migration.
    grpc::ChannelArguments args = common::MemberChannelArgs(config_, m, {.own_connection = true});
    std::shared_ptr<grpc::Channel> channel =
        grpc::CreateCustomChannel(m.address(), grpc::SslCredentials(ssl_), args);
    channels_[name] = channel;
    return channel;
  }
  return absl::NotFoundError(absl::StrCat("no federation member named \"", name, "\""));
}

std::vector<std::string> MemberChannels::Peers() const {
  std::vector<std::string> out;
  for (const vault::v1::Member& m : config_.members()) {
    if (m.name() != config_.name()) out.push_back(m.name());
  }
  return out;
}

}  // namespace vault::replication
