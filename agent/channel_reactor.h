// agent/channel_reactor: one thread that reads every agent's channel and output pipe (epoll;
// nothing blocks it). What arrives goes to a Handler (the runtime): frames to the capability
// proxy, output lines to the agent's log. After a round that handled frames it polls a moment
// before it sleeps (BusyPoll, agent/connection.h): the next request usually follows within
// microseconds. An agent whose frames were left for a later round (fairness: a bounded number per
// agent per round) gets its turn first in the next one.
//
//   VAULT_ASSIGN_OR_RETURN(auto reactor, ChannelReactor::Start(&handler, poll_window));
//   live->conn_token = reactor->Register(live, live->conn->fd(), /*output=*/false);
//   reactor->WantWrite(live->conn_token, live->conn->fd());   // a frame waits for room
//   reactor->Unregister(token);
//   reactor->Stop();
//
// Thread-safety: thread-safe. The handler is called on the reactor's thread only.
#ifndef VAULT_AGENT_CHANNEL_REACTOR_H_
#define VAULT_AGENT_CHANNEL_REACTOR_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "agent/internal/live_agent.h"
#include "common/unique_fd.h"

namespace vault::agent {

class ChannelReactor {
 public:
  class Handler {
   public:
    virtual ~Handler() = default;
    // The agent's channel is readable (or ended): reads and handles what it can, adding the
    // frames it handled to `*frames`. True when frames were left for a later round.
    virtual bool OnReadable(const std::shared_ptr<LiveAgent>& live, uint64_t* frames) = 0;
    // The agent's output pipe is readable.
    virtual void OnOutput(const std::shared_ptr<LiveAgent>& live) = 0;
  };

  static absl::StatusOr<std::unique_ptr<ChannelReactor>> Start(Handler* handler,
                                                               absl::Duration poll_window);
  ChannelReactor(const ChannelReactor&) = delete;
  ChannelReactor& operator=(const ChannelReactor&) = delete;
  ~ChannelReactor();  // Stop()

  // Watches `fd` for input on behalf of `live` (its channel, or with `output` its output pipe).
  // The token names the registration; the descriptor leaves the set when it is closed.
  uint64_t Register(const std::shared_ptr<LiveAgent>& live, int fd, bool output);
  void Unregister(uint64_t token);
  // Watches the channel `fd` (registered as `token`) for room to write too, until its
  // connection has nothing left to flush.
  void WantWrite(uint64_t token, int fd);
  // Stops watching `fd` (an ended stream).
  void Forget(int fd);
  // Ends the thread. Idempotent.
  void Stop();

 private:
  ChannelReactor(Handler* handler, absl::Duration poll_window)
      : handler_(handler), poll_window_(poll_window) {}
  void Loop();

  // Constant after Start.
  Handler* const handler_;
  const absl::Duration poll_window_;
  common::UniqueFd epoll_;
  common::UniqueFd wake_;  // eventfd: Stop's wake-up

  absl::Mutex mu_;
  struct Registration {
    std::weak_ptr<LiveAgent> live;
    bool output = false;
  };
  absl::flat_hash_map<uint64_t, Registration> registrations_ ABSL_GUARDED_BY(mu_);
  uint64_t next_token_ ABSL_GUARDED_BY(mu_) = 1;

  std::atomic<bool> quit_{false};
  std::thread thread_;
};

}  // namespace vault::agent

#endif  // VAULT_AGENT_CHANNEL_REACTOR_H_
