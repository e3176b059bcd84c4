// migration_bench_guest: the agent migration_bench moves between vaults (built with the C++ SDK).
// It never reads its state (the benchmark's states go up to the frame limit, and what is timed is
// the vaults' handoff, not the guest); it logs "arrived" when it starts, then waits for messages
// until it is ended.
#include <cstdio>
#include <memory>

#include "absl/time/time.h"
#include "sdk/cpp/vault_agent.h"

int main() {
  absl::StatusOr<std::unique_ptr<vault::sdk::Agent>> agent = vault::sdk::Agent::Connect();
  if (!agent.ok()) {
    std::fprintf(stderr, "migration_bench_guest: %s\n", agent.status().ToString().c_str());
    return 1;
  }
  for (;;) {
    if (!(*agent)->Receive(absl::Seconds(60)).ok()) return 1;
  }
}
