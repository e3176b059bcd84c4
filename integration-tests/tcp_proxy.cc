#include "integration-tests/tcp_proxy.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace vault::integration {
namespace {

using common::UniqueFd;

absl::Status Errno(absl::string_view what) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(errno)));
}

absl::StatusOr<sockaddr_in> ParseLoopback(const std::string& address) {
  const size_t colon = address.rfind(':');
  int port = 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  if (colon == std::string::npos || !absl::SimpleAtoi(address.substr(colon + 1), &port) ||
      port <= 0 || port > 65535 ||
      inet_pton(AF_INET, address.substr(0, colon).c_str(), &addr.sin_addr) != 1) {
    return absl::InvalidArgumentError(absl::StrCat("not an IPv4 host:port: ", address));
  }
  addr.sin_port = htons(static_cast<uint16_t>(port));
  return addr;
}

void NoDelay(int fd) {
  int one = 1;
  (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

// Makes the close of `fd` a reset (RST) and ends both directions now (FIN to the peer; blocked
// reads and writes on it return).
void Abort(int fd) {
  linger l{};
  l.l_onoff = 1;
  l.l_linger = 0;
  (void)setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
  (void)shutdown(fd, SHUT_RDWR);
}

}  // namespace

absl::StatusOr<std::unique_ptr<TcpProxy>> TcpProxy::Start(const std::string& upstream) {
  absl::StatusOr<sockaddr_in> up = ParseLoopback(upstream);
  if (!up.ok()) return up.status();
  UniqueFd listener(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!listener.valid()) return Errno("socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  if (bind(listener.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    return Errno("bind");
  }
  if (listen(listener.get(), 128) != 0) return Errno("listen");
  socklen_t len = sizeof(addr);
  if (getsockname(listener.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return Errno("getsockname");
  }
  UniqueFd wake(eventfd(0, EFD_CLOEXEC));
  if (!wake.valid()) return Errno("eventfd");
  std::string address = absl::StrCat("127.0.0.1:", ntohs(addr.sin_port));
  std::unique_ptr<TcpProxy> proxy(
      new TcpProxy(std::move(listener), std::move(wake), std::move(address), upstream));
  proxy->acceptor_ = std::thread([p = proxy.get()] { p->AcceptLoop(); });
  return proxy;
}

TcpProxy::TcpProxy(UniqueFd listener, UniqueFd wake, std::string address, std::string upstream)
    : listener_(std::move(listener)),
      wake_(std::move(wake)),
      address_(std::move(address)),
      upstream_(std::move(upstream)) {}

TcpProxy::~TcpProxy() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  const uint64_t one = 1;
  (void)!write(wake_.get(), &one, sizeof(one));
  if (acceptor_.joinable()) acceptor_.join();
  std::vector<std::unique_ptr<Connection>> connections;
  {
    absl::MutexLock lock(&mu_);
    connections = std::move(connections_);
  }
  for (const std::unique_ptr<Connection>& c : connections) Reset(c.get());
  for (const std::unique_ptr<Connection>& c : connections) {
    for (std::thread& t : c->threads) t.join();
  }
}

void TcpProxy::AcceptLoop() {
  for (;;) {
    pollfd fds[2] = {{listener_.get(), POLLIN, 0}, {wake_.get(), POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents != 0) return;
    if (fds[0].revents == 0) continue;
    UniqueFd client(accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!client.valid()) continue;
    accepted_.fetch_add(1);
    Serve(std::move(client));
  }
}

void TcpProxy::Serve(UniqueFd client) {
  auto refuse = [this](UniqueFd fd) {
    Abort(fd.get());
    resets_.fetch_add(1);
  };
  {
    absl::MutexLock lock(&mu_);
    Reap();
    if (cut_ || stopping_) return refuse(std::move(client));
  }
  absl::StatusOr<sockaddr_in> up = ParseLoopback(upstream_);  // parsed once in Start already
  UniqueFd server(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!up.ok() || !server.valid() ||
      connect(server.get(), reinterpret_cast<const sockaddr*>(&*up), sizeof(*up)) != 0) {
    return refuse(std::move(client));  // the upstream is down: so is the link
  }
  NoDelay(client.get());
  NoDelay(server.get());
  auto c = std::make_unique<Connection>();
  c->client = std::move(client);
  c->server = std::move(server);
  c->pipes[kUp].from = c->client.get();
  c->pipes[kUp].to = c->server.get();
  c->pipes[kUp].direction = kUp;
  c->pipes[kDown].from = c->server.get();
  c->pipes[kDown].to = c->client.get();
  c->pipes[kDown].direction = kDown;
  absl::MutexLock lock(&mu_);
  if (cut_ || stopping_) {
    Abort(c->server.get());
    return refuse(std::move(c->client));
  }
  Connection* raw = c.get();
  for (Pipe& p : raw->pipes) {
    raw->threads.emplace_back([this, raw, pipe = &p] { ReadLoop(raw, pipe); });
    raw->threads.emplace_back([this, raw, pipe = &p] { WriteLoop(raw, pipe); });
  }
  connections_.push_back(std::move(c));
}

size_t TcpProxy::Admit(Direction direction, size_t n, bool* cut_now) {
  absl::MutexLock lock(&mu_);
  *cut_now = false;
  if (cut_) return 0;
  int64_t& budget = budget_[direction];
  if (budget < 0) return n;
  if (static_cast<uint64_t>(budget) > n) {
    budget -= static_cast<int64_t>(n);
    return n;
  }
  const size_t allowed = static_cast<size_t>(budget);
  budget_[kUp] = budget_[kDown] = -1;
  *cut_now = true;
  return allowed;
}

void TcpProxy::Flip(Direction direction, std::string& data) {
  absl::MutexLock lock(&mu_);
  const uint64_t every = corrupt_every_[direction];
  if (every == 0) return;
  uint64_t& seen = corrupt_seen_[direction];
  uint64_t& next = corrupt_next_[direction];
  std::mt19937_64& rng = corrupt_rng_[direction];
  while (next < seen + data.size()) {
    const auto mask = static_cast<unsigned char>(1 + rng() % 255);
    data[next - seen] = static_cast<char>(static_cast<unsigned char>(data[next - seen]) ^ mask);
    flipped_[direction].fetch_add(1);
    // The next run starts where this one ends.
    next = next - next % every + every + rng() % every;
  }
  seen += data.size();
}

void TcpProxy::ReadLoop(Connection* c, Pipe* p) {
  std::string buffer(64 << 10, '\0');
  for (;;) {
    const ssize_t n = read(p->from, buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n < 0) Reset(c);
      absl::MutexLock lock(&p->mu);
      p->eof = true;  // the writer passes the end on once the queue is written
      break;
    }
    bool cut_now = false;
    const size_t allowed = Admit(p->direction, static_cast<size_t>(n), &cut_now);
    if (allowed == 0 && cut_now) {
      Cut();
      continue;
    }
    if (allowed == 0) continue;  // cut: dropped (the connection is being reset)
    absl::Duration delay;
    {
      absl::MutexLock lock(&mu_);
      delay = delay_[p->direction];
    }
    std::string data = buffer.substr(0, allowed);
    Flip(p->direction, data);
    absl::MutexLock lock(&p->mu);
    p->queue.push_back(Chunk{absl::Now() + delay, std::move(data), cut_now});
  }
  c->finished.fetch_add(1);
}

void TcpProxy::WriteLoop(Connection* c, Pipe* p) {
  for (;;) {
    Chunk chunk;
    {
      absl::MutexLock lock(&p->mu);
      auto ready = [p]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu) {
        return p->dead || p->eof || !p->queue.empty();
      };
      p->mu.Await(absl::Condition(&ready));
      if (p->dead) break;
      if (p->queue.empty()) {  // the end, after every byte before it
        (void)shutdown(p->to, SHUT_WR);
        break;
      }
      const absl::Time due = p->queue.front().due;
      if (absl::Now() < due) {
        p->mu.AwaitWithDeadline(absl::Condition(&p->dead), due);
        continue;
      }
      chunk = std::move(p->queue.front());
      p->queue.pop_front();
    }
    size_t off = 0;
    while (off < chunk.data.size()) {
      const ssize_t w = send(p->to, chunk.data.data() + off, chunk.data.size() - off, MSG_NOSIGNAL);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) break;
      off += static_cast<size_t>(w);
    }
    forwarded_[p->direction].fetch_add(off);
    if (off < chunk.data.size()) {
      Reset(c);
      break;
    }
    if (chunk.cut_after) Cut();
  }
  c->finished.fetch_add(1);
}

void TcpProxy::Reset(Connection* c) {
  if (!c->reset.exchange(true)) resets_.fetch_add(1);
  Abort(c->client.get());
  Abort(c->server.get());
  for (Pipe& p : c->pipes) {
    absl::MutexLock lock(&p.mu);
    p.dead = true;
    p.queue.clear();  // held back by a delay: never delivered
  }
}

void TcpProxy::Reap() {
  for (auto it = connections_.begin(); it != connections_.end();) {
    if ((*it)->finished.load() < 4) {
      ++it;
      continue;
    }
    for (std::thread& t : (*it)->threads) t.join();
    it = connections_.erase(it);
  }
}

void TcpProxy::Cut() {
  absl::MutexLock lock(&mu_);
  cut_ = true;
  budget_[kUp] = budget_[kDown] = -1;
  for (const std::unique_ptr<Connection>& c : connections_) Reset(c.get());
}

void TcpProxy::Heal() {
  absl::MutexLock lock(&mu_);
  cut_ = false;
  budget_[kUp] = budget_[kDown] = -1;
  corrupt_every_[kUp] = corrupt_every_[kDown] = 0;
}

bool TcpProxy::cut() const {
  absl::MutexLock lock(&mu_);
  return cut_;
}

void TcpProxy::CutAfter(Direction direction, uint64_t bytes) {
  absl::MutexLock lock(&mu_);
  budget_[direction] = static_cast<int64_t>(bytes);
}

void TcpProxy::Corrupt(Direction direction, uint64_t every, uint64_t seed) {
  absl::MutexLock lock(&mu_);
  corrupt_every_[direction] = every;
  corrupt_seen_[direction] = 0;
  corrupt_rng_[direction].seed(seed);
  corrupt_next_[direction] = every == 0 ? 0 : corrupt_rng_[direction]() % every;
}

void TcpProxy::SetDelay(Direction direction, absl::Duration delay) {
  absl::MutexLock lock(&mu_);
  delay_[direction] = delay;
}

}  // namespace vault::integration
