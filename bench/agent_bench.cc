// agent_bench: what the agent runtime costs, against baselines measured in the same run.
//
//   agent_bench [--agents=1000] [--calls=20000] [--warmup=1000] [--rounds=N (default --calls)]
//               [--clients=4] [--vaultctl_spawns=20] [--sandbox_spawns=200]
//               [--only=rtt,msg,spawn] [--keep] [--vaultd=PATH] [--vaultctl=PATH]
//               [--sync_writes=true|false] [--spawn_retries=3]
//
//   agent_bench --agents=10 --calls=500 --warmup=50 --vaultctl_spawns=2 --sandbox_spawns=10
//                                  # small: ~5 s
//
// --vaultd / --vaultctl run copies of the binaries (vault-sandbox-init must be beside that vaultd,
// and beside this executable in ../sandbox/ for the LinuxSandbox baseline). --sync_writes=false
// sets storage.sync_writes false in the vault (to see what fsync costs a spawn).
// --spawn_retries: an Agents.Spawn refused with "Text file busy" (a race in the runtime: another
// sandbox's child, cloned while this agent's code file was open for writing, still holds it) is
// sent again with a new agent id, up to this many times; the count is printed.
//
// It starts a real vault: `vaultctl init` into a temporary directory (agents.default_max_agents
// and agents.default_max_calls_per_second raised in its vault.conf so that the quotas do not
// cap the benchmark), then `vaultd --config <dir>/v/vault.conf --listen 127.0.0.1:0`, and spawns
// agent_bench_guest (bench/agent_bench_guest.cc, the C++ SDK) with
// `vaultctl agent spawn SPEC --code <guest> --state FILE --as <dir>/v/admin.key`, SPEC being
//   (agent (purpose "agent_bench") (capabilities (send (agent "*")) (receive (from "*"))
//          (cas-write)) (constraints (max-runtime 86400) (max-memory 256 MiB) (max-cpu 3600)
//          (max-processes 16) (max-open-files 64)))
// The guest's initial state chooses its mode (see agent_bench_guest.cc).
//
// 1. Host-call round trip (target p50 <= 20 us). The guest times --calls heartbeat calls, then
//    --calls self_inspect calls (after --warmup each), with CLOCK_MONOTONIC around every call, and
//    logs the percentiles; the bench reads them with `vaultctl -o json agent logs ID`.
//    Baseline: the same guest binary outside any sandbox, its fd 3 one end of a socketpair whose
//    other end a thread of this process serves (Hello/Welcome, then every request answered at
//    once: the same frames, no proxy, no policy, no audit). Floor: a raw socketpair echo of a
//    64-byte frame between two threads.
// 2. Agent-to-agent message (target p50 <= 50 us). A "pong" guest and a "ping" guest (peer = the
//    pong's id); ping times --rounds rounds of send + receive of the answer, and reports round
//    trip / 2. Baselines: the same two guests outside any sandbox, each on a socketpair to a fake
//    vault in this process that routes send -> the other's receive (a thread per guest, a mutex
//    and a condition variable per mailbox: the same two hops per direction as the vault); and a
//    raw socketpair ping-pong between two threads (one hop per direction).
// 3. Spawn rate and memory (targets >= 200 spawns/s, vaultd RSS <= 200 MiB with 1,000 idle
//    agents). --vaultctl_spawns sequential `vaultctl agent spawn` processes (their rate includes
//    vaultctl's start-up, upload check and key loading); they are terminated again. Then
//    --agents idle guests through Agents.Spawn called directly by --clients threads, each with a
//    gRPC channel of its own (requests, SPAWN links signed with capability::SignLink as
//    vaultctl/agent_lifecycle_commands.cc does, are built before the clock starts). Reported:
//    spawns/s until the last Spawn returned, the time until every agent had made its first host
//    calls (counters.host_calls >= 2: get_state and the receive it then blocks in), vaultd's VmRSS
//    (/proc/PID/status) before and with every agent idle, the sum of VmRSS over vaultd's
//    descendant processes (the sandboxes' inits and guests) and the sum of the agents' cgroup
//    memory (Agents.List memory_bytes); the sum of Pss (/proc/PID/smaps_rollup) too, since VmRSS
//    counts the shared libraries (libprotobuf, libstdc++...) once per process. Baseline:
//    LinuxSandbox::Spawn of sandbox_bench_guest (writes one frame, exits) in this process before
//    vaultd starts, --sandbox_spawns times by
//    --clients threads at once (and once from one thread), i.e. the sandbox alone.
//    Every agent is then terminated (Agents.Control TERMINATE, signed as vaultctl does).
//
// Times are printed in microseconds (ms for spawns). Percentiles are nearest-rank. After the
// report, one BENCH_RESULT line (bench/bench_result.h) per target, for bench/run: heartbeat p50
// beside the baseline's, message p50 beside the fake vault's, Agents.Spawn rate beside the
// sandbox alone, vaultd's RSS with the idle agents beside its RSS before the spawns. At the end
// vaultd gets SIGTERM (SIGKILL after 30 s) and the temporary directory is removed (--keep keeps
// it). Only processes this bench started are signalled, by pid. vaultd is started with a
// parent-death signal, so it does not outlive the bench.
//
// Needs: root or user namespaces and every sandbox fence (as vaultd does); vaultd, vaultctl,
// vault-sandbox-init, agent_bench_guest and sandbox_bench_guest built (their paths are compiled
// in; the guests are looked for beside this executable).
//
// Thread-safety: a single main thread, plus the baselines' server threads and the spawn and
// control client threads, which share only atomics and per-thread results.
#include <grpcpp/grpcpp.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/agent_bench_fake_vault.h"
#include "bench/agent_bench_sandbox.h"
#include "bench/agent_bench_util.h"
#include "bench/agent_bench_vault.h"
#include "bench/bench_result.h"
#include "bench/bench_util.h"
#include "common/grpc_status.h"
#include "vault/v1/agent.grpc.pb.h"

namespace vault::bench {
namespace {

constexpr double kTargetRttP50Us = 20;
constexpr double kTargetMsgP50Us = 50;
constexpr double kTargetSpawnsPerS = 200;
constexpr double kTargetVaultdRssMiB = 200;

struct Flags {
  int agents = 1000;
  int calls = 20000;
  int warmup = 1000;
  int rounds = -1;  // -1: --calls
  int clients = 4;
  int vaultctl_spawns = 20;
  int sandbox_spawns = 200;
  std::vector<std::string> only;
  bool keep = false;
  bool sync_writes = true;  // storage.sync_writes of the vault
  int spawn_retries = 3;    // per Agents.Spawn refused with "Text file busy" (see README)
};

double LoadAverage() {
  FILE* f = fopen("/proc/loadavg", "re");
  if (f == nullptr) return -1;
  double load = -1;
  if (fscanf(f, "%lf", &load) != 1) load = -1;
  fclose(f);
  return load;
}

// A guest's result line "agent_bench_result kind=K n=.. min=.. ..." (ns) -> Summary in us.
std::optional<std::pair<std::string, Summary>> ParseResult(absl::string_view line) {
  size_t at = line.find("agent_bench_result ");
  if (at == absl::string_view::npos) return std::nullopt;
  line = line.substr(at);
  std::map<std::string, std::string> kv;
  for (absl::string_view word : absl::StrSplit(line, ' ', absl::SkipWhitespace())) {
    std::pair<std::string, std::string> p = absl::StrSplit(word, absl::MaxSplits('=', 1));
    kv[p.first] = p.second;
  }
  Summary s;
  auto num = [&](const char* k) {
    double v = 0;
    (void)absl::SimpleAtod(kv[k], &v);
    return v / 1000.0;
  };
  double n = 0;
  (void)absl::SimpleAtod(kv["n"], &n);
  s.n = static_cast<size_t>(n);
  s.min = num("min");
  s.mean = num("mean");
  s.p50 = num("p50");
  s.p90 = num("p90");
  s.p99 = num("p99");
  s.max = num("max");
  return std::make_pair(kv["kind"], s);
}

void PrintHeader(const char* title) {
  printf("\n%-46s %7s %9s %9s %9s %9s %9s %9s\n", title, "n", "min", "mean", "p50", "p90", "p99",
         "max");
}
void PrintRow(const std::string& label, const Summary& s, const std::string& extra = "") {
  printf("%-46s %7zu %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f  %s\n", label.c_str(), s.n, s.min, s.mean,
         s.p50, s.p90, s.p99, s.max, extra.c_str());
}

std::map<std::string, Summary> ResultsOf(const std::vector<std::string>& lines) {
  std::map<std::string, Summary> out;
  for (const std::string& l : lines) {
    if (auto r = ParseResult(l); r.has_value()) out[r->first] = r->second;
  }
  return out;
}
// --- main -----------------------------------------------------------------------------------

bool FlagValue(absl::string_view arg, absl::string_view name, absl::string_view* value) {
  if (!absl::ConsumePrefix(&arg, name) || !absl::ConsumePrefix(&arg, "=")) return false;
  *value = arg;
  return true;
}

bool ParseFlags(int argc, char** argv, Flags* f) {
  for (int i = 1; i < argc; ++i) {
    const absl::string_view arg = argv[i];
    absl::string_view v;
    auto positive = [&](int* out, int min) { return absl::SimpleAtoi(v, out) && *out >= min; };
    if (FlagValue(arg, "--agents", &v)) {
      if (!positive(&f->agents, 1)) return false;
    } else if (FlagValue(arg, "--calls", &v)) {
      if (!positive(&f->calls, 1)) return false;
    } else if (FlagValue(arg, "--warmup", &v)) {
      if (!positive(&f->warmup, 0)) return false;
    } else if (FlagValue(arg, "--rounds", &v)) {
      if (!positive(&f->rounds, 1)) return false;
    } else if (FlagValue(arg, "--clients", &v)) {
      if (!positive(&f->clients, 1)) return false;
    } else if (FlagValue(arg, "--vaultctl_spawns", &v)) {
      if (!positive(&f->vaultctl_spawns, 1)) return false;
    } else if (FlagValue(arg, "--sandbox_spawns", &v)) {
      if (!positive(&f->sandbox_spawns, 1)) return false;
    } else if (FlagValue(arg, "--only", &v)) {
      f->only = absl::StrSplit(v, ',', absl::SkipEmpty());
    } else if (FlagValue(arg, "--vaultd", &v)) {
      Binaries().vaultd = std::string(v);
    } else if (FlagValue(arg, "--vaultctl", &v)) {
      Binaries().vaultctl = std::string(v);
    } else if (FlagValue(arg, "--sync_writes", &v)) {
      if (v != "true" && v != "false") return false;
      f->sync_writes = v == "true";
    } else if (FlagValue(arg, "--spawn_retries", &v)) {
      if (!positive(&f->spawn_retries, 0)) return false;
    } else if (arg == "--keep") {
      f->keep = true;
    } else {
      return false;
    }
  }
  if (f->rounds < 0) f->rounds = f->calls;
  return true;
}

std::string Verdict(bool ok) { return ok ? "PASS" : "BELOW TARGET"; }

int Main(int argc, char** argv) {
  Flags flags;
  if (!ParseFlags(argc, argv, &flags)) {
    fprintf(stderr,
            "usage: %s [--agents=1000] [--calls=20000] [--warmup=1000] [--rounds=N]\n"
            "          [--clients=4] [--vaultctl_spawns=20] [--sandbox_spawns=200]\n"
            "          [--only=rtt,msg,spawn] [--keep] [--vaultd=PATH] [--vaultctl=PATH]\n"
            "          [--sync_writes=true|false] [--spawn_retries=3]\n",
            argv[0]);
    return 2;
  }
  auto wanted = [&](const char* key) {
    return flags.only.empty() ||
           std::find(flags.only.begin(), flags.only.end(), key) != flags.only.end();
  };
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  const std::string guest = (self.parent_path() / "agent_bench_guest").string();
  const std::string trivial = (self.parent_path() / "sandbox_bench_guest").string();

  const char* tmpenv = getenv("TMPDIR");
  std::string tmp =
      absl::StrCat(tmpenv != nullptr && *tmpenv != '\0' ? tmpenv : "/tmp", "/agent_bench.XXXXXX");
  if (mkdtemp(tmp.data()) == nullptr) {
    perror("mkdtemp");
    return 1;
  }
  chmod(tmp.c_str(), 0755);
  int rc = 0;
  auto fail = [&](const std::string& what, const absl::Status& s) {
    fprintf(stderr, "agent_bench: %s: %s\n", what.c_str(), s.ToString().c_str());
    rc = 1;
  };

  printf(
      "agent_bench: agents=%d calls=%d warmup=%d rounds=%d clients=%d vaultctl_spawns=%d "
      "sandbox_spawns=%d\n",
      flags.agents, flags.calls, flags.warmup, flags.rounds, flags.clients, flags.vaultctl_spawns,
      flags.sandbox_spawns);
  printf("machine: %ld CPUs; load average before %.2f; temp dir %s\n",
         sysconf(_SC_NPROCESSORS_ONLN), LoadAverage(), tmp.c_str());
  printf("vaultd %s\nvaultctl %s\nguest %s\n", Binaries().vaultd.c_str(),
         Binaries().vaultctl.c_str(), guest.c_str());
  fflush(stdout);

  // Baselines first (no vaultd running).
  std::optional<SandboxRate> sandbox_rate;
  if (wanted("spawn")) {
    absl::StatusOr<SandboxRate> r =
        MeasureSandbox(trivial, tmp, flags.sandbox_spawns, flags.clients);
    if (!r.ok()) {
      fail("LinuxSandbox baseline", r.status());
    } else {
      sandbox_rate = *r;
    }
  }
  std::map<std::string, Summary> base_rtt, base_msg;
  Summary raw_rtt;
  if (wanted("rtt")) {
    FakeVault fake;
    absl::Status s =
        fake.Start(guest, "a-0000000000000001",
                   absl::StrCat("mode=rtt calls=", flags.calls, " warmup=", flags.warmup));
    if (s.ok()) s = fake.Finish();
    if (!s.ok()) fail("host-call baseline", s);
    base_rtt = ResultsOf(fake.Logs());
  }
  if (wanted("rtt") || wanted("msg")) {
    raw_rtt = Summarize(RawPingPong(flags.calls, flags.warmup));
  }
  if (wanted("msg")) {
    FakeVault fake;
    absl::Status s = fake.Start(guest, "a-00000000000000b0", "mode=pong");
    if (s.ok())
      s = fake.Start(guest, "a-00000000000000a0",
                     absl::StrCat("mode=ping peer=a-00000000000000b0 rounds=", flags.rounds,
                                  " warmup=", flags.warmup));
    if (s.ok()) s = fake.Finish();
    if (!s.ok()) fail("message baseline", s);
    base_msg = ResultsOf(fake.Logs());
  }

  Vault vault;
  absl::Status s = vault.Init(tmp, flags.sync_writes);
  if (s.ok()) s = vault.Start();
  if (!s.ok()) {
    fail("starting the vault", s);
    if (!flags.keep) std::filesystem::remove_all(tmp, ec);
    return 1;
  }
  const pid_t vaultd_pid = vault.pid();
  const int64_t rss_start = StatusKiB(vaultd_pid, "VmRSS");
  printf("vaultd pid %d, VmRSS at start %.1f MiB\n", vaultd_pid,
         static_cast<double>(rss_start) / 1024);
  fflush(stdout);

  std::map<std::string, Summary> vault_rtt, vault_msg;
  std::string rtt_cost, msg_cost;
  if (wanted("rtt") && rc == 0) {
    VaultdCost cost(vaultd_pid);
    absl::StatusOr<std::string> id = vault.SpawnWithVaultctl(
        guest, absl::StrCat("mode=rtt calls=", flags.calls, " warmup=", flags.warmup));
    absl::StatusOr<vault::v1::AgentStatus> st =
        id.ok() ? vault.WaitEnded(*id, absl::Seconds(120 + flags.calls / 100)) : id.status();
    rtt_cost = cost.Per(2 * int64_t{flags.calls + flags.warmup});
    absl::StatusOr<std::vector<std::string>> logs = st.ok() ? vault.Logs(*id) : st.status();
    if (!logs.ok()) {
      fail("host-call round trip in the vault", logs.status());
    } else {
      vault_rtt = ResultsOf(*logs);
      if (st->record().state() != vault::v1::COMPLETED || vault_rtt.size() != 2)
        fail("host-call round trip in the vault",
             absl::InternalError(absl::StrCat("agent ", *id, " state ", st->record().state(), " (",
                                              st->record().reason(),
                                              "): ", absl::StrJoin(*logs, " | "))));
    }
  }
  if (wanted("msg") && rc == 0) {
    VaultdCost cost(vaultd_pid);
    absl::StatusOr<std::string> pong = vault.SpawnWithVaultctl(guest, "mode=pong");
    absl::StatusOr<std::string> ping =
        pong.ok() ? vault.SpawnWithVaultctl(
                        guest, absl::StrCat("mode=ping peer=", *pong, " rounds=", flags.rounds,
                                            " warmup=", flags.warmup))
                  : pong.status();
    absl::StatusOr<vault::v1::AgentStatus> st =
        ping.ok() ? vault.WaitEnded(*ping, absl::Seconds(120 + flags.rounds / 100)) : ping.status();
    // A round: the ping's send and receive, the pong's receive and send.
    msg_cost = cost.Per(4 * int64_t{flags.rounds + flags.warmup});
    absl::StatusOr<std::vector<std::string>> logs = st.ok() ? vault.Logs(*ping) : st.status();
    if (!logs.ok()) {
      fail("agent-to-agent messages in the vault", logs.status());
    } else {
      vault_msg = ResultsOf(*logs);
      if (st->record().state() != vault::v1::COMPLETED || vault_msg.size() != 2)
        fail("agent-to-agent messages in the vault",
             absl::InternalError(absl::StrCat("agent ", *ping, " state ", st->record().state(),
                                              " (", st->record().reason(),
                                              "): ", absl::StrJoin(*logs, " | "))));
      (void)vault.WaitEnded(*pong, absl::Seconds(10));
    }
  }

  // Spawns.
  Summary vaultctl_ms;
  double vaultctl_rate = 0;
  Fanout grpc_spawn, terminate;
  double connected_s = -1;
  int connected = 0;
  int64_t rss_idle = -1, hwm_idle = -1, rss_before_spawn = -1;
  double idle_cpu_ms_per_s = -1;
  Descendants desc;
  uint64_t cgroup_bytes = 0;
  int running_listed = 0;
  int txtbsy_total = 0;
  if (wanted("spawn") && rc == 0) {
    std::vector<double> ms;
    std::vector<std::string> ids;
    const int64_t t0 = NowNs();
    for (int i = 0; i < flags.vaultctl_spawns && rc == 0; ++i) {
      const int64_t a = NowNs();
      absl::StatusOr<std::string> id = vault.SpawnWithVaultctl(guest, "mode=idle");
      if (!id.ok()) {
        fail("vaultctl agent spawn", id.status());
        break;
      }
      ms.push_back(static_cast<double>(NowNs() - a) / 1e6);
      ids.push_back(*id);
    }
    vaultctl_rate = static_cast<double>(ms.size()) / (static_cast<double>(NowNs() - t0) / 1e9);
    vaultctl_ms = Summarize(ms);
    // End them again, so that the gRPC phase starts from an empty vault.
    for (const std::string& id : ids) {
      auto stub = vault.NewAgentsStub();
      absl::StatusOr<vault::v1::ControlRequest> req = vault.TerminateRequest(id);
      if (!req.ok()) continue;
      grpc::ClientContext ctx;
      ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
      vault::v1::ControlResponse out;
      (void)stub->Control(&ctx, *req, &out);
    }
    for (const std::string& id : ids) (void)vault.WaitEnded(id, absl::Seconds(30));
  }
  if (wanted("spawn") && rc == 0) {
    std::vector<vault::v1::SpawnRequest> reqs;
    for (int i = 0; i < flags.agents; ++i) {
      absl::StatusOr<vault::v1::SpawnRequest> r = vault.SpawnRequest("mode=idle");
      if (!r.ok()) {
        fail("building spawn requests", r.status());
        break;
      }
      reqs.push_back(std::move(*r));
    }
    std::vector<std::unique_ptr<vault::v1::Agents::Stub>> stubs;
    for (int c = 0; c < flags.clients; ++c) stubs.push_back(vault.NewAgentsStub());
    std::vector<std::string> ids(static_cast<size_t>(flags.agents));
    std::atomic<int> txtbsy{0};
    rss_before_spawn = StatusKiB(vaultd_pid, "VmRSS");
    printf("\nspawning %d idle agents through Agents.Spawn from %d clients...\n", flags.agents,
           flags.clients);
    fflush(stdout);
    const int64_t t0 = NowNs();
    if (rc == 0) {
      grpc_spawn = RunFanout(flags.agents, flags.clients, [&](int c, int i) -> absl::Status {
        grpc::ClientContext ctx;
        ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
        vault::v1::SpawnResponse out;
        grpc::Status st =
            stubs[static_cast<size_t>(c)]->Spawn(&ctx, reqs[static_cast<size_t>(i)], &out);
        // Text file busy: another sandbox's child, cloned while this agent's code file was
        // open for writing, still held it. A new request (new agent id) is tried instead.
        for (int r = 0; !st.ok() && r < flags.spawn_retries &&
                        absl::StrContains(st.error_message(), "Text file busy");
             ++r) {
          txtbsy++;
          absl::StatusOr<vault::v1::SpawnRequest> again = vault.SpawnRequest("mode=idle");
          if (!again.ok()) return again.status();
          grpc::ClientContext ctx2;
          ctx2.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
          st = stubs[static_cast<size_t>(c)]->Spawn(&ctx2, *again, &out);
        }
        if (!st.ok()) return common::FromGrpc(st);
        ids[static_cast<size_t>(i)] = out.agent_id();
        return absl::OkStatus();
      });
      if (grpc_spawn.failures > 0)
        fail(absl::StrCat(grpc_spawn.failures, " of ", flags.agents, " Agents.Spawn calls failed"),
             absl::InternalError(grpc_spawn.first_error));
    }
    // Until every agent made its first host calls (get_state, then the receive it blocks in).
    std::vector<bool> up(ids.size(), false);
    const absl::Time deadline = absl::Now() + absl::Seconds(120 + flags.agents / 10);
    while (absl::Now() < deadline) {
      for (size_t i = 0; i < ids.size(); ++i) {
        if (up[i] || ids[i].empty()) continue;
        absl::StatusOr<vault::v1::AgentStatus> st = vault.Get(ids[i]);
        if (st.ok() && st->record().counters().host_calls() >= 2) {
          up[i] = true;
          connected++;
        }
      }
      if (connected == flags.agents - grpc_spawn.failures) break;
      absl::SleepFor(absl::Milliseconds(50));
    }
    connected_s = static_cast<double>(NowNs() - t0) / 1e9;
    absl::SleepFor(absl::Seconds(2));  // let vaultd settle (async audit, allocator)
    // What the idle agents cost vaultd's threads (each agent waits in a 60 s receive: no host
    // call comes, so no busy-polling either; the watchdog's ticks remain).
    {
      const int64_t cpu0 = ProcessCpuNs(vaultd_pid);
      const int64_t t0_ns = NowNs();
      absl::SleepFor(absl::Seconds(1));
      const int64_t cpu1 = ProcessCpuNs(vaultd_pid);
      if (cpu0 >= 0 && cpu1 >= 0) {
        idle_cpu_ms_per_s =
            static_cast<double>(cpu1 - cpu0) / 1e6 / (static_cast<double>(NowNs() - t0_ns) / 1e9);
      }
    }
    rss_idle = StatusKiB(vaultd_pid, "VmRSS");
    hwm_idle = StatusKiB(vaultd_pid, "VmHWM");
    desc = DescendantsOf(vaultd_pid);
    if (absl::StatusOr<vault::v1::ListAgentsResponse> l = vault.List(); l.ok()) {
      for (const auto& a : l->agents()) {
        if (a.state() == vault::v1::RUNNING) {
          running_listed++;
          cgroup_bytes += a.memory_bytes();
        }
      }
    }
    // Terminate them all.
    terminate =
        RunFanout(static_cast<int>(ids.size()), flags.clients, [&](int c, int i) -> absl::Status {
          if (ids[static_cast<size_t>(i)].empty()) return absl::OkStatus();
          absl::StatusOr<vault::v1::ControlRequest> req =
              vault.TerminateRequest(ids[static_cast<size_t>(i)]);
          if (!req.ok()) return req.status();
          grpc::ClientContext ctx;
          ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
          vault::v1::ControlResponse out;
          grpc::Status st = stubs[static_cast<size_t>(c)]->Control(&ctx, *req, &out);
          if (!st.ok()) return common::FromGrpc(st);
          return absl::OkStatus();
        });
    txtbsy_total = txtbsy.load();
    if (terminate.failures > 0)
      fail(absl::StrCat(terminate.failures, " terminations failed"),
           absl::InternalError(terminate.first_error));
  }
  const int64_t rss_end = StatusKiB(vaultd_pid, "VmRSS");
  const std::string stopped = vault.Stop();

  // --- report -------------------------------------------------------------------------------
  printf("\n=== 1. host-call round trip (us, measured in the guest around each call) ===");
  PrintHeader("");
  auto ratio = [](const Summary& a, const Summary& b) {
    return b.p50 > 0 ? absl::StrFormat("p50 ratio %.2f", a.p50 / b.p50) : std::string();
  };
  for (const char* kind : {"heartbeat", "self_inspect"}) {
    if (vault_rtt.count(kind))
      PrintRow(absl::StrCat("vault (sandbox + proxy) ", kind), vault_rtt[kind],
               base_rtt.count(kind)
                   ? absl::StrCat(ratio(vault_rtt[kind], base_rtt[kind]), " vs baseline")
                   : "");
    if (base_rtt.count(kind))
      PrintRow(absl::StrCat("baseline: same guest, echo server ", kind), base_rtt[kind]);
  }
  if (raw_rtt.n > 0) PrintRow("floor: raw 64-byte socketpair echo (threads)", raw_rtt);
  if (!rtt_cost.empty()) printf("%s\n", rtt_cost.c_str());
  if (vault_rtt.count("heartbeat")) {
    printf("target heartbeat p50 <= %.0f us: %s (%.2f us)\n", kTargetRttP50Us,
           Verdict(vault_rtt["heartbeat"].p50 <= kTargetRttP50Us).c_str(),
           vault_rtt["heartbeat"].p50);
  }

  printf("\n=== 2. agent-to-agent message, round trip / 2 (us, measured in the ping guest) ===");
  PrintHeader("");
  if (vault_msg.count("message_half_rtt"))
    PrintRow("vault: ping <-> pong (send + receive)", vault_msg["message_half_rtt"],
             base_msg.count("message_half_rtt")
                 ? absl::StrCat(ratio(vault_msg["message_half_rtt"], base_msg["message_half_rtt"]),
                                " vs fake vault; ",
                                raw_rtt.n > 0 ? absl::StrFormat("%.1f x raw",
                                                                vault_msg["message_half_rtt"].p50 /
                                                                    (raw_rtt.p50 / 2))
                                              : "")
                 : "");
  if (base_msg.count("message_half_rtt"))
    PrintRow("baseline: same guests, fake vault, no sandbox", base_msg["message_half_rtt"]);
  if (raw_rtt.n > 0) {
    Summary half = raw_rtt;
    for (double* v : {&half.min, &half.mean, &half.p50, &half.p90, &half.p99, &half.max}) *v /= 2;
    PrintRow("floor: raw socketpair ping-pong / 2", half);
  }
  if (!msg_cost.empty()) printf("%s\n", msg_cost.c_str());
  if (vault_msg.count("message_half_rtt")) {
    printf("target p50 <= %.0f us: %s (%.2f us)\n", kTargetMsgP50Us,
           Verdict(vault_msg["message_half_rtt"].p50 <= kTargetMsgP50Us).c_str(),
           vault_msg["message_half_rtt"].p50);
  }

  if (wanted("spawn")) {
    printf("\n=== 3. spawns and memory ===");
    PrintHeader("per spawn (ms)");
    if (sandbox_rate.has_value()) {
      PrintRow("LinuxSandbox alone, 1 thread", sandbox_rate->serial_ms,
               absl::StrFormat("%.1f spawns/s", sandbox_rate->rate_serial));
      PrintRow(absl::StrCat("LinuxSandbox alone, ", flags.clients, " threads"),
               sandbox_rate->parallel_ms,
               absl::StrFormat("%.1f spawns/s%s", sandbox_rate->rate_parallel,
                               sandbox_rate->failures
                                   ? absl::StrCat(" (", sandbox_rate->failures,
                                                  " failed: ", sandbox_rate->error, ")")
                                   : ""));
    }
    if (vaultctl_ms.n > 0)
      PrintRow("vaultctl agent spawn (sequential processes)", vaultctl_ms,
               absl::StrFormat("%.1f spawns/s", vaultctl_rate));
    if (!grpc_spawn.ms.empty()) {
      const double rate =
          static_cast<double>(static_cast<int>(grpc_spawn.ms.size()) - grpc_spawn.failures) /
          grpc_spawn.wall_s;
      PrintRow(absl::StrCat("Agents.Spawn, ", flags.clients, " clients"), Summarize(grpc_spawn.ms),
               absl::StrFormat("%.1f spawns/s%s", rate,
                               sandbox_rate.has_value()
                                   ? absl::StrFormat(" = %.2f x the sandbox alone",
                                                     rate / sandbox_rate->rate_parallel)
                                   : ""));
      printf(
          "%d of %d spawned in %.2f s (%d spawns refused with \"Text file busy\" and retried "
          "with a new id, %d failed for good); %d had made their first host calls after %.2f s\n",
          flags.agents - grpc_spawn.failures, flags.agents, grpc_spawn.wall_s, txtbsy_total,
          grpc_spawn.failures, connected, connected_s);
      printf("target >= %.0f spawns/s: %s (%.1f)\n", kTargetSpawnsPerS,
             Verdict(rate >= kTargetSpawnsPerS).c_str(), rate);
      printf(
          "vaultd VmRSS: %.1f MiB at start, %.1f MiB before the spawns, %.1f MiB with %d idle "
          "agents (VmHWM %.1f MiB), %.1f MiB after terminating them\n",
          static_cast<double>(rss_start) / 1024, static_cast<double>(rss_before_spawn) / 1024,
          static_cast<double>(rss_idle) / 1024, connected, static_cast<double>(hwm_idle) / 1024,
          static_cast<double>(rss_end) / 1024);
      if (idle_cpu_ms_per_s >= 0)
        printf("vaultd CPU with %d idle agents: %.2f ms per second (all its threads)\n", connected,
               idle_cpu_ms_per_s);
      printf("target vaultd RSS <= %.0f MiB: %s (%.1f MiB)\n", kTargetVaultdRssMiB,
             Verdict(static_cast<double>(rss_idle) / 1024 <= kTargetVaultdRssMiB).c_str(),
             static_cast<double>(rss_idle) / 1024);
      printf(
          "vaultd's descendants: %d processes, VmRSS sum %.1f MiB (%.1f KiB per agent; "
          "shared libraries counted in every process), Pss sum %.1f MiB (%.1f KiB per agent)\n",
          desc.processes, static_cast<double>(desc.rss_kib) / 1024,
          connected > 0 ? static_cast<double>(desc.rss_kib) / connected : 0.0,
          static_cast<double>(desc.pss_kib) / 1024,
          connected > 0 ? static_cast<double>(desc.pss_kib) / connected : 0.0);
      for (const auto& [comm, v] : desc.by_comm)
        printf("  %-20s %5d processes, %8.1f MiB\n", comm.c_str(), v.first,
               static_cast<double>(v.second) / 1024);
      printf("agents' cgroup memory (Agents.List memory_bytes, %d running): %.1f MiB\n",
             running_listed, static_cast<double>(cgroup_bytes) / (1 << 20));
      if (!terminate.ms.empty())
        printf("terminate (Agents.Control, %d clients): %.1f /s, p50 %.2f ms\n", flags.clients,
               static_cast<double>(terminate.ms.size()) / terminate.wall_s,
               Summarize(terminate.ms).p50);
    }
  }
  printf("\nvaultd stopped: %s; load average after %.2f\n", stopped.c_str(), LoadAverage());

  // Machine-readable results for bench/run; a figure that was not measured is null.
  printf("\n");
  auto result = [&](std::string metric, std::string label, std::string unit, double target,
                    vault::bench::Better better) {
    vault::bench::Result r;
    r.bench = "agent_bench";
    r.metric = std::move(metric);
    r.label = std::move(label);
    r.issue = 6;
    r.unit = std::move(unit);
    r.target = target;
    r.better = better;
    return r;
  };
  const char* kFailed = "not measured: see agent_bench's errors";
  if (wanted("rtt")) {
    vault::bench::Result r =
        result("agent.host_call_rtt.p50", "host-call round trip (heartbeat), p50", "us",
               kTargetRttP50Us, vault::bench::Better::kLower);
    if (vault_rtt.count("heartbeat")) r.value = vault_rtt["heartbeat"].p50;
    if (base_rtt.count("heartbeat")) r.baseline = base_rtt["heartbeat"].p50;
    r.baseline_name = "same guest, echo server, no sandbox";
    if (!r.value.has_value()) {
      r.note = kFailed;
    } else if (raw_rtt.n > 0) {
      r.note = absl::StrFormat("raw socketpair echo p50 %.2f us", raw_rtt.p50);
    }
    vault::bench::EmitResult(r);
  }
  if (wanted("msg")) {
    vault::bench::Result r =
        result("agent.message.p50", "agent-to-agent message (round trip / 2), p50", "us",
               kTargetMsgP50Us, vault::bench::Better::kLower);
    if (vault_msg.count("message_half_rtt")) r.value = vault_msg["message_half_rtt"].p50;
    if (base_msg.count("message_half_rtt")) r.baseline = base_msg["message_half_rtt"].p50;
    r.baseline_name = "same guests, fake vault, no sandbox";
    if (!r.value.has_value()) {
      r.note = kFailed;
    } else if (raw_rtt.n > 0) {
      r.note = absl::StrFormat("raw socketpair ping-pong / 2 p50 %.2f us", raw_rtt.p50 / 2);
    }
    vault::bench::EmitResult(r);
  }
  if (wanted("spawn")) {
    vault::bench::Result rate =
        result("agent.spawn_rate",
               absl::StrCat("agent spawns (Agents.Spawn, ", flags.clients, " clients, ",
                            flags.agents, " agents)"),
               "spawns/s", kTargetSpawnsPerS, vault::bench::Better::kHigher);
    if (!grpc_spawn.ms.empty() && grpc_spawn.wall_s > 0) {
      rate.value =
          static_cast<double>(static_cast<int>(grpc_spawn.ms.size()) - grpc_spawn.failures) /
          grpc_spawn.wall_s;
    }
    if (sandbox_rate.has_value()) rate.baseline = sandbox_rate->rate_parallel;
    rate.baseline_name = absl::StrCat("LinuxSandbox alone, ", flags.clients, " threads");
    if (!rate.value.has_value()) rate.note = kFailed;
    vault::bench::EmitResult(rate);
    vault::bench::Result rss =
        result("agent.vaultd_rss", absl::StrCat("vaultd RSS with ", connected, " idle agents"),
               "MiB", kTargetVaultdRssMiB, vault::bench::Better::kLower);
    if (rss_idle >= 0 && connected > 0) rss.value = static_cast<double>(rss_idle) / 1024;
    if (rss_before_spawn >= 0) rss.baseline = static_cast<double>(rss_before_spawn) / 1024;
    rss.baseline_name = "vaultd before the spawns";
    if (!rss.value.has_value()) {
      rss.note = kFailed;
    } else if (connected < 1000) {
      rss.note = "the target is for 1,000 idle agents";
    }
    if (rss.value.has_value() && idle_cpu_ms_per_s >= 0) {
      rss.note =
          absl::StrCat(rss.note, rss.note.empty() ? "" : "; ",
                       absl::StrFormat("vaultd CPU while they idle %.2f ms/s", idle_cpu_ms_per_s));
    }
    vault::bench::EmitResult(rss);
  }
  if (rc != 0) {
    std::string log = ReadAll(vault.log());
    if (log.size() > 4000) log = log.substr(log.size() - 4000);
    fprintf(stderr, "--- vaultd log (tail) ---\n%s\n", log.c_str());
  }
  if (flags.keep) {
    printf("kept %s\n", tmp.c_str());
  } else {
    std::filesystem::remove_all(tmp, ec);
  }
  return rc;
}

}  // namespace
}  // namespace vault::bench

int main(int argc, char** argv) { return vault::bench::Main(argc, argv); }
