#include "bench/agent_bench_ops.h"

#include <grpcpp/grpcpp.h>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace vault::bench {

std::unique_ptr<vault::v1::Agents::Stub> Stub(const std::string& socket) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return vault::v1::Agents::NewStub(grpc::CreateCustomChannel(
      absl::StrCat("unix:", socket), grpc::InsecureChannelCredentials(), args));
}

vault::v1::AgentStatus MustGet(vault::v1::Agents::Stub& stub, const std::string& id) {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
  vault::v1::GetAgentRequest req;
  req.set_id(id);
  vault::v1::AgentStatus out;
  grpc::Status s = stub.Get(&ctx, req, &out);
  if (s.error_code() == grpc::StatusCode::NOT_FOUND) return vault::v1::AgentStatus();
  if (!s.ok()) Die(absl::StrCat("Agents.Get ", id, ": ", s.error_message()));
  return out;
}

std::string SpawnNow(Vault& v, vault::v1::Agents::Stub& stub, const std::string& state) {
  absl::StatusOr<vault::v1::SpawnRequest> req = v.SpawnRequest(state);
  if (!req.ok()) Die(req.status().ToString());
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
  vault::v1::SpawnResponse out;
  grpc::Status s = stub.Spawn(&ctx, *req, &out);
  if (!s.ok()) Die(absl::StrCat("Agents.Spawn: ", s.error_message()));
  return out.agent_id();
}

void Terminate(Vault& v, vault::v1::Agents::Stub& stub, const std::string& id) {
  absl::StatusOr<vault::v1::ControlRequest> req = v.TerminateRequest(id);
  if (!req.ok()) Die(req.status().ToString());
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
  vault::v1::ControlResponse out;
  (void)stub.Control(&ctx, *req, &out);
}

void UseFile(Vault& v, vault::v1::Agents::Stub& stub, const std::string& spec,
             const std::string& path, const std::string& state) {
  if (absl::Status s = v.SetSpec(spec); !s.ok()) Die(s.ToString());
  absl::StatusOr<std::string> id = v.SpawnWithVaultctl(path, state);
  if (!id.ok()) Die(id.status().ToString());
  PollUntil(stub, *id,
            [](const vault::v1::AgentStatus& s) { return s.record().counters().host_calls() > 0; });
  Terminate(v, stub, *id);
  (void)v.WaitEnded(*id, absl::Seconds(30));
}
FirstCalls FirstCall(Vault& v, vault::v1::Agents::Stub& stub, const std::string& state, int runs,
                     absl::Duration pause) {
  FirstCalls out;
  for (int i = 0; i < runs; ++i) {
    absl::SleepFor(pause);
    const absl::Time t0 = absl::Now();
    const std::string id = SpawnNow(v, stub, state);
    const absl::Time replied = absl::Now();
    const absl::Time t1 = PollUntil(stub, id, [](const vault::v1::AgentStatus& s) {
      return s.record().counters().host_calls() > 0;
    });
    out.first_call.push_back(absl::ToDoubleMilliseconds(t1 - t0));
    out.spawned.push_back(absl::ToDoubleMilliseconds(replied - t0));
    Terminate(v, stub, id);
    (void)v.WaitEnded(id, absl::Seconds(30));
  }
  return out;
}

double NativeSelfInspectUs(Vault& v, vault::v1::Agents::Stub& stub, int calls) {
  const std::string id = SpawnNow(v, stub, absl::StrCat("mode=rtt calls=", calls, " warmup=1000"));
  (void)v.WaitEnded(id, absl::Seconds(120));
  absl::StatusOr<std::vector<std::string>> logs = v.Logs(id);
  if (!logs.ok()) Die(logs.status().ToString());
  for (const std::string& line : *logs) {
    if (!absl::StrContains(line, "kind=self_inspect")) continue;
    for (absl::string_view w : absl::StrSplit(line, ' ')) {
      double ns = 0;
      if (absl::ConsumePrefix(&w, "p50=") && absl::SimpleAtod(w, &ns)) return ns / 1e3;
    }
  }
  Die("the native guest logged no self_inspect p50");
}

}  // namespace vault::bench
