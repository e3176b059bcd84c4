#include "sandbox/container/runtime_command.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/unique_fd.h"

namespace vault::sandbox {
namespace {

using common::UniqueFd;

constexpr size_t kMaxOutput = 64 * 1024;

absl::Status Errno(int err, const std::string& what) { return absl::ErrnoToStatus(err, what); }

}  // namespace

absl::StatusOr<RuntimeResult> RunRuntime(const std::vector<std::string>& argv,
                                         const std::vector<std::pair<int, int>>& fds,
                                         absl::Duration timeout) {
  if (argv.empty() || argv[0].empty() || argv[0][0] != '/') {
    return absl::InvalidArgumentError("the runtime's path must be absolute");
  }
  bool mapped[3] = {false, false, false};
  int highest = 2;
  for (const auto& [inside, host] : fds) {
    if (inside < 0 || host < 0) return absl::InvalidArgumentError("bad descriptor mapping");
    if (inside < 3) mapped[inside] = true;
    highest = std::max(highest, inside);
  }
  UniqueFd devnull(open("/dev/null", O_RDWR | O_CLOEXEC));
  if (devnull.get() < 0) return Errno(errno, "open /dev/null");
  int out_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0) return Errno(errno, "pipe2");
  UniqueFd out_read(out_pipe[0]), out_write(out_pipe[1]);
  // Every source out of the way of every target first (a source may sit at a target's number).
  std::vector<std::pair<int, UniqueFd>> moved;
  auto move = [&](int inside, int host) -> absl::Status {
    UniqueFd high(fcntl(host, F_DUPFD_CLOEXEC, highest + 1));
    if (high.get() < 0) return Errno(errno, "dup");
    moved.emplace_back(inside, std::move(high));
    return absl::OkStatus();
  };
  for (const auto& [inside, host] : fds) {
    if (absl::Status s = move(inside, host); !s.ok()) return s;
  }
  if (!mapped[0]) {
    if (absl::Status s = move(0, devnull.get()); !s.ok()) return s;
  }
  for (int i : {1, 2}) {
    if (mapped[i]) continue;
    if (absl::Status s = move(i, out_write.get()); !s.ok()) return s;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  for (const auto& [inside, high] : moved) {
    posix_spawn_file_actions_adddup2(&actions, high.get(), inside);
  }
  posix_spawn_file_actions_addclosefrom_np(&actions, highest + 1);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  char path_env[] = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
  char* env[] = {path_env, nullptr};
  pid_t pid = -1;
  const int spawned = posix_spawn(&pid, argv[0].c_str(), &actions, &attr, args.data(), env);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  moved.clear();
  out_write.Reset();
  if (spawned != 0) return Errno(spawned, absl::StrCat("run ", argv[0]));
  UniqueFd pidfd(static_cast<int>(syscall(SYS_pidfd_open, pid, 0)));
  RuntimeResult result;
  if (pidfd.get() < 0) {
    // No pidfd (a kernel before 5.3): wait without a deadline.
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return result;
  }
  const absl::Time deadline = absl::Now() + timeout;
  bool timed_out = false;
  bool out_open = true;
  for (;;) {
    pollfd polls[2] = {{pidfd.get(), POLLIN, 0}, {out_read.get(), POLLIN, 0}};
    const int64_t left_ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (left_ms <= 0) {
      timed_out = true;
      kill(pid, SIGKILL);
      break;
    }
    const int n = poll(polls, out_open ? 2 : 1, static_cast<int>(std::min<int64_t>(left_ms, 1000)));
    if (n < 0 && errno != EINTR) break;
    if (out_open && (polls[1].revents & (POLLIN | POLLHUP)) != 0) {
      char buf[4096];
      const ssize_t got = read(out_read.get(), buf, sizeof buf);
      if (got > 0) {
        if (result.output.size() < kMaxOutput) result.output.append(buf, static_cast<size_t>(got));
      } else if (got == 0 || errno != EINTR) {
        out_open = false;
      }
      continue;
    }
    if ((polls[0].revents & POLLIN) != 0) break;
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) {
    return absl::DeadlineExceededError(absl::StrCat(argv[0], " ", argv.size() > 1 ? argv[1] : "",
                                                    " ran past ", absl::FormatDuration(timeout),
                                                    " and was killed"));
  }
  // What it wrote just before exiting.
  if (out_open) {
    char buf[4096];
    ssize_t got;
    fcntl(out_read.get(), F_SETFL, O_NONBLOCK);
    while ((got = read(out_read.get(), buf, sizeof buf)) > 0 && result.output.size() < kMaxOutput) {
      result.output.append(buf, static_cast<size_t>(got));
    }
  }
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

}  // namespace vault::sandbox
