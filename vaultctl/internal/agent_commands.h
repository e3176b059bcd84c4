// agent_commands: what the files of `vaultctl agent` share: the flags, the subcommands that
// agent_commands.cc registers, and helpers several of them use. Private to vaultctl/.
//
// Thread-safety: commands run on the main thread.
#ifndef VAULT_VAULTCTL_INTERNAL_AGENT_COMMANDS_H_
#define VAULT_VAULTCTL_INTERNAL_AGENT_COMMANDS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "capability/principal.h"
#include "google/protobuf/repeated_field.h"
#include "vault/v1/agent.pb.h"
#include "vault/v1/capability.pb.h"
#include "vaultctl/client.h"
#include "vaultctl/commands.h"
#include "vaultctl/output.h"

namespace vault::vaultctl {

// The flags of every agent subcommand (one set: only one subcommand runs).
struct AgentFlags {
  std::string id;
  std::string spec;
  std::string code;
  std::string state;
  std::string code_signature;
  std::vector<std::string> bind;  // NAME=VALUE: what the spec's placeholder symbols stand for
  std::string as;
  std::string status;
  std::string spawned_by;
  std::string has_grant;
  std::string min_memory;
  std::string reason;
  bool follow = false;
  uint64_t from_seq = 0;
  std::string type;
  std::string data;
  std::string question;
  double query_timeout_seconds = 0;
};

// Errors in what the command line gave — flags, files, a spec — before anything reached the
// vault: INVALID_ARGUMENT is a usage error (exit 2), a missing file NOT_FOUND (exit 3).
int ReportInputError(const absl::Status& status, bool json);
// "2026-01-02T03:04:05.678Z".
std::string TimeText(int64_t unix_ms);
// "running", "departed", "unknown".
std::string StateName(vault::v1::AgentState state);
// The vault's signing key, which spawn links and control requests are addressed to.
absl::StatusOr<capability::PublicKey> VaultKey(const Connection& conn);
// Agents.Get at the connected vault.
absl::StatusOr<vault::v1::AgentStatus> GetAgent(const Connection& conn, const std::string& id);
// The connected vault's name.
absl::StatusOr<std::string> VaultName(const Connection& conn);
// The grants as a JSON array of GrantToString lines.
Json GrantsJson(const google::protobuf::RepeatedPtrField<vault::v1::Grant>& grants);

// agent_remote.cc: a request signed with --as for the member that hosts an agent, given to the
// connected vault, which forwards it there.
struct Host {
  std::string key;    // the hosting vault's 32-byte signing key
  std::string vault;  // its name; "" when it is the connected vault
};
// Where agent `id` is, by Agents.Locate (the connected vault when Locate cannot say).
absl::StatusOr<Host> FindHost(const Connection& conn, const std::string& id);
// The member named `vault` (the connected vault's own name gives Host{key, ""}).
absl::StatusOr<Host> MemberHost(const Connection& conn, const std::string& vault);
// Signs `p` (adding signer, vault, time and nonce) for `host` and gives it to the connected vault.
// `serve_time`: what the request may take there (a query's timeout, a logs wait).
absl::StatusOr<vault::v1::ControlResponse> SignedControlAt(const Connection& conn,
                                                           const capability::PrivateKey& key,
                                                           const Host& host,
                                                           vault::v1::ControlPayload p,
                                                           absl::Duration serve_time);
// FindHost, then SignedControlAt, following an agent that moves meanwhile; *at_vault is the
// host's name when it is not the connected vault.
absl::StatusOr<vault::v1::ControlResponse> SignedControl(const Connection& conn,
                                                         const capability::PrivateKey& key,
                                                         const vault::v1::ControlPayload& p,
                                                         absl::Duration serve_time,
                                                         std::string* at_vault);

// The subcommands; each returns an exit code (output.h).
// agent_lifecycle_commands.cc
int SpawnCommand(const GlobalOptions& g, const AgentFlags& f);
int ControlCommand(const GlobalOptions& g, const AgentFlags& f,
                   vault::v1::ControlPayload::Action action);
// agent_inspect_commands.cc
int ListCommand(const GlobalOptions& g, const AgentFlags& f);
int StatusCommand(const GlobalOptions& g, const AgentFlags& f);
int DescribeCommand(const GlobalOptions& g, const AgentFlags& f);
// agent_message_commands.cc
int LogsCommand(const GlobalOptions& g, const AgentFlags& f);
int SendCommand(const GlobalOptions& g, const AgentFlags& f);
int QueryCommand(const GlobalOptions& g, const AgentFlags& f);

}  // namespace vault::vaultctl

#endif  // VAULT_VAULTCTL_INTERNAL_AGENT_COMMANDS_H_
