#include "bench/bench_util.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <numeric>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace vault::bench {

void Die(const std::string& what) {
  std::fprintf(stderr, "bench: %s\n", what.c_str());
  std::exit(1);
}

namespace {

// Reads `fd` to its end.
std::string Drain(int fd) {
  std::string out;
  char buf[65536];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  return out;
}

}  // namespace

RunResult Run(const std::vector<std::string>& argv) {
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) Die("pipe");
  const absl::Time start = absl::Now();
  pid_t pid = fork();
  if (pid < 0) Die("fork");
  if (pid == 0) {
    int null = open("/dev/null", O_RDONLY);
    dup2(null, 0);
    dup2(out[1], 1);
    dup2(err[1], 2);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    _exit(127);
  }
  close(out[1]);
  close(err[1]);
  RunResult r;
  // stderr is small (messages); read it after stdout, which may be large.
  r.out = Drain(out[0]);
  r.err = Drain(err[0]);
  close(out[0]);
  close(err[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  r.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

RunResult MustRun(const std::vector<std::string>& argv) {
  RunResult r = Run(argv);
  if (r.code != 0) {
    Die(absl::StrCat(absl::StrJoin(argv, " "), " exited with ", r.code, ": ", r.err, r.out));
  }
  return r;
}

int FreeLoopbackPort() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) Die("bind");
  socklen_t len = sizeof addr;
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

std::string ReadAll(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void WriteAll(const std::string& path, const std::string& data) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(data.data(), static_cast<std::streamsize>(data.size()));
  if (!f) Die("write " + path);
}

std::string JsonField(const std::string& json, const std::string& key) {
  const std::string k = absl::StrCat("\"", key, "\":");
  size_t at = json.find(k);
  if (at == std::string::npos) return "";
  at += k.size();
  if (at < json.size() && json[at] == '"') {
    size_t end = json.find('"', at + 1);
    return json.substr(at + 1, end - at - 1);
  }
  size_t end = json.find_first_of(",}", at);
  return json.substr(at, end - at);
}

Summary Summarize(std::vector<double> v) {
  Summary s;
  s.n = v.size();
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  auto rank = [&](double p) {
    size_t i = static_cast<size_t>(std::ceil(p * static_cast<double>(v.size())));
    return v[std::min(v.size() - 1, i == 0 ? 0 : i - 1)];
  };
  s.min = v.front();
  s.max = v.back();
  s.p50 = rank(0.50);
  s.p90 = rank(0.90);
  s.p99 = rank(0.99);
  s.mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  return s;
}

Federation::Federation(std::string root, std::string vaultctl, std::string vaultd)
    : root_(std::move(root)), vaultctl_(std::move(vaultctl)), vaultd_(std::move(vaultd)) {}

Federation::~Federation() {
  for (const std::string& name : names_) Stop(name);
}

void Federation::Create(const std::vector<std::string>& names) {
  MustRun({vaultctl_, "federation", "create-ca", "--dir", root_ + "/ca"});
  for (const std::string& name : names) {
    MustRun({vaultctl_, "init", "--name", name, "--dir", Dir(name), "--ca", root_ + "/ca",
             "--listen", absl::StrCat("127.0.0.1:", FreeLoopbackPort())});
    names_.push_back(name);
  }
  for (const std::string& a : names) {
    for (const std::string& b : names) {
      if (a == b) continue;
      MustRun({vaultctl_, "federation", "add-member", "--config", Dir(a) + "/vault.conf",
               "--peer-config", Dir(b) + "/vault.conf"});
    }
  }
}

void Federation::EditConfig(const std::string& name,
                            const std::function<void(std::string&)>& edit) {
  const std::string path = Dir(name) + "/vault.conf";
  std::string config = ReadAll(path);
  edit(config);
  WriteAll(path, config);
}

void Federation::StartAll() {
  for (const std::string& name : names_) Start(name);
}

void Federation::Start(const std::string& name) {
  const std::string dir = Dir(name);
  const std::string ready = dir + "/data/vaultd.ready";
  unlink(ready.c_str());
  pid_t pid = fork();
  if (pid < 0) Die("fork");
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    int log = open((dir + "/vaultd.log").c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
    dup2(log, 1);
    dup2(log, 2);
    const std::string config = dir + "/vault.conf";
    execl(vaultd_.c_str(), vaultd_.c_str(), "--config", config.c_str(), nullptr);
    _exit(127);
  }
  pids_[name] = pid;
  for (int i = 0; i < 3000; ++i) {
    if (absl::StrContains(ReadAll(ready), absl::StrCat("\"pid\": ", pid))) return;
    int status;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      pids_.erase(name);
      Die(absl::StrCat("vaultd in ", dir, " exited; see ", dir, "/vaultd.log"));
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  Die("vaultd did not become ready in 30 s: " + dir);
}

void Federation::Stop(const std::string& name) {
  auto it = pids_.find(name);
  if (it == pids_.end()) return;
  const pid_t pid = it->second;
  pids_.erase(it);
  kill(pid, SIGTERM);
  for (int i = 0; i < 3000; ++i) {
    int status;
    if (waitpid(pid, &status, WNOHANG) == pid) return;
    absl::SleepFor(absl::Milliseconds(10));
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
}

}  // namespace vault::bench
