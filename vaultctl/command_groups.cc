#include "vaultctl/command_groups.h"

#include <algorithm>

#include "vaultctl/health_command.h"

namespace vault::vaultctl {

const std::vector<CommandGroup>& CommandGroups() {
  static const auto* const groups = new std::vector<CommandGroup>{
      {{"init", "federation"}, AddInitCommands},
      {{"status"}, AddStatusCommand},
      {{"health"}, AddHealthCommand},
      {{"cas"}, AddCasCommands},
      {{"audit"}, AddAuditCommands},
      {{"key"}, AddKeyCommands},
      {{"cap"}, AddCapCommands},
      {{"sandbox"}, AddSandboxCommands},
      {{"agent"}, AddAgentCommands},
      {{"policy"}, AddPolicyCommands},
      {{"migrate"}, AddMigrateCommands},
  };
  return *groups;
}

std::optional<std::string_view> CommandWord(int argc, const char* const* argv) {
  // The global options that take a value (main.cc), as separate words; "--vault=S" and "-ojson"
  // carry theirs.
  static constexpr std::string_view kWithValue[] = {"--vault",   "--config", "--tls-cert",
                                                    "--tls-key", "--tls-ca", "--server-name",
                                                    "--timeout", "-o",       "--output"};
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--") return std::nullopt;
    if (arg.empty() || arg[0] != '-') return arg;
    if (std::find(std::begin(kWithValue), std::end(kWithValue), arg) != std::end(kWithValue)) {
      ++i;  // its value
    }
  }
  return std::nullopt;
}

void AddCommandGroups(CLI::App& app, GlobalOptions& global, Command& command, int argc,
                      const char* const* argv) {
  const std::optional<std::string_view> word = CommandWord(argc, argv);
  for (const CommandGroup& group : CommandGroups()) {
    if (word.has_value() &&
        std::find(group.names.begin(), group.names.end(), *word) != group.names.end()) {
      group.add(app, global, command);
      return;
    }
  }
  for (const CommandGroup& group : CommandGroups()) group.add(app, global, command);
}

}  // namespace vault::vaultctl
