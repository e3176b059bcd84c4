#include "agent/channel_reactor.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "agent/connection.h"
#include "common/file_util.h"
#include "common/log_fields.h"
#include "spdlog/spdlog.h"

namespace vault::agent {

absl::StatusOr<std::unique_ptr<ChannelReactor>> ChannelReactor::Start(Handler* handler,
                                                                      absl::Duration poll_window) {
  std::unique_ptr<ChannelReactor> r(new ChannelReactor(handler, poll_window));
  r->epoll_ = common::UniqueFd(epoll_create1(EPOLL_CLOEXEC));
  if (!r->epoll_.valid()) return common::PosixError(errno, "epoll_create1");
  r->wake_ = common::UniqueFd(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!r->wake_.valid()) return common::PosixError(errno, "eventfd");
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = 0;  // token 0: the wake-up
  if (epoll_ctl(r->epoll_.get(), EPOLL_CTL_ADD, r->wake_.get(), &ev) != 0) {
    return common::PosixError(errno, "epoll_ctl");
  }
  ChannelReactor* self = r.get();
  r->thread_ = std::thread([self] { self->Loop(); });
  return r;
}

ChannelReactor::~ChannelReactor() { Stop(); }

void ChannelReactor::Stop() {
  quit_.store(true);
  uint64_t one = 1;
  if (wake_.valid()) (void)!write(wake_.get(), &one, sizeof one);
  if (thread_.joinable()) thread_.join();
}

uint64_t ChannelReactor::Register(const std::shared_ptr<LiveAgent>& live, int fd, bool output) {
  uint64_t token;
  {
    absl::MutexLock lock(&mu_);
    token = next_token_++;
    registrations_[token] = Registration{live, output};
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = token;
  if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) {
    common::LogAgent(spdlog::level::err, live->id, "agent {}: epoll_ctl: {}", live->id,
                     strerror(errno));
  }
  return token;
}

void ChannelReactor::Unregister(uint64_t token) {
  absl::MutexLock lock(&mu_);
  registrations_.erase(token);
  // The descriptor leaves the epoll set when it is closed (it is never dup'ed).
}

void ChannelReactor::WantWrite(uint64_t token, int fd) {
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLOUT;
  ev.data.u64 = token;
  (void)epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, fd, &ev);
}

void ChannelReactor::Forget(int fd) { (void)epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd, nullptr); }

void ChannelReactor::Loop() {
  epoll_event events[64];
  // Agents whose frames were left for a later round: the socket may be empty by then, so
  // level-triggered epoll would not report them again.
  std::vector<std::shared_ptr<LiveAgent>> again, next_again;
  // After a round that answered frames the next request (or the next message of a conversation)
  // usually follows within microseconds: poll for it a moment before sleeping (BusyPoll). An idle
  // reactor sleeps in epoll_wait and costs nothing.
  BusyPoll busy(poll_window_);
  uint64_t frames = 0;
  uint64_t frames_before = 0;
  while (!quit_.load()) {
    for (const std::shared_ptr<LiveAgent>& live : again) {
      if (handler_->OnReadable(live, &frames)) next_again.push_back(live);
    }
    again.swap(next_again);
    next_again.clear();
    const bool handled = frames != frames_before;
    frames_before = frames;
    int n = busy.EpollWait(epoll_.get(), events, 64, handled, again.empty() ? -1 : 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      spdlog::error("agent reactor: epoll_wait: {}", strerror(errno));
      return;
    }
    for (int i = 0; i < n; ++i) {
      uint64_t token = events[i].data.u64;
      if (token == 0) {
        uint64_t v;
        (void)!read(wake_.get(), &v, sizeof v);
        continue;
      }
      std::shared_ptr<LiveAgent> live;
      bool output = false;
      {
        absl::MutexLock lock(&mu_);
        auto it = registrations_.find(token);
        if (it == registrations_.end()) continue;
        live = it->second.live.lock();
        output = it->second.output;
      }
      if (live == nullptr) continue;
      if (output) {
        handler_->OnOutput(live);
        if (events[i].events & (EPOLLHUP | EPOLLERR)) {
          // The pipe's writers are gone; stop watching it (the exit handler reads the rest).
          absl::MutexLock lock(&live->mu);
          if (live->out_fd.valid()) Forget(live->out_fd.get());
        }
        continue;
      }
      std::shared_ptr<AgentConnection> conn;
      {
        absl::MutexLock lock(&live->mu);
        conn = live->conn;
      }
      if (conn == nullptr) continue;
      if (events[i].events & EPOLLOUT) {
        (void)conn->Flush();
        if (!conn->wants_write()) {
          epoll_event ev{};
          ev.events = EPOLLIN;
          ev.data.u64 = token;
          epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, conn->fd(), &ev);
          if (conn->wants_write()) WantWrite(token, conn->fd());  // a Send raced with us
        }
      }
      if ((events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) &&
          handler_->OnReadable(live, &frames) &&
          std::find(again.begin(), again.end(), live) == again.end()) {
        again.push_back(live);
      }
    }
  }
  spdlog::info("agent reactor: busy-polled {} times ({} us window), {} found the next event",
               busy.spins(), absl::ToInt64Microseconds(busy.window()), busy.hits());
}

}  // namespace vault::agent
