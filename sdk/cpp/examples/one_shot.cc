// The one-shot pattern: CAS in, CAS out. The initial state is the text of an input digest
// ("sha256:<hex>/<size>"); the agent reads that object, uppercases it, stores the result and
// exits 0 naming the result's digest (the agent record's `result`; vaultctl cas get fetches
// it). Needs the cas-read and cas-write grants (or read of that hash).
//
//   vaultctl cas put input.txt          # prints sha256:<hex>/<size>: the initial state
//   vaultctl agent spawn SPEC --code ./build/sdk/cpp/vault_example_one_shot --as admin.key
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "sdk/cpp/vault_agent.h"

namespace {

using vault::sdk::Agent;

// CasGet answers must fit in one frame: read in pieces well below the limit.
absl::StatusOr<std::string> ReadObject(Agent& agent, const vault::v1::Digest& digest) {
  const uint64_t piece = agent.max_frame_bytes() / 2;
  std::string data;
  while (data.size() < digest.size()) {
    absl::StatusOr<std::string> part = agent.CasGet(digest, data.size(), piece);
    if (!part.ok()) return part.status();
    if (part->empty()) return absl::DataLossError("the object ended before its size");
    data += *part;
  }
  return data;
}

absl::StatusOr<vault::v1::Digest> Run(Agent& agent) {
  absl::StatusOr<std::optional<std::string>> state = agent.GetState();
  if (!state.ok()) return state.status();
  if (!state->has_value()) {
    return absl::InvalidArgumentError("no initial state: expected an input digest");
  }
  absl::StatusOr<vault::v1::Digest> input =
      vault::sdk::ParseDigest(absl::StripAsciiWhitespace(**state));
  if (!input.ok()) return input.status();

  absl::StatusOr<std::string> data = ReadObject(agent, *input);
  if (!data.ok()) return data.status();
  absl::AsciiStrToUpper(&*data);
  absl::StatusOr<vault::v1::Digest> output = agent.CasPut(*data);
  if (!output.ok()) return output.status();
  (void)agent.Log(vault::v1::LogRequest::INFO,
                  absl::StrCat("one-shot: ", vault::sdk::DigestToText(*input), " -> ",
                               vault::sdk::DigestToText(*output)));
  return output;
}

}  // namespace

int main() {
  absl::StatusOr<std::unique_ptr<Agent>> connected = Agent::Connect();
  if (!connected.ok()) {
    std::fprintf(stderr, "one-shot: %s\n", connected.status().ToString().c_str());
    return 1;
  }
  Agent& agent = **connected;
  absl::StatusOr<vault::v1::Digest> result = Run(agent);
  absl::Status ended =
      result.ok() ? agent.Exit(0, "", *result) : agent.Exit(1, result.status().ToString());
  std::fprintf(stderr, "one-shot: exit: %s\n", ended.ToString().c_str());
  return 1;
}
