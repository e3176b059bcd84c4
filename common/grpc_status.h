// common/grpc_status: a gRPC client's view of a call's outcome as an absl::Status, the one
// conversion every caller of a vault's services uses (replication, the migration transport,
// vaultctl, the audit follower, tests). The codes are the same numbers in both libraries.
// The other direction, absl::Status -> grpc::Status, is node/'s alone (node/grpc_status.h):
// only the services answer in gRPC's terms.
//
//   grpc::Status s = stub->Stat(&ctx, request, &response);
//   VAULT_RETURN_IF_ERROR(common::FromGrpc(s, "Stat"));   // "Stat: <the server's message>"
//   VAULT_RETURN_IF_ERROR(common::FromItemStatus(response.status(), digest_text));
//
// Thread-safety: pure functions.
#ifndef VAULT_COMMON_GRPC_STATUS_H_
#define VAULT_COMMON_GRPC_STATUS_H_

#include <grpcpp/grpcpp.h>

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "vault/v1/cas.pb.h"

namespace vault::common {

// The call's status, its message as the server gave it.
inline absl::Status FromGrpc(const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

// The same, its message prefixed with what was called ("what: message").
inline absl::Status FromGrpc(const grpc::Status& s, absl::string_view what) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                      absl::StrCat(what, ": ", s.error_message()));
}

// One item's outcome in a batch answer (BatchPut, BatchGet, ...): code 0 is OK.
inline absl::Status FromItemStatus(const vault::v1::ItemStatus& s) {
  if (s.code() == 0) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.code()), s.message());
}

inline absl::Status FromItemStatus(const vault::v1::ItemStatus& s, absl::string_view what) {
  if (s.code() == 0) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.code()),
                      absl::StrCat(what, ": ", s.message()));
}

inline void SetItemStatus(const absl::Status& s, vault::v1::ItemStatus* out) {
  out->set_code(static_cast<int>(s.code()));
  out->set_message(std::string(s.message()));
}

}  // namespace vault::common

#endif  // VAULT_COMMON_GRPC_STATUS_H_
