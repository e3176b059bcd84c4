// vaultctl: the subcommands. Each Add*Commands registers its subcommands on the CLI11 app; each
// command returns an exit code (output.h) and prints text, or JSON with --output json.
//
// Thread-safety: commands run on the main thread; cas put uses its own worker threads.
#ifndef VAULT_VAULTCTL_COMMANDS_H_
#define VAULT_VAULTCTL_COMMANDS_H_

#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "capability/principal.h"
#include "vault/v1/capability.pb.h"
#include "vaultctl/client.h"
#include "vaultctl/output.h"

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
void AddMigrateCommands(CLI::App& app, GlobalOptions& global, Command& command);
void AddCasCommands(CLI::App& app, GlobalOptions& global, Command& command);
// cas rm, pin, unpin, pins, gc and du, added to the `cas` subcommand by AddCasCommands.
void AddCasLifecycleCommands(CLI::App& cas, GlobalOptions& global, Command& command);
// cas replicate and cas reconcile, added to the `cas` subcommand by AddCasCommands.
void AddReplicationCommands(CLI::App& cas, GlobalOptions& global, Command& command);
void AddKeyCommands(CLI::App& app, GlobalOptions& global, Command& command);
void AddCapCommands(CLI::App& app, GlobalOptions& global, Command& command);
void AddAuditCommands(CLI::App& app, GlobalOptions& global, Command& command);
void AddStatusCommand(CLI::App& app, GlobalOptions& global, Command& command);
// federation status, on the `federation` subcommand (federation_commands.cc).
void AddFederationStatusCommand(CLI::App* federation, GlobalOptions& global, Command& command);
void AddSandboxCommands(CLI::App& app, GlobalOptions& global, Command& command);
void AddAgentCommands(CLI::App& app, GlobalOptions& global, Command& command);
void AddPolicyCommands(CLI::App& app, GlobalOptions& global, Command& command);
void AddImageCommands(CLI::App& app, GlobalOptions& global, Command& command);

// Shared by the cap, agent and policy commands (defined in commands.cc; FromAgentsGrpc and
// AgentStateName in agent_commands.cc).

// A principal on the command line: "ed25519:<hex>", or a key file — a private key (PKCS#8 PEM:
// its public key) or a file holding an ed25519:<hex> id. INVALID_ARGUMENT naming `flag`.
absl::StatusOr<capability::PublicKey> PrincipalArg(const std::string& text, absl::string_view flag);
// A byte size: "4096", "512M", "1G", "10KiB", "2 GiB" (units are binary: K = KB = KiB = 1024;
// B, K, M, G, T, case-insensitive). INVALID_ARGUMENT naming `flag` and saying what is wrong.
absl::StatusOr<uint64_t> ParseByteSize(absl::string_view flag, absl::string_view text);
// Constraints as a one-line S-expression ("(constraints (max-memory 1024) ...)").
std::string ConstraintsLine(const vault::v1::Constraints& constraints);
// Constraints as a JSON object of the limits that are set ({"max_memory_bytes": 1024, ...}).
Json ConstraintsJson(const vault::v1::Constraints& constraints);
// An Agents call's outcome as a Status. UNIMPLEMENTED (a TCP address rather than the admin
// socket, or a vaultd without agents) becomes FAILED_PRECONDITION saying so.
absl::Status FromAgentsGrpc(const grpc::Status& status);
// The name of an agent state as the commands print it ("running", "departed", "unknown").
std::string AgentStateName(vault::v1::AgentState state);
// Agents.Locate: the vault that hosts agent `id` now (migrate_command.cc).
absl::StatusOr<vault::v1::LocateResponse> LocateAgent(const Connection& conn,
                                                      const std::string& id);
// agent where / agent journey, on the `agent` subcommand (migrate_command.cc).
void AddAgentLocationCommands(CLI::App* agent, GlobalOptions& global, Command& command);
// Prints rows as left-aligned columns two spaces apart; the first row is the header.
void PrintTable(const std::vector<std::vector<std::string>>& rows);
// Text from a vault (an agent's log line, a purpose) made safe for a terminal: control characters
// other than tab and newline become \xHH escapes, C1 controls (U+0080..U+009F) \uHHHH.
std::string TerminalSafe(absl::string_view text);

}  // namespace vault::vaultctl

#endif  // VAULT_VAULTCTL_COMMANDS_H_
