// find_missing_bench: FindMissing and BatchPut against a running vaultd, over real gRPC.
//
//   find_missing_bench --vault=unix:/path/to/data/vault.sock [--preload=10000]
//                      [--deadline_ms=10000] [--server_pid=PID] [--benchmark_min_time=2]
//
// --vault (or env VAULT_ADDR) is the vault's admin Unix socket: `unix:PATH` or a path.
// --preload=N first stores N deterministic 4 KiB objects (idempotent: a second run finds them
// present). The "present" digests are then the first 10,000 entries of the vault's change feed,
// so the vault needs at least 10,000 objects (preloaded or not); the "missing" ones are random.
// --server_pid=PID (vaultd's pid, same host) adds the counter server_cpu_ms: vaultd's CPU time
// (user + system, /proc/PID/stat, 10 ms ticks) over the run divided by the calls made; unlike
// latency it barely moves when other processes compete for the cores.
//
// Cases, each a real unary call with a deadline, timed per call (manual time):
//   BM_FindMissing/all_present|all_missing|half_half  10,000 digests per call; counters p50_ms,
//       p99_ms, max_ms (per-call latency over the run) and digests/s.
//   BM_BatchPut/threads:T  1000 new 4 KiB objects per call (fresh random content every call, so
//       the vault really stores them); counters objects/s, MB/s (aggregate over threads), p50_ms,
//       p99_ms. Generating and hashing the content is outside the timed region.
//
// Thread-safety: benchmarks share the read-only channel and stub; each thread owns its data.
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "benchmark/benchmark.h"
#include "cas/digest.h"
#include "vault/v1/cas.grpc.pb.h"

namespace {

constexpr int kFindMissingDigests = 10000;
constexpr int kBatchObjects = 1000;
constexpr size_t kObjectBytes = 4096;
constexpr int kPreloadBatch = 1000;  // 1000 x 4 KiB stays below the 4 MiB BatchPut limit

struct Flags {
  std::string vault;
  int preload = 0;
  int deadline_ms = 10000;
  int server_pid = 0;
};

// The state every benchmark shares, set up once in main before the benchmarks run.
struct Shared {
  Flags flags;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<vault::v1::Cas::Stub> stub;
  std::vector<vault::v1::Digest> present;  // known stored
  std::vector<vault::v1::Digest> missing;  // random, never stored
  uint64_t run_nonce = 0;                  // makes BatchPut content unique across runs
  std::atomic<uint64_t> next_object{0};
  std::atomic<uint64_t> calls{0};  // calls made by every benchmark thread so far
};

Shared* shared = nullptr;

void ToProto(const vault::cas::Digest& d, vault::v1::Digest* out) {
  out->set_sha256(d.sha256());
  out->set_size(d.size());
}

std::unique_ptr<grpc::ClientContext> Context() {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() +
                    std::chrono::milliseconds(shared->flags.deadline_ms));
  return ctx;
}

// Fills `out` with pseudo-random bytes from `rng`.
void FillRandom(std::mt19937_64& rng, std::string* out) {
  for (size_t i = 0; i + 8 <= out->size(); i += 8) {
    uint64_t v = rng();
    std::memcpy(out->data() + i, &v, 8);
  }
}

// CPU seconds (user + system) process `pid` has used, or -1 if unknown.
double ProcessCpuSeconds(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t paren = stat.rfind(')');  // comm may hold spaces; fields 3.. follow ") "
  if (paren == std::string::npos) return -1;
  std::istringstream fields(stat.substr(paren + 2));
  std::string field;
  double ticks = 0;
  for (int i = 3; i <= 15 && fields >> field; ++i) {
    if (i >= 14) ticks += std::atof(field.c_str());  // utime, stime
  }
  return ticks / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// Measures vaultd's CPU per call over one benchmark run (thread 0 speaks for all threads).
class ServerCpu {
 public:
  explicit ServerCpu(const benchmark::State& state)
      : active_(shared->flags.server_pid > 0 && state.thread_index() == 0),
        cpu0_(active_ ? ProcessCpuSeconds(shared->flags.server_pid) : 0),
        calls0_(shared->calls.load()) {}
  void Report(benchmark::State& state) const {
    if (!active_) return;
    double cpu = ProcessCpuSeconds(shared->flags.server_pid) - cpu0_;
    uint64_t calls = shared->calls.load() - calls0_;
    if (cpu0_ >= 0 && calls > 0) state.counters["server_cpu_ms"] = cpu * 1e3 / calls;
  }

 private:
  const bool active_;
  const double cpu0_;
  const uint64_t calls0_;
};

// Percentile of sorted samples (nearest rank).
double Percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  size_t rank = static_cast<size_t>(p * static_cast<double>(sorted.size() - 1) + 0.5);
  return sorted[std::min(rank, sorted.size() - 1)];
}

// Per-call latency of this thread's calls. With several threads each reports its own and the
// counters show their average (kAvgThreads), not their sum.
void SetLatencyCounters(benchmark::State& state, std::vector<double> ms) {
  std::sort(ms.begin(), ms.end());
  auto avg = [](double v) { return benchmark::Counter(v, benchmark::Counter::kAvgThreads); };
  state.counters["p50_ms"] = avg(Percentile(ms, 0.50));
  state.counters["p99_ms"] = avg(Percentile(ms, 0.99));
  state.counters["max_ms"] = avg(ms.empty() ? 0 : ms.back());
}

bool ParseFlags(int argc, char** argv, Flags* flags) {
  if (const char* env = std::getenv("VAULT_ADDR"); env != nullptr) flags->vault = env;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    auto value = [&](std::string_view name) -> const char* {
      return a.substr(0, name.size()) == name ? argv[i] + name.size() : nullptr;
    };
    if (const char* v = value("--vault=")) {
      flags->vault = v;
    } else if (const char* v = value("--preload=")) {
      flags->preload = std::atoi(v);
    } else if (const char* v = value("--deadline_ms=")) {
      flags->deadline_ms = std::atoi(v);
    } else if (const char* v = value("--server_pid=")) {
      flags->server_pid = std::atoi(v);
    } else {
      std::cerr << "find_missing_bench: unknown flag " << a << "\n";
      return false;
    }
  }
  if (flags->vault.empty()) {
    std::cerr << "find_missing_bench: pass --vault=unix:PATH (or set VAULT_ADDR)\n";
    return false;
  }
  if (flags->vault.rfind("unix:", 0) != 0) flags->vault = "unix:" + flags->vault;
  return flags->preload >= 0 && flags->deadline_ms > 0;
}

// Stores objects 0..n-1 of a fixed sequence (seed 42), so preloading is idempotent.
bool Preload(int n) {
  std::mt19937_64 rng(42);
  for (int done = 0; done < n;) {
    vault::v1::BatchPutRequest req;
    for (int k = 0; k < kPreloadBatch && done < n; ++k, ++done) {
      std::string data(kObjectBytes, '\0');
      FillRandom(rng, &data);
      auto* item = req.add_items();
      ToProto(vault::cas::Digest::Of(data), item->mutable_digest());
      item->set_data(std::move(data));
    }
    vault::v1::BatchPutResponse resp;
    grpc::Status s = shared->stub->BatchPut(Context().get(), req, &resp);
    if (!s.ok()) {
      std::cerr << "find_missing_bench: preload BatchPut: " << s.error_message() << "\n";
      return false;
    }
    for (const vault::v1::PutResult& r : resp.results()) {
      if (r.status().code() != 0) {
        std::cerr << "find_missing_bench: preload item: " << r.status().message() << "\n";
        return false;
      }
    }
  }
  return true;
}

// The first `n` digests of the change feed: objects the vault certainly stores.
bool LoadPresent(int n) {
  vault::v1::FeedRequest req;
  req.set_limit(static_cast<uint32_t>(n));
  auto ctx = Context();
  auto reader = shared->stub->Feed(ctx.get(), req);
  vault::v1::FeedResponse resp;
  while (reader->Read(&resp)) {
    for (const vault::v1::FeedEntry& e : resp.entries()) shared->present.push_back(e.digest());
  }
  grpc::Status s = reader->Finish();
  if (!s.ok()) {
    std::cerr << "find_missing_bench: Feed: " << s.error_message() << "\n";
    return false;
  }
  if (static_cast<int>(shared->present.size()) < n) {
    std::cerr << "find_missing_bench: the vault stores " << shared->present.size()
              << " objects; the present cases need " << n << " (pass --preload=" << n << ")\n";
    return false;
  }
  return true;
}

enum class Mix { kAllPresent, kAllMissing, kHalfHalf };

void BM_FindMissing(benchmark::State& state, Mix mix) {
  vault::v1::FindMissingRequest req;
  int expect_missing = 0;
  for (int i = 0; i < kFindMissingDigests; ++i) {
    bool present = mix == Mix::kAllPresent || (mix == Mix::kHalfHalf && i % 2 == 0);
    *req.add_digests() = present ? shared->present[i] : shared->missing[i];
    expect_missing += present ? 0 : 1;
  }
  std::vector<double> ms;
  ServerCpu server_cpu(state);
  for (auto _ : state) {
    vault::v1::FindMissingResponse resp;
    auto ctx = Context();
    auto start = std::chrono::steady_clock::now();
    grpc::Status s = shared->stub->FindMissing(ctx.get(), req, &resp);
    std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    if (!s.ok()) {
      state.SkipWithError(("FindMissing: " + s.error_message()).c_str());
      break;
    }
    if (resp.missing_size() != expect_missing) {
      state.SkipWithError("FindMissing answered the wrong number of missing digests");
      break;
    }
    state.SetIterationTime(took.count());
    ms.push_back(took.count() * 1e3);
    shared->calls.fetch_add(1);
  }
  server_cpu.Report(state);
  state.counters["digests/s"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * kFindMissingDigests, benchmark::Counter::kIsRate);
  SetLatencyCounters(state, std::move(ms));
}

void BM_BatchPut(benchmark::State& state) {
  std::mt19937_64 rng(shared->run_nonce ^ static_cast<uint64_t>(state.thread_index() + 1));
  std::vector<double> ms;
  ServerCpu server_cpu(state);
  for (auto _ : state) {
    // New content every call: a unique (nonce, counter) header, random tail.
    vault::v1::BatchPutRequest req;
    for (int k = 0; k < kBatchObjects; ++k) {
      std::string data(kObjectBytes, '\0');
      FillRandom(rng, &data);
      uint64_t header[2] = {shared->run_nonce, shared->next_object.fetch_add(1)};
      std::memcpy(data.data(), header, sizeof(header));
      auto* item = req.add_items();
      ToProto(vault::cas::Digest::Of(data), item->mutable_digest());
      item->set_data(std::move(data));
    }
    vault::v1::BatchPutResponse resp;
    auto ctx = Context();
    auto start = std::chrono::steady_clock::now();
    grpc::Status s = shared->stub->BatchPut(ctx.get(), req, &resp);
    std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    if (!s.ok()) {
      state.SkipWithError(("BatchPut: " + s.error_message()).c_str());
      break;
    }
    bool all_new = resp.results_size() == kBatchObjects;
    for (const vault::v1::PutResult& r : resp.results()) {
      all_new = all_new && r.status().code() == 0 && !r.already_present();
    }
    if (!all_new) {
      state.SkipWithError("BatchPut: an item was refused or already present");
      break;
    }
    state.SetIterationTime(took.count());
    ms.push_back(took.count() * 1e3);
    shared->calls.fetch_add(1);
  }
  server_cpu.Report(state);
  const double objects = static_cast<double>(state.iterations()) * kBatchObjects;
  state.counters["objects/s"] = benchmark::Counter(objects, benchmark::Counter::kIsRate);
  state.counters["MB/s"] =
      benchmark::Counter(objects * kObjectBytes / 1e6, benchmark::Counter::kIsRate);
  SetLatencyCounters(state, std::move(ms));
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);  // takes the --benchmark_* flags, leaves ours
  static Shared state;
  shared = &state;
  if (!ParseFlags(argc, argv, &state.flags)) return 2;

  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  args.SetMaxSendMessageSize(64 << 20);
  state.channel =
      grpc::CreateCustomChannel(state.flags.vault, grpc::InsecureChannelCredentials(), args);
  if (!state.channel->WaitForConnected(std::chrono::system_clock::now() +
                                       std::chrono::milliseconds(state.flags.deadline_ms))) {
    std::cerr << "find_missing_bench: cannot connect to " << state.flags.vault << "\n";
    return 1;
  }
  state.stub = vault::v1::Cas::NewStub(state.channel);
  if (state.flags.preload > 0 && !Preload(state.flags.preload)) return 1;
  if (!LoadPresent(kFindMissingDigests)) return 1;
  std::random_device seed;
  state.run_nonce = (static_cast<uint64_t>(seed()) << 32) ^ seed();
  std::mt19937_64 rng(state.run_nonce);
  for (int i = 0; i < kFindMissingDigests; ++i) {
    std::string sha(vault::cas::kSha256Bytes, '\0');
    FillRandom(rng, &sha);
    vault::v1::Digest d;
    d.set_sha256(std::move(sha));
    d.set_size(kObjectBytes);
    state.missing.push_back(std::move(d));
  }

  for (auto [name, mix] : {std::pair{"BM_FindMissing/all_present", Mix::kAllPresent},
                           std::pair{"BM_FindMissing/all_missing", Mix::kAllMissing},
                           std::pair{"BM_FindMissing/half_half", Mix::kHalfHalf}}) {
    benchmark::RegisterBenchmark(name, BM_FindMissing, mix)
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond);
  }
  benchmark::RegisterBenchmark("BM_BatchPut/1000x4KiB", BM_BatchPut)
      ->UseManualTime()
      ->Unit(benchmark::kMillisecond)
      ->Threads(1)
      ->Threads(4);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
