// audit_bench: durable append throughput and full-log verification speed of the audit log
// (audit/log, audit/verify), against two baselines measured in the same run: raw SHA-256 of
// entry-sized buffers and the fdatasync rate of the disk the logs live on.
//
//   audit_bench [--verify_entries=1000000] [--append_min_time=1] [--verify_runs=1]
//               [--benchmark_filter=...] [other --benchmark_* flags]
//
// Every flag also reads an environment variable: AUDIT_BENCH_VERIFY_ENTRIES,
// AUDIT_BENCH_APPEND_MIN_TIME, AUDIT_BENCH_VERIFY_RUNS (a flag wins).
//
// Cases (every rate is a total over all threads, divided by wall-clock time):
//   Sha256/reused_ctx       EVP_DigestInit_ex2/Update/Final_ex over buffers the size of a
//                           serialized entry, one context reused: the raw speed. entries/s.
//   Sha256/oneshot          EVP_Digest with the fetched SHA-256 (what merkle.cc's Digest does).
//   Fdatasync/200B          write(200 bytes, O_APPEND) + fdatasync on a file in the temp dir.
//                           syncs/s.
//   Append/single/threads:T T threads each calling AuditLog::Append(entry) in a loop on one fresh
//                           log (sync_writes = true, vaultd's checkpoint defaults). entries/s;
//                           wal_syncs/s and entries/sync count the Sync calls on RocksDB's WAL
//                           files (through a counting FileSystem), i.e. the group commit's groups.
//   Append/batch64/threads:T the same with AppendMany of 64 entries per call.
//   Verify/entries:N        VerifyStoredLog over a log of N entries (built with AppendMany of
//                           1000 with sync off, checkpointed, flushed, compactions settled, then
//                           the database is closed and reopened). entries/s.
// At the end a summary table prints every rate with its ratio to raw SHA-256 and to the fdatasync
// rate, entries per WAL sync, CPU time per entry, the load average, and PASS/BELOW for the
// targets (>= 100,000 durable appends/s, >= 1,000,000 verified entries/s), and one BENCH_RESULT
// line (bench/bench_result.h) per append configuration and for the verification, for bench/run.
//
// Temporary directories are made under $TMPDIR (or /tmp) and removed before exit.
//
// Thread-safety: the append cases share one AuditLog (thread-safe); everything else is set up and
// torn down by the benchmark library's Setup/Teardown hooks, outside the threads.
#include <fcntl.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "audit/log.h"
#include "audit/log_store.h"
#include "audit/merkle.h"
#include "audit/note.h"
#include "audit/verify.h"
#include "bench/bench_result.h"
#include "benchmark/benchmark.h"
#include "capability/principal.h"
#include "common/testing/temp_dir.h"
#include "rocksdb/env.h"
#include "rocksdb/file_system.h"
#include "storage/database.h"
#include "vault/v1/audit.pb.h"

namespace {

using vault::audit::AuditLog;
using vault::audit::LogStore;
using vault::common::testing::TempDir;
using vault::v1::AuditEntry;

constexpr char kVault[] = "bench-vault";
constexpr int kBatch = 64;          // entries per AppendMany call in the batched cases
constexpr int kSetupBatch = 1000;   // entries per AppendMany call when building the verify log
constexpr size_t kPoolSize = 4096;  // distinct entries the append threads cycle through
constexpr size_t kFsyncWriteBytes = 200;

struct Flags {
  uint64_t verify_entries = 1000000;
  double append_min_time = 1.0;
  int verify_runs = 1;
};
Flags flags;

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "audit_bench: %s\n", what.c_str());
  std::exit(1);
}

template <typename T>
T Check(absl::StatusOr<T> v, const char* what) {
  if (!v.ok()) Die(absl::StrCat(what, ": ", v.status().ToString()));
  return *std::move(v);
}
void Check(const absl::Status& s, const char* what) {
  if (!s.ok()) Die(absl::StrCat(what, ": ", s.ToString()));
}

std::string Hex32(uint64_t i, absl::string_view salt) {
  return absl::BytesToHexString(vault::audit::AsBytes(vault::audit::Sha256(absl::StrCat(salt, i))));
}

// An entry as a real caller fills it: an ed25519 principal stores a 4 KiB object; 5 details of
// about 20 bytes each. Append fills sequence, time, vault and prev_hash.
AuditEntry MakeEntry(uint64_t i) {
  static const std::string actor = "ed25519:" + Hex32(7, "actor");
  AuditEntry e;
  e.set_actor(actor);
  e.set_action("cas.put");
  e.set_subject(absl::StrCat("sha256:", Hex32(i, "subject"), "/4096"));
  e.set_decision(AuditEntry::ALLOWED);
  auto detail = [&](const char* key, std::string value) {
    AuditEntry::Detail* d = e.add_details();
    d->set_key(key);
    d->set_value(std::move(value));
  };
  detail("transport", "unix:admin.sock");
  detail("peer_uid", absl::StrCat("uid=1000 pid=", 10000 + i % 50000));
  detail("method", "/vault.v1.Cas/Put");
  detail("bytes", "4096 stored=new");
  detail("request", absl::StrCat("req-", 100000000 + i));
  return e;
}

// The entry as Append stores it, for the size of the SHA-256 baseline's buffers.
size_t SerializedEntrySize() {
  AuditEntry e = MakeEntry(123456);
  e.set_sequence(123456);
  e.set_time_unix_micros(1700000000000000);
  e.set_vault(kVault);
  e.set_prev_hash(std::string(vault::audit::kHashSize, '\x5a'));
  return e.ByteSizeLong();
}

const std::vector<AuditEntry>& EntryPool() {
  static const std::vector<AuditEntry>* pool = [] {
    auto* p = new std::vector<AuditEntry>();
    p->reserve(kPoolSize);
    for (size_t i = 0; i < kPoolSize; ++i) p->push_back(MakeEntry(i));
    return p;
  }();
  return *pool;
}

const vault::capability::PrivateKey& Key() {
  static const vault::capability::PrivateKey* key =
      new vault::capability::PrivateKey(Check(vault::capability::PrivateKey::Generate(), "key"));
  return *key;
}

// Counts Sync/Fsync calls on RocksDB's WAL files (*.log), so the append cases can report how
// many entries each durable write carried (group commit at work).
std::atomic<uint64_t> wal_syncs{0};

class CountingWalFile : public rocksdb::FSWritableFileOwnerWrapper {
 public:
  explicit CountingWalFile(std::unique_ptr<rocksdb::FSWritableFile> f)
      : FSWritableFileOwnerWrapper(std::move(f)) {}
  rocksdb::IOStatus Sync(const rocksdb::IOOptions& o, rocksdb::IODebugContext* d) override {
    wal_syncs.fetch_add(1, std::memory_order_relaxed);
    return target()->Sync(o, d);
  }
  rocksdb::IOStatus Fsync(const rocksdb::IOOptions& o, rocksdb::IODebugContext* d) override {
    wal_syncs.fetch_add(1, std::memory_order_relaxed);
    return target()->Fsync(o, d);
  }
};

class CountingFs : public rocksdb::FileSystemWrapper {
 public:
  explicit CountingFs(const std::shared_ptr<rocksdb::FileSystem>& base) : FileSystemWrapper(base) {}
  const char* Name() const override { return "AuditBenchCountingFs"; }
  rocksdb::IOStatus NewWritableFile(const std::string& f, const rocksdb::FileOptions& o,
                                    std::unique_ptr<rocksdb::FSWritableFile>* r,
                                    rocksdb::IODebugContext* d) override {
    return Wrap(f, target()->NewWritableFile(f, o, r, d), r);
  }
  rocksdb::IOStatus ReopenWritableFile(const std::string& f, const rocksdb::FileOptions& o,
                                       std::unique_ptr<rocksdb::FSWritableFile>* r,
                                       rocksdb::IODebugContext* d) override {
    return Wrap(f, target()->ReopenWritableFile(f, o, r, d), r);
  }
  rocksdb::IOStatus ReuseWritableFile(const std::string& f, const std::string& old,
                                      const rocksdb::FileOptions& o,
                                      std::unique_ptr<rocksdb::FSWritableFile>* r,
                                      rocksdb::IODebugContext* d) override {
    return Wrap(f, target()->ReuseWritableFile(f, old, o, r, d), r);
  }

 private:
  static rocksdb::IOStatus Wrap(const std::string& name, rocksdb::IOStatus s,
                                std::unique_ptr<rocksdb::FSWritableFile>* r) {
    if (s.ok() && absl::EndsWith(name, ".log")) {
      *r = std::make_unique<CountingWalFile>(std::move(*r));
    }
    return s;
  }
};

rocksdb::Env* CountingEnv() {
  static rocksdb::Env* env =
      rocksdb::NewCompositeEnv(std::make_shared<CountingFs>(rocksdb::FileSystem::Default()))
          .release();
  return env;
}

std::unique_ptr<vault::storage::Database> OpenDb(const std::string& path, bool sync) {
  return Check(
      vault::storage::Database::Open({.path = path, .env = CountingEnv(), .sync_writes = sync},
                                     LogStore::ColumnFamilies()),
      "open database");
}

// ---- SHA-256 baseline ---------------------------------------------------------------------------

std::vector<std::string> ShaBuffers() {
  const size_t size = SerializedEntrySize();
  std::vector<std::string> bufs(1024);
  for (size_t i = 0; i < bufs.size(); ++i) {
    bufs[i].resize(size);
    for (size_t j = 0; j < size; ++j) bufs[i][j] = static_cast<char>((i * 131 + j * 7) & 0xff);
  }
  return bufs;
}

void BM_Sha256Reused(benchmark::State& state) {
  const std::vector<std::string> bufs = ShaBuffers();
  EVP_MD* md = EVP_MD_fetch(nullptr, "SHA256", nullptr);
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  unsigned char out[EVP_MAX_MD_SIZE];
  size_t i = 0;
  for (auto _ : state) {
    const std::string& b = bufs[i++ & 1023];
    unsigned int len = 0;
    if (EVP_DigestInit_ex2(ctx, md, nullptr) != 1 ||
        EVP_DigestUpdate(ctx, b.data(), b.size()) != 1 || EVP_DigestFinal_ex(ctx, out, &len) != 1) {
      state.SkipWithError("EVP digest failed");
      break;
    }
    benchmark::DoNotOptimize(out);
  }
  EVP_MD_CTX_free(ctx);
  EVP_MD_free(md);
  state.counters["entries/s"] =
      benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bufs[0].size()));
}

void BM_Sha256Oneshot(benchmark::State& state) {
  const std::vector<std::string> bufs = ShaBuffers();
  EVP_MD* md = EVP_MD_fetch(nullptr, "SHA256", nullptr);
  unsigned char out[EVP_MAX_MD_SIZE];
  size_t i = 0;
  for (auto _ : state) {
    const std::string& b = bufs[i++ & 1023];
    unsigned int len = 0;
    if (EVP_Digest(b.data(), b.size(), out, &len, md, nullptr) != 1) {
      state.SkipWithError("EVP_Digest failed");
      break;
    }
    benchmark::DoNotOptimize(out);
  }
  EVP_MD_free(md);
  state.counters["entries/s"] =
      benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bufs[0].size()));
}

// ---- fdatasync baseline -------------------------------------------------------------------------

void BM_Fdatasync(benchmark::State& state) {
  TempDir tmp("audit_bench_fsync");
  const std::string path = tmp.Path("wal");
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) {
    state.SkipWithError("open failed");
    return;
  }
  char buf[kFsyncWriteBytes];
  std::memset(buf, 'w', sizeof(buf));
  for (auto _ : state) {
    if (write(fd, buf, sizeof(buf)) != static_cast<ssize_t>(sizeof(buf)) || fdatasync(fd) != 0) {
      state.SkipWithError("write/fdatasync failed");
      break;
    }
  }
  close(fd);
  state.counters["syncs/s"] =
      benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

// ---- Durable appends ----------------------------------------------------------------------------

// One fresh log per run (Setup/Teardown wrap every run the library makes, including the ones
// that size the iteration count).
struct AppendState {
  std::unique_ptr<TempDir> tmp;
  std::unique_ptr<vault::storage::Database> db;
  std::unique_ptr<AuditLog> log;
};
AppendState* append_state = nullptr;

void SetupAppend(const benchmark::State&) {
  EntryPool();
  append_state = new AppendState();
  append_state->tmp = std::make_unique<TempDir>("audit_bench_append");
  append_state->db = OpenDb(append_state->tmp->Path("db"), /*sync=*/true);
  // vaultd's defaults: background checkpoints every 1000 entries or 1 s.
  append_state->log =
      Check(AuditLog::Open(append_state->db.get(), &Key(), {.vault_name = kVault}), "open log");
}

void TeardownAppend(const benchmark::State&) {
  append_state->log.reset();
  append_state->db.reset();
  append_state->tmp.reset();
  delete append_state;
  append_state = nullptr;
}

// Thread 0 reports the WAL syncs made while the threads ran (the loop starts and ends with a
// barrier of all threads), and entries per sync over all threads.
struct SyncCount {
  uint64_t start = 0;
  void Start(const benchmark::State& state) {
    if (state.thread_index() == 0) start = wal_syncs.load();
  }
  void Report(benchmark::State& state, uint64_t entries_per_iteration) {
    if (state.thread_index() != 0) return;
    const double syncs = static_cast<double>(wal_syncs.load() - start);
    const double entries = static_cast<double>(state.iterations()) * state.threads() *
                           static_cast<double>(entries_per_iteration);
    state.counters["wal_syncs/s"] = benchmark::Counter(syncs, benchmark::Counter::kIsRate);
    state.counters["entries/sync"] = syncs > 0 ? entries / syncs : 0;
  }
};

void BM_Append(benchmark::State& state) {
  const std::vector<AuditEntry>& pool = EntryPool();
  AuditLog* log = append_state->log.get();
  size_t next = static_cast<size_t>(state.thread_index()) * 977;
  SyncCount syncs;
  syncs.Start(state);
  for (auto _ : state) {
    absl::StatusOr<uint64_t> seq = log->Append(pool[next++ % pool.size()]);
    if (!seq.ok()) {
      state.SkipWithError(std::string(seq.status().message()).c_str());
      break;
    }
  }
  syncs.Report(state, 1);
  state.counters["entries/s"] =
      benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

void BM_AppendMany(benchmark::State& state, size_t batch) {
  const std::vector<AuditEntry>& pool = EntryPool();
  AuditLog* log = append_state->log.get();
  std::vector<AuditEntry> entries(batch);
  size_t next = static_cast<size_t>(state.thread_index()) * 977;
  SyncCount syncs;
  syncs.Start(state);
  for (auto _ : state) {
    for (AuditEntry& e : entries) e = pool[next++ % pool.size()];
    absl::StatusOr<uint64_t> seq = log->AppendMany(absl::MakeSpan(entries));
    if (!seq.ok()) {
      state.SkipWithError(std::string(seq.status().message()).c_str());
      break;
    }
  }
  syncs.Report(state, batch);
  state.counters["entries/s"] = benchmark::Counter(static_cast<double>(state.iterations() * batch),
                                                   benchmark::Counter::kIsRate);
}

// ---- Verification -------------------------------------------------------------------------------

struct VerifyLog {
  std::unique_ptr<TempDir> tmp;
  uint64_t entries = 0;
  double build_seconds = 0;
  double build_rate = 0;  // entries/s of the non-durable AppendMany build
};
VerifyLog* verify_log = nullptr;

bool Idle(const vault::storage::Database& db) {
  for (const char* prop : {"rocksdb.num-running-compactions", "rocksdb.compaction-pending",
                           "rocksdb.num-running-flushes", "rocksdb.mem-table-flush-pending"}) {
    uint64_t v = 0;
    if (!db.db()->GetIntProperty(prop, &v)) Die(absl::StrCat("no property ", prop));
    if (v != 0) return false;
  }
  return true;
}

// Builds the log once (the first verify run); later runs reuse it.
void BuildVerifyLog(const benchmark::State&) {
  if (verify_log != nullptr) return;
  verify_log = new VerifyLog();
  verify_log->tmp = std::make_unique<TempDir>("audit_bench_verify");
  verify_log->entries = flags.verify_entries;
  const std::string path = verify_log->tmp->Path("db");
  const auto start = std::chrono::steady_clock::now();
  {
    std::unique_ptr<vault::storage::Database> db = OpenDb(path, /*sync=*/false);
    std::unique_ptr<AuditLog> log = Check(
        AuditLog::Open(db.get(), &Key(), {.vault_name = kVault, .background_checkpoints = false}),
        "open log");
    std::vector<AuditEntry> batch;
    for (uint64_t done = 0; done < flags.verify_entries;) {
      const uint64_t n = std::min<uint64_t>(kSetupBatch, flags.verify_entries - done);
      batch.clear();
      for (uint64_t i = 0; i < n; ++i) batch.push_back(MakeEntry(done + i));
      Check(log->AppendMany(absl::MakeSpan(batch)).status(), "append");
      done += n;
    }
    verify_log->build_rate =
        static_cast<double>(flags.verify_entries) /
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    Check(log->IssueCheckpoint().status(), "checkpoint");
    log.reset();
    // Leave the database as a long-running vaultd would: memtables flushed and no compaction
    // left to do, so that none runs during the timed verification.
    LogStore store(db.get(), kVault);
    rocksdb::FlushOptions fo;
    fo.wait = true;
    for (rocksdb::ColumnFamilyHandle* cf : {store.entries_handle(), store.nodes_handle()}) {
      Check(vault::storage::ToStatus(db->db()->Flush(fo, cf), "flush"), "flush");
    }
    while (!Idle(*db)) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  verify_log->build_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::fprintf(stderr,
               "verify log: %" PRIu64
               " entries built in %.1f s (AppendMany x%d, sync off: %.0f entries/s)\n",
               verify_log->entries, verify_log->build_seconds, kSetupBatch, verify_log->build_rate);
}

void BM_Verify(benchmark::State& state) {
  // Reopened as vaultd would open it (sync on, default block cache): the entries come from disk
  // or the OS page cache, not from a memtable.
  std::unique_ptr<vault::storage::Database> db = OpenDb(verify_log->tmp->Path("db"), /*sync=*/true);
  LogStore store(db.get(), kVault);
  const vault::audit::NoteVerifier verifier =
      Check(vault::audit::NoteVerifier::FromKey(kVault, Key().public_key()), "verifier");
  uint64_t checked = 0;
  for (auto _ : state) {
    vault::audit::VerifyReport r = VerifyStoredLog(store, kVault, verifier);
    if (!r.ok || r.entries_checked != verify_log->entries ||
        r.checkpoint_size != verify_log->entries) {
      state.SkipWithError(
          absl::StrCat("verification failed: ", r.error, " (checked ", r.entries_checked, ")")
              .c_str());
      break;
    }
    checked += r.entries_checked;
  }
  state.counters["entries/s"] =
      benchmark::Counter(static_cast<double>(checked), benchmark::Counter::kIsRate);
}

// ---- Summary ------------------------------------------------------------------------------------

struct Result {
  bool ok = false;
  double rate = 0;          // entries/s (syncs/s for the fdatasync case), wall time
  double per_sync = 0;      // entries per WAL sync (append cases)
  double cpu_per_real = 0;  // CPU time of the process / wall time
  uint64_t threads = 1;
};

class SummaryReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& reports) override {
    ConsoleReporter::ReportRuns(reports);
    for (const Run& run : reports) {
      if (run.run_type != Run::RT_Iteration) continue;
      const std::string key = absl::StrCat(run.run_name.function_name, "/threads:", run.threads);
      Result r;
      r.ok = !run.error_occurred;
      r.threads = static_cast<uint64_t>(run.threads);
      for (const char* counter : {"entries/s", "syncs/s"}) {
        auto it = run.counters.find(counter);
        if (it != run.counters.end()) r.rate = it->second.value;
      }
      auto it = run.counters.find("entries/sync");
      if (it != run.counters.end()) r.per_sync = it->second.value;
      if (run.real_accumulated_time > 0) {
        r.cpu_per_real = run.cpu_accumulated_time / run.real_accumulated_time;
      }
      results_[key] = r;
    }
  }
  const std::map<std::string, Result>& results() const { return results_; }

 private:
  std::map<std::string, Result> results_;
};

std::optional<Result> Find(const SummaryReporter& rep, const std::string& key) {
  auto it = rep.results().find(key);
  if (it == rep.results().end() || !it->second.ok) return std::nullopt;
  return it->second;
}

std::string Num(double v) {
  // Thousands separators, no decimals.
  std::string digits = absl::StrCat(static_cast<uint64_t>(v + 0.5));
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out.push_back(',');
    out.push_back(digits[i]);
  }
  return out;
}

std::string Fixed(double v, int precision) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", precision, v);
  return buf;
}

// The 1-minute load average (other processes compete for the cores and for the disk).
std::string LoadAverage() {
  char buf[64] = {0};
  FILE* f = std::fopen("/proc/loadavg", "r");
  if (f == nullptr) return "?";
  const size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
  std::fclose(f);
  std::string s(buf, n);
  return s.substr(0, s.find(' '));
}
std::string load_before;

void PrintSummary(const SummaryReporter& rep, const std::vector<int>& threads) {
  const std::optional<Result> sha = Find(rep, "Sha256/reused_ctx/threads:1");
  const std::optional<Result> fsync = Find(rep, "Fdatasync/200B/threads:1");
  auto ratio = [](double a, const std::optional<Result>& b, int precision) {
    return b.has_value() && b->rate > 0 ? Fixed(a / b->rate, precision) : std::string("-");
  };
  std::printf(
      "\n== audit_bench summary (serialized entry %zu bytes; rates are per wall-clock "
      "second) ==\n",
      SerializedEntrySize());
  std::printf("%-34s %14s %10s %10s %10s %12s %12s\n", "case", "rate /s", "/ SHA-256", "/ fsync",
              "per sync", "CPU us/item", "per CPU-s");
  // CPU us/item: the process's CPU time (every thread, RocksDB's included) per entry (per sync
  // for the fdatasync row). per CPU-s: entries per second of that CPU time, i.e. the rate on one
  // dedicated core if the work is CPU-bound (SHA-256, verify). Both move much less than the
  // wall-clock rate when other processes compete for the cores.
  auto row = [&](const std::string& label, const std::optional<Result>& r, bool vs_sha,
                 bool vs_fsync, bool per_cpu) {
    if (!r.has_value()) {
      std::printf("%-34s %14s\n", label.c_str(), "(not run)");
      return;
    }
    std::printf("%-34s %14s %10s %10s %10s %12s %12s\n", label.c_str(), Num(r->rate).c_str(),
                vs_sha ? ratio(r->rate, sha, 4).c_str() : "",
                vs_fsync ? ratio(r->rate, fsync, 2).c_str() : "",
                r->per_sync > 0 ? Fixed(r->per_sync, 1).c_str() : "",
                r->rate > 0 ? Fixed(r->cpu_per_real / r->rate * 1e6, 2).c_str() : "",
                per_cpu && r->cpu_per_real > 0 ? Num(r->rate / r->cpu_per_real).c_str() : "");
  };
  row("SHA-256 raw (reused EVP ctx)", sha, true, false, true);
  row("SHA-256 one-shot EVP_Digest", Find(rep, "Sha256/oneshot/threads:1"), true, false, true);
  row("fdatasync (200 B append), syncs", fsync, false, true, false);
  std::vector<std::pair<std::string, double>> appends;
  std::vector<vault::bench::Result> results;
  auto result = [&](std::string metric, std::string label, const std::optional<Result>& r,
                    double target) {
    vault::bench::Result out;
    out.bench = "audit_bench";
    out.metric = std::move(metric);
    out.label = std::move(label);
    out.issue = 3;
    if (r.has_value()) out.value = r->rate;
    out.unit = "entries/s";
    if (sha.has_value()) out.baseline = sha->rate;
    out.baseline_name = absl::StrCat("raw SHA-256 of ", SerializedEntrySize(), " B");
    out.target = target;
    if (!r.has_value()) out.note = "not run";
    return out;
  };
  for (const char* kind : {"single", "batch64"}) {
    for (int t : threads) {
      const std::string key = absl::StrCat("Append/", kind, "/threads:", t);
      const std::optional<Result> r = Find(rep, key);
      const std::string label =
          absl::StrCat(std::string(kind) == "single" ? "Append x1, " : "AppendMany x64, ", t,
                       t == 1 ? " thread" : " threads");
      row(label, r, true, true, false);
      if (r.has_value()) appends.emplace_back(key, r->rate);
      vault::bench::Result out = result(absl::StrCat("audit.append.", kind, ".threads", t),
                                        absl::StrCat("durable appends, ", label), r, 100000);
      if (r.has_value()) {
        out.note = absl::StrCat(Fixed(r->per_sync, 1), " entries per WAL sync");
        if (fsync.has_value() && fsync->rate > 0) {
          absl::StrAppend(&out.note, "; ", Fixed(r->rate / fsync->rate, 2),
                          " x the fdatasync loop (", Num(fsync->rate), "/s)");
        }
      }
      results.push_back(std::move(out));
    }
  }
  const std::optional<Result> verify =
      Find(rep, absl::StrCat("Verify/entries:", flags.verify_entries, "/threads:1"));
  row(absl::StrCat("Verify (", Num(static_cast<double>(flags.verify_entries)), " entries)"), verify,
      true, false, true);
  {
    vault::bench::Result out =
        result("audit.verify",
               absl::StrCat("log verification, ", Num(static_cast<double>(flags.verify_entries)),
                            " entries"),
               verify, 1000000);
    if (verify.has_value() && verify->cpu_per_real > 0) {
      out.note = absl::StrCat(Num(verify->rate / verify->cpu_per_real), " entries per CPU-second");
    }
    results.push_back(std::move(out));
  }
  if (verify_log != nullptr) {
    std::printf("%-34s %14s %10s\n", "(verify log build: x1000, no sync)",
                Num(verify_log->build_rate).c_str(),
                sha.has_value() ? Fixed(verify_log->build_rate / sha->rate, 4).c_str() : "-");
  }

  if (sha.has_value() && verify.has_value() && sha->cpu_per_real > 0 && verify->cpu_per_real > 0) {
    std::printf(
        "\nCPU-time ratio (independent of load): verify / SHA-256 = %s\n",
        Fixed((verify->rate / verify->cpu_per_real) / (sha->rate / sha->cpu_per_real), 4).c_str());
  }
  std::printf("Load average: %s before the run, %s after\n", load_before.c_str(),
              LoadAverage().c_str());

  std::printf("\nTargets:\n");
  std::string passing;
  for (const auto& [key, rate] : appends) {
    if (rate >= 100000) absl::StrAppend(&passing, passing.empty() ? "" : ", ", key);
  }
  std::printf("  durable appends >= 100,000/s: %s\n",
              appends.empty()   ? "(not run)"
              : passing.empty() ? "BELOW in every configuration"
                                : absl::StrCat("PASS for ", passing, "; BELOW otherwise").c_str());
  std::printf("  verification >= 1,000,000 entries/s: %s\n", !verify.has_value()       ? "(not run)"
                                                             : verify->rate >= 1000000 ? "PASS"
                                                                                       : "BELOW");
  std::printf("\n");
  for (const vault::bench::Result& r : results) vault::bench::EmitResult(r);
}

// ---- Flags --------------------------------------------------------------------------------------

template <typename T>
bool ParseValue(absl::string_view text, T* out) {
  if constexpr (std::is_same_v<T, double>) {
    return absl::SimpleAtod(text, out) && *out > 0;
  } else {
    return absl::SimpleAtoi(text, out) && *out > 0;
  }
}

template <typename T>
void FromEnv(const char* name, T* out) {
  const char* v = getenv(name);
  if (v != nullptr && *v != '\0' && !ParseValue(v, out)) Die(absl::StrCat("bad ", name, "=", v));
}

// Takes our flags out of argv (the rest goes to the benchmark library).
void ParseFlags(int* argc, char** argv) {
  FromEnv("AUDIT_BENCH_VERIFY_ENTRIES", &flags.verify_entries);
  FromEnv("AUDIT_BENCH_APPEND_MIN_TIME", &flags.append_min_time);
  FromEnv("AUDIT_BENCH_VERIFY_RUNS", &flags.verify_runs);
  int kept = 1;
  for (int i = 1; i < *argc; ++i) {
    absl::string_view arg = argv[i];
    auto take = [&](absl::string_view name, auto* out) {
      const std::string prefix = absl::StrCat("--", name, "=");
      if (!absl::StartsWith(arg, prefix)) return false;
      if (!ParseValue(arg.substr(prefix.size()), out)) Die(absl::StrCat("bad ", arg));
      return true;
    };
    if (take("verify_entries", &flags.verify_entries) ||
        take("append_min_time", &flags.append_min_time) ||
        take("verify_runs", &flags.verify_runs)) {
      continue;
    }
    argv[kept++] = argv[i];
  }
  *argc = kept;
}

}  // namespace

int main(int argc, char** argv) {
  ParseFlags(&argc, argv);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;

  const std::vector<int> threads = {1, 2, 8};
  // Every case is timed in wall-clock time, so that all rates (and their ratios) are per second
  // of the same clock. CPU time is the whole process's (RocksDB's flush, compaction and WAL work,
  // the checkpoint thread, any helper thread of VerifyStoredLog), reported next to it.
  benchmark::RegisterBenchmark("Sha256/reused_ctx", BM_Sha256Reused)
      ->MinTime(0.5)
      ->UseRealTime()
      ->MeasureProcessCPUTime();
  benchmark::RegisterBenchmark("Sha256/oneshot", BM_Sha256Oneshot)
      ->MinTime(0.5)
      ->UseRealTime()
      ->MeasureProcessCPUTime();
  benchmark::RegisterBenchmark("Fdatasync/200B", BM_Fdatasync)
      ->MinTime(1.0)
      ->UseRealTime()
      ->MeasureProcessCPUTime();
  for (int t : threads) {
    benchmark::RegisterBenchmark("Append/single", BM_Append)
        ->Setup(SetupAppend)
        ->Teardown(TeardownAppend)
        ->MinTime(flags.append_min_time)
        ->UseRealTime()
        ->MeasureProcessCPUTime()
        ->Threads(t);
  }
  for (int t : threads) {
    benchmark::RegisterBenchmark(absl::StrCat("Append/batch", kBatch).c_str(), BM_AppendMany,
                                 size_t{kBatch})
        ->Setup(SetupAppend)
        ->Teardown(TeardownAppend)
        ->MinTime(flags.append_min_time)
        ->UseRealTime()
        ->MeasureProcessCPUTime()
        ->Threads(t);
  }
  benchmark::RegisterBenchmark(absl::StrCat("Verify/entries:", flags.verify_entries).c_str(),
                               BM_Verify)
      ->Setup(BuildVerifyLog)
      ->Iterations(flags.verify_runs)
      ->UseRealTime()
      ->MeasureProcessCPUTime()
      ->Unit(benchmark::kMillisecond);

  load_before = LoadAverage();
  SummaryReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  PrintSummary(reporter, threads);
  benchmark::Shutdown();
  if (verify_log != nullptr) {
    verify_log->tmp.reset();  // removes the verify log's directory
    delete verify_log;
  }
  return 0;
}
