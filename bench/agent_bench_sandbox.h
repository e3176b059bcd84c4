// bench/agent_bench_sandbox: agent_bench's spawn baseline, LinuxSandbox alone: a trivial guest
// spawned in this process (no vaultd), from one thread and from several at once.
#ifndef VAULT_BENCH_AGENT_BENCH_SANDBOX_H_
#define VAULT_BENCH_AGENT_BENCH_SANDBOX_H_

#include <string>

#include "absl/status/statusor.h"
#include "bench/bench_util.h"

namespace vault::bench {

struct SandboxRate {
  double rate_parallel = 0, rate_serial = 0;
  Summary parallel_ms, serial_ms;
  int failures = 0;
  std::string error;
};

// LinuxSandbox::Spawn of `guest` (writes one frame, exits), `spawns` times by `clients` threads
// at once, and max(20, spawns / 4) times from one thread, after 10 warm-up spawns.
absl::StatusOr<SandboxRate> MeasureSandbox(const std::string& guest, const std::string& tmp,
                                           int spawns, int clients);

}  // namespace vault::bench

#endif  // VAULT_BENCH_AGENT_BENCH_SANDBOX_H_
