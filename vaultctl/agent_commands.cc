// vaultctl agent ...: spawn, list, inspect, control and talk to the agents of a vault (design §6)
// through the Agents service on its admin socket (proto/vault/v1/agent.proto).
//
//   vaultctl agent spawn prices.scm --as me.key          # prints the new agent's id
//   vaultctl agent ls --status running --min-memory 100M
//   vaultctl agent pause a-0123456789abcdef --reason "looking into it" --as me.key
//   vaultctl agent logs a-0123456789abcdef -f
//
// spawn signs a one-link chain: a SPAWN link from --as's key to the vault's key (which
// Admin.Status reports). pause, resume and terminate sign a ControlPayload with --as's key over
// kControlDomain || payload. Also here: the argument parsers and printers commands.h shares with
// policy_commands.cc.
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <iostream>
#include <iterator>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "capability/chain.h"
#include "capability/grant.h"
#include "capability/principal.h"
#include "capability/signing_domains.h"
#include "capability/text_form.h"
#include "common/file_util.h"
#include "common/proto_util.h"
#include "common/random.h"
#include "common/status_macros.h"
#include "node/grpc_status.h"
#include "vault/v1/agent.pb.h"
#include "vaultctl/cas_upload.h"
#include "vaultctl/commands.h"
#include "vaultctl/output.h"

namespace vault::vaultctl {

// Control requests are signed as Ed25519(key, kControlDomain || payload)
// (capability/signing_domains.h).
using capability::kControlDomain;

namespace {

using capability::PrivateKey;
using capability::PublicKey;
using vault::v1::AgentSpec;
using vault::v1::AgentState;
using vault::v1::ControlPayload;
using vault::v1::Grant;
using vault::v1::LinkPayload;

// A follow stream (logs -f) ends after this: no call goes without a deadline.
constexpr absl::Duration kFollowDeadline = absl::Hours(24);
// The authority of a spawned agent whose constraints set no expiry lasts this long.
constexpr absl::Duration kDefaultSpawnValidity = absl::Hours(24 * 365);
// A SPAWN link is valid from a minute ago, for vaults whose clocks run a little behind.
constexpr absl::Duration kSpawnBackdate = absl::Seconds(60);
// What the vault waits for an answer when a query gives no --timeout (QueryRequest.timeout_ms 0).
constexpr absl::Duration kDefaultQueryTimeout = absl::Seconds(30);
constexpr size_t kPurposeColumn = 48;

struct AgentFlags {
  std::string id;
  std::string spec;
  std::string code;
  std::string state;
  std::string code_signature;
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
int ReportInputError(const absl::Status& status, bool json) {
  return ReportConnectError(status, json);
}

std::string TimeText(int64_t unix_ms) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::FromUnixMillis(unix_ms),
                          absl::UTCTimeZone());
}

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

bool IsValidUtf8(absl::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n;
    uint32_t cp;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      n = 1;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      n = 2;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      n = 3;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + n >= s.size()) return false;  // truncated
    for (size_t k = 1; k <= n; ++k) {
      const unsigned char cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    static constexpr uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n + 1;
  }
  return true;
}

std::string StateName(AgentState state) {
  if (state == vault::v1::AGENT_STATE_UNSPECIFIED || !vault::v1::AgentState_IsValid(state)) {
    return "unknown";
  }
  return absl::AsciiStrToLower(vault::v1::AgentState_Name(state));
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

// --code-signature FILE: 64 raw bytes, or 128 hex digits (surrounding whitespace ignored).
absl::StatusOr<std::string> ReadSignature(const std::string& path) {
  VAULT_ASSIGN_OR_RETURN(std::string bytes, common::ReadFile(path));
  if (bytes.size() == PublicKey::kSignatureSize) return bytes;
  absl::string_view hex = absl::StripAsciiWhitespace(bytes);
  if (hex.size() == 2 * PublicKey::kSignatureSize &&
      std::all_of(hex.begin(), hex.end(), [](char c) { return absl::ascii_isxdigit(c); })) {
    return absl::HexStringToBytes(hex);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--code-signature: ", path, " holds neither a 64-byte signature nor 128 hex digits"));
}

absl::Status CheckRegularFile(const std::string& path, absl::string_view what) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    return common::PosixError(errno, absl::StrCat(what, " ", path));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(what, " ", path, " is not a regular file"));
  }
  return absl::OkStatus();
}

// FILE's bytes; "-" is stdin.
absl::StatusOr<std::string> ReadInput(const std::string& path) {
  if (path != "-") return common::ReadFile(path);
  std::string data(std::istreambuf_iterator<char>(std::cin), {});
  if (std::cin.bad()) return absl::DataLossError("could not read stdin");
  return data;
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

Json GrantsJson(const google::protobuf::RepeatedPtrField<Grant>& grants) {
  Json arr = Json::Array();
  for (const Grant& g : grants) arr.Push(capability::GrantToString(g));
  return arr;
}

void PrintGrants(const google::protobuf::RepeatedPtrField<Grant>& grants) {
  if (grants.empty()) std::cout << "  (none)\n";
  for (const Grant& gr : grants) std::cout << "  " << capability::GrantToString(gr) << "\n";
}

// --- agent spawn ---------------------------------------------------------------------------

int SpawnCommand(const GlobalOptions& g, const AgentFlags& f) {
  vault::v1::SpawnRequest req;
  AgentSpec& spec = *req.mutable_spec();
  std::optional<PrivateKey> key;
  std::string code_path;  // a file to upload first; "" when the spec names a CAS object
  absl::Status input = [&]() -> absl::Status {
    VAULT_ASSIGN_OR_RETURN(std::string text, common::ReadFile(f.spec));
    VAULT_ASSIGN_OR_RETURN(spec, capability::ParseAgentSpec(text, f.spec));
    if (!f.code.empty()) {
      code_path = f.code;
    } else if (spec.has_code_file()) {
      code_path = common::ResolvePath(common::DirName(f.spec), spec.code_file());
    } else if (!spec.has_code_digest()) {
      return absl::InvalidArgumentError(
          absl::StrCat(f.spec,
                       " names no code: put (code \"sha256:<hex>/<size>\") or (code-file \"FILE\") "
                       "in it, or pass --code FILE"));
    }
    if (!code_path.empty()) VAULT_RETURN_IF_ERROR(CheckRegularFile(code_path, "code file"));
    if (!spec.code_signer().empty()) {
      if (f.code_signature.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(f.spec, " wants its code signed by ",
                                                       spec.code_signer(),
                                                       ": pass --code-signature FILE"));
      }
      VAULT_ASSIGN_OR_RETURN(*req.mutable_code_signature(), ReadSignature(f.code_signature));
    } else if (!f.code_signature.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--code-signature: ", f.spec, " names no code_signer for the vault to check it with"));
    }
    if (!f.state.empty()) {
      VAULT_ASSIGN_OR_RETURN(*req.mutable_initial_state(), common::ReadFile(f.state));
      req.set_has_initial_state(true);
    }
    if (spec.constraints().has_expires_unix_ms() &&
        spec.constraints().expires_unix_ms() <= absl::ToUnixMillis(absl::Now())) {
      return absl::InvalidArgumentError(absl::StrCat(
          f.spec, ": its constraints expired at ", TimeText(spec.constraints().expires_unix_ms())));
    }
    VAULT_ASSIGN_OR_RETURN(PrivateKey k, PrivateKey::LoadFile(f.as));
    key.emplace(std::move(k));
    return absl::OkStatus();
  }();
  if (!input.ok()) return ReportInputError(input, g.json());

  absl::StatusOr<Connection> conn = Connection::Connect(g.connect);
  if (!conn.ok()) return ReportConnectError(conn.status(), g.json());
  absl::StatusOr<vault::v1::SpawnResponse> resp =
      [&]() -> absl::StatusOr<vault::v1::SpawnResponse> {
    VAULT_ASSIGN_OR_RETURN(PublicKey vault_key, VaultKey(*conn));
    if (!code_path.empty()) {
      VAULT_ASSIGN_OR_RETURN(cas::Digest code, UploadFile(*conn, code_path));
      node::ToProto(code, spec.mutable_code_digest());  // replaces code_file (a oneof)
    }
    VAULT_ASSIGN_OR_RETURN(std::string id_bytes, common::RandomBytes(8));
    const absl::Time now = absl::Now();
    LinkPayload p;
    p.set_version(capability::kLinkVersion);
    p.set_kind(LinkPayload::SPAWN);
    p.set_issuer(key->public_key().raw());
    p.set_audience(vault_key.raw());
    p.set_agent_id(absl::StrCat("a-", absl::BytesToHexString(id_bytes)));
    *p.mutable_code() = spec.code_digest();
    *p.mutable_grants() = spec.grants();
    *p.mutable_constraints() = spec.constraints();
    p.set_not_before_unix_ms(absl::ToUnixMillis(now - kSpawnBackdate));
    p.set_not_after_unix_ms(spec.constraints().has_expires_unix_ms()
                                ? spec.constraints().expires_unix_ms()
                                : absl::ToUnixMillis(now + kDefaultSpawnValidity));
    p.set_hop(0);
    VAULT_ASSIGN_OR_RETURN(vault::v1::SignedLink link, capability::SignLink(p, *key));
    *req.mutable_chain()->add_links() = std::move(link);
    vault::v1::SpawnResponse out;
    VAULT_RETURN_IF_ERROR(FromAgentsGrpc(conn->agents()->Spawn(conn->Context().get(), req, &out)));
    return out;
  }();
  if (!resp.ok()) return ReportError(resp.status(), g.json());
  if (g.json()) {
    std::cout << Json::Object()
                     .Add("agent_id", resp->agent_id())
                     .Add("state", StateName(resp->state()))
                     .Add("grants", GrantsJson(resp->grants()))
                     .Add("constraints", ConstraintsJson(resp->constraints()))
                     .ToString()
              << "\n";
  } else {
    std::cout << resp->agent_id() << "\n";
  }
  return kExitOk;
}

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

bool Ended(AgentState s) {
  return s == vault::v1::TERMINATED || s == vault::v1::COMPLETED || s == vault::v1::FAILED ||
         s == vault::v1::DEPARTED;
}

void PrintStatusJson(const vault::v1::AgentStatus& st) {
  const vault::v1::AgentRecord& r = st.record();
  const vault::v1::AgentCounters& c = r.counters();
  Json o = Json::Object()
               .Add("id", r.id())
               .Add("state", StateName(r.state()))
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

void PrintStatusText(const vault::v1::AgentStatus& st) {
  const vault::v1::AgentRecord& r = st.record();
  const vault::v1::AgentCounters& c = r.counters();
  std::cout << "agent:        " << TerminalSafe(r.id()) << "\n"
            << "state:        " << StateName(r.state())
            << (r.reason().empty() ? ""
                                   : absl::StrCat(" (", OneLineTruncated(r.reason(), 200), ")"))
            << "\n"
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

int StatusCommand(const GlobalOptions& g, const AgentFlags& f) {
  absl::StatusOr<Connection> conn = Connection::Connect(g.connect);
  if (!conn.ok()) return ReportConnectError(conn.status(), g.json());
  absl::StatusOr<vault::v1::AgentStatus> st = GetAgent(*conn, f.id);
  if (!st.ok()) return ReportError(st.status(), g.json());
  if (g.json()) {
    PrintStatusJson(*st);
  } else {
    PrintStatusText(*st);
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

// --- agent pause / resume / terminate -------------------------------------------------------

int ControlCommand(const GlobalOptions& g, const AgentFlags& f, ControlPayload::Action action) {
  absl::StatusOr<PrivateKey> key = PrivateKey::LoadFile(f.as);
  if (!key.ok()) return ReportInputError(key.status(), g.json());
  absl::StatusOr<Connection> conn = Connection::Connect(g.connect);
  if (!conn.ok()) return ReportConnectError(conn.status(), g.json());
  std::string at_vault;  // "" when the agent is (or was) here
  absl::StatusOr<vault::v1::ControlResponse> resp =
      [&]() -> absl::StatusOr<vault::v1::ControlResponse> {
    // The request names the vault that hosts the agent now; this vault forwards it there.
    VAULT_ASSIGN_OR_RETURN(PublicKey vault_key, VaultKey(*conn));
    if (absl::StatusOr<vault::v1::LocateResponse> where = LocateAgent(*conn, f.id);
        where.ok() && where->vault_key().size() == PublicKey::kRawSize &&
        where->vault_key() != vault_key.raw()) {
      VAULT_ASSIGN_OR_RETURN(vault_key, PublicKey::FromRaw(where->vault_key()));
      at_vault = where->vault();
    }
    ControlPayload p;
    p.set_agent_id(f.id);
    p.set_action(action);
    p.set_reason(f.reason);
    p.set_signer(key->public_key().raw());
    p.set_vault(vault_key.raw());
    p.set_issued_unix_ms(absl::ToUnixMillis(absl::Now()));
    VAULT_ASSIGN_OR_RETURN(*p.mutable_nonce(), common::RandomBytes(16));
    vault::v1::ControlRequest req;
    req.set_payload(common::SerializeDeterministic(p));
    VAULT_ASSIGN_OR_RETURN(*req.mutable_signature(),
                           key->Sign(absl::StrCat(kControlDomain, req.payload())));
    vault::v1::ControlResponse out;
    VAULT_RETURN_IF_ERROR(
        FromAgentsGrpc(conn->agents()->Control(conn->Context().get(), req, &out)));
    return out;
  }();
  if (!resp.ok()) return ReportError(resp.status(), g.json());
  if (g.json()) {
    Json out = Json::Object().Add("agent_id", f.id).Add("state", StateName(resp->state()));
    if (!at_vault.empty()) out.Add("vault", at_vault);
    std::cout << out.ToString() << "\n";
  } else {
    std::cout << StateName(resp->state());
    if (!at_vault.empty()) std::cout << " (on " << at_vault << ")";
    std::cout << "\n";
  }
  return kExitOk;
}

// --- agent logs ---------------------------------------------------------------------------

int LogsCommand(const GlobalOptions& g, const AgentFlags& f) {
  absl::StatusOr<Connection> conn = Connection::Connect(g.connect);
  if (!conn.ok()) return ReportConnectError(conn.status(), g.json());
  vault::v1::LogsRequest req;
  req.set_id(f.id);
  req.set_follow(f.follow);
  req.set_from_seq(f.from_seq);
  std::unique_ptr<grpc::ClientContext> ctx = conn->Context();
  if (f.follow) ctx->set_deadline(absl::ToChronoTime(absl::Now() + kFollowDeadline));
  std::unique_ptr<grpc::ClientReader<vault::v1::AgentLogLine>> reader =
      conn->agents()->Logs(ctx.get(), req);
  vault::v1::AgentLogLine line;
  uint64_t next_seq = f.from_seq;  // where a new follow would continue
  bool cancelled = false;
  while (reader->Read(&line)) {
    next_seq = line.seq() + 1;
    if (g.json()) {
      std::cout << Json::Object()
                       .Add("seq", line.seq())
                       .Add("unix_ms", line.unix_ms())
                       .Add("level", line.level())
                       .Add("incarnation", line.incarnation())
                       .Add("message", line.message())
                       .ToString()
                << "\n";
    } else {
      // A message's own line breaks are kept, its continuation lines indented.
      std::cout << TimeText(line.unix_ms()) << " "
                << absl::StrFormat("%-5s", TerminalSafe(line.level())) << " [" << line.incarnation()
                << "] " << absl::StrReplaceAll(TerminalSafe(line.message()), {{"\n", "\n    "}})
                << "\n";
    }
    if (f.follow) std::cout.flush();
    if (!std::cout) {  // stdout is gone (a closed pipe): stop reading
      ctx->TryCancel();
      cancelled = true;
      break;
    }
  }
  absl::Status s = FromAgentsGrpc(reader->Finish());
  if (cancelled) return kExitFailure;
  if (f.follow && absl::IsDeadlineExceeded(s)) {
    std::cerr << "vaultctl: stopped following after " << absl::FormatDuration(kFollowDeadline)
              << "; continue with --from " << next_seq << "\n";
    return kExitOk;
  }
  if (!s.ok()) return ReportError(s, g.json());
  return kExitOk;
}

// --- agent send / query -------------------------------------------------------------------

int SendCommand(const GlobalOptions& g, const AgentFlags& f) {
  vault::v1::SendMessageRequest req;
  req.set_id(f.id);
  req.set_type(f.type);
  if (!f.data.empty()) {
    absl::StatusOr<std::string> data = ReadInput(f.data);
    if (!data.ok()) return ReportInputError(data.status(), g.json());
    req.set_data(*std::move(data));
  }
  absl::StatusOr<Connection> conn = Connection::Connect(g.connect);
  if (!conn.ok()) return ReportConnectError(conn.status(), g.json());
  vault::v1::SendMessageResponse resp;
  absl::Status s = FromAgentsGrpc(conn->agents()->Send(conn->Context().get(), req, &resp));
  if (!s.ok()) return ReportError(s, g.json());
  if (g.json()) {
    std::cout
        << Json::Object().Add("agent_id", f.id).Add("message_id", resp.message_id()).ToString()
        << "\n";
  } else {
    std::cout << resp.message_id() << "\n";
  }
  return kExitOk;
}

int QueryCommand(const GlobalOptions& g, const AgentFlags& f) {
  vault::v1::QueryRequest req;
  req.set_id(f.id);
  req.set_question(f.question);
  absl::Duration wait = kDefaultQueryTimeout;
  absl::Status input = [&]() -> absl::Status {
    if (f.query_timeout_seconds != 0) {
      const double ms = std::ceil(f.query_timeout_seconds * 1000);
      if (!(ms >= 1 && ms <= static_cast<double>(UINT32_MAX))) {
        return absl::InvalidArgumentError(
            absl::StrFormat("--timeout %g: expected 0.001 to 4294967 seconds (0: the vault's "
                            "default, 30)",
                            f.query_timeout_seconds));
      }
      req.set_timeout_ms(static_cast<uint32_t>(ms));
      wait = absl::Milliseconds(req.timeout_ms());
    }
    if (!f.data.empty()) {
      VAULT_ASSIGN_OR_RETURN(*req.mutable_data(), ReadInput(f.data));
    }
    return absl::OkStatus();
  }();
  if (!input.ok()) return ReportInputError(input, g.json());
  absl::StatusOr<Connection> conn = Connection::Connect(g.connect);
  if (!conn.ok()) return ReportConnectError(conn.status(), g.json());
  std::unique_ptr<grpc::ClientContext> ctx = conn->Context();
  // The call must outlast the agent's time to answer, with room for the vault to say it timed out.
  const absl::Duration needed = wait + absl::Seconds(5);
  if (conn->timeout() < needed) ctx->set_deadline(absl::ToChronoTime(absl::Now() + needed));
  vault::v1::QueryResponse resp;
  absl::Status s = FromAgentsGrpc(conn->agents()->Query(ctx.get(), req, &resp));
  if (!s.ok()) return ReportError(s, g.json());
  if (g.json()) {
    Json o = Json::Object().Add("type", resp.type());
    if (IsValidUtf8(resp.answer())) {
      o.Add("answer", resp.answer());
    } else {
      o.Add("answer_base64", absl::Base64Escape(resp.answer()));
    }
    std::cout << o.ToString() << "\n";
  } else {
    std::cout.write(resp.answer().data(), static_cast<std::streamsize>(resp.answer().size()));
    std::cout.flush();
    if (!std::cout) return ReportError(absl::DataLossError("could not write the answer"), false);
  }
  return kExitOk;
}

}  // namespace

// --- shared with policy_commands.cc (commands.h) ---------------------------------------------

absl::StatusOr<PublicKey> PrincipalArg(const std::string& text, absl::string_view flag) {
  if (absl::StartsWith(text, PublicKey::kTextPrefix)) {
    absl::StatusOr<PublicKey> k = PublicKey::FromText(text);
    if (!k.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, ": \"", text, "\" is not an ed25519:<64 lowercase hex> public key"));
    }
    return k;
  }
  absl::StatusOr<std::string> content = common::ReadFile(text);
  if (!content.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": \"", text,
                     "\" is neither a principal id (ed25519:<hex>) nor a readable key file"));
  }
  if (absl::StrContains(*content, "PRIVATE KEY")) {
    absl::StatusOr<PrivateKey> key = PrivateKey::LoadFile(text);
    if (!key.ok()) {
      return absl::Status(key.status().code(), absl::StrCat(flag, ": ", key.status().message()));
    }
    return key->public_key();
  }
  absl::StatusOr<PublicKey> k = PublicKey::FromText(absl::StripAsciiWhitespace(*content));
  if (!k.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        flag, ": ", text, " holds neither a private key (PEM) nor an ed25519:<hex> id"));
  }
  return k;
}

absl::StatusOr<uint64_t> ParseByteSize(absl::string_view flag, absl::string_view text) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": \"", text, "\" ", why, " (a size is e.g. 4096, 10KiB, 512M or 1G)"));
  };
  absl::string_view t = absl::StripAsciiWhitespace(text);
  if (t.empty()) return bad("is empty");
  size_t digits = 0;
  while (digits < t.size() && absl::ascii_isdigit(t[digits])) ++digits;
  if (digits == 0) return bad("does not start with a number");
  absl::string_view unit = absl::StripLeadingAsciiWhitespace(t.substr(digits));
  if (absl::StartsWith(unit, ".") || absl::StartsWith(unit, ",")) {
    return bad("is not a whole number; write 1536M rather than 1.5G");
  }
  const std::string u = absl::AsciiStrToLower(unit);
  int shift = -1;
  for (const auto& [names, s] :
       std::initializer_list<std::pair<std::vector<const char*>, int>>{{{"", "b"}, 0},
                                                                       {{"k", "kb", "kib"}, 10},
                                                                       {{"m", "mb", "mib"}, 20},
                                                                       {{"g", "gb", "gib"}, 30},
                                                                       {{"t", "tb", "tib"}, 40}}) {
    for (const char* n : names) {
      if (u == n) shift = s;
    }
  }
  if (shift < 0) {
    return bad(absl::StrCat("has an unknown unit \"", unit,
                            "\"; expected B, K, M, G or T (or KiB, MiB, GiB, TiB)"));
  }
  uint64_t value = 0;
  if (!absl::SimpleAtoi(t.substr(0, digits), &value) || value > (UINT64_MAX >> shift)) {
    return bad("is too large");
  }
  return value << shift;
}

std::string ConstraintsLine(const vault::v1::Constraints& c) {
  std::string out;
  bool space = false;
  for (char ch : capability::ConstraintsToSexpr(c)) {
    if (ch == '\n' || ch == ' ') {
      space = !out.empty();
      continue;
    }
    if (space && ch != ')') out.push_back(' ');
    space = false;
    out.push_back(ch);
  }
  return out;
}

Json ConstraintsJson(const vault::v1::Constraints& c) {
  Json o = Json::Object();
  if (c.has_max_runtime_ms()) o.Add("max_runtime_ms", c.max_runtime_ms());
  if (c.has_max_memory_bytes()) o.Add("max_memory_bytes", c.max_memory_bytes());
  if (c.has_max_storage_bytes()) o.Add("max_storage_bytes", c.max_storage_bytes());
  if (c.has_max_cpu_ms()) o.Add("max_cpu_ms", c.max_cpu_ms());
  if (c.has_max_open_files()) o.Add("max_open_files", c.max_open_files());
  if (c.has_max_processes()) o.Add("max_processes", c.max_processes());
  if (c.has_max_migrations()) o.Add("max_migrations", c.max_migrations());
  if (c.has_expires_unix_ms()) o.Add("expires_unix_ms", c.expires_unix_ms());
  return o;
}

void PrintTable(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const std::vector<std::string>& row : rows) {
    if (width.size() < row.size()) width.resize(row.size(), 0);
    for (size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  }
  for (const std::vector<std::string>& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line.append(width[i] - row[i].size() + 2, ' ');
    }
    std::cout << line << "\n";
  }
}

std::string TerminalSafe(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if ((c < 0x20 && c != '\t' && c != '\n') || c == 0x7f) {
      absl::StrAppend(&out, absl::StrFormat("\\x%02x", c));
    } else if (c == 0xC2 && i + 1 < text.size() &&
               (static_cast<unsigned char>(text[i + 1]) & 0xE0) == 0x80) {
      // U+0080..U+009F: C1 controls (a terminal may take U+009B as CSI).
      absl::StrAppend(&out, absl::StrFormat("\\u%04x", static_cast<unsigned char>(text[++i])));
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  return out;
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
      "CAS first, and --as's key signs a SPAWN link to the vault for the spec's grants and "
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
                 "Keep printing new lines until Ctrl-C (for at most 24 hours: the stream's "
                 "deadline; then it says the --from to continue with)");
  logs->add_option("--from", f.from_seq, "Start at this line number (default: the oldest kept)");
  logs->callback([&] { command = [&g] { return LogsCommand(g, f); }; });

  auto* send = agent->add_subcommand("send", "Send a message to an agent; prints its message id");
  send->add_option("ID", f.id, "The agent id")->required();
  send->add_option("--type", f.type, "The message type")->required();
  send->add_option("--data", f.data, "A file holding the message body; - for stdin");
  send->callback([&] { command = [&g] { return SendCommand(g, f); }; });

  auto* query = agent->add_subcommand(
      "query",
      "Ask an agent a question; prints the answer's bytes as they are (JSON: {type, answer} or, "
      "when the answer is not UTF-8, {type, answer_base64})");
  query->add_option("ID", f.id, "The agent id")->required();
  query->add_option("QUESTION", f.question, "The question")->required();
  query->add_option("--data", f.data, "A file holding data for the question; - for stdin");
  query->add_option("--timeout", f.query_timeout_seconds,
                    "Seconds the agent has to answer (default 30; the call's own deadline is "
                    "extended to match)");
  query->callback([&] { command = [&g] { return QueryCommand(g, f); }; });

  AddAgentLocationCommands(agent, g, command);
}

}  // namespace vault::vaultctl
