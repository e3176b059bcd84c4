// vaultctl: the subcommands. Each Add*Commands registers its subcommands on the CLI11 app; each
// command returns an exit code (output.h) and prints text, or JSON with --output json.
//
// Thread-safety: commands run on the main thread; cas put uses its own worker threads.
#ifndef VAULT_VAULTCTL_COMMANDS_H_
#define VAULT_VAULTCTL_COMMANDS_H_

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

#include "vaultctl/client.h"

namespace vault::vaultctl {

struct GlobalOptions {
  ConnectOptions connect;
  std::string output = "text";  // text | json
  double timeout_seconds = 30;
  // Everything after the first "--" on the command line (a program and its arguments), cut off
  // before CLI11 parses: CLI11 lets a repeatable option swallow the "--" that follows it.
  std::vector<std::string> after_dashes;
  bool json() const { return output == "json"; }
};

// The command chosen on the command line, run after parsing.
using Command = std::function<int()>;

void AddInitCommands(CLI::App& app, GlobalOptions& global, Command& command);
void AddCasCommands(CLI::App& app, GlobalOptions& global, Command& command);
void AddKeyCommands(CLI::App& app, GlobalOptions& global, Command& command);
void AddCapCommands(CLI::App& app, GlobalOptions& global, Command& command);
void AddAuditCommands(CLI::App& app, GlobalOptions& global, Command& command);
void AddStatusCommand(CLI::App& app, GlobalOptions& global, Command& command);
void AddSandboxCommands(CLI::App& app, GlobalOptions& global, Command& command);

}  // namespace vault::vaultctl

#endif  // VAULT_VAULTCTL_COMMANDS_H_
