// The supervisor thread: it clones (for Spawn), reaps the sandboxes that ended, reads their last
// report and usage, and enforces the wall-time and CPU limits; Signal kills a sandbox.
#include <errno.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "sandbox/posix/cgroup.h"
#include "sandbox/posix/internal/linux_sandbox_impl.h"
#include "spdlog/spdlog.h"

namespace vault::sandbox {
namespace {

// The longest wait between two CPU readings of a sandbox far from its limit (see SupervisorLoop).
constexpr absl::Duration kCpuPollMax = absl::Seconds(5);

}  // namespace

void LinuxSandbox::Impl::ScanBy(absl::Time at) {
  {
    absl::MutexLock lock(&mu_);
    scan_at_ = std::min(scan_at_, at);
  }
  Wake();
}

void LinuxSandbox::Impl::Wake() {
  uint64_t one = 1;
  ssize_t ignored = write(wake_.get(), &one, sizeof one);
  (void)ignored;
}

void LinuxSandbox::Impl::Signal(const std::shared_ptr<SandboxState>& state, LimitHit limit,
                                bool requested) {
  bool thaw = false;
  {
    // Once this is set, Pause refuses: a freeze can no longer land after the thaw below.
    absl::MutexLock lock(&state->mu);
    if (state->done) return;
    if (requested) state->kill_requested = true;
    if (limit != LimitHit::kNone && state->limit == LimitHit::kNone) state->limit = limit;
    thaw = state->paused;
  }
  // SIGKILL to the sandbox's PID 1 makes the kernel kill every process of its PID namespace.
  SendSignal(state->pidfd.get(), SIGKILL, nullptr, 0);
  if (thaw && state->cgroup != nullptr) {
    (void)state->cgroup->Thaw();  // frozen tasks die only once thawed
  }
}

void LinuxSandbox::Impl::Unregister(const std::shared_ptr<SandboxState>& state) {
  absl::MutexLock lock(&mu_);
  if (live_.erase(state->pidfd.get()) > 0 && state->missing_from_epoll) --missing_from_epoll_;
}

void LinuxSandbox::Impl::Reap(const std::shared_ptr<SandboxState>& state) {
  siginfo_t info{};
  rusage usage{};
  if (syscall(SYS_waitid, P_PIDFD, state->pidfd.get(), &info, WEXITED | WNOHANG, &usage) != 0 ||
      info.si_pid == 0) {
    return;  // not yet
  }
  epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, state->pidfd.get(), nullptr);
  ReleaseCloneStack(*state);
  // The init's last report.
  std::string report;
  if (state->status_fd.get() >= 0) {
    char buf[128];
    ssize_t n;
    while ((n = read(state->status_fd.get(), buf, sizeof buf)) > 0)
      report.append(buf, static_cast<size_t>(n));
  }
  ExitInfo exit;
  char kind = 0;
  int value = 0;
  for (absl::string_view line : absl::StrSplit(report, '\n', absl::SkipEmpty())) {
    if (line.size() > 2 && (line[0] == 'E' || line[0] == 'S') &&
        absl::SimpleAtoi(line.substr(2), &value)) {
      kind = line[0];
    }
  }
  if (kind == 'E') {
    exit.exited = true;
    exit.exit_code = value;
  } else if (kind == 'S') {
    exit.signal = value;
  } else if (info.si_code == CLD_EXITED) {
    // The init itself failed (it reports why on its pipe with "X"); treat as the program's.
    exit.exited = true;
    exit.exit_code = info.si_status;
  } else {
    exit.signal = info.si_status;  // the init was killed: by us, or by the OOM killer
  }
  Usage& final_usage = exit.final_usage;
  final_usage.cpu_time =
      absl::DurationFromTimeval(usage.ru_utime) + absl::DurationFromTimeval(usage.ru_stime);
  final_usage.memory_peak_bytes = static_cast<uint64_t>(usage.ru_maxrss) * 1024;
  uint64_t oom_kills = 0;
  if (state->cgroup != nullptr) {
    absl::StatusOr<CgroupReadings> readings = state->cgroup->Read();
    if (readings.ok()) {
      // The cgroup's peak is what the limit measures (ru_maxrss also counts shared file pages).
      final_usage.memory_peak_bytes = readings->memory_peak;
      final_usage.cpu_time =
          std::max(final_usage.cpu_time, absl::Nanoseconds(readings->cpu_usage_ns));
      oom_kills = readings->oom_kills;
    }
    absl::Status killed = state->cgroup->KillAll();
    if (!killed.ok()) spdlog::warn("sandbox {}: {}", state->id, killed.ToString());
    absl::Status removed = state->cgroup->Remove();
    if (!removed.ok()) spdlog::warn("sandbox {}: {}", state->id, removed.ToString());
  }
  struct statfs fs;
  if (state->work_fd.get() >= 0 && fstatfs(state->work_fd.get(), &fs) == 0) {
    final_usage.work_bytes = (fs.f_blocks - fs.f_bfree) * static_cast<uint64_t>(fs.f_bsize);
    final_usage.work_inodes = fs.f_files - fs.f_ffree;
  }
  host_ids_->Release(state->uid_slot);

  state->mu.Lock();
  exit.killed = state->kill_requested;
  exit.limit = state->limit;
  if (exit.limit == LimitHit::kNone && !exit.exited) {
    if (exit.signal == SIGXCPU) {
      exit.limit = LimitHit::kCpuTime;
    } else if (exit.signal == SIGXFSZ) {
      exit.limit = LimitHit::kFileSize;
    } else if (exit.signal == SIGKILL && oom_kills > 0) {
      exit.limit = LimitHit::kMemory;
    } else if (exit.signal == SIGKILL && !exit.killed &&
               final_usage.cpu_time >=
                   absl::Seconds(static_cast<int64_t>(state->limits.cpu_seconds))) {
      exit.limit = LimitHit::kCpuTime;  // RLIMIT_CPU's hard limit
    }
  }
  exit.wall_time = absl::Now() - state->started;
  state->exit = exit;
  state->paused = false;
  state->done = true;
  state->mu.Unlock();
  if (state->on_exit) state->on_exit(exit);
}

// One thread clones, reaps and enforces the wall-time and CPU limits. A wake-up (a clone
// request, a registration, an exited sandbox's pidfd) costs work for that sandbox only; the
// scan of every live sandbox (deadlines, CPU readings, sandboxes missing from epoll) runs at the
// earliest deadline or next CPU reading, and every kCpuPollInterval while a sandbox is missing
// from epoll.
void LinuxSandbox::Impl::SupervisorLoop() {
  std::vector<int> ready;  // pidfds epoll reported
  for (;;) {
    std::vector<std::shared_ptr<SandboxState>> work;
    bool stopping;
    bool scan;
    const absl::Time now = absl::Now();
    {
      absl::MutexLock lock(&mu_);
      // Clone requests first: they are what a caller is blocked on.
      while (!clone_queue_.empty()) {
        CloneRequest* request = clone_queue_.front();
        clone_queue_.pop_front();
        mu_.Unlock();
        DoClone(*request);
        mu_.Lock();
        request->finished = true;
      }
      stopping = stopping_;
      scan = stopping || now >= scan_at_;
      if (scan) {
        scan_at_ = absl::InfiniteFuture();  // registrations from here on lower it again
        work.reserve(live_.size());
        for (auto& [fd, state] : live_) work.push_back(state);
        std::sort(ready.begin(), ready.end());
      } else {
        for (int fd : ready) {
          auto it = live_.find(fd);
          if (it != live_.end()) work.push_back(it->second);
        }
      }
    }
    const std::vector<int> reported = std::exchange(ready, {});
    absl::Time next = absl::InfiniteFuture();
    for (const auto& state : work) {
      bool done, paused;
      absl::Time deadline;
      {
        absl::MutexLock lock(&state->mu);
        done = state->done;
        paused = state->paused;
        deadline = state->deadline;
      }
      if (done) continue;
      if (stopping) {
        Signal(state, LimitHit::kNone, true);
        continue;
      }
      // (A scan reaps only what epoll reported, or cannot report: not a waitid per sandbox.)
      if (!scan || state->missing_from_epoll ||
          std::binary_search(reported.begin(), reported.end(), state->pidfd.get())) {
        Reap(state);
        absl::MutexLock lock(&state->mu);
        if (state->done) continue;
      }
      if (!scan) continue;
      if (!paused && now >= deadline) {
        Signal(state, LimitHit::kWallTime, false);
        continue;
      }
      if (!paused) next = std::min(next, deadline);
      if (state->cgroup != nullptr) {
        // (Due within half a poll interval: read now, with the others, rather than scan again.)
        if (now + kCpuPollInterval / 2 >= state->next_cpu_check) {
          const absl::Duration limit =
              absl::Seconds(static_cast<int64_t>(state->limits.cpu_seconds));
          absl::StatusOr<uint64_t> cpu_ns = state->cgroup->CpuUsageNs();
          if (cpu_ns.ok() && absl::Nanoseconds(*cpu_ns) > limit) {
            Signal(state, LimitHit::kCpuTime, false);
            continue;
          }
          // Its processes use at most every CPU of the machine, so its total cannot pass the
          // limit before now + remaining / cpus: the next reading comes at half that (never
          // sooner than kCpuPollInterval, never later than kCpuPollMax). Near the limit that is
          // every kCpuPollInterval, as for every sandbox before; an idle agent far from it is read
          // every few seconds instead (1,000 idle agents: 10,000 cgroup reads a second before).
          const absl::Duration remaining =
              cpu_ns.ok() ? limit - absl::Nanoseconds(*cpu_ns) : absl::ZeroDuration();
          state->next_cpu_check =
              now + std::clamp(remaining / (2 * cpus_), kCpuPollInterval, kCpuPollMax);
        }
        next = std::min(next, state->next_cpu_check);
      }
    }
    if (stopping) {
      // Reap what was killed, then leave.
      for (const auto& state : work) {
        siginfo_t info;
        syscall(SYS_waitid, P_PIDFD, state->pidfd.get(), &info, WEXITED, nullptr);
        absl::MutexLock lock(&state->mu);
        if (!state->done) {
          state->exit.signal = SIGKILL;
          state->exit.killed = true;
          state->done = true;
        }
      }
      return;
    }
    absl::Time wake_at;
    {
      absl::MutexLock lock(&mu_);
      if (scan) {
        if (missing_from_epoll_ > 0) next = std::min(next, now + kCpuPollInterval);
        scan_at_ = std::min(scan_at_, next);
      }
      wake_at = scan_at_;
    }
    int timeout_ms = -1;
    if (wake_at != absl::InfiniteFuture()) {
      timeout_ms = static_cast<int>(
          std::max<int64_t>(1, absl::ToInt64Milliseconds(wake_at - absl::Now()) + 1));
    }
    epoll_event events[64];
    int n = epoll_wait(epoll_.get(), events, 64, timeout_ms);
    for (int i = 0; i < n; ++i) {
      if (events[i].data.fd == wake_.get()) {
        uint64_t value;
        ssize_t ignored = read(wake_.get(), &value, sizeof value);
        (void)ignored;
      } else {
        ready.push_back(events[i].data.fd);
      }
    }
  }
}

}  // namespace vault::sandbox
