// The mobile pattern (RFC pattern 4): gather at home, migrate, process remotely, come home with
// the results. A shopping list lives on the home vault, a price list on a remote one; the agent
// takes the list to the prices (the price list never leaves its vault), prices it there and
// brings the report home. One phase per stay:
//
//   phase    where    what
//   gather   home     read /vault/pub/mobile/list.txt ("ITEM QTY" lines), Migrate to the remote
//   price    remote   price each item from /vault/pub/mobile/prices.txt ("ITEM CENTS" lines),
//                     Migrate home
//   report   home     CasPut the report; Exit(0) with it as the result
//
// Mobility is weak: each vault starts this program afresh, with the state handed to Migrate as
// its GetState. So the state carries everything: the phase, the home vault, what was gathered
// and the results. SelfInspect says where the agent runs now (vault()) and how many hops it has
// made (hop()). Migrate returns only on failure; on success the process ends here and the agent
// goes on over there. Each phase can safely run again: after a vault restart the agent resumes
// from the state it arrived with.
//
// The initial state names the remote vault: "remote=vault-b". Grants and trust as for
// sdk/python/examples/mobile.py (the same journey; mobile.scm here is its spec; docs/migration.md
// shows both run):
//
//   echo remote=vault-b > remote.txt
//   CODE=build/sdk/cpp/vault_example_mobile
//   vaultctl agent spawn sdk/cpp/examples/mobile.scm --state remote.txt --code $CODE --as owner.key
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "sdk/cpp/vault_agent.h"

namespace {

using vault::sdk::Agent;

constexpr char kList[] = "/vault/pub/mobile/list.txt";      // home: what to buy
constexpr char kPrices[] = "/vault/pub/mobile/prices.txt";  // remote: what it costs, in cents

// The state: one "key=value" line per field, the value C-escaped so that it may hold newlines.
using State = std::map<std::string, std::string>;

std::string EncodeState(const State& state) {
  std::string out;
  for (const auto& [key, value] : state)
    absl::StrAppend(&out, key, "=", absl::CEscape(value), "\n");
  return out;
}

State DecodeState(absl::string_view text) {
  State state;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    std::pair<std::string, std::string> kv = absl::StrSplit(line, absl::MaxSplits('=', 1));
    absl::CUnescape(kv.second, &state[kv.first]);
  }
  return state;
}

// "WORD NUMBER" lines; blank lines are skipped, anything else is INVALID_ARGUMENT.
absl::StatusOr<std::vector<std::pair<std::string, uint64_t>>> ParseLines(absl::string_view text) {
  std::vector<std::pair<std::string, uint64_t>> pairs;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipWhitespace())) {
    std::vector<std::string> f = absl::StrSplit(line, absl::ByAnyChar(" \t\r"), absl::SkipEmpty());
    uint64_t n;
    if (f.size() != 2 || !absl::SimpleAtoi(f[1], &n)) {
      return absl::InvalidArgumentError(absl::StrCat("not \"WORD NUMBER\": \"", line, "\""));
    }
    pairs.emplace_back(f[0], n);
  }
  return pairs;
}

// The report: a line per item, then the total.
absl::StatusOr<std::string> Price(absl::string_view shopping_list, absl::string_view price_list,
                                  absl::string_view where) {
  absl::StatusOr<std::vector<std::pair<std::string, uint64_t>>> items = ParseLines(shopping_list);
  absl::StatusOr<std::vector<std::pair<std::string, uint64_t>>> priced = ParseLines(price_list);
  if (!items.ok()) return items.status();
  if (!priced.ok()) return priced.status();
  std::map<std::string, uint64_t> prices;
  for (const auto& [item, cents] : *priced) prices[item] = cents;  // the last one wins
  std::string report;
  uint64_t total = 0;
  for (const auto& [item, qty] : *items) {
    auto it = prices.find(item);
    if (it == prices.end()) {
      absl::StrAppend(&report, item, " ", qty, ": no price at ", where, "\n");
      continue;
    }
    total += qty * it->second;
    absl::StrAppend(&report, item, " ", qty, " x ", it->second, " = ", qty * it->second, "\n");
  }
  absl::StrAppend(&report, "total ", total, " (priced at ", where, ")\n");
  return report;
}

// One stay: the phase the state names, on the vault it runs on. Returns only when the journey
// cannot go on (a denial, a failed hop, bad data).
absl::Status RunPhase(Agent& agent, const std::string& phase, State& state,
                      const vault::v1::SelfInspectResult& here) {
  if (phase == "gather") {  // at home: take the list along, remember the way back
    absl::StatusOr<std::string> list = agent.ReadFile(kList);
    if (!list.ok()) return list.status();
    State next = {
        {"phase", "price"}, {"home", here.vault()}, {"remote", state["remote"]}, {"list", *list}};
    return agent.Migrate(next["remote"], EncodeState(next));  // goes, or says why not
  }
  if (phase == "price" && here.vault() == state["remote"]) {
    absl::StatusOr<std::string> prices = agent.ReadFile(kPrices);
    if (!prices.ok()) return prices.status();
    absl::StatusOr<std::string> report = Price(state["list"], *prices, here.vault());
    if (!report.ok()) return report.status();
    state["phase"] = "report";
    state["report"] = *report;
    return agent.Migrate(state["home"], EncodeState(state));
  }
  if (phase == "report" && here.vault() == state["home"]) {
    absl::StatusOr<vault::v1::Digest> result = agent.CasPut(state["report"]);
    if (!result.ok()) return result.status();
    return agent.Exit(0, absl::StrCat("home after ", here.hop(), " hops"), *result);
  }
  return absl::FailedPreconditionError("this phase does not belong on this vault");
}

// Returns only when the agent stays here and stops: why, for its Exit.
absl::Status Run(Agent& agent) {
  absl::StatusOr<std::optional<std::string>> saved = agent.GetState();      // where in the journey
  absl::StatusOr<vault::v1::SelfInspectResult> here = agent.SelfInspect();  // where it runs
  if (!saved.ok()) return saved.status();
  if (!here.ok()) return here.status();
  State state = DecodeState(saved->value_or(""));
  const std::string phase = state.contains("phase") ? state["phase"] : "gather";
  (void)agent.Log(vault::v1::LogRequest::INFO,
                  absl::StrCat("phase ", phase, " on ", here->vault(), " (hop ", here->hop(), ")"));
  absl::Status stopped = RunPhase(agent, phase, state, *here);
  return absl::Status(stopped.code(), absl::StrCat("phase ", phase, " on ", here->vault(), ": ",
                                                   stopped.message()));
}

}  // namespace

int main() {
  absl::StatusOr<std::unique_ptr<Agent>> connected = Agent::Connect();
  if (!connected.ok()) {
    std::fprintf(stderr, "mobile: %s\n", connected.status().ToString().c_str());
    return 1;
  }
  Agent& agent = **connected;
  absl::Status stopped = Run(agent);
  (void)agent.Exit(1, stopped.ToString());  // returns only if the exit could not be recorded
  std::fprintf(stderr, "mobile: %s\n", stopped.ToString().c_str());
  return 1;
}
