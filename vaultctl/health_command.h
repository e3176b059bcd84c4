// vaultctl health: asks a vault whether it serves, through gRPC's standard health service
// (grpc.health.v1.Health/Check), which vaultd serves on both listeners: SERVING while up,
// NOT_SERVING once SIGTERM began draining. For container HEALTHCHECKs, probes and scripts:
//
//   vaultctl --vault /var/lib/vault/data/vault.sock health     # prints SERVING, exit 0
//   vaultctl --config vault.conf --vault vault-b:7701 health   # over mutual TLS, as a member
//
// Exit codes: 0 SERVING; 5 NOT_SERVING, unreachable or no answer in time; 3 a --service the
// vault does not know; otherwise as every command (output.h).
//
// Thread-safety: CheckHealth is thread-safe (gRPC channels are).
#ifndef VAULT_VAULTCTL_HEALTH_COMMAND_H_
#define VAULT_VAULTCTL_HEALTH_COMMAND_H_

#include <grpcpp/grpcpp.h>

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "vaultctl/commands.h"

namespace vault::vaultctl {

// grpc.health.v1.HealthCheckResponse.ServingStatus, by value.
enum class ServingStatus { kUnknown = 0, kServing = 1, kNotServing = 2, kServiceUnknown = 3 };

// "UNKNOWN", "SERVING", "NOT_SERVING", "SERVICE_UNKNOWN".
absl::string_view ServingStatusName(ServingStatus status);

// One Health/Check call for `service` ("" = the whole server) with a deadline of now + timeout.
// The call's error (NOT_FOUND for a service the server does not know, UNAVAILABLE, ...) as a
// Status.
absl::StatusOr<ServingStatus> CheckHealth(const std::shared_ptr<grpc::ChannelInterface>& channel,
                                          const std::string& service, absl::Duration timeout);

void AddHealthCommand(CLI::App& app, GlobalOptions& global, Command& command);

}  // namespace vault::vaultctl

#endif  // VAULT_VAULTCTL_HEALTH_COMMAND_H_
