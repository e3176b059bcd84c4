// agent_bench: what the agent runtime costs, against baselines measured in the same run.
//
//   agent_bench [--agents=1000] [--calls=20000] [--warmup=1000] [--rounds=N (default --calls)]
//               [--clients=4] [--vaultctl_spawns=20] [--sandbox_spawns=200]
//               [--only=rtt,msg,spawn] [--keep] [--vaultd=PATH] [--vaultctl=PATH]
//               [--sync_writes=true|false] [--spawn_retries=3]
//
//   agent_bench --agents=10 --calls=500 --warmup=50 --vaultctl_spawns=2 --sandbox_spawns=10
//                                  # small: ~5 s
//
// --vaultd / --vaultctl run copies of the binaries (vault-sandbox-init must be beside that vaultd,
// and beside this executable in ../sandbox/ for the LinuxSandbox baseline). --sync_writes=false
// sets storage.sync_writes false in the vault (to see what fsync costs a spawn).
// --spawn_retries: an Agents.Spawn refused with "Text file busy" (a race in the runtime: another
// sandbox's child, cloned while this agent's code file was open for writing, still holds it) is
// sent again with a new agent id, up to this many times; the count is printed.
//
// It starts a real vault: `vaultctl init` into a temporary directory (agents.default_max_agents
// and agents.default_max_calls_per_second raised in its vault.conf so that the quotas do not
// cap the benchmark), then `vaultd --config <dir>/v/vault.conf --listen 127.0.0.1:0`, and spawns
// agent_bench_guest (bench/agent_bench_guest.cc, the C++ SDK) with
// `vaultctl agent spawn SPEC --code <guest> --state FILE --as <dir>/v/admin.key`, SPEC being
//   (agent (purpose "agent_bench") (capabilities (send (agent "*")) (receive (from "*"))
//          (cas-write)) (constraints (max-runtime 86400) (max-memory 256 MiB) (max-cpu 3600)
//          (max-processes 16) (max-open-files 64)))
// The guest's initial state chooses its mode (see agent_bench_guest.cc).
//
// 1. Host-call round trip (target p50 <= 20 us). The guest times --calls heartbeat calls, then
//    --calls self_inspect calls (after --warmup each), with CLOCK_MONOTONIC around every call, and
//    logs the percentiles; the bench reads them with `vaultctl -o json agent logs ID`.
//    Baseline: the same guest binary outside any sandbox, its fd 3 one end of a socketpair whose
//    other end a thread of this process serves (Hello/Welcome, then every request answered at
//    once: the same frames, no proxy, no policy, no audit). Floor: a raw socketpair echo of a
//    64-byte frame between two threads.
// 2. Agent-to-agent message (target p50 <= 50 us). A "pong" guest and a "ping" guest (peer = the
//    pong's id); ping times --rounds rounds of send + receive of the answer, and reports round
//    trip / 2. Baselines: the same two guests outside any sandbox, each on a socketpair to a fake
//    vault in this process that routes send -> the other's receive (a thread per guest, a mutex
//    and a condition variable per mailbox: the same two hops per direction as the vault); and a
//    raw socketpair ping-pong between two threads (one hop per direction).
// 3. Spawn rate and memory (targets >= 200 spawns/s, vaultd RSS <= 200 MiB with 1,000 idle
//    agents). --vaultctl_spawns sequential `vaultctl agent spawn` processes (their rate includes
//    vaultctl's start-up, upload check and key loading); they are terminated again. Then
//    --agents idle guests through Agents.Spawn called directly by --clients threads, each with a
//    gRPC channel of its own (requests, SPAWN links signed with capability::SignLink as
//    vaultctl/agent_lifecycle_commands.cc does, are built before the clock starts). Reported:
//    spawns/s until the last Spawn returned, the time until every agent had made its first host
//    calls (counters.host_calls >= 2: get_state and the receive it then blocks in), vaultd's VmRSS
//    (/proc/PID/status) before and with every agent idle, the sum of VmRSS over vaultd's
//    descendant processes (the sandboxes' inits and guests) and the sum of the agents' cgroup
//    memory (Agents.List memory_bytes); the sum of Pss (/proc/PID/smaps_rollup) too, since VmRSS
//    counts the shared libraries (libprotobuf, libstdc++...) once per process. Baseline:
//    LinuxSandbox::Spawn of sandbox_bench_guest (writes one frame, exits) in this process before
//    vaultd starts, --sandbox_spawns times by
//    --clients threads at once (and once from one thread), i.e. the sandbox alone.
//    Every agent is then terminated (Agents.Control TERMINATE, signed as vaultctl does).
//
// Times are printed in microseconds (ms for spawns). Percentiles are nearest-rank. After the
// report, one BENCH_RESULT line (bench/bench_result.h) per target, for bench/run: heartbeat p50
// beside the baseline's, message p50 beside the fake vault's, Agents.Spawn rate beside the
// sandbox alone, vaultd's RSS with the idle agents beside its RSS before the spawns. At the end
// vaultd gets SIGTERM (SIGKILL after 30 s) and the temporary directory is removed (--keep keeps
// it). Only processes this bench started are signalled, by pid. vaultd is started with a
// parent-death signal, so it does not outlive the bench.
//
// Needs: root or user namespaces and every sandbox fence (as vaultd does); vaultd, vaultctl,
// vault-sandbox-init, agent_bench_guest and sandbox_bench_guest built (their paths are compiled
// in; the guests are looked for beside this executable).
//
// Thread-safety: a single main thread, plus the baselines' server threads and the spawn and
// control client threads, which share only atomics and per-thread results.
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/bench_result.h"
#include "capability/chain.h"
#include "capability/principal.h"
#include "capability/signing_domains.h"
#include "capability/text_form.h"
#include "common/grpc_status.h"
#include "common/proto_util.h"
#include "common/random.h"
#include "sandbox/channel.h"
#include "sandbox/posix/linux_sandbox.h"
#include "sandbox/sandbox.h"
#include "vault/v1/admin.grpc.pb.h"
#include "vault/v1/agent.grpc.pb.h"
#include "vault/v1/hostcall.pb.h"

#ifndef AGENT_BENCH_VAULTD
#define AGENT_BENCH_VAULTD "vaultd"
#endif
#ifndef AGENT_BENCH_VAULTCTL
#define AGENT_BENCH_VAULTCTL "vaultctl"
#endif

extern char** environ;

namespace vault::bench {
namespace {

constexpr double kTargetRttP50Us = 20;
constexpr double kTargetMsgP50Us = 50;
constexpr double kTargetSpawnsPerS = 200;
constexpr double kTargetVaultdRssMiB = 200;
using capability::kControlDomain;

struct Flags {
  int agents = 1000;
  int calls = 20000;
  int warmup = 1000;
  int rounds = -1;  // -1: --calls
  int clients = 4;
  int vaultctl_spawns = 20;
  int sandbox_spawns = 200;
  std::vector<std::string> only;
  bool keep = false;
  bool sync_writes = true;  // storage.sync_writes of the vault
  int spawn_retries = 3;    // per Agents.Spawn refused with "Text file busy" (see README)
};

// --vaultd / --vaultctl: copies elsewhere (vaultd finds vault-sandbox-init beside itself).
std::string g_vaultd = AGENT_BENCH_VAULTD;
std::string g_vaultctl = AGENT_BENCH_VAULTCTL;

int64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

double LoadAverage() {
  FILE* f = fopen("/proc/loadavg", "re");
  if (f == nullptr) return -1;
  double load = -1;
  if (fscanf(f, "%lf", &load) != 1) load = -1;
  fclose(f);
  return load;
}

// Percentiles in the unit of the input.
struct Summary {
  size_t n = 0;
  double min = 0, mean = 0, p50 = 0, p90 = 0, p99 = 0, max = 0;
};

Summary Summarize(std::vector<double> v) {
  Summary s;
  s.n = v.size();
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  auto rank = [&](double p) {
    size_t k = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(v.size())));
    return v[std::clamp<size_t>(k, 1, v.size()) - 1];
  };
  double sum = 0;
  for (double x : v) sum += x;
  s.min = v.front();
  s.max = v.back();
  s.mean = sum / static_cast<double>(v.size());
  s.p50 = rank(50);
  s.p90 = rank(90);
  s.p99 = rank(99);
  return s;
}

// A guest's result line "agent_bench_result kind=K n=.. min=.. ..." (ns) -> Summary in us.
std::optional<std::pair<std::string, Summary>> ParseResult(absl::string_view line) {
  size_t at = line.find("agent_bench_result ");
  if (at == absl::string_view::npos) return std::nullopt;
  line = line.substr(at);
  std::map<std::string, std::string> kv;
  for (absl::string_view word : absl::StrSplit(line, ' ', absl::SkipWhitespace())) {
    std::pair<std::string, std::string> p = absl::StrSplit(word, absl::MaxSplits('=', 1));
    kv[p.first] = p.second;
  }
  Summary s;
  auto num = [&](const char* k) {
    double v = 0;
    (void)absl::SimpleAtod(kv[k], &v);
    return v / 1000.0;
  };
  double n = 0;
  (void)absl::SimpleAtod(kv["n"], &n);
  s.n = static_cast<size_t>(n);
  s.min = num("min");
  s.mean = num("mean");
  s.p50 = num("p50");
  s.p90 = num("p90");
  s.p99 = num("p99");
  s.max = num("max");
  return std::make_pair(kv["kind"], s);
}

void PrintHeader(const char* title) {
  printf("\n%-46s %7s %9s %9s %9s %9s %9s %9s\n", title, "n", "min", "mean", "p50", "p90", "p99",
         "max");
}
void PrintRow(const std::string& label, const Summary& s, const std::string& extra = "") {
  printf("%-46s %7zu %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f  %s\n", label.c_str(), s.n, s.min, s.mean,
         s.p50, s.p90, s.p99, s.max, extra.c_str());
}

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

// Answers guests' host calls at once; send/receive through in-memory mailboxes.
class FakeVault {
 public:
  struct Guest {
    std::string id;
    std::string state;
    int fd = -1;  // the vault's end
    pid_t pid = -1;
    std::thread server;
  };

  // Starts `guest_path` with fd 3 = one end of a new socketpair, and a server thread.
  absl::Status Start(const std::string& guest_path, const std::string& id,
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

  // Waits for every guest and server thread; NOT OK when a guest failed.
  absl::Status Finish() {
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

  std::vector<std::string> Logs() {
    absl::MutexLock lock(&mu_);
    return logs_;
  }

 private:
  struct Box {
    std::deque<vault::v1::Message> q;
  };

  void Serve(Guest& g) {
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

  absl::Mutex mu_;
  std::map<std::string, Box> boxes_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> logs_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<Guest>> guests_;
};

std::map<std::string, Summary> ResultsOf(const std::vector<std::string>& lines) {
  std::map<std::string, Summary> out;
  for (const std::string& l : lines) {
    if (auto r = ParseResult(l); r.has_value()) out[r->first] = r->second;
  }
  return out;
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

// --- processes ------------------------------------------------------------------------------

struct RunResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs argv (absolute path) with stdout and stderr into files under `tmp`, and waits.
RunResult Run(const std::vector<std::string>& argv, const std::string& tmp) {
  static std::atomic<int> counter{0};
  const int k = counter++;
  const std::string out_path = absl::StrCat(tmp, "/run", k, ".out");
  const std::string err_path = absl::StrCat(tmp, "/run", k, ".err");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0600);
  posix_spawn_file_actions_addopen(&actions, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0600);
  std::vector<char*> cargv;
  for (const std::string& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  pid_t pid = -1;
  RunResult r;
  int rc = posix_spawn(&pid, cargv[0], &actions, nullptr, cargv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    r.err = absl::StrCat("posix_spawn ", argv[0], ": ", strerror(rc));
    return r;
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = Slurp(out_path);
  r.err = Slurp(err_path);
  unlink(out_path.c_str());
  unlink(err_path.c_str());
  return r;
}

absl::StatusOr<int> FreeLoopbackPort() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::ErrnoToStatus(errno, "socket");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    close(fd);
    return absl::ErrnoToStatus(errno, "bind");
  }
  close(fd);
  return ntohs(a.sin_port);
}

// VmRSS / VmHWM of a process, in KiB; -1 when unreadable.
int64_t StatusKiB(pid_t pid, absl::string_view field) {
  std::string s = Slurp(absl::StrCat("/proc/", pid, "/status"));
  for (absl::string_view line : absl::StrSplit(s, '\n')) {
    if (absl::ConsumePrefix(&line, field) && absl::ConsumePrefix(&line, ":")) {
      int64_t v = -1;
      line = absl::StripAsciiWhitespace(line);
      absl::ConsumeSuffix(&line, " kB");
      if (absl::SimpleAtoi(line, &v)) return v;
    }
  }
  return -1;
}

// CPU time a process's threads have used, in ns (/proc/PID/task/*/schedstat); -1 when unreadable.
int64_t ProcessCpuNs(pid_t pid) {
  std::error_code ec;
  int64_t total = 0;
  bool any = false;
  for (const auto& task :
       std::filesystem::directory_iterator(absl::StrCat("/proc/", pid, "/task"), ec)) {
    std::string s = Slurp(task.path().string() + "/schedstat");
    int64_t ns;
    std::vector<absl::string_view> f = absl::StrSplit(s, ' ');
    if (!f.empty() && absl::SimpleAtoi(f[0], &ns)) {
      total += ns;
      any = true;
    }
  }
  return any ? total : -1;
}

// Voluntary context switches (a thread went to sleep) of a process's threads; -1 when unreadable.
int64_t VoluntarySwitches(pid_t pid) {
  std::error_code ec;
  int64_t total = 0;
  bool any = false;
  for (const auto& task :
       std::filesystem::directory_iterator(absl::StrCat("/proc/", pid, "/task"), ec)) {
    std::string s = Slurp(task.path().string() + "/status");
    for (absl::string_view line : absl::StrSplit(s, '\n')) {
      int64_t v;
      if (absl::ConsumePrefix(&line, "voluntary_ctxt_switches:") &&
          absl::SimpleAtoi(absl::StripAsciiWhitespace(line), &v)) {
        total += v;
        any = true;
      }
    }
  }
  return any ? total : -1;
}

// What vaultd spent during a phase of `calls` host calls: its threads' CPU time and how often
// they went to sleep (the reactor sleeps between two requests unless it busy-polls).
struct VaultdCost {
  pid_t pid;
  int64_t cpu0, switches0;
  explicit VaultdCost(pid_t p) : pid(p), cpu0(ProcessCpuNs(p)), switches0(VoluntarySwitches(p)) {}
  std::string Per(int64_t calls) const {
    int64_t cpu = ProcessCpuNs(pid), sw = VoluntarySwitches(pid);
    if (calls <= 0 || cpu < 0 || sw < 0 || cpu0 < 0 || switches0 < 0) return "";
    return absl::StrFormat("vaultd per host call: %.2f us CPU, %.3f voluntary context switches",
                           static_cast<double>(cpu - cpu0) / 1e3 / static_cast<double>(calls),
                           static_cast<double>(sw - switches0) / static_cast<double>(calls));
  }
};

struct Descendants {
  std::map<std::string, std::pair<int, int64_t>> by_comm;  // comm -> (processes, RSS KiB)
  int processes = 0;
  int64_t rss_kib = 0;
  int64_t pss_kib = 0;  // proportional: shared pages (libraries) divided among their users
};

int64_t PssKiB(pid_t pid) {
  std::string s = Slurp(absl::StrCat("/proc/", pid, "/smaps_rollup"));
  for (absl::string_view line : absl::StrSplit(s, '\n')) {
    if (absl::ConsumePrefix(&line, "Pss:")) {
      int64_t v = -1;
      line = absl::StripAsciiWhitespace(line);
      absl::ConsumeSuffix(&line, " kB");
      if (absl::SimpleAtoi(line, &v)) return v;
    }
  }
  return 0;
}

// Every process below `root` (not root itself), by comm.
Descendants DescendantsOf(pid_t root) {
  std::map<pid_t, pid_t> parent;
  std::map<pid_t, std::string> comm;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    pid_t pid = 0;
    if (!absl::SimpleAtoi(e.path().filename().string(), &pid)) continue;
    std::string stat = Slurp(absl::StrCat("/proc/", pid, "/stat"));
    size_t open = stat.find('('), close = stat.rfind(')');
    if (open == std::string::npos || close == std::string::npos) continue;
    std::vector<std::string> rest = absl::StrSplit(stat.substr(close + 2), ' ');
    pid_t ppid = 0;
    if (rest.size() < 2 || !absl::SimpleAtoi(rest[1], &ppid)) continue;
    parent[pid] = ppid;
    comm[pid] = stat.substr(open + 1, close - open - 1);
  }
  Descendants d;
  for (const auto& [pid, ppid] : parent) {
    pid_t p = ppid;
    int hops = 0;
    while (p > 1 && p != root && hops++ < 64) {
      auto it = parent.find(p);
      if (it == parent.end()) break;
      p = it->second;
    }
    if (p != root) continue;
    int64_t rss = std::max<int64_t>(0, StatusKiB(pid, "VmRSS"));
    auto& slot = d.by_comm[comm[pid]];
    slot.first++;
    slot.second += rss;
    d.processes++;
    d.rss_kib += rss;
    d.pss_kib += PssKiB(pid);
  }
  return d;
}

// --- the vault ------------------------------------------------------------------------------

constexpr char kSpec[] = R"((agent
  (purpose "agent_bench")
  (capabilities (send (agent "*")) (receive (from "*")) (cas-write))
  (constraints (max-runtime 86400) (max-memory (* 256 1024 1024)) (max-cpu 3600)
               (max-processes 16) (max-open-files 64)))
)";

class Vault {
 public:
  ~Vault() { Stop(); }

  absl::Status Init(const std::string& tmp, bool sync_writes) {
    tmp_ = tmp;
    dir_ = tmp + "/v";
    absl::StatusOr<int> port = FreeLoopbackPort();
    if (!port.ok()) return port.status();
    RunResult r = Run({g_vaultctl, "init", "--name", "agent-bench", "--dir", dir_, "--listen",
                       absl::StrCat("127.0.0.1:", *port)},
                      tmp);
    if (r.exit_code != 0) return absl::InternalError(absl::StrCat("vaultctl init: ", r.err));
    // The quotas: 100 agents and 1000 host calls/s per principal by default.
    std::string conf = Slurp(dir_ + "/vault.conf");
    if (!absl::StrContains(conf, "\nagents {"))
      return absl::InternalError("vault.conf has no agents { } block");
    absl::StrReplaceAll({{"\nagents {",
                          "\nagents {\n  default_max_agents: 100000\n"
                          "  default_max_calls_per_second: 100000000"}},
                        &conf);
    if (!sync_writes) conf += "storage {\n  sync_writes: false\n}\n";
    std::ofstream(dir_ + "/vault.conf", std::ios::trunc) << conf;
    socket_ = dir_ + "/data/vault.sock";
    return absl::OkStatus();
  }

  absl::Status Start() {
    log_ = tmp_ + "/vaultd.log";
    const std::string conf = dir_ + "/vault.conf";
    const pid_t self = getpid();
    pid_ = fork();
    if (pid_ < 0) return absl::ErrnoToStatus(errno, "fork");
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (getppid() != self) _exit(127);
      int fd = open(log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
      int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
      if (fd < 0 || null < 0) _exit(127);
      dup2(null, 0);
      dup2(fd, 1);
      dup2(fd, 2);
      execl(g_vaultd.c_str(), g_vaultd.c_str(), "--config", conf.c_str(), "--listen", "127.0.0.1:0",
            static_cast<char*>(nullptr));
      _exit(127);
    }
    const std::string ready = dir_ + "/data/vaultd.ready";
    const int64_t deadline = NowNs() + 30'000'000'000;
    while (NowNs() < deadline) {
      if (absl::StrContains(Slurp(ready), absl::StrCat("\"pid\": ", pid_))) break;
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return absl::FailedPreconditionError(absl::StrCat("vaultd exited: ", Slurp(log_)));
      }
      usleep(20000);
    }
    if (!absl::StrContains(Slurp(ready), "pid"))
      return absl::DeadlineExceededError("vaultd.ready did not appear in 30 s");
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    channel_ = grpc::CreateCustomChannel(absl::StrCat("unix:", socket_),
                                         grpc::InsecureChannelCredentials(), args);
    agents_ = vault::v1::Agents::NewStub(channel_);
    auto admin = vault::v1::Admin::NewStub(channel_);
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    vault::v1::StatusResponse st;
    grpc::Status s = admin->Status(&ctx, vault::v1::StatusRequest(), &st);
    if (!s.ok()) return absl::UnavailableError(absl::StrCat("Admin.Status: ", s.error_message()));
    absl::StatusOr<capability::PublicKey> vk = capability::PublicKey::FromText(st.public_key());
    if (!vk.ok()) return vk.status();
    vault_key_ = vk->raw();
    absl::StatusOr<capability::PrivateKey> key =
        capability::PrivateKey::LoadFile(dir_ + "/admin.key");
    if (!key.ok()) return key.status();
    admin_key_.emplace(std::move(*key));
    absl::StatusOr<vault::v1::AgentSpec> spec = capability::ParseAgentSpec(kSpec, "spec");
    if (!spec.ok()) return spec.status();
    spec_ = *spec;
    spec_path_ = tmp_ + "/spec.scm";
    std::ofstream(spec_path_) << kSpec;
    return absl::OkStatus();
  }

  // SIGTERM, then SIGKILL after 30 s; returns vaultd's exit status text.
  std::string Stop() {
    if (pid_ <= 0) return "";
    kill(pid_, SIGTERM);
    int status = 0;
    const int64_t deadline = NowNs() + 30'000'000'000;
    std::string how;
    for (;;) {
      pid_t r = waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        how = WIFEXITED(status) ? absl::StrCat("exited ", WEXITSTATUS(status))
                                : absl::StrCat("signal ", WTERMSIG(status));
        break;
      }
      if (NowNs() > deadline) {
        kill(pid_, SIGKILL);
        waitpid(pid_, &status, 0);
        how = "killed (SIGKILL after 30 s)";
        break;
      }
      usleep(20000);
    }
    pid_ = -1;
    return how;
  }

  pid_t pid() const { return pid_; }
  const std::string& log() const { return log_; }

  // `vaultctl agent spawn` with the given initial state; returns the id.
  absl::StatusOr<std::string> SpawnWithVaultctl(const std::string& guest,
                                                const std::string& state) {
    static int n = 0;
    const std::string state_path = absl::StrCat(tmp_, "/state", n++);
    std::ofstream(state_path, std::ios::trunc) << state;
    RunResult r = Run({g_vaultctl, "--vault", socket_, "agent", "spawn", spec_path_, "--code",
                       guest, "--state", state_path, "--as", dir_ + "/admin.key"},
                      tmp_);
    if (r.exit_code != 0)
      return absl::InternalError(absl::StrCat("vaultctl agent spawn: ", r.err, r.out));
    std::string id(absl::StripAsciiWhitespace(r.out));
    if (code_.sha256().empty()) {
      absl::StatusOr<vault::v1::AgentStatus> st = Get(id);
      if (!st.ok()) return st.status();
      code_ = st->record().spec().code_digest();
    }
    return id;
  }

  absl::StatusOr<vault::v1::AgentStatus> Get(const std::string& id) {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
    vault::v1::GetAgentRequest req;
    req.set_id(id);
    vault::v1::AgentStatus out;
    grpc::Status s = agents_->Get(&ctx, req, &out);
    if (!s.ok()) return absl::UnavailableError(absl::StrCat("Agents.Get: ", s.error_message()));
    return out;
  }

  absl::StatusOr<vault::v1::ListAgentsResponse> List() {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
    vault::v1::ListAgentsResponse out;
    grpc::Status s = agents_->List(&ctx, vault::v1::ListAgentsRequest(), &out);
    if (!s.ok()) return absl::UnavailableError(absl::StrCat("Agents.List: ", s.error_message()));
    return out;
  }

  static bool Ended(vault::v1::AgentState s) {
    return s == vault::v1::TERMINATED || s == vault::v1::COMPLETED || s == vault::v1::FAILED ||
           s == vault::v1::DEPARTED;
  }

  absl::StatusOr<vault::v1::AgentStatus> WaitEnded(const std::string& id, absl::Duration limit) {
    const absl::Time deadline = absl::Now() + limit;
    for (;;) {
      absl::StatusOr<vault::v1::AgentStatus> st = Get(id);
      if (!st.ok()) return st;
      if (Ended(st->record().state())) return st;
      if (absl::Now() > deadline)
        return absl::DeadlineExceededError(absl::StrCat(id, " has not ended"));
      absl::SleepFor(absl::Milliseconds(100));
    }
  }

  // `vaultctl -o json agent logs ID`: the message of every line.
  absl::StatusOr<std::vector<std::string>> Logs(const std::string& id) {
    RunResult r = Run({g_vaultctl, "--vault", socket_, "-o", "json", "agent", "logs", id}, tmp_);
    if (r.exit_code != 0) return absl::InternalError(absl::StrCat("vaultctl agent logs: ", r.err));
    std::vector<std::string> out;
    for (absl::string_view line : absl::StrSplit(r.out, '\n', absl::SkipEmpty())) {
      size_t at = line.find("\"message\":");
      if (at == absl::string_view::npos) continue;
      absl::string_view rest = line.substr(at + 10);
      rest = absl::StripLeadingAsciiWhitespace(rest);
      if (!absl::ConsumePrefix(&rest, "\"")) continue;
      size_t end = rest.find('"');
      out.emplace_back(rest.substr(0, end));
    }
    return out;
  }

  // A SpawnRequest for Agents.Spawn with a SPAWN link signed as vaultctl signs it.
  absl::StatusOr<vault::v1::SpawnRequest> SpawnRequest(const std::string& state) {
    vault::v1::SpawnRequest req;
    *req.mutable_spec() = spec_;
    *req.mutable_spec()->mutable_code_digest() = code_;
    req.set_initial_state(state);
    req.set_has_initial_state(true);
    absl::StatusOr<std::string> id = common::RandomHex(8);
    if (!id.ok()) return id.status();
    const absl::Time now = absl::Now();
    vault::v1::LinkPayload p;
    p.set_version(capability::kLinkVersion);
    p.set_kind(vault::v1::LinkPayload::SPAWN);
    p.set_issuer(admin_key_->public_key().raw());
    p.set_audience(vault_key_);
    p.set_agent_id(absl::StrCat("a-", *id));
    *p.mutable_code() = code_;
    *p.mutable_grants() = spec_.grants();
    *p.mutable_constraints() = spec_.constraints();
    p.set_not_before_unix_ms(absl::ToUnixMillis(now - absl::Seconds(60)));
    p.set_not_after_unix_ms(absl::ToUnixMillis(now + absl::Hours(24)));
    p.set_hop(0);
    absl::StatusOr<vault::v1::SignedLink> link = capability::SignLink(p, *admin_key_);
    if (!link.ok()) return link.status();
    *req.mutable_chain()->add_links() = std::move(*link);
    return req;
  }

  // A ControlRequest TERMINATE, signed as vaultctl signs it.
  absl::StatusOr<vault::v1::ControlRequest> TerminateRequest(const std::string& id) {
    vault::v1::ControlPayload p;
    p.set_agent_id(id);
    p.set_action(vault::v1::ControlPayload::TERMINATE);
    p.set_reason("agent_bench done");
    p.set_signer(admin_key_->public_key().raw());
    p.set_vault(vault_key_);
    p.set_issued_unix_ms(absl::ToUnixMillis(absl::Now()));
    absl::StatusOr<std::string> nonce = common::RandomBytes(16);
    if (!nonce.ok()) return nonce.status();
    p.set_nonce(*std::move(nonce));
    vault::v1::ControlRequest req;
    req.set_payload(common::SerializeDeterministic(p));
    absl::StatusOr<std::string> sig = admin_key_->Sign(absl::StrCat(kControlDomain, req.payload()));
    if (!sig.ok()) return sig.status();
    req.set_signature(*sig);
    return req;
  }

  // A stub on a connection of its own (for concurrent clients).
  std::unique_ptr<vault::v1::Agents::Stub> NewAgentsStub() const {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    return vault::v1::Agents::NewStub(grpc::CreateCustomChannel(
        absl::StrCat("unix:", socket_), grpc::InsecureChannelCredentials(), args));
  }

 private:
  std::string tmp_, dir_, socket_, log_, spec_path_;
  pid_t pid_ = -1;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<vault::v1::Agents::Stub> agents_;
  std::string vault_key_;
  std::optional<capability::PrivateKey> admin_key_;
  vault::v1::AgentSpec spec_;
  vault::v1::Digest code_;
};

// Runs `n` calls of `call(i)` from `clients` threads; per-call latency (ms) and failures.
struct Fanout {
  std::vector<double> ms;
  int failures = 0;
  std::string first_error;
  double wall_s = 0;
};
Fanout RunFanout(int n, int clients, const std::function<absl::Status(int, int)>& call) {
  Fanout f;
  std::atomic<int> next{0};
  std::vector<std::vector<double>> per(static_cast<size_t>(clients));
  std::vector<std::string> errors(static_cast<size_t>(clients));
  std::vector<int> fails(static_cast<size_t>(clients), 0);
  std::vector<std::thread> threads;
  const int64_t t0 = NowNs();
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      for (int i = next++; i < n; i = next++) {
        const int64_t a = NowNs();
        absl::Status s = call(c, i);
        per[static_cast<size_t>(c)].push_back(static_cast<double>(NowNs() - a) / 1e6);
        if (!s.ok()) {
          fails[static_cast<size_t>(c)]++;
          if (errors[static_cast<size_t>(c)].empty()) errors[static_cast<size_t>(c)] = s.ToString();
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  f.wall_s = static_cast<double>(NowNs() - t0) / 1e9;
  for (int c = 0; c < clients; ++c) {
    f.ms.insert(f.ms.end(), per[static_cast<size_t>(c)].begin(), per[static_cast<size_t>(c)].end());
    f.failures += fails[static_cast<size_t>(c)];
    if (f.first_error.empty()) f.first_error = errors[static_cast<size_t>(c)];
  }
  return f;
}

// --- the sandbox alone ----------------------------------------------------------------------

struct SandboxRate {
  double rate_parallel = 0, rate_serial = 0;
  Summary parallel_ms, serial_ms;
  int failures = 0;
  std::string error;
};

// rmdir of the (empty) cgroup folder LinuxSandbox made under this process's cgroup, per
// controller; rmdir removes nothing else.
void RemoveCgroupFolders(const std::string& folder) {
  for (absl::string_view line : absl::StrSplit(Slurp("/proc/self/cgroup"), '\n')) {
    std::vector<std::string> f = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (f.size() != 3) continue;
    std::vector<std::string> dirs;
    if (f[1].empty()) {
      dirs = {"/sys/fs/cgroup/unified", "/sys/fs/cgroup"};
    } else {
      for (absl::string_view c : absl::StrSplit(f[1], ',')) {
        absl::string_view name = c;
        absl::ConsumePrefix(&name, "name=");
        dirs.push_back(absl::StrCat("/sys/fs/cgroup/", name));
      }
      dirs.push_back(absl::StrCat("/sys/fs/cgroup/", f[1]));
    }
    for (const std::string& d : dirs) {
      std::string path = absl::StrCat(d, f[2] == "/" ? "" : f[2], "/", folder);
      rmdir(path.c_str());
    }
  }
}

absl::StatusOr<SandboxRate> MeasureSandbox(const std::string& guest, const std::string& tmp,
                                           int spawns, int clients) {
  const std::string dir = tmp + "/sandbox-code";
  std::filesystem::create_directory(dir);
  chmod(dir.c_str(), 0755);
  std::error_code ec;
  std::filesystem::copy_file(guest, dir + "/guest", ec);
  if (ec) return absl::NotFoundError(absl::StrCat("copying ", guest, ": ", ec.message()));
  chmod((dir + "/guest").c_str(), 0755);
  sandbox::LinuxSandboxOptions options;
  options.cgroup_folder = "agent-bench-sandbox";
  absl::StatusOr<std::unique_ptr<sandbox::LinuxSandbox>> sb =
      sandbox::LinuxSandbox::Create(options);
  if (!sb.ok()) return sb.status();
  sandbox::SandboxSpec spec;
  spec.program = "/code/guest";
  spec.argv = {"guest"};
  spec.code_dir = dir;
  spec.name = "agent-bench";
  spec.limits.wall_time = absl::Seconds(30);
  auto one = [&](int, int) -> absl::Status {
    absl::StatusOr<sandbox::Channel::PairResult> pair = sandbox::Channel::Pair();
    if (!pair.ok()) return pair.status();
    sandbox::SandboxSpec s = spec;
    s.channel_fd = pair->guest_fd;
    absl::StatusOr<std::unique_ptr<sandbox::SandboxHandle>> h = (*sb)->Spawn(s);
    close(pair->guest_fd);
    if (!h.ok()) return h.status();
    absl::StatusOr<std::string> frame = pair->host.ReadFrame(absl::Seconds(10));
    if (!frame.ok()) return frame.status();
    absl::StatusOr<sandbox::ExitInfo> e = (*h)->Wait(absl::Seconds(10));
    return e.status();
  };
  SandboxRate r;
  (void)RunFanout(10, 1, one);  // warm-up
  Fanout serial = RunFanout(std::max(20, spawns / 4), 1, one);
  Fanout par = RunFanout(spawns, clients, one);
  r.rate_serial = static_cast<double>(serial.ms.size()) / serial.wall_s;
  r.rate_parallel = static_cast<double>(par.ms.size()) / par.wall_s;
  r.serial_ms = Summarize(serial.ms);
  r.parallel_ms = Summarize(par.ms);
  r.failures = serial.failures + par.failures;
  r.error = serial.first_error.empty() ? par.first_error : serial.first_error;
  sb->reset();
  RemoveCgroupFolders(options.cgroup_folder);
  return r;
}

// --- main -----------------------------------------------------------------------------------

bool FlagValue(absl::string_view arg, absl::string_view name, absl::string_view* value) {
  if (!absl::ConsumePrefix(&arg, name) || !absl::ConsumePrefix(&arg, "=")) return false;
  *value = arg;
  return true;
}

bool ParseFlags(int argc, char** argv, Flags* f) {
  for (int i = 1; i < argc; ++i) {
    const absl::string_view arg = argv[i];
    absl::string_view v;
    auto positive = [&](int* out, int min) { return absl::SimpleAtoi(v, out) && *out >= min; };
    if (FlagValue(arg, "--agents", &v)) {
      if (!positive(&f->agents, 1)) return false;
    } else if (FlagValue(arg, "--calls", &v)) {
      if (!positive(&f->calls, 1)) return false;
    } else if (FlagValue(arg, "--warmup", &v)) {
      if (!positive(&f->warmup, 0)) return false;
    } else if (FlagValue(arg, "--rounds", &v)) {
      if (!positive(&f->rounds, 1)) return false;
    } else if (FlagValue(arg, "--clients", &v)) {
      if (!positive(&f->clients, 1)) return false;
    } else if (FlagValue(arg, "--vaultctl_spawns", &v)) {
      if (!positive(&f->vaultctl_spawns, 1)) return false;
    } else if (FlagValue(arg, "--sandbox_spawns", &v)) {
      if (!positive(&f->sandbox_spawns, 1)) return false;
    } else if (FlagValue(arg, "--only", &v)) {
      f->only = absl::StrSplit(v, ',', absl::SkipEmpty());
    } else if (FlagValue(arg, "--vaultd", &v)) {
      g_vaultd = std::string(v);
    } else if (FlagValue(arg, "--vaultctl", &v)) {
      g_vaultctl = std::string(v);
    } else if (FlagValue(arg, "--sync_writes", &v)) {
      if (v != "true" && v != "false") return false;
      f->sync_writes = v == "true";
    } else if (FlagValue(arg, "--spawn_retries", &v)) {
      if (!positive(&f->spawn_retries, 0)) return false;
    } else if (arg == "--keep") {
      f->keep = true;
    } else {
      return false;
    }
  }
  if (f->rounds < 0) f->rounds = f->calls;
  return true;
}

std::string Verdict(bool ok) { return ok ? "PASS" : "BELOW TARGET"; }

int Main(int argc, char** argv) {
  Flags flags;
  if (!ParseFlags(argc, argv, &flags)) {
    fprintf(stderr,
            "usage: %s [--agents=1000] [--calls=20000] [--warmup=1000] [--rounds=N]\n"
            "          [--clients=4] [--vaultctl_spawns=20] [--sandbox_spawns=200]\n"
            "          [--only=rtt,msg,spawn] [--keep] [--vaultd=PATH] [--vaultctl=PATH]\n"
            "          [--sync_writes=true|false] [--spawn_retries=3]\n",
            argv[0]);
    return 2;
  }
  auto wanted = [&](const char* key) {
    return flags.only.empty() ||
           std::find(flags.only.begin(), flags.only.end(), key) != flags.only.end();
  };
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  const std::string guest = (self.parent_path() / "agent_bench_guest").string();
  const std::string trivial = (self.parent_path() / "sandbox_bench_guest").string();

  const char* tmpenv = getenv("TMPDIR");
  std::string tmp =
      absl::StrCat(tmpenv != nullptr && *tmpenv != '\0' ? tmpenv : "/tmp", "/agent_bench.XXXXXX");
  if (mkdtemp(tmp.data()) == nullptr) {
    perror("mkdtemp");
    return 1;
  }
  chmod(tmp.c_str(), 0755);
  int rc = 0;
  auto fail = [&](const std::string& what, const absl::Status& s) {
    fprintf(stderr, "agent_bench: %s: %s\n", what.c_str(), s.ToString().c_str());
    rc = 1;
  };

  printf(
      "agent_bench: agents=%d calls=%d warmup=%d rounds=%d clients=%d vaultctl_spawns=%d "
      "sandbox_spawns=%d\n",
      flags.agents, flags.calls, flags.warmup, flags.rounds, flags.clients, flags.vaultctl_spawns,
      flags.sandbox_spawns);
  printf("machine: %ld CPUs; load average before %.2f; temp dir %s\n",
         sysconf(_SC_NPROCESSORS_ONLN), LoadAverage(), tmp.c_str());
  printf("vaultd %s\nvaultctl %s\nguest %s\n", g_vaultd.c_str(), g_vaultctl.c_str(), guest.c_str());
  fflush(stdout);

  // Baselines first (no vaultd running).
  std::optional<SandboxRate> sandbox_rate;
  if (wanted("spawn")) {
    absl::StatusOr<SandboxRate> r =
        MeasureSandbox(trivial, tmp, flags.sandbox_spawns, flags.clients);
    if (!r.ok()) {
      fail("LinuxSandbox baseline", r.status());
    } else {
      sandbox_rate = *r;
    }
  }
  std::map<std::string, Summary> base_rtt, base_msg;
  Summary raw_rtt;
  if (wanted("rtt")) {
    FakeVault fake;
    absl::Status s =
        fake.Start(guest, "a-0000000000000001",
                   absl::StrCat("mode=rtt calls=", flags.calls, " warmup=", flags.warmup));
    if (s.ok()) s = fake.Finish();
    if (!s.ok()) fail("host-call baseline", s);
    base_rtt = ResultsOf(fake.Logs());
  }
  if (wanted("rtt") || wanted("msg")) {
    raw_rtt = Summarize(RawPingPong(flags.calls, flags.warmup));
  }
  if (wanted("msg")) {
    FakeVault fake;
    absl::Status s = fake.Start(guest, "a-00000000000000b0", "mode=pong");
    if (s.ok())
      s = fake.Start(guest, "a-00000000000000a0",
                     absl::StrCat("mode=ping peer=a-00000000000000b0 rounds=", flags.rounds,
                                  " warmup=", flags.warmup));
    if (s.ok()) s = fake.Finish();
    if (!s.ok()) fail("message baseline", s);
    base_msg = ResultsOf(fake.Logs());
  }

  Vault vault;
  absl::Status s = vault.Init(tmp, flags.sync_writes);
  if (s.ok()) s = vault.Start();
  if (!s.ok()) {
    fail("starting the vault", s);
    if (!flags.keep) std::filesystem::remove_all(tmp, ec);
    return 1;
  }
  const pid_t vaultd_pid = vault.pid();
  const int64_t rss_start = StatusKiB(vaultd_pid, "VmRSS");
  printf("vaultd pid %d, VmRSS at start %.1f MiB\n", vaultd_pid,
         static_cast<double>(rss_start) / 1024);
  fflush(stdout);

  std::map<std::string, Summary> vault_rtt, vault_msg;
  std::string rtt_cost, msg_cost;
  if (wanted("rtt") && rc == 0) {
    VaultdCost cost(vaultd_pid);
    absl::StatusOr<std::string> id = vault.SpawnWithVaultctl(
        guest, absl::StrCat("mode=rtt calls=", flags.calls, " warmup=", flags.warmup));
    absl::StatusOr<vault::v1::AgentStatus> st =
        id.ok() ? vault.WaitEnded(*id, absl::Seconds(120 + flags.calls / 100)) : id.status();
    rtt_cost = cost.Per(2 * int64_t{flags.calls + flags.warmup});
    absl::StatusOr<std::vector<std::string>> logs = st.ok() ? vault.Logs(*id) : st.status();
    if (!logs.ok()) {
      fail("host-call round trip in the vault", logs.status());
    } else {
      vault_rtt = ResultsOf(*logs);
      if (st->record().state() != vault::v1::COMPLETED || vault_rtt.size() != 2)
        fail("host-call round trip in the vault",
             absl::InternalError(absl::StrCat("agent ", *id, " state ", st->record().state(), " (",
                                              st->record().reason(),
                                              "): ", absl::StrJoin(*logs, " | "))));
    }
  }
  if (wanted("msg") && rc == 0) {
    VaultdCost cost(vaultd_pid);
    absl::StatusOr<std::string> pong = vault.SpawnWithVaultctl(guest, "mode=pong");
    absl::StatusOr<std::string> ping =
        pong.ok() ? vault.SpawnWithVaultctl(
                        guest, absl::StrCat("mode=ping peer=", *pong, " rounds=", flags.rounds,
                                            " warmup=", flags.warmup))
                  : pong.status();
    absl::StatusOr<vault::v1::AgentStatus> st =
        ping.ok() ? vault.WaitEnded(*ping, absl::Seconds(120 + flags.rounds / 100)) : ping.status();
    // A round: the ping's send and receive, the pong's receive and send.
    msg_cost = cost.Per(4 * int64_t{flags.rounds + flags.warmup});
    absl::StatusOr<std::vector<std::string>> logs = st.ok() ? vault.Logs(*ping) : st.status();
    if (!logs.ok()) {
      fail("agent-to-agent messages in the vault", logs.status());
    } else {
      vault_msg = ResultsOf(*logs);
      if (st->record().state() != vault::v1::COMPLETED || vault_msg.size() != 2)
        fail("agent-to-agent messages in the vault",
             absl::InternalError(absl::StrCat("agent ", *ping, " state ", st->record().state(),
                                              " (", st->record().reason(),
                                              "): ", absl::StrJoin(*logs, " | "))));
      (void)vault.WaitEnded(*pong, absl::Seconds(10));
    }
  }

  // Spawns.
  Summary vaultctl_ms;
  double vaultctl_rate = 0;
  Fanout grpc_spawn, terminate;
  double connected_s = -1;
  int connected = 0;
  int64_t rss_idle = -1, hwm_idle = -1, rss_before_spawn = -1;
  double idle_cpu_ms_per_s = -1;
  Descendants desc;
  uint64_t cgroup_bytes = 0;
  int running_listed = 0;
  int txtbsy_total = 0;
  if (wanted("spawn") && rc == 0) {
    std::vector<double> ms;
    std::vector<std::string> ids;
    const int64_t t0 = NowNs();
    for (int i = 0; i < flags.vaultctl_spawns && rc == 0; ++i) {
      const int64_t a = NowNs();
      absl::StatusOr<std::string> id = vault.SpawnWithVaultctl(guest, "mode=idle");
      if (!id.ok()) {
        fail("vaultctl agent spawn", id.status());
        break;
      }
      ms.push_back(static_cast<double>(NowNs() - a) / 1e6);
      ids.push_back(*id);
    }
    vaultctl_rate = static_cast<double>(ms.size()) / (static_cast<double>(NowNs() - t0) / 1e9);
    vaultctl_ms = Summarize(ms);
    // End them again, so that the gRPC phase starts from an empty vault.
    for (const std::string& id : ids) {
      auto stub = vault.NewAgentsStub();
      absl::StatusOr<vault::v1::ControlRequest> req = vault.TerminateRequest(id);
      if (!req.ok()) continue;
      grpc::ClientContext ctx;
      ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
      vault::v1::ControlResponse out;
      (void)stub->Control(&ctx, *req, &out);
    }
    for (const std::string& id : ids) (void)vault.WaitEnded(id, absl::Seconds(30));
  }
  if (wanted("spawn") && rc == 0) {
    std::vector<vault::v1::SpawnRequest> reqs;
    for (int i = 0; i < flags.agents; ++i) {
      absl::StatusOr<vault::v1::SpawnRequest> r = vault.SpawnRequest("mode=idle");
      if (!r.ok()) {
        fail("building spawn requests", r.status());
        break;
      }
      reqs.push_back(std::move(*r));
    }
    std::vector<std::unique_ptr<vault::v1::Agents::Stub>> stubs;
    for (int c = 0; c < flags.clients; ++c) stubs.push_back(vault.NewAgentsStub());
    std::vector<std::string> ids(static_cast<size_t>(flags.agents));
    std::atomic<int> txtbsy{0};
    rss_before_spawn = StatusKiB(vaultd_pid, "VmRSS");
    printf("\nspawning %d idle agents through Agents.Spawn from %d clients...\n", flags.agents,
           flags.clients);
    fflush(stdout);
    const int64_t t0 = NowNs();
    if (rc == 0) {
      grpc_spawn = RunFanout(flags.agents, flags.clients, [&](int c, int i) -> absl::Status {
        grpc::ClientContext ctx;
        ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
        vault::v1::SpawnResponse out;
        grpc::Status st =
            stubs[static_cast<size_t>(c)]->Spawn(&ctx, reqs[static_cast<size_t>(i)], &out);
        // Text file busy: another sandbox's child, cloned while this agent's code file was
        // open for writing, still held it. A new request (new agent id) is tried instead.
        for (int r = 0; !st.ok() && r < flags.spawn_retries &&
                        absl::StrContains(st.error_message(), "Text file busy");
             ++r) {
          txtbsy++;
          absl::StatusOr<vault::v1::SpawnRequest> again = vault.SpawnRequest("mode=idle");
          if (!again.ok()) return again.status();
          grpc::ClientContext ctx2;
          ctx2.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
          st = stubs[static_cast<size_t>(c)]->Spawn(&ctx2, *again, &out);
        }
        if (!st.ok()) return common::FromGrpc(st);
        ids[static_cast<size_t>(i)] = out.agent_id();
        return absl::OkStatus();
      });
      if (grpc_spawn.failures > 0)
        fail(absl::StrCat(grpc_spawn.failures, " of ", flags.agents, " Agents.Spawn calls failed"),
             absl::InternalError(grpc_spawn.first_error));
    }
    // Until every agent made its first host calls (get_state, then the receive it blocks in).
    std::vector<bool> up(ids.size(), false);
    const absl::Time deadline = absl::Now() + absl::Seconds(120 + flags.agents / 10);
    while (absl::Now() < deadline) {
      for (size_t i = 0; i < ids.size(); ++i) {
        if (up[i] || ids[i].empty()) continue;
        absl::StatusOr<vault::v1::AgentStatus> st = vault.Get(ids[i]);
        if (st.ok() && st->record().counters().host_calls() >= 2) {
          up[i] = true;
          connected++;
        }
      }
      if (connected == flags.agents - grpc_spawn.failures) break;
      absl::SleepFor(absl::Milliseconds(50));
    }
    connected_s = static_cast<double>(NowNs() - t0) / 1e9;
    absl::SleepFor(absl::Seconds(2));  // let vaultd settle (async audit, allocator)
    // What the idle agents cost vaultd's threads (each agent waits in a 60 s receive: no host
    // call comes, so no busy-polling either; the watchdog's ticks remain).
    {
      const int64_t cpu0 = ProcessCpuNs(vaultd_pid);
      const int64_t t0_ns = NowNs();
      absl::SleepFor(absl::Seconds(1));
      const int64_t cpu1 = ProcessCpuNs(vaultd_pid);
      if (cpu0 >= 0 && cpu1 >= 0) {
        idle_cpu_ms_per_s =
            static_cast<double>(cpu1 - cpu0) / 1e6 / (static_cast<double>(NowNs() - t0_ns) / 1e9);
      }
    }
    rss_idle = StatusKiB(vaultd_pid, "VmRSS");
    hwm_idle = StatusKiB(vaultd_pid, "VmHWM");
    desc = DescendantsOf(vaultd_pid);
    if (absl::StatusOr<vault::v1::ListAgentsResponse> l = vault.List(); l.ok()) {
      for (const auto& a : l->agents()) {
        if (a.state() == vault::v1::RUNNING) {
          running_listed++;
          cgroup_bytes += a.memory_bytes();
        }
      }
    }
    // Terminate them all.
    terminate =
        RunFanout(static_cast<int>(ids.size()), flags.clients, [&](int c, int i) -> absl::Status {
          if (ids[static_cast<size_t>(i)].empty()) return absl::OkStatus();
          absl::StatusOr<vault::v1::ControlRequest> req =
              vault.TerminateRequest(ids[static_cast<size_t>(i)]);
          if (!req.ok()) return req.status();
          grpc::ClientContext ctx;
          ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
          vault::v1::ControlResponse out;
          grpc::Status st = stubs[static_cast<size_t>(c)]->Control(&ctx, *req, &out);
          if (!st.ok()) return common::FromGrpc(st);
          return absl::OkStatus();
        });
    txtbsy_total = txtbsy.load();
    if (terminate.failures > 0)
      fail(absl::StrCat(terminate.failures, " terminations failed"),
           absl::InternalError(terminate.first_error));
  }
  const int64_t rss_end = StatusKiB(vaultd_pid, "VmRSS");
  const std::string stopped = vault.Stop();

  // --- report -------------------------------------------------------------------------------
  printf("\n=== 1. host-call round trip (us, measured in the guest around each call) ===");
  PrintHeader("");
  auto ratio = [](const Summary& a, const Summary& b) {
    return b.p50 > 0 ? absl::StrFormat("p50 ratio %.2f", a.p50 / b.p50) : std::string();
  };
  for (const char* kind : {"heartbeat", "self_inspect"}) {
    if (vault_rtt.count(kind))
      PrintRow(absl::StrCat("vault (sandbox + proxy) ", kind), vault_rtt[kind],
               base_rtt.count(kind)
                   ? absl::StrCat(ratio(vault_rtt[kind], base_rtt[kind]), " vs baseline")
                   : "");
    if (base_rtt.count(kind))
      PrintRow(absl::StrCat("baseline: same guest, echo server ", kind), base_rtt[kind]);
  }
  if (raw_rtt.n > 0) PrintRow("floor: raw 64-byte socketpair echo (threads)", raw_rtt);
  if (!rtt_cost.empty()) printf("%s\n", rtt_cost.c_str());
  if (vault_rtt.count("heartbeat")) {
    printf("target heartbeat p50 <= %.0f us: %s (%.2f us)\n", kTargetRttP50Us,
           Verdict(vault_rtt["heartbeat"].p50 <= kTargetRttP50Us).c_str(),
           vault_rtt["heartbeat"].p50);
  }

  printf("\n=== 2. agent-to-agent message, round trip / 2 (us, measured in the ping guest) ===");
  PrintHeader("");
  if (vault_msg.count("message_half_rtt"))
    PrintRow("vault: ping <-> pong (send + receive)", vault_msg["message_half_rtt"],
             base_msg.count("message_half_rtt")
                 ? absl::StrCat(ratio(vault_msg["message_half_rtt"], base_msg["message_half_rtt"]),
                                " vs fake vault; ",
                                raw_rtt.n > 0 ? absl::StrFormat("%.1f x raw",
                                                                vault_msg["message_half_rtt"].p50 /
                                                                    (raw_rtt.p50 / 2))
                                              : "")
                 : "");
  if (base_msg.count("message_half_rtt"))
    PrintRow("baseline: same guests, fake vault, no sandbox", base_msg["message_half_rtt"]);
  if (raw_rtt.n > 0) {
    Summary half = raw_rtt;
    for (double* v : {&half.min, &half.mean, &half.p50, &half.p90, &half.p99, &half.max}) *v /= 2;
    PrintRow("floor: raw socketpair ping-pong / 2", half);
  }
  if (!msg_cost.empty()) printf("%s\n", msg_cost.c_str());
  if (vault_msg.count("message_half_rtt")) {
    printf("target p50 <= %.0f us: %s (%.2f us)\n", kTargetMsgP50Us,
           Verdict(vault_msg["message_half_rtt"].p50 <= kTargetMsgP50Us).c_str(),
           vault_msg["message_half_rtt"].p50);
  }

  if (wanted("spawn")) {
    printf("\n=== 3. spawns and memory ===");
    PrintHeader("per spawn (ms)");
    if (sandbox_rate.has_value()) {
      PrintRow("LinuxSandbox alone, 1 thread", sandbox_rate->serial_ms,
               absl::StrFormat("%.1f spawns/s", sandbox_rate->rate_serial));
      PrintRow(absl::StrCat("LinuxSandbox alone, ", flags.clients, " threads"),
               sandbox_rate->parallel_ms,
               absl::StrFormat("%.1f spawns/s%s", sandbox_rate->rate_parallel,
                               sandbox_rate->failures
                                   ? absl::StrCat(" (", sandbox_rate->failures,
                                                  " failed: ", sandbox_rate->error, ")")
                                   : ""));
    }
    if (vaultctl_ms.n > 0)
      PrintRow("vaultctl agent spawn (sequential processes)", vaultctl_ms,
               absl::StrFormat("%.1f spawns/s", vaultctl_rate));
    if (!grpc_spawn.ms.empty()) {
      const double rate =
          static_cast<double>(static_cast<int>(grpc_spawn.ms.size()) - grpc_spawn.failures) /
          grpc_spawn.wall_s;
      PrintRow(absl::StrCat("Agents.Spawn, ", flags.clients, " clients"), Summarize(grpc_spawn.ms),
               absl::StrFormat("%.1f spawns/s%s", rate,
                               sandbox_rate.has_value()
                                   ? absl::StrFormat(" = %.2f x the sandbox alone",
                                                     rate / sandbox_rate->rate_parallel)
                                   : ""));
      printf(
          "%d of %d spawned in %.2f s (%d spawns refused with \"Text file busy\" and retried "
          "with a new id, %d failed for good); %d had made their first host calls after %.2f s\n",
          flags.agents - grpc_spawn.failures, flags.agents, grpc_spawn.wall_s, txtbsy_total,
          grpc_spawn.failures, connected, connected_s);
      printf("target >= %.0f spawns/s: %s (%.1f)\n", kTargetSpawnsPerS,
             Verdict(rate >= kTargetSpawnsPerS).c_str(), rate);
      printf(
          "vaultd VmRSS: %.1f MiB at start, %.1f MiB before the spawns, %.1f MiB with %d idle "
          "agents (VmHWM %.1f MiB), %.1f MiB after terminating them\n",
          static_cast<double>(rss_start) / 1024, static_cast<double>(rss_before_spawn) / 1024,
          static_cast<double>(rss_idle) / 1024, connected, static_cast<double>(hwm_idle) / 1024,
          static_cast<double>(rss_end) / 1024);
      if (idle_cpu_ms_per_s >= 0)
        printf("vaultd CPU with %d idle agents: %.2f ms per second (all its threads)\n", connected,
               idle_cpu_ms_per_s);
      printf("target vaultd RSS <= %.0f MiB: %s (%.1f MiB)\n", kTargetVaultdRssMiB,
             Verdict(static_cast<double>(rss_idle) / 1024 <= kTargetVaultdRssMiB).c_str(),
             static_cast<double>(rss_idle) / 1024);
      printf(
          "vaultd's descendants: %d processes, VmRSS sum %.1f MiB (%.1f KiB per agent; "
          "shared libraries counted in every process), Pss sum %.1f MiB (%.1f KiB per agent)\n",
          desc.processes, static_cast<double>(desc.rss_kib) / 1024,
          connected > 0 ? static_cast<double>(desc.rss_kib) / connected : 0.0,
          static_cast<double>(desc.pss_kib) / 1024,
          connected > 0 ? static_cast<double>(desc.pss_kib) / connected : 0.0);
      for (const auto& [comm, v] : desc.by_comm)
        printf("  %-20s %5d processes, %8.1f MiB\n", comm.c_str(), v.first,
               static_cast<double>(v.second) / 1024);
      printf("agents' cgroup memory (Agents.List memory_bytes, %d running): %.1f MiB\n",
             running_listed, static_cast<double>(cgroup_bytes) / (1 << 20));
      if (!terminate.ms.empty())
        printf("terminate (Agents.Control, %d clients): %.1f /s, p50 %.2f ms\n", flags.clients,
               static_cast<double>(terminate.ms.size()) / terminate.wall_s,
               Summarize(terminate.ms).p50);
    }
  }
  printf("\nvaultd stopped: %s; load average after %.2f\n", stopped.c_str(), LoadAverage());

  // Machine-readable results for bench/run; a figure that was not measured is null.
  printf("\n");
  auto result = [&](std::string metric, std::string label, std::string unit, double target,
                    vault::bench::Better better) {
    vault::bench::Result r;
    r.bench = "agent_bench";
    r.metric = std::move(metric);
    r.label = std::move(label);
    r.issue = 6;
    r.unit = std::move(unit);
    r.target = target;
    r.better = better;
    return r;
  };
  const char* kFailed = "not measured: see agent_bench's errors";
  if (wanted("rtt")) {
    vault::bench::Result r =
        result("agent.host_call_rtt.p50", "host-call round trip (heartbeat), p50", "us",
               kTargetRttP50Us, vault::bench::Better::kLower);
    if (vault_rtt.count("heartbeat")) r.value = vault_rtt["heartbeat"].p50;
    if (base_rtt.count("heartbeat")) r.baseline = base_rtt["heartbeat"].p50;
    r.baseline_name = "same guest, echo server, no sandbox";
    if (!r.value.has_value()) {
      r.note = kFailed;
    } else if (raw_rtt.n > 0) {
      r.note = absl::StrFormat("raw socketpair echo p50 %.2f us", raw_rtt.p50);
    }
    vault::bench::EmitResult(r);
  }
  if (wanted("msg")) {
    vault::bench::Result r =
        result("agent.message.p50", "agent-to-agent message (round trip / 2), p50", "us",
               kTargetMsgP50Us, vault::bench::Better::kLower);
    if (vault_msg.count("message_half_rtt")) r.value = vault_msg["message_half_rtt"].p50;
    if (base_msg.count("message_half_rtt")) r.baseline = base_msg["message_half_rtt"].p50;
    r.baseline_name = "same guests, fake vault, no sandbox";
    if (!r.value.has_value()) {
      r.note = kFailed;
    } else if (raw_rtt.n > 0) {
      r.note = absl::StrFormat("raw socketpair ping-pong / 2 p50 %.2f us", raw_rtt.p50 / 2);
    }
    vault::bench::EmitResult(r);
  }
  if (wanted("spawn")) {
    vault::bench::Result rate =
        result("agent.spawn_rate",
               absl::StrCat("agent spawns (Agents.Spawn, ", flags.clients, " clients, ",
                            flags.agents, " agents)"),
               "spawns/s", kTargetSpawnsPerS, vault::bench::Better::kHigher);
    if (!grpc_spawn.ms.empty() && grpc_spawn.wall_s > 0) {
      rate.value =
          static_cast<double>(static_cast<int>(grpc_spawn.ms.size()) - grpc_spawn.failures) /
          grpc_spawn.wall_s;
    }
    if (sandbox_rate.has_value()) rate.baseline = sandbox_rate->rate_parallel;
    rate.baseline_name = absl::StrCat("LinuxSandbox alone, ", flags.clients, " threads");
    if (!rate.value.has_value()) rate.note = kFailed;
    vault::bench::EmitResult(rate);
    vault::bench::Result rss =
        result("agent.vaultd_rss", absl::StrCat("vaultd RSS with ", connected, " idle agents"),
               "MiB", kTargetVaultdRssMiB, vault::bench::Better::kLower);
    if (rss_idle >= 0 && connected > 0) rss.value = static_cast<double>(rss_idle) / 1024;
    if (rss_before_spawn >= 0) rss.baseline = static_cast<double>(rss_before_spawn) / 1024;
    rss.baseline_name = "vaultd before the spawns";
    if (!rss.value.has_value()) {
      rss.note = kFailed;
    } else if (connected < 1000) {
      rss.note = "the target is for 1,000 idle agents";
    }
    if (rss.value.has_value() && idle_cpu_ms_per_s >= 0) {
      rss.note =
          absl::StrCat(rss.note, rss.note.empty() ? "" : "; ",
                       absl::StrFormat("vaultd CPU while they idle %.2f ms/s", idle_cpu_ms_per_s));
    }
    vault::bench::EmitResult(rss);
  }
  if (rc != 0) {
    std::string log = Slurp(vault.log());
    if (log.size() > 4000) log = log.substr(log.size() - 4000);
    fprintf(stderr, "--- vaultd log (tail) ---\n%s\n", log.c_str());
  }
  if (flags.keep) {
    printf("kept %s\n", tmp.c_str());
  } else {
    std::filesystem::remove_all(tmp, ec);
  }
  return rc;
}

}  // namespace
}  // namespace vault::bench

int main(int argc, char** argv) { return vault::bench::Main(argc, argv); }
