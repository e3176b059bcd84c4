// vaultctl agent ls, status and describe: which agents a vault runs, and what one of them is, does
// and uses.
#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "capability/grant.h"
#include "capability/principal.h"
#include "common/file_util.h"
#include "common/status_macros.h"
#include "node/grpc_status.h"
#include "vault/v1/agent.pb.h"
#include "vaultctl/commands.h"
#include "vaultctl/internal/agent_commands.h"
#include "vaultctl/output.h"

namespace vault::vaultctl {
namespace {

using capability::PublicKey;
using vault::v1::AgentSpec;
using vault::v1::AgentState;
using vault::v1::Grant;

constexpr size_t kPurposeColumn = 48;

// "45s", "12m30s", "4h12m", "3d4h".
std::string ShortDuration(absl::Duration d) {
  int64_t s = std::max<int64_t>(0, absl::ToInt64Seconds(d));
  auto pair = [](int64_t big, const char* big_unit, int64_t small, const char* small_unit) {
    return small == 0 ? absl::StrCat(big, big_unit)
                      : absl::StrCat(big, big_unit, small, small_unit);
  };
  if (s < 60) return absl::StrCat(s, "s");
  if (s < 3600) return pair(s / 60, "m", s % 60, "s");
  if (s < 86400) return pair(s / 3600, "h", s % 3600 / 60, "m");
  return pair(s / 86400, "d", s % 86400 / 3600, "h");
}

std::string DigestText(const vault::v1::Digest& d) {
  absl::StatusOr<cas::Digest> digest = node::FromProto(d);
  return digest.ok() ? digest->ToString() : std::string("(malformed digest)");
}

// "ed25519:0123abcd..." -> "0123abcd".
std::string ShortPrincipal(absl::string_view principal) {
  absl::string_view hex = principal;
  absl::ConsumePrefix(&hex, PublicKey::kTextPrefix);
  return std::string(hex.substr(0, 8));
}

// At most `max` bytes of `text` on one line, cut at a character boundary, "..." when cut.
std::string OneLineTruncated(absl::string_view text, size_t max) {
  std::string flat = absl::StrReplaceAll(TerminalSafe(text), {{"\n", " "}, {"\t", " "}});
  if (flat.size() <= max) return flat;
  size_t cut = max - 3;
  while (cut > 0 && (static_cast<unsigned char>(flat[cut]) & 0xC0) == 0x80) --cut;
  return absl::StrCat(flat.substr(0, cut), "...");
}

absl::StatusOr<AgentState> StateArg(const std::string& text) {
  std::vector<std::string> names;
  for (int s = vault::v1::SPAWNED; s <= vault::v1::FAILED; ++s) {
    if (!vault::v1::AgentState_IsValid(s)) continue;
    names.push_back(StateName(static_cast<AgentState>(s)));
    if (names.back() == text) return static_cast<AgentState>(s);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--status: \"", text, "\" is not a state; one of ", absl::StrJoin(names, ", ")));
}

// Grant::CAS_READ -> "cas-read".
std::string KindName(Grant::Kind kind) {
  return absl::StrReplaceAll(absl::AsciiStrToLower(Grant::Kind_Name(kind)), {{"_", "-"}});
}

absl::StatusOr<Grant::Kind> KindArg(const std::string& text) {
  std::vector<std::string> names;
  for (int k = Grant::Kind_MIN; k <= Grant::Kind_MAX; ++k) {
    if (k == Grant::KIND_UNSPECIFIED || !Grant::Kind_IsValid(k)) continue;
    names.push_back(KindName(static_cast<Grant::Kind>(k)));
    if (names.back() == text) return static_cast<Grant::Kind>(k);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--has-grant: \"", text, "\" is not a grant kind; one of ", absl::StrJoin(names, ", ")));
}

// --spawned-by: a principal (ed25519:<hex> or a key file) as ed25519:<hex>, else an agent id.
absl::StatusOr<std::string> SpawnedByArg(const std::string& text) {
  if (absl::StartsWith(text, PublicKey::kTextPrefix) || common::PathExists(text)) {
    VAULT_ASSIGN_OR_RETURN(PublicKey key, PrincipalArg(text, "--spawned-by"));
    return key.ToText();
  }
  if (text.empty() || absl::StrContains(text, "/")) {
    return absl::InvalidArgumentError(
        absl::StrCat("--spawned-by: \"", text,
                     "\" is neither ed25519:<hex>, an existing key file, nor an agent id"));
  }
  return text;  // an agent id: its children
}

void PrintGrants(const google::protobuf::RepeatedPtrField<Grant>& grants) {
  if (grants.empty()) std::cout << "  (none)\n";
  for (const Grant& gr : grants) std::cout << "  " << capability::GrantToString(gr) << "\n";
}

}  // namespace

// --- agent ls -----------------------------------------------------------------------------

int ListCommand(const GlobalOptions& g, const AgentFlags& f) {
  vault::v1::ListAgentsRequest req;
  absl::Status input = [&]() -> absl::Status {
    if (!f.status.empty()) {
      VAULT_ASSIGN_OR_RETURN(AgentState state, StateArg(f.status));
      req.set_state(state);
    }
    if (!f.spawned_by.empty()) {
      VAULT_ASSIGN_OR_RETURN(*req.mutable_spawned_by(), SpawnedByArg(f.spawned_by));
    }
    if (!f.has_grant.empty()) {
      VAULT_ASSIGN_OR_RETURN(Grant::Kind kind, KindArg(f.has_grant));
      req.set_has_grant(kind);
    }
    if (!f.min_memory.empty()) {
      VAULT_ASSIGN_OR_RETURN(uint64_t bytes, ParseByteSize("--min-memory", f.min_memory));
      req.set_min_memory_bytes(bytes);
    }
    return absl::OkStatus();
  }();
  if (!input.ok()) return ReportInputError(input, g.json());
  absl::StatusOr<Connection> conn = Connection::Connect(g.connect);
  if (!conn.ok()) return ReportConnectError(conn.status(), g.json());
  vault::v1::ListAgentsResponse resp;
  absl::Status s = FromAgentsGrpc(conn->agents()->List(conn->Context().get(), req, &resp));
  if (!s.ok()) return ReportError(s, g.json());

  if (g.json()) {
    Json arr = Json::Array();
    for (const vault::v1::AgentSummary& a : resp.agents()) {
      arr.Push(Json::Object()
                   .Add("id", a.id())
                   .Add("state", StateName(a.state()))
                   .Add("principal", a.principal())
                   .Add("parent", a.parent())
                   .Add("purpose", a.purpose())
                   .Add("spawned_unix_ms", a.spawned_unix_ms())
                   .Add("memory_bytes", a.memory_bytes()));
    }
    std::cout << arr.ToString() << "\n";
    return kExitOk;
  }
  const absl::Time now = absl::Now();
  std::vector<std::vector<std::string>> rows = {
      {"ID", "STATE", "PRINCIPAL", "MEMORY", "AGE", "PURPOSE"}};
  for (const vault::v1::AgentSummary& a : resp.agents()) {
    rows.push_back(
        {TerminalSafe(a.id()), StateName(a.state()), TerminalSafe(ShortPrincipal(a.principal())),
         a.memory_bytes() == 0 ? "-" : HumanBytes(a.memory_bytes()),
         a.spawned_unix_ms() == 0 ? "-"
                                  : ShortDuration(now - absl::FromUnixMillis(a.spawned_unix_ms())),
         OneLineTruncated(a.purpose(), kPurposeColumn)});
  }
  PrintTable(rows);
  return kExitOk;
}

// --- agent status / describe ---------------------------------------------------------------

absl::StatusOr<vault::v1::AgentStatus> GetAgent(const Connection& conn, const std::string& id) {
  vault::v1::GetAgentRequest req;
  req.set_id(id);
  vault::v1::AgentStatus resp;
  VAULT_RETURN_IF_ERROR(FromAgentsGrpc(conn.agents()->Get(conn.Context().get(), req, &resp)));
  return resp;
}

namespace {

bool Ended(AgentState s) {
  return s == vault::v1::TERMINATED || s == vault::v1::COMPLETED || s == vault::v1::FAILED ||
         s == vault::v1::DEPARTED;
}

void PrintStatusJson(const vault::v1::AgentStatus& st, const std::string& vault) {
  const vault::v1::AgentRecord& r = st.record();
  const vault::v1::AgentCounters& c = r.counters();
  Json o = Json::Object()
               .Add("id", r.id())
               .Add("state", StateName(r.state()))
               .Add("vault", vault)
               .Add("reason", r.reason())
               .Add("principal", r.principal())
               .Add("parent", r.parent())
               .Add("spawned_unix_ms", r.spawned_unix_ms())
               .Add("updated_unix_ms", r.updated_unix_ms())
               .Add("ended_unix_ms", r.ended_unix_ms())
               .Add("uptime_ms", st.uptime_ms())
               .Add("memory_bytes", st.memory_bytes())
               .Add("peak_memory_bytes", st.peak_memory_bytes())
               .Add("cpu_ms", st.cpu_ms())
               .Add("storage_bytes", st.storage_bytes())
               .Add("mailbox_depth", st.mailbox_depth())
               .Add("incarnation", r.incarnation())
               .Add("hop", r.hop())
               .Add("exit_code", r.exit_code())
               .Add("flagged", st.flagged())
               .Add("counters", Json::Object()
                                    .Add("host_calls", c.host_calls())
                                    .Add("denials", c.denials())
                                    .Add("messages_sent", c.messages_sent())
                                    .Add("messages_received", c.messages_received())
                                    .Add("bytes_written", c.bytes_written())
                                    .Add("checkpoints", c.checkpoints())
                                    .Add("restarts", c.restarts())
                                    .Add("log_lines", c.log_lines()))
               .Add("grants", GrantsJson(r.grants()))
               .Add("constraints", ConstraintsJson(r.constraints()));
  if (r.has_state()) o.Add("state_digest", DigestText(r.state_digest()));
  if (r.has_result()) o.Add("result", DigestText(r.result()));
  std::cout << o.ToString() << "\n";
}

void PrintStatusText(const vault::v1::AgentStatus& st, const std::string& vault) {
  const vault::v1::AgentRecord& r = st.record();
  const vault::v1::AgentCounters& c = r.counters();
  std::cout << "agent:        " << TerminalSafe(r.id()) << "\n"
            << "state:        " << StateName(r.state())
            << (r.reason().empty() ? ""
                                   : absl::StrCat(" (", OneLineTruncated(r.reason(), 200), ")"))
            << "\n"
            << "vault:        " << TerminalSafe(vault) << "\n"
            << "principal:    " << TerminalSafe(r.principal()) << "\n"
            << "parent:       " << (r.parent().empty() ? "-" : TerminalSafe(r.parent())) << "\n"
            << "spawned:      " << (r.spawned_unix_ms() ? TimeText(r.spawned_unix_ms()) : "-")
            << "\n";
  if (Ended(r.state()) && r.ended_unix_ms() != 0) {
    std::cout << "ended:        " << TimeText(r.ended_unix_ms()) << " (exit code " << r.exit_code()
              << ")\n";
  }
  std::cout << "uptime:       "
            << (st.uptime_ms() > 0 ? absl::FormatDuration(absl::Trunc(
                                         absl::Milliseconds(st.uptime_ms()), absl::Seconds(1)))
                                   : "-")
            << "\n"
            << "memory:       " << (st.memory_bytes() ? HumanBytes(st.memory_bytes()) : "-")
            << " (peak " << HumanBytes(st.peak_memory_bytes()) << ")\n"
            << "cpu:          "
            << absl::StrFormat("%.3f s", static_cast<double>(st.cpu_ms()) / 1000) << "\n"
            << "storage:      " << HumanBytes(st.storage_bytes()) << " (written "
            << HumanBytes(c.bytes_written()) << ")\n"
            << "incarnation:  " << r.incarnation() << "\n"
            << "host calls:   " << c.host_calls() << "\n"
            << "denials:      " << c.denials() << "\n"
            << "messages:     " << c.messages_sent() << " sent, " << c.messages_received()
            << " received, " << st.mailbox_depth() << " waiting\n"
            << "checkpoints:  " << c.checkpoints() << "\n"
            << "restarts:     " << c.restarts() << "\n"
            << "flagged:      " << (st.flagged() ? "yes (repeated denials)" : "no") << "\n";
  if (r.has_result()) std::cout << "result:       " << DigestText(r.result()) << "\n";
  std::cout << "grants:\n";
  PrintGrants(r.grants());
  std::cout << "constraints:  " << ConstraintsLine(r.constraints()) << "\n";
}

}  // namespace

int StatusCommand(const GlobalOptions& g, const AgentFlags& f) {
  absl::StatusOr<Connection> conn = Connection::Connect(g.connect);
  if (!conn.ok()) return ReportConnectError(conn.status(), g.json());
  std::string vault;  // the vault whose status this is
  absl::StatusOr<vault::v1::AgentStatus> st = [&]() -> absl::StatusOr<vault::v1::AgentStatus> {
    if (f.as.empty()) {
      VAULT_ASSIGN_OR_RETURN(vault, VaultName(*conn));
      return GetAgent(*conn, f.id);
    }
    // Signed: asked of the member that hosts it now, through this one.
    VAULT_ASSIGN_OR_RETURN(capability::PrivateKey key, capability::PrivateKey::LoadFile(f.as));
    vault::v1::ControlPayload p;
    p.set_agent_id(f.id);
    p.set_action(vault::v1::ControlPayload::STATUS);
    VAULT_ASSIGN_OR_RETURN(vault::v1::ControlResponse resp,
                           SignedControl(*conn, key, p, absl::ZeroDuration(), &vault));
    if (vault.empty()) {
      VAULT_ASSIGN_OR_RETURN(vault, VaultName(*conn));
    }
    return resp.status();
  }();
  if (!st.ok()) return ReportError(st.status(), g.json());
  if (g.json()) {
    PrintStatusJson(*st, vault);
  } else {
    PrintStatusText(*st, vault);
  }
  if (f.as.empty() && st->record().state() == vault::v1::DEPARTED) {
    std::cerr << "vaultctl: agent " << f.id << " departed to "
              << TerminalSafe(st->record().migration().to_vault())
              << "; add --as KEY (its spawning principal or an administrator there) for its "
                 "status where it runs now\n";
  }
  return kExitOk;
}

int DescribeCommand(const GlobalOptions& g, const AgentFlags& f) {
  absl::StatusOr<Connection> conn = Connection::Connect(g.connect);
  if (!conn.ok()) return ReportConnectError(conn.status(), g.json());
  absl::StatusOr<vault::v1::AgentStatus> st = GetAgent(*conn, f.id);
  if (!st.ok()) return ReportError(st.status(), g.json());
  const AgentSpec& spec = st->record().spec();
  const std::string sandbox = spec.sandbox().empty() ? "posix" : spec.sandbox();
  const std::string code = spec.has_code_digest() ? DigestText(spec.code_digest()) : "";
  if (g.json()) {
    std::cout << Json::Object()
                     .Add("id", st->record().id())
                     .Add("purpose", spec.purpose())
                     .Add("instructions", spec.instructions())
                     .Add("code", code)
                     .Add("sandbox", sandbox)
                     .Add("code_signer", spec.code_signer())
                     .Add("heartbeat_timeout_ms", spec.heartbeat_timeout_ms())
                     .ToString()
              << "\n";
    return kExitOk;
  }
  std::cout << "agent:        " << TerminalSafe(st->record().id()) << "\n"
            << "purpose:      " << OneLineTruncated(spec.purpose(), 4096) << "\n"
            << "instructions:\n";
  if (spec.instructions().empty()) std::cout << "  (none)\n";
  for (absl::string_view line : absl::StrSplit(TerminalSafe(spec.instructions()), '\n')) {
    std::cout << "  " << line << "\n";
  }
  std::cout << "code:         " << (code.empty() ? "-" : code) << "\n"
            << "sandbox:      " << TerminalSafe(sandbox) << "\n";
  if (!spec.code_signer().empty()) {
    std::cout << "code signer:  " << TerminalSafe(spec.code_signer()) << "\n";
  }
  std::cout << "heartbeat:    "
            << (spec.heartbeat_timeout_ms() == 0
                    ? std::string("not required")
                    : absl::StrCat("at least every ", spec.heartbeat_timeout_ms(), " ms"))
            << "\n";
  return kExitOk;
}

}  // namespace vault::vaultctl
