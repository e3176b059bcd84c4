// bench/agent_bench_util: what agent_bench's parts share: a monotonic clock in ns and RunFanout,
// which calls a function n times from a number of threads and times every call.
#ifndef VAULT_BENCH_AGENT_BENCH_UTIL_H_
#define VAULT_BENCH_AGENT_BENCH_UTIL_H_

#include <time.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"

namespace vault::bench {

inline int64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// Runs `n` calls of `call(i)` from `clients` threads; per-call latency (ms) and failures.
struct Fanout {
  std::vector<double> ms;
  int failures = 0;
  std::string first_error;
  double wall_s = 0;
};
inline Fanout RunFanout(int n, int clients, const std::function<absl::Status(int, int)>& call) {
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

}  // namespace vault::bench

#endif  // VAULT_BENCH_AGENT_BENCH_UTIL_H_
