// migration_bench_guest: the agent migration_bench moves between vaults (built with the C++ SDK).
// Spawned with the initial state "migration_bench size=N seed=S", it makes its real state: N
// pseudo-random bytes from S, checkpointed through the SDK (in pieces when larger than a frame:
// the cas_upload_* calls, then a checkpoint by digest), and logs "checkpointed N". Started with any
// other state (at the destination), it reads it back through the SDK (in pieces) and logs
// "arrived N". Either way it then waits for messages until it is ended.
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "sdk/cpp/vault_agent.h"

namespace {

constexpr char kSeedPrefix[] = "migration_bench ";

// splitmix64: fast, and enough to keep the CAS from deduplicating anything.
std::string Generate(uint64_t size, uint64_t seed) {
  std::string s(size, '\0');
  uint64_t x = seed;
  for (uint64_t i = 0; i < size; i += 8) {
    x += 0x9e3779b97f4a7c15ULL;
    uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    for (uint64_t b = 0; b < 8 && i + b < size; ++b) s[i + b] = static_cast<char>(z >> (8 * b));
  }
  return s;
}

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "migration_bench_guest: %s\n", s.ToString().c_str());
  return 1;
}

}  // namespace

int main() {
  absl::StatusOr<std::unique_ptr<vault::sdk::Agent>> connected = vault::sdk::Agent::Connect();
  if (!connected.ok()) return Fail(connected.status());
  vault::sdk::Agent& agent = **connected;
  absl::StatusOr<std::optional<std::string>> state = agent.GetState();
  if (!state.ok()) return Fail(state.status());
  absl::string_view text;
  if (state->has_value()) text = **state;
  if (absl::ConsumePrefix(&text, kSeedPrefix)) {
    uint64_t size = 0, seed = 0;
    for (absl::string_view field : absl::StrSplit(text, ' ')) {
      if (absl::ConsumePrefix(&field, "size=")) (void)absl::SimpleAtoi(field, &size);
      if (absl::ConsumePrefix(&field, "seed=")) (void)absl::SimpleAtoi(field, &seed);
    }
    std::string big = Generate(size, seed);
    if (absl::StatusOr<vault::v1::Digest> d = agent.Checkpoint(big); !d.ok()) {
      (void)agent.Log(vault::v1::LogRequest::ERROR,
                      absl::StrCat("checkpoint: ", d.status().ToString()));
      return Fail(d.status());
    }
    (void)agent.Log(vault::v1::LogRequest::INFO, absl::StrCat("checkpointed ", size));
  } else {
    (void)agent.Log(vault::v1::LogRequest::INFO, absl::StrCat("arrived ", text.size()));
  }
  state->reset();  // (the memory back)
  for (;;) {
    if (!agent.Receive(absl::Seconds(60)).ok()) return 1;
  }
}
