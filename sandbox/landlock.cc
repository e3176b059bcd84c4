#include "sandbox/landlock.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>
#include <utility>

namespace vault::sandbox::landlock {
namespace {

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

int AddRule(int ruleset_fd, int fd, uint64_t access) noexcept {
  PathBeneathAttr attr;
  attr.allowed_access = access;
  attr.parent_fd = fd;
  if (syscall(SYS_landlock_add_rule, ruleset_fd, kRulePathBeneath, &attr, 0) != 0) return -errno;
  return 0;
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

int Apply(const Plan& plan, int* failed_rule) noexcept {
  *failed_rule = -1;
  if (plan.abi <= 0) return 0;
  RulesetAttr attr;
  attr.handled_access_fs = plan.handled_fs;
  attr.handled_access_net = plan.handled_net;
  attr.scoped = plan.scoped;
  int ruleset = static_cast<int>(syscall(SYS_landlock_create_ruleset, &attr, plan.attr_size, 0));
  if (ruleset < 0) return -errno;
  int result = 0;
  for (size_t i = 0; i < plan.rules.size() && result == 0; ++i) {
    const Rule& rule = plan.rules[i];
    int fd = open(rule.path.c_str(), O_PATH | O_CLOEXEC);
    if (fd < 0) {
      if (rule.optional && errno == ENOENT) continue;
      result = -errno;
      *failed_rule = static_cast<int>(i);
      break;
    }
    result = AddRule(ruleset, fd, rule.access);
    if (result == -EINVAL) {
      result = AddRule(ruleset, fd,
                       rule.access & (kExecute | kReadFile | kWriteFile | kTruncate | kIoctlDev));
    }
    close(fd);
    if (result != 0) *failed_rule = static_cast<int>(i);
  }
  if (result == 0 && plan.extra_fd >= 0) {
    result = AddRule(ruleset, plan.extra_fd, plan.extra_access & plan.handled_fs);
  }
  if (result == 0 && syscall(SYS_landlock_restrict_self, ruleset, 0) != 0) result = -errno;
  close(ruleset);
  return result;
}

}  // namespace vault::sandbox::landlock
