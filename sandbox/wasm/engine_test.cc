#include "sandbox/wasm/engine.h"

#include <csignal>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sandbox/wasm/wat_test_util.h"

namespace vault::sandbox::wasm {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// The host the tests give: "test.report(i64)" records a value; "test.pause()" captures a
// snapshot inside the call (the first time only, unless resumed); "test.print(ptr, len)" records
// memory bytes; "test.exit(code)" ends the program.
struct TestHost {
  std::vector<uint64_t> reported;
  std::vector<std::string> printed;
  std::optional<vault::v1::WasmSnapshot> paused;
  int pauses = 0, resumes = 0;

  ImportResolver Resolver() {
    return [this](absl::string_view module,
                  absl::string_view name) -> absl::StatusOr<HostFunction> {
      if (module != "test") return absl::NotFoundError("no such module");
      if (name == "report") {
        return HostFunction{{{ValType::kI64}, {}}, [this](HostCall& c) {
                              reported.push_back(c.args[0]);
                              return absl::OkStatus();
                            }};
      }
      if (name == "pause") {
        return HostFunction{{{}, {ValType::kI32}}, [this](HostCall& c) {
                              if (c.resumed) {
                                ++resumes;
                                c.results[0] = 7;
                                return absl::OkStatus();
                              }
                              ++pauses;
                              absl::StatusOr<vault::v1::WasmSnapshot> s = c.engine.Capture();
                              if (!s.ok()) return s.status();
                              paused = *s;
                              c.results[0] = 1;
                              return absl::OkStatus();
                            }};
      }
      if (name == "print") {
        return HostFunction{{{ValType::kI32, ValType::kI32}, {}}, [this](HostCall& c) {
                              absl::StatusOr<absl::string_view> b =
                                  c.engine.Read(c.args[0], c.args[1]);
                              if (!b.ok()) return b.status();
                              printed.emplace_back(*b);
                              return absl::OkStatus();
                            }};
      }
      if (name == "exit") {
        return HostFunction{{{ValType::kI32}, {}},
                            [](HostCall& c) { return Engine::Exit(static_cast<int>(c.args[0])); }};
      }
      return absl::NotFoundError("no such function");
    };
  }
};

std::unique_ptr<Engine> LoadOrDie(absl::string_view wat, TestHost& host, EngineLimits limits = {}) {
  absl::StatusOr<std::string> wasm = WatToWasm(wat);
  EXPECT_TRUE(wasm.ok()) << wasm.status();
  absl::StatusOr<std::unique_ptr<Engine>> e = Engine::Load(*wasm, limits, host.Resolver());
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? *std::move(e) : nullptr;
}

// Sums i*i for i in [0, n) with a deep-ish call stack, reporting every 1000th partial sum and
// pausing (test.pause) once, at i == pause_at, three calls deep.
constexpr absl::string_view kSumOfSquares = R"(
(module
  (import "test" "report" (func $report (param i64)))
  (import "test" "pause" (func $pause (result i32)))
  (memory 1)
  (global $calls (mut i32) (i32.const 0))
  (func $square (param $i i64) (param $pause_at i64) (result i64)
    (global.set $calls (i32.add (global.get $calls) (i32.const 1)))
    (if (i64.eq (local.get $i) (local.get $pause_at))
      (then (drop (call $pause))))
    (i64.mul (local.get $i) (local.get $i)))
  (func $step (param $i i64) (param $pause_at i64) (result i64)
    (call $square (local.get $i) (local.get $pause_at)))
  (func (export "_start")
    (local $i i64) (local $sum i64)
    (loop $next
      (local.set $sum (i64.add (local.get $sum) (call $step (local.get $i) (i64.const 31337))))
      ;; the sum is kept in memory too, so that a restore must bring memory back
      (i64.store (i32.const 64) (local.get $sum))
      (if (i64.eqz (i64.rem_u (local.get $i) (i64.const 1000)))
        (then (call $report (i64.load (i32.const 64)))))
      (local.set $i (i64.add (local.get $i) (i64.const 1)))
      (br_if $next (i64.lt_u (local.get $i) (i64.const 50000))))
    (call $report (local.get $sum))
    (call $report (i64.extend_i32_u (global.get $calls)))))
)";

TEST(WasmEngine, RunsToTheEndWithHostCalls) {
  TestHost host;
  std::unique_ptr<Engine> e = LoadOrDie(kSumOfSquares, host);
  ASSERT_NE(e, nullptr);
  ASSERT_TRUE(e->Start("_start").ok());
  Engine::Outcome out = e->Run();
  EXPECT_EQ(out.kind, Engine::Outcome::kReturned) << out.message;
  ASSERT_EQ(host.reported.size(), 52u);
  // sum of i^2 for i < 50000 = (n-1)n(2n-1)/6
  const uint64_t n = 50000;
  EXPECT_EQ(host.reported[50], (n - 1) * n * (2 * n - 1) / 6);
  EXPECT_EQ(host.reported[51], 50000u);
  EXPECT_EQ(host.pauses, 1);
}

TEST(WasmEngine, SnapshotInAHostCallRestoresInAFreshEngineAndEndsTheSame) {
  TestHost first;
  std::unique_ptr<Engine> a = LoadOrDie(kSumOfSquares, first);
  ASSERT_TRUE(a->Start("_start").ok());
  ASSERT_EQ(a->Run().kind, Engine::Outcome::kReturned);
  ASSERT_TRUE(first.paused.has_value());
  const vault::v1::WasmSnapshot snap = *first.paused;
  EXPECT_TRUE(snap.has_pending());
  EXPECT_EQ(snap.frames_size(), 3);  // _start, $step, $square
  // Restored elsewhere: goes on inside the pause call (made again, resumed) to the same end.
  TestHost second;
  std::unique_ptr<Engine> b = LoadOrDie(kSumOfSquares, second);
  ASSERT_TRUE(b->Restore(snap).ok());
  Engine::Outcome out = b->Run();
  EXPECT_EQ(out.kind, Engine::Outcome::kReturned) << out.message;
  EXPECT_EQ(second.resumes, 1);
  EXPECT_EQ(second.pauses, 0);
  // Reports from i = 32000 on, then the same sum and call count as the uninterrupted run.
  ASSERT_EQ(second.reported.size(), 20u);
  EXPECT_EQ(second.reported.back(), first.reported.back());
  EXPECT_EQ(second.reported[18], first.reported[51 - 1]);
  EXPECT_EQ(second.reported[0], first.reported[32]);
}

TEST(WasmEngine, SnapshotBetweenSlicesRestoresMidLoop) {
  // A loop with no host call until its end: captured at a slice boundary.
  constexpr absl::string_view kLoop = R"(
(module
  (import "test" "report" (func $report (param i64)))
  (func (export "_start")
    (local $i i64) (local $x i64)
    (local.set $x (i64.const 1))
    (loop $next
      (local.set $x (i64.add (i64.mul (local.get $x) (i64.const 6364136223846793005))
                             (i64.const 1442695040888963407)))
      (local.set $i (i64.add (local.get $i) (i64.const 1)))
      (br_if $next (i64.lt_u (local.get $i) (i64.const 100000))))
    (call $report (local.get $x))))
)";
  TestHost whole;
  std::unique_ptr<Engine> a = LoadOrDie(kLoop, whole);
  ASSERT_TRUE(a->Start("_start").ok());
  ASSERT_EQ(a->Run().kind, Engine::Outcome::kReturned);
  ASSERT_EQ(whole.reported.size(), 1u);

  EngineLimits limits;
  limits.fuel = 123457;  // stops mid-loop
  TestHost part;
  std::unique_ptr<Engine> b = LoadOrDie(kLoop, part, limits);
  ASSERT_TRUE(b->Start("_start").ok());
  Engine::Outcome stopped = b->Run();
  ASSERT_EQ(stopped.kind, Engine::Outcome::kFuelExhausted);
  EXPECT_EQ(stopped.message, "fuel exhausted (123457 instructions)");
  absl::StatusOr<vault::v1::WasmSnapshot> snap = b->Capture();
  ASSERT_TRUE(snap.ok()) << snap.status();
  EXPECT_FALSE(snap->has_pending());
  EXPECT_EQ(snap->fuel_used(), 123457u);

  TestHost rest;
  std::unique_ptr<Engine> c = LoadOrDie(kLoop, rest);
  ASSERT_TRUE(c->Restore(*snap).ok());
  ASSERT_EQ(c->Run().kind, Engine::Outcome::kReturned);
  EXPECT_EQ(rest.reported, whole.reported);
}

TEST(WasmEngine, AnInterruptCapturesAtTheNextSliceAndTheRunGoesOnFromThere) {
  constexpr absl::string_view kCount = R"(
(module
  (import "test" "report" (func $report (param i64)))
  (func (export "_start")
    (local $i i64)
    (loop $next
      (local.set $i (i64.add (local.get $i) (i64.const 1)))
      (br_if $next (i64.lt_u (local.get $i) (i64.const 30000))))
    (call $report (local.get $i))))
)";
  TestHost host;
  std::unique_ptr<Engine> e = LoadOrDie(kCount, host);
  ASSERT_TRUE(e->Start("_start").ok());
  volatile sig_atomic_t flag = 1;  // asked before the run: taken at the first slice's end
  std::optional<vault::v1::WasmSnapshot> taken;
  e->SetInterrupt(&flag, [&taken](Engine& engine) -> absl::Status {
    absl::StatusOr<vault::v1::WasmSnapshot> s = engine.Capture();
    if (!s.ok()) return s.status();
    taken = *s;
    return absl::OkStatus();
  });
  ASSERT_EQ(e->Run().kind, Engine::Outcome::kReturned);
  EXPECT_EQ(flag, 0);
  EXPECT_EQ(host.reported, (std::vector<uint64_t>{30000}));
  ASSERT_TRUE(taken.has_value());
  EXPECT_FALSE(taken->has_pending());
  EXPECT_EQ(taken->fuel_used(), 10000u);  // one slice
  TestHost again;
  std::unique_ptr<Engine> r = LoadOrDie(kCount, again);
  ASSERT_TRUE(r->Restore(*taken).ok());
  ASSERT_EQ(r->Run().kind, Engine::Outcome::kReturned);
  EXPECT_EQ(again.reported, (std::vector<uint64_t>{30000}));
  EXPECT_LT(r->fuel_used(), e->fuel_used() + 10000);
}

TEST(WasmEngine, InfiniteLoopEndsWithFuelExhausted) {
  TestHost host;
  EngineLimits limits;
  limits.fuel = 1000000;
  std::unique_ptr<Engine> e =
      LoadOrDie("(module (func (export \"_start\") (loop $l (br $l))))", host, limits);
  ASSERT_TRUE(e->Start("_start").ok());
  Engine::Outcome out = e->Run();
  EXPECT_EQ(out.kind, Engine::Outcome::kFuelExhausted);
  EXPECT_EQ(out.message, "fuel exhausted (1000000 instructions)");
  EXPECT_EQ(e->fuel_used(), 1000000u);
}

TEST(WasmEngine, DeepRecursionEndsWithStackExhausted) {
  TestHost host;
  EngineLimits limits;
  limits.max_call_depth = 500;
  std::unique_ptr<Engine> e =
      LoadOrDie("(module (func $f (call $f)) (func (export \"_start\") (call $f)))", host, limits);
  ASSERT_TRUE(e->Start("_start").ok());
  Engine::Outcome out = e->Run();
  EXPECT_EQ(out.kind, Engine::Outcome::kTrapped);
  EXPECT_EQ(out.message, "stack exhausted");
}

TEST(WasmEngine, TrapsSayWhich) {
  TestHost host;
  std::unique_ptr<Engine> oob = LoadOrDie(
      "(module (memory 1) (func (export \"_start\") (drop (i32.load (i32.const 65534)))))", host);
  ASSERT_TRUE(oob->Start("_start").ok());
  Engine::Outcome out = oob->Run();
  EXPECT_EQ(out.kind, Engine::Outcome::kTrapped);
  EXPECT_THAT(out.message, StartsWith("trap: out of bounds memory access"));

  std::unique_ptr<Engine> div = LoadOrDie(
      "(module (func (export \"_start\") (drop (i32.div_u (i32.const 1) (i32.const 0)))))", host);
  ASSERT_TRUE(div->Start("_start").ok());
  out = div->Run();
  EXPECT_EQ(out.kind, Engine::Outcome::kTrapped);
  EXPECT_EQ(out.message, "trap: integer divide by zero");

  std::unique_ptr<Engine> unreachable =
      LoadOrDie("(module (func (export \"_start\") unreachable))", host);
  ASSERT_TRUE(unreachable->Start("_start").ok());
  EXPECT_EQ(unreachable->Run().message, "trap: unreachable executed");
}

TEST(WasmEngine, HostExitEndsTheProgramWithItsCode) {
  TestHost host;
  std::unique_ptr<Engine> e = LoadOrDie(R"(
(module (import "test" "exit" (func $exit (param i32)))
  (func (export "_start") (call $exit (i32.const 3)) unreachable))
)",
                                        host);
  ASSERT_TRUE(e->Start("_start").ok());
  Engine::Outcome out = e->Run();
  EXPECT_EQ(out.kind, Engine::Outcome::kExited);
  EXPECT_EQ(out.exit_code, 3);
}

TEST(WasmEngine, MemoryGrowPastTheLimitFails) {
  TestHost host;
  EngineLimits limits;
  limits.max_memory_pages = 4;
  std::unique_ptr<Engine> e = LoadOrDie(R"(
(module (import "test" "report" (func $report (param i64)))
  (memory 1)
  (func (export "_start")
    (call $report (i64.extend_i32_s (memory.grow (i32.const 3))))
    (call $report (i64.extend_i32_s (memory.grow (i32.const 1))))
    (call $report (i64.extend_i32_s (memory.grow (i32.const 60000))))))
)",
                                        host, limits);
  ASSERT_TRUE(e->Start("_start").ok());
  ASSERT_EQ(e->Run().kind, Engine::Outcome::kReturned);
  EXPECT_EQ(host.reported, (std::vector<uint64_t>{1, ~0ull, ~0ull}));
  EXPECT_EQ(e->memory_bytes(), 4u * 65536);
}

TEST(WasmEngine, LoadingRefusesWhatItCannotRun) {
  TestHost host;
  auto load = [&](absl::string_view wat, EngineLimits limits = {}) {
    absl::StatusOr<std::string> wasm = WatToWasm(wat);
    EXPECT_TRUE(wasm.ok()) << wasm.status();
    return Engine::Load(*wasm, limits, host.Resolver()).status();
  };
  absl::Status s = load("(module (import \"library\" \"nope\" (func)))");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("imports library.nope, which this vault does not offer"));

  s = load("(module (import \"test\" \"report\" (func (param i32))))");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "the module imports test.report as (i32) -> (); this vault's is (i64) -> ()");

  s = load("(module (import \"test\" \"mem\" (memory 1)))");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("imports test.mem, a memory: this vault offers functions only"));

  EngineLimits small;
  small.max_memory_pages = 2;
  s = load("(module (memory 3))", small);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "memory limit: the module's memory starts at 3 pages of 64 KiB; this agent may have "
            "at most 2");

  small.max_table_elements = 10;
  s = load("(module (table 11 funcref))", small);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("table limit: the module's table starts with 11 elements"));

  absl::StatusOr<std::unique_ptr<Engine>> garbage =
      Engine::Load(std::string("\0asm\x01\0\0\0\x01\xff", 10), EngineLimits(), host.Resolver());
  EXPECT_EQ(garbage.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(garbage.status().message()),
              StartsWith("not a valid WebAssembly module: "));

  EngineLimits tiny;
  tiny.max_module_bytes = 8;
  garbage = Engine::Load(std::string(9, 'x'), tiny, host.Resolver());
  EXPECT_EQ(garbage.status().message(), "the module is 9 bytes; this vault loads at most 8");
}

TEST(WasmEngine, RestoreRefusesASnapshotOfAnotherModule) {
  TestHost host;
  std::unique_ptr<Engine> a = LoadOrDie(kSumOfSquares, host);
  ASSERT_TRUE(a->Start("_start").ok());
  a->Run();
  ASSERT_TRUE(host.paused.has_value());
  std::unique_ptr<Engine> other = LoadOrDie("(module (func (export \"_start\")))", host);
  absl::Status s = other->Restore(*host.paused);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "snapshot: it is of another module");

  vault::v1::WasmSnapshot bad = *host.paused;
  bad.mutable_frames(1)->set_function(0);  // an import
  std::unique_ptr<Engine> same = LoadOrDie(kSumOfSquares, host);
  s = same->Restore(bad);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "snapshot: a frame of no function of the module");
}

TEST(WasmEngine, StartFunctionRunsFirstUnderFuel) {
  TestHost host;
  std::unique_ptr<Engine> e = LoadOrDie(R"(
(module (import "test" "report" (func $report (param i64)))
  (func $init (call $report (i64.const 1)))
  (start $init)
  (func (export "_start") (call $report (i64.const 2))))
)",
                                        host);
  EXPECT_TRUE(host.reported.empty());  // not run while loading
  ASSERT_TRUE(e->Start("_start").ok());
  ASSERT_EQ(e->Run().kind, Engine::Outcome::kReturned);
  EXPECT_EQ(host.reported, (std::vector<uint64_t>{1, 2}));
}

// Found by engine_fuzz: a function reference on the value stack at a capture was written with a
// 64-bit shift past its width (undefined behaviour). The module: a loop of call_indirect and
// table.get (a funcref pushed), stopped for fuel mid-loop, captured, restored, run on.
TEST(WasmEngine, RegressionFunctionRefOnTheStackAtACapture) {
  const std::string module(
      "\x00\x61\x73\x6d\x01\x00\x00\x00\x01\x08\x02\x60\x00\x01\x7f\x60\x00\x00\x03\x04\x03\x00\x00"
      "\x01\x04\x04\x01\x70\x00\x24\x05\x04\x01\x01\x01\x04\x06\x06\x01\x7f\x01\x41\x05\x0b\x07\x0a"
      "\x01\x06\x5f\x73\x74\x61\x72\x74\x00\x02\x09\x08\x01\x00\x41\x00\x0b\x02\x00\x01\x0a\x41\x03"
      "\x04\x00\x41\x2f\x0b\x04\x00\x23\x00\x0b\x35\x01\x01\x7f\x03\x40\x20\x00\x20\x00\x41\x02\x70"
      "\x11\x00\x00\x70\x21\x00\x20\x00\x41\xe0\xd4\x03\x70\x20\x00\x36\x02\x00\x41\x01\x25\x00\x1a"
      "\x23\x00\x41\x00\x6a\x24\x00\x20\x00\x41\xa0\x8d\x26\x49\x0d\x00\x0b\x0b",
      133);
  EngineLimits limits;
  limits.fuel = 20000;
  limits.slice = 1000;
  TestHost host;
  absl::StatusOr<std::unique_ptr<Engine>> e = Engine::Load(module, limits, host.Resolver());
  ASSERT_TRUE(e.ok()) << e.status();
  ASSERT_TRUE((*e)->Start("_start").ok());
  ASSERT_EQ((*e)->Run().kind, Engine::Outcome::kFuelExhausted);
  absl::StatusOr<vault::v1::WasmSnapshot> snap = (*e)->Capture();
  ASSERT_TRUE(snap.ok()) << snap.status();
  ASSERT_GT(snap->function_refs_size(), 0);
  const std::string& raw = snap->values();
  const size_t slot = snap->function_refs(0);
  EXPECT_EQ(raw.substr(slot * 16 + 4, 12), std::string(12, '\0'));
  limits.fuel = 40000;
  absl::StatusOr<std::unique_ptr<Engine>> again = Engine::Load(module, limits, host.Resolver());
  ASSERT_TRUE(again.ok());
  ASSERT_TRUE((*again)->Restore(*snap).ok());
  EXPECT_EQ((*again)->Run().kind, Engine::Outcome::kFuelExhausted);
}

}  // namespace
}  // namespace vault::sandbox::wasm
