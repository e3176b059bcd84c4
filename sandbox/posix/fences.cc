#include "sandbox/posix/fences.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace vault::sandbox {

std::string FenceReport::Describe() const {
  auto state = [](bool on) { return on ? "active" : "MISSING"; };
  std::vector<std::string> lines = {
      absl::StrCat("namespaces (user, mount, pid, net, ipc, uts, cgroup): ",
                   state(user_namespaces)),
      absl::StrCat("seccomp filter: ", state(seccomp)),
      landlock_abi > 0 ? absl::StrCat("landlock: active (ABI ", landlock_abi, ")")
                       : std::string("landlock: MISSING"),
      absl::StrCat("cgroups: ", cgroups() ? "active" : "MISSING", " (", cgroup_detail, ")"),
      absl::StrCat("host ids: ", running_as_root ? "one unprivileged uid per sandbox"
                                                 : "the caller's own uid (not root)"),
  };
  if (!kept_groups.empty()) {
    lines.push_back(absl::StrCat("supplementary groups: ", kept_groups,
                                 " would stay with every sandbox: MISSING a clean identity"));
  }
  return absl::StrJoin(lines, "\n");
}

absl::Status CheckPolicy(const FenceReport& report, const FencePolicy& policy) {
  std::vector<std::string> missing;
  if (!report.user_namespaces) missing.push_back("namespaces");
  if (!report.seccomp) missing.push_back("seccomp");
  if (policy.landlock && report.landlock_abi <= 0) missing.push_back("landlock");
  if (policy.cgroups && !report.cgroups()) missing.push_back("cgroups");
  if (!report.kept_groups.empty()) {
    missing.push_back(absl::StrCat("no supplementary groups (this unprivileged process has ",
                                   report.kept_groups, "; run it without them)"));
  }
  if (missing.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("sandbox fences required by policy are missing: ", absl::StrJoin(missing, ", "),
                   report.warnings.empty() ? "" : absl::StrCat(" (", report.warnings, ")")));
}

}  // namespace vault::sandbox
