// bench/agent_bench_ops: what the agent benchmarks (scheme_bench, wasm_bench) do to a vault
// through its Agents service: spawn, poll, terminate, and the spawn -> first host call timing.
//
//   std::unique_ptr<vault::v1::Agents::Stub> stub = v.NewAgentsStub();
//   UseFile(v, *stub, spec, "/path/agent.wasm", "idle");      // the spec's code, learnt once
//   FirstCalls t = FirstCall(v, *stub, "idle", 30, absl::Milliseconds(100));
//
// Thread safety: plain functions over the stub and vault given; Die on any failure.
#ifndef VAULT_BENCH_AGENT_BENCH_OPS_H_
#define VAULT_BENCH_AGENT_BENCH_OPS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/agent_bench_vault.h"
#include "bench/bench_util.h"
#include "vault/v1/agent.grpc.pb.h"

namespace vault::bench {

// A stub over the vault's admin socket.
std::unique_ptr<vault::v1::Agents::Stub> Stub(const std::string& socket);
// The agent's status; an empty one while the vault does not know it yet (an arrival).
vault::v1::AgentStatus MustGet(vault::v1::Agents::Stub& stub, const std::string& id);
// Polls `stub` every 0.2 ms until `done` holds for the agent; returns when (Die after 120 s).
template <typename Pred>
absl::Time PollUntil(vault::v1::Agents::Stub& stub, const std::string& id, Pred done) {
  const absl::Time deadline = absl::Now() + absl::Seconds(120);
  for (;;) {
    vault::v1::AgentStatus st = MustGet(stub, id);
    if (!st.record().id().empty() && done(st)) return absl::Now();
    if (absl::Now() > deadline) Die(absl::StrCat(id, " stuck: ", st.record().ShortDebugString()));
    absl::SleepFor(absl::Microseconds(200));
  }
}

// Spawns with the vault's current spec and `state` through Agents.Spawn; returns the id.
std::string SpawnNow(Vault& v, vault::v1::Agents::Stub& stub, const std::string& state);
void Terminate(Vault& v, vault::v1::Agents::Stub& stub, const std::string& id);
// The code file `path` as the spec's, learnt by a first spawn through vaultctl (which uploads
// it); that agent is ended after its first call.
void UseFile(Vault& v, vault::v1::Agents::Stub& stub, const std::string& spec,
             const std::string& path, const std::string& state);
// Spawn -> first host call, `runs` times, in ms; each agent is terminated before the next, and
// the next spawned `pause` after that (zero: back to back, while the vault still tidies up after
// the last one).
struct FirstCalls {
  std::vector<double> first_call;  // from the Spawn call's start to the first host call seen
  std::vector<double> spawned;     // from the same start to the Spawn call's reply
};
FirstCalls FirstCall(Vault& v, vault::v1::Agents::Stub& stub, const std::string& state, int runs,
                     absl::Duration pause);

// The native C++ guest's SelfInspect round trip, p50 in us, as it measures and logs it (spawned
// with the vault's current spec, which must name agent_bench_guest, for `calls` calls).
double NativeSelfInspectUs(Vault& v, vault::v1::Agents::Stub& stub, int calls);

}  // namespace vault::bench

#endif  // VAULT_BENCH_AGENT_BENCH_OPS_H_
