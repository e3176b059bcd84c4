// node: vaultd's Prometheus metrics, served over HTTP (GET /metrics) on `metrics_listen`.
//
// Three kinds of metrics, each measured where it is cheapest (docs/operations.md lists them all):
// - gRPC calls, counted and timed by a server interceptor on both listeners (per method and
//   status code);
// - gauges read at scrape time from the components' own state (CAS totals, audit log size,
//   mirrors, follow cursors, agent records by state, the wasm type's warm sandboxes);
// - event counters read at scrape time from the vault's own audit log, which witnesses every
//   spawn, host call, denial and migration: the entries appended since the metrics were created
//   are counted by action (a scrape reads only the entries appended since the last one).
// Sandbox spawns are counted by a Sandbox decorator.
//
//   Metrics metrics;
//   builder.experimental().SetInterceptorCreators(metrics.RpcInterceptors("federation"));
//   std::unique_ptr<sandbox::Sandbox> counted = metrics.CountSpawns(sandbox.get());
//   metrics.SetSources({.cas_totals = [&] { return store->totals(); }, .audit_log = log, ...});
//   VAULT_RETURN_IF_ERROR(metrics.Serve("127.0.0.1:9701"));
//   ...
//   metrics.StopServing();  // before the sources go away
//
// Thread-safety: thread-safe, except SetSources, Serve and StopServing (one thread, in that
// order; SetSources before Serve). Interceptors and counted sandboxes must not outlive the
// Metrics.
#ifndef VAULT_NODE_METRICS_H_
#define VAULT_NODE_METRICS_H_

#include <grpcpp/support/server_interceptor.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "audit/log.h"
#include "cas/store.h"
#include "replication/follower.h"
#include "sandbox/sandbox.h"
#include "vault/v1/agent.pb.h"
#include "vault/v1/audit.pb.h"
#include "vault/v1/cas_admin.pb.h"

namespace prometheus {
class Exposer;
class Registry;
}  // namespace prometheus

namespace vault::node {

// What the scrape-time metrics read. A source left empty (or null) leaves its metrics out.
struct MetricsSources {
  std::function<cas::StoreTotals()> cas_totals;
  // The vault's own log: its size, and the entries counted by action.
  const audit::AuditLog* audit_log = nullptr;
  std::function<std::vector<vault::v1::MirrorStatus>()> mirrors;
  std::function<std::vector<replication::FollowStatus>()> follows;
  // Every agent record this vault holds (ended ones included).
  std::function<absl::StatusOr<std::vector<vault::v1::AgentRecord>>()> agents;
  // The wasm type's starts: warm sandboxes ready, and starts warm and cold since vaultd started.
  struct WarmStarts {
    uint64_t ready = 0;
    uint64_t warm = 0;
    uint64_t cold = 0;
  };
  std::function<WarmStarts()> wasm_starts;
  // The last CAS collection since start (design §12), if any.
  std::function<std::optional<vault::v1::CollectReport>()> cas_last_collection;
};

class Metrics {
 public:
  Metrics();
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;
  ~Metrics();

  // Interceptor factories for one gRPC server; `listener` labels its calls ("federation",
  // "admin").
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
  RpcInterceptors(const std::string& listener);

  // A sandbox that counts the spawns of `inner` by outcome; null when `inner` is null. `inner`
  // must outlive it.
  std::unique_ptr<sandbox::Sandbox> CountSpawns(sandbox::Sandbox* inner);

  // The scrape-time sources. The audit entries counted are those appended from now on.
  void SetSources(MetricsSources sources);

  // Serves GET /metrics on `address` (host:port with a numeric host; port 0 picks one).
  // UNAVAILABLE when it cannot listen there.
  absl::Status Serve(const std::string& address);
  // The address served, port 0 resolved ("" when not serving).
  const std::string& address() const { return address_; }
  // Stops the HTTP listener; a scrape in progress finishes first. Idempotent.
  void StopServing();

  // The exposition text that GET /metrics answers (without the HTTP server's own metrics).
  std::string Render() const;

 private:
  class RpcMetrics;
  class StateCollector;

  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<RpcMetrics> rpc_;
  std::shared_ptr<StateCollector> state_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  std::string address_;
};

}  // namespace vault::node

#endif  // VAULT_NODE_METRICS_H_
