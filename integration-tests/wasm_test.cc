// wasm agents on a real three-vault federation (a, b, c: mutual TLS on loopback, each trusting
// the owner): modules built from C by Debian's clang and wasi-libc (integration-tests/wasm/),
// run by vault-wasm-runner in the posix sandbox. Strong mobility: a computation that migrates in
// the middle of its loop, three calls deep, across the three vaults, ends with the result and the
// output of a run that never moved; one that checkpoints and whose vault is SIGKILLed resumes
// from the checkpoint; the operator moves a plain WASI program without its cooperation. And the
// hostile modules: each ends with its own reason, the vault unaffected.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "integration-tests/harness.h"
#include "integration-tests/migration_fixture.h"

namespace vault::integration {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;
using vault::v1::AgentStatus;

constexpr char kA[] = "a";
constexpr char kB[] = "b";
constexpr char kC[] = "c";

std::string Module(const std::string& name) {
  return absl::StrCat(VAULT_IT_WASM_DIR, "/vault_wasm_", name, ".wasm");
}

class WasmTest : public MigrationTest {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(MigrationTest::SetUp());
    if (IsSkipped()) return;
    owner_key_ = NewKey("owner", &owner_);
    for (const char* name : {kA, kB, kC}) {
      ASSERT_NO_FATAL_FAILURE(Trust(name, owner_key_,
                                    {"read:/vault/pub", "write:/vault/pub", "cas-read", "cas-write",
                                     "migrate:a,b,c", "send:*", "receive:*"}));
    }
  }

  // A spec for the module `name` with `capabilities` and `constraints`.
  std::string WriteSpec(const std::string& name, const std::string& capabilities,
                        const std::string& constraints) {
    const std::string file = absl::StrCat(root(), "/wasm-", ++specs_, ".scm");
    EXPECT_TRUE(WriteFile(file, absl::StrCat("(spawn-agent\n  (purpose \"wasm test\")\n"
                                             "  (sandbox wasm)\n  (code-file \"",
                                             Module(name), "\")\n  (capabilities ", capabilities,
                                             ")\n  (constraints ", constraints, "))\n"))
                    .ok());
    return file;
  }
  std::string SpawnWasm(const std::string& vault, const std::string& name,
                        const std::string& capabilities, const std::string& constraints,
                        const std::optional<std::string>& state) {
    return MigrationTest::Spawn(vault, WriteSpec(name, capabilities, constraints), owner_key_,
                                state);
  }

  vault::v1::AgentRecord WaitState(const std::string& vault, const std::string& id,
                                   vault::v1::AgentState state) {
    return WaitFor(
               vault, id, [state](const AgentStatus& s) { return s.record().state() == state; },
               absl::Seconds(90), vault::v1::AgentState_Name(state))
        .record();
  }
  // Waits until the agent has ended on `vault`, whatever the end.
  vault::v1::AgentRecord WaitEnded(const std::string& vault, const std::string& id) {
    return WaitFor(
               vault, id,
               [](const AgentStatus& s) {
                 const auto st = s.record().state();
                 return st == vault::v1::COMPLETED || st == vault::v1::FAILED ||
                        st == vault::v1::TERMINATED;
               },
               absl::Seconds(90), "ended")
        .record();
  }
  std::string Result(const std::string& vault, const vault::v1::AgentRecord& r) {
    RunResult got = Ctl(vault, {"cas", "get", DigestText(r.result())});
    EXPECT_EQ(got.exit_code, kExitOk) << got;
    return got.out;
  }

  // The uninterrupted run of compute.c on a: its result and its log.
  struct Run {
    std::string result;
    std::vector<std::string> logs;
  };
  Run Uninterrupted() {
    std::string id = SpawnWasm(kA, "compute", "(cas-write)", "(max-runtime 120)", "");
    vault::v1::AgentRecord r = WaitState(kA, id, vault::v1::COMPLETED);
    return {Result(kA, r), Logs(kA, id)};
  }

  int specs_ = 0;
};

TEST_F(WasmTest, ComputesAndEndsWithItsResult) {
  Run run = Uninterrupted();
  EXPECT_EQ(run.result.size(), 16u) << run.result;
  EXPECT_THAT(run.logs, ElementsAre(StartsWith("progress 0 "), StartsWith("progress 50000 "),
                                    StartsWith("progress 100000 "), StartsWith("progress 150000 "),
                                    absl::StrCat("done after 0 moves: ", run.result)));
}

// Strong mobility: the plan moves the run to b at step 60000, to c at 120000 and home to a at
// 170000, each three calls deep in the middle of the loop. The result is the uninterrupted run's;
// each vault logged its own part of the output, nothing twice.
TEST_F(WasmTest, MovesMidComputationAcrossThreeVaultsToTheSameResult) {
  Run whole = Uninterrupted();
  std::string id = SpawnWasm(kA, "compute", "(cas-write) (migrate (vaults a b c))",
                             "(max-runtime 120) (max-migrations 3)", "b@60000 c@120000 a@170000");
  ASSERT_FALSE(id.empty());
  vault::v1::AgentRecord home = WaitState(kA, id, vault::v1::COMPLETED);
  EXPECT_EQ(home.hop(), 3u);
  EXPECT_EQ(home.arrived_from(), kC);
  EXPECT_EQ(Result(kA, home), whole.result);
  // a: the start, then (after the last hop) the end; b and c their middle parts.
  std::vector<std::string> a = Logs(kA, id), b = Logs(kB, id), c = Logs(kC, id);
  EXPECT_THAT(
      b, ElementsAre(StartsWith("step 60000: b -> 0 (local "), StartsWith("progress 100000 ")));
  EXPECT_THAT(
      c, ElementsAre(StartsWith("step 120000: c -> 0 (local "), StartsWith("progress 150000 ")));
  ASSERT_GE(a.size(), 3u);
  EXPECT_THAT(a.front(), StartsWith("progress 0 "));
  EXPECT_EQ(a.back(), absl::StrCat("done after 3 moves: ", whole.result));
  // The progress lines, wherever they were logged, are the uninterrupted run's.
  std::vector<std::string> progress;
  for (const auto* part : {&a, &b, &c}) {
    for (const std::string& line : *part) {
      if (absl::StartsWith(line, "progress ")) progress.push_back(line);
    }
  }
  std::sort(progress.begin(), progress.end());
  std::vector<std::string> expected;
  for (const std::string& line : whole.logs) {
    if (absl::StartsWith(line, "progress ")) expected.push_back(line);
  }
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(progress, expected);
}

// Hops at random points (a recorded seed: VAULT_TEST_SEED=N repeats a run), each followed by a
// wait on the destination during which a vault is SIGKILLed and started again (the one the agent
// is on, or the one it left): every run ends with the uninterrupted run's result, and every
// progress line of the uninterrupted run is logged somewhere (a restart on the vault the agent
// is on makes again what it did since its hop, so a line may be there twice, never missing).
TEST_F(WasmTest, RandomHopsWithSigkillsEndAsIfItNeverMoved) {
  Run whole = Uninterrupted();
  uint64_t seed = static_cast<uint64_t>(absl::ToUnixNanos(absl::Now()));
  if (const char* fixed = getenv("VAULT_TEST_SEED"); fixed != nullptr) {
    ASSERT_TRUE(absl::SimpleAtoi(fixed, &seed));
  }
  std::cout << "VAULT_TEST_SEED=" << seed << "\n";
  RecordProperty("seed", std::to_string(seed));
  std::mt19937_64 rng(seed);
  const std::vector<std::string> vaults = {kA, kB, kC};
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE(absl::StrCat("seed ", seed, " round ", round));
    // Two hops: to vaults other than the one before, at increasing steps.
    std::string at = kA, plan;
    std::vector<std::pair<std::string, long>> hops;
    long step = 0;
    for (int h = 0; h < 2; ++h) {
      std::string to;
      do {
        to = vaults[rng() % 3];
      } while (to == at);
      step += 1000 + static_cast<long>(rng() % 80000);
      hops.emplace_back(to, step);
      absl::StrAppend(&plan, to, "@", step, " wait@", step + 1, " ");
      at = to;
    }
    std::string id = SpawnWasm(kA, "compute", "(cas-write) (migrate (vaults a b c))",
                               "(max-runtime 120) (max-migrations 2)", plan);
    ASSERT_FALSE(id.empty());
    std::string from = kA;
    for (const auto& [to, hop_step] : hops) {
      // Waiting there (the wait's own line comes once the message does): the hop's line is
      // logged on arrival; then a vault is killed.
      const absl::Time deadline = absl::Now() + absl::Seconds(30);
      bool arrived = false;
      while (absl::Now() < deadline && !arrived) {
        for (const std::string& line : Logs(to, id)) {
          arrived =
              arrived || absl::StartsWith(line, absl::StrCat("step ", hop_step, ": ", to, " -> 0"));
        }
        if (!arrived) absl::SleepFor(absl::Milliseconds(20));
      }
      ASSERT_TRUE(arrived) << "the hop to " << to << " at " << hop_step;
      const std::string victim = rng() % 2 == 0 ? to : from;
      M(victim).vaultd->Kill();
      ASSERT_NO_FATAL_FAILURE(Restart(victim));
      WaitState(to, id, vault::v1::RUNNING);
      const std::string file = root() + "/go";
      ASSERT_TRUE(WriteFile(file, "go").ok());
      RunResult sent;
      for (int i = 0; i < 100; ++i) {
        sent = Ctl(to, {"agent", "send", id, "--type", "go", "--data", file});
        if (sent.exit_code == kExitOk) break;
        absl::SleepFor(absl::Milliseconds(100));
      }
      ASSERT_EQ(sent.exit_code, kExitOk) << sent;
      from = to;
    }
    vault::v1::AgentRecord end = WaitState(from, id, vault::v1::COMPLETED);
    EXPECT_EQ(Result(from, end), whole.result);
    std::set<std::string> seen;
    for (const std::string& v : vaults) {
      for (const std::string& line : Logs(v, id)) seen.insert(line);
    }
    for (const std::string& line : whole.logs) {
      if (absl::StartsWith(line, "progress ")) {
        EXPECT_TRUE(seen.contains(line)) << line;
      }
    }
  }
}

// A checkpoint captures the run: the vault SIGKILLed after it and started again resumes the agent
// there (in the middle of its loop, three calls deep), and it ends with the uninterrupted run's
// result. What it did between the checkpoint and the kill it does again (the checkpoint is the
// point a restart goes back to): the lines logged there appear twice, the earlier ones once.
TEST_F(WasmTest, ARestartAfterSigkillResumesFromTheCheckpoint) {
  Run whole = Uninterrupted();
  std::string id =
      SpawnWasm(kA, "compute", "(cas-write)", "(max-runtime 120)", "checkpoint@80000 wait@80001");
  ASSERT_FALSE(id.empty());
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (absl::Now() < deadline) {
    absl::StatusOr<AgentStatus> st = Get(kA, id);
    if (st.ok() && st->record().counters().checkpoints() == 1 &&
        st->record().counters().log_lines() >= 3) {
      break;
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  std::vector<std::string> before = Logs(kA, id);
  ASSERT_THAT(before, ElementsAre(StartsWith("progress 0 "), StartsWith("progress 50000 "),
                                  StartsWith("step 80000: checkpoint -> 0 (local ")));
  M(kA).vaultd->Kill();
  ASSERT_NO_FATAL_FAILURE(Restart(kA));
  WaitState(kA, id, vault::v1::RUNNING);
  const std::string file = root() + "/go";
  ASSERT_TRUE(WriteFile(file, "go").ok());
  // (The agent may still be reading its snapshot: the send is retried until it is taken.)
  RunResult sent;
  for (int i = 0; i < 50; ++i) {
    sent = Ctl(kA, {"agent", "send", id, "--type", "go", "--data", file});
    if (sent.exit_code == kExitOk) break;
    absl::SleepFor(absl::Milliseconds(100));
  }
  ASSERT_EQ(sent.exit_code, kExitOk) << sent;
  vault::v1::AgentRecord a = WaitState(kA, id, vault::v1::COMPLETED);
  EXPECT_EQ(Result(kA, a), whole.result);
  EXPECT_EQ(a.counters().restarts(), 1u);
  std::vector<std::string> logs = Logs(kA, id);
  ASSERT_GE(logs.size(), 6u);
  EXPECT_EQ(logs[0], before[0]);
  EXPECT_EQ(logs[1], before[1]);
  EXPECT_EQ(logs[2], before[2]);
  EXPECT_THAT(logs[3], StartsWith("step 80000: checkpoint -> 0 (local "));  // again
  EXPECT_THAT(logs[4], StartsWith("step 80001: wait -> 0 (local "));
  EXPECT_EQ(logs.back(), absl::StrCat("done after 0 moves: ", whole.result));
}

// The operator moves a plain WASI program (it knows nothing of vaults) while it computes: the
// runner captures the run at its next fuel slice, and it goes on at b from there, its output the
// same as if it had never moved.
TEST_F(WasmTest, TheOperatorMovesAPlainWasiProgramMidRun) {
  const std::string spec_extra = "(max-runtime 120) (max-migrations 1)";
  auto spawn_plain = [&](const std::string& vault) {
    const std::string file = absl::StrCat(root(), "/plain-", ++specs_, ".scm");
    EXPECT_TRUE(
        WriteFile(file, absl::StrCat("(spawn-agent (purpose \"plain\") (sandbox wasm)\n"
                                     "  (code-file \"",
                                     Module("plain"),
                                     "\")\n"
                                     "  (args \"12000000\") (env (\"LABEL\" \"fib\"))\n"
                                     "  (capabilities (cas-write) (migrate (vaults a b c)))\n"
                                     "  (constraints ",
                                     spec_extra, "))\n"))
            .ok());
    return MigrationTest::Spawn(vault, file, owner_key_);
  };
  // Unmoved, on c: the output to expect.
  std::string unmoved = spawn_plain(kC);
  WaitState(kC, unmoved, vault::v1::COMPLETED);
  std::vector<std::string> expected = Logs(kC, unmoved);
  ASSERT_EQ(expected.size(), 10u) << absl::StrJoin(expected, "\n");
  EXPECT_EQ(expected[0], "fib: 2 args, 12000000 steps");

  std::string id = spawn_plain(kA);
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (absl::Now() < deadline && Logs(kA, id).size() < 3) absl::SleepFor(absl::Milliseconds(10));
  ASSERT_GE(Logs(kA, id).size(), 3u);
  RunResult moved = Ctl(kA, {"migrate", id, "--to", kB});
  ASSERT_EQ(moved.exit_code, kExitOk) << moved;
  vault::v1::AgentRecord b = WaitState(kB, id, vault::v1::COMPLETED);
  EXPECT_EQ(b.hop(), 1u);
  std::vector<std::string> a_part = Logs(kA, id), b_part = Logs(kB, id);
  ASSERT_FALSE(b_part.empty());
  std::vector<std::string> joined = a_part;
  joined.insert(joined.end(), b_part.begin(), b_part.end());
  EXPECT_EQ(joined, expected) << "a:\n"
                              << absl::StrJoin(a_part, "\n") << "\nb:\n"
                              << absl::StrJoin(b_part, "\n");
  // Captured where it was (the runner checkpointed for the hop), not re-run from its start.
  absl::StatusOr<AgentStatus> departed = Get(kA, id);
  ASSERT_TRUE(departed.ok()) << departed.status();
  EXPECT_EQ(departed->record().counters().checkpoints(), 1u);
  EXPECT_THAT(moved.out, HasSubstr("state: a fresh checkpoint"));
}

// The RFC's patterns 2-4 as the wasm examples ship them (sdk/wasm/examples), on the federation.
TEST_F(WasmTest, TheExamplesRunAsShipped) {
  auto example = [](const std::string& name) {
    return absl::StrCat(VAULT_IT_WASM_EXAMPLES, "/vault_wasm_example_", name, ".wasm");
  };
  auto spec = [](const std::string& name) {
    return absl::StrCat(VAULT_IT_SDK_DIR, "/wasm/examples/", name, ".scm");
  };
  // One-shot: CAS in, CAS out.
  const std::string input = root() + "/input.txt";
  ASSERT_TRUE(WriteFile(input, "the quick brown\nfox  jumps").ok());
  RunResult put = Ctl(kA, {"cas", "put", input});
  ASSERT_EQ(put.exit_code, kExitOk) << put;
  const std::string state = root() + "/input-digest";
  ASSERT_TRUE(WriteFile(state, put.out.substr(0, put.out.find_first_of(" \t\n"))).ok());
  RunResult one = Ctl(kA, {"agent", "spawn", spec("one_shot"), "--code", example("one_shot"),
                           "--as", owner_key_, "--state", state});
  ASSERT_EQ(one.exit_code, kExitOk) << one;
  const std::string one_id(absl::StripAsciiWhitespace(one.out));
  vault::v1::AgentRecord counted = WaitState(kA, one_id, vault::v1::COMPLETED);
  EXPECT_EQ(Result(kA, counted), "5 words\n");
  // Reactive: a query answered upper-cased, then stopped.
  RunResult re = Ctl(
      kA, {"agent", "spawn", spec("reactive"), "--code", example("reactive"), "--as", owner_key_});
  ASSERT_EQ(re.exit_code, kExitOk) << re;
  const std::string re_id(absl::StripAsciiWhitespace(re.out));
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (absl::Now() < deadline && Logs(kA, re_id).empty()) absl::SleepFor(absl::Milliseconds(20));
  RunResult q = Ctl(kA, {"agent", "query", re_id, "hello, wasm"});
  EXPECT_EQ(q.exit_code, kExitOk) << q;
  EXPECT_EQ(q.out, "HELLO, WASM");
  RunResult stop = Ctl(kA, {"agent", "send", re_id, "--type", "stop"});
  EXPECT_EQ(stop.exit_code, kExitOk) << stop;
  WaitState(kA, re_id, vault::v1::COMPLETED);
  // Mobile: b, then c, then home, what it saw gathered in a local array that moved with it
  // (its spec names this federation's vaults).
  const std::string mobile = root() + "/mobile.scm";
  ASSERT_TRUE(WriteFile(mobile,
                        "(spawn-agent (purpose \"tour\") (sandbox wasm)\n"
                        "  (capabilities (cas-write) (migrate (vaults a b c)))\n"
                        "  (constraints (max-runtime 60) (max-migrations 3)))\n")
                  .ok());
  const std::string route = root() + "/route";
  ASSERT_TRUE(WriteFile(route, "b c").ok());
  RunResult mo = Ctl(kA, {"agent", "spawn", mobile, "--code", example("mobile"), "--as", owner_key_,
                          "--state", route});
  ASSERT_EQ(mo.exit_code, kExitOk) << mo;
  const std::string mo_id(absl::StripAsciiWhitespace(mo.out));
  vault::v1::AgentRecord home = WaitState(kA, mo_id, vault::v1::COMPLETED);
  EXPECT_EQ(home.hop(), 3u);
  EXPECT_EQ(Result(kA, home), "b,c");
  EXPECT_THAT(Logs(kB, mo_id), ElementsAre("at b (migrate -> 0)"));
  EXPECT_THAT(Logs(kC, mo_id), ElementsAre("at c (migrate -> 0)"));
  EXPECT_THAT(Logs(kA, mo_id), ElementsAre("start at a", "home at a having seen b,c"));
}

// WASI files: the path grants are the preopened directories; reads, writes and listings are host
// calls the vault checks; a ".." above a preopen, a path under none and a symlink planted in the
// granted tree are each refused (ENOTCAPABLE), and nothing outside the grant is read.
TEST_F(WasmTest, WasiFilesStayUnderTheGrantedPaths) {
  const std::string pub = V(kA).data_dir + "/files/pub/wasm";
  const std::string secret = V(kA).data_dir + "/files/secret";
  std::filesystem::create_directories(pub);
  std::filesystem::create_directories(secret);
  ASSERT_TRUE(WriteFile(pub + "/in.txt", "hello from the tree").ok());
  ASSERT_TRUE(WriteFile(secret + "/s.txt", "secret").ok());
  std::filesystem::create_symlink("../../secret/s.txt", pub + "/link.txt");
  std::string id =
      SpawnWasm(kA, "files", "(read (path \"/vault/pub\")) (write (path \"/vault/pub\"))",
                "(max-runtime 60)", std::nullopt);
  ASSERT_FALSE(id.empty());
  vault::v1::AgentRecord r = WaitEnded(kA, id);
  EXPECT_EQ(r.state(), vault::v1::COMPLETED) << r.reason();
  EXPECT_THAT(
      Logs(kA, id),
      ElementsAre("read in.txt: hello from the tree", "out.txt: written by wasm, in two writes",
                  "dir: in.txt out.txt",  // (the vault's listing shows no symlink)
                  "/vault/pub/../secret/s.txt: refused (errno 76)",
                  "/vault/pub/wasm/../../secret/s.txt: refused (errno 76)",
                  "/etc/passwd: refused (errno 76)",
                  "/vault/pub/wasm/link.txt: refused (errno 76)"));
  absl::StatusOr<std::string> written = ReadFile(pub + "/out.txt");
  ASSERT_TRUE(written.ok());
  EXPECT_EQ(*written, "written by wasm, in two writes");
}

// What the runner cannot load ends the agent at once, with the reason; the vault never parses a
// module itself.
TEST_F(WasmTest, ModulesTheRunnerCannotLoadAreRefusedWithTheReason) {
  struct Case {
    std::string name, bytes, reason;
  };
  const std::string header("\0asm\x01\0\0\0", 8);
  const std::vector<Case> cases = {
      {"garbage", "not a module at all", "module refused: not a valid WebAssembly module: "},
      {"truncated", header + std::string("\x01\x04\x01\x60", 4),
       "module refused: not a valid WebAssembly module: "},
      // (module (import "library" "nope" (func)))
      {"nope",
       header + std::string("\x01\x04\x01\x60\x00\x00"
                            "\x02\x10\x01\x07library\x04nope\x00\x00",
                            24),
       "module refused: the module imports library.nope, which this vault does not offer: "
       "library.nope is not a host call"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string module = absl::StrCat(root(), "/", c.name, ".wasm");
    ASSERT_TRUE(WriteFile(module, c.bytes).ok());
    const std::string file = absl::StrCat(root(), "/", c.name, ".scm");
    ASSERT_TRUE(WriteFile(file, absl::StrCat("(spawn-agent (purpose \"refused\") (sandbox wasm)"
                                             " (code-file \"",
                                             module, "\"))"))
                    .ok());
    std::string id = MigrationTest::Spawn(kA, file, owner_key_);
    ASSERT_FALSE(id.empty());
    vault::v1::AgentRecord r = WaitEnded(kA, id);
    EXPECT_EQ(r.state(), vault::v1::FAILED) << r.reason();
    EXPECT_THAT(r.reason(), HasSubstr(c.reason));
  }
}

TEST_F(WasmTest, HostileModulesEndWithTheirOwnReasons) {
  struct Case {
    std::string mode, constraints, state, reason;
  };
  const std::vector<Case> cases = {
      {"loop", "(max-runtime 60) (max-steps 2000000)", "failed",
       "fuel exhausted (2000000 instructions)"},
      {"recurse", "(max-runtime 60)", "failed", "stack exhausted"},
      {"divide", "(max-runtime 60)", "failed", "trap: integer divide by zero"},
      {"grow", "(max-runtime 60) (max-allocation (* 1024 1024))", "failed",
       "(memory limit: the memory is at this agent's 16 pages, so a memory.grow was refused)"},
      {"malloc", "(max-runtime 60) (max-allocation (* 4 1024 1024))", "failed",
       "trap: unreachable executed (near the memory limit: "},
      {"badpointer", "(max-runtime 60)", "completed", ""},
      {"nocas", "(max-runtime 60)", "completed", ""},
      {"badtext", "(max-runtime 60)", "completed", ""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.mode);
    std::string id =
        SpawnWasm(kA, "hostile", "(read (path \"/vault/pub\"))", c.constraints, c.mode);
    ASSERT_FALSE(id.empty());
    vault::v1::AgentRecord r = WaitEnded(kA, id);
    EXPECT_EQ(absl::AsciiStrToLower(vault::v1::AgentState_Name(r.state())), c.state)
        << r.reason() << "\n"
        << absl::StrJoin(Logs(kA, id), "\n");
    if (!c.reason.empty()) {
      EXPECT_THAT(r.reason(), HasSubstr(c.reason));
    }
  }
}

}  // namespace
}  // namespace vault::integration
