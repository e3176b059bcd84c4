// The periodic pattern: a loop of work, heartbeat, checkpoint, sleep. The state is
// "iterations=N done=K": the initial state names N ("iterations=5"; none: 3), each checkpoint
// records K, so a restarted agent (after a vault restart, or on another vault once agents
// migrate) carries on where its last checkpoint left it. Exits 0 after N iterations.
//
//   vaultctl agent spawn SPEC --code ./build/sdk/cpp/vault_example_periodic --as admin.key
//   (initial state "iterations=5": SpawnRequest.initial_state; see docs/sdk-cpp.md)
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "sdk/cpp/vault_agent.h"

namespace {

using vault::sdk::Agent;

constexpr absl::Duration kPeriod = absl::Seconds(1);

struct Progress {
  uint64_t iterations = 3;
  uint64_t done = 0;
};

// "iterations=N done=K" (separated by spaces, commas or newlines; both keys optional).
Progress ParseProgress(const std::optional<std::string>& state) {
  Progress p;
  if (!state.has_value()) return p;
  for (absl::string_view field :
       absl::StrSplit(*state, absl::ByAnyChar(" ,\n"), absl::SkipEmpty())) {
    std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(field, absl::MaxSplits('=', 1));
    uint64_t value;
    if (!absl::SimpleAtoi(kv.second, &value)) continue;
    if (kv.first == "iterations") p.iterations = value;
    if (kv.first == "done") p.done = value;
  }
  return p;
}

int Fail(Agent& agent, const absl::Status& status) {
  std::fprintf(stderr, "periodic: %s\n", status.ToString().c_str());
  (void)agent.Exit(1, status.ToString());  // returns only if the exit could not be recorded
  return 1;
}

}  // namespace

int main() {
  absl::StatusOr<std::unique_ptr<Agent>> connected = Agent::Connect();
  if (!connected.ok()) {
    std::fprintf(stderr, "periodic: %s\n", connected.status().ToString().c_str());
    return 1;
  }
  Agent& agent = **connected;

  absl::StatusOr<std::optional<std::string>> state = agent.GetState();
  if (!state.ok()) return Fail(agent, state.status());
  Progress progress = ParseProgress(*state);
  (void)agent.Log(vault::v1::LogRequest::INFO,
                  absl::StrCat("periodic: incarnation ", agent.incarnation(), ", ", progress.done,
                               " of ", progress.iterations, " iterations done"));

  while (progress.done < progress.iterations) {
    // The work: here, a log line.
    ++progress.done;
    absl::Status logged =
        agent.Log(vault::v1::LogRequest::INFO, absl::StrCat("periodic: iteration ", progress.done));
    if (!logged.ok()) return Fail(agent, logged);

    absl::StatusOr<bool> checkpoint_requested = agent.Heartbeat();
    if (!checkpoint_requested.ok()) return Fail(agent, checkpoint_requested.status());
    // This agent checkpoints every iteration anyway; one that checkpoints less often would do it
    // now when *checkpoint_requested is true (the vault is stopping).
    absl::StatusOr<vault::v1::Digest> saved =
        agent.Checkpoint(absl::StrCat("iterations=", progress.iterations, " done=", progress.done));
    if (!saved.ok()) return Fail(agent, saved.status());

    if (progress.done < progress.iterations) absl::SleepFor(kPeriod);
  }
  absl::Status ended =
      agent.Exit(0, absl::StrCat("completed ", progress.iterations, " iterations"));
  std::fprintf(stderr, "periodic: exit: %s\n", ended.ToString().c_str());
  return 1;
}
