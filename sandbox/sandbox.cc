#include "sandbox/sandbox.h"

#include <string.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace vault::sandbox {

absl::Status ValidateLimits(const Limits& limits) {
  auto check = [](const char* field, uint64_t value, uint64_t low, uint64_t high) -> absl::Status {
    if (value < low || value > high) {
      return absl::InvalidArgumentError(
          absl::StrFormat("limit %s = %d is outside [%d, %d]", field, value, low, high));
    }
    return absl::OkStatus();
  };
  constexpr uint64_t kMiB = 1ull << 20;
  constexpr uint64_t kTiB = 1ull << 40;
  absl::Status status = check("memory_bytes", limits.memory_bytes, 4 * kMiB, kTiB);
  if (status.ok()) status = check("cpu_seconds", limits.cpu_seconds, 1, 30ull * 24 * 3600);
  if (status.ok()) status = check("cpu_percent", limits.cpu_percent, 1, 100 * 1024);
  if (status.ok()) status = check("max_processes", limits.max_processes, 2, 1 << 20);
  if (status.ok()) status = check("max_open_files", limits.max_open_files, 16, 1 << 20);
  if (status.ok()) status = check("max_file_bytes", limits.max_file_bytes, 1, kTiB);
  if (status.ok()) status = check("storage_bytes", limits.storage_bytes, 64 * 1024, kTiB);
  if (status.ok()) status = check("storage_inodes", limits.storage_inodes, 16, 1ull << 32);
  if (status.ok() &&
      (limits.wall_time <= absl::ZeroDuration() || limits.wall_time > absl::Hours(24 * 365))) {
    status = absl::InvalidArgumentError(absl::StrCat(
        "limit wall_time = ", absl::FormatDuration(limits.wall_time), " is outside (0, 365d]"));
  }
  return status;
}

const char* CodeKindName(CodeObject::Kind kind) {
  switch (kind) {
    case CodeObject::Kind::kNative:
      return "native";
    case CodeObject::Kind::kPython:
      return "python";
  }
  return "unknown";
}

const char* LimitHitName(LimitHit limit) {
  switch (limit) {
    case LimitHit::kNone:
      return "none";
    case LimitHit::kMemory:
      return "memory";
    case LimitHit::kCpuTime:
      return "cpu-time";
    case LimitHit::kWallTime:
      return "wall-time";
    case LimitHit::kFileSize:
      return "file-size";
  }
  return "unknown";
}

std::string DescribeExit(const ExitInfo& exit) {
  std::string text = exit.exited ? absl::StrCat("exited with code ", exit.exit_code)
                                 : absl::StrCat("killed by signal ", exit.signal, " (",
                                                sigabbrev_np(exit.signal) != nullptr
                                                    ? absl::StrCat("SIG", sigabbrev_np(exit.signal))
                                                    : "?",
                                                ")");
  if (exit.limit != LimitHit::kNone)
    absl::StrAppend(&text, ", ", LimitHitName(exit.limit), " limit");
  if (exit.killed) absl::StrAppend(&text, ", killed on request");
  return text;
}

absl::Status Sandbox::SetArguments(const std::vector<std::string>& args,
                                   const std::vector<std::string>& env, SandboxSpec* spec) const {
  if (!args.empty() && spec->argv.empty()) spec->argv.push_back(spec->program);
  spec->argv.insert(spec->argv.end(), args.begin(), args.end());
  spec->env.insert(spec->env.end(), env.begin(), env.end());
  return absl::OkStatus();
}

}  // namespace vault::sandbox
