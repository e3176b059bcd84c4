#include "bench/bench_result.h"

#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/json.h"

namespace vault::bench {
namespace {

std::string Quote(const std::string& s) { return common::JsonQuote(s); }

// JSON has no NaN or infinity: those are null too.
std::string Number(const std::optional<double>& v) {
  if (!v.has_value() || !std::isfinite(*v)) return "null";
  return absl::StrFormat("%.6g", *v);
}

}  // namespace

std::string ResultLine(const Result& r) {
  std::optional<double> ratio = r.ratio;
  if (!ratio.has_value() && r.value.has_value() && r.baseline.has_value() && *r.baseline != 0) {
    ratio = *r.value / *r.baseline;
  }
  std::string line = absl::StrCat(
      "BENCH_RESULT {\"bench\":", Quote(r.bench), ",\"metric\":", Quote(r.metric),
      ",\"label\":", Quote(r.label), ",\"issue\":", r.issue, ",\"value\":", Number(r.value),
      ",\"unit\":", Quote(r.unit), ",\"baseline\":", Number(r.baseline),
      ",\"baseline_name\":", Quote(r.baseline_name), ",\"ratio\":", Number(ratio),
      ",\"target\":", Number(r.target),
      ",\"target_on\":", Quote(r.target_on == TargetOn::kRatio ? "ratio" : "value"),
      ",\"better\":", Quote(r.better == Better::kLower ? "lower" : "higher"));
  if (!r.note.empty()) absl::StrAppend(&line, ",\"note\":", Quote(r.note));
  line += "}";
  return line;
}

void EmitResult(const Result& r) {
  const std::string line = ResultLine(r) + "\n";
  std::fwrite(line.data(), 1, line.size(), stdout);
  std::fflush(stdout);
}

}  // namespace vault::bench
