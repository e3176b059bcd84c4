// vaultctl agent ...: spawn, list, inspect, control and talk to the agents of a vault (design §6)
// through the Agents service on its admin socket (proto/vault/v1/agent.proto).
//
//   vaultctl agent spawn prices.scm --as me.key          # prints the new agent's id
//   vaultctl agent ls --status running --min-memory 100M
//   vaultctl agent pause a-0123456789abcdef --reason "looking into it" --as me.key
//   vaultctl agent logs a-0123456789abcdef -f
//
// This file registers the subcommands and holds what they share (internal/agent_commands.h);
// they are in agent_lifecycle_commands.cc (spawn, pause, resume, terminate),
// agent_inspect_commands.cc (ls, status, describe) and agent_message_commands.cc (logs, send,
// query).
#include "vaultctl/internal/agent_commands.h"

#include <iostream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "capability/grant.h"
#include "capability/principal.h"
#include "common/status_macros.h"
#include "node/grpc_status.h"
#include "vault/v1/agent.pb.h"
#include "vaultctl/commands.h"
#include "vaultctl/output.h"

namespace vault::vaultctl {
namespace {

using capability::PublicKey;
using vault::v1::AgentState;
using vault::v1::ControlPayload;
using vault::v1::Grant;

// --as on the commands that read or message an agent: without it they act on this vault only.
constexpr const char* kReachHelp =
    "Reach the agent on whichever member hosts it now, with a request signed by this private "
    "key: its spawning principal or an administrator of that vault";

}  // namespace

// Errors in what the command line gave — flags, files, a spec — before anything reached the
// vault: INVALID_ARGUMENT is a usage error (exit 2), a missing file NOT_FOUND (exit 3).
int ReportInputError(const absl::Status& status, bool json) {
  return ReportConnectError(status, json);
}

std::string TimeText(int64_t unix_ms) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::FromUnixMillis(unix_ms),
                          absl::UTCTimeZone());
}

std::string StateName(AgentState state) {
  if (state == vault::v1::AGENT_STATE_UNSPECIFIED || !vault::v1::AgentState_IsValid(state)) {
    return "unknown";
  }
  return absl::AsciiStrToLower(vault::v1::AgentState_Name(state));
}

// The vault's signing key, which spawn links and control requests are addressed to.
absl::StatusOr<PublicKey> VaultKey(const Connection& conn) {
  vault::v1::StatusResponse resp;
  VAULT_RETURN_IF_ERROR(FromAgentsGrpc(
      conn.admin()->Status(conn.Context().get(), vault::v1::StatusRequest(), &resp)));
  absl::StatusOr<PublicKey> key = PublicKey::FromText(resp.public_key());
  if (!key.ok()) {
    return absl::InternalError(
        absl::StrCat("the vault reported a malformed key \"", resp.public_key(), "\""));
  }
  return key;
}

absl::StatusOr<std::string> VaultName(const Connection& conn) {
  vault::v1::StatusResponse resp;
  VAULT_RETURN_IF_ERROR(FromAgentsGrpc(
      conn.admin()->Status(conn.Context().get(), vault::v1::StatusRequest(), &resp)));
  return resp.name();
}

Json GrantsJson(const google::protobuf::RepeatedPtrField<Grant>& grants) {
  Json arr = Json::Array();
  for (const Grant& g : grants) arr.Push(capability::GrantToString(g));
  return arr;
}

std::string AgentStateName(AgentState state) { return StateName(state); }

absl::Status FromAgentsGrpc(const grpc::Status& status) {
  absl::Status s = node::FromGrpc(status);
  if (absl::IsUnimplemented(s)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "this vault does not serve the agent commands here: they are served only on a vault's "
        "admin socket (--vault PATH or --config), by a vaultd with agents (",
        s.message(), ")"));
  }
  return s;
}

// --- registration -------------------------------------------------------------------------

void AddAgentCommands(CLI::App& app, GlobalOptions& g, Command& command) {
  static AgentFlags f;
  auto* agent = app.add_subcommand(
      "agent", "Agents on a vault: spawn, list, inspect, control, talk to (admin socket only)");
  agent->require_subcommand(1);

  auto* spawn = agent->add_subcommand(
      "spawn",
      "Spawn an agent from a spec; prints its id. The code (a file) is uploaded to the vault's "
      "CAS first (a container agent's (image NAME) is looked up instead: its manifest digest is "
      "the code), and --as's key signs a SPAWN link to the vault for the spec's grants and "
      "constraints (valid until the constraints' expiry, else one year)");
  spawn
      ->add_option("SPEC", f.spec,
                   "The agent spec: S-expression (agent ...), JSON or protobuf text format")
      ->required();
  spawn->add_option("--code", f.code,
                    "The agent's code file (overrides the spec's code-file or code digest); "
                    "a spec's code-file is relative to the spec's directory");
  spawn->add_option("--state", f.state, "A file whose bytes are the agent's initial state");
  spawn->add_option("--code-signature", f.code_signature,
                    "The code signer's signature (64 raw bytes or 128 hex digits in a file); "
                    "required when the spec names a code_signer");
  spawn->add_option("--bind", f.bind,
                    "NAME=VALUE: what a symbol of the spec stands for, as the RFC's examples "
                    "write them: (read (hash input-hash)) needs --bind input-hash=sha256:<hex>; "
                    "(spawned-by user-principal) --bind user-principal=KEYFILE (or "
                    "ed25519:<hex>). Repeatable");
  spawn->add_option("--as", f.as, "The spawning principal's private key (PKCS#8 PEM)")->required();
  spawn->callback([&] { command = [&g] { return SpawnCommand(g, f); }; });

  auto* ls = agent->add_subcommand("ls", "List agents: ID, STATE, PRINCIPAL, MEMORY, AGE, PURPOSE");
  ls->add_option("--status", f.status,
                 "Only agents in this state: spawned, running, paused, migrating, departed, "
                 "terminated, completed, failed");
  ls->add_option("--spawned-by", f.spawned_by,
                 "Only agents of this principal (ed25519:<hex> or a key file), or the children "
                 "of this agent id");
  ls->add_option("--has-grant", f.has_grant,
                 "Only agents holding a grant of this kind: read, write, cas-read, cas-write, "
                 "network, send, receive, migrate, spawn");
  ls->add_option("--min-memory", f.min_memory,
                 "Only agents using at least this much memory now (4096, 10KiB, 512M, 1G)");
  ls->callback([&] { command = [&g] { return ListCommand(g, f); }; });

  auto* status = agent->add_subcommand(
      "status", "Show an agent's state, resource use, counters, grants and constraints");
  status->add_option("ID", f.id, "The agent id")->required();
  status->add_option("--as", f.as, kReachHelp);
  status->callback([&] { command = [&g] { return StatusCommand(g, f); }; });

  auto* describe = agent->add_subcommand(
      "describe", "Show what an agent is for: purpose, instructions, code digest, sandbox");
  describe->add_option("ID", f.id, "The agent id")->required();
  describe->callback([&] { command = [&g] { return DescribeCommand(g, f); }; });

  struct ControlVerb {
    const char* name;
    ControlPayload::Action action;
    const char* help;
  };
  for (const ControlVerb& v : {
           ControlVerb{"pause", ControlPayload::PAUSE,
                       "Freeze an agent (its CPU time stops); prints its new state"},
           ControlVerb{"resume", ControlPayload::RESUME,
                       "Resume a paused agent; prints its new state"},
           ControlVerb{"terminate", ControlPayload::TERMINATE,
                       "End an agent; prints its new state"},
       }) {
    auto* c = agent->add_subcommand(v.name, v.help);
    c->add_option("ID", f.id, "The agent id")->required();
    c->add_option("--reason", f.reason, "Why (recorded with the agent and in the audit log)");
    c->add_option("--as", f.as,
                  "The private key signing the request: the agent's spawning principal or a "
                  "vault administrator (e.g. DIR/admin.key from vaultctl init)")
        ->required();
    const ControlPayload::Action action = v.action;
    c->callback([&g, &command, action] {
      command = [&g, action] { return ControlCommand(g, f, action); };
    });
  }

  auto* logs = agent->add_subcommand(
      "logs", "Print an agent's log: TIME LEVEL [incarnation] message (JSON: one object per line)");
  logs->add_option("ID", f.id, "The agent id")->required();
  logs->add_flag("-f,--follow", f.follow,
                 "Keep printing new lines until the agent ends or leaves this vault (with --as: "
                 "follows it to the next), or Ctrl-C; for at most 24 hours (the stream's "
                 "deadline; then it says where to continue)");
  logs->add_option("--from", f.from_seq, "Start at this line number (default: the oldest kept)");
  logs->add_option("--as", f.as,
                   absl::StrCat(kReachHelp, "; with -f, follows the agent from vault to vault"));
  logs->callback([&] { command = [&g] { return LogsCommand(g, f); }; });

  auto* send = agent->add_subcommand("send", "Send a message to an agent; prints its message id");
  send->add_option("ID", f.id, "The agent id")->required();
  send->add_option("--type", f.type, "The message type")->required();
  send->add_option("--data", f.data, "A file holding the message body; - for stdin");
  send->add_option("--as", f.as, kReachHelp);
  send->callback([&] { command = [&g] { return SendCommand(g, f); }; });

  auto* query = agent->add_subcommand(
      "query",
      "Ask an agent a question; prints the answer's bytes as they are (JSON: {type, answer} or, "
      "when the answer is not UTF-8, {type, answer_base64})");
  query->add_option("ID", f.id, "The agent id")->required();
  query->add_option("QUESTION", f.question, "The question")->required();
  query->add_option("--as", f.as, kReachHelp);
  query->add_option("--data", f.data, "A file holding data for the question; - for stdin");
  query->add_option("--timeout", f.query_timeout_seconds,
                    "Seconds the agent has to answer (default 30; the call's own deadline is "
                    "extended to match)");
  query->callback([&] { command = [&g] { return QueryCommand(g, f); }; });

  AddAgentLocationCommands(agent, g, command);
}

}  // namespace vault::vaultctl
