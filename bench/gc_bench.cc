// gc_bench: the CAS lifecycle's figures (issue 28), on the store vaultd runs (cas::Store over a
// synced RocksDB and pack files), in one process:
//
//   gc_bench [--objects=1000000] [--live_percent=10] [--pack_mib=256] [--dir=DIR]
//
// 1. Collection of a store of --objects small objects (100-300 bytes) of which --live_percent
//    are held by a root source, the rest older than the grace period: the time of the run
//    (target: under 10 s for 1,000,000), against a read-only walk of every object record of the
//    same store (the least any collection must do).
// 2. Compaction: --pack_mib of 64 KiB objects in pack files, 60% removed; the live bytes copied
//    per second, against `cp` of a file of as many bytes followed by `sync` of it, in the same
//    run.
// 3. Puts during compaction: 4 KiB objects stored in batches of 64 for 3 s by one thread, alone
//    and while a compaction of the same size runs (measured for as long as it runs): the ratio.
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/bench_result.h"
#include "bench/bench_util.h"
#include "cas/collector.h"
#include "cas/pins.h"
#include "cas/store.h"
#include "storage/database.h"

namespace vault::bench {
namespace {

struct Flags {
  uint64_t objects = 1000000;
  uint64_t live_percent = 10;
  uint64_t pack_mib = 256;
  std::string dir;
};

Flags ParseFlags(int argc, char** argv) {
  Flags f;
  const char* tmp = std::getenv("BENCH_TMPDIR");
  if (tmp == nullptr) tmp = std::getenv("TMPDIR");
  f.dir = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/gc_bench-", getpid());
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const char* name) -> const char* {
      const std::string prefix = absl::StrCat("--", name, "=");
      return a.rfind(prefix, 0) == 0 ? argv[i] + prefix.size() : nullptr;
    };
    if (const char* v = value("objects"); v != nullptr && absl::SimpleAtoi(v, &f.objects)) continue;
    if (const char* v = value("live_percent");
        v != nullptr && absl::SimpleAtoi(v, &f.live_percent)) {
      continue;
    }
    if (const char* v = value("pack_mib"); v != nullptr && absl::SimpleAtoi(v, &f.pack_mib)) {
      continue;
    }
    if (const char* v = value("dir"); v != nullptr) {
      f.dir = v;
      continue;
    }
    Die(absl::StrCat("unknown flag ", a, " (--objects=N --live_percent=P --pack_mib=M --dir=DIR)"));
  }
  return f;
}

struct Vault {
  std::unique_ptr<storage::Database> db;
  std::unique_ptr<cas::Store> store;
  std::unique_ptr<cas::Pins> pins;
};

Vault Open(const std::string& dir) {
  std::filesystem::create_directories(dir);
  std::vector<storage::ColumnFamilySpec> cfs = cas::Store::ColumnFamilies();
  for (const storage::ColumnFamilySpec& cf : cas::Pins::ColumnFamilies()) cfs.push_back(cf);
  absl::StatusOr<std::unique_ptr<storage::Database>> db =
      storage::Database::Open({.path = dir + "/db", .sync_writes = true}, cfs);
  if (!db.ok()) Die(db.status().ToString());
  Vault v;
  v.db = *std::move(db);
  absl::StatusOr<std::unique_ptr<cas::Store>> store =
      cas::Store::Open(v.db.get(), {.pack_dir = dir + "/packs", .confirm_after = absl::Hours(1)});
  if (!store.ok()) Die(store.status().ToString());
  v.store = *std::move(store);
  absl::StatusOr<std::unique_ptr<cas::Pins>> pins = cas::Pins::Open(v.db.get(), v.store.get());
  if (!pins.ok()) Die(pins.status().ToString());
  v.pins = *std::move(pins);
  return v;
}

std::string Random(std::mt19937_64& rng, size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; i += 8) {
    uint64_t v = rng();
    for (size_t b = 0; b < 8 && i + b < n; ++b) s[i + b] = static_cast<char>(v >> (8 * b));
  }
  return s;
}

// Stores `count` objects of `min`..`max` bytes in batches; returns their digests.
std::vector<cas::Digest> Fill(cas::Store& store, std::mt19937_64& rng, uint64_t count, size_t min,
                              size_t max) {
  std::vector<cas::Digest> out;
  out.reserve(count);
  constexpr size_t kBatch = 2000;
  std::vector<std::string> data;
  std::vector<cas::PutItem> items;
  for (uint64_t done = 0; done < count;) {
    data.clear();
    items.clear();
    for (size_t i = 0; i < kBatch && done + i < count; ++i) {
      data.push_back(Random(rng, min + rng() % (max - min + 1)));
    }
    for (const std::string& d : data) items.push_back({cas::Digest::Of(d), d});
    for (const absl::StatusOr<cas::PutOutcome>& r : store.PutMany(items)) {
      if (!r.ok()) Die(r.status().ToString());
    }
    for (const cas::PutItem& i : items) out.push_back(i.digest);
    done += items.size();
  }
  return out;
}

void CollectionFigure(const Flags& f) {
  const std::string dir = f.dir + "/collect";
  Vault v = Open(dir);
  std::mt19937_64 rng(1);
  std::cerr << "gc_bench: storing " << f.objects << " objects...\n";
  const absl::Time fill_start = absl::Now();
  std::vector<cas::Digest> all = Fill(*v.store, rng, f.objects, 100, 300);
  std::cerr << "gc_bench: stored in " << absl::FormatDuration(absl::Now() - fill_start) << "\n";
  std::vector<cas::Digest> live;
  for (size_t i = 0; i < all.size(); ++i) {
    if (i % 100 < f.live_percent) live.push_back(all[i]);
  }
  absl::SleepFor(absl::Milliseconds(20));  // every object older than the grace period below
  // Baseline: a walk of every object record.
  const absl::Time walk_start = absl::Now();
  uint64_t walked = 0;
  if (absl::Status s = v.store->ForEachObjectPage(4096,
                                                  [&](std::vector<cas::ObjectInfo>& page) {
                                                    walked += page.size();
                                                    return absl::OkStatus();
                                                  });
      !s.ok()) {
    Die(s.ToString());
  }
  const double walk_s = absl::ToDoubleSeconds(absl::Now() - walk_start);
  cas::Collector gc(v.store.get(), v.pins.get(),
                    {{.name = "agent", .list = [&](cas::RootSink& sink) {
                        for (const cas::Digest& d : live) sink.Hold(d, "agent");
                        return absl::OkStatus();
                      }}});
  absl::StatusOr<cas::CollectReport> r = gc.Run({.grace = absl::Milliseconds(10)});
  if (!r.ok()) Die(r.status().ToString());
  const double gc_s = absl::ToDoubleSeconds(r->took);
  std::cout << absl::StrFormat(
      "collection: %d objects, %d held, %d removed in %.2f s (walk of the records: %d in %.2f "
      "s)\n",
      r->objects, r->held, r->removed, gc_s, walked, walk_s);
  if (r->removed + r->held != f.objects || r->held != live.size()) {
    Die(absl::StrCat("the collection removed ", r->removed, " and kept ", r->held, " of ",
                     f.objects, "; expected to keep ", live.size()));
  }
  EmitResult({.bench = "gc_bench",
              .metric = "gc.collect",
              .label = absl::StrFormat("collection of %d small objects, %d%% held", f.objects,
                                       f.live_percent),
              .issue = 28,
              .value = gc_s,
              .unit = "s",
              .baseline = walk_s,
              .baseline_name = "walk of the object records",
              .target = 10.0,
              .better = Better::kLower});
}

uint64_t DirBytes(const std::string& dir) {
  uint64_t total = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) total += e.file_size();
  return total;
}

// A store of --pack_mib of 64 KiB objects in pack files, 60% removed; returns it.
Vault SparsePacks(const Flags& f, const std::string& dir, uint64_t seed) {
  Vault v = Open(dir);
  std::mt19937_64 rng(seed);
  const uint64_t count = f.pack_mib * 16;
  std::vector<cas::Digest> all = Fill(*v.store, rng, count, 64 << 10, 64 << 10);
  std::vector<cas::Digest> gone;
  for (size_t i = 0; i < all.size(); ++i) {
    if (i % 10 < 6) gone.push_back(all[i]);
  }
  for (const absl::StatusOr<cas::RemoveOutcome>& r : v.store->RemoveMany(gone)) {
    if (!r.ok()) Die(r.status().ToString());
  }
  // A new pack file for what follows: the filled one is not the one being appended to.
  v.pins.reset();
  v.store.reset();
  v.db.reset();
  return Open(dir);
}

void CompactionFigure(const Flags& f) {
  const std::string dir = f.dir + "/compact";
  Vault v = SparsePacks(f, dir, 2);
  const uint64_t before = DirBytes(dir + "/packs");
  const absl::Time start = absl::Now();
  absl::StatusOr<cas::CompactReport> r =
      v.store->Compact({.max_live_fraction = 0.5, .retire_delay = absl::ZeroDuration()});
  if (!r.ok()) Die(r.status().ToString());
  const double took = absl::ToDoubleSeconds(absl::Now() - start);
  const double rate = static_cast<double>(r->copied_bytes) / took / 1e6;
  // Baseline: cp of a file of the copied bytes, then sync of the copy.
  const std::string src = f.dir + "/cp-src", dst = f.dir + "/cp-dst";
  {
    std::mt19937_64 rng(3);
    WriteAll(src, Random(rng, r->copied_bytes));
  }
  MustRun({"/usr/bin/sync", src});
  const absl::Time cp_start = absl::Now();
  MustRun({"/bin/cp", src, dst});
  MustRun({"/usr/bin/sync", "-d", dst});
  const double cp_s = absl::ToDoubleSeconds(absl::Now() - cp_start);
  const double cp_rate = static_cast<double>(r->copied_bytes) / cp_s / 1e6;
  std::cout << absl::StrFormat(
      "compaction: %d files, %d rewritten, %.1f MB copied in %.2f s (%.0f MB/s, the whole run); "
      "packs %.1f -> %.1f MB; cp + sync of as many bytes: %.2f s (%.0f MB/s)\n",
      r->files, r->rewritten, r->copied_bytes / 1e6, took, rate, before / 1e6,
      DirBytes(dir + "/packs") / 1e6, cp_s, cp_rate);
  EmitResult({.bench = "gc_bench",
              .metric = "gc.compact",
              .label = absl::StrFormat("compaction of %d MiB of pack files, 40%% live", f.pack_mib),
              .issue = 28,
              .value = rate,
              .unit = "MB/s",
              .baseline = cp_rate,
              .baseline_name = "cp + sync of the live bytes"});
}

// Puts of 4 KiB objects, 64 per batch, for `seconds` or until `stop` says so: objects per
// second.
double PutRate(cas::Store& store, double seconds, uint64_t seed,
               const std::function<bool()>& stop = nullptr) {
  std::mt19937_64 rng(seed);
  uint64_t n = 0;
  const absl::Time end = absl::Now() + absl::Seconds(seconds);
  const absl::Time start = absl::Now();
  while (absl::Now() < end && !(stop && stop())) {
    std::vector<std::string> data;
    std::vector<cas::PutItem> items;
    for (int i = 0; i < 64; ++i) data.push_back(Random(rng, 4096));
    for (const std::string& d : data) items.push_back({cas::Digest::Of(d), d});
    for (const absl::StatusOr<cas::PutOutcome>& r : store.PutMany(items)) {
      if (!r.ok()) Die(r.status().ToString());
    }
    n += items.size();
  }
  return static_cast<double>(n) / absl::ToDoubleSeconds(absl::Now() - start);
}

void PutsDuringCompactionFigure(const Flags& f) {
  const std::string dir = f.dir + "/puts";
  Vault v = SparsePacks(f, dir, 4);
  const double alone = PutRate(*v.store, 3, 5);
  std::atomic<bool> compacting{true};
  absl::Status compacted;
  std::thread t([&] {
    compacted =
        v.store->Compact({.max_live_fraction = 0.5, .retire_delay = absl::ZeroDuration()}).status();
    compacting = false;
  });
  // Measured while the compaction runs (and at most 30 s).
  const absl::Time from = absl::Now();
  const double during = PutRate(*v.store, 30, 6, [&] { return !compacting.load(); });
  const double overlap_s = absl::ToDoubleSeconds(absl::Now() - from);
  const bool overlapped = overlap_s >= 0.5;
  t.join();
  if (!compacted.ok()) Die(compacted.ToString());
  std::cout << absl::StrFormat(
      "puts of 4 KiB objects: %.0f/s alone, %.0f/s during the %.2f s the compaction ran\n", alone,
      during, overlap_s);
  EmitResult({.bench = "gc_bench",
              .metric = "gc.puts_during_compaction",
              .label = "4 KiB puts (batches of 64) while compaction runs",
              .issue = 28,
              .value = during,
              .unit = "objects/s",
              .baseline = alone,
              .baseline_name = "the same puts alone",
              .note = overlapped ? "" : "the compaction ran less than 0.5 s"});
}

}  // namespace
}  // namespace vault::bench

int main(int argc, char** argv) {
  using namespace vault::bench;
  Flags f = ParseFlags(argc, argv);
  std::filesystem::create_directories(f.dir);
  CollectionFigure(f);
  CompactionFigure(f);
  PutsDuringCompactionFigure(f);
  std::filesystem::remove_all(f.dir);
  return 0;
}
