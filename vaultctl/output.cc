#include "vaultctl/output.h"

#include <unistd.h>

#include <cstdio>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/json.h"

namespace vault::vaultctl {

int ExitCodeFor(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return kExitOk;
    case absl::StatusCode::kNotFound:
      return kExitNotFound;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kUnauthenticated:
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kResourceExhausted:
      return kExitRefused;
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
      return kExitUnavailable;
    default:
      return kExitFailure;
  }
}

int ReportError(const absl::Status& status, bool json) {
  if (json) {
    std::cerr << Json::Object()
                     .Add("error", Json::Object()
                                       .Add("code", absl::StatusCodeToString(status.code()))
                                       .Add("message", status.message()))
                     .ToString()
              << "\n";
  } else {
    std::cerr << "vaultctl: " << status.message() << " [" << absl::StatusCodeToString(status.code())
              << "]\n";
  }
  return ExitCodeFor(status);
}

int ReportConnectError(const absl::Status& status, bool json) {
  int code = ReportError(status, json);
  return absl::IsInvalidArgument(status) ? kExitUsage : code;
}

void Json::Key(absl::string_view key) {
  if (!empty_) body_ += ",";
  empty_ = false;
  if (open_ == '{') absl::StrAppend(&body_, common::JsonQuote(key), ":");
}

Json& Json::Add(absl::string_view key, absl::string_view value) {
  Key(key);
  body_ += common::JsonQuote(value);
  return *this;
}
Json& Json::Add(absl::string_view key, int64_t value) {
  Key(key);
  absl::StrAppend(&body_, value);
  return *this;
}
Json& Json::Add(absl::string_view key, uint64_t value) {
  Key(key);
  absl::StrAppend(&body_, value);
  return *this;
}
Json& Json::Add(absl::string_view key, bool value) {
  Key(key);
  body_ += value ? "true" : "false";
  return *this;
}
Json& Json::Add(absl::string_view key, const Json& value) {
  Key(key);
  body_ += value.ToString();
  return *this;
}
Json& Json::Push(const Json& value) { return Add("", value); }
Json& Json::Push(absl::string_view value) { return Add("", value); }

std::string Json::ToString() const {
  return absl::StrCat(std::string(1, open_), body_, open_ == '{' ? "}" : "]");
}

std::string HumanBytes(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  return u == 0 ? absl::StrCat(bytes, " B") : absl::StrFormat("%.1f %s", v, units[u]);
}

Progress::Progress(std::string label, uint64_t total_bytes, uint64_t total_items)
    : label_(std::move(label)),
      total_bytes_(total_bytes),
      total_items_(total_items),
      enabled_(isatty(STDERR_FILENO) == 1),
      start_(absl::Now()),
      last_draw_(absl::InfinitePast()) {}

Progress::~Progress() { Done(); }

void Progress::Add(uint64_t bytes, uint64_t items) {
  absl::MutexLock lock(&mu_);
  bytes_ += bytes;
  items_ += items;
  if (enabled_ && absl::Now() - last_draw_ > absl::Milliseconds(100)) Draw(false);
}

void Progress::Done() {
  absl::MutexLock lock(&mu_);
  if (done_) return;
  done_ = true;
  if (enabled_) Draw(true);
}

void Progress::Draw(bool final) {
  last_draw_ = absl::Now();
  double secs = absl::ToDoubleSeconds(last_draw_ - start_);
  double rate = secs > 0 ? static_cast<double>(bytes_) / secs : 0;
  double frac = total_bytes_ ? static_cast<double>(bytes_) / static_cast<double>(total_bytes_) : 1;
  int filled = static_cast<int>(frac * 30);
  std::string bar(static_cast<size_t>(std::clamp(filled, 0, 30)), '#');
  bar.resize(30, ' ');
  std::string eta = "-";
  if (rate > 0 && total_bytes_ > bytes_) {
    eta = absl::StrFormat("%.0fs", static_cast<double>(total_bytes_ - bytes_) / rate);
  }
  std::fprintf(stderr, "\r%s [%s] %3.0f%% %llu/%llu objects %s/%s %s/s ETA %s\033[K%s",
               label_.c_str(), bar.c_str(), frac * 100, static_cast<unsigned long long>(items_),
               static_cast<unsigned long long>(total_items_), HumanBytes(bytes_).c_str(),
               HumanBytes(total_bytes_).c_str(), HumanBytes(static_cast<uint64_t>(rate)).c_str(),
               eta.c_str(), final ? "\n" : "");
  std::fflush(stderr);
}

}  // namespace vault::vaultctl
