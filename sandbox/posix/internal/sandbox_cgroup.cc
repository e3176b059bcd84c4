// One sandbox's cgroup (internal/sandbox_cgroup.h): its processes placed, frozen and killed, its
// usage read and its limits written, on cgroup v1, v2 or both; and the calling thread's way back.
#include "sandbox/posix/internal/sandbox_cgroup.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/file_util.h"
#include "common/status_macros.h"
#include "spdlog/spdlog.h"

namespace vault::sandbox {
namespace {

using common::PosixError;

constexpr absl::Duration kFreezeTimeout = absl::Seconds(2);
// The first attempt to freeze a v1 group before it is undone and made again (see SetFrozen).
constexpr absl::Duration kFreezeAttempt = absl::Milliseconds(10);
constexpr absl::Duration kKillTimeout = absl::Seconds(5);
constexpr absl::Duration kRemoveTimeout = absl::Seconds(2);
constexpr absl::Duration kPollInterval = absl::Milliseconds(2);
constexpr absl::Duration kRemovePollInterval = absl::Milliseconds(10);
constexpr uint64_t kCpuPeriodUs = 100000;

}  // namespace

CgroupImpl::CgroupImpl(std::vector<std::string> dirs, std::vector<CgroupMount> mounts,
                       std::array<Place, kNumControllers> places)
    : dirs_(std::move(dirs)), mounts_(std::move(mounts)), places_(std::move(places)) {}

CgroupImpl::~CgroupImpl() {
  // Best effort and without waiting: tasks still inside keep their cgroups alive.
  {
    absl::MutexLock lock(&cpu_mu_);
    cpu_fd_.Reset();
  }
  if (!removed_.load()) RemoveDirs(absl::ZeroDuration()).IgnoreError();
}

absl::Status CgroupImpl::AddProcess(pid_t pid) {
  if (pid <= 0) return absl::InvalidArgumentError(absl::StrCat("invalid pid ", pid));
  for (const std::string& dir : dirs_) {
    VAULT_RETURN_IF_ERROR(WriteControl(absl::StrCat(dir, "/cgroup.procs"), absl::StrCat(pid)));
  }
  return absl::OkStatus();
}

absl::StatusOr<ThreadReturn> CgroupImpl::EnterCallingThread() {
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

absl::Status CgroupImpl::AddClonedProcess(pid_t pid) {
  if (pid <= 0) return absl::InvalidArgumentError(absl::StrCat("invalid pid ", pid));
  for (size_t i = 0; i < dirs_.size(); ++i) {
    if (mounts_[i].version == 1) continue;
    VAULT_RETURN_IF_ERROR(WriteControl(absl::StrCat(dirs_[i], "/cgroup.procs"), absl::StrCat(pid)));
  }
  return absl::OkStatus();
}

absl::Status CgroupImpl::Freeze() {
  VAULT_RETURN_IF_ERROR(RequireFreezer());
  return SetFrozen(true, absl::Now() + kFreezeTimeout);
}

absl::Status CgroupImpl::Thaw() {
  VAULT_RETURN_IF_ERROR(RequireFreezer());
  return SetFrozen(false, absl::Now() + kFreezeTimeout);
}

absl::Status CgroupImpl::KillAll() {
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

absl::StatusOr<CgroupReadings> CgroupImpl::Read() const {
  CgroupReadings r;
  if (const Place& p = place(CgroupController::kMemory); !p.dir.empty()) {
    if (p.version == 1) {
      VAULT_ASSIGN_OR_RETURN(r.memory_current, ReadU64(File(p, "memory.usage_in_bytes")));
      VAULT_ASSIGN_OR_RETURN(r.memory_peak, ReadU64(File(p, "memory.max_usage_in_bytes")));
      VAULT_ASSIGN_OR_RETURN(r.oom_kills, ReadKeyedU64(File(p, "memory.oom_control"), "oom_kill"));
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

absl::StatusOr<uint64_t> CgroupImpl::CpuUsageNs() const {
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

absl::Status CgroupImpl::Remove() {
  {
    absl::MutexLock lock(&cpu_mu_);
    cpu_fd_.Reset();
  }
  absl::Status s = RemoveDirs(kRemoveTimeout);
  if (s.ok()) removed_.store(true);
  return s;
}

absl::Status CgroupImpl::WriteLimits(const CgroupLimits& limits) {
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
      VAULT_RETURN_IF_ERROR(WriteControl(File(p, "cpu.cfs_period_us"), absl::StrCat(kCpuPeriodUs)));
      VAULT_RETURN_IF_ERROR(WriteControl(File(p, "cpu.cfs_quota_us"), absl::StrCat(quota_us)));
    } else {
      VAULT_RETURN_IF_ERROR(
          WriteControl(File(p, "cpu.max"), absl::StrCat(quota_us, " ", kCpuPeriodUs)));
    }
  }
  return absl::OkStatus();
}

std::string CgroupImpl::File(const Place& place, absl::string_view name) {
  return absl::StrCat(place.dir, "/", name);
}

bool CgroupImpl::IsV2Dir(const std::string& dir) const {
  for (const Place& p : places_) {
    if (p.dir == dir) return p.version == 2;
  }
  return false;
}

absl::Status CgroupImpl::RequireFreezer() const {
  if (!place(CgroupController::kFreezer).dir.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError("the cgroup freezer is missing on this machine");
}

absl::Status CgroupImpl::SetFrozen(bool frozen, absl::Time deadline) {
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
absl::StatusOr<std::set<pid_t>> CgroupImpl::ListTasks() const {
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
absl::StatusOr<std::set<pid_t>> CgroupImpl::KillRound(absl::Time deadline) {
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
absl::Status CgroupImpl::WaitUntil(absl::Time deadline, Done done) const {
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

absl::Status CgroupImpl::RemoveDirs(absl::Duration timeout) {
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

}  // namespace vault::sandbox
