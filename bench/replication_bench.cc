// replication_bench: push replication between two real vaults against rsync, in the same run.
//
//   replication_bench [--small=10000] [--small_bytes=4096] [--large=100]
//                     [--large_bytes=10485760] [--streams=4] [--rounds=3] [--keep] [--dir=DIR]
//   replication_bench --reconcile=100000 [--differences=10] [--reconcile_bytes=256]
//
// It makes a federation CA, a source vault a and one destination vault per round, b1..bN
// (`vaultctl federation create-ca`, `vaultctl init`, `vaultctl federation add-member` both ways)
// in a temporary directory, starts a vaultd for each on 127.0.0.1 (free ports; mutual TLS
// between them, storage.sync_writes as configured by init: on), and writes the data sets as
// plain files from a fixed-seed generator: --small files of --small_bytes and --large files of
// --large_bytes, every file distinct.
//
// For each data set (small, then large), `vaultctl cas put DIR` into a (not timed), then
// --rounds rounds, each of:
//   1. vault: `vaultctl -o json cas replicate --to bK --all` (small) or `--since SEQ` (large: the
//      objects stored after the small set), timed from the start of vaultctl to its exit, with
//      the CPU time both vaultds spent meanwhile (/proc/PID/stat); the objects are then checked
//      on bK (`vaultctl cas has`, all of them);
//   2. rsync: `rsync -a DIR/ FRESH_DIR/`, timed the same way, with its CPU time (its processes'
//      rusage); in the first round also `rsync -a --fsync` into another fresh directory (rsync
//      3.2.4+; the vault's writes are fsynced, plain rsync's are not).
// Every byte is in the page cache for both (just written). The rounds alternate the two so that
// both meet the machine in the same state: on a VM the first write into fresh page-cache memory
// costs several times a later one, and one run of either can be off by 2x. Printed: each round,
// then a table of medians: seconds, MiB/s, CPU seconds per GiB and the ratio rsync time / vault
// time (above 1: the vault is faster).
//
// With --reconcile=N, instead: N shared files of --reconcile_bytes are put into both a and b,
// then --differences more, half of them only into a and half only into b; `vaultctl -o json cas
// reconcile b` runs on a three times: --dry-run, for real, and once more (nothing left to do).
// Printed for each: seconds, RangeFingerprints round trips, ranges compared and listed, the
// serialized bytes of those calls, and what differed and was copied.
//
// After the table, one BENCH_RESULT line (bench/bench_result.h) per data set, for bench/run: the
// vault's MiB/s beside rsync -a's (target: ratio above 1, faster than rsync).
//
// Needs vaultd and vaultctl (paths compiled in), and rsync on PATH for the baselines (without it
// the vault is still timed and the rsync columns say so). Only processes it started are
// signalled, by pid; the vaultds get a parent-death signal.
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/bench_result.h"

#ifndef REPLICATION_BENCH_VAULTD
#define REPLICATION_BENCH_VAULTD "vaultd"
#endif
#ifndef REPLICATION_BENCH_VAULTCTL
#define REPLICATION_BENCH_VAULTCTL "vaultctl"
#endif

namespace {

struct Flags {
  int small = 10000;
  uint64_t small_bytes = 4096;
  int large = 100;
  uint64_t large_bytes = 10 << 20;
  int streams = 4;
  int rounds = 3;
  bool keep = false;
  std::string dir;
  int reconcile = 0;
  int differences = 10;
  uint64_t reconcile_bytes = 256;
};

struct RunResult {
  int code = -1;
  std::string out;
  double seconds = 0;
  double cpu_seconds = 0;  // the process and the children it waited for
};

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "replication_bench: %s\n", what.c_str());
  std::exit(1);
}

// Runs argv (argv[0] a path, or a name looked up on PATH) with stdout captured, stderr passed on.
RunResult Run(const std::vector<std::string>& argv) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) Die("pipe");
  absl::Time start = absl::Now();
  pid_t pid = fork();
  if (pid < 0) Die("fork");
  if (pid == 0) {
    dup2(fds[1], 1);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    _exit(127);
  }
  close(fds[1]);
  RunResult r;
  char buf[65536];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof(buf))) > 0) r.out.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  rusage usage{};
  wait4(pid, &status, 0, &usage);
  r.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  auto secs = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec / 1e6; };
  r.cpu_seconds = secs(usage.ru_utime) + secs(usage.ru_stime);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

RunResult MustRun(const std::vector<std::string>& argv) {
  RunResult r = Run(argv);
  if (r.code != 0)
    Die(absl::StrCat(absl::StrJoin(argv, " "), " exited with ", r.code, ": ", r.out));
  return r;
}

int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) Die("bind");
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  int port = ntohs(addr.sin_port);
  close(fd);
  return port;
}

std::string ReadAll(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string JsonField(const std::string& json, const std::string& key) {
  std::string k = absl::StrCat("\"", key, "\":");
  size_t at = json.find(k);
  if (at == std::string::npos) return "";
  at += k.size();
  if (json[at] == '"') {
    size_t end = json.find('"', at + 1);
    return json.substr(at + 1, end - at - 1);
  }
  size_t end = json.find_first_of(",}", at);
  return json.substr(at, end - at);
}

class Vaultd {
 public:
  Vaultd(std::string dir) : dir_(std::move(dir)) {}
  ~Vaultd() { Stop(); }
  void Start() {
    const std::string ready = dir_ + "/data/vaultd.ready";
    unlink(ready.c_str());
    pid_ = fork();
    if (pid_ < 0) Die("fork");
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGTERM);
      int log = open((dir_ + "/vaultd.log").c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
      dup2(log, 1);
      dup2(log, 2);
      const std::string config = dir_ + "/vault.conf";
      execl(REPLICATION_BENCH_VAULTD, REPLICATION_BENCH_VAULTD, "--config", config.c_str(),
            nullptr);
      _exit(127);
    }
    for (int i = 0; i < 3000; ++i) {
      if (absl::StrContains(ReadAll(ready), absl::StrCat("\"pid\": ", pid_))) return;
      int status;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        Die(absl::StrCat("vaultd in ", dir_, " exited; see ", dir_, "/vaultd.log"));
      }
      absl::SleepFor(absl::Milliseconds(10));
    }
    Die("vaultd did not become ready in 30 s");
  }
  void Stop() {
    if (pid_ <= 0) return;
    kill(pid_, SIGTERM);
    for (int i = 0; i < 3000; ++i) {
      int status;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return;
      }
      absl::SleepFor(absl::Milliseconds(10));
    }
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  // User plus system CPU seconds of every thread so far (/proc/PID/stat, fields 14 and 15).
  double CpuSeconds() const {
    std::string stat = ReadAll(absl::StrCat("/proc/", pid_, "/stat"));
    size_t paren = stat.rfind(')');
    if (pid_ <= 0 || paren == std::string::npos) Die(absl::StrCat("no /proc stat for ", dir_));
    std::vector<std::string> fields = absl::StrSplit(stat.substr(paren + 2), ' ');
    double user = 0, sys = 0;
    if (fields.size() < 13 || !absl::SimpleAtod(fields[11], &user) ||
        !absl::SimpleAtod(fields[12], &sys)) {
      Die("cannot parse " + stat);
    }
    return (user + sys) / static_cast<double>(sysconf(_SC_CLK_TCK));
  }

 private:
  const std::string dir_;
  pid_t pid_ = -1;
};

// Distinct pseudo-random files.
void WriteFiles(const std::string& dir, int count, uint64_t bytes, uint64_t seed) {
  std::filesystem::create_directories(dir);
  std::mt19937_64 rng(seed);
  std::string data(bytes, '\0');
  for (int i = 0; i < count; ++i) {
    for (size_t k = 0; k + 8 <= data.size(); k += 8) {
      uint64_t v = rng();
      std::memcpy(&data[k], &v, 8);
    }
    for (size_t k = data.size() & ~size_t{7}; k < data.size(); ++k) {
      data[k] = static_cast<char>(rng());
    }
    std::ofstream f(absl::StrFormat("%s/f%06d", dir, i), std::ios::binary);
    f.write(data.data(), static_cast<std::streamsize>(data.size()));
    if (!f) Die("write " + dir);
  }
}

bool OnPath(const std::string& name) {
  const char* path = std::getenv("PATH");
  for (absl::string_view dir : absl::StrSplit(path != nullptr ? path : "/usr/bin:/bin", ':')) {
    if (!dir.empty() && access(absl::StrCat(dir, "/", name).c_str(), X_OK) == 0) return true;
  }
  return false;
}

std::vector<std::string> Digests(const std::string& put_output) {
  std::vector<std::string> out;
  for (absl::string_view line : absl::StrSplit(put_output, '\n', absl::SkipEmpty())) {
    out.emplace_back(line.substr(0, line.find(' ')));
  }
  return out;
}

struct Row {
  std::string name;
  uint64_t bytes = 0;
  std::string set;  // "small" or "large"
  // One entry per round.
  std::vector<double> vault, vault_reported, vault_cpu, rsync, rsync_cpu;
  double rsync_fsync = 0;  // first round only
};

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

struct FormatSeconds {
  void operator()(std::string* out, double s) const {
    absl::StrAppend(out, absl::StrFormat("%.3f", s));
  }
};

void ReconcileBench(const Flags& f, const std::string& root, const std::string& ctl,
                    const std::string& sock_a, const std::string& sock_b) {
  const std::string shared = root + "/shared", only_a = root + "/only-a", only_b = root + "/only-b";
  WriteFiles(shared, f.reconcile, f.reconcile_bytes, 3);
  WriteFiles(only_a, f.differences - f.differences / 2, f.reconcile_bytes, 4);
  WriteFiles(only_b, f.differences / 2, f.reconcile_bytes, 5);
  MustRun({ctl, "--vault", sock_a, "cas", "put", shared});
  MustRun({ctl, "--vault", sock_b, "cas", "put", shared});
  if (f.differences - f.differences / 2 > 0)
    MustRun({ctl, "--vault", sock_a, "cas", "put", only_a});
  if (f.differences / 2 > 0) MustRun({ctl, "--vault", sock_b, "cas", "put", only_b});
  std::printf("reconcile a with b: %d shared objects of %llu bytes, %d only on a, %d only on b\n",
              f.reconcile, static_cast<unsigned long long>(f.reconcile_bytes),
              f.differences - f.differences / 2, f.differences / 2);
  std::printf("%-10s %9s %9s %12s %8s %8s %12s %8s %8s %8s\n", "run", "vaultctl s", "compare s",
              "round trips", "ranges", "listed", "wire bytes", "here", "there", "copied");
  for (const char* run : {"dry-run", "reconcile", "again"}) {
    std::vector<std::string> argv = {ctl, "--vault", sock_a, "-o", "json", "cas", "reconcile", "b"};
    if (std::string(run) == "dry-run") argv.push_back("--dry-run");
    RunResult r = MustRun(argv);
    std::printf(
        "%-10s %9.3f %9s %12s %8s %8s %12s %8s %8s %8s\n", run, r.seconds,
        JsonField(r.out, "compare_seconds").c_str(), JsonField(r.out, "round_trips").c_str(),
        JsonField(r.out, "ranges_compared").c_str(), JsonField(r.out, "ranges_listed").c_str(),
        JsonField(r.out, "compare_wire_bytes").c_str(), JsonField(r.out, "missing_here").c_str(),
        JsonField(r.out, "missing_there").c_str(), JsonField(r.out, "copied").c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    absl::string_view a = argv[i];
    auto value = [&](absl::string_view name) -> std::optional<std::string> {
      if (!absl::StartsWith(a, name)) return std::nullopt;
      return std::string(a.substr(name.size()));
    };
    bool ok = true;
    if (auto v = value("--small="))
      ok = absl::SimpleAtoi(*v, &f.small);
    else if (auto v = value("--small_bytes="))
      ok = absl::SimpleAtoi(*v, &f.small_bytes);
    else if (auto v = value("--large="))
      ok = absl::SimpleAtoi(*v, &f.large);
    else if (auto v = value("--large_bytes="))
      ok = absl::SimpleAtoi(*v, &f.large_bytes);
    else if (auto v = value("--streams="))
      ok = absl::SimpleAtoi(*v, &f.streams);
    else if (auto v = value("--rounds="))
      ok = absl::SimpleAtoi(*v, &f.rounds);
    else if (auto v = value("--dir="))
      f.dir = *v;
    else if (auto v = value("--reconcile="))
      ok = absl::SimpleAtoi(*v, &f.reconcile);
    else if (auto v = value("--differences="))
      ok = absl::SimpleAtoi(*v, &f.differences);
    else if (auto v = value("--reconcile_bytes="))
      ok = absl::SimpleAtoi(*v, &f.reconcile_bytes);
    else if (a == "--keep")
      f.keep = true;
    else
      ok = false;
    if (!ok) Die(absl::StrCat("bad flag ", a, " (see the top of replication_bench.cc)"));
  }
  std::string root = f.dir;
  if (root.empty()) {
    char tmpl[] = "/tmp/replication_bench.XXXXXX";
    if (mkdtemp(tmpl) == nullptr) Die("mkdtemp");
    root = tmpl;
  }
  const std::string ctl = REPLICATION_BENCH_VAULTCTL;
  if (f.rounds < 1) Die("--rounds must be at least 1");
  // The reconcile bench needs one destination; the replication bench one per round.
  const int destinations = f.reconcile > 0 ? 1 : f.rounds;
  std::vector<std::string> names = {"a"};
  for (int k = 1; k <= destinations; ++k) names.push_back(absl::StrCat("b", k));
  MustRun({ctl, "federation", "create-ca", "--dir", root + "/ca"});
  for (const std::string& name : names) {
    MustRun({ctl, "init", "--name", name, "--dir", absl::StrCat(root, "/", name), "--ca",
             root + "/ca", "--listen", absl::StrCat("127.0.0.1:", FreePort())});
  }
  for (size_t k = 1; k < names.size(); ++k) {
    const std::string a_conf = root + "/a/vault.conf";
    const std::string b_conf = absl::StrCat(root, "/", names[k], "/vault.conf");
    MustRun({ctl, "federation", "add-member", "--config", a_conf, "--peer-config", b_conf});
    MustRun({ctl, "federation", "add-member", "--config", b_conf, "--peer-config", a_conf});
  }
  std::vector<std::unique_ptr<Vaultd>> vaults;
  for (const std::string& name : names) {
    vaults.push_back(std::make_unique<Vaultd>(absl::StrCat(root, "/", name)));
    vaults.back()->Start();
  }
  Vaultd& a = *vaults[0];
  auto sock = [&](const std::string& name) {
    return absl::StrCat(root, "/", name, "/data/vault.sock");
  };
  const std::string sock_a = sock("a");

  if (f.reconcile > 0) {
    ReconcileBench(f, root, ctl, sock_a, sock("b1"));
    vaults.clear();
    if (!f.keep) std::filesystem::remove_all(root);
    return 0;
  }

  const bool have_rsync = OnPath("rsync");
  if (!have_rsync) std::printf("rsync is not installed: no rsync baseline\n");
  std::vector<Row> rows;
  uint64_t since = 0;
  struct Set {
    std::string name;
    int count;
    uint64_t bytes;
  };
  std::printf("%-18s %5s %9s %12s %10s %10s %12s\n", "data set", "round", "vault s", "cpu a + b s",
              "rsync -a s", "rsync cpu s", "rsync/vault");
  for (const Set& set :
       {Set{"small", f.small, f.small_bytes}, Set{"large", f.large, f.large_bytes}}) {
    if (set.count == 0) continue;
    const std::string src = absl::StrCat(root, "/src-", set.name);
    WriteFiles(src, set.count, set.bytes, set.name == "small" ? 1 : 2);
    std::vector<std::string> digests =
        Digests(MustRun({ctl, "--vault", sock_a, "cas", "put", src}).out);
    if (static_cast<int>(digests.size()) != set.count) Die("cas put stored the wrong count");
    Row row{.name = absl::StrFormat("%d x %s", set.count,
                                    set.bytes >= (1 << 20) ? absl::StrCat(set.bytes >> 20, " MiB")
                                                           : absl::StrCat(set.bytes >> 10, " KiB")),
            .bytes = set.bytes * static_cast<uint64_t>(set.count),
            .set = set.name};
    for (int k = 1; k <= f.rounds; ++k) {
      const std::string dest = absl::StrCat("b", k);
      std::vector<std::string> rep = {ctl,
                                      "--vault",
                                      sock_a,
                                      "-o",
                                      "json",
                                      "cas",
                                      "replicate",
                                      "--to",
                                      dest,
                                      "--streams",
                                      absl::StrCat(f.streams)};
      if (since == 0) {
        rep.push_back("--all");
      } else {
        rep.push_back("--since");
        rep.push_back(absl::StrCat(since));
      }
      Vaultd& b = *vaults[static_cast<size_t>(k)];
      const double cpu_before = a.CpuSeconds() + b.CpuSeconds();
      RunResult r = MustRun(rep);
      const double cpu = a.CpuSeconds() + b.CpuSeconds() - cpu_before;
      if (JsonField(r.out, "objects") != absl::StrCat(set.count)) Die("replicate: " + r.out);
      // Every object is on bK.
      for (size_t i = 0; i < digests.size(); i += 1000) {
        std::vector<std::string> has = {ctl, "--vault", sock(dest), "cas", "has"};
        for (size_t j = i; j < std::min(digests.size(), i + 1000); ++j) has.push_back(digests[j]);
        RunResult h = Run(has);
        if (h.code != 0) Die("objects missing on " + dest + " after replication: " + h.out);
      }
      row.vault.push_back(r.seconds);
      row.vault_cpu.push_back(cpu);
      double reported = 0;
      (void)absl::SimpleAtod(JsonField(r.out, "seconds"), &reported);
      row.vault_reported.push_back(reported);
      if (have_rsync) {
        RunResult rs =
            MustRun({"rsync", "-a", src + "/", absl::StrCat(root, "/rsync-", set.name, k, "/")});
        row.rsync.push_back(rs.seconds);
        row.rsync_cpu.push_back(rs.cpu_seconds);
        if (k == 1) {
          row.rsync_fsync = MustRun({"rsync", "-a", "--fsync", src + "/",
                                     absl::StrCat(root, "/rsync-fsync-", set.name, "/")})
                                .seconds;
        }
        std::printf("%-18s %5d %9.3f %12.3f %10.3f %10.3f %11.2fx\n", row.name.c_str(), k,
                    r.seconds, cpu, rs.seconds, rs.cpu_seconds, rs.seconds / r.seconds);
      } else {
        std::printf("%-18s %5d %9.3f %12.3f %10s %10s %12s\n", row.name.c_str(), k, r.seconds, cpu,
                    "-", "-", "-");
      }
      std::fflush(stdout);
    }
    since += static_cast<uint64_t>(set.count);
    rows.push_back(row);
  }
  vaults.clear();

  auto mibs = [](uint64_t bytes, double s) { return static_cast<double>(bytes) / (1 << 20) / s; };
  auto per_gib = [](uint64_t bytes, double s) {
    return s / (static_cast<double>(bytes) / (1 << 30));
  };
  std::printf("\nmedians of %d rounds\n", f.rounds);
  std::printf("%-18s %9s %11s %11s %12s %10s %11s %9s %14s\n", "data set", "vault s", "(in vaultd)",
              "vault MiB/s", "cpu s/GiB", "rsync -a s", "rsync MiB/s", "rsync/vault",
              "rsync --fsync s");
  for (const Row& r : rows) {
    const double v = Median(r.vault), cpu = Median(r.vault_cpu);
    if (have_rsync) {
      const double rs = Median(r.rsync);
      std::printf("%-18s %9.3f %11.3f %11.1f %5.2f (%4.2f) %10.3f %11.1f %8.2fx %14.3f\n",
                  r.name.c_str(), v, Median(r.vault_reported), mibs(r.bytes, v),
                  per_gib(r.bytes, cpu), per_gib(r.bytes, Median(r.rsync_cpu)), rs,
                  mibs(r.bytes, rs), rs / v, r.rsync_fsync);
    } else {
      std::printf("%-18s %9.3f %11.3f %11.1f %5.2f %6s %10s %11s %9s %14s\n", r.name.c_str(), v,
                  Median(r.vault_reported), mibs(r.bytes, v), per_gib(r.bytes, cpu), "", "-", "-",
                  "-", "-");
    }
  }
  std::printf("(cpu s/GiB: both vaultds together, rsync's processes in brackets)\n");
  if (have_rsync) {
    bool faster = true;
    for (const Row& r : rows) faster = faster && Median(r.vault) < Median(r.rsync);
    std::printf("target (faster than rsync -a in both, medians): %s\n", faster ? "met" : "NOT met");
  }
  std::printf("\n");
  for (const Row& r : rows) {
    const double v = Median(r.vault);
    vault::bench::Result res;
    res.bench = "replication_bench";
    res.metric = absl::StrCat("replication.push.", r.set);
    res.label = absl::StrCat("replication a -> b (mTLS), ", r.name);
    res.issue = 8;
    res.value = mibs(r.bytes, v);
    res.unit = "MiB/s";
    if (have_rsync) res.baseline = mibs(r.bytes, Median(r.rsync));
    res.baseline_name = have_rsync ? "rsync -a" : "rsync -a (not installed)";
    res.target = 1.0;
    res.target_on = vault::bench::TargetOn::kRatio;
    res.note = absl::StrFormat("medians of %d rounds: vault %.3f s (%s), %.2f CPU s/GiB", f.rounds,
                               v, absl::StrJoin(r.vault, " ", FormatSeconds()),
                               per_gib(r.bytes, Median(r.vault_cpu)));
    if (have_rsync) {
      absl::StrAppend(&res.note,
                      absl::StrFormat("; rsync -a %.3f s (%s), %.2f CPU s/GiB; rsync -a --fsync "
                                      "%.3f s (first round)",
                                      Median(r.rsync), absl::StrJoin(r.rsync, " ", FormatSeconds()),
                                      per_gib(r.bytes, Median(r.rsync_cpu)), r.rsync_fsync));
    }
    vault::bench::EmitResult(res);
  }
  if (!f.keep)
    std::filesystem::remove_all(root);
  else
    std::printf("kept %s\n", root.c_str());
  return 0;
}
