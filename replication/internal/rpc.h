// replication/internal: what every replication call shares — the deadline, conversions of wire
// digests and statuses at the gRPC edge, and the retry loop for transient failures.
//
//   VAULT_RETURN_IF_ERROR(Retry(policy, "FindMissing", [&]() -> absl::Status { ... }));
//
// Thread-safety: pure functions.
#ifndef VAULT_REPLICATION_INTERNAL_RPC_H_
#define VAULT_REPLICATION_INTERNAL_RPC_H_

#include <grpcpp/grpcpp.h>

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "cas/digest.h"
#include "cas/digest_proto.h"
#include "common/grpc_status.h"
#include "vault/v1/cas.pb.h"

namespace vault::replication::internal {

using cas::FromProto;
using cas::ToProto;
using common::FromGrpc;
inline absl::Status FromItem(const vault::v1::ItemStatus& s) { return common::FromItemStatus(s); }

inline std::unique_ptr<grpc::ClientContext> Context(absl::Duration timeout) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  return ctx;
}

// Failures worth another attempt: the peer is restarting, busy, or a stream was cut.
inline bool Transient(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kResourceExhausted:
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kCancelled:
      return true;
    default:
      return false;
  }
}

struct RetryPolicy {
  // Transient failures are retried until this long has passed since the first one.
  absl::Duration window = absl::Seconds(60);
  absl::Duration first_backoff = absl::Milliseconds(50);
  absl::Duration max_backoff = absl::Seconds(1);
  // Checked between attempts: a stop request ends the loop with CANCELLED.
  std::function<bool()> stopped;
};

// Runs `attempt` until it succeeds, fails for good, or transient failures outlast the window.
inline absl::Status Retry(const RetryPolicy& policy, const std::function<absl::Status()>& attempt) {
  absl::Time first_failure = absl::InfiniteFuture();
  absl::Duration backoff = policy.first_backoff;
  while (true) {
    absl::Status s = attempt();
    if (s.ok() || !Transient(s)) return s;
    absl::Time now = absl::Now();
    if (first_failure == absl::InfiniteFuture()) first_failure = now;
    if (now - first_failure > policy.window) return s;
    if (policy.stopped && policy.stopped()) return absl::CancelledError("replication stopped");
    absl::SleepFor(backoff);
    backoff = std::min(backoff * 2, policy.max_backoff);
  }
}

}  // namespace vault::replication::internal

#endif  // VAULT_REPLICATION_INTERNAL_RPC_H_
