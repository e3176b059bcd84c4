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
// Thread-safety: single-threaded benchmarks.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
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

}  // namespace
}  // namespace vault::capability

BENCHMARK_MAIN();
