#include "replication/member_channels.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/file_util.h"
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
    grpc::ChannelArguments args;
    args.SetSslTargetNameOverride(m.name());
    args.SetMaxReceiveMessageSize(static_cast<int>(config_.server().max_message_bytes()));
    args.SetMaxSendMessageSize(static_cast<int>(config_.server().max_message_bytes()));
    // A restarted peer is reached again within a second.
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    // (gRPC's minimum time for one connection attempt, TLS handshake included: a slow link
    // needs more than the backoff between attempts.)
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 5000);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
    // A connection of its own, not shared with other channels to the same address (agent
    // migration's), so replication's bulk streams do not queue behind them.
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 30000);
    args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
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
