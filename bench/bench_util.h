// bench/bench_util: what the benchmarks that drive real vaultd processes share: running a
// program, a free loopback port, percentiles, a naive JSON field reader for vaultctl's -o json
// output, and a local federation of vaults (federation CA, `vaultctl init`, every member added to
// every other, vaultd started and waited for).
//
//   bench::Federation fed(root, VAULTCTL, VAULTD);
//   fed.Create({"a", "b"});            // exits the process with a message on failure
//   fed.EditConfig("a", [](std::string& c) { ... });
//   fed.StartAll();
//   bench::RunResult r = bench::Run({VAULTCTL, "--vault", fed.Socket("a"), "status"});
//
// Thread-safety: Run and the helpers are thread-safe; a Federation belongs to one thread.
#ifndef VAULT_BENCH_BENCH_UTIL_H_
#define VAULT_BENCH_BENCH_UTIL_H_

#include <sys/types.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace vault::bench {

[[noreturn]] void Die(const std::string& what);

struct RunResult {
  int code = -1;  // exit status, or 128 + signal
  std::string out;
  std::string err;
  double seconds = 0;  // wall time from spawn to exit
};
// Runs argv (argv[0] a path, or a name looked up on PATH) with stdin from /dev/null.
RunResult Run(const std::vector<std::string>& argv);
// Run, or Die with the command and its stderr.
RunResult MustRun(const std::vector<std::string>& argv);

int FreeLoopbackPort();
std::string ReadAll(const std::string& path);
void WriteAll(const std::string& path, const std::string& data);
// The value of "key" in a flat JSON object (a string's contents, or a number/bool as text); ""
// when absent.
std::string JsonField(const std::string& json, const std::string& key);

struct Summary {
  size_t n = 0;
  double min = 0, p50 = 0, p90 = 0, p99 = 0, max = 0, mean = 0;
};
// Nearest-rank percentiles.
Summary Summarize(std::vector<double> values);

class Federation {
 public:
  Federation(std::string root, std::string vaultctl, std::string vaultd);
  ~Federation();  // stops every vaultd it started (SIGTERM, then SIGKILL)
  Federation(const Federation&) = delete;
  Federation& operator=(const Federation&) = delete;

  void Create(const std::vector<std::string>& names);
  // Rewrites <root>/<name>/vault.conf (before StartAll).
  void EditConfig(const std::string& name, const std::function<void(std::string&)>& edit);
  void StartAll();
  void Stop(const std::string& name);

  std::string Dir(const std::string& name) const { return root_ + "/" + name; }
  std::string Socket(const std::string& name) const { return Dir(name) + "/data/vault.sock"; }
  std::string AdminKey(const std::string& name) const { return Dir(name) + "/admin.key"; }

 private:
  void Start(const std::string& name);
  const std::string root_, vaultctl_, vaultd_;
  std::vector<std::string> names_;
  std::map<std::string, pid_t> pids_;
};

}  // namespace vault::bench

#endif  // VAULT_BENCH_BENCH_UTIL_H_
