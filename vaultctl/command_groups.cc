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
      {{"image"}, AddImageCommands},
      {{"migrate"}, AddMigrateCommands},
  };
  return *groups;
}

void AddGlobalOptions(CLI::App& app, GlobalOptions& g) {
  app.add_option("--vault", g.connect.vault,
                 "Vault address: a Unix socket path (admin) or host:port (mTLS). Env VAULT_ADDR")
      ->envname("VAULT_ADDR");
  app.add_option("--config", g.connect.config,
                 "A vault config: its admin socket (or, for host:port, its TLS material) is used");
  app.add_option("--tls-cert", g.connect.tls_cert, "Client certificate (PEM) for mTLS");
  app.add_option("--tls-key", g.connect.tls_key, "Client key (PEM) for mTLS");
  app.add_option("--tls-ca", g.connect.tls_ca, "Federation CA certificate (PEM) for mTLS");
  app.add_option("--server-name", g.connect.server_name,
                 "Name of the vault at a host:port (its certificate's name)");
  app.add_option("--timeout", g.timeout_seconds, "Seconds each call may take (streams get more)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("-o,--output", g.output, "Output format: text or json (a file: cas get --out)")
      ->check(CLI::Validator(
          [](const std::string& v) -> std::string {
            if (v == "text" || v == "json") return "";
            return "-o is the output format, text or json, not \"" + v +
                   "\" (to write an object to a file: vaultctl cas get DIGEST --out FILE)";
          },
          "text|json"))
      ->capture_default_str();
}

std::optional<std::string_view> CommandWord(const CLI::App& app, int argc,
                                            const char* const* argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--") return std::nullopt;
    if (arg.empty() || arg[0] != '-') return arg;
    // "--vault=S" and "-ojson" carry their values; "--vault S" and "-o json" are followed by it.
    if (arg.find('=') != std::string_view::npos || (arg.size() > 2 && arg[1] != '-')) continue;
    const CLI::Option* option = app.get_option_no_throw(std::string(arg));
    if (option != nullptr && option->get_items_expected_max() > 0) ++i;
  }
  return std::nullopt;
}

void AddCommandGroups(CLI::App& app, GlobalOptions& global, Command& command, int argc,
                      const char* const* argv) {
  const std::optional<std::string_view> word = CommandWord(app, argc, argv);
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
