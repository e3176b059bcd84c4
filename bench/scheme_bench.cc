// scheme_bench: what a Scheme agent costs (docs/sandbox.md "The scheme type", docs/replay.md),
// each figure beside a baseline measured in the same run on the same vaults.
//
//  1. Spawn -> first host call, p50: Agents.Spawn (a SPAWN link signed as vaultctl signs it) of a
//     Scheme agent whose first act is a log call, until the vault has counted its first host call
//     (Agents.Get polled every 0.2 ms). Baseline: the same for the native C++ guest
//     (agent_bench_guest), whose first act is a Receive. The RFC's process-sandbox figure is
//     ~10 ms.
//  2. Host-call round trip: a Scheme loop of N (self-inspect) calls; (its end - its first call)
//     / N, interpreter and conversions included. Baseline: the native guest's SelfInspect p50
//     (mode=rtt, timed inside the guest).
//  3. Fuel: a loop of 30,000,000 iterations, from the agent's first call to its end, with
//     max-steps against the same code without; the ratio is the cost of counting.
//  4. Replay hop: a Scheme agent's own migrate-to from vault a to vault b after one cas-get of
//     1 MiB (a 1 MiB effect log), from the "go" message until its first live host call on b
//     (the hop, b's sandbox, the runner, the replay). Baseline: the same agent without the
//     cas-get (a log of a few hundred bytes).
//
//   build/bench/scheme_bench [--runs=N] [--quick]
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/agent_bench_ops.h"
#include "bench/agent_bench_vault.h"
#include "bench/bench_result.h"
#include "bench/bench_util.h"

namespace vault::bench {
namespace {

using vault::v1::AgentStatus;

constexpr char kSchemeSpec[] = R"((agent
  (purpose "scheme_bench")
  (sandbox scheme)
  (capabilities (send (agent "*")) (receive (from "*")) (cas-write) (cas-read))
  (constraints (max-runtime 86400) (max-cpu 3600)%s))
)";
constexpr char kNativeSpec[] = R"((agent
  (purpose "scheme_bench")
  (capabilities (send (agent "*")) (receive (from "*")) (cas-write))
  (constraints (max-runtime 86400) (max-cpu 3600)))
)";

struct Flags {
  int runs = 30;
  int calls = 20000;
  int loop = 30000000;
};

// The same with Scheme source `code`, written to a file under `tmp`.
void UseCode(Vault& v, vault::v1::Agents::Stub& stub, const std::string& tmp,
             const std::string& spec, const std::string& code, const std::string& state) {
  static int n = 0;
  const std::string path = absl::StrCat(tmp, "/code", n++, ".scm");
  WriteAll(path, code);
  UseFile(v, stub, spec, path, state);
}

int Main(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    absl::string_view a = argv[i];
    if (absl::ConsumePrefix(&a, "--runs=")) {
      if (!absl::SimpleAtoi(a, &f.runs) || f.runs < 1) Die("--runs: a positive number");
    } else if (a == "--quick") {
      f.runs = 10;
      f.calls = 5000;
    } else {
      std::printf("usage: %s [--runs=N] [--quick]\n", argv[0]);
      return a == "--help" ? 0 : 2;
    }
  }
  char tmpl[] = "/tmp/scheme-bench-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) Die("mkdtemp");
  const std::string root = tmpl;
  Binaries().vaultd = SCHEME_BENCH_VAULTD;
  Binaries().vaultctl = SCHEME_BENCH_VAULTCTL;
  std::vector<Result> results;
  auto emit = [&](std::string metric, std::string label, double value, std::string unit,
                  double baseline, std::string baseline_name, std::optional<double> target,
                  std::string note) {
    Result r;
    r.bench = "scheme_bench";
    r.metric = std::move(metric);
    r.label = std::move(label);
    r.issue = 24;
    r.value = value;
    r.unit = std::move(unit);
    r.baseline = baseline;
    r.baseline_name = std::move(baseline_name);
    r.target = target;
    r.better = Better::kLower;
    r.note = std::move(note);
    results.push_back(std::move(r));
  };
  {
    Vault v;
    if (absl::Status s = v.Init(root, /*sync_writes=*/true); !s.ok()) Die(s.ToString());
    if (absl::Status s = v.Start(); !s.ok()) Die(s.ToString());
    std::unique_ptr<vault::v1::Agents::Stub> stub = v.NewAgentsStub();
    const std::string spec = absl::StrFormat(kSchemeSpec, "");

    // 1. Spawn -> first host call.
    UseCode(v, *stub, root, spec, "(lambda () (log \"up\") (agent-receive))", "");
    std::vector<double> scheme_first =
        FirstCall(v, *stub, "", f.runs, absl::ZeroDuration()).first_call;
    UseFile(v, *stub, kNativeSpec, SCHEME_BENCH_GUEST, "mode=idle");
    std::vector<double> native_first =
        FirstCall(v, *stub, "mode=idle", f.runs, absl::ZeroDuration()).first_call;
    Summary s1 = Summarize(scheme_first), n1 = Summarize(native_first);
    std::printf(
        "spawn -> first host call: scheme p50 %.1f ms (p90 %.1f), native p50 %.1f ms "
        "(p90 %.1f); %d runs\n",
        s1.p50, s1.p90, n1.p50, n1.p90, f.runs);
    emit("scheme.first_call.p50", "Scheme agent: spawn -> first host call, p50", s1.p50, "ms",
         n1.p50, "native C++ guest, same path", 10.0,
         absl::StrFormat("%d runs; p90 %.1f ms (native %.1f)", f.runs, s1.p90, n1.p90));

    // 2. Host-call round trip.
    const std::string rtt_code =
        absl::StrCat("(lambda () (log \"go\") (let loop ((i 0)) (if (< i ", f.calls,
                     ") (begin (self-inspect) (loop (+ i 1))))))");
    UseCode(v, *stub, root, spec, rtt_code, "");
    std::vector<double> per_call;
    for (int i = 0; i < 5; ++i) {
      const std::string id = SpawnNow(v, *stub, "");
      const absl::Time first = PollUntil(
          *stub, id, [](const AgentStatus& s) { return s.record().counters().host_calls() > 0; });
      const absl::Time end = PollUntil(
          *stub, id, [](const AgentStatus& s) { return Vault::Ended(s.record().state()); });
      per_call.push_back(absl::ToDoubleMicroseconds(end - first) / f.calls);
    }
    UseFile(v, *stub, kNativeSpec, SCHEME_BENCH_GUEST, "mode=idle");
    const double native_us = NativeSelfInspectUs(v, *stub, f.calls);
    Summary s2 = Summarize(per_call);
    std::printf(
        "host call round trip: scheme %.1f us per (self-inspect) (5 runs of %d), native "
        "SelfInspect p50 %.1f us\n",
        s2.p50, f.calls, native_us);
    emit("scheme.host_call_us", "Scheme agent: host call round trip (self-inspect)", s2.p50, "us",
         native_us, "native C++ guest SelfInspect p50", std::nullopt,
         absl::StrFormat("%d calls in a Scheme loop, per call, median of 5 runs", f.calls));

    // 3. Fuel: the same loop, counted and not.
    const std::string loop_code = absl::StrCat(
        "(lambda () (log \"go\") (let loop ((i 0)) (if (< i ", f.loop, ") (loop (+ i 1)))))");
    std::vector<double> free_ms, counted_ms;
    auto loop_ms = [&]() {
      const std::string id = SpawnNow(v, *stub, "");
      const absl::Time first = PollUntil(
          *stub, id, [](const AgentStatus& s) { return s.record().counters().host_calls() > 0; });
      const absl::Time end = PollUntil(
          *stub, id, [](const AgentStatus& s) { return Vault::Ended(s.record().state()); });
      if (MustGet(*stub, id).record().state() != vault::v1::COMPLETED)
        Die(id + " did not complete");
      return absl::ToDoubleMilliseconds(end - first);
    };
    UseCode(v, *stub, root, spec, loop_code, "");
    for (int i = 0; i < 5; ++i) free_ms.push_back(loop_ms());
    UseCode(v, *stub, root, absl::StrFormat(kSchemeSpec, " (max-steps 1000000000)"), loop_code, "");
    for (int i = 0; i < 5; ++i) counted_ms.push_back(loop_ms());
    Summary fr = Summarize(free_ms), co = Summarize(counted_ms);
    std::printf(
        "fuel: a loop of %d iterations, first call to end: counted %.1f ms, not counted "
        "%.1f ms (x%.2f)\n",
        f.loop, co.p50, fr.p50, co.p50 / fr.p50);
    emit("scheme.fuel.loop_ms", absl::StrCat("Scheme loop of ", f.loop, " iterations with fuel"),
         co.p50, "ms", fr.p50, "the same loop without max-steps", std::nullopt,
         "from the agent's first call to its end, median of 5 runs");
    v.Stop();
  }

  // 4. The replay hop, a -> b.
  {
    const std::string ctl = SCHEME_BENCH_VAULTCTL;
    Federation fed(root + "/fed", ctl, SCHEME_BENCH_VAULTD);
    fed.Create({"a", "b"});
    for (const char* name : {"a", "b"}) {
      fed.EditConfig(name, [](std::string& c) {
        absl::StrReplaceAll({{"agents {\n", "agents {\n  max_frame_bytes: 16777216\n"}}, &c);
        c += "server {\n  max_message_bytes: 41943040\n}\n";
      });
    }
    fed.StartAll();
    MustRun({ctl, "--vault", fed.Socket("b"), "policy", "trust", fed.AdminKey("a"), "--ceiling",
             "full"});
    const std::string blob = root + "/blob";
    std::string bytes(1 << 20, '\0');
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>((i * 2654435761u) >> 13);
    WriteAll(blob, bytes);
    // (`cas put` prints "DIGEST  FILE".)
    const std::string put = MustRun({ctl, "--vault", fed.Socket("a"), "cas", "put", blob}).out;
    const std::string digest = put.substr(0, put.find_first_of(" \t\n"));
    std::unique_ptr<vault::v1::Agents::Stub> b = Stub(fed.Socket("b"));
    auto hop = [&](bool big) {
      const std::string spec = root + (big ? "/hop-big.scm" : "/hop-small.scm");
      WriteAll(
          spec,
          absl::StrCat("(spawn-agent (purpose \"scheme_bench hop\")\n"
                       "  (code '(lambda ()\n",
                       big ? absl::StrCat("    (cas-get \"", digest, "\")\n") : "",
                       "    (agent-receive)\n    (migrate-to \"b\")\n    (log \"arrived\")\n"
                       "    (agent-receive)))\n"
                       "  (capabilities (cas-read) (receive (from \"*\")) (migrate (vaults a b)))\n"
                       "  (constraints (max-runtime 3600)))\n"));
      std::vector<double> ms;
      for (int i = 0; i < f.runs; ++i) {
        RunResult spawned = MustRun(
            {ctl, "--vault", fed.Socket("a"), "agent", "spawn", spec, "--as", fed.AdminKey("a")});
        const std::string id(absl::StripAsciiWhitespace(spawned.out));
        std::unique_ptr<vault::v1::Agents::Stub> a = Stub(fed.Socket("a"));
        PollUntil(*a, id, [&](const AgentStatus& s) {
          return s.record().counters().host_calls() >= (big ? 2u : 1u);
        });
        const std::string go = root + "/go";
        WriteAll(go, "go");
        const absl::Time t0 = absl::Now();
        MustRun(
            {ctl, "--vault", fed.Socket("a"), "agent", "send", id, "--type", "go", "--data", go});
        const absl::Time t1 = PollUntil(
            *b, id, [](const AgentStatus& s) { return s.record().counters().log_lines() > 0; });
        ms.push_back(absl::ToDoubleMilliseconds(t1 - t0));
        MustRun(
            {ctl, "--vault", fed.Socket("b"), "agent", "terminate", id, "--as", fed.AdminKey("b")});
      }
      return Summarize(ms);
    };
    Summary small = hop(false), big = hop(true);
    std::printf(
        "replay hop a -> b, go -> first live call on b: 1 MiB log p50 %.1f ms (p90 %.1f), "
        "small log p50 %.1f ms (p90 %.1f); %d runs\n",
        big.p50, big.p90, small.p50, small.p90, f.runs);
    emit("scheme.replay_hop.1MiB", "Scheme migrate-to a -> b with a 1 MiB effect log, p50", big.p50,
         "ms", small.p50, "the same hop with a log of a few hundred bytes", std::nullopt,
         absl::StrFormat("%d runs; from vaultctl agent send \"go\" to the agent's first live call "
                         "on b; p90 %.1f ms",
                         f.runs, big.p90));
  }
  MustRun({"rm", "-rf", root});
  std::printf("\n");
  for (const Result& r : results) EmitResult(r);
  return 0;
}

}  // namespace
}  // namespace vault::bench

int main(int argc, char** argv) { return vault::bench::Main(argc, argv); }
