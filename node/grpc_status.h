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
#include "vault/v1/cas.pb.h"

namespace vault::node {

inline grpc::Status ToGrpc(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

inline absl::Status FromGrpc(const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

inline void SetItemStatus(const absl::Status& s, vault::v1::ItemStatus* out) {
  out->set_code(static_cast<int>(s.code()));
  out->set_message(std::string(s.message()));
}

inline absl::Status FromItemStatus(const vault::v1::ItemStatus& s) {
  if (s.code() == 0) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.code()), s.message());
}

inline absl::StatusOr<cas::Digest> FromProto(const vault::v1::Digest& d) {
  return cas::Digest::FromParts(d.sha256(), d.size());
}

inline void ToProto(const cas::Digest& d, vault::v1::Digest* out) {
  out->set_sha256(d.sha256());
  out->set_size(d.size());
}

}  // namespace vault::node

#endif  // VAULT_NODE_GRPC_STATUS_H_
