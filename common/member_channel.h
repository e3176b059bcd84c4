// common: the gRPC channel arguments every vault uses to reach a federation member over mutual
// TLS (replication, migration, audit mirrors, federation status): one place, so a link that is
// cut and healed is found again in the same time by all of them.
//
//   grpc::ChannelArguments args = MemberChannelArgs(config, member, {.own_connection = true});
//   auto channel = grpc::CreateCustomChannel(member.address(), grpc::SslCredentials(ssl), args);
//
// Header-only: only the components that make channels (and link gRPC) include it.
// Thread-safety: pure functions.
#ifndef VAULT_COMMON_MEMBER_CHANNEL_H_
#define VAULT_COMMON_MEMBER_CHANNEL_H_

#include <grpcpp/grpcpp.h>

#include "vault/v1/config.pb.h"

namespace vault::common {

// How often a member connection is pinged when idle, and how long an answer may take. The
// servers accept a ping every 10 s or more (node/vault_node.cc); 12 s keeps clear of that. A
// connection that died during a network partition (the peer dropped it without telling, or the
// link lost the FIN) is noticed within about 12 s + 10 s of the link coming back, not at the
// next call's deadline.
inline constexpr int kMemberKeepaliveMs = 12000;
inline constexpr int kMemberKeepaliveTimeoutMs = 10000;

struct MemberChannelOptions {
  // A connection of its own, not shared with other channels to the same address (replication's
  // bulk streams must not queue in front of migration's calls).
  bool own_connection = false;
};

inline grpc::ChannelArguments MemberChannelArgs(const vault::v1::VaultConfig& config,
                                                const vault::v1::Member& member,
                                                MemberChannelOptions options = {}) {
  grpc::ChannelArguments args;
  args.SetSslTargetNameOverride(member.name());
  args.SetMaxReceiveMessageSize(static_cast<int>(config.server().max_message_bytes()));
  args.SetMaxSendMessageSize(static_cast<int>(config.server().max_message_bytes()));
  // A restarted peer is reached again within a second.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  // (gRPC's minimum time for one connection attempt, TLS handshake included: a slow link needs
  // more than the backoff between attempts.)
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 5000);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, kMemberKeepaliveMs);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, kMemberKeepaliveTimeoutMs);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  if (options.own_connection) args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return args;
}

}  // namespace vault::common

#endif  // VAULT_COMMON_MEMBER_CHANNEL_H_
