#include "node/metrics.h"

#include <array>
#include <exception>
#include <map>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "google/protobuf/descriptor.h"
#include "prometheus/counter.h"
#include "prometheus/exposer.h"
#include "prometheus/histogram.h"
#include "prometheus/metric_family.h"
#include "prometheus/registry.h"
#include "prometheus/text_serializer.h"

namespace vault::node {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

constexpr int kGrpcCodes = 17;  // OK .. UNAUTHENTICATED
// Distinct audit actions counted by name; more (there are about 40 today) count as "other".
constexpr size_t kMaxActions = 256;

const prometheus::Histogram::BucketBoundaries& LatencyBuckets() {
  static const auto* const kBuckets = new prometheus::Histogram::BucketBoundaries{
      0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
  return *kBuckets;
}

// The method label: the full method name of a method this binary serves, else "other" (a
// client's unknown method names must not each make a series).
std::string MethodLabel(const char* method) {
  if (method == nullptr) return "other";
  absl::string_view m(method);
  if (m == "/grpc.health.v1.Health/Check" || m == "/grpc.health.v1.Health/Watch") {
    return std::string(m);  // gRPC's own health service (not in the generated pool)
  }
  absl::string_view rest = m;
  if (!absl::ConsumePrefix(&rest, "/")) return "other";
  const size_t slash = rest.find('/');
  if (slash == absl::string_view::npos) return "other";
  const std::string full = absl::StrCat(rest.substr(0, slash), ".", rest.substr(slash + 1));
  if (google::protobuf::DescriptorPool::generated_pool()->FindMethodByName(full) == nullptr) {
    return "other";
  }
  return std::string(m);
}

std::string CodeName(int code) {
  if (code < 0 || code >= kGrpcCodes) return "UNKNOWN";
  return absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
}

MetricFamily Family(std::string name, std::string help, MetricType type) {
  MetricFamily f;
  f.name = std::move(name);
  f.help = std::move(help);
  f.type = type;
  return f;
}

void AddSample(MetricFamily* f, std::vector<ClientMetric::Label> labels, double value) {
  ClientMetric m;
  m.label = std::move(labels);
  if (f->type == MetricType::Counter) {
    m.counter.value = value;
  } else {
    m.gauge.value = value;
  }
  f->metric.push_back(std::move(m));
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// gRPC calls.

class Metrics::RpcMetrics {
 public:
  struct Series {
    prometheus::Counter* started = nullptr;
    prometheus::Histogram* seconds = nullptr;
    std::array<prometheus::Counter*, kGrpcCodes> handled{};  // created on first use
  };

  explicit RpcMetrics(prometheus::Registry& registry)
      : started_(prometheus::BuildCounter()
                     .Name("vault_grpc_server_started_total")
                     .Help("gRPC calls started, by listener and method.")
                     .Register(registry)),
        handled_(prometheus::BuildCounter()
                     .Name("vault_grpc_server_handled_total")
                     .Help("gRPC calls finished, by listener, method and status code.")
                     .Register(registry)),
        seconds_(prometheus::BuildHistogram()
                     .Name("vault_grpc_server_handling_seconds")
                     .Help("Time from the start of a gRPC call to its status, by listener and "
                           "method.")
                     .Register(registry)),
        spawns_(prometheus::BuildCounter()
                    .Name("vault_sandbox_spawns_total")
                    .Help("Sandboxes started for agents, by outcome (ok, error).")
                    .Register(registry)),
        spawn_seconds_(prometheus::BuildHistogram()
                           .Name("vault_sandbox_spawn_seconds")
                           .Help("Time to start a sandbox (successful starts).")
                           .Register(registry)
                           .Add({}, LatencyBuckets())),
        spawns_ok_(&spawns_.Add({{"outcome", "ok"}})),
        spawns_error_(&spawns_.Add({{"outcome", "error"}})) {}

  Series* Get(const std::string& listener, const char* method) {
    const std::string raw = absl::StrCat(listener, "|", method == nullptr ? "" : method);
    {
      absl::MutexLock lock(&mu_);
      if (auto it = series_.find(raw); it != series_.end()) return it->second.get();
    }
    const std::string label = MethodLabel(method);
    // Known methods are cached under their own name; unknown ones share one "other" series.
    const std::string key = label == "other" ? absl::StrCat(listener, "|other") : raw;
    absl::MutexLock lock(&mu_);
    std::unique_ptr<Series>& s = series_[key];
    if (s == nullptr) {
      s = std::make_unique<Series>();
      s->started = &started_.Add({{"listener", listener}, {"method", label}});
      s->seconds = &seconds_.Add({{"listener", listener}, {"method", label}}, LatencyBuckets());
      labels_[s.get()] = {listener, label};
    }
    return s.get();
  }

  void Finish(Series* s, int code, absl::Duration elapsed) {
    if (code < 0 || code >= kGrpcCodes) code = static_cast<int>(grpc::StatusCode::UNKNOWN);
    prometheus::Counter* handled = nullptr;
    {
      absl::MutexLock lock(&mu_);
      handled = s->handled[code];
      if (handled == nullptr) {
        const auto& [listener, method] = labels_[s];
        handled =
            &handled_.Add({{"listener", listener}, {"method", method}, {"code", CodeName(code)}});
        s->handled[code] = handled;
      }
    }
    handled->Increment();
    s->seconds->Observe(absl::ToDoubleSeconds(elapsed));
  }

  void Spawned(bool ok, absl::Duration elapsed) {
    (ok ? spawns_ok_ : spawns_error_)->Increment();
    if (ok) spawn_seconds_.Observe(absl::ToDoubleSeconds(elapsed));
  }

 private:
  prometheus::Family<prometheus::Counter>& started_;
  prometheus::Family<prometheus::Counter>& handled_;
  prometheus::Family<prometheus::Histogram>& seconds_;
  prometheus::Family<prometheus::Counter>& spawns_;
  prometheus::Histogram& spawn_seconds_;
  prometheus::Counter* const spawns_ok_;
  prometheus::Counter* const spawns_error_;
  absl::Mutex mu_;
  // Keyed by "<listener>|<method>".
  absl::flat_hash_map<std::string, std::unique_ptr<Series>> series_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<const Series*, std::pair<std::string, std::string>> labels_
      ABSL_GUARDED_BY(mu_);
};

namespace {

// One per call: counted when its status is sent, or as CANCELLED when the call ends without one
// (the client went away).
class RpcInterceptor : public grpc::experimental::Interceptor {
 public:
  using Finish = std::function<void(int code, absl::Duration elapsed)>;
  explicit RpcInterceptor(Finish finish) : finish_(std::move(finish)) {}
  ~RpcInterceptor() override {
    if (!done_) finish_(static_cast<int>(grpc::StatusCode::CANCELLED), absl::Now() - start_);
  }

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (!done_ && methods->QueryInterceptionHookPoint(
                      grpc::experimental::InterceptionHookPoints::PRE_SEND_STATUS)) {
      done_ = true;
      finish_(static_cast<int>(methods->GetSendStatus().error_code()), absl::Now() - start_);
    }
    methods->Proceed();
  }

 private:
  const absl::Time start_ = absl::Now();
  const Finish finish_;
  bool done_ = false;  // the hooks of one call run one at a time
};

class CountingSandbox : public sandbox::Sandbox {
 public:
  CountingSandbox(sandbox::Sandbox* inner, std::function<void(bool, absl::Duration)> count)
      : inner_(inner), count_(std::move(count)) {}
  const char* type() const override { return inner_->type(); }
  bool can_snapshot() const override { return inner_->can_snapshot(); }
  absl::Status SetProgram(const sandbox::CodeObject& code,
                          sandbox::SandboxSpec* spec) const override {
    return inner_->SetProgram(code, spec);
  }
  absl::StatusOr<std::unique_ptr<sandbox::SandboxHandle>> Spawn(
      const sandbox::SandboxSpec& spec) override {
    const absl::Time start = absl::Now();
    absl::StatusOr<std::unique_ptr<sandbox::SandboxHandle>> handle = inner_->Spawn(spec);
    count_(handle.ok(), absl::Now() - start);
    return handle;
  }

 private:
  sandbox::Sandbox* const inner_;
  const std::function<void(bool, absl::Duration)> count_;
};

class RpcInterceptorFactory : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  using Get = std::function<std::function<void(int, absl::Duration)>(const char* method)>;
  explicit RpcInterceptorFactory(Get get) : get_(std::move(get)) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new RpcInterceptor(get_(info->method()));
  }

 private:
  const Get get_;
};

}  // namespace

// ---------------------------------------------------------------------------------------------
// Scrape-time state.

class Metrics::StateCollector : public prometheus::Collectable {
 public:
  void SetSources(MetricsSources sources) {
    absl::MutexLock lock(&mu_);
    sources_ = std::move(sources);
    cursor_ = sources_.audit_log != nullptr ? sources_.audit_log->size() : 0;
    counts_.clear();
  }

  static void CollectCasLifecycle(const vault::v1::CollectReport& r,
                                  std::vector<MetricFamily>* out) {
    auto gauge = [&](const char* name, const char* help, double v) {
      MetricFamily f = Family(name, help, MetricType::Gauge);
      AddSample(&f, {}, v);
      out->push_back(std::move(f));
    };
    gauge("vault_cas_gc_last_run_timestamp_seconds",
          "When the last CAS collection (or dry run) began, Unix seconds.",
          static_cast<double>(r.started_unix_ms()) / 1000.0);
    gauge("vault_cas_gc_last_removed_bytes",
          "Bytes of the objects the last collection removed (a dry run: would remove).",
          static_cast<double>(r.removed_bytes()));
    gauge("vault_cas_held_bytes",
          "Bytes of objects held (pins, agents, images) at the last "
          "collection.",
          static_cast<double>(r.held_bytes()));
    gauge("vault_cas_pack_bytes",
          "Size of the pack files at the last collection (the one being appended to excluded).",
          static_cast<double>(r.pack_bytes()));
    gauge("vault_cas_pack_live_bytes",
          "Bytes of those pack files a ref points to; the rest is garbage until compaction.",
          static_cast<double>(r.pack_live_bytes()));
    gauge("vault_cas_pack_live_ratio",
          "Live fraction of the pack files at the last collection (1 when there are none).",
          r.pack_bytes() == 0
              ? 1.0
              : static_cast<double>(r.pack_live_bytes()) / static_cast<double>(r.pack_bytes()));
  }

  std::vector<MetricFamily> Collect() const override {
    absl::MutexLock lock(&mu_);
    std::vector<MetricFamily> out;
    const MetricsSources& s = sources_;
    if (s.cas_totals) {
      const cas::StoreTotals totals = s.cas_totals();
      MetricFamily objects = Family("vault_cas_objects", "Objects stored.", MetricType::Gauge);
      AddSample(&objects, {}, static_cast<double>(totals.objects));
      MetricFamily bytes = Family("vault_cas_bytes", "Bytes of the objects stored (their sizes).",
                                  MetricType::Gauge);
      AddSample(&bytes, {}, static_cast<double>(totals.bytes));
      MetricFamily removed = Family("vault_cas_removed_objects_total",
                                    "Objects removed (vaultctl cas rm, collections) since the "
                                    "store began.",
                                    MetricType::Counter);
      AddSample(&removed, {}, static_cast<double>(totals.removed));
      out.push_back(std::move(objects));
      out.push_back(std::move(bytes));
      out.push_back(std::move(removed));
    }
    if (s.cas_last_collection) {
      if (std::optional<vault::v1::CollectReport> r = s.cas_last_collection(); r.has_value()) {
        CollectCasLifecycle(*r, &out);
      }
    }
    if (s.follows) CollectFollows(s.follows(), &out);
    if (s.audit_log != nullptr) {
      MetricFamily size = Family("vault_audit_log_entries", "Entries of this vault's audit log.",
                                 MetricType::Gauge);
      AddSample(&size, {}, static_cast<double>(s.audit_log->size()));
      out.push_back(std::move(size));
    }
    if (s.mirrors) CollectMirrors(s.mirrors(), &out);
    if (s.agents) CollectAgents(s.agents(), &out);
    if (s.wasm_starts) {
      const MetricsSources::WarmStarts w = s.wasm_starts();
      MetricFamily ready =
          Family("vault_wasm_warm_sandboxes",
                 "Wasm sandboxes started ahead of their agents, waiting.", MetricType::Gauge);
      AddSample(&ready, {}, static_cast<double>(w.ready));
      MetricFamily starts = Family("vault_wasm_starts_total",
                                   "Wasm agents' sandbox starts since vaultd started: warm (one "
                                   "started ahead) or cold.",
                                   MetricType::Counter);
      AddSample(&starts, {{"start", "warm"}}, static_cast<double>(w.warm));
      AddSample(&starts, {{"start", "cold"}}, static_cast<double>(w.cold));
      out.push_back(std::move(ready));
      out.push_back(std::move(starts));
    }
    if (s.audit_log != nullptr) CollectEvents(&out);
    return out;
  }

 private:
  using ActionKey = std::pair<std::string, vault::v1::AuditEntry::Decision>;

  static void CollectFollows(const std::vector<replication::FollowStatus>& follows,
                             std::vector<MetricFamily>* out) {
    MetricFamily cursor =
        Family("vault_replication_follow_cursor",
               "The followed peer's feed number this vault has copied up to.", MetricType::Gauge);
    MetricFamily head =
        Family("vault_replication_follow_peer_seq",
               "The followed peer's newest feed number, as last seen (0: not seen yet).",
               MetricType::Gauge);
    MetricFamily lag = Family("vault_replication_follow_lag_entries",
                              "Feed entries of the followed peer not yet passed by the cursor.",
                              MetricType::Gauge);
    for (const replication::FollowStatus& f : follows) {
      AddSample(&cursor, {{"peer", f.peer}}, static_cast<double>(f.cursor));
      AddSample(&head, {{"peer", f.peer}}, static_cast<double>(f.peer_last_seq));
      AddSample(&lag, {{"peer", f.peer}},
                static_cast<double>(f.peer_last_seq > f.cursor ? f.peer_last_seq - f.cursor : 0));
    }
    out->push_back(std::move(cursor));
    out->push_back(std::move(head));
    out->push_back(std::move(lag));
  }

  static void CollectMirrors(const std::vector<vault::v1::MirrorStatus>& mirrors,
                             std::vector<MetricFamily>* out) {
    MetricFamily entries =
        Family("vault_audit_mirror_entries", "Verified entries held of the peer's audit log.",
               MetricType::Gauge);
    MetricFamily lag =
        Family("vault_audit_mirror_lag_entries",
               "Entries of the peer's latest verified checkpoint not yet held by the mirror.",
               MetricType::Gauge);
    MetricFamily success =
        Family("vault_audit_mirror_last_success_timestamp_seconds",
               "When the mirror last synced with the peer (0: never).", MetricType::Gauge);
    MetricFamily state = Family("vault_audit_mirror_state",
                                "1 for the mirror's state (following, unreachable, forked, "
                                "invalid), 0 for the others.",
                                MetricType::Gauge);
    for (const vault::v1::MirrorStatus& m : mirrors) {
      AddSample(&entries, {{"peer", m.peer()}}, static_cast<double>(m.entries()));
      AddSample(&lag, {{"peer", m.peer()}},
                static_cast<double>(
                    m.checkpoint_size() > m.entries() ? m.checkpoint_size() - m.entries() : 0));
      AddSample(&success, {{"peer", m.peer()}},
                static_cast<double>(m.last_success_unix_ms()) / 1000.0);
      for (auto st : {vault::v1::MirrorStatus::FOLLOWING, vault::v1::MirrorStatus::UNREACHABLE,
                      vault::v1::MirrorStatus::FORKED, vault::v1::MirrorStatus::INVALID}) {
        AddSample(&state,
                  {{"peer", m.peer()},
                   {"state", absl::AsciiStrToLower(vault::v1::MirrorStatus::State_Name(st))}},
                  m.state() == st ? 1 : 0);
      }
    }
    out->push_back(std::move(entries));
    out->push_back(std::move(lag));
    out->push_back(std::move(success));
    out->push_back(std::move(state));
  }

  static void CollectAgents(const absl::StatusOr<std::vector<vault::v1::AgentRecord>>& records,
                            std::vector<MetricFamily>* out) {
    if (!records.ok()) return;  // the scrape goes on without them
    std::map<int, uint64_t> by_state;
    for (const vault::v1::AgentRecord& r : *records) ++by_state[r.state()];
    MetricFamily agents = Family("vault_agents",
                                 "Agent records held by this vault, by state (ended agents keep "
                                 "their record).",
                                 MetricType::Gauge);
    for (int st = vault::v1::SPAWNED; st <= vault::v1::AgentState_MAX; ++st) {
      if (!vault::v1::AgentState_IsValid(st)) continue;
      AddSample(&agents,
                {{"state", absl::AsciiStrToLower(vault::v1::AgentState_Name(
                               static_cast<vault::v1::AgentState>(st)))}},
                static_cast<double>(by_state[st]));
    }
    out->push_back(std::move(agents));
  }

  // Counts the audit entries appended since the last scrape.
  void AdvanceLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const uint64_t size = sources_.audit_log->size();
    if (cursor_ >= size) return;
    absl::Status s = sources_.audit_log->store().ScanEntries(
        cursor_,
        // Called by ScanEntries on this thread, with mu_ still held.
        [&](uint64_t seq, absl::string_view, absl::string_view bytes)
            ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
              if (seq >= size) return false;
              vault::v1::AuditEntry e;
              if (e.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
                ActionKey key(e.action(), e.decision());
                if (counts_.size() >= kMaxActions && !counts_.contains(key)) key.first = "other";
                ++counts_[key];
              }
              cursor_ = seq + 1;
              return true;
            });
    (void)s;  // what was read is counted; the next scrape reads on from the cursor
  }

  void CollectEvents(std::vector<MetricFamily>* out) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    AdvanceLocked();
    MetricFamily events = Family("vault_audit_events_total",
                                 "Audit entries appended since vaultd started, by action and "
                                 "decision.",
                                 MetricType::Counter);
    MetricFamily spawns = Family("vault_agent_spawns_total",
                                 "Agent spawn requests (audit action agent.spawn), by decision.",
                                 MetricType::Counter);
    MetricFamily calls =
        Family("vault_agent_host_calls_total",
               "Host calls of agents (heartbeats excepted), by call.", MetricType::Counter);
    MetricFamily denials =
        Family("vault_agent_host_call_denials_total",
               "Host calls denied by the capability check, by call.", MetricType::Counter);
    MetricFamily migrations = Family("vault_migrations_total",
                                     "Agent migrations by outcome: departed, arrived, failed, "
                                     "refused, bad_receipt.",
                                     MetricType::Counter);
    static const std::array<std::pair<const char*, const char*>, 5> kMigrationOutcomes = {{
        {"agent.departed", "departed"},
        {"agent.migrate.in", "arrived"},
        {"agent.migrate.failed", "failed"},
        {"agent.migrate.refused", "refused"},
        {"agent.migrate.bad_receipt", "bad_receipt"},
    }};
    std::map<std::string, uint64_t> call_count, denial_count, migration_count;
    uint64_t spawn_allowed = 0, spawn_denied = 0;
    for (const auto& [outcome_action, outcome] : kMigrationOutcomes) migration_count[outcome] = 0;
    for (const auto& [key, n] : counts_) {
      const auto& [action, decision] = key;
      const bool denied = decision == vault::v1::AuditEntry::DENIED;
      AddSample(&events, {{"action", action}, {"decision", denied ? "denied" : "allowed"}},
                static_cast<double>(n));
      if (action == "agent.spawn") (denied ? spawn_denied : spawn_allowed) += n;
      if (absl::StartsWith(action, "host.")) {
        const std::string call = action.substr(5);
        call_count[call] += n;
        if (denied) denial_count[call] += n;
        denial_count.try_emplace(call, 0);
      }
      for (const auto& [outcome_action, outcome] : kMigrationOutcomes) {
        if (action == outcome_action) migration_count[outcome] += n;
      }
    }
    AddSample(&spawns, {{"decision", "allowed"}}, static_cast<double>(spawn_allowed));
    AddSample(&spawns, {{"decision", "denied"}}, static_cast<double>(spawn_denied));
    for (const auto& [call, n] : call_count) {
      AddSample(&calls, {{"call", call}}, static_cast<double>(n));
    }
    for (const auto& [call, n] : denial_count) {
      AddSample(&denials, {{"call", call}}, static_cast<double>(n));
    }
    for (const auto& [outcome, n] : migration_count) {
      AddSample(&migrations, {{"outcome", outcome}}, static_cast<double>(n));
    }
    out->push_back(std::move(events));
    out->push_back(std::move(spawns));
    out->push_back(std::move(calls));
    out->push_back(std::move(denials));
    out->push_back(std::move(migrations));
  }

  mutable absl::Mutex mu_;
  MetricsSources sources_ ABSL_GUARDED_BY(mu_);
  mutable uint64_t cursor_ ABSL_GUARDED_BY(mu_) = 0;
  mutable std::map<ActionKey, uint64_t> counts_ ABSL_GUARDED_BY(mu_);
};

// ---------------------------------------------------------------------------------------------

Metrics::Metrics()
    : registry_(std::make_shared<prometheus::Registry>()),
      rpc_(std::make_unique<RpcMetrics>(*registry_)),
      state_(std::make_shared<StateCollector>()) {}

Metrics::~Metrics() { StopServing(); }

std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
Metrics::RpcInterceptors(const std::string& listener) {
  RpcMetrics* rpc = rpc_.get();
  auto get = [rpc, listener](const char* method) -> std::function<void(int, absl::Duration)> {
    RpcMetrics::Series* series = rpc->Get(listener, method);
    series->started->Increment();
    return [rpc, series](int code, absl::Duration elapsed) { rpc->Finish(series, code, elapsed); };
  };
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> out;
  out.push_back(std::make_unique<RpcInterceptorFactory>(std::move(get)));
  return out;
}

std::unique_ptr<sandbox::Sandbox> Metrics::CountSpawns(sandbox::Sandbox* inner) {
  if (inner == nullptr) return nullptr;
  RpcMetrics* rpc = rpc_.get();
  return std::make_unique<CountingSandbox>(
      inner, [rpc](bool ok, absl::Duration elapsed) { rpc->Spawned(ok, elapsed); });
}

void Metrics::SetSources(MetricsSources sources) { state_->SetSources(std::move(sources)); }

absl::Status Metrics::Serve(const std::string& address) {
  StopServing();
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("\"", address, "\" is not host:port"));
  }
  try {
    exposer_ = std::make_unique<prometheus::Exposer>(address, /*num_threads=*/2);
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve metrics on ", address, ": ", e.what()));
  }
  exposer_->RegisterCollectable(registry_);
  exposer_->RegisterCollectable(state_);
  std::vector<int> ports = exposer_->GetListeningPorts();
  if (ports.empty()) {
    exposer_.reset();
    return absl::UnavailableError(absl::StrCat("cannot serve metrics on ", address));
  }
  address_ = absl::StrCat(address.substr(0, colon), ":", ports.front());
  return absl::OkStatus();
}

void Metrics::StopServing() {
  exposer_.reset();
  address_.clear();
}

std::string Metrics::Render() const {
  std::vector<MetricFamily> families = registry_->Collect();
  for (MetricFamily& f : state_->Collect()) families.push_back(std::move(f));
  return prometheus::TextSerializer().Serialize(families);
}

}  // namespace vault::node
