#include "integration-tests/harness.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/sha256.h"
#include "common/unique_fd.h"

extern char** environ;

namespace vault::integration {
namespace {

absl::Status Errno(absl::string_view what) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(errno)));
}

// The environment for children: ours, without VAULT_ADDR.
std::vector<std::string> ChildEnvironment() {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    if (!absl::StartsWith(*e, "VAULT_ADDR=")) env.emplace_back(*e);
  }
  return env;
}

std::vector<char*> CStrings(std::vector<std::string>& v) {
  std::vector<char*> out;
  for (std::string& s : v) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

int DecodeWaitStatus(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

using Fd = common::UniqueFd;

// Owns a posix_spawn_file_actions_t.
class FileActions {
 public:
  FileActions() { posix_spawn_file_actions_init(&fa_); }
  FileActions(const FileActions&) = delete;
  FileActions& operator=(const FileActions&) = delete;
  ~FileActions() { posix_spawn_file_actions_destroy(&fa_); }
  posix_spawn_file_actions_t* get() { return &fa_; }

 private:
  posix_spawn_file_actions_t fa_;
};

absl::StatusOr<pid_t> Spawn(const std::vector<std::string>& argv, FileActions& actions) {
  std::vector<std::string> args = argv;
  std::vector<std::string> env = ChildEnvironment();
  std::vector<char*> c_args = CStrings(args);
  std::vector<char*> c_env = CStrings(env);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, c_args[0], actions.get(), nullptr, c_args.data(), c_env.data());
  if (rc != 0) {
    return absl::InternalError(absl::StrCat("posix_spawn ", argv[0], ": ", std::strerror(rc)));
  }
  return pid;
}

std::string Tail(const std::string& text, size_t bytes) {
  return text.size() <= bytes ? text : "..." + text.substr(text.size() - bytes);
}

}  // namespace

const std::string& VaultdPath() {
  static const std::string* path = new std::string(VAULT_IT_VAULTD);
  return *path;
}

const std::string& VaultctlPath() {
  static const std::string* path = new std::string(VAULT_IT_VAULTCTL);
  return *path;
}

std::ostream& operator<<(std::ostream& os, const RunResult& r) {
  return os << "exit " << r.exit_code << (r.timed_out ? " (timed out)" : "") << "\n--- stdout\n"
            << Tail(r.out, 4000) << "\n--- stderr\n"
            << Tail(r.err, 4000);
}

RunResult RunProgram(const std::vector<std::string>& argv, absl::Duration timeout) {
  RunResult result;
  int out_pipe[2], err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0) {
    result.err = Errno("pipe2").ToString();
    return result;
  }
  Fd out_r(out_pipe[0]), out_w(out_pipe[1]);
  if (pipe2(err_pipe, O_CLOEXEC) != 0) {
    result.err = Errno("pipe2").ToString();
    return result;
  }
  Fd err_r(err_pipe[0]), err_w(err_pipe[1]);
  FileActions actions;
  posix_spawn_file_actions_addopen(actions.get(), STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(actions.get(), out_w.get(), STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(actions.get(), err_w.get(), STDERR_FILENO);
  absl::StatusOr<pid_t> pid = Spawn(argv, actions);
  out_w.Reset();
  err_w.Reset();
  if (!pid.ok()) {
    result.err = pid.status().ToString();
    return result;
  }

  const absl::Time deadline = absl::Now() + timeout;
  bool killed = false;
  struct Stream {
    int fd;
    std::string* sink;
    bool open = true;
  };
  Stream streams[2] = {{out_r.get(), &result.out}, {err_r.get(), &result.err}};
  char buf[65536];
  while (streams[0].open || streams[1].open) {
    pollfd fds[2];
    nfds_t n = 0;
    Stream* which[2];
    for (Stream& s : streams) {
      if (!s.open) continue;
      fds[n] = {.fd = s.fd, .events = POLLIN, .revents = 0};
      which[n++] = &s;
    }
    int wait_ms = 100;
    if (!killed) {
      absl::Duration left = deadline - absl::Now();
      if (left <= absl::ZeroDuration()) {
        kill(*pid, SIGKILL);  // our own child
        killed = true;
        result.timed_out = true;
      } else {
        wait_ms = static_cast<int>(std::min<int64_t>(absl::ToInt64Milliseconds(left) + 1, 1000));
      }
    }
    int ready = poll(fds, n, wait_ms);
    if (ready < 0 && errno != EINTR) break;
    for (nfds_t i = 0; ready > 0 && i < n; ++i) {
      if (fds[i].revents == 0) continue;
      ssize_t got = read(which[i]->fd, buf, sizeof(buf));
      if (got > 0) {
        which[i]->sink->append(buf, static_cast<size_t>(got));
      } else if (got == 0 || errno != EINTR) {
        which[i]->open = false;
      }
    }
  }
  int status = 0;
  while (waitpid(*pid, &status, 0) < 0 && errno == EINTR) {
  }
  result.exit_code = DecodeWaitStatus(status);
  return result;
}

absl::StatusOr<std::unique_ptr<ChildProcess>> ChildProcess::Spawn(
    const std::vector<std::string>& argv, const std::string& log_path) {
  FileActions actions;
  posix_spawn_file_actions_addopen(actions.get(), STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(actions.get(), STDOUT_FILENO, log_path.c_str(),
                                   O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(actions.get(), STDOUT_FILENO, STDERR_FILENO);
  absl::StatusOr<pid_t> pid = integration::Spawn(argv, actions);
  if (!pid.ok()) return pid.status();
  return std::unique_ptr<ChildProcess>(new ChildProcess(*pid));
}

ChildProcess::~ChildProcess() {
  if (reaped_) return;
  kill(pid_, SIGKILL);
  WaitExit(absl::InfiniteDuration());
}

void ChildProcess::Signal(int sig) {
  if (!reaped_) kill(pid_, sig);
}

bool ChildProcess::Running() { return !WaitExit(absl::ZeroDuration()).has_value(); }

std::optional<int> ChildProcess::WaitExit(absl::Duration timeout) {
  if (reaped_) return exit_code_;
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    int status = 0;
    pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      reaped_ = true;
      exit_code_ = DecodeWaitStatus(status);
      return exit_code_;
    }
    if (r < 0 && errno != EINTR) {  // not our child any more: nothing to wait for
      reaped_ = true;
      return exit_code_;
    }
    if (absl::Now() >= deadline) return std::nullopt;
    absl::SleepFor(absl::Milliseconds(5));
  }
}

absl::Status Vaultd::Start(absl::Duration timeout) {
  if (Running()) return absl::FailedPreconditionError("vaultd is running already");
  const std::string ready_path = vault_.data_dir + "/vaultd.ready";
  unlink(ready_path.c_str());  // a SIGKILLed vaultd leaves its ready file behind
  std::vector<std::string> argv = {VaultdPath(), "--config", vault_.config};
  argv.insert(argv.end(), extra_args_.begin(), extra_args_.end());
  argv.insert(argv.begin(), command_prefix_.begin(), command_prefix_.end());
  {
    std::ofstream log(log_path_, std::ios::app);
    log << "=== " << absl::StrJoin(argv, " ") << "\n";
  }
  absl::StatusOr<std::unique_ptr<ChildProcess>> child = ChildProcess::Spawn(argv, log_path_);
  if (!child.ok()) return child.status();
  process_ = *std::move(child);
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (std::optional<int> code = process_->WaitExit(absl::ZeroDuration())) {
      absl::StatusOr<std::string> log = ReadFile(log_path_);
      return absl::FailedPreconditionError(absl::StrCat("vaultd exited with ", *code,
                                                        " before it was ready; log:\n",
                                                        Tail(log.value_or(""), 3000)));
    }
    absl::StatusOr<std::string> ready = ReadFile(ready_path);
    if (ready.ok() && JsonField(*ready, "pid") == std::to_string(process_->pid())) {
      listen_address_ = JsonField(*ready, "listen_address").value_or("");
      return absl::OkStatus();
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  Kill();
  return absl::DeadlineExceededError(
      absl::StrCat("vaultd was not ready within ", absl::FormatDuration(timeout)));
}

std::optional<int> Vaultd::Stop(absl::Duration timeout) {
  if (process_ == nullptr) return std::nullopt;
  process_->Signal(SIGTERM);
  return process_->WaitExit(timeout);
}

void Vaultd::Kill() {
  if (process_ == nullptr) return;
  process_->Signal(SIGKILL);
  process_->WaitExit(absl::InfiniteDuration());
}

void VaultTest::SetUp() {
  // Short paths: the admin socket must fit in sockaddr_un (108 bytes).
  char tmpl[] = "/tmp/vault-it-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr) << std::strerror(errno);
  root_ = tmpl;
}

void VaultTest::TearDown() {
  const bool failed = HasFailure();
  for (std::unique_ptr<Vaultd>& d : daemons_) d->Kill();
  for (std::unique_ptr<Vaultd>& d : daemons_) {
    std::string log = ReadFile(d->log_path()).value_or("");
    // Sanitizer reports of vaultd land in its log.
    for (absl::string_view marker :
         {"AddressSanitizer", "LeakSanitizer", "UndefinedBehaviorSanitizer", "ThreadSanitizer",
          "runtime error:"}) {
      if (absl::StrContains(log, marker)) {
        ADD_FAILURE() << "sanitizer finding (" << marker << ") in " << d->log_path() << ":\n"
                      << Tail(log, 20000);
        break;
      }
    }
    if (failed) std::cerr << "--- " << d->log_path() << " (tail)\n" << Tail(log, 3000) << "\n";
  }
  daemons_.clear();
  if (root_.empty()) return;
  if (failed && std::getenv("VAULT_IT_KEEP") != nullptr) {
    std::cerr << "keeping " << root_ << " (VAULT_IT_KEEP)\n";
    return;
  }
  std::error_code ec;
  std::filesystem::remove_all(root_, ec);
}

RunResult VaultTest::Vaultctl(const std::vector<std::string>& args, absl::Duration timeout) {
  std::vector<std::string> argv = {VaultctlPath()};
  argv.insert(argv.end(), args.begin(), args.end());
  RunResult r = RunProgram(argv, timeout);
  // vaultctl's own sanitizer findings: it aborts (-fno-sanitize-recover), so the exit code shows
  // it too, but the report is clearer.
  EXPECT_FALSE(absl::StrContains(r.err, "Sanitizer") || absl::StrContains(r.err, "runtime error:"))
      << "sanitizer finding in vaultctl " << absl::StrJoin(args, " ") << ":\n"
      << r.err;
  return r;
}

std::string VaultTest::CreateCa(const std::string& dir) {
  std::string path = absl::StrCat(root_, "/", dir);
  RunResult r = Vaultctl({"federation", "create-ca", "--dir", path, "--name", "it-federation"});
  EXPECT_EQ(r.exit_code, kExitOk) << r;
  return r.exit_code == kExitOk ? path : "";
}

absl::StatusOr<VaultDir> VaultTest::InitVault(const std::string& name, const std::string& ca_dir) {
  absl::StatusOr<int> port = FreeLoopbackPort();
  if (!port.ok()) return port.status();
  VaultDir v;
  v.name = name;
  v.dir = absl::StrCat(root_, "/", name);
  v.address = absl::StrCat("127.0.0.1:", *port);
  std::vector<std::string> args = {"--output", "json", "init",     "--name", name,
                                   "--dir",    v.dir,  "--listen", v.address};
  if (!ca_dir.empty()) {
    args.push_back("--ca");
    args.push_back(ca_dir);
  }
  RunResult r = Vaultctl(args);
  if (r.exit_code != kExitOk) {
    return absl::InternalError(absl::StrCat("vaultctl init failed: ", ::testing::PrintToString(r)));
  }
  v.config = JsonField(r.out, "config").value_or("");
  v.socket = JsonField(r.out, "admin_socket").value_or("");
  v.public_key = JsonField(r.out, "public_key").value_or("");
  v.data_dir = v.dir + "/data";
  if (v.config != v.dir + "/vault.conf" || v.socket != v.data_dir + "/vault.sock" ||
      !absl::StartsWith(v.public_key, "ed25519:")) {
    return absl::InternalError(absl::StrCat("unexpected vaultctl init output: ", r.out));
  }
  return v;
}

absl::Status VaultTest::AddMember(const VaultDir& to, const VaultDir& peer) {
  RunResult r =
      Vaultctl({"federation", "add-member", "--config", to.config, "--peer-config", peer.config});
  if (r.exit_code != kExitOk) {
    return absl::InternalError(absl::StrCat("add-member failed: ", ::testing::PrintToString(r)));
  }
  return absl::OkStatus();
}

absl::StatusOr<Vaultd*> VaultTest::StartVaultd(const VaultDir& vault,
                                               std::vector<std::string> extra_args) {
  std::string log = absl::StrCat(root_, "/", vault.name, ".vaultd.log");
  daemons_.push_back(std::make_unique<Vaultd>(vault, log, std::move(extra_args)));
  Vaultd* d = daemons_.back().get();
  if (absl::Status s = d->Start(); !s.ok()) return s;
  return d;
}

absl::StatusOr<Vaultd*> VaultTest::StartStandaloneVault(const std::string& name) {
  absl::StatusOr<VaultDir> v = InitVault(name, /*ca_dir=*/"");
  if (!v.ok()) return v.status();
  return StartVaultd(*v, {"--listen", "127.0.0.1:0"});
}

uint64_t VaultTest::Seed() {
  uint64_t seed = 0;
  const char* env = std::getenv("VAULT_IT_SEED");
  if (env == nullptr || !absl::SimpleAtoi(env, &seed)) seed = std::random_device{}();
  std::cerr << "random seed " << seed << " (replay with VAULT_IT_SEED=" << seed << ")\n";
  RecordProperty("seed", std::to_string(seed));
  return seed;
}

// A port below the kernel's ephemeral range (ip_local_port_range), free when asked: a port the
// kernel handed out would be free again once closed, and then any test's outgoing connection may
// take it as its source port before the vaultd it was picked for binds it.
absl::StatusOr<int> FreeLoopbackPort() {
  auto try_bind = [](int port) -> absl::StatusOr<int> {
    Fd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (fd.get() < 0) return Errno("socket");
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    if (bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) return Errno("bind");
    socklen_t len = sizeof(addr);
    if (getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      return Errno("getsockname");
    }
    return ntohs(addr.sin_port);
  };
  int low = 32768;
  if (absl::StatusOr<std::string> range = ReadFile("/proc/sys/net/ipv4/ip_local_port_range");
      range.ok()) {
    std::vector<std::string> parts =
        absl::StrSplit(*range, absl::ByAnyChar(" \t\n"), absl::SkipEmpty());
    if (!parts.empty()) (void)absl::SimpleAtoi(parts[0], &low);
  }
  if (low > 12000) {
    thread_local std::mt19937 random{std::random_device{}()};
    std::uniform_int_distribution<int> pick(low - 11000, low - 1);
    for (int attempt = 0; attempt < 100; ++attempt) {
      absl::StatusOr<int> port = try_bind(pick(random));
      if (port.ok()) return port;
    }
  }
  return try_bind(0);
}

absl::Status WriteFile(const std::string& path, absl::string_view data) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(data.data(), static_cast<std::streamsize>(data.size()));
  f.close();
  if (!f) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string Sha256(absl::string_view data) { return common::Sha256::Hash(data); }

std::string Hex(absl::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out.push_back(kDigits[c >> 4]);
    out.push_back(kDigits[c & 15]);
  }
  return out;
}

std::string DigestText(absl::string_view data) {
  return absl::StrCat("sha256:", Hex(Sha256(data)), "/", data.size());
}

std::string DigestText(const vault::v1::Digest& d) {
  return absl::StrCat("sha256:", Hex(d.sha256()), "/", d.size());
}

vault::v1::Digest DigestProto(absl::string_view data) {
  vault::v1::Digest d;
  d.set_sha256(Sha256(data));
  d.set_size(data.size());
  return d;
}

std::string RandomBytes(std::mt19937_64& rng, size_t n) {
  std::string out(n, '\0');
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t v = rng();
    std::memcpy(out.data() + i, &v, 8);
  }
  for (; i < n; ++i) out[i] = static_cast<char>(rng());
  return out;
}

std::optional<std::string> JsonField(absl::string_view json, absl::string_view key) {
  std::string quoted = absl::StrCat("\"", key, "\":");
  size_t at = json.find(quoted);
  if (at == absl::string_view::npos) return std::nullopt;
  size_t i = at + quoted.size();
  while (i < json.size() && json[i] == ' ') ++i;
  if (i >= json.size()) return std::nullopt;
  std::string value;
  if (json[i] == '"') {
    for (++i; i < json.size() && json[i] != '"'; ++i) {
      if (json[i] == '\\' && i + 1 < json.size()) ++i;
      value.push_back(json[i]);
    }
    return value;
  }
  for (; i < json.size() && json[i] != ',' && json[i] != '}' && json[i] != ']' && json[i] != ' ' &&
         json[i] != '\n';
       ++i) {
    value.push_back(json[i]);
  }
  return value;
}

std::shared_ptr<grpc::Channel> UnixChannel(const std::string& socket) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  args.SetMaxSendMessageSize(64 << 20);
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 50);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 50);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 500);
  return grpc::CreateCustomChannel(absl::StrCat("unix:", socket),
                                   grpc::InsecureChannelCredentials(), args);
}

std::unique_ptr<vault::v1::Cas::Stub> CasStub(const std::string& socket) {
  return vault::v1::Cas::NewStub(UnixChannel(socket));
}

void SetDeadline(grpc::ClientContext* ctx, absl::Duration timeout) {
  ctx->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
}

absl::StatusOr<Vaultd*> VaultTest::StartVaultdWithPrefix(const VaultDir& vault,
                                                         std::vector<std::string> prefix,
                                                         std::vector<std::string> extra_args) {
  std::string log = absl::StrCat(root_, "/", vault.name, ".vaultd.log");
  daemons_.push_back(std::make_unique<Vaultd>(vault, log, std::move(extra_args)));
  Vaultd* d = daemons_.back().get();
  d->set_command_prefix(std::move(prefix));
  if (absl::Status s = d->Start(); !s.ok()) return s;
  return d;
}

}  // namespace vault::integration
