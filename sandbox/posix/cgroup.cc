// CgroupManager: where each controller lives (Detect, cgroup v1, v2 or a hybrid), and the sandbox
// cgroups it creates (internal/sandbox_cgroup.h) and cleans up after a crash.
#include "sandbox/posix/cgroup.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <functional>
#include <optional>
#include <set>
#include <string>
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
#include "absl/time/clock.h"
#include "common/file_util.h"
#include "common/status_macros.h"
#include "sandbox/posix/internal/cgroupfs.h"
#include "sandbox/posix/internal/sandbox_cgroup.h"

namespace vault::sandbox {
namespace {

using common::PosixError;

constexpr size_t kMaxNameLength = 64;

// [A-Za-z0-9._-]{1,64}, and not "." or "..", which would name this or the parent directory.
bool IsValidName(absl::string_view name) {
  if (name.empty() || name.size() > kMaxNameLength || name == "." || name == "..") return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
  });
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
