// capability_bench: the cost of authority checks (design §5), against one Ed25519 signature
// verification measured in the same run.
//
//   build/bench/capability_bench [--benchmark_min_time=1]
//
// Cases:
//   BM_Ed25519Verify                one PublicKey::Verify of a 200-byte message (the baseline)
//   BM_VerifyChainUncached/N        a chain of N DELEGATE links (N = 1..8), no link cache: N
//                                   signature checks plus the rules. Counter `x_links_verify` =
//                                   time / (N x the baseline): the target is <= 1.2.
//   BM_VerifyChainCachedPrefix/N    the same chain whose first N-1 links are in the LinkCache:
//                                   one signature check. Counter `x_verify` = time / baseline.
//   BM_CachedDecision               AgentAuthority::Allows for an operation seen before (the
//                                   host-call hot path): target <= 100 ns.
//   BM_UncachedDecision             the same against 16 grants with the cache defeated (a new
//                                   path every call).
//
// After the benchmark library's own table, one BENCH_RESULT line (bench/bench_result.h) per
// headline figure, for bench/run: uncached chains of 1, 2, 4 and 8 links against links x one
// verify (target ratio <= 1.2), 8 links with 7 cached against one verify, and the cached decision
// against the uncached one (target <= 100 ns). Their baselines are BM_Ed25519Verify and
// BM_UncachedDecision of the same run.
//
// Thread-safety: single-threaded benchmarks.
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "bench/bench_result.h"
#include "benchmark/benchmark.h"
#include "capability/chain.h"
#include "capability/decision.h"
#include "capability/principal.h"

namespace vault::capability {
namespace {

// Seconds per Ed25519 verification, measured once (so every case's ratio uses the same figure).
double VerifySeconds() {
  static const double seconds = [] {
    PrivateKey key = *PrivateKey::Generate();
    const std::string msg(200, 'm');
    const std::string sig = *key.Sign(msg);
    const int n = 4000;
    absl::Time start = absl::Now();
    for (int i = 0; i < n; ++i) benchmark::DoNotOptimize(key.public_key().Verify(msg, sig).ok());
    return absl::ToDoubleSeconds(absl::Now() - start) / n;
  }();
  return seconds;
}

vault::v1::Grant PathGrant(vault::v1::Grant::Kind kind, const std::string& path) {
  vault::v1::Grant g;
  g.set_kind(kind);
  g.set_path(path);
  return g;
}

struct BenchChain {
  std::vector<PrivateKey> keys;  // keys[0] is the trusted root
  vault::v1::Chain chain;
};

BenchChain MakeChain(int links) {
  BenchChain c;
  for (int i = 0; i <= links; ++i) c.keys.push_back(*PrivateKey::Generate());
  const int64_t now = absl::ToUnixMillis(absl::Now());
  std::string parent;
  for (int i = 0; i < links; ++i) {
    vault::v1::LinkPayload p;
    p.set_version(kLinkVersion);
    p.set_kind(vault::v1::LinkPayload::DELEGATE);
    p.set_parent(parent);
    p.set_issuer(c.keys[i].public_key().raw());
    p.set_audience(c.keys[i + 1].public_key().raw());
    *p.add_grants() = PathGrant(vault::v1::Grant::READ, "/vault/pub");
    *p.add_grants() = PathGrant(vault::v1::Grant::WRITE, "/vault/pub/out");
    vault::v1::Grant net;
    net.set_kind(vault::v1::Grant::NETWORK);
    net.set_host("*.example.com");
    net.set_port(443);
    *p.add_grants() = net;
    p.mutable_constraints()->set_max_memory_bytes(uint64_t{1} << 30);
    p.set_not_before_unix_ms(now - 1000);
    p.set_not_after_unix_ms(now + 3600 * 1000);
    vault::v1::SignedLink link = *SignLink(p, c.keys[i]);
    parent = LinkHash(link);
    *c.chain.add_links() = std::move(link);
  }
  return c;
}

VerifyContext ContextFor(const BenchChain& c) {
  VerifyContext ctx;
  const PublicKey root = c.keys.front().public_key();
  ctx.trusted_root = [root](const PublicKey& k) { return k == root; };
  ctx.this_vault = c.keys.back().public_key();
  return ctx;
}

void BM_Ed25519Verify(benchmark::State& state) {
  PrivateKey key = *PrivateKey::Generate();
  const std::string msg(200, 'm');
  const std::string sig = *key.Sign(msg);
  for (auto _ : state) benchmark::DoNotOptimize(key.public_key().Verify(msg, sig).ok());
}
BENCHMARK(BM_Ed25519Verify);

void BM_VerifyChainUncached(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  BenchChain c = MakeChain(n);
  VerifyContext ctx = ContextFor(c);
  ChainVerifier verifier(nullptr);
  for (auto _ : state) {
    absl::StatusOr<VerifiedChain> v = verifier.Verify(c.chain, ctx);
    if (!v.ok()) state.SkipWithError(std::string(v.status().message()).c_str());
    benchmark::DoNotOptimize(v);
  }
  const double baseline = VerifySeconds();
  // kIsIterationInvariantRate | kInvert turns value v into (seconds per iteration) / v.
  state.counters["x_links_verify"] = benchmark::Counter(
      n * baseline, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_VerifyChainUncached)->DenseRange(1, 8);

void BM_VerifyChainCachedPrefix(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  BenchChain c = MakeChain(n);
  VerifyContext ctx = ContextFor(c);
  for (auto _ : state) {
    state.PauseTiming();
    // Keep the last link uncached: every iteration checks exactly one signature.
    LinkCache fresh;
    for (int i = 0; i + 1 < n; ++i) fresh.Insert(LinkHash(c.chain.links(i)));
    ChainVerifier v2(&fresh);
    state.ResumeTiming();
    absl::StatusOr<VerifiedChain> v = v2.Verify(c.chain, ctx);
    if (!v.ok() || v->signatures_checked != 1) state.SkipWithError("expected one signature check");
    benchmark::DoNotOptimize(v);
  }
  const double baseline = VerifySeconds();
  state.counters["x_verify"] = benchmark::Counter(
      baseline, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_VerifyChainCachedPrefix)->DenseRange(1, 8);

std::vector<vault::v1::Grant> SixteenGrants() {
  std::vector<vault::v1::Grant> grants;
  for (int i = 0; i < 15; ++i) {
    grants.push_back(PathGrant(vault::v1::Grant::WRITE, absl::StrCat("/vault/w", i)));
  }
  grants.push_back(PathGrant(vault::v1::Grant::READ, "/vault/pub"));
  return grants;
}

void BM_CachedDecision(benchmark::State& state) {
  AgentAuthority authority(SixteenGrants());
  const vault::v1::Grant op = PathGrant(vault::v1::Grant::READ, "/vault/pub/data/prices.csv");
  if (!authority.Allows(op)) state.SkipWithError("expected allowed");
  for (auto _ : state) benchmark::DoNotOptimize(authority.Allows(op));
}
BENCHMARK(BM_CachedDecision);

void BM_UncachedDecision(benchmark::State& state) {
  AgentAuthority authority(SixteenGrants(), /*max_cached=*/1);
  std::vector<vault::v1::Grant> ops;
  for (int i = 0; i < 64; ++i) {
    ops.push_back(PathGrant(vault::v1::Grant::READ, absl::StrCat("/vault/pub/f", i)));
  }
  size_t i = 0;
  for (auto _ : state) benchmark::DoNotOptimize(authority.Allows(ops[i++ % ops.size()]));
}
BENCHMARK(BM_UncachedDecision);

// Keeps the wall-clock seconds per iteration of every case, by name, beside the console table.
class CollectingReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& reports) override {
    ConsoleReporter::ReportRuns(reports);
    for (const Run& run : reports) {
      if (run.run_type != Run::RT_Iteration || run.error_occurred || run.iterations == 0) continue;
      seconds_[run.benchmark_name()] =
          run.real_accumulated_time / static_cast<double>(run.iterations);
    }
  }
  std::optional<double> Seconds(const std::string& name) const {
    auto it = seconds_.find(name);
    if (it == seconds_.end()) return std::nullopt;
    return it->second;
  }

 private:
  std::map<std::string, double> seconds_;
};

std::optional<double> Scaled(std::optional<double> v, double factor) {
  if (!v.has_value()) return std::nullopt;
  return *v * factor;
}

void EmitResults(const CollectingReporter& rep) {
  using vault::bench::Better;
  using vault::bench::Result;
  const std::optional<double> verify_us = Scaled(rep.Seconds("BM_Ed25519Verify"), 1e6);
  // The worst uncached ratio over every chain length that ran, for the 8-link row's note.
  std::string worst;
  double worst_ratio = 0;
  for (int n = 1; n <= 8; ++n) {
    std::optional<double> us = Scaled(rep.Seconds(absl::StrCat("BM_VerifyChainUncached/", n)), 1e6);
    if (us.has_value() && verify_us.has_value() && *us / (n * *verify_us) > worst_ratio) {
      worst_ratio = *us / (n * *verify_us);
      worst = absl::StrCat(n);
    }
  }
  for (int n : {1, 2, 4, 8}) {
    Result r;
    r.bench = "capability_bench";
    r.metric = absl::StrCat("capability.chain_uncached.links", n);
    r.label = absl::StrCat("chain verification, ", n, n == 1 ? " link" : " links", ", uncached");
    r.issue = 4;
    r.value = Scaled(rep.Seconds(absl::StrCat("BM_VerifyChainUncached/", n)), 1e6);
    r.unit = "us";
    r.baseline = Scaled(verify_us, n);
    r.baseline_name = n == 1 ? "one Ed25519 verify" : absl::StrCat(n, " x one Ed25519 verify");
    r.target = 1.2;
    r.target_on = vault::bench::TargetOn::kRatio;
    r.better = Better::kLower;
    if (n == 8 && !worst.empty()) {
      char buf[96];
      std::snprintf(buf, sizeof buf, "worst ratio over 1-8 links: %.2f (%s links)", worst_ratio,
                    worst.c_str());
      r.note = buf;
    }
    vault::bench::EmitResult(r);
  }
  Result cached;
  cached.bench = "capability_bench";
  cached.metric = "capability.chain_cached_prefix.links8";
  cached.label = "chain verification, 8 links, first 7 cached";
  cached.issue = 4;
  cached.value = Scaled(rep.Seconds("BM_VerifyChainCachedPrefix/8"), 1e6);
  cached.unit = "us";
  cached.baseline = verify_us;
  cached.baseline_name = "one Ed25519 verify";
  cached.better = Better::kLower;
  vault::bench::EmitResult(cached);
  Result decision;
  decision.bench = "capability_bench";
  decision.metric = "capability.cached_decision";
  decision.label = "cached host-call decision (AgentAuthority::Allows)";
  decision.issue = 4;
  decision.value = Scaled(rep.Seconds("BM_CachedDecision"), 1e9);
  decision.unit = "ns";
  decision.baseline = Scaled(rep.Seconds("BM_UncachedDecision"), 1e9);
  decision.baseline_name = "uncached decision, 16 grants";
  decision.target = 100;
  decision.better = Better::kLower;
  vault::bench::EmitResult(decision);
}

}  // namespace
}  // namespace vault::capability

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  vault::capability::CollectingReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  std::printf("\n");
  vault::capability::EmitResults(reporter);
  return 0;
}
