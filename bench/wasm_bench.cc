// wasm_bench: what a wasm agent costs (docs/wasm.md), each figure beside a baseline measured in
// the same run.
//
// In the engine, in this process (bench/wasm/kernel.c: 2^23 steps stirring a 1 MiB table):
//  1. Interpreter speed: the kernel in wabt's interpreter (slices of 10,000 instructions, no fuel
//     limit). Baseline: the same C compiled natively into this binary.
//  2. Fuel counting: the kernel with a fuel limit, counted in slices of 10,000. Baseline: the same
//     run as one slice of 2^30 instructions (wabt's own loop, nothing counted between slices).
//  3. Asyncify: the kernel after `wasm-opt -O2 --asyncify` (unwinding at its one import), its
//     time and size. Baseline: the kernel after `wasm-opt -O2` alone.
//  4. Snapshot: a capture of the kernel stopped mid-run (1 MiB of its 2 MiB memory in use), its
//     size and its capture + restore time. Baseline: the memory the program uses.
// On a vault (a and b, mutual TLS on loopback):
//  5. Spawn -> first host call, p50, of a wasm agent (bench/wasm/bench_agent.c, whose first act is
//     a log call): spawned 100 ms apart (the warm pool refilled), then back to back. Baseline: the
//     native C++ guest (agent_bench_guest). The RFC says ~1 ms.
//  6. Host-call round trip: N self_inspect calls from wasm, per call. Baseline: the native guest's
//     SelfInspect p50.
//  7. Strong-mobility hop with 1 MiB of linear memory in use: from the "go" message to the agent's
//     first call on b (capture, state upload, hop, b's sandbox and runner, restore). Baseline: the
//     same hop of the agent with 4 KiB in use. Target 15 ms (CRIU: ~170 ms a process).
//
//   build/bench/wasm_bench [--runs=N] [--quick]
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
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/agent_bench_ops.h"
#include "bench/agent_bench_vault.h"
#include "bench/bench_result.h"
#include "bench/bench_util.h"
#include "common/file_util.h"
#include "sandbox/wasm/engine.h"

// The kernel, natively.
extern "C" {
void bench_yield(void) {}
#include "bench/wasm/kernel.c"
}

namespace vault::bench {
namespace {

using vault::sandbox::wasm::Engine;
using vault::sandbox::wasm::EngineLimits;
using vault::sandbox::wasm::HostFunction;
using vault::v1::AgentStatus;

constexpr char kWasmSpec[] = R"((agent
  (purpose "wasm_bench")
  (sandbox wasm)
  (capabilities (send (agent "*")) (receive (from "*")) (cas-write))
  (constraints (max-runtime 86400) (max-cpu 3600)))
)";
constexpr char kNativeSpec[] = R"((agent
  (purpose "wasm_bench")
  (capabilities (send (agent "*")) (receive (from "*")) (cas-write))
  (constraints (max-runtime 86400) (max-cpu 3600)))
)";

struct Flags {
  int runs = 30;
  int calls = 20000;
};

absl::StatusOr<HostFunction> KernelImports(absl::string_view module, absl::string_view name) {
  if (module == "env" && name == "bench_yield") {
    return HostFunction{{}, [](vault::sandbox::wasm::HostCall&) { return absl::OkStatus(); }};
  }
  return absl::NotFoundError("none");
}

std::string ReadOrDie(const std::string& path) {
  absl::StatusOr<std::string> s = common::ReadFile(path);
  if (!s.ok()) Die(s.status().ToString());
  return *s;
}

// Runs the kernel module (its _start: run(KERNEL_STEPS)) to its end; returns the ms it took.
double TimeKernel(const std::string& module, const EngineLimits& limits) {
  absl::StatusOr<std::unique_ptr<Engine>> e = Engine::Load(module, limits, &KernelImports);
  if (!e.ok()) Die(e.status().ToString());
  if (absl::Status s = (*e)->Start("_start"); !s.ok()) Die(s.ToString());
  const absl::Time t0 = absl::Now();
  Engine::Outcome out = (*e)->Run();
  const absl::Time t1 = absl::Now();
  if (out.kind != Engine::Outcome::kReturned && out.kind != Engine::Outcome::kFuelExhausted) {
    Die(absl::StrCat("the kernel did not run: ", out.message));
  }
  return absl::ToDoubleMilliseconds(t1 - t0);
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
  std::vector<Result> results;
  auto emit = [&](std::string metric, std::string label, double value, std::string unit,
                  double baseline, std::string baseline_name, std::optional<double> target,
                  std::string note) {
    Result r;
    r.bench = "wasm_bench";
    r.metric = std::move(metric);
    r.label = std::move(label);
    r.issue = 25;
    r.value = value;
    r.unit = std::move(unit);
    r.baseline = baseline;
    r.baseline_name = std::move(baseline_name);
    r.target = target;
    r.better = Better::kLower;
    r.note = std::move(note);
    results.push_back(std::move(r));
  };

  // 1-4. The kernel (bench/wasm/kernel_main.c: _start runs run(KERNEL_STEPS)).
  const std::string plain = ReadOrDie(WASM_BENCH_KERNEL);
  const std::string asyncified = ReadOrDie(WASM_BENCH_KERNEL_ASYNCIFY);
  {
    const absl::Time t0 = absl::Now();
    volatile uint64_t sink = run(WASM_BENCH_KERNEL_STEPS);
    (void)sink;
    const double native_ms = absl::ToDoubleMilliseconds(absl::Now() - t0);
    EngineLimits free_limits;
    free_limits.max_memory_pages = 64;
    std::vector<double> sliced, one, fuelled, async;
    EngineLimits counted = free_limits;
    counted.fuel = 1ull << 40;
    EngineLimits whole = free_limits;
    whole.slice = 1u << 30;
    for (int i = 0; i < 3; ++i) {
      sliced.push_back(TimeKernel(plain, free_limits));
      fuelled.push_back(TimeKernel(plain, counted));
      one.push_back(TimeKernel(plain, whole));
      async.push_back(TimeKernel(asyncified, free_limits));
    }
    Summary s = Summarize(sliced), fu = Summarize(fuelled), o = Summarize(one),
            as = Summarize(async);
    std::printf(
        "kernel (%d steps): interpreter %.1f ms, native %.2f ms (x%.0f); fuel counted %.1f ms "
        "vs one slice %.1f ms (x%.3f); asyncified %.1f ms (x%.2f), %zu bytes vs %zu (x%.2f)\n",
        WASM_BENCH_KERNEL_STEPS, s.p50, native_ms, s.p50 / native_ms, fu.p50, o.p50, fu.p50 / o.p50,
        as.p50, as.p50 / s.p50, asyncified.size(), plain.size(),
        static_cast<double>(asyncified.size()) / plain.size());
    emit("wasm.interpreter_ms", "wasm kernel in the interpreter (2^23 steps)", s.p50, "ms",
         native_ms, "the same C compiled natively", std::nullopt,
         "median of 3; the ratio is the interpreter's cost");
    emit("wasm.fuel_ms", "wasm kernel with fuel counted in slices of 10,000", fu.p50, "ms", o.p50,
         "the same run as one slice (nothing counted)", std::nullopt, "median of 3");
    emit("wasm.asyncify_ms", "wasm kernel after wasm-opt --asyncify", as.p50, "ms", s.p50,
         "the kernel after wasm-opt -O2 alone", std::nullopt,
         absl::StrFormat("median of 3; code %zu bytes vs %zu", asyncified.size(), plain.size()));

    // 4. A snapshot of the kernel stopped mid-run.
    EngineLimits stop = free_limits;
    stop.fuel = 200'000'000;
    absl::StatusOr<std::unique_ptr<Engine>> e = Engine::Load(plain, stop, &KernelImports);
    if (!e.ok() || !(*e)->Start("_start").ok()) Die("kernel");
    (void)(*e)->Run();
    const absl::Time c0 = absl::Now();
    absl::StatusOr<vault::v1::WasmSnapshot> snap = (*e)->Capture();
    if (!snap.ok()) Die(snap.status().ToString());
    const std::string bytes = snap->SerializeAsString();
    const absl::Time c1 = absl::Now();
    vault::v1::WasmSnapshot back;
    if (!back.ParseFromString(bytes)) Die("snapshot parse");
    absl::StatusOr<std::unique_ptr<Engine>> r = Engine::Load(plain, stop, &KernelImports);
    if (!r.ok() || !(*r)->Restore(back).ok()) Die("restore");
    const absl::Time c2 = absl::Now();
    absl::StatusOr<absl::string_view> mem = (*e)->Read(0, (*e)->memory_bytes());
    uint64_t used = 0;
    for (char ch : *mem) used += ch != 0;
    std::printf(
        "snapshot of the kernel mid-run: %zu bytes for a memory of %llu bytes (%llu non-zero); "
        "capture %.2f ms, restore %.2f ms\n",
        bytes.size(), static_cast<unsigned long long>((*e)->memory_bytes()),
        static_cast<unsigned long long>(used), absl::ToDoubleMilliseconds(c1 - c0),
        absl::ToDoubleMilliseconds(c2 - c1));
    emit("wasm.snapshot_bytes", "wasm snapshot of a run with a 1 MiB table in use",
         static_cast<double>(bytes.size()), "bytes", static_cast<double>(used),
         "its memory's non-zero bytes", std::nullopt,
         absl::StrFormat("memory %llu bytes; capture %.2f ms, restore %.2f ms",
                         static_cast<unsigned long long>((*e)->memory_bytes()),
                         absl::ToDoubleMilliseconds(c1 - c0), absl::ToDoubleMilliseconds(c2 - c1)));
  }

  char tmpl[] = "/tmp/wasm-bench-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) Die("mkdtemp");
  const std::string root = tmpl;
  Binaries().vaultd = WASM_BENCH_VAULTD;
  Binaries().vaultctl = WASM_BENCH_VAULTCTL;
  {
    Vault v;
    if (absl::Status s = v.Init(root, /*sync_writes=*/true); !s.ok()) Die(s.ToString());
    if (absl::Status s = v.Start(); !s.ok()) Die(s.ToString());
    std::unique_ptr<vault::v1::Agents::Stub> stub = v.NewAgentsStub();
    // 5. Spawn -> first host call.
    UseFile(v, *stub, kWasmSpec, WASM_BENCH_AGENT, "idle");
    // Each spawned 100 ms after the last one ended, when the pool has its warm sandbox again
    // (docs/wasm.md, "Warm runners"); then back to back, while the vault still refills its pool
    // and tidies up after the last agent on this machine's two cores.
    const absl::Duration settle = absl::Milliseconds(100);
    FirstCalls wasm_first = FirstCall(v, *stub, "idle", f.runs, settle);
    FirstCalls wasm_burst = FirstCall(v, *stub, "idle", f.runs, absl::ZeroDuration());
    UseFile(v, *stub, kNativeSpec, WASM_BENCH_GUEST, "mode=idle");
    FirstCalls native_first = FirstCall(v, *stub, "mode=idle", f.runs, settle);
    FirstCalls native_burst = FirstCall(v, *stub, "mode=idle", f.runs, absl::ZeroDuration());
    Summary w1 = Summarize(wasm_first.first_call), n1 = Summarize(native_first.first_call);
    Summary wa = Summarize(wasm_first.spawned), na = Summarize(native_first.spawned);
    Summary wb = Summarize(wasm_burst.first_call), nb = Summarize(native_burst.first_call);
    std::printf(
        "spawn -> first host call: wasm p50 %.1f ms (p90 %.1f; the Spawn call's reply at %.1f), "
        "native p50 %.1f ms (reply at %.1f)\n",
        w1.p50, w1.p90, wa.p50, n1.p50, na.p50);
    std::printf(
        "spawn -> first host call, back to back: wasm p50 %.1f ms (p90 %.1f), native p50 "
        "%.1f ms\n",
        wb.p50, wb.p90, nb.p50);
    emit("wasm.first_call.p50", "wasm agent: spawn -> first host call, p50", w1.p50, "ms", n1.p50,
         "native C++ guest, same path", 1.0,
         absl::StrFormat("%d runs 100 ms apart; p90 %.1f ms (native %.1f); the Spawn call (chain "
                         "checks, durable audit entry and record) replied at p50 %.1f ms "
                         "(native %.1f), the first call came %.1f ms later",
                         f.runs, w1.p90, n1.p90, wa.p50, na.p50, w1.p50 - wa.p50));
    emit("wasm.first_call_burst.p50", "wasm agent: spawn -> first host call, back to back, p50",
         wb.p50, "ms", nb.p50, "native C++ guest, same path", std::nullopt,
         absl::StrFormat("%d runs, each spawned as the last one ended; p90 %.1f ms (native %.1f)",
                         f.runs, wb.p90, nb.p90));

    // 6. Host-call round trip.
    UseFile(v, *stub, kWasmSpec, WASM_BENCH_AGENT, "idle");
    std::vector<double> per_call;
    for (int i = 0; i < 5; ++i) {
      const std::string id = SpawnNow(v, *stub, absl::StrCat("rtt ", f.calls));
      const absl::Time first = PollUntil(
          *stub, id, [](const AgentStatus& s) { return s.record().counters().host_calls() > 1; });
      const absl::Time end = PollUntil(
          *stub, id, [](const AgentStatus& s) { return Vault::Ended(s.record().state()); });
      per_call.push_back(absl::ToDoubleMicroseconds(end - first) / f.calls);
    }
    UseFile(v, *stub, kNativeSpec, WASM_BENCH_GUEST, "mode=idle");
    const double native_us = NativeSelfInspectUs(v, *stub, f.calls);
    Summary s2 = Summarize(per_call);
    std::printf("host call round trip: wasm %.1f us per self_inspect, native p50 %.1f us\n", s2.p50,
                native_us);
    emit("wasm.host_call_us", "wasm agent: host call round trip (self_inspect)", s2.p50, "us",
         native_us, "native C++ guest SelfInspect p50", std::nullopt,
         absl::StrFormat("%d calls in a wasm loop, per call, median of 5 runs", f.calls));
    v.Stop();
  }

  // 7. The strong-mobility hop, a -> b.
  {
    const std::string ctl = WASM_BENCH_VAULTCTL;
    Federation fed(root + "/fed", ctl, WASM_BENCH_VAULTD);
    fed.Create({"a", "b"});
    fed.StartAll();
    MustRun({ctl, "--vault", fed.Socket("b"), "policy", "trust", fed.AdminKey("a"), "--ceiling",
             "full"});
    std::unique_ptr<vault::v1::Agents::Stub> a = Stub(fed.Socket("a"));
    std::unique_ptr<vault::v1::Agents::Stub> b = Stub(fed.Socket("b"));
    const std::string spec = root + "/hop.scm";
    WriteAll(spec, absl::StrCat("(spawn-agent (purpose \"wasm_bench hop\") (sandbox wasm)\n"
                                "  (code-file \"",
                                WASM_BENCH_AGENT,
                                "\")\n"
                                "  (capabilities (receive (from \"*\")) (migrate (vaults a b)))\n"
                                "  (constraints (max-runtime 3600)))\n"));
    auto hop = [&](int kib) {
      std::vector<double> ms;
      const std::string state = root + "/hop-state";
      WriteAll(state, absl::StrCat("hop ", kib));
      for (int i = 0; i < f.runs; ++i) {
        RunResult spawned = MustRun({ctl, "--vault", fed.Socket("a"), "agent", "spawn", spec,
                                     "--as", fed.AdminKey("a"), "--state", state});
        const std::string id(absl::StripAsciiWhitespace(spawned.out));
        PollUntil(*a, id,
                  [](const AgentStatus& s) { return s.record().counters().log_lines() > 0; });
        // "go" straight over the admin socket (a vaultctl process's own start is no part of the
        // hop).
        vault::v1::SendMessageRequest go;
        go.set_id(id);
        go.set_type("go");
        go.set_data("go");
        vault::v1::SendMessageResponse sent;
        grpc::ClientContext ctx;
        ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
        const absl::Time t0 = absl::Now();
        if (grpc::Status s = a->Send(&ctx, go, &sent); !s.ok()) {
          Die(absl::StrCat("send go to ", id, ": ", s.error_message()));
        }
        const absl::Time t1 = PollUntil(
            *b, id, [](const AgentStatus& s) { return s.record().counters().log_lines() > 0; });
        ms.push_back(absl::ToDoubleMilliseconds(t1 - t0));
        RunResult ended = Run(
            {ctl, "--vault", fed.Socket("b"), "agent", "terminate", id, "--as", fed.AdminKey("b")});
        if (ended.code != 0) {
          RunResult st = Run({ctl, "--vault", fed.Socket("b"), "agent", "status", id});
          RunResult logs = Run({ctl, "--vault", fed.Socket("b"), "agent", "logs", id});
          Die(absl::StrCat("terminate ", id, " on b: ", ended.err, "\nstatus: ", st.out, st.err,
                           "\nlogs: ", logs.out, logs.err));
        }
      }
      return Summarize(ms);
    };
    Summary small = hop(4), big = hop(1024);
    std::printf(
        "strong-mobility hop a -> b, go -> first call on b: 1 MiB in use p50 %.1f ms (p90 %.1f), "
        "4 KiB p50 %.1f ms (p90 %.1f); %d runs\n",
        big.p50, big.p90, small.p50, small.p90, f.runs);
    emit("wasm.hop.1MiB", "wasm migrate a -> b mid-run with 1 MiB of memory in use, p50", big.p50,
         "ms", small.p50, "the same hop with 4 KiB in use", 15.0,
         absl::StrFormat("%d runs; from vaultctl agent send \"go\" to the agent's first call on b; "
                         "p90 %.1f ms",
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
