// bench/agent_bench_vault: a real vaultd driven as an operator drives it (vaultctl, or its gRPC
// API with links signed as vaultctl signs them), and its processes measured through /proc.
#include "bench/agent_bench_vault.h"

#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/agent_bench_util.h"
#include "bench/bench_util.h"
#include "capability/chain.h"
#include "capability/principal.h"
#include "capability/signing_domains.h"
#include "capability/text_form.h"
#include "common/proto_util.h"
#include "common/random.h"
#include "vault/v1/admin.grpc.pb.h"
#include "vault/v1/agent.grpc.pb.h"

#ifndef AGENT_BENCH_VAULTD
#define AGENT_BENCH_VAULTD "vaultd"
#endif
#ifndef AGENT_BENCH_VAULTCTL
#define AGENT_BENCH_VAULTCTL "vaultctl"
#endif

extern char** environ;

namespace vault::bench {
namespace {

using capability::kControlDomain;

struct SpawnResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

// Runs argv (absolute path) with stdout and stderr into files under `tmp`, and waits.
SpawnResult SpawnAndWait(const std::vector<std::string>& argv, const std::string& tmp) {
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
  SpawnResult r;
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
  r.out = ReadAll(out_path);
  r.err = ReadAll(err_path);
  unlink(out_path.c_str());
  unlink(err_path.c_str());
  return r;
}

// Voluntary context switches (a thread went to sleep) of a process's threads; -1 when unreadable.
int64_t VoluntarySwitches(pid_t pid) {
  std::error_code ec;
  int64_t total = 0;
  bool any = false;
  for (const auto& task :
       std::filesystem::directory_iterator(absl::StrCat("/proc/", pid, "/task"), ec)) {
    std::string s = ReadAll(task.path().string() + "/status");
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

// The value in kB of `field` ("VmRSS", "Pss") in a /proc file of "Field:   123 kB" lines; -1
// when it is missing.
int64_t KiBField(const std::string& text, absl::string_view field) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (absl::ConsumePrefix(&line, field) && absl::ConsumePrefix(&line, ":")) {
      int64_t v = -1;
      line = absl::StripAsciiWhitespace(line);
      absl::ConsumeSuffix(&line, " kB");
      if (absl::SimpleAtoi(line, &v)) return v;
    }
  }
  return -1;
}

int64_t PssKiB(pid_t pid) {
  const int64_t pss = KiBField(ReadAll(absl::StrCat("/proc/", pid, "/smaps_rollup")), "Pss");
  return pss < 0 ? 0 : pss;
}

constexpr char kSpec[] = R"((agent
  (purpose "agent_bench")
  (capabilities (send (agent "*")) (receive (from "*")) (cas-write))
  (constraints (max-runtime 86400) (max-memory (* 256 1024 1024)) (max-cpu 3600)
               (max-processes 16) (max-open-files 64)))
)";

}  // namespace

VaultBinaries& Binaries() {
  static VaultBinaries binaries{AGENT_BENCH_VAULTD, AGENT_BENCH_VAULTCTL};
  return binaries;
}

int64_t StatusKiB(pid_t pid, absl::string_view field) {
  return KiBField(ReadAll(absl::StrCat("/proc/", pid, "/status")), field);
}

int64_t ProcessCpuNs(pid_t pid) {
  std::error_code ec;
  int64_t total = 0;
  bool any = false;
  for (const auto& task :
       std::filesystem::directory_iterator(absl::StrCat("/proc/", pid, "/task"), ec)) {
    std::string s = ReadAll(task.path().string() + "/schedstat");
    int64_t ns;
    std::vector<absl::string_view> f = absl::StrSplit(s, ' ');
    if (!f.empty() && absl::SimpleAtoi(f[0], &ns)) {
      total += ns;
      any = true;
    }
  }
  return any ? total : -1;
}

VaultdCost::VaultdCost(pid_t p) : pid(p), cpu0(ProcessCpuNs(p)), switches0(VoluntarySwitches(p)) {}
std::string VaultdCost::Per(int64_t calls) const {
  int64_t cpu = ProcessCpuNs(pid), sw = VoluntarySwitches(pid);
  if (calls <= 0 || cpu < 0 || sw < 0 || cpu0 < 0 || switches0 < 0) return "";
  return absl::StrFormat("vaultd per host call: %.2f us CPU, %.3f voluntary context switches",
                         static_cast<double>(cpu - cpu0) / 1e3 / static_cast<double>(calls),
                         static_cast<double>(sw - switches0) / static_cast<double>(calls));
}

Descendants DescendantsOf(pid_t root) {
  std::map<pid_t, pid_t> parent;
  std::map<pid_t, std::string> comm;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    pid_t pid = 0;
    if (!absl::SimpleAtoi(e.path().filename().string(), &pid)) continue;
    std::string stat = ReadAll(absl::StrCat("/proc/", pid, "/stat"));
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

absl::Status Vault::Init(const std::string& tmp, bool sync_writes) {
  tmp_ = tmp;
  dir_ = tmp + "/v";
  const int port = FreeLoopbackPort();
  SpawnResult r = SpawnAndWait({Binaries().vaultctl, "init", "--name", "agent-bench", "--dir", dir_,
                                "--listen", absl::StrCat("127.0.0.1:", port)},
                               tmp);
  if (r.exit_code != 0) return absl::InternalError(absl::StrCat("vaultctl init: ", r.err));
  // The quotas: 100 agents and 1000 host calls/s per principal by default.
  std::string conf = ReadAll(dir_ + "/vault.conf");
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

absl::Status Vault::Start() {
  log_ = tmp_ + "/vaultd.log";
  const std::string conf = dir_ + "/vault.conf";
  const std::string& vaultd = Binaries().vaultd;
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
    execl(vaultd.c_str(), vaultd.c_str(), "--config", conf.c_str(), "--listen", "127.0.0.1:0",
          static_cast<char*>(nullptr));
    _exit(127);
  }
  const std::string ready = dir_ + "/data/vaultd.ready";
  const int64_t deadline = NowNs() + 30'000'000'000;
  while (NowNs() < deadline) {
    if (absl::StrContains(ReadAll(ready), absl::StrCat("\"pid\": ", pid_))) break;
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return absl::FailedPreconditionError(absl::StrCat("vaultd exited: ", ReadAll(log_)));
    }
    usleep(20000);
  }
  if (!absl::StrContains(ReadAll(ready), "pid"))
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
  return SetSpec(kSpec);
}

absl::Status Vault::SetSpec(const std::string& spec_text) {
  absl::StatusOr<vault::v1::AgentSpec> spec = capability::ParseAgentSpec(spec_text, "spec");
  if (!spec.ok()) return spec.status();
  spec_ = *spec;
  static int n = 0;
  spec_path_ = absl::StrCat(tmp_, "/spec", n++, ".scm");
  std::ofstream(spec_path_) << spec_text;
  code_.Clear();
  return absl::OkStatus();
}

std::string Vault::Stop() {
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

absl::StatusOr<std::string> Vault::SpawnWithVaultctl(const std::string& guest,
                                                     const std::string& state) {
  static int n = 0;
  const std::string state_path = absl::StrCat(tmp_, "/state", n++);
  std::ofstream(state_path, std::ios::trunc) << state;
  SpawnResult r =
      SpawnAndWait({Binaries().vaultctl, "--vault", socket_, "agent", "spawn", spec_path_, "--code",
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

absl::StatusOr<vault::v1::AgentStatus> Vault::Get(const std::string& id) {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
  vault::v1::GetAgentRequest req;
  req.set_id(id);
  vault::v1::AgentStatus out;
  grpc::Status s = agents_->Get(&ctx, req, &out);
  if (!s.ok()) return absl::UnavailableError(absl::StrCat("Agents.Get: ", s.error_message()));
  return out;
}

absl::StatusOr<vault::v1::ListAgentsResponse> Vault::List() {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
  vault::v1::ListAgentsResponse out;
  grpc::Status s = agents_->List(&ctx, vault::v1::ListAgentsRequest(), &out);
  if (!s.ok()) return absl::UnavailableError(absl::StrCat("Agents.List: ", s.error_message()));
  return out;
}

absl::StatusOr<vault::v1::AgentStatus> Vault::WaitEnded(const std::string& id,
                                                        absl::Duration limit) {
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

absl::StatusOr<std::vector<std::string>> Vault::Logs(const std::string& id) {
  SpawnResult r = SpawnAndWait(
      {Binaries().vaultctl, "--vault", socket_, "-o", "json", "agent", "logs", id}, tmp_);
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

absl::StatusOr<vault::v1::SpawnRequest> Vault::SpawnRequest(const std::string& state) {
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

absl::StatusOr<vault::v1::ControlRequest> Vault::TerminateRequest(const std::string& id) {
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

std::unique_ptr<vault::v1::Agents::Stub> Vault::NewAgentsStub() const {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return vault::v1::Agents::NewStub(grpc::CreateCustomChannel(
      absl::StrCat("unix:", socket_), grpc::InsecureChannelCredentials(), args));
}

}  // namespace vault::bench
