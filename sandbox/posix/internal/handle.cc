// LinuxSandbox's SandboxHandle: pause and resume (the cgroup freezer), kill, wait, usage and the
// sandbox's work directory.
#include <errno.h>
#include <signal.h>
#include <sys/statfs.h>

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/status_macros.h"
#include "sandbox/posix/cgroup.h"
#include "sandbox/posix/internal/linux_sandbox_impl.h"
#include "sandbox/posix/internal/work_dir.h"
#include "sandbox/sandbox.h"
#include "spdlog/spdlog.h"

namespace vault::sandbox {
namespace {

class LinuxSandboxHandle : public SandboxHandle {
 public:
  LinuxSandboxHandle(std::shared_ptr<LinuxSandbox::Impl> impl, std::shared_ptr<SandboxState> state)
      : impl_(std::move(impl)), state_(std::move(state)) {}
  ~LinuxSandboxHandle() override {
    absl::Status killed = Kill();
    if (!killed.ok()) spdlog::warn("sandbox {}: {}", state_->id, killed.ToString());
    impl_->Unregister(state_);
  }

  const std::string& id() const override { return state_->id; }

  absl::Status Pause() override {
    absl::MutexLock lock(&state_->mu);
    if (state_->done) return absl::FailedPreconditionError("sandbox has ended");
    if (state_->kill_requested || state_->limit != LimitHit::kNone) {
      return absl::FailedPreconditionError("sandbox is being killed");
    }
    if (state_->cgroup == nullptr) {
      return absl::FailedPreconditionError("pause needs the cgroup freezer, which is not active");
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
    // Time spent paused does not count against the wall-time limit.
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
    absl::Time deadline;
    {
      absl::MutexLock lock(&state_->mu);
      if (state_->done) return;
      state_->limits.wall_time = limit;
      deadline = state_->deadline = absl::Now() + limit;
      if (state_->paused) state_->paused_at = absl::Now();
    }
    impl_->ScanBy(deadline);  // the supervisor may be asleep until a later one
  }

  absl::Status Kill() override {
    {
      absl::MutexLock lock(&state_->mu);
      if (state_->done) return absl::OkStatus();
    }
    impl_->Signal(state_, LimitHit::kNone, /*requested=*/true);
    absl::StatusOr<ExitInfo> exit = Wait(absl::Seconds(10));
    if (!exit.ok())
      return absl::InternalError(absl::StrCat(
          "sandbox ", state_->id, " did not end after SIGKILL: ", exit.status().message()));
    return absl::OkStatus();
  }

  absl::Status Interrupt() override {
    pid_t init;
    {
      absl::MutexLock lock(&state_->mu);
      if (state_->done) return absl::FailedPreconditionError("sandbox has ended");
      if (state_->cgroup == nullptr) {
        return absl::FailedPreconditionError("an interrupt needs the sandbox's cgroup");
      }
      init = state_->pid;
    }
    VAULT_ASSIGN_OR_RETURN(std::set<pid_t> tasks, state_->cgroup->Tasks());
    // (The init ignores SIGUSR1: it has no handler, and it is its PID namespace's init.)
    for (pid_t pid : tasks) {
      if (pid != init) (void)kill(pid, SIGUSR1);
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
    if (state_->cgroup != nullptr) {
      VAULT_ASSIGN_OR_RETURN(CgroupReadings readings, state_->cgroup->Read());
      usage.memory_current_bytes = readings.memory_current;
      usage.memory_peak_bytes = readings.memory_peak;
      usage.cpu_time = absl::Nanoseconds(readings.cpu_usage_ns);
      usage.processes = readings.pids_current;
    }
    struct statfs fs;
    if (fstatfs(state_->work_fd.get(), &fs) == 0) {
      usage.work_bytes = (fs.f_blocks - fs.f_bfree) * static_cast<uint64_t>(fs.f_bsize);
      usage.work_inodes = fs.f_files - fs.f_ffree;
    }
    return usage;
  }

  absl::StatusOr<uint64_t> GetWorkBytes() override {
    {
      absl::MutexLock lock(&state_->mu);
      if (state_->done) return state_->exit.final_usage.work_bytes;
    }
    struct statfs fs;
    if (fstatfs(state_->work_fd.get(), &fs) != 0) return Errno(errno, "statfs /work");
    return (fs.f_blocks - fs.f_bfree) * static_cast<uint64_t>(fs.f_bsize);
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
  // Keeps the supervisor alive while a handle exists, even past the LinuxSandbox.
  std::shared_ptr<LinuxSandbox::Impl> impl_;
  std::shared_ptr<SandboxState> state_;
};

}  // namespace

std::unique_ptr<SandboxHandle> NewLinuxSandboxHandle(std::shared_ptr<LinuxSandbox::Impl> impl,
                                                     std::shared_ptr<SandboxState> state) {
  return std::make_unique<LinuxSandboxHandle>(std::move(impl), std::move(state));
}

}  // namespace vault::sandbox
