// vaultctl policy ...: the vault's trust policy (design §6) — which principals may run agents on
// it, under what ceiling of grants and constraints, with what quotas — through the Agents
// service on its admin socket.
//
//   vaultctl policy trust ed25519:<hex> --ceiling read-only --max-agents 10
//   vaultctl policy trust alice.key --ceiling read:/vault/pub --ceiling cas-read --admin
//   vaultctl policy ls
//   vaultctl policy untrust alice.key
//
// The administrators listed in the vault config (agents.admins) are not in this policy: edit
// the config to change them.
#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "capability/grant.h"
#include "capability/principal.h"
#include "capability/text_form.h"
#include "common/status_macros.h"
#include "vault/v1/agent.pb.h"
#include "vaultctl/commands.h"
#include "vaultctl/output.h"
#include "vaultctl/shorthand.h"

namespace vault::vaultctl {
namespace {

using vault::v1::TrustEntry;

constexpr const char* kPresets[] = {"read-only", "read-write", "full"};

struct PolicyFlags {
  std::string principal;
  std::vector<std::string> ceiling;
  std::string constraints;
  bool admin = false;
  uint32_t max_agents = 0;
  std::string max_storage;
  uint32_t max_calls_per_second = 0;
};

bool IsPreset(absl::string_view name) {
  for (const char* p : kPresets) {
    if (name == p) return true;
  }
  return false;
}

// The ceiling from --ceiling (repeatable): one preset name, or grants.
absl::Status FillCeiling(const std::vector<std::string>& ceiling, TrustEntry* entry) {
  if (ceiling.size() == 1 && IsPreset(ceiling[0])) {
    entry->set_preset(ceiling[0]);
    return absl::OkStatus();
  }
  for (const std::string& c : ceiling) {
    if (IsPreset(c)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--ceiling: the preset ", c, " is a whole ceiling: give it alone, or give grants"));
    }
    absl::StatusOr<std::vector<vault::v1::Grant>> grants = ParseGrantsFlag(c, "--ceiling");
    if (!grants.ok()) {
      // A word that is neither a grant nor a preset: name the presets too.
      return absl::Status(grants.status().code(),
                          absl::StrCat(grants.status().message(),
                                       "; or one preset alone: read-only, read-write, full"));
    }
    for (vault::v1::Grant& gr : *grants) *entry->add_ceiling() = std::move(gr);
  }
  return capability::ValidateGrants(entry->ceiling());
}

std::string QuotaText(const vault::v1::PrincipalQuota& q) {
  if (q.max_agents() == 0 && q.max_storage_bytes() == 0 && q.max_calls_per_second() == 0) {
    return "defaults";
  }
  auto or_default = [](uint64_t v, std::string text) {
    return v == 0 ? std::string("default") : text;
  };
  return absl::StrCat(
      "agents ", or_default(q.max_agents(), absl::StrCat(q.max_agents())), ", storage ",
      or_default(q.max_storage_bytes(), HumanBytes(q.max_storage_bytes())), ", calls/s ",
      or_default(q.max_calls_per_second(), absl::StrCat(q.max_calls_per_second())));
}

std::vector<std::string> GrantStrings(const TrustEntry& e) {
  std::vector<std::string> out;
  for (const vault::v1::Grant& g : e.ceiling()) out.push_back(capability::GrantToString(g));
  return out;
}

Json EntryJson(const TrustEntry& e) {
  Json grants = Json::Array();
  for (const std::string& g : GrantStrings(e)) grants.Push(g);
  return Json::Object()
      .Add("principal", e.principal())
      .Add("admin", e.admin())
      .Add("preset", e.preset())
      .Add("ceiling", grants)
      .Add("ceiling_constraints", ConstraintsJson(e.ceiling_constraints()))
      .Add("quota", Json::Object()
                        .Add("max_agents", e.quota().max_agents())
                        .Add("max_storage_bytes", e.quota().max_storage_bytes())
                        .Add("max_calls_per_second", e.quota().max_calls_per_second()))
      .Add("added_unix_ms", e.added_unix_ms());
}

void PrintEntry(const TrustEntry& e) {
  std::cout << "principal:    " << TerminalSafe(e.principal()) << "\n"
            << "admin:        " << (e.admin() ? "yes" : "no") << "\n"
            << "preset:       " << (e.preset().empty() ? "-" : TerminalSafe(e.preset())) << "\n"
            << "ceiling:\n";
  if (e.ceiling().empty()) std::cout << "  (none)\n";
  for (const std::string& g : GrantStrings(e)) std::cout << "  " << g << "\n";
  std::cout << "constraints:  " << ConstraintsLine(e.ceiling_constraints()) << "\n"
            << "quotas:       " << QuotaText(e.quota()) << "\n";
  if (e.added_unix_ms() != 0) {
    std::cout << "added:        "
              << absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::FromUnixMillis(e.added_unix_ms()),
                                  absl::UTCTimeZone())
              << "\n";
  }
}

int TrustCommand(const GlobalOptions& g, const PolicyFlags& f) {
  vault::v1::TrustRequest req;
  TrustEntry& entry = *req.mutable_entry();
  absl::Status input = [&]() -> absl::Status {
    VAULT_ASSIGN_OR_RETURN(capability::PublicKey principal, PrincipalArg(f.principal, "PRINCIPAL"));
    entry.set_principal(principal.ToText());
    VAULT_RETURN_IF_ERROR(FillCeiling(f.ceiling, &entry));
    if (!f.constraints.empty()) {
      VAULT_ASSIGN_OR_RETURN(*entry.mutable_ceiling_constraints(),
                             ParseConstraintsFlag(f.constraints, "--constraints"));
    }
    entry.set_admin(f.admin);
    entry.mutable_quota()->set_max_agents(f.max_agents);
    entry.mutable_quota()->set_max_calls_per_second(f.max_calls_per_second);
    if (!f.max_storage.empty()) {
      VAULT_ASSIGN_OR_RETURN(uint64_t bytes, ParseByteSize("--max-storage", f.max_storage));
      entry.mutable_quota()->set_max_storage_bytes(bytes);
    }
    return absl::OkStatus();
  }();
  // Errors in the command line's own input are usage errors (exit 2).
  if (!input.ok()) return ReportConnectError(input, g.json());
  absl::StatusOr<Connection> conn = Connection::Connect(g.connect);
  if (!conn.ok()) return ReportConnectError(conn.status(), g.json());
  vault::v1::TrustResponse resp;
  absl::Status s = FromAgentsGrpc(conn->agents()->Trust(conn->Context().get(), req, &resp));
  if (!s.ok()) return ReportError(s, g.json());
  if (g.json()) {
    std::cout << EntryJson(resp.entry()).ToString() << "\n";
  } else {
    PrintEntry(resp.entry());
  }
  return kExitOk;
}

int ListCommand(const GlobalOptions& g) {
  absl::StatusOr<Connection> conn = Connection::Connect(g.connect);
  if (!conn.ok()) return ReportConnectError(conn.status(), g.json());
  vault::v1::ListPolicyResponse resp;
  absl::Status s = FromAgentsGrpc(
      conn->agents()->ListPolicy(conn->Context().get(), vault::v1::ListPolicyRequest(), &resp));
  if (!s.ok()) return ReportError(s, g.json());
  if (g.json()) {
    Json arr = Json::Array();
    for (const TrustEntry& e : resp.entries()) arr.Push(EntryJson(e));
    std::cout << arr.ToString() << "\n";
    return kExitOk;
  }
  std::vector<std::vector<std::string>> rows = {
      {"PRINCIPAL", "ADMIN", "PRESET", "CEILING", "QUOTAS"}};
  for (const TrustEntry& e : resp.entries()) {
    std::vector<std::string> grants = GrantStrings(e);
    rows.push_back({TerminalSafe(e.principal()), e.admin() ? "yes" : "no",
                    e.preset().empty() ? "-" : TerminalSafe(e.preset()),
                    grants.empty() ? "-" : absl::StrJoin(grants, ", "), QuotaText(e.quota())});
  }
  PrintTable(rows);
  return kExitOk;
}

int UntrustCommand(const GlobalOptions& g, const PolicyFlags& f) {
  absl::StatusOr<capability::PublicKey> principal = PrincipalArg(f.principal, "PRINCIPAL");
  if (!principal.ok()) return ReportConnectError(principal.status(), g.json());
  absl::StatusOr<Connection> conn = Connection::Connect(g.connect);
  if (!conn.ok()) return ReportConnectError(conn.status(), g.json());
  vault::v1::UntrustRequest req;
  req.set_principal(principal->ToText());
  vault::v1::UntrustResponse resp;
  absl::Status s = FromAgentsGrpc(conn->agents()->Untrust(conn->Context().get(), req, &resp));
  if (!s.ok()) return ReportError(s, g.json());
  if (g.json()) {
    std::cout << Json::Object().Add("principal", req.principal()).Add("trusted", false).ToString()
              << "\n";
  } else {
    std::cout << "untrusted " << req.principal() << "\n";
  }
  return kExitOk;
}

}  // namespace

void AddPolicyCommands(CLI::App& app, GlobalOptions& g, Command& command) {
  static PolicyFlags f;
  auto* policy = app.add_subcommand(
      "policy", "The vault's trust policy: who may run agents here, under what ceiling");
  policy->require_subcommand(1);

  auto* trust = policy->add_subcommand(
      "trust",
      "Trust a principal to run agents here (or replace its entry); prints the entry, with a "
      "preset's grants filled in by the vault");
  trust
      ->add_option("PRINCIPAL", f.principal,
                   "ed25519:<hex>, or a key file (a private key: its public key)")
      ->required();
  trust
      ->add_option("--ceiling", f.ceiling,
                   "The most its agents may be granted: a preset (read-only, read-write, full), "
                   "or grants, repeatable: read:/vault/pub, write:/p, read-hash:sha256:<hex>, "
                   "cas-read, cas-write, spawn, network:HOST[:PORT], send:AGENT, receive:AGENT, "
                   "migrate:V1,V2, or '(capabilities (read (path \"/p\")) ...)'")
      ->required();
  trust->add_option("--constraints", f.constraints,
                    "The most its agents' limits may be: '(constraints (max-memory ...) ...)' or "
                    "max-runtime=S,max-memory=B,max-storage=B,max-cpu=S,max-open-files=N,"
                    "max-processes=N,max-migrations=N,expires=UNIX_S");
  trust->add_flag("--admin", f.admin, "May control every agent on this vault");
  trust->add_option("--max-agents", f.max_agents,
                    "Live agents it may have at once (default: the vault's)");
  trust->add_option("--max-storage", f.max_storage,
                    "Bytes its agents may write, e.g. 512M, 1G (default: the vault's)");
  trust->add_option("--max-calls-per-second", f.max_calls_per_second,
                    "Host calls per second, all its agents together (default: the vault's)");
  trust->callback([&] { command = [&g] { return TrustCommand(g, f); }; });

  auto* ls = policy->add_subcommand(
      "ls",
      "List trusted principals (with the config's agents.admins): PRINCIPAL, ADMIN, PRESET, "
      "CEILING, QUOTAS");
  ls->callback([&] { command = [&g] { return ListCommand(g); }; });

  auto* untrust = policy->add_subcommand(
      "untrust", "Stop trusting a principal (the config's agents.admins cannot be removed here)");
  untrust
      ->add_option("PRINCIPAL", f.principal,
                   "ed25519:<hex>, or a key file (a private key: its public key)")
      ->required();
  untrust->callback([&] { command = [&g] { return UntrustCommand(g, f); }; });
}

}  // namespace vault::vaultctl
