// The reactive pattern: wait for messages and answer them. Receive waits up to a second at a
// time; between messages the agent heartbeats. Message types:
//   "vault.query"      answered with a "vault.answer" to the sender (an agent, or "operator" for
//                      an Agents.Query), replying to the query's id
//   "vault.checkpoint" checkpoint now
//   "stop"             checkpoint, then exit 0
// and a heartbeat that reports the vault stopping also checkpoints. The state is
// "answered=N", the number of queries answered, carried across restarts.
//
//   vaultctl agent spawn SPEC --code ./build/sdk/cpp/vault_example_reactive --as admin.key
//   then queries (Agents.Query) and a "stop" message (Agents.Send) from the operator.
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "sdk/cpp/vault_agent.h"

namespace {

using vault::sdk::Agent;

constexpr absl::Duration kWait = absl::Seconds(1);

uint64_t ParseAnswered(const std::optional<std::string>& state) {
  uint64_t answered = 0;
  absl::string_view text = state.has_value() ? absl::string_view(*state) : "";
  if (absl::ConsumePrefix(&text, "answered=")) (void)absl::SimpleAtoi(text, &answered);
  return answered;
}

absl::Status Save(Agent& agent, uint64_t answered) {
  return agent.Checkpoint(absl::StrCat("answered=", answered)).status();
}

// Runs until a "stop" message (OK) or an error.
absl::Status Serve(Agent& agent) {
  absl::StatusOr<std::optional<std::string>> state = agent.GetState();
  if (!state.ok()) return state.status();
  uint64_t answered = ParseAnswered(*state);

  for (;;) {
    absl::StatusOr<std::optional<vault::v1::Message>> received = agent.Receive(kWait);
    if (!received.ok()) return received.status();
    if (!received->has_value()) {  // quiet: prove we are alive
      absl::StatusOr<bool> checkpoint_requested = agent.Heartbeat();
      if (!checkpoint_requested.ok()) return checkpoint_requested.status();
      if (*checkpoint_requested) {
        if (absl::Status s = Save(agent, answered); !s.ok()) return s;
      }
      continue;
    }
    const vault::v1::Message& message = **received;
    if (message.type() == "vault.query") {
      ++answered;
      std::string answer = absl::StrCat("answer #", answered, " from ", agent.agent_id(), " to \"",
                                        message.data(), "\": ", message.data().size(), " bytes");
      absl::StatusOr<uint64_t> sent =
          agent.Send(message.from(), "vault.answer", answer, message.id());
      if (!sent.ok()) {
        // A denied reply (no send grant to that agent) is logged, not fatal.
        if (!absl::IsPermissionDenied(sent.status())) return sent.status();
        (void)agent.Log(vault::v1::LogRequest::WARN,
                        absl::StrCat("reactive: reply denied: ", sent.status().ToString()));
      }
    } else if (message.type() == "vault.checkpoint") {
      if (absl::Status s = Save(agent, answered); !s.ok()) return s;
    } else if (message.type() == "stop") {
      return Save(agent, answered);
    } else {
      (void)agent.Log(vault::v1::LogRequest::DEBUG,
                      absl::StrCat("reactive: ignored a message of type ", message.type()));
    }
  }
}

}  // namespace

int main() {
  absl::StatusOr<std::unique_ptr<Agent>> connected = Agent::Connect();
  if (!connected.ok()) {
    std::fprintf(stderr, "reactive: %s\n", connected.status().ToString().c_str());
    return 1;
  }
  Agent& agent = **connected;
  absl::Status served = Serve(agent);
  absl::Status ended = served.ok() ? agent.Exit(0, "stopped") : agent.Exit(1, served.ToString());
  std::fprintf(stderr, "reactive: exit: %s\n", ended.ToString().c_str());
  return 1;
}
