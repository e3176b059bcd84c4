#include "sandbox/posix/landlock.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>
#include <utility>

#include "sandbox/posix/internal/raw_syscall.h"

namespace vault::sandbox::landlock {
namespace {

using internal::RawFailed;
using internal::RawSys;

// uapi structures, as of ABI 6 (the kernel accepts a shorter size from older callers).
struct RulesetAttr {
  uint64_t handled_access_fs;
  uint64_t handled_access_net;
  uint64_t scoped;
};
struct __attribute__((packed)) PathBeneathAttr {
  uint64_t allowed_access;
  int32_t parent_fd;
};
constexpr int kRulePathBeneath = 1;
constexpr unsigned kCreateRulesetVersion = 1u << 0;

#ifndef SYS_landlock_create_ruleset
#define SYS_landlock_create_ruleset 444
#define SYS_landlock_add_rule 445
#define SYS_landlock_restrict_self 446
#endif

uint64_t FsRightsFor(int abi) {
  uint64_t rights = (kMakeSym << 1) - 1;  // ABI 1: bits 0..12
  if (abi >= 2) rights |= kRefer;
  if (abi >= 3) rights |= kTruncate;
  if (abi >= 5) rights |= kIoctlDev;
  return rights;
}

// Raw system calls, in the sandbox's clone child (see Apply): returns 0 or -errno.
int AddRule(int ruleset_fd, int fd, uint64_t access) noexcept {
  PathBeneathAttr attr;
  attr.allowed_access = access;
  attr.parent_fd = fd;
  return static_cast<int>(RawSys(SYS_landlock_add_rule, ruleset_fd, kRulePathBeneath, &attr, 0));
}

}  // namespace

int ProbeAbi() noexcept {
  long abi = syscall(SYS_landlock_create_ruleset, nullptr, 0, kCreateRulesetVersion);
  return abi < 0 ? 0 : static_cast<int>(abi);
}

Plan MakePlan(int abi, std::vector<Rule> rules) {
  Plan plan;
  plan.abi = abi;
  if (abi <= 0) return plan;
  plan.handled_fs = FsRightsFor(abi);
  plan.attr_size = sizeof(uint64_t);
  if (abi >= 4) {
    plan.handled_net = kNetBindTcp | kNetConnectTcp;
    plan.attr_size = 2 * sizeof(uint64_t);
  }
  if (abi >= 6) {
    plan.scoped = kScopeAbstractUnixSocket | kScopeSignal;
    plan.attr_size = sizeof(RulesetAttr);
  }
  for (Rule& rule : rules) rule.access &= plan.handled_fs;
  plan.rules = std::move(rules);
  return plan;
}

// Runs in the sandbox's clone child, which shares its errno with the host's supervisor thread
// and other children: raw system calls only, errors taken from their results, never errno.
int Apply(const Plan& plan, int* failed_rule) noexcept {
  *failed_rule = -1;
  if (plan.abi <= 0) return 0;
  RulesetAttr attr;
  attr.handled_access_fs = plan.handled_fs;
  attr.handled_access_net = plan.handled_net;
  attr.scoped = plan.scoped;
  long created = RawSys(SYS_landlock_create_ruleset, &attr, plan.attr_size, 0);
  if (RawFailed(created)) return static_cast<int>(created);
  const int ruleset = static_cast<int>(created);
  int result = 0;
  for (size_t i = 0; i < plan.rules.size() && result == 0; ++i) {
    const Rule& rule = plan.rules[i];
    long opened = RawSys(SYS_openat, AT_FDCWD, rule.path.c_str(), O_PATH | O_CLOEXEC);
    if (RawFailed(opened)) {
      if (rule.optional && opened == -ENOENT) continue;
      result = static_cast<int>(opened);
      *failed_rule = static_cast<int>(i);
      break;
    }
    const int fd = static_cast<int>(opened);
    result = AddRule(ruleset, fd, rule.access);
    if (result == -EINVAL) {
      result = AddRule(ruleset, fd,
                       rule.access & (kExecute | kReadFile | kWriteFile | kTruncate | kIoctlDev));
    }
    RawSys(SYS_close, fd);
    if (result != 0) *failed_rule = static_cast<int>(i);
  }
  if (result == 0 && plan.extra_fd >= 0) {
    result = AddRule(ruleset, plan.extra_fd, plan.extra_access & plan.handled_fs);
  }
  if (result == 0) result = static_cast<int>(RawSys(SYS_landlock_restrict_self, ruleset, 0));
  RawSys(SYS_close, ruleset);
  return result;
}

}  // namespace vault::sandbox::landlock
