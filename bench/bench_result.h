// bench/bench_result: the machine-readable line each benchmark prints on stdout for every
// headline figure, beside its own human output. bench/run collects these lines from every
// benchmark and prints them as one table (metric, our figure, the baseline of the same run, the
// ratio, the target, PASS or BELOW).
//
//   BENCH_RESULT {"bench":"audit_bench","metric":"audit.verify","label":"...","issue":3,
//                 "value":893039,"unit":"entries/s","baseline":3771069,
//                 "baseline_name":"raw SHA-256","ratio":0.2368,"target":1000000,
//                 "target_on":"value","better":"higher"}
//
//   vault::bench::Result r;
//   r.bench = "audit_bench";
//   r.metric = "audit.verify";
//   r.label = "whole-log verification, 1,000,000 entries";
//   r.value = rate;  r.unit = "entries/s";
//   r.baseline = sha_rate;  r.baseline_name = "raw SHA-256";
//   r.target = 1e6;  r.better = vault::bench::Better::kHigher;
//   vault::bench::EmitResult(r);
//
// Fields: value or baseline absent (not measured) print as null; ratio is value / baseline unless
// set; target_on says whether the target applies to the value or to the ratio; better says which
// way is better (and so which comparison the target is: >= for higher, <= for lower). note is
// free text (why a figure is missing, under what conditions it was taken). The line is one JSON
// object after the prefix "BENCH_RESULT ", on one line.
//
// Thread-safety: EmitResult writes one line with one call and flushes; it may be called from
// any thread.
#ifndef VAULT_BENCH_BENCH_RESULT_H_
#define VAULT_BENCH_BENCH_RESULT_H_

#include <optional>
#include <string>

namespace vault::bench {

enum class Better { kHigher, kLower };
enum class TargetOn { kValue, kRatio };

struct Result {
  std::string bench;   // the program, e.g. "audit_bench"
  std::string metric;  // a stable id, e.g. "audit.append.batch64.threads8"
  std::string label;   // what the figure is, for the table
  int issue = 0;       // the issue whose target it is (0: none)
  std::optional<double> value;
  std::string unit;
  std::optional<double> baseline;  // in the same unit as value
  std::string baseline_name;
  std::optional<double> ratio;  // default: value / baseline
  std::optional<double> target;
  TargetOn target_on = TargetOn::kValue;
  Better better = Better::kHigher;
  std::string note;
};

// The line, without a trailing newline.
std::string ResultLine(const Result& r);
// Prints ResultLine(r) and a newline on stdout and flushes it.
void EmitResult(const Result& r);

}  // namespace vault::bench

#endif  // VAULT_BENCH_BENCH_RESULT_H_
