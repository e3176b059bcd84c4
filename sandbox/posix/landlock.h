// landlock: the sandbox's Landlock ruleset, the second fence behind the mount namespace.
//
// Planned in the host process (which rights this kernel's ABI can handle, which paths get
// which rights) and applied in the child after the final pivot_root, with raw system calls
// only. The kernel headers of Debian 12 stop at ABI 2, so the structures and rights of ABIs
// 3-7 (truncate, TCP bind/connect, ioctl on devices, abstract-socket and signal scoping) are
// defined here.
//
// Thread safety: PlanLandlock is pure; ApplyLandlock is async-signal-safe.
#ifndef VAULT_SANDBOX_POSIX_LANDLOCK_H_
#define VAULT_SANDBOX_POSIX_LANDLOCK_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace vault::sandbox::landlock {

// Filesystem rights (uapi/linux/landlock.h).
inline constexpr uint64_t kExecute = 1ull << 0;
inline constexpr uint64_t kWriteFile = 1ull << 1;
inline constexpr uint64_t kReadFile = 1ull << 2;
inline constexpr uint64_t kReadDir = 1ull << 3;
inline constexpr uint64_t kRemoveDir = 1ull << 4;
inline constexpr uint64_t kRemoveFile = 1ull << 5;
inline constexpr uint64_t kMakeChar = 1ull << 6;
inline constexpr uint64_t kMakeDir = 1ull << 7;
inline constexpr uint64_t kMakeReg = 1ull << 8;
inline constexpr uint64_t kMakeSock = 1ull << 9;
inline constexpr uint64_t kMakeFifo = 1ull << 10;
inline constexpr uint64_t kMakeBlock = 1ull << 11;
inline constexpr uint64_t kMakeSym = 1ull << 12;
inline constexpr uint64_t kRefer = 1ull << 13;     // ABI 2
inline constexpr uint64_t kTruncate = 1ull << 14;  // ABI 3
inline constexpr uint64_t kIoctlDev = 1ull << 15;  // ABI 5
// Network rights (ABI 4).
inline constexpr uint64_t kNetBindTcp = 1ull << 0;
inline constexpr uint64_t kNetConnectTcp = 1ull << 1;
// Scopes (ABI 6).
inline constexpr uint64_t kScopeAbstractUnixSocket = 1ull << 0;
inline constexpr uint64_t kScopeSignal = 1ull << 1;

inline constexpr uint64_t kReadOnly = kExecute | kReadFile | kReadDir;
inline constexpr uint64_t kReadWrite = kReadFile | kReadDir | kWriteFile | kRemoveDir |
                                       kRemoveFile | kMakeDir | kMakeReg | kMakeSock | kMakeFifo |
                                       kMakeSym | kRefer | kTruncate;

// The kernel's Landlock ABI version; 0 when Landlock is absent or disabled.
int ProbeAbi() noexcept;

struct Rule {
  std::string path;  // inside the sandbox, after the final pivot_root
  uint64_t access = 0;
  bool optional = false;  // a missing path is skipped instead of failing
};

struct Plan {
  int abi = 0;  // 0: do not apply
  uint64_t handled_fs = 0;
  uint64_t handled_net = 0;
  uint64_t scoped = 0;
  size_t attr_size = 0;  // sizeof the ruleset attributes this ABI knows
  std::vector<Rule> rules;
  int extra_fd = -1;  // a file outside the tree that must stay executable (the init)
  uint64_t extra_access = 0;
};

// Plans the ruleset for `abi`: every right that ABI handles is handled, rules' rights are
// masked to what it handles, TCP bind/connect are handled with no rule (so refused), and both
// scopes are set where the ABI has them.
Plan MakePlan(int abi, std::vector<Rule> rules);

// Applies the plan to the calling process (no_new_privs must already be set). Returns 0, or
// -errno; *failed_rule is set to the index of the rule whose path could not be opened.
int Apply(const Plan& plan, int* failed_rule) noexcept;

}  // namespace vault::sandbox::landlock

#endif  // VAULT_SANDBOX_POSIX_LANDLOCK_H_
