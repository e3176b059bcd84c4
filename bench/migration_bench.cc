// migration_bench: migration latency, `vaultctl migrate AGENT --to b` until the agent runs on b,
// for agent states of several sizes, between two real vaultd processes (a, b) over mutual TLS on
// loopback, each with its own RocksDB and sandboxes. Every run moves a fresh agent with a fresh
// random state, so the destination never already holds it (nothing is deduplicated away).
//
// Baselines from the same run, for the same bytes: `vaultctl cas put FILE` into b (the CAS write
// path alone, over the admin socket) and `rsync -a` of the file between two plain directories;
// and `vaultctl status`, the fixed cost of one vaultctl process and one admin call.
//
//   build/bench/migration_bench [--runs=N] [--sizes=1024,1048576,...] [--dir=DIR] [--keep]
//
// MIGRATION_BENCH_VAULTCTL, MIGRATION_BENCH_VAULTD and MIGRATION_BENCH_GUEST name other binaries
// than the ones built with it (to compare two builds on the same machine, at the same load).
//
// States of any size (default 1 KiB, 1 MiB and 64 MiB): the agent (migration_bench_guest) is
// spawned with a small seed as its state, makes its real state of the size asked from it and
// checkpoints it through the SDK, in pieces when it is larger than a frame (the cas_upload_* host
// calls, then a checkpoint by digest; the vaults here run with 16 MiB frames and 40 MiB
// messages). The bench waits for that checkpoint before it times the hop, and after the hop for
// the agent on b to have read its whole state back (in pieces): neither is timed, and neither
// overlaps the next run. The principals' storage quota is lifted (every run puts a fresh state).
//
// The hop goes with the state the agent checkpointed (`--no-checkpoint`: the vault does not ask
// for another, which this guest would not answer; asking with `--checkpoint-wait 1` added ~1.3 ms).
//
// "Runs on b" is what vaultctl's return means: b committed the hop (one durable RocksDB write)
// and started the agent's sandbox before it answered (see docs/migration.md).
//
// Without rsync on PATH its column is left out. After the table, one BENCH_RESULT line
// (bench/bench_result.h) per size, for bench/run: the migration's p50 beside cas put's p50
// (the target, <= 20 ms, is at 1 MiB).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <random>
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
#include "bench/bench_result.h"
#include "bench/bench_util.h"

namespace vault::bench {
namespace {

struct Flags {
  int runs = 20;
  std::vector<uint64_t> sizes = {1024, 1 << 20, 64 << 20};
  std::string dir;
  bool keep = false;
};

std::string RandomBytes(uint64_t n, std::mt19937_64& rng) {
  std::string s(n, '\0');
  for (uint64_t i = 0; i < n; ++i) s[i] = static_cast<char>(rng());
  return s;
}

constexpr double kTargetP50Ms = 20;  // at kTargetSize
constexpr uint64_t kTargetSize = 1 << 20;
constexpr uint64_t kMaxSize = uint64_t{1} << 30;

// Polls `vaultctl agent logs ID` on `socket` until a line ends with `line` (Die after 120 s).
void WaitLog(const std::string& ctl, const std::string& socket, const std::string& id,
             const std::string& line) {
  const absl::Time deadline = absl::Now() + absl::Seconds(120);
  for (;;) {
    RunResult logs = Run({ctl, "--vault", socket, "agent", "logs", id});
    for (absl::string_view l : absl::StrSplit(logs.out, '\n')) {
      if (absl::EndsWith(absl::StripTrailingAsciiWhitespace(l), line)) return;
    }
    if (absl::Now() > deadline) Die("agent " + id + " never logged \"" + line + "\": " + logs.out);
    absl::SleepFor(absl::Milliseconds(20));
  }
}

bool OnPath(const std::string& name) {
  const char* path = std::getenv("PATH");
  for (absl::string_view dir : absl::StrSplit(path != nullptr ? path : "/usr/bin:/bin", ':')) {
    if (!dir.empty() && access(absl::StrCat(dir, "/", name).c_str(), X_OK) == 0) return true;
  }
  return false;
}

std::string SizeName(uint64_t n) {
  if (n % (1 << 20) == 0) return absl::StrCat(n >> 20, " MiB");
  if (n % 1024 == 0) return absl::StrCat(n >> 10, " KiB");  // 4 MiB - 1 KiB: "4095 KiB"
  if (n > (1 << 20)) return absl::StrFormat("%.2f MiB", static_cast<double>(n) / (1 << 20));
  return absl::StrCat(n, " B");
}

int Main(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    absl::string_view a = argv[i];
    if (absl::ConsumePrefix(&a, "--runs=")) {
      if (!absl::SimpleAtoi(a, &f.runs) || f.runs < 1) Die("--runs: a positive number");
    } else if (absl::ConsumePrefix(&a, "--sizes=")) {
      f.sizes.clear();
      for (absl::string_view s : absl::StrSplit(a, ',')) {
        uint64_t n;
        if (!absl::SimpleAtoi(s, &n) || n == 0 || n > kMaxSize) {
          Die("--sizes: byte counts from 1 to 1 GiB");
        }
        f.sizes.push_back(n);
      }
    } else if (absl::ConsumePrefix(&a, "--dir=")) {
      f.dir = std::string(a);
    } else if (a == "--keep") {
      f.keep = true;
    } else {
      std::printf("usage: %s [--runs=N] [--sizes=B,B,...] [--dir=DIR] [--keep]\n", argv[0]);
      return a == "--help" ? 0 : 2;
    }
  }
  std::string root = f.dir;
  if (root.empty()) {
    char tmpl[] = "/tmp/migration-bench-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) Die("mkdtemp");
    root = tmpl;
  }
  // Other builds' binaries (an A/B comparison): MIGRATION_BENCH_VAULTCTL, _VAULTD, _GUEST.
  auto binary = [](const char* env, const char* built) {
    const char* v = std::getenv(env);
    return std::string(v != nullptr && *v != '\0' ? v : built);
  };
  const std::string ctl = binary("MIGRATION_BENCH_VAULTCTL", MIGRATION_BENCH_VAULTCTL);
  const std::string vaultd = binary("MIGRATION_BENCH_VAULTD", MIGRATION_BENCH_VAULTD);
  const std::string guest = binary("MIGRATION_BENCH_GUEST", MIGRATION_BENCH_GUEST);
  const bool have_rsync = OnPath("rsync");
  std::vector<vault::bench::Result> results;
  {
    Federation fed(root, ctl, vaultd);
    fed.Create({"a", "b"});
    for (const char* name : {"a", "b"}) {
      fed.EditConfig(name, [](std::string& c) {
        absl::StrReplaceAll({{"agents {\n",
                              "agents {\n  max_frame_bytes: 16777216\n"
                              "  default_max_storage_bytes: 1099511627776\n"}},
                            &c);
        c += "server {\n  max_message_bytes: 41943040\n}\n";
      });
    }
    fed.StartAll();
    // The agents are a's administrator's; b trusts that key with its full preset.
    MustRun({ctl, "--vault", fed.Socket("b"), "policy", "trust", fed.AdminKey("a"), "--ceiling",
             "full"});
    const std::string spec = root + "/mover.scm";
    WriteAll(spec,
             "(agent\n  (purpose \"migration_bench\")\n"
             "  (capabilities (cas-write) (migrate (vaults a b)))\n"
             "  (constraints (max-runtime 3600)))\n");
    std::mt19937_64 rng(42);
    std::printf("migration_bench: %d runs per size, vaults a -> b (mTLS on loopback)%s\n", f.runs,
                have_rsync ? "" : "; rsync is not installed: no rsync column");
    std::printf("%-12s %9s %9s %9s %9s %11s %9s %10s %8s\n", "state", "p50 ms", "p90 ms", "max ms",
                "MB/s p50", "cas put ms", "rsync ms", "status ms", "p50/put");
    for (uint64_t size : f.sizes) {
      std::vector<double> hop, put, rsync, status;
      for (int run = 0; run < f.runs; ++run) {
        const std::string state = root + "/state";
        // The guest makes its state from this seed (fresh each run) and checkpoints it.
        WriteAll(state, absl::StrCat("migration_bench size=", size, " seed=", rng()));
        RunResult spawned = MustRun({ctl, "--vault", fed.Socket("a"), "agent", "spawn", spec,
                                     "--code", guest, "--state", state, "--as", fed.AdminKey("a")});
        const std::string id(absl::StripAsciiWhitespace(spawned.out));
        WaitLog(ctl, fed.Socket("a"), id, absl::StrCat("checkpointed ", size));
        RunResult moved = MustRun({ctl, "--vault", fed.Socket("a"), "-o", "json", "migrate", id,
                                   "--to", "b", "--no-checkpoint"});
        if (JsonField(moved.out, "to_vault") != "b") Die("migrate: " + moved.out);
        hop.push_back(moved.seconds * 1e3);
        WaitLog(ctl, fed.Socket("b"), id, absl::StrCat("arrived ", size));
        MustRun(
            {ctl, "--vault", fed.Socket("b"), "agent", "terminate", id, "--as", fed.AdminKey("b")});
        // Baselines: fresh bytes of the same size each time.
        WriteAll(state, RandomBytes(size, rng));
        put.push_back(MustRun({ctl, "--vault", fed.Socket("b"), "cas", "put", state}).seconds *
                      1e3);
        if (have_rsync) {
          const std::string dst = root + "/rsync-dst";
          MustRun({"rm", "-rf", dst});
          MustRun({"mkdir", "-p", dst});
          rsync.push_back(MustRun({"rsync", "-a", state, dst + "/"}).seconds * 1e3);
        }
        status.push_back(MustRun({ctl, "--vault", fed.Socket("a"), "status"}).seconds * 1e3);
      }
      Summary h = Summarize(hop), p = Summarize(put), r = Summarize(rsync), c = Summarize(status);
      std::printf("%-12s %9.1f %9.1f %9.1f %9.1f %11.1f %9s %10.1f %8.2f\n", SizeName(size).c_str(),
                  h.p50, h.p90, h.max, static_cast<double>(size) / 1e6 / (h.p50 / 1e3), p.p50,
                  have_rsync ? absl::StrFormat("%.1f", r.p50).c_str() : "-", c.p50, h.p50 / p.p50);
      std::fflush(stdout);
      vault::bench::Result res;
      res.bench = "migration_bench";
      res.metric = absl::StrCat("migration.p50.", size);
      res.label = absl::StrCat("migration a -> b, state ", SizeName(size), ", p50");
      res.issue = 7;
      res.value = h.p50;
      res.unit = "ms";
      res.baseline = p.p50;
      res.baseline_name = "vaultctl cas put of the same bytes";
      if (size == kTargetSize) res.target = kTargetP50Ms;
      res.better = vault::bench::Better::kLower;
      res.note =
          absl::StrFormat("%d runs; p90 %.1f ms; vaultctl status %.1f ms", f.runs, h.p90, c.p50);
      if (have_rsync) absl::StrAppend(&res.note, absl::StrFormat("; rsync -a %.1f ms", r.p50));
      results.push_back(std::move(res));
    }
  }
  if (!f.keep) MustRun({"rm", "-rf", root});
  std::printf("\n");
  for (const vault::bench::Result& r : results) vault::bench::EmitResult(r);
  return 0;
}

}  // namespace
}  // namespace vault::bench

int main(int argc, char** argv) { return vault::bench::Main(argc, argv); }
