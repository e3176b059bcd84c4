#include "vaultctl/command_words.h"

#include <algorithm>
#include <cstddef>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace vault::vaultctl {
namespace {

// Optimal string alignment distance: insertions, deletions, substitutions, adjacent swaps.
size_t Distance(absl::string_view a, absl::string_view b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

std::vector<CLI::App*> Commands(CLI::App& app) {
  return app.get_subcommands([](CLI::App* sub) { return !sub->get_name().empty(); });
}

// Whether option `token` (no "=value" in it) of `level` or a level above takes a value.
bool TakesValue(const std::vector<CLI::App*>& levels, const std::string& token) {
  for (auto it = levels.rbegin(); it != levels.rend(); ++it) {
    const CLI::Option* opt = (*it)->get_option_no_throw(token);
    if (opt != nullptr) return opt->get_items_expected_min() > 0;
  }
  return false;
}

}  // namespace

std::string Nearest(absl::string_view word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_distance = word.size() <= 4 ? 2 : 3;  // must be below this
  for (const std::string& c : candidates) {
    const size_t d = Distance(word, c);
    if (d < best_distance) {
      best = c;
      best_distance = d;
    }
  }
  if (!best.empty()) return best;
  for (const std::string& c : candidates) {
    if (word.size() >= 2 && absl::StartsWith(c, word)) return c;
  }
  return "";
}

std::optional<std::string> CheckCommandWords(CLI::App& app, int argc, const char* const* argv) {
  std::vector<CLI::App*> levels = {&app};
  std::string path = app.get_name().empty() ? "vaultctl" : app.get_name();
  for (int i = 1; i < argc; ++i) {
    const std::string token = argv[i];
    if (token == "--") break;
    if (token.size() > 1 && token[0] == '-') {
      if (token.find('=') == std::string::npos && TakesValue(levels, token)) ++i;
      continue;
    }
    CLI::App* level = levels.back();
    const std::vector<CLI::App*> commands = Commands(*level);
    if (commands.empty()) break;  // a command's own arguments from here
    CLI::App* next = nullptr;
    for (CLI::App* c : commands) {
      if (c->check_name(token)) next = c;
    }
    if (next != nullptr) {
      levels.push_back(next);
      absl::StrAppend(&path, " ", next->get_name());
      continue;
    }
    if (level->get_require_subcommand_min() == 0) break;  // a positional argument
    std::vector<std::string> names;
    for (CLI::App* c : commands) names.push_back(c->get_name());
    const std::string nearest = Nearest(token, names);
    if (!nearest.empty()) {
      return absl::StrCat("unknown command \"", token, "\" for \"", path, "\": did you mean \"",
                          nearest, "\"? (", path, " --help lists its commands)");
    }
    return absl::StrCat("unknown command \"", token, "\" for \"", path,
                        "\" (its commands: ", absl::StrJoin(names, ", "), ")");
  }
  return std::nullopt;
}

}  // namespace vault::vaultctl
