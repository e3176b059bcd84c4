// The cgroup filesystem (internal/cgroupfs.h): controller names, control files, and the parsers
// of /proc/self/mountinfo and /proc/self/cgroup.
#include "sandbox/posix/internal/cgroupfs.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/file_util.h"
#include "common/status_macros.h"
#include "common/unique_fd.h"

namespace vault::sandbox {
namespace {

using common::PosixError;
using common::UniqueFd;

bool IsKnownController(absl::string_view name) {
  for (CgroupController c : kAllControllers) {
    if (name == ControllerName(c)) return true;
  }
  return false;
}

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string UnescapeMountField(absl::string_view field) {
  std::string out;
  for (size_t i = 0; i < field.size(); ++i) {
    if (field[i] == '\\' && i + 3 < field.size() && field[i + 1] >= '0' && field[i + 1] <= '3' &&
        field[i + 2] >= '0' && field[i + 2] <= '7' && field[i + 3] >= '0' && field[i + 3] <= '7') {
      out.push_back(static_cast<char>((field[i + 1] - '0') * 64 + (field[i + 2] - '0') * 8 +
                                      (field[i + 3] - '0')));
      i += 3;
    } else {
      out.push_back(field[i]);
    }
  }
  return out;
}

}  // namespace

const char* ControllerName(CgroupController controller) {
  switch (controller) {
    case CgroupController::kMemory:
      return "memory";
    case CgroupController::kPids:
      return "pids";
    case CgroupController::kCpu:
      return "cpu";
    case CgroupController::kCpuAcct:
      return "cpuacct";
    case CgroupController::kFreezer:
      return "freezer";
  }
  return "unknown";
}

int WriteControlErrno(const std::string& path, absl::string_view value) {
  UniqueFd fd(open(path.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC));
  if (fd.get() < 0) return errno;
  ssize_t n;
  do {
    n = write(fd.get(), value.data(), value.size());
  } while (n < 0 && errno == EINTR);
  if (n < 0) return errno;
  if (static_cast<size_t>(n) != value.size()) return EIO;
  return 0;
}

absl::Status WriteControl(const std::string& path, absl::string_view value) {
  int err = WriteControlErrno(path, value);
  if (err != 0) return PosixError(err, absl::StrCat("write \"", value, "\" to ", path));
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> ParseU64(const std::string& path, absl::string_view text) {
  uint64_t value = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &value)) {
    return absl::InternalError(
        absl::StrCat("unexpected content \"", absl::StripAsciiWhitespace(text), "\" in ", path));
  }
  return value;
}

absl::StatusOr<uint64_t> ReadU64(const std::string& path) {
  VAULT_ASSIGN_OR_RETURN(std::string text, common::ReadFile(path));
  return ParseU64(path, text);
}

absl::StatusOr<uint64_t> ReadKeyedU64(const std::string& path, absl::string_view key) {
  VAULT_ASSIGN_OR_RETURN(std::string text, common::ReadFile(path));
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(line, ' ');
    if (kv.first == key) return ParseU64(path, kv.second);
  }
  return absl::NotFoundError(absl::StrCat("no \"", key, "\" line in ", path));
}

absl::StatusOr<uint64_t> ReadOptionalU64(const std::string& path, uint64_t fallback) {
  if (!common::PathExists(path)) return fallback;
  return ReadU64(path);
}

absl::StatusOr<std::vector<pid_t>> ReadProcs(const std::string& dir) {
  std::string path = absl::StrCat(dir, "/cgroup.procs");
  VAULT_ASSIGN_OR_RETURN(std::string text, common::ReadFile(path));
  std::vector<pid_t> pids;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    pid_t pid = 0;
    if (!absl::SimpleAtoi(line, &pid) || pid <= 0) {
      return absl::InternalError(absl::StrCat("unexpected line \"", line, "\" in ", path));
    }
    pids.push_back(pid);
  }
  return pids;
}

absl::Status MakeDirectory(const std::string& path) {
  if (mkdir(path.c_str(), 0755) == 0) return absl::OkStatus();
  int err = errno;
  struct stat st;
  if (err == EEXIST && stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    // An existing folder is only usable if we may create sandbox cgroups in it.
    if (access(path.c_str(), W_OK | X_OK) != 0) {
      return PosixError(errno, absl::StrCat("cannot create cgroups in ", path));
    }
    return absl::OkStatus();
  }
  return PosixError(err, absl::StrCat("mkdir ", path));
}

absl::StatusOr<std::vector<CgroupMount>> ParseMountInfo(const std::string& path,
                                                        absl::string_view text) {
  std::vector<CgroupMount> mounts;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    std::vector<absl::string_view> fields = absl::StrSplit(line, ' ', absl::SkipEmpty());
    auto dash = std::find(fields.begin(), fields.end(), "-");
    if (fields.size() < 6 || dash - fields.begin() < 6 || fields.end() - dash < 4) {
      return absl::InvalidArgumentError(absl::StrCat("malformed line in ", path, ": ", line));
    }
    absl::string_view fstype = dash[1];
    CgroupMount mount;
    if (fstype == "cgroup") {
      mount.version = 1;
      for (absl::string_view option : absl::StrSplit(dash[3], ',')) {
        if (IsKnownController(option)) mount.controllers.emplace_back(option);
      }
      if (mount.controllers.empty()) continue;  // name=systemd, cpuset, devices, ...
    } else if (fstype == "cgroup2") {
      mount.version = 2;
    } else {
      continue;
    }
    mount.root = UnescapeMountField(fields[3]);
    mount.mountpoint = UnescapeMountField(fields[4]);
    mounts.push_back(std::move(mount));
  }
  return mounts;
}

absl::StatusOr<ProcCgroups> ParseProcCgroup(const std::string& path, absl::string_view text) {
  ProcCgroups result;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    size_t first = line.find(':');
    size_t second = first == absl::string_view::npos ? first : line.find(':', first + 1);
    if (second == absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat("malformed line in ", path, ": ", line));
    }
    absl::string_view id = line.substr(0, first);
    absl::string_view controllers = line.substr(first + 1, second - first - 1);
    std::string cgroup_path(line.substr(second + 1));
    if (id == "0" && controllers.empty()) {
      result.v2 = cgroup_path;
      continue;
    }
    for (absl::string_view controller : absl::StrSplit(controllers, ',', absl::SkipEmpty())) {
      result.v1.emplace_back(std::string(controller), cgroup_path);
    }
  }
  return result;
}

std::optional<std::string> DirUnderMount(const CgroupMount& mount, const std::string& cgroup_path) {
  // (The mount's own root: its mountpoint. Returned here rather than through `relative = "/"`,
  // which GCC 12 with -fsanitize=address warns about, wrongly, as an overlapping copy.)
  if (mount.root != "/" && cgroup_path == mount.root) return mount.mountpoint;
  std::string relative;
  if (mount.root == "/") {
    relative = cgroup_path;
  } else if (absl::StartsWith(cgroup_path, absl::StrCat(mount.root, "/"))) {
    relative = cgroup_path.substr(mount.root.size());
  } else {
    return std::nullopt;
  }
  if (relative == "/") return mount.mountpoint;
  return absl::StrCat(absl::StripSuffix(mount.mountpoint, "/"), relative);
}

}  // namespace vault::sandbox
