// node: conversions at the gRPC edge — absl::Status <-> grpc::Status, wire digests <-> cas::Digest.
// Only node/ turns absl::Status into grpc::Status (design §1).
//
// Thread-safety: pure functions.
#ifndef VAULT_NODE_GRPC_STATUS_H_
#define VAULT_NODE_GRPC_STATUS_H_

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cas/digest.h"
#include "cas/digest_proto.h"
#include "common/grpc_status.h"
#include "vault/v1/cas.pb.h"

namespace vault::node {

inline grpc::Status ToGrpc(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

// The client side's conversions (common/grpc_status.h) and the wire digests (cas/digest_proto.h),
// under the names node/ has always used.
using cas::FromProto;
using cas::ToProto;
using common::FromGrpc;
using common::FromItemStatus;
using common::SetItemStatus;

}  // namespace vault::node

#endif  // VAULT_NODE_GRPC_STATUS_H_
