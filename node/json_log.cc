#include "node/json_log.h"

#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/json.h"
#include "common/log_fields.h"

namespace vault::node {
namespace {

absl::string_view LevelName(spdlog::level::level_enum level) {
  switch (level) {
    case spdlog::level::trace:
      return "trace";
    case spdlog::level::debug:
      return "debug";
    case spdlog::level::info:
      return "info";
    case spdlog::level::warn:
      return "warn";
    case spdlog::level::err:
      return "error";
    case spdlog::level::critical:
      return "critical";
    default:
      return "off";
  }
}

class JsonLogFormatter : public spdlog::formatter {
 public:
  explicit JsonLogFormatter(std::string vault_name) : vault_name_(std::move(vault_name)) {}

  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    std::string line;
    line.reserve(msg.payload.size() + 128);
    absl::StrAppend(
        &line, "{\"time\":\"",
        absl::FormatTime("%Y-%m-%dT%H:%M:%E6SZ", absl::FromChrono(msg.time), absl::UTCTimeZone()),
        "\",\"level\":\"", LevelName(msg.level), "\",\"vault\":");
    common::AppendJsonString(vault_name_, &line);
    line.append(",\"message\":");
    common::AppendJsonString(absl::string_view(msg.payload.data(), msg.payload.size()), &line);
    if (const common::LogFields* fields = common::CurrentLogFields(); fields != nullptr) {
      if (!fields->agent.empty()) {
        line.append(",\"agent\":");
        common::AppendJsonString(absl::string_view(fields->agent.data(), fields->agent.size()),
                                 &line);
      }
      if (!fields->transfer.empty()) {
        line.append(",\"transfer\":");
        common::AppendJsonString(
            absl::string_view(fields->transfer.data(), fields->transfer.size()), &line);
      }
    }
    line.append("}\n");
    dest.append(line.data(), line.data() + line.size());
  }

  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<JsonLogFormatter>(vault_name_);
  }

 private:
  const std::string vault_name_;
};

}  // namespace

std::unique_ptr<spdlog::formatter> NewJsonLogFormatter(std::string vault_name) {
  return std::make_unique<JsonLogFormatter>(std::move(vault_name));
}

}  // namespace vault::node
