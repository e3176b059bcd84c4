#include "vaultctl/health_command.h"

#include <grpcpp/impl/client_unary_call.h>
#include <grpcpp/impl/codegen/proto_utils.h>
#include <grpcpp/impl/rpc_method.h>

#include <iostream>

#include "absl/strings/str_cat.h"
#include "google/protobuf/wrappers.pb.h"
#include "node/grpc_status.h"
#include "vaultctl/output.h"

namespace vault::vaultctl {
namespace {

constexpr char kCheckMethod[] = "/grpc.health.v1.Health/Check";

}  // namespace

absl::string_view ServingStatusName(ServingStatus status) {
  switch (status) {
    case ServingStatus::kServing:
      return "SERVING";
    case ServingStatus::kNotServing:
      return "NOT_SERVING";
    case ServingStatus::kServiceUnknown:
      return "SERVICE_UNKNOWN";
    case ServingStatus::kUnknown:
      break;
  }
  return "UNKNOWN";
}

absl::StatusOr<ServingStatus> CheckHealth(const std::shared_ptr<grpc::ChannelInterface>& channel,
                                          const std::string& service, absl::Duration timeout) {
  // Debian ships no generated grpc.health.v1 messages. HealthCheckRequest is {string service = 1}
  // and HealthCheckResponse {ServingStatus status = 1}, an enum: on the wire exactly
  // StringValue {string value = 1} and Int32Value {int32 value = 1}.
  google::protobuf::StringValue request;
  request.set_value(service);
  google::protobuf::Int32Value response;
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  const grpc::internal::RpcMethod method(kCheckMethod, grpc::internal::RpcMethod::NORMAL_RPC,
                                         channel);
  grpc::Status s =
      grpc::internal::BlockingUnaryCall(channel.get(), method, &context, request, &response);
  if (!s.ok()) return node::FromGrpc(s);
  const int value = response.value();
  if (value < 0 || value > static_cast<int>(ServingStatus::kServiceUnknown)) {
    return absl::InternalError(absl::StrCat("health: unknown serving status ", value));
  }
  return static_cast<ServingStatus>(value);
}

void AddHealthCommand(CLI::App& app, GlobalOptions& g, Command& command) {
  auto* health = app.add_subcommand(
      "health",
      "Ask the vault's gRPC health service whether it serves (exit 0 SERVING, 5 otherwise)");
  static std::string service;
  health->add_option("--service", service, "The service to ask about (default: the whole vault)");
  health->callback([&g, &command] {
    command = [&g] {
      absl::StatusOr<Connection> conn = Connection::Connect(g.connect);
      if (!conn.ok()) return ReportConnectError(conn.status(), g.json());
      absl::StatusOr<ServingStatus> status = CheckHealth(conn->channel(), service, conn->timeout());
      if (!status.ok()) return ReportError(status.status(), g.json());
      const absl::string_view name = ServingStatusName(*status);
      if (g.json()) {
        std::cout << Json::Object().Add("service", service).Add("status", name).ToString() << "\n";
      } else {
        std::cout << name << "\n";
      }
      return *status == ServingStatus::kServing ? kExitOk : kExitUnavailable;
    };
  });
}

}  // namespace vault::vaultctl
