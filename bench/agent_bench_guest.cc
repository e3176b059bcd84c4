// agent_bench_guest: the agent agent_bench spawns (built with the C++ SDK, vault_agent_sdk). Its
// initial state (vaultctl agent spawn --state FILE, or SpawnRequest.initial_state) chooses what
// it does, as space-separated key=value words:
//
//   mode=rtt calls=N warmup=W      N timed Heartbeat calls, then N timed SelfInspect calls (each
//                                  after W untimed ones); one log line per kind with the
//                                  percentiles; exit 0.
//   mode=ping peer=ID rounds=N warmup=W
//                                  N timed rounds of Send(peer, "ping") + Receive of its "pong";
//                                  logs the percentiles of round trip / 2 and of the round trip;
//                                  sends "stop" to the peer; exit 0.
//   mode=pong                      answers every "ping" with a "pong" (same data) to its sender;
//                                  exits 0 on "stop".
//   mode=idle                      blocks in Receive (60 s at a time) until "stop"; exit 0.
//
// Result lines (INFO, parsed by agent_bench; times in nanoseconds, CLOCK_MONOTONIC around each
// call, nearest-rank percentiles):
//   agent_bench_result kind=heartbeat n=20000 min=.. mean=.. p50=.. p90=.. p99=.. max=..
// Any failure is logged at ERROR ("agent_bench_error ...") and the agent exits 1.
//
// Thread-safety: single-threaded.
#include <time.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "sdk/cpp/vault_agent.h"

namespace {

using vault::sdk::Agent;

int64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

std::string Stats(absl::string_view kind, std::vector<int64_t> ns) {
  std::sort(ns.begin(), ns.end());
  auto rank = [&](double p) {
    size_t k = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(ns.size())));
    return ns[std::clamp<size_t>(k, 1, ns.size()) - 1];
  };
  int64_t sum = 0;
  for (int64_t v : ns) sum += v;
  return absl::StrCat("agent_bench_result kind=", kind, " n=", ns.size(), " min=", ns.front(),
                      " mean=", sum / static_cast<int64_t>(ns.size()), " p50=", rank(50),
                      " p90=", rank(90), " p99=", rank(99), " max=", ns.back());
}

// Times `calls` calls of `call` after `warmup` untimed ones.
template <typename F>
absl::StatusOr<std::vector<int64_t>> Time(int calls, int warmup, F call) {
  std::vector<int64_t> ns;
  ns.reserve(static_cast<size_t>(calls));
  for (int i = 0; i < warmup + calls; ++i) {
    const int64_t t0 = NowNs();
    absl::Status s = call();
    const int64_t t1 = NowNs();
    if (!s.ok()) return s;
    if (i >= warmup) ns.push_back(t1 - t0);
  }
  return ns;
}

absl::Status RunRtt(Agent& agent, int calls, int warmup) {
  absl::StatusOr<std::vector<int64_t>> hb =
      Time(calls, warmup, [&] { return agent.Heartbeat().status(); });
  if (!hb.ok()) return hb.status();
  absl::StatusOr<std::vector<int64_t>> si =
      Time(calls, warmup, [&] { return agent.SelfInspect().status(); });
  if (!si.ok()) return si.status();
  if (absl::Status s = agent.Log(vault::v1::LogRequest::INFO, Stats("heartbeat", *hb)); !s.ok())
    return s;
  return agent.Log(vault::v1::LogRequest::INFO, Stats("self_inspect", *si));
}

// Receives the next message, waiting in slices of `slice` up to `limit` in all.
absl::StatusOr<vault::v1::Message> Next(Agent& agent, absl::Duration slice, absl::Duration limit) {
  const absl::Time deadline = absl::Now() + limit;
  for (;;) {
    absl::StatusOr<std::optional<vault::v1::Message>> m = agent.Receive(slice);
    if (!m.ok()) return m.status();
    if (m->has_value()) return **m;
    if (absl::Now() >= deadline) return absl::DeadlineExceededError("no message came");
  }
}

absl::Status RunPing(Agent& agent, const std::string& peer, int rounds, int warmup) {
  const std::string data(32, 'x');
  std::vector<int64_t> half, full;
  half.reserve(static_cast<size_t>(rounds));
  full.reserve(static_cast<size_t>(rounds));
  for (int i = 0; i < warmup + rounds; ++i) {
    const int64_t t0 = NowNs();
    absl::StatusOr<uint64_t> sent = agent.Send(peer, "ping", data);
    if (!sent.ok()) return sent.status();
    absl::StatusOr<vault::v1::Message> m = Next(agent, absl::Seconds(10), absl::Seconds(30));
    const int64_t t1 = NowNs();
    if (!m.ok()) return m.status();
    if (m->type() != "pong") return absl::InternalError(absl::StrCat("got a ", m->type()));
    if (i >= warmup) {
      full.push_back(t1 - t0);
      half.push_back((t1 - t0) / 2);
    }
  }
  (void)agent.Send(peer, "stop", "");
  if (absl::Status s = agent.Log(vault::v1::LogRequest::INFO, Stats("message_half_rtt", half));
      !s.ok())
    return s;
  return agent.Log(vault::v1::LogRequest::INFO, Stats("message_rtt", full));
}

absl::Status RunPong(Agent& agent) {
  for (;;) {
    absl::StatusOr<vault::v1::Message> m = Next(agent, absl::Seconds(60), absl::Hours(24));
    if (!m.ok()) return m.status();
    if (m->type() == "stop") return absl::OkStatus();
    if (m->type() == "ping") {
      absl::StatusOr<uint64_t> sent = agent.Send(m->from(), "pong", m->data());
      if (!sent.ok()) return sent.status();
    }
  }
}

absl::Status RunIdle(Agent& agent) {
  for (;;) {
    absl::StatusOr<vault::v1::Message> m = Next(agent, absl::Seconds(60), absl::Hours(24));
    if (!m.ok()) return m.status();
    if (m->type() == "stop") return absl::OkStatus();
  }
}

int Main() {
  absl::StatusOr<std::unique_ptr<Agent>> connected = Agent::Connect();
  if (!connected.ok()) {
    fprintf(stderr, "agent_bench_guest: %s\n", connected.status().ToString().c_str());
    return 1;
  }
  Agent& agent = **connected;
  absl::StatusOr<std::optional<std::string>> state = agent.GetState();
  std::map<std::string, std::string> args;
  if (state.ok() && state->has_value()) {
    for (absl::string_view word : absl::StrSplit(**state, ' ', absl::SkipWhitespace())) {
      std::pair<std::string, std::string> kv = absl::StrSplit(word, absl::MaxSplits('=', 1));
      args[kv.first] = kv.second;
    }
  }
  auto number = [&](const char* key, int fallback) {
    int v = fallback;
    auto it = args.find(key);
    if (it != args.end() && !absl::SimpleAtoi(it->second, &v)) v = fallback;
    return v;
  };
  const std::string mode = args.count("mode") ? args["mode"] : "idle";
  absl::Status s;
  if (!state.ok()) {
    s = state.status();
  } else if (mode == "rtt") {
    s = RunRtt(agent, number("calls", 20000), number("warmup", 1000));
  } else if (mode == "ping") {
    s = RunPing(agent, args["peer"], number("rounds", 20000), number("warmup", 1000));
  } else if (mode == "pong") {
    s = RunPong(agent);
  } else if (mode == "idle") {
    s = RunIdle(agent);
  } else {
    s = absl::InvalidArgumentError(absl::StrCat("unknown mode ", mode));
  }
  if (!s.ok()) {
    (void)agent.Log(vault::v1::LogRequest::ERROR,
                    absl::StrCat("agent_bench_error mode=", mode, " ", s.ToString()));
    (void)agent.Exit(1, s.ToString());
    return 1;
  }
  (void)agent.Exit(0, "done");
  return 0;
}

}  // namespace

int main() { return Main(); }
