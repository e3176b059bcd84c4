#include "sandbox/posix/cgroup.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/file_util.h"
#include "common/status_macros.h"
#include "common/unique_fd.h"
#include "spdlog/spdlog.h"

namespace vault::sandbox {
namespace {

using common::PosixError;

constexpr int kNumControllers = 5;
constexpr std::array<CgroupController, kNumControllers> kAllControllers = {
    CgroupController::kMemory, CgroupController::kPids, CgroupController::kCpu,
    CgroupController::kCpuAcct, CgroupController::kFreezer};

constexpr absl::Duration kFreezeTimeout = absl::Seconds(2);
// The first attempt to freeze a v1 group before it is undone and made again (see SetFrozen).
constexpr absl::Duration kFreezeAttempt = absl::Milliseconds(10);
constexpr absl::Duration kKillTimeout = absl::Seconds(5);
constexpr absl::Duration kRemoveTimeout = absl::Seconds(2);
constexpr absl::Duration kPollInterval = absl::Milliseconds(2);
constexpr absl::Duration kRemovePollInterval = absl::Milliseconds(10);
constexpr uint64_t kCpuPeriodUs = 100000;
constexpr size_t kMaxNameLength = 64;

int Index(CgroupController controller) { return static_cast<int>(controller); }

// The v1 subsystem name; on v2 the same name for memory, pids and cpu.
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

bool IsKnownController(absl::string_view name) {
  for (CgroupController c : kAllControllers) {
    if (name == ControllerName(c)) return true;
  }
  return false;
}

// [A-Za-z0-9._-]{1,64}, and not "." or "..", which would name this or the parent directory.
bool IsValidName(absl::string_view name) {
  if (name.empty() || name.size() > kMaxNameLength || name == "." || name == "..") return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
  });
}

using common::UniqueFd;

// Writes `value` to a cgroup control file in one write(), as the kernel expects. Returns 0 or
// the errno, for callers that react to a specific one (EBUSY); WriteControl converts it.
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

// The value of the "<key> <number>" line of a flat-keyed file (memory.events, cpu.stat, ...).
absl::StatusOr<uint64_t> ReadKeyedU64(const std::string& path, absl::string_view key) {
  VAULT_ASSIGN_OR_RETURN(std::string text, common::ReadFile(path));
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(line, ' ');
    if (kv.first == key) return ParseU64(path, kv.second);
  }
  return absl::NotFoundError(absl::StrCat("no \"", key, "\" line in ", path));
}

// Reads an optional file: `fallback` when it does not exist (older kernels lack memory.peak).
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

// mkdir that accepts an existing directory.
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

// ---- Parsing /proc/self/mountinfo and /proc/self/cgroup ----

struct CgroupMount {
  int version = 0;   // 1 or 2
  std::string root;  // the cgroup mounted there ("/" normally)
  std::string mountpoint;
  std::vector<std::string> controllers;  // v1: the known controllers in the super options
};

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

// "36 25 0:32 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:14 - cgroup cgroup rw,cpu,cpuacct"
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

struct ProcCgroups {
  std::vector<std::pair<std::string, std::string>> v1;  // controller -> path
  std::optional<std::string> v2;                        // the "0::" line's path

  std::optional<std::string> V1PathOf(absl::string_view controller) const {
    for (const auto& [name, path] : v1) {
      if (name == controller) return path;
    }
    return std::nullopt;
  }
};

// "4:cpu,cpuacct:/user.slice" for v1 hierarchies, "0::/user.slice/x.service" for v2.
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

// The directory of `cgroup_path` under a mount of the cgroup `root`, or nullopt when the path
// lies outside what is mounted there.
std::optional<std::string> DirUnderMount(const CgroupMount& mount, const std::string& cgroup_path) {
  std::string relative;
  if (mount.root == "/") {
    relative = cgroup_path;
  } else if (cgroup_path == mount.root) {
    relative = "/";
  } else if (absl::StartsWith(cgroup_path, absl::StrCat(mount.root, "/"))) {
    relative = cgroup_path.substr(mount.root.size());
  } else {
    return std::nullopt;
  }
  if (relative == "/") return mount.mountpoint;
  return absl::StrCat(absl::StripSuffix(mount.mountpoint, "/"), relative);
}

// ---- Detection ----

// One hierarchy this process could create sandboxes in.
struct Hierarchy {
  int version = 0;
  std::string root;  // the cgroup mounted at mountpoint
  std::string mountpoint;
  std::string own;   // this process's cgroup directory
  std::string base;  // own + "/" + folder
  std::vector<std::string> v1_controllers;
  absl::Status usable;                            // why it cannot be used at all, if so
  std::optional<absl::Status> folder_status;      // memoized creation of `base`
  std::set<std::string, std::less<>> v2_offered;  // own/cgroup.controllers
  absl::Status v2_offered_status;                 // reading it failed
};

class Detector {
 public:
  Detector(const CgroupManager::Options& options, std::vector<Hierarchy> hierarchies)
      : options_(options), hierarchies_(std::move(hierarchies)) {}

  std::vector<Hierarchy>& hierarchies() { return hierarchies_; }

  // Index of the hierarchy `controller` is placed in, or -1 with `reason` set.
  int Place(CgroupController controller, std::string* reason) {
    std::vector<int> candidates;
    int v1 = -1;
    int v2 = -1;
    for (size_t i = 0; i < hierarchies_.size(); ++i) {
      const Hierarchy& h = hierarchies_[i];
      if (h.version == 1 && v1 < 0 &&
          std::count(h.v1_controllers.begin(), h.v1_controllers.end(), ControllerName(controller)) >
              0) {
        v1 = static_cast<int>(i);
      }
      if (h.version == 2 && v2 < 0) v2 = static_cast<int>(i);
    }
    if (controller == CgroupController::kFreezer && options_.prefer_v2_freezer) {
      candidates = {v2, v1};
    } else {
      candidates = {v1, v2};
    }
    std::vector<std::string> reasons;
    for (int candidate : candidates) {
      if (candidate < 0) continue;
      absl::Status s = TryPlace(hierarchies_[candidate], controller);
      if (s.ok()) return candidate;
      reasons.push_back(absl::StrCat("v", hierarchies_[candidate].version, ": ", s.message()));
    }
    if (v1 < 0 && v2 < 0) {
      *reason = "no cgroup v1 hierarchy carries it and no cgroup v2 hierarchy is mounted";
    } else if (v1 < 0 && reasons.size() == 1) {
      *reason = absl::StrCat("no cgroup v1 hierarchy carries it; ", reasons[0]);
    } else {
      *reason = absl::StrJoin(reasons, "; ");
    }
    return -1;
  }

 private:
  absl::Status EnsureFolder(Hierarchy& h) {
    if (!h.folder_status.has_value()) h.folder_status = MakeDirectory(h.base);
    return *h.folder_status;
  }

  absl::Status TryPlace(Hierarchy& h, CgroupController controller) {
    VAULT_RETURN_IF_ERROR(h.usable);
    if (h.version == 2) {
      // The v2 freezer, cgroup.kill and the cpu.stat usage are core files, present in every
      // non-root cgroup of a recent enough kernel; memory, pids and cpu must be offered.
      switch (controller) {
        case CgroupController::kFreezer:
        case CgroupController::kCpuAcct:
          break;
        default:
          VAULT_RETURN_IF_ERROR(h.v2_offered_status);
          if (h.v2_offered.count(ControllerName(controller)) == 0) {
            return absl::NotFoundError(absl::StrCat(h.own, "/cgroup.controllers does not list \"",
                                                    ControllerName(controller), "\""));
          }
      }
    }
    VAULT_RETURN_IF_ERROR(EnsureFolder(h));
    if (h.version == 1) return absl::OkStatus();
    switch (controller) {
      case CgroupController::kFreezer:
        return RequireFile(absl::StrCat(h.base, "/cgroup.freeze"), "Linux 5.2");
      case CgroupController::kCpuAcct:
        return RequireFile(absl::StrCat(h.base, "/cpu.stat"), "Linux 4.15");
      default:
        return EnableV2(h, ControllerName(controller));
    }
  }

  static absl::Status RequireFile(const std::string& path, absl::string_view kernel) {
    if (common::PathExists(path)) return absl::OkStatus();
    return absl::NotFoundError(absl::StrCat(path, " does not exist (needs ", kernel, ")"));
  }

  // Enables `controller` for the children of own and of base (their cgroup.subtree_control).
  absl::Status EnableV2(Hierarchy& h, absl::string_view controller) {
    VAULT_RETURN_IF_ERROR(EnableIn(h, h.own, controller, /*may_move_self=*/true));
    return EnableIn(h, h.base, controller, /*may_move_self=*/false);
  }

  absl::Status EnableIn(Hierarchy& h, const std::string& dir, absl::string_view controller,
                        bool may_move_self) {
    std::string path = absl::StrCat(dir, "/cgroup.subtree_control");
    VAULT_ASSIGN_OR_RETURN(std::string enabled, common::ReadFile(path));
    for (absl::string_view name : absl::StrSplit(enabled, absl::ByAnyChar(" \n"))) {
      if (name == controller) return absl::OkStatus();
    }
    std::string value = absl::StrCat("+", controller);
    int err = WriteControlErrno(path, value);
    if (err == EBUSY && may_move_self) {
      // The no-internal-process rule: a non-root v2 cgroup that holds processes cannot enable
      // controllers for its children. This process sits in its own cgroup, so it moves itself
      // into the leaf "<own>/<folder>-main" and retries. (Detect recognizes that leaf next time
      // and keeps using its parent.) Other processes in the same cgroup cannot be moved by us;
      // then the retry fails with EBUSY too and the controller is reported missing.
      VAULT_RETURN_IF_ERROR(MoveSelfToLeaf(h));
      err = WriteControlErrno(path, value);
    }
    if (err != 0) return PosixError(err, absl::StrCat("write \"", value, "\" to ", path));
    return absl::OkStatus();
  }

  absl::Status MoveSelfToLeaf(const Hierarchy& h) {
    std::string leaf = absl::StrCat(h.own, "/", options_.folder, "-main");
    VAULT_RETURN_IF_ERROR(MakeDirectory(leaf));
    return WriteControl(absl::StrCat(leaf, "/cgroup.procs"), absl::StrCat(getpid()));
  }

  const CgroupManager::Options& options_;
  std::vector<Hierarchy> hierarchies_;
};

std::vector<Hierarchy> FindHierarchies(const CgroupManager::Options& options,
                                       const std::vector<CgroupMount>& mounts,
                                       const ProcCgroups& procs) {
  std::vector<Hierarchy> hierarchies;
  std::set<std::string> seen_controllers;
  bool seen_v2 = false;
  for (const CgroupMount& mount : mounts) {
    Hierarchy h;
    h.version = mount.version;
    h.root = mount.root;
    h.mountpoint = mount.mountpoint;
    std::optional<std::string> cgroup_path;
    if (mount.version == 1) {
      // A hierarchy may be mounted more than once (bind mounts); the first one is used.
      bool duplicate = false;
      for (const std::string& c : mount.controllers) duplicate |= seen_controllers.count(c) > 0;
      if (duplicate) continue;
      seen_controllers.insert(mount.controllers.begin(), mount.controllers.end());
      h.v1_controllers = mount.controllers;
      cgroup_path = procs.V1PathOf(mount.controllers.front());
    } else {
      if (seen_v2) continue;
      seen_v2 = true;
      cgroup_path = procs.v2;
    }
    std::optional<std::string> own;
    if (cgroup_path.has_value()) own = DirUnderMount(mount, *cgroup_path);
    if (!cgroup_path.has_value()) {
      h.usable = absl::NotFoundError(
          absl::StrCat("this process has no cgroup for the hierarchy at ", mount.mountpoint));
    } else if (!own.has_value()) {
      h.usable = absl::NotFoundError(absl::StrCat("this process's cgroup ", *cgroup_path,
                                                  " is outside the cgroup ", mount.root,
                                                  " mounted at ", mount.mountpoint));
    } else {
      h.own = *own;
      if (mount.version == 2 && absl::EndsWith(h.own, absl::StrCat("/", options.folder, "-main"))) {
        // A previous Detect moved this process into its leaf (see EnableIn).
        h.own = common::DirName(h.own);
      }
      h.base = absl::StrCat(h.own, "/", options.folder);
      if (mount.version == 2) {
        absl::StatusOr<std::string> offered =
            common::ReadFile(absl::StrCat(h.own, "/cgroup.controllers"));
        if (offered.ok()) {
          for (absl::string_view name :
               absl::StrSplit(*offered, absl::ByAnyChar(" \n"), absl::SkipEmpty())) {
            h.v2_offered.emplace(name);
          }
        } else {
          h.v2_offered_status = offered.status();
        }
      }
    }
    hierarchies.push_back(std::move(h));
  }
  return hierarchies;
}

// ---- The sandbox's cgroup ----

class CgroupImpl final : public Cgroup {
 public:
  struct Place {
    std::string dir;  // empty: the controller is missing
    int version = 0;
  };

  CgroupImpl(std::vector<std::string> dirs, std::vector<CgroupMount> mounts,
             std::array<Place, kNumControllers> places)
      : dirs_(std::move(dirs)), mounts_(std::move(mounts)), places_(std::move(places)) {}

  ~CgroupImpl() override {
    // Best effort and without waiting: tasks still inside keep their cgroups alive.
    {
      absl::MutexLock lock(&cpu_mu_);
      cpu_fd_.Reset();
    }
    if (!removed_.load()) RemoveDirs(absl::ZeroDuration()).IgnoreError();
  }

  absl::Status AddProcess(pid_t pid) override {
    if (pid <= 0) return absl::InvalidArgumentError(absl::StrCat("invalid pid ", pid));
    for (const std::string& dir : dirs_) {
      VAULT_RETURN_IF_ERROR(WriteControl(absl::StrCat(dir, "/cgroup.procs"), absl::StrCat(pid)));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<ThreadReturn> EnterCallingThread() override {
    ThreadReturn back;
    bool any_v1 = false;
    for (const CgroupMount& m : mounts_) any_v1 |= m.version == 1;
    if (!any_v1) return back;
    // Where this thread is now (not the process: a thread may have been moved alone).
    const std::string self = "/proc/thread-self/cgroup";
    VAULT_ASSIGN_OR_RETURN(std::string text, common::ReadFile(self));
    VAULT_ASSIGN_OR_RETURN(ProcCgroups now, ParseProcCgroup(self, text));
    std::vector<std::string> homes;
    for (const CgroupMount& m : mounts_) {
      if (m.version != 1) continue;
      std::optional<std::string> path = now.V1PathOf(m.controllers.front());
      std::optional<std::string> home =
          path.has_value() ? DirUnderMount(m, *path) : std::optional<std::string>();
      if (!home.has_value()) {
        return absl::FailedPreconditionError(absl::StrCat("this thread's ", m.controllers.front(),
                                                          " cgroup ", path.value_or("?"),
                                                          " is not under ", m.mountpoint));
      }
      homes.push_back(absl::StrCat(*home, "/tasks"));
    }
    std::vector<std::string> fallbacks;
    for (size_t i = 0; i < dirs_.size(); ++i) {
      if (mounts_[i].version == 1) {
        fallbacks.push_back(absl::StrCat(common::DirName(dirs_[i]), "/tasks"));
      }
    }
    size_t next_home = 0;
    for (size_t i = 0; i < dirs_.size(); ++i) {
      if (mounts_[i].version != 1) continue;
      if (absl::Status s = WriteControl(absl::StrCat(dirs_[i], "/tasks"), "0"); !s.ok()) {
        ReturnCallingThread(back);
        return s;
      }
      back.home_tasks.push_back(homes[next_home]);
      back.fallback_tasks.push_back(fallbacks[next_home]);
      ++next_home;
    }
    return back;
  }

  absl::Status AddClonedProcess(pid_t pid) override {
    if (pid <= 0) return absl::InvalidArgumentError(absl::StrCat("invalid pid ", pid));
    for (size_t i = 0; i < dirs_.size(); ++i) {
      if (mounts_[i].version == 1) continue;
      VAULT_RETURN_IF_ERROR(
          WriteControl(absl::StrCat(dirs_[i], "/cgroup.procs"), absl::StrCat(pid)));
    }
    return absl::OkStatus();
  }

  absl::Status Freeze() override {
    VAULT_RETURN_IF_ERROR(RequireFreezer());
    return SetFrozen(true, absl::Now() + kFreezeTimeout);
  }

  absl::Status Thaw() override {
    VAULT_RETURN_IF_ERROR(RequireFreezer());
    return SetFrozen(false, absl::Now() + kFreezeTimeout);
  }

  absl::Status KillAll() override {
    absl::Time deadline = absl::Now() + kKillTimeout;
    for (const std::string& dir : dirs_) {
      std::string kill_file = absl::StrCat(dir, "/cgroup.kill");
      if (IsV2Dir(dir) && common::PathExists(kill_file)) {
        VAULT_RETURN_IF_ERROR(WriteControl(kill_file, "1"));
        return WaitUntil(deadline, [](const std::set<pid_t>& pids) { return pids.empty(); });
      }
    }
    while (true) {
      VAULT_ASSIGN_OR_RETURN(std::set<pid_t> killed, KillRound(deadline));
      if (killed.empty()) return absl::OkStatus();
      // Wait for the signalled tasks to leave; whatever remains then (tasks added meanwhile)
      // gets another round.
      VAULT_RETURN_IF_ERROR(WaitUntil(deadline, [&killed](const std::set<pid_t>& pids) {
        return std::none_of(pids.begin(), pids.end(),
                            [&killed](pid_t pid) { return killed.count(pid) > 0; });
      }));
    }
  }

  absl::StatusOr<CgroupReadings> Read() const override {
    CgroupReadings r;
    if (const Place& p = place(CgroupController::kMemory); !p.dir.empty()) {
      if (p.version == 1) {
        VAULT_ASSIGN_OR_RETURN(r.memory_current, ReadU64(File(p, "memory.usage_in_bytes")));
        VAULT_ASSIGN_OR_RETURN(r.memory_peak, ReadU64(File(p, "memory.max_usage_in_bytes")));
        VAULT_ASSIGN_OR_RETURN(r.oom_kills,
                               ReadKeyedU64(File(p, "memory.oom_control"), "oom_kill"));
      } else {
        VAULT_ASSIGN_OR_RETURN(r.memory_current, ReadU64(File(p, "memory.current")));
        VAULT_ASSIGN_OR_RETURN(r.memory_peak, ReadOptionalU64(File(p, "memory.peak"), 0));
        VAULT_ASSIGN_OR_RETURN(r.oom_kills, ReadKeyedU64(File(p, "memory.events"), "oom_kill"));
      }
    }
    if (const Place& p = place(CgroupController::kPids); !p.dir.empty()) {
      VAULT_ASSIGN_OR_RETURN(uint64_t pids, ReadU64(File(p, "pids.current")));
      r.pids_current = static_cast<uint32_t>(pids);
    }
    if (const Place& p = place(CgroupController::kCpuAcct); !p.dir.empty()) {
      if (p.version == 1) {
        VAULT_ASSIGN_OR_RETURN(r.cpu_usage_ns, ReadU64(File(p, "cpuacct.usage")));
      } else {
        VAULT_ASSIGN_OR_RETURN(uint64_t usec, ReadKeyedU64(File(p, "cpu.stat"), "usage_usec"));
        r.cpu_usage_ns = usec * 1000;
      }
    }
    return r;
  }

  absl::StatusOr<uint64_t> CpuUsageNs() const override {
    const Place& p = place(CgroupController::kCpuAcct);
    if (p.dir.empty()) return absl::NotFoundError("no CPU accounting controller");
    const std::string path = p.version == 1 ? File(p, "cpuacct.usage") : File(p, "cpu.stat");
    int fd;
    {
      absl::MutexLock lock(&cpu_mu_);
      if (cpu_fd_.get() < 0) {
        int opened = open(path.c_str(), O_RDONLY | O_CLOEXEC);
        if (opened < 0) return common::PosixError(errno, absl::StrCat("open ", path));
        cpu_fd_ = common::UniqueFd(opened);
      }
      fd = cpu_fd_.get();
    }
    // A cgroup file read from offset 0 is generated afresh.
    char buf[512];
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    if (n < 0) return common::PosixError(errno, absl::StrCat("read ", path));
    absl::string_view text(buf, static_cast<size_t>(n));
    if (p.version == 1) return ParseU64(path, std::string(text));
    for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
      std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(line, ' ');
      if (kv.first == "usage_usec") {
        VAULT_ASSIGN_OR_RETURN(uint64_t usec, ParseU64(path, std::string(kv.second)));
        return usec * 1000;
      }
    }
    return absl::NotFoundError(absl::StrCat("no \"usage_usec\" line in ", path));
  }

  absl::Status Remove() override {
    {
      absl::MutexLock lock(&cpu_mu_);
      cpu_fd_.Reset();
    }
    absl::Status s = RemoveDirs(kRemoveTimeout);
    if (s.ok()) removed_.store(true);
    return s;
  }

  // Writes the limits for the controllers present; used once, by Create.
  absl::Status WriteLimits(const CgroupLimits& limits) {
    if (const Place& p = place(CgroupController::kMemory);
        !p.dir.empty() && limits.memory_bytes != 0) {
      std::string bytes = absl::StrCat(limits.memory_bytes);
      if (p.version == 1) {
        // memory.memsw.limit_in_bytes (memory + swap) may not be below memory.limit_in_bytes,
        // so the memory limit goes first; both equal means no swap.
        VAULT_RETURN_IF_ERROR(WriteControl(File(p, "memory.limit_in_bytes"), bytes));
        std::string memsw = File(p, "memory.memsw.limit_in_bytes");
        if (common::PathExists(memsw)) VAULT_RETURN_IF_ERROR(WriteControl(memsw, bytes));
      } else {
        VAULT_RETURN_IF_ERROR(WriteControl(File(p, "memory.max"), bytes));
        std::string swap = File(p, "memory.swap.max");
        if (common::PathExists(swap)) VAULT_RETURN_IF_ERROR(WriteControl(swap, "0"));
      }
    }
    if (const Place& p = place(CgroupController::kPids); !p.dir.empty() && limits.max_pids != 0) {
      VAULT_RETURN_IF_ERROR(WriteControl(File(p, "pids.max"), absl::StrCat(limits.max_pids)));
    }
    if (const Place& p = place(CgroupController::kCpu); !p.dir.empty() && limits.cpu_percent != 0) {
      uint64_t quota_us = uint64_t{limits.cpu_percent} * kCpuPeriodUs / 100;
      if (p.version == 1) {
        VAULT_RETURN_IF_ERROR(
            WriteControl(File(p, "cpu.cfs_period_us"), absl::StrCat(kCpuPeriodUs)));
        VAULT_RETURN_IF_ERROR(WriteControl(File(p, "cpu.cfs_quota_us"), absl::StrCat(quota_us)));
      } else {
        VAULT_RETURN_IF_ERROR(
            WriteControl(File(p, "cpu.max"), absl::StrCat(quota_us, " ", kCpuPeriodUs)));
      }
    }
    return absl::OkStatus();
  }

 private:
  const Place& place(CgroupController controller) const { return places_[Index(controller)]; }

  static std::string File(const Place& place, absl::string_view name) {
    return absl::StrCat(place.dir, "/", name);
  }

  bool IsV2Dir(const std::string& dir) const {
    for (const Place& p : places_) {
      if (p.dir == dir) return p.version == 2;
    }
    return false;
  }

  absl::Status RequireFreezer() const {
    if (!place(CgroupController::kFreezer).dir.empty()) return absl::OkStatus();
    return absl::FailedPreconditionError("the cgroup freezer is missing on this machine");
  }

  absl::Status SetFrozen(bool frozen, absl::Time deadline) {
    const Place& p = place(CgroupController::kFreezer);
    if (p.version == 1) {
      std::string state = File(p, "freezer.state");
      if (!frozen) return WriteControl(state, "THAWED");
      // A task that vforked waits for its child in the kernel, where it cannot be frozen; when
      // the freezer stopped that child before its exec, the group reads FREEZING for good (in one
      // run, a shell starting commands was caught at the 15th pause). As runc does, such an
      // attempt is undone (THAWED: the child execs, the parent goes on) and made again, each
      // attempt longer, until the deadline; a group that never freezes is left thawed, not
      // half-stopped.
      for (absl::Duration attempt = kFreezeAttempt;;
           attempt = std::min(attempt * 2, kFreezeTimeout)) {
        VAULT_RETURN_IF_ERROR(WriteControl(state, "FROZEN"));
        const absl::Time attempt_end = std::min(deadline, absl::Now() + attempt);
        std::string text;
        // Reads FREEZING until every task has stopped: usually within a few hundred
        // microseconds (a migration waits for it), so the first polls come quickly.
        for (absl::Duration wait = absl::Microseconds(50);;
             wait = std::min(wait * 2, kPollInterval)) {
          VAULT_ASSIGN_OR_RETURN(text, common::ReadFile(state));
          text = std::string(absl::StripAsciiWhitespace(text));
          if (text == "FROZEN") return absl::OkStatus();
          if (absl::Now() >= attempt_end) break;
          absl::SleepFor(wait);
        }
        VAULT_RETURN_IF_ERROR(WriteControl(state, "THAWED"));
        if (absl::Now() >= deadline) {
          return absl::DeadlineExceededError(absl::StrCat(state, " still read ", text, " after ",
                                                          absl::FormatDuration(kFreezeTimeout),
                                                          " of attempts (left THAWED)"));
        }
        absl::SleepFor(absl::Microseconds(200));  // for a vfork child to reach its exec
      }
    }
    VAULT_RETURN_IF_ERROR(WriteControl(File(p, "cgroup.freeze"), frozen ? "1" : "0"));
    if (!frozen) return absl::OkStatus();
    std::string events = File(p, "cgroup.events");
    for (absl::Duration wait = absl::Microseconds(50);; wait = std::min(wait * 2, kPollInterval)) {
      VAULT_ASSIGN_OR_RETURN(uint64_t is_frozen, ReadKeyedU64(events, "frozen"));
      if (is_frozen == 1) return absl::OkStatus();
      if (absl::Now() >= deadline) {
        return absl::DeadlineExceededError(absl::StrCat(
            events, " does not report \"frozen 1\" after ", absl::FormatDuration(kFreezeTimeout)));
      }
      absl::SleepFor(wait);
    }
  }

  // Every task in any of the directories (normally the same tasks in each).
  absl::StatusOr<std::set<pid_t>> ListTasks() const {
    std::set<pid_t> all;
    for (const std::string& dir : dirs_) {
      VAULT_ASSIGN_OR_RETURN(std::vector<pid_t> pids, ReadProcs(dir));
      all.insert(pids.begin(), pids.end());
    }
    return all;
  }

  // Freezes (when the freezer is present, so the list cannot change and no pid can be reused
  // under us), SIGKILLs every task listed and thaws: a task killed inside a frozen v1 cgroup
  // only dies once thawed. Returns the pids signalled.
  absl::StatusOr<std::set<pid_t>> KillRound(absl::Time deadline) {
    bool has_freezer = !place(CgroupController::kFreezer).dir.empty();
    if (has_freezer) {
      // A task stuck in the kernel may keep the group FREEZING; kill what is listed anyway.
      absl::Status frozen = SetFrozen(true, std::min(deadline, absl::Now() + kFreezeTimeout));
      if (!frozen.ok() && !absl::IsDeadlineExceeded(frozen)) return frozen;
    }
    absl::StatusOr<std::set<pid_t>> pids = ListTasks();
    absl::Status s = pids.status();
    if (s.ok()) {
      for (pid_t pid : *pids) {
        if (kill(pid, SIGKILL) != 0 && errno != ESRCH) {
          s = PosixError(errno, absl::StrCat("kill ", pid));
          break;
        }
      }
    }
    if (has_freezer) {
      absl::Status thawed = SetFrozen(false, deadline);
      if (s.ok()) s = thawed;
    }
    if (!s.ok()) return s;
    return pids;
  }

  template <typename Done>
  absl::Status WaitUntil(absl::Time deadline, Done done) const {
    while (true) {
      VAULT_ASSIGN_OR_RETURN(std::set<pid_t> pids, ListTasks());
      if (done(pids)) return absl::OkStatus();
      if (absl::Now() >= deadline) {
        return absl::DeadlineExceededError(
            absl::StrCat(pids.size(), " tasks still in ", absl::StrJoin(dirs_, ", "), " after ",
                         absl::FormatDuration(kKillTimeout), " (first: ", *pids.begin(), ")"));
      }
      absl::SleepFor(kPollInterval);
    }
  }

  absl::Status RemoveDirs(absl::Duration timeout) {
    absl::Time deadline = absl::Now() + timeout;
    absl::Status result;
    for (auto it = dirs_.rbegin(); it != dirs_.rend(); ++it) {
      while (rmdir(it->c_str()) != 0 && errno != ENOENT) {
        if (errno == EBUSY && absl::Now() < deadline) {
          absl::SleepFor(kRemovePollInterval);
          continue;
        }
        result.Update(PosixError(errno, absl::StrCat("rmdir ", *it)));
        break;
      }
    }
    return result;
  }

  // Constant after construction.
  const std::vector<std::string> dirs_;    // one per hierarchy used, each distinct
  const std::vector<CgroupMount> mounts_;  // the hierarchy of each of dirs_
  const std::array<Place, kNumControllers> places_;
  std::atomic<bool> removed_{false};
  mutable absl::Mutex cpu_mu_;
  mutable common::UniqueFd cpu_fd_ ABSL_GUARDED_BY(cpu_mu_);
};

// ---- The manager ----

class CgroupManagerImpl final : public CgroupManager {
 public:
  struct Placement {
    int hierarchy = -1;  // index into bases_; -1: missing
    std::string reason;  // why it is missing
  };
  struct Base {
    std::string dir;  // <own>/<folder>
    CgroupMount mount;
  };

  CgroupManagerImpl(std::vector<Base> bases, std::array<Placement, kNumControllers> placements)
      : bases_(std::move(bases)), placements_(std::move(placements)) {}

  bool Has(CgroupController controller) const override {
    return placements_[Index(controller)].hierarchy >= 0;
  }

  std::string Describe() const override {
    std::vector<std::string> parts;
    for (CgroupController c : kAllControllers) {
      const Placement& p = placements_[Index(c)];
      parts.push_back(absl::StrCat(
          ControllerName(c), "=",
          p.hierarchy < 0 ? "missing" : absl::StrCat("v", bases_[p.hierarchy].mount.version)));
    }
    return absl::StrJoin(parts, " ");
  }

  std::string Warnings() const override {
    std::vector<std::string> lines;
    for (CgroupController c : kAllControllers) {
      const Placement& p = placements_[Index(c)];
      if (p.hierarchy < 0) lines.push_back(absl::StrCat(ControllerName(c), ": ", p.reason));
    }
    return absl::StrJoin(lines, "\n");
  }

  absl::StatusOr<std::unique_ptr<Cgroup>> Create(const std::string& name,
                                                 const CgroupLimits& limits) const override {
    if (!IsValidName(name)) {
      return absl::InvalidArgumentError(
          absl::StrCat("invalid cgroup name \"", absl::CEscape(name),
                       "\": want 1 to 64 of [A-Za-z0-9._-], not \".\" or \"..\""));
    }
    std::vector<int> used = UsedHierarchies();
    if (used.empty()) {
      // A cgroup that holds nothing would make KillAll "succeed" without killing anything.
      return absl::FailedPreconditionError(
          absl::StrCat("no cgroup controller is available:\n", Warnings()));
    }
    std::vector<std::string> dirs;
    std::vector<CgroupMount> mounts;
    std::vector<std::string> created;
    auto roll_back = [&created](absl::Status s) {
      for (auto it = created.rbegin(); it != created.rend(); ++it) rmdir(it->c_str());
      return s;
    };
    for (int index : used) {
      std::string dir = absl::StrCat(bases_[index].dir, "/", name);
      if (mkdir(dir.c_str(), 0755) != 0) {
        return roll_back(PosixError(errno, absl::StrCat("mkdir ", dir)));
      }
      created.push_back(dir);
      dirs.push_back(std::move(dir));
      mounts.push_back(bases_[index].mount);
    }
    std::array<CgroupImpl::Place, kNumControllers> places;
    for (CgroupController c : kAllControllers) {
      int index = placements_[Index(c)].hierarchy;
      if (index < 0) continue;
      places[Index(c)] = {absl::StrCat(bases_[index].dir, "/", name), bases_[index].mount.version};
    }
    auto cgroup =
        std::make_unique<CgroupImpl>(std::move(dirs), std::move(mounts), std::move(places));
    // On failure the cgroup's destructor then finds nothing left to remove.
    if (absl::Status s = cgroup->WriteLimits(limits); !s.ok()) return roll_back(s);
    return cgroup;
  }

  // Thaws the cgroup at `path` and SIGKILLs every task in it.
  static void KillTasks(const std::string& path, int version) {
    if (version == 1) {
      (void)WriteControlErrno(path + "/freezer.state", "THAWED");
    } else {
      (void)WriteControlErrno(path + "/cgroup.freeze", "0");
      if (WriteControlErrno(path + "/cgroup.kill", "1") == 0) return;
    }
    absl::StatusOr<std::string> procs = common::ReadFile(path + "/cgroup.procs");
    if (!procs.ok()) return;
    for (absl::string_view line : absl::StrSplit(*procs, '\n', absl::SkipEmpty())) {
      pid_t pid = 0;
      if (absl::SimpleAtoi(line, &pid) && pid > 1) (void)kill(pid, SIGKILL);
    }
  }

  int RemoveStale(const std::function<bool(const std::string&)>& is_stale) const override {
    // (hierarchy version, path) of every candidate, in every hierarchy.
    std::vector<std::pair<int, std::string>> candidates;
    for (int index : UsedHierarchies()) {
      const std::string& base = bases_[index].dir;
      DIR* dir = opendir(base.c_str());
      if (dir == nullptr) continue;
      while (struct dirent* entry = readdir(dir)) {
        std::string child = entry->d_name;
        if (child == "." || child == "..") continue;
        struct stat st;
        std::string path = absl::StrCat(base, "/", child);
        if (lstat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) continue;
        if (is_stale && !is_stale(child)) continue;
        candidates.emplace_back(bases_[index].mount.version, std::move(path));
      }
      closedir(dir);
    }
    // A stale cgroup's tasks outlived the process that owned them (it was SIGKILLed while its
    // sandbox was frozen, so their parent-death signal waits): thawed and killed first, in every
    // hierarchy (a frozen task dies only once the freezer's hierarchy thaws it). Without
    // `is_stale` (nothing known about the owner), a cgroup with tasks stays: rmdir refuses
    // cgroups with tasks (EBUSY) or children (ENOTEMPTY).
    if (is_stale) {
      for (const auto& [version, path] : candidates) KillTasks(path, version);
    }
    std::set<std::string> removed;
    for (const auto& [version, path] : candidates) {
      bool gone = rmdir(path.c_str()) == 0;
      for (int i = 0; !gone && is_stale && errno == EBUSY && i < 100; ++i) {
        absl::SleepFor(absl::Milliseconds(10));  // the killed tasks are still exiting
        gone = rmdir(path.c_str()) == 0;
      }
      if (gone) removed.insert(path.substr(path.rfind('/') + 1));
    }
    return static_cast<int>(removed.size());
  }

 private:
  // Each hierarchy holding at least one controller, once, in order.
  std::vector<int> UsedHierarchies() const {
    std::vector<int> used;
    for (const Placement& p : placements_) {
      if (p.hierarchy >= 0 && std::count(used.begin(), used.end(), p.hierarchy) == 0) {
        used.push_back(p.hierarchy);
      }
    }
    std::sort(used.begin(), used.end());
    return used;
  }

  // Constant after construction.
  const std::vector<Base> bases_;
  const std::array<Placement, kNumControllers> placements_;
};

}  // namespace

void ReturnCallingThread(const ThreadReturn& back) {
  for (size_t i = 0; i < back.home_tasks.size(); ++i) {
    absl::Status home = WriteControl(back.home_tasks[i], "0");
    if (!home.ok() && i < back.fallback_tasks.size()) {
      home = WriteControl(back.fallback_tasks[i], "0");
    }
    if (!home.ok()) {
      spdlog::critical("a thread cannot leave a sandbox's cgroup: {}", home.ToString());
      std::abort();
    }
  }
}

absl::StatusOr<std::unique_ptr<CgroupManager>> CgroupManager::Detect(const Options& options) {
  if (!IsValidName(options.folder)) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid cgroup folder name \"", absl::CEscape(options.folder), "\""));
  }
  std::string mountinfo_path =
      options.mountinfo_path.empty() ? "/proc/self/mountinfo" : options.mountinfo_path;
  std::string cgroup_path = options.cgroup_path.empty() ? "/proc/self/cgroup" : options.cgroup_path;
  VAULT_ASSIGN_OR_RETURN(std::string mountinfo, common::ReadFile(mountinfo_path));
  VAULT_ASSIGN_OR_RETURN(std::string cgroups, common::ReadFile(cgroup_path));
  VAULT_ASSIGN_OR_RETURN(std::vector<CgroupMount> mounts,
                         ParseMountInfo(mountinfo_path, mountinfo));
  VAULT_ASSIGN_OR_RETURN(ProcCgroups procs, ParseProcCgroup(cgroup_path, cgroups));
  Detector detector(options, FindHierarchies(options, mounts, procs));
  std::array<CgroupManagerImpl::Placement, kNumControllers> placements;
  for (CgroupController c : kAllControllers) {
    CgroupManagerImpl::Placement& p = placements[Index(c)];
    p.hierarchy = detector.Place(c, &p.reason);
  }
  std::vector<CgroupManagerImpl::Base> bases;
  for (const Hierarchy& h : detector.hierarchies()) {
    bases.push_back({h.base, CgroupMount{h.version, h.root, h.mountpoint, h.v1_controllers}});
  }
  return std::unique_ptr<CgroupManager>(
      new CgroupManagerImpl(std::move(bases), std::move(placements)));
}

}  // namespace vault::sandbox
