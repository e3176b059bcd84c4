// integration-tests: a TCP proxy the test controls, to cut a link between two real processes.
// It listens on 127.0.0.1 (a port the kernel picks) and forwards every connection to one
// upstream address; the test can cut the link (every connection is reset, new ones are reset as
// soon as they are accepted), heal it, land the cut in the middle of a stream (after the next N
// bytes from the client), delay the bytes of either direction (so that a cut can catch a
// message while the proxy still holds it), and corrupt a direction: flip one byte in every N.
//
//   absl::StatusOr<std::unique_ptr<TcpProxy>> p = TcpProxy::Start(b.address);
//   // write (*p)->address() as b's member address in a's vault.conf, start a's vaultd
//   (*p)->Cut();       // a's calls to b fail with UNAVAILABLE
//   (*p)->Heal();      // a reconnects
//   (*p)->CutAfter(TcpProxy::kUp, 1 << 20);  // the next MiB from a reaches b, then the cut
//   (*p)->SetDelay(TcpProxy::kDown, absl::Seconds(1));  // b's answers arrive a second late
//   (*p)->Corrupt(TcpProxy::kUp, 1 << 20, seed);  // one byte of every MiB from a is altered
//
// Data held back by a delay when the link is cut is dropped, never delivered.
//
// Thread-safety: every method may be called from any thread. The proxy runs threads of its own
// (one to accept, two per direction of each connection); the destructor cuts every connection
// and joins them all.
#ifndef VAULT_INTEGRATION_TESTS_TCP_PROXY_H_
#define VAULT_INTEGRATION_TESTS_TCP_PROXY_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/unique_fd.h"

namespace vault::integration {

class TcpProxy {
 public:
  // kUp: from the client (the connecting side) to the upstream; kDown: the answers.
  enum Direction { kUp = 0, kDown = 1 };

  // Listens on 127.0.0.1:0 and forwards to `upstream` ("127.0.0.1:<port>").
  static absl::StatusOr<std::unique_ptr<TcpProxy>> Start(const std::string& upstream);
  TcpProxy(const TcpProxy&) = delete;
  TcpProxy& operator=(const TcpProxy&) = delete;
  ~TcpProxy();

  // "127.0.0.1:<port>": where clients connect.
  const std::string& address() const { return address_; }
  const std::string& upstream() const { return upstream_; }

  // Resets every connection (data held back is dropped); until Heal, every new connection is
  // reset as soon as it is accepted.
  void Cut();
  // New connections are forwarded again (CutAfter and Corrupt, if armed, are disarmed).
  void Heal();
  bool cut() const;
  // Forwards `bytes` more bytes in `direction` (over all connections), then cuts.
  void CutAfter(Direction direction, uint64_t bytes);
  // Holds the bytes of `direction` back for `delay` before they are forwarded.
  void SetDelay(Direction direction, absl::Duration delay);
  // From now on, in each run of `every` bytes of `direction` (counted over all connections, in
  // the order the proxy reads them), one byte is XORed with a non-zero mask; the byte's place in
  // the run and the mask are drawn from `seed`, so a run can be replayed. every == 0 disarms.
  void Corrupt(Direction direction, uint64_t every, uint64_t seed);
  // Bytes flipped so far in `direction`.
  uint64_t flipped(Direction direction) const { return flipped_[direction].load(); }

  // Bytes forwarded so far in `direction`, and connections accepted so far.
  uint64_t forwarded(Direction direction) const { return forwarded_[direction].load(); }
  uint64_t accepted() const { return accepted_.load(); }
  // Connections reset by a cut so far (including those refused while cut).
  uint64_t resets() const { return resets_.load(); }

 private:
  struct Chunk {
    absl::Time due;
    std::string data;
    bool cut_after = false;  // the last bytes CutAfter lets through: cut once written
  };
  // One direction of one connection: a reader moves bytes from `from` into the queue, a writer
  // moves them to `to` when they are due.
  struct Pipe {
    int from = -1;
    int to = -1;
    Direction direction = kUp;
    absl::Mutex mu;
    std::deque<Chunk> queue ABSL_GUARDED_BY(mu);
    bool eof ABSL_GUARDED_BY(mu) = false;
    bool dead ABSL_GUARDED_BY(mu) = false;
  };
  struct Connection {
    common::UniqueFd client, server;
    Pipe pipes[2];
    std::vector<std::thread> threads;
    std::atomic<int> finished{0};  // threads that returned (4: it can be reaped)
    std::atomic<bool> reset{false};
  };

  TcpProxy(common::UniqueFd listener, common::UniqueFd wake, std::string address,
           std::string upstream);
  void AcceptLoop();
  void Serve(common::UniqueFd client);
  void ReadLoop(Connection* c, Pipe* p);
  void WriteLoop(Connection* c, Pipe* p);
  // Resets both sockets of `c` and wakes its threads.
  void Reset(Connection* c);
  // Counts `n` bytes read in `direction`; returns how many of them may be forwarded before an
  // armed CutAfter fires (then *cut_now is set).
  size_t Admit(Direction direction, size_t n, bool* cut_now);
  // Flips the bytes of `data` (the next bytes read in `direction`) that Corrupt picks.
  void Flip(Direction direction, std::string& data);
  // Joins the threads of connections that are over.
  void Reap() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Constant after construction.
  const common::UniqueFd listener_;
  const common::UniqueFd wake_;  // an eventfd: the accept loop stops when it is written
  const std::string address_;
  const std::string upstream_;

  std::atomic<uint64_t> forwarded_[2] = {0, 0};
  std::atomic<uint64_t> accepted_{0};
  std::atomic<uint64_t> resets_{0};
  std::atomic<uint64_t> flipped_[2] = {0, 0};

  mutable absl::Mutex mu_;
  bool cut_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::Duration delay_[2] ABSL_GUARDED_BY(mu_) = {absl::ZeroDuration(), absl::ZeroDuration()};
  // Bytes still allowed in a direction before the cut; -1: not armed.
  int64_t budget_[2] ABSL_GUARDED_BY(mu_) = {-1, -1};
  std::vector<std::unique_ptr<Connection>> connections_ ABSL_GUARDED_BY(mu_);
  // Corrupt: per direction, the run length (0: off), the bytes read since it was armed, the
  // position (in those bytes) of the next byte to flip, and the generator of places and masks.
  uint64_t corrupt_every_[2] ABSL_GUARDED_BY(mu_) = {0, 0};
  uint64_t corrupt_seen_[2] ABSL_GUARDED_BY(mu_) = {0, 0};
  uint64_t corrupt_next_[2] ABSL_GUARDED_BY(mu_) = {0, 0};
  std::mt19937_64 corrupt_rng_[2] ABSL_GUARDED_BY(mu_);

  std::thread acceptor_;  // started last in Start, joined first in the destructor
};

}  // namespace vault::integration

#endif  // VAULT_INTEGRATION_TESTS_TCP_PROXY_H_
