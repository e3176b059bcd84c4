// ContainerSandbox's supervisor thread (the end of each container, its wall-time and CPU limits)
// and its SandboxHandle (pause, resume, kill, wait, usage, the work folder).
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/status_macros.h"
#include "sandbox/container/internal/container_impl.h"
#include "sandbox/posix/internal/work_dir.h"
#include "spdlog/spdlog.h"

namespace vault::sandbox {
namespace {

constexpr absl::Duration kCpuPollInterval = absl::Milliseconds(100);
constexpr absl::Duration kCpuPollMax = absl::Seconds(5);

void WorkUsage(int work_fd, Usage& usage) {
  struct statfs fs;
  if (work_fd >= 0 && fstatfs(work_fd, &fs) == 0) {
    usage.work_bytes = (fs.f_blocks - fs.f_bfree) * static_cast<uint64_t>(fs.f_bsize);
    usage.work_inodes = fs.f_files - fs.f_ffree;
  }
}

class ContainerHandle : public SandboxHandle {
 public:
  ContainerHandle(std::shared_ptr<ContainerSandbox::Impl> impl,
                  std::shared_ptr<ContainerState> state)
      : impl_(std::move(impl)), state_(std::move(state)) {}
  ~ContainerHandle() override {
    absl::Status killed = Kill();
    if (!killed.ok()) spdlog::warn("container {}: {}", state_->id, killed.ToString());
    impl_->Unregister(state_);
  }

  const std::string& id() const override { return state_->id; }

  absl::Status Pause() override {
    absl::MutexLock lock(&state_->mu);
    if (state_->done) return absl::FailedPreconditionError("sandbox has ended");
    if (state_->kill_requested || state_->limit != LimitHit::kNone) {
      return absl::FailedPreconditionError("sandbox is being killed");
    }
    if (state_->paused) return absl::OkStatus();
    VAULT_RETURN_IF_ERROR(state_->cgroup->Freeze());
    state_->paused = true;
    state_->paused_at = absl::Now();
    return absl::OkStatus();
  }

  absl::Status Resume() override {
    absl::MutexLock lock(&state_->mu);
    if (state_->done) return absl::FailedPreconditionError("sandbox has ended");
    if (!state_->paused) return absl::OkStatus();
    VAULT_RETURN_IF_ERROR(state_->cgroup->Thaw());
    state_->paused = false;
    state_->deadline += absl::Now() - state_->paused_at;
    return absl::OkStatus();
  }

  void RestartWallClock() override {
    absl::MutexLock lock(&state_->mu);
    if (state_->done) return;
    state_->deadline = absl::Now() + state_->limits.wall_time;
    if (state_->paused) state_->paused_at = absl::Now();
  }

  void SetWallTime(absl::Duration limit) override {
    {
      absl::MutexLock lock(&state_->mu);
      if (state_->done) return;
      state_->limits.wall_time = limit;
      state_->deadline = absl::Now() + limit;
      if (state_->paused) state_->paused_at = absl::Now();
    }
    impl_->Wake();
  }

  absl::Status Kill() override {
    {
      absl::MutexLock lock(&state_->mu);
      if (state_->done) return absl::OkStatus();
    }
    impl_->Signal(state_, LimitHit::kNone, /*requested=*/true);
    absl::StatusOr<ExitInfo> exit = Wait(absl::Seconds(10));
    if (!exit.ok()) {
      return absl::InternalError(absl::StrCat(
          "container ", state_->id, " did not end after SIGKILL: ", exit.status().message()));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<ExitInfo> Wait(absl::Duration timeout) override {
    absl::MutexLock lock(&state_->mu);
    state_->mu.AwaitWithTimeout(absl::Condition(&state_->done), timeout);
    if (!state_->done) return absl::DeadlineExceededError("sandbox still running");
    return state_->exit;
  }

  absl::StatusOr<Usage> GetUsage() override {
    {
      absl::MutexLock lock(&state_->mu);
      if (state_->done) return state_->exit.final_usage;
    }
    Usage usage;
    VAULT_ASSIGN_OR_RETURN(CgroupReadings readings, state_->cgroup->Read());
    usage.memory_current_bytes = readings.memory_current;
    usage.memory_peak_bytes = readings.memory_peak;
    usage.cpu_time = absl::Nanoseconds(readings.cpu_usage_ns);
    usage.processes = readings.pids_current;
    WorkUsage(state_->work_fd.get(), usage);
    return usage;
  }

  absl::StatusOr<uint64_t> GetWorkBytes() override {
    {
      absl::MutexLock lock(&state_->mu);
      if (state_->done) return state_->exit.final_usage.work_bytes;
    }
    Usage usage;
    WorkUsage(state_->work_fd.get(), usage);
    return usage.work_bytes;
  }

  bool paused() const override {
    absl::MutexLock lock(&state_->mu);
    return state_->paused;
  }

  absl::StatusOr<std::string> ReadWorkFile(const std::string& relative_path,
                                           size_t max_bytes) override {
    return internal::ReadWorkFile(state_->work_fd.get(), relative_path, max_bytes);
  }

  absl::StatusOr<CopyStats> CopyWorkDirTo(const std::string& host_dir) override {
    {
      absl::MutexLock lock(&state_->mu);
      if (!state_->done) {
        return absl::FailedPreconditionError("copy the work directory after the sandbox ended");
      }
    }
    CopyStats stats;
    VAULT_RETURN_IF_ERROR(internal::CopyWorkDir(state_->work_fd.get(), host_dir,
                                                state_->limits.storage_bytes, stats));
    return stats;
  }

 private:
  std::shared_ptr<ContainerSandbox::Impl> impl_;
  std::shared_ptr<ContainerState> state_;
};

}  // namespace

std::unique_ptr<SandboxHandle> NewContainerHandle(std::shared_ptr<ContainerSandbox::Impl> impl,
                                                  std::shared_ptr<ContainerState> state) {
  return std::make_unique<ContainerHandle>(std::move(impl), std::move(state));
}

void ContainerSandbox::Impl::Wake() {
  uint64_t one = 1;
  ssize_t ignored = write(wake_.get(), &one, sizeof one);
  (void)ignored;
}

void ContainerSandbox::Impl::Signal(const std::shared_ptr<ContainerState>& state, LimitHit limit,
                                    bool requested) {
  {
    // Once this is set, Pause refuses: no freeze lands after the kill.
    absl::MutexLock lock(&state->mu);
    if (state->done) return;
    if (requested) state->kill_requested = true;
    if (limit != LimitHit::kNone && state->limit == LimitHit::kNone) state->limit = limit;
  }
  // Every task, frozen or not (the cgroup thaws what it froze to kill it).
  absl::Status killed = state->cgroup->KillAll();
  if (!killed.ok()) spdlog::warn("container {}: {}", state->id, killed.ToString());
}

void ContainerSandbox::Impl::Unregister(const std::shared_ptr<ContainerState>& state) {
  absl::MutexLock lock(&mu_);
  {
    absl::MutexLock state_lock(&state->mu);
    if (!state->done) {
      state->orphaned = true;  // Reap releases it and forgets it
      return;
    }
  }
  live_.erase(state->report.get());
}

// The report pipe reached its end: every process of the container is gone.
void ContainerSandbox::Impl::Reap(const std::shared_ptr<ContainerState>& state) {
  char buf[256];
  ssize_t n;
  while ((n = read(state->report.get(), buf, sizeof buf)) > 0) {
    if (state->report_text.size() < 4096) state->report_text.append(buf, static_cast<size_t>(n));
  }
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
  if (n < 0) spdlog::warn("container {}: read its report: {}", state->id, strerror(errno));
  epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, state->report.get(), nullptr);
  ExitInfo exit;
  char kind = 0;
  int value = 0;
  for (absl::string_view line : absl::StrSplit(state->report_text, '\n', absl::SkipEmpty())) {
    if (line.size() > 2 && (line[0] == 'E' || line[0] == 'S' || line[0] == 'X') &&
        absl::SimpleAtoi(line.substr(2), &value)) {
      kind = line[0];
    }
  }
  if (kind == 'E') {
    exit.exited = true;
    exit.exit_code = value;
  } else if (kind == 'S') {
    exit.signal = value;
  } else if (kind == 'X') {
    exit.exited = true;
    exit.exit_code = 127;
  } else {
    exit.signal = SIGKILL;  // the init itself was killed: by the vault, or the OOM killer
  }
  Usage& final_usage = exit.final_usage;
  uint64_t oom_kills = 0;
  absl::StatusOr<CgroupReadings> readings = state->cgroup->Read();
  if (readings.ok()) {
    final_usage.memory_peak_bytes = readings->memory_peak;
    final_usage.cpu_time = absl::Nanoseconds(readings->cpu_usage_ns);
    oom_kills = readings->oom_kills;
  }
  WorkUsage(state->work_fd.get(), final_usage);
  Release(state);

  state->mu.Lock();
  exit.killed = state->kill_requested;
  exit.limit = state->limit;
  if (exit.limit == LimitHit::kNone && !exit.exited) {
    // (No RLIMIT_CPU here: a SIGXCPU would be the agent's own, and says nothing.)
    if (exit.signal == SIGXFSZ) {
      exit.limit = LimitHit::kFileSize;
    } else if (exit.signal == SIGKILL && oom_kills > 0) {
      exit.limit = LimitHit::kMemory;
    }
  }
  exit.wall_time = absl::Now() - state->started;
  state->exit = exit;
  state->paused = false;
  state->done = true;
  state->mu.Unlock();
  if (state->on_exit) state->on_exit(exit);
  absl::MutexLock lock(&mu_);
  absl::MutexLock state_lock(&state->mu);
  if (state->orphaned) live_.erase(state->report.get());
}

void ContainerSandbox::Impl::EnforceLimits(const std::shared_ptr<ContainerState>& state,
                                           absl::Time now, absl::Time* next) {
  bool paused;
  absl::Time deadline;
  {
    absl::MutexLock lock(&state->mu);
    if (state->done) return;
    paused = state->paused;
    deadline = state->deadline;
  }
  if (paused) return;  // neither clock runs
  if (now >= deadline) {
    Signal(state, LimitHit::kWallTime, false);
    return;
  }
  *next = std::min(*next, deadline);
  if (now + kCpuPollInterval / 2 >= state->next_cpu_check) {
    const absl::Duration limit = absl::Seconds(static_cast<int64_t>(state->limits.cpu_seconds));
    absl::StatusOr<uint64_t> cpu_ns = state->cgroup->CpuUsageNs();
    if (cpu_ns.ok() && absl::Nanoseconds(*cpu_ns) > limit) {
      Signal(state, LimitHit::kCpuTime, false);
      return;
    }
    // As for posix sandboxes: the total cannot pass the limit before now + remaining / cpus.
    const absl::Duration remaining =
        cpu_ns.ok() ? limit - absl::Nanoseconds(*cpu_ns) : absl::ZeroDuration();
    state->next_cpu_check =
        now + std::clamp(remaining / (2 * cpus_), kCpuPollInterval, kCpuPollMax);
  }
  *next = std::min(*next, state->next_cpu_check);
}

void ContainerSandbox::Impl::SupervisorLoop() {
  for (;;) {
    std::vector<std::shared_ptr<ContainerState>> all;
    bool stopping;
    {
      absl::MutexLock lock(&mu_);
      stopping = stopping_;
      for (auto& [fd, state] : live_) all.push_back(state);
    }
    if (stopping) {
      for (const auto& state : all) {
        Signal(state, LimitHit::kNone, true);
        // The report pipe ends once the init is gone.
        fcntl(state->report.get(), F_SETFL, 0);
        Reap(state);
      }
      return;
    }
    const absl::Time now = absl::Now();
    absl::Time next = absl::InfiniteFuture();
    for (const auto& state : all) EnforceLimits(state, now, &next);
    int timeout_ms = -1;
    if (next != absl::InfiniteFuture()) {
      timeout_ms =
          static_cast<int>(std::max<int64_t>(1, absl::ToInt64Milliseconds(next - absl::Now()) + 1));
    }
    epoll_event events[64];
    const int n = epoll_wait(epoll_.get(), events, 64, timeout_ms);
    for (int i = 0; i < n; ++i) {
      if (events[i].data.fd == wake_.get()) {
        uint64_t value;
        ssize_t ignored = read(wake_.get(), &value, sizeof value);
        (void)ignored;
        continue;
      }
      std::shared_ptr<ContainerState> state;
      {
        absl::MutexLock lock(&mu_);
        auto it = live_.find(events[i].data.fd);
        if (it != live_.end()) state = it->second;
      }
      if (state != nullptr) Reap(state);
    }
  }
}

}  // namespace vault::sandbox
