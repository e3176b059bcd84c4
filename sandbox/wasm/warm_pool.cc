#include "sandbox/wasm/warm_pool.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <functional>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/fd_passing.h"
#include "common/file_util.h"
#include "spdlog/spdlog.h"
#include "vault/v1/wasm.pb.h"

namespace vault::sandbox::wasm {

// A warm sandbox's on_exit is bound when the sandbox is taken; one that ends before (killed at
// its wall-time limit while it waited, say) is only marked, and never handed out.
struct WarmPool::Relay {
  absl::Mutex mu;
  std::function<void(const ExitInfo&)> target ABSL_GUARDED_BY(mu);
  bool ended ABSL_GUARDED_BY(mu) = false;

  void Fire(const ExitInfo& exit) {
    std::function<void(const ExitInfo&)> to;
    {
      absl::MutexLock lock(&mu);
      ended = true;
      to = std::move(target);
    }
    if (to) to(exit);
  }
  // False when the sandbox has ended already.
  bool Bind(std::function<void(const ExitInfo&)> to) {
    absl::MutexLock lock(&mu);
    if (ended) return false;
    target = to ? std::move(to) : [](const ExitInfo&) {};
    return true;
  }
  bool Ended() {
    absl::MutexLock lock(&mu);
    return ended;
  }
  // Takes the binding back; false when the end was reported to it already.
  bool Unbind() {
    absl::MutexLock lock(&mu);
    if (ended) return false;
    target = nullptr;
    return true;
  }
};

namespace {

constexpr int kStartFds = 4;  // channel, stdout, stderr, module
constexpr absl::Duration kSettle = absl::Milliseconds(20);
// A warm sandbox waits under this wall-time limit; the agent's own is set when it is taken.
constexpr absl::Duration kWaitLimit = absl::Hours(24);

// What a warm sandbox must share with a spec to serve it: every limit but the wall time.
Limits ShapeOf(Limits limits) {
  limits.wall_time = kWaitLimit;
  return limits;
}

// The whole packet, the descriptors on its first byte.
absl::Status SendStart(int fd, const vault::v1::WasmStart& start, const int (&fds)[kStartFds]) {
  const std::string body = start.SerializeAsString();
  std::string packet(4, '\0');
  const uint32_t size = static_cast<uint32_t>(body.size());
  for (int i = 0; i < 4; ++i) packet[i] = static_cast<char>((size >> (8 * i)) & 0xff);
  packet += body;
  return common::SendWithFds(fd, packet, fds);
}

}  // namespace

WarmPool::WarmPool(Options options) : options_(std::move(options)) {
  if (options_.size > 0) filler_ = std::thread([this] { Fill(); });
}

WarmPool::~WarmPool() {
  SetCloneLock(nullptr);
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (filler_.joinable()) filler_.join();
}

void WarmPool::SetCloneLock(absl::Mutex* mu) {
  std::deque<Warm> killed;
  {
    absl::MutexLock lock(&mu_);
    clone_lock_ = mu;
    if (mu == nullptr) {
      mu_.Await(absl::Condition(
          +[](bool* cloning) { return !*cloning; }, &cloning_));
      killed.swap(idle_);
    }
  }
  // Destroying a handle kills its sandbox: done outside the lock.
}

size_t WarmPool::idle() const {
  absl::ReaderMutexLock lock(&mu_);
  return idle_.size();
}

bool WarmPool::Fits(const SandboxSpec& spec) const {
  return spec.program == options_.program && spec.read_only_dirs == options_.read_only_dirs &&
         spec.channel_fd >= 0 && spec.stdout_fd >= 0 && spec.stderr_fd >= 0 && spec.stdin_fd < 0 &&
         ShapeOf(spec.limits) == shape_;
}

std::unique_ptr<SandboxHandle> WarmPool::Take(const SandboxSpec& spec, int module_fd) {
  if (options_.size == 0 || module_fd < 0) return nullptr;
  while (true) {
    Warm warm;
    {
      absl::MutexLock lock(&mu_);
      if (!shaped_ || !Fits(spec) || idle_.empty()) return nullptr;
      warm = std::move(idle_.back());  // the newest: the least likely to have ended
      idle_.pop_back();
      not_before_ = absl::Now() + kSettle;  // the refill waits for this start
    }
    // The agent's wall-time limit from now on (it waited under a long one).
    warm.handle->SetWallTime(spec.limits.wall_time);
    if (!warm.relay->Bind(spec.on_exit)) continue;  // it ended while it waited
    vault::v1::WasmStart start;
    start.mutable_argv()->Assign(spec.argv.begin(), spec.argv.end());
    start.mutable_env()->Assign(spec.env.begin(), spec.env.end());
    const int fds[kStartFds] = {spec.channel_fd, spec.stdout_fd, spec.stderr_fd, module_fd};
    if (absl::Status sent = SendStart(warm.host_end.get(), start, fds); !sent.ok()) {
      spdlog::warn("wasm warm pool: a warm sandbox did not take its start packet: {}",
                   sent.ToString());
      // Its runner is gone. Unless its end has been reported to spec's on_exit already (then it is
      // spec's sandbox, ended at once), it is dropped and another tried.
      if (!warm.relay->Unbind()) return std::move(warm.handle);
      (void)warm.handle->Kill();
      continue;
    }
    return std::move(warm.handle);
  }
}

void WarmPool::Want(const Limits& limits) {
  if (options_.size == 0) return;
  const Limits shape = ShapeOf(limits);
  absl::MutexLock lock(&mu_);
  failed_ = false;
  if (!shaped_ || !(shape == shape_)) {
    shape_ = shape;
    shaped_ = true;
    // Killed by the filler, off the caller's path (a kill waits for the sandbox's end).
    for (Warm& w : idle_) doomed_.push_back(std::move(w));
    idle_.clear();
  }
  // Not while the agent just started is starting: the refill would take CPU from it.
  not_before_ = absl::Now() + kSettle;
}

absl::StatusOr<WarmPool::Warm> WarmPool::StartOne(const Limits& shape, absl::Mutex* clone_lock) {
  int pair[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) {
    return common::PosixError(errno, "socketpair");
  }
  common::UniqueFd host_end(pair[0]), guest_end(pair[1]);
  Warm warm;
  warm.relay = std::make_shared<Relay>();
  SandboxSpec spec;
  spec.program = options_.program;
  spec.argv = options_.argv;
  spec.read_only_dirs = options_.read_only_dirs;
  spec.channel_fd = guest_end.get();
  spec.limits = shape;  // its wall time is kWaitLimit until it is taken
  spec.name = "wasm-warm";
  spec.on_exit = [relay = warm.relay](const ExitInfo& exit) { relay->Fire(exit); };
  absl::StatusOr<std::unique_ptr<SandboxHandle>> handle;
  {
    absl::ReaderMutexLock no_writes(clone_lock);
    handle = options_.posix->Spawn(spec);
  }
  if (!handle.ok()) return handle.status();
  warm.handle = *std::move(handle);
  warm.host_end = std::move(host_end);
  return warm;
}

void WarmPool::Fill() {
  while (true) {
    std::deque<Warm> doomed;  // destroyed (killed) at the end of the pass, outside the lock
    Limits shape;
    absl::Mutex* clone_lock = nullptr;
    absl::Duration settle = absl::ZeroDuration();
    {
      absl::MutexLock lock(&mu_);
      auto wanted = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || !doomed_.empty() ||
               (shaped_ && !failed_ && clone_lock_ != nullptr && idle_.size() < options_.size);
      };
      // Awake now and then to let go of sandboxes that ended while they waited (a crash).
      mu_.AwaitWithTimeout(absl::Condition(&wanted), absl::Seconds(5));
      if (stopping_) return;
      for (auto it = idle_.begin(); it != idle_.end();) {
        if (it->relay->Ended()) {
          doomed_.push_back(std::move(*it));
          it = idle_.erase(it);
        } else {
          ++it;
        }
      }
      if (!doomed_.empty()) {
        doomed.swap(doomed_);
        continue;  // killed outside the lock, then wanted again
      }
      if (!wanted()) continue;
      settle = not_before_ - absl::Now();
      if (settle <= absl::ZeroDuration()) {
        shape = shape_;
        clone_lock = clone_lock_;
        cloning_ = true;
      }
    }
    if (clone_lock == nullptr) {
      if (doomed.empty()) absl::SleepFor(settle);
      continue;
    }
    absl::StatusOr<Warm> warm = StartOne(shape, clone_lock);
    std::optional<Warm> dropped;  // no longer wanted: killed outside the lock
    {
      absl::MutexLock lock(&mu_);
      cloning_ = false;
      if (!warm.ok()) {
        spdlog::warn("wasm warm pool: could not start a warm sandbox (agents start cold): {}",
                     warm.status().ToString());
        failed_ = true;
      } else if (stopping_ || clone_lock_ == nullptr || !(shape == shape_)) {
        dropped = *std::move(warm);
      } else {
        idle_.push_back(*std::move(warm));
      }
    }
  }
}

}  // namespace vault::sandbox::wasm
