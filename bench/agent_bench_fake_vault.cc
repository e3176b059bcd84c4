// bench/agent_bench_fake_vault: the fake vault (host calls answered at once, messages through
// in-memory mailboxes) and the raw socketpair echo that agent_bench measures the vault against.
#include "bench/agent_bench_fake_vault.h"

#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "bench/agent_bench_util.h"
#include "vault/v1/hostcall.pb.h"

namespace vault::bench {
namespace {

// --- frames on a stream socket --------------------------------------------------------------

bool WriteAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}
bool ReadAll(int fd, char* p, size_t n) {
  while (n > 0) {
    ssize_t r = read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}
bool WriteFrame(int fd, const std::string& body) {
  std::string out(4, '\0');
  const uint32_t n = static_cast<uint32_t>(body.size());
  out[0] = static_cast<char>(n >> 24);
  out[1] = static_cast<char>(n >> 16);
  out[2] = static_cast<char>(n >> 8);
  out[3] = static_cast<char>(n);
  out += body;
  return WriteAll(fd, out.data(), out.size());
}
bool ReadFrameFd(int fd, std::string* body) {
  unsigned char h[4];
  if (!ReadAll(fd, reinterpret_cast<char*>(h), 4)) return false;
  const uint32_t n = (uint32_t{h[0]} << 24) | (uint32_t{h[1]} << 16) | (uint32_t{h[2]} << 8) | h[3];
  if (n > (1u << 20)) return false;
  body->resize(n);
  return ReadAll(fd, body->data(), n);
}

// --- baselines: a fake vault in this process, guests outside any sandbox ---------------------

vault::v1::SelfInspectResult CannedSelfInspect(const std::string& id) {
  vault::v1::SelfInspectResult r;
  r.set_agent_id(id);
  r.set_vault("agent-bench");
  r.set_principal(absl::StrCat("ed25519:", std::string(64, 'a')));
  vault::v1::Grant* g = r.add_grants();
  g->set_kind(vault::v1::Grant::CAS_WRITE);
  g = r.add_grants();
  g->set_kind(vault::v1::Grant::SEND);
  g = r.add_grants();
  g->set_kind(vault::v1::Grant::RECEIVE);
  r.mutable_constraints()->set_max_runtime_ms(86400000);
  r.mutable_constraints()->set_max_memory_bytes(256u << 20);
  r.mutable_constraints()->set_max_cpu_ms(3600000);
  r.set_memory_bytes(900000);
  r.set_memory_remaining_bytes((256u << 20) - 900000);
  r.set_runtime_remaining_ms(86000000);
  r.set_cpu_remaining_ms(3500000);
  r.set_storage_remaining_bytes(64u << 20);
  r.set_incarnation(1);
  r.set_purpose("agent_bench");
  return r;
}

}  // namespace

absl::Status FakeVault::Start(const std::string& guest_path, const std::string& id,
                              const std::string& state) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
    return absl::ErrnoToStatus(errno, "socketpair");
  auto g = std::make_unique<Guest>();
  g->id = id;
  g->state = state;
  g->fd = sv[0];
  {
    absl::MutexLock lock(&mu_);
    boxes_[id];
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, sv[1], 3);
  std::string env_fd = "VAULT_CHANNEL_FD=3";
  char* argv[] = {const_cast<char*>(guest_path.c_str()), nullptr};
  char* envp[] = {env_fd.data(), nullptr};
  int rc = posix_spawn(&g->pid, guest_path.c_str(), &actions, nullptr, argv, envp);
  posix_spawn_file_actions_destroy(&actions);
  close(sv[1]);
  if (rc != 0) {
    close(sv[0]);
    return absl::ErrnoToStatus(rc, absl::StrCat("posix_spawn ", guest_path));
  }
  Guest* raw = g.get();
  g->server = std::thread([this, raw] { Serve(*raw); });
  guests_.push_back(std::move(g));
  return absl::OkStatus();
}

absl::Status FakeVault::Finish() {
  absl::Status out;
  for (auto& g : guests_) {
    int status = 0;
    while (waitpid(g->pid, &status, 0) < 0 && errno == EINTR) {
    }
    g->server.join();
    close(g->fd);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
      out = absl::InternalError(absl::StrCat("baseline guest ", g->id, " ended badly (status ",
                                             status, "); logs: ", absl::StrJoin(Logs(), " | ")));
  }
  guests_.clear();
  return out;
}

std::vector<std::string> FakeVault::Logs() {
  absl::MutexLock lock(&mu_);
  return logs_;
}

void FakeVault::Serve(Guest& g) {
  std::string in;
  vault::v1::GuestFrame gf;
  vault::v1::HostFrame hf;
  std::string out;
  uint64_t next_message_id = 1;
  const vault::v1::SelfInspectResult canned = CannedSelfInspect(g.id);
  while (ReadFrameFd(g.fd, &in)) {
    if (!gf.ParseFromString(in)) return;
    hf.Clear();
    if (gf.has_hello()) {
      vault::v1::Welcome* w = hf.mutable_welcome();
      w->set_version(1);
      w->set_agent_id(g.id);
      w->set_vault("agent-bench");
      w->set_max_frame_bytes(1 << 20);
      w->set_incarnation(1);
    } else {
      const vault::v1::HostRequest& req = gf.request();
      vault::v1::HostResponse* resp = hf.mutable_response();
      resp->set_call_id(req.call_id());
      switch (req.call_case()) {
        case vault::v1::HostRequest::kHeartbeat:
          resp->mutable_heartbeat();
          break;
        case vault::v1::HostRequest::kSelfInspect:
          *resp->mutable_self_inspect() = canned;
          break;
        case vault::v1::HostRequest::kGetState:
          resp->mutable_get_state()->set_present(true);
          resp->mutable_get_state()->set_state(g.state);
          break;
        case vault::v1::HostRequest::kLog: {
          absl::MutexLock lock(&mu_);
          logs_.push_back(req.log().message());
          break;
        }
        case vault::v1::HostRequest::kSend: {
          vault::v1::Message m;
          m.set_id(next_message_id++);
          m.set_from(g.id);
          m.set_type(req.send().type());
          m.set_data(req.send().data());
          {
            absl::MutexLock lock(&mu_);
            auto it = boxes_.find(req.send().to());
            if (it == boxes_.end()) {
              resp->set_code(5);
              resp->set_message("no such agent");
              break;
            }
            it->second.q.push_back(std::move(m));
          }
          resp->mutable_send()->set_message_id(next_message_id - 1);
          break;
        }
        case vault::v1::HostRequest::kReceive: {
          absl::MutexLock lock(&mu_);
          Box& box = boxes_[g.id];
          mu_.AwaitWithTimeout(absl::Condition(
                                   +[](Box* b) { return !b->q.empty(); }, &box),
                               absl::Milliseconds(req.receive().timeout_ms()));
          if (box.q.empty()) {
            resp->mutable_receive()->set_timed_out(true);
          } else {
            *resp->mutable_receive()->mutable_message() = std::move(box.q.front());
            box.q.pop_front();
          }
          break;
        }
        case vault::v1::HostRequest::kExit:
          break;
        default:
          resp->set_code(12);
          resp->set_message("not in the fake vault");
      }
    }
    hf.SerializeToString(&out);
    if (!WriteFrame(g.fd, out)) return;
  }
}

// A 64-byte frame echoed over a socketpair by a second thread: `rounds` timed round trips (us).
std::vector<double> RawPingPong(int rounds, int warmup) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return {};
  const int total = rounds + warmup;
  std::thread echo([fd = sv[1], total] {
    std::string f;
    for (int i = 0; i < total; ++i) {
      if (!ReadFrameFd(fd, &f) || !WriteFrame(fd, f)) return;
    }
  });
  std::vector<double> us;
  std::string f(64, 'x'), back;
  for (int i = 0; i < total; ++i) {
    const int64_t t0 = NowNs();
    if (!WriteFrame(sv[0], f) || !ReadFrameFd(sv[0], &back)) break;
    const int64_t t1 = NowNs();
    if (i >= warmup) us.push_back(static_cast<double>(t1 - t0) / 1000.0);
  }
  echo.join();
  close(sv[0]);
  close(sv[1]);
  return us;
}

}  // namespace vault::bench
