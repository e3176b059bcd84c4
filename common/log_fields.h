// common/log_fields: log lines about an agent or a transfer carry its id as a field, not only as
// text. vaultd's JSON log format (node/json_log.h) writes the fields of a line as JSON members
// ("agent", "transfer"); the text format shows the message alone, which names the id as before.
//
//   common::LogAgent(spdlog::level::warn, live->id, "agent {}: kill: {}", live->id, s.ToString());
//   common::LogWith(spdlog::level::info, {.agent = id, .transfer = t}, "agent {} departed", id);
//
// The fields travel beside the message in a thread-local slot that the formatter reads while the
// line is formatted: this needs synchronous sinks (vaultd's are; an async logger would format
// on another thread and lose them).
//
// Thread-safety: the functions are thread-safe; each thread has its own slot.
#ifndef VAULT_COMMON_LOG_FIELDS_H_
#define VAULT_COMMON_LOG_FIELDS_H_

#include <string_view>
#include <utility>

#include "spdlog/spdlog.h"

namespace vault::common {

// The structured fields of one log line; empty fields are left out.
struct LogFields {
  std::string_view agent;     // an agent id, a-<hex>
  std::string_view transfer;  // a migration's transfer id (hex)
};

namespace internal {
inline thread_local const LogFields* current_log_fields = nullptr;
}  // namespace internal

// The fields of the line being logged on this thread, or nullptr (for formatters).
inline const LogFields* CurrentLogFields() { return internal::current_log_fields; }

// Sets this thread's fields for its lifetime (restores the previous ones after).
class ScopedLogFields {
 public:
  explicit ScopedLogFields(const LogFields& fields)
      : previous_(std::exchange(internal::current_log_fields, &fields)) {}
  ScopedLogFields(const ScopedLogFields&) = delete;
  ScopedLogFields& operator=(const ScopedLogFields&) = delete;
  ~ScopedLogFields() { internal::current_log_fields = previous_; }

 private:
  const LogFields* const previous_;
};

// Logs one line with `fields`.
template <typename... Args>
void LogWith(spdlog::level::level_enum level, const LogFields& fields,
             spdlog::format_string_t<Args...> format, Args&&... args) {
  if (!spdlog::should_log(level)) return;
  ScopedLogFields scope(fields);
  spdlog::log(level, format, std::forward<Args>(args)...);
}

// Logs one line about agent `agent`.
template <typename... Args>
void LogAgent(spdlog::level::level_enum level, std::string_view agent,
              spdlog::format_string_t<Args...> format, Args&&... args) {
  LogWith(level, LogFields{.agent = agent}, format, std::forward<Args>(args)...);
}

}  // namespace vault::common

#endif  // VAULT_COMMON_LOG_FIELDS_H_
