// vaultctl: output — text or JSON — exit codes, and the terminal progress bar.
//
// Exit codes: 0 ok, 1 failure, 2 usage error, 3 not found, 4 refused (the vault said no:
// invalid, unauthenticated, permission, precondition, exists), 5 unavailable (cannot reach the
// vault, deadline exceeded).
//
// Thread-safety: Json is a value type; Progress is thread-safe.
#ifndef VAULT_VAULTCTL_OUTPUT_H_
#define VAULT_VAULTCTL_OUTPUT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/json.h"

namespace vault::vaultctl {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitNotFound = 3;
inline constexpr int kExitRefused = 4;
inline constexpr int kExitUnavailable = 5;

int ExitCodeFor(const absl::Status& status);

// Prints "vaultctl: <message>" (text) or {"error": {...}} (json) to stderr; returns the exit code.
int ReportError(const absl::Status& status, bool json);
// Like ReportError for a failure to set up a connection: an INVALID_ARGUMENT there is the
// command line's fault (exit 2), not the vault's refusal.
int ReportConnectError(const absl::Status& status, bool json);

// A minimal JSON value builder: objects keep insertion order.
class Json {
 public:
  static Json Object() { return Json('{'); }
  static Json Array() { return Json('['); }
  Json& Add(absl::string_view key, absl::string_view value);
  Json& Add(absl::string_view key, const char* value) { return Add(key, absl::string_view(value)); }
  Json& Add(absl::string_view key, const std::string& value) {
    return Add(key, absl::string_view(value));
  }
  Json& Add(absl::string_view key, int64_t value);
  Json& Add(absl::string_view key, uint64_t value);
  Json& Add(absl::string_view key, int value) { return Add(key, static_cast<int64_t>(value)); }
  Json& Add(absl::string_view key, uint32_t value) {
    return Add(key, static_cast<uint64_t>(value));
  }
  Json& Add(absl::string_view key, bool value);
  Json& Add(absl::string_view key, const Json& value);
  Json& Push(const Json& value);
  Json& Push(absl::string_view value);
  std::string ToString() const;  // compact, one line

  static std::string Quote(absl::string_view s) { return common::JsonQuote(s); }

 private:
  explicit Json(char open) : open_(open) {}
  void Key(absl::string_view key);
  char open_;
  std::string body_;
  bool empty_ = true;
};

// Bytes as "12.3 MiB".
std::string HumanBytes(uint64_t bytes);

// A one-line progress bar on stderr, drawn only when stderr is a terminal.
class Progress {
 public:
  Progress(std::string label, uint64_t total_bytes, uint64_t total_items);
  ~Progress();
  void Add(uint64_t bytes, uint64_t items);
  void Done();

 private:
  void Draw(bool final) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  const std::string label_;
  const uint64_t total_bytes_;
  const uint64_t total_items_;
  const bool enabled_;
  const absl::Time start_;
  absl::Mutex mu_;
  uint64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t items_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time last_draw_ ABSL_GUARDED_BY(mu_);
  bool done_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace vault::vaultctl

#endif  // VAULT_VAULTCTL_OUTPUT_H_
