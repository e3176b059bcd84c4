// vaultctl: which subcommands to build. Building every group's CLI11 subcommands took ~0.4 ms of
// each command's ~6 ms (`vaultctl status`), so only the group the command line names is built.
//
//   AddGlobalOptions(app, global);
//   AddCommandGroups(app, global, command, argc, argv);
//
// Thread-safety: main thread only, like the commands.
#ifndef VAULT_VAULTCTL_COMMAND_GROUPS_H_
#define VAULT_VAULTCTL_COMMAND_GROUPS_H_

#include <CLI/CLI.hpp>
#include <optional>
#include <string_view>
#include <vector>

#include "vaultctl/commands.h"

namespace vault::vaultctl {

struct CommandGroup {
  std::vector<std::string_view> names;  // the top-level subcommands it adds
  void (*add)(CLI::App& app, GlobalOptions& global, Command& command);
};

// Every group, in the order of `vaultctl --help`.
const std::vector<CommandGroup>& CommandGroups();

// The global options, which every command takes (main.cc adds them before the groups).
void AddGlobalOptions(CLI::App& app, GlobalOptions& global);

// The command line's first word that is neither an option of `app` (the global options: they
// come before the command word) nor such an option's value: "vaultctl --vault S -o json migrate
// ..." -> "migrate". Which options take a value is read from `app` itself. nullopt when there is
// none.
std::optional<std::string_view> CommandWord(const CLI::App& app, int argc, const char* const* argv);

// Adds the group that CommandWord names, or every group when it names none of theirs (the
// top-level help, a usage error, an unknown command: CLI11 then answers as with all of them).
void AddCommandGroups(CLI::App& app, GlobalOptions& global, Command& command, int argc,
                      const char* const* argv);

}  // namespace vault::vaultctl

#endif  // VAULT_VAULTCTL_COMMAND_GROUPS_H_
