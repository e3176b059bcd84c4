// vaultctl migrate AGENT --to VAULT: moves an agent to another member (design §7) through its
// vault's admin socket. The vault asks the agent to checkpoint, waits a bounded time, and hands
// it over; what is printed is the receipt the destination signed.
// vaultctl agent where ID / agent journey ID: where a mobile agent is now (the vault follows the
// members' records), and every hop it made as the audit logs witnessed them.
#include <algorithm>
#include <iostream>
#include <map>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "capability/grant.h"
#include "cas/digest.h"
#include "common/status_macros.h"
#include "vault/v1/agent.grpc.pb.h"
#include "vault/v1/migration.pb.h"
#include "vaultctl/client.h"
#include "vaultctl/commands.h"
#include "vaultctl/internal/agent_commands.h"
#include "vaultctl/output.h"

namespace vault::vaultctl {
namespace {

struct MigrateFlags {
  std::string id;
  std::string to;
  uint32_t checkpoint_wait_ms = 2000;
  bool no_checkpoint = false;
};

int MigrateCommand(const GlobalOptions& g, const MigrateFlags& f) {
  absl::StatusOr<Connection> conn = Connection::Connect(g.connect);
  if (!conn.ok()) return ReportConnectError(conn.status(), g.json());
  vault::v1::MigrateAgentRequest req;
  req.set_id(f.id);
  req.set_to_vault(f.to);
  req.set_checkpoint_wait_ms(f.checkpoint_wait_ms);
  req.set_no_checkpoint_request(f.no_checkpoint);
  // What it holds here, to say what the destination's ceiling takes away (when it can be read).
  std::vector<std::string> before;
  bool before_known = false;
  if (absl::StatusOr<vault::v1::AgentStatus> here = GetAgent(*conn, f.id); here.ok()) {
    before_known = true;
    for (const vault::v1::Grant& gr : here->record().grants()) {
      before.push_back(capability::GrantToString(gr));
    }
  }
  vault::v1::MigrateAgentResponse resp;
  std::unique_ptr<grpc::ClientContext> ctx = conn->Context();
  // The checkpoint wait, the transfer and, when an answer is lost, a few Status calls.
  ctx->set_deadline(absl::ToChronoTime(absl::Now() + absl::Milliseconds(f.checkpoint_wait_ms) +
                                       absl::Minutes(2)));
  absl::Status s = FromAgentsGrpc(conn->agents()->Migrate(ctx.get(), req, &resp));
  if (!s.ok()) return ReportError(s, g.json());
  vault::v1::SignedReceipt receipt;
  receipt.ParseFromString(resp.receipt());
  // The vault's hash when it sends one (OpenSSL's first use here would cost 1-2 ms).
  const std::string receipt_hash = absl::BytesToHexString(
      resp.receipt_sha256().size() == cas::kSha256Bytes ? resp.receipt_sha256()
                                                        : cas::Sha256::Hash(resp.receipt()));
  std::vector<std::string> grants;
  for (const vault::v1::Grant& gr : resp.grants()) grants.push_back(capability::GrantToString(gr));
  // Grants it held here that it does not hold there (narrowed by the destination's ceiling, or
  // gone from it).
  std::vector<std::string> lost;
  for (const std::string& b : before) {
    if (std::find(grants.begin(), grants.end(), b) == grants.end()) lost.push_back(b);
  }
  if (g.json()) {
    Json gj = Json::Array();
    for (const std::string& s2 : grants) gj.Push(s2);
    Json lj = Json::Array();
    for (const std::string& s2 : lost) lj.Push(s2);
    Json out = Json::Object();
    out.Add("agent_id", f.id)
        .Add("to_vault", resp.to_vault())
        .Add("hop", resp.hop())
        .Add("checkpointed", resp.checkpointed())
        .Add("receipt_sha256", receipt_hash)
        .Add("receipt_payload_base64", absl::Base64Escape(receipt.payload()))
        .Add("receipt_signature_base64", absl::Base64Escape(receipt.signature()))
        .Add("grants", gj);
    // Absent when what it held here could not be read (not "nothing was lost").
    if (before_known) out.Add("narrowed_away", lj);
    std::cout << out.ToString() << "\n";
  } else {
    std::cout << f.id << " now runs on " << resp.to_vault() << " (hop " << resp.hop() << ")\n"
              << "receipt sha256:" << receipt_hash << " signed by " << resp.to_vault() << "\n"
              << "state: " << (resp.checkpointed() ? "a fresh checkpoint" : "its last checkpoint")
              << "\n"
              << "grants there: " << (grants.empty() ? "none" : absl::StrJoin(grants, "; "))
              << "\n";
    if (!lost.empty()) {
      std::cout << "narrowed away by " << resp.to_vault()
                << "'s ceiling: " << absl::StrJoin(lost, "; ") << " (vaultctl --vault <"
                << resp.to_vault() << "'s socket> policy ls shows it)\n";
    }
  }
  return kExitOk;
}

std::string Micros(int64_t unix_micros) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::FromUnixMicros(unix_micros),
                          absl::UTCTimeZone());
}

int WhereCommand(const GlobalOptions& g, const std::string& id) {
  absl::StatusOr<Connection> conn = Connection::Connect(g.connect);
  if (!conn.ok()) return ReportConnectError(conn.status(), g.json());
  absl::StatusOr<vault::v1::LocateResponse> where = LocateAgent(*conn, id);
  if (!where.ok()) return ReportError(where.status(), g.json());
  if (g.json()) {
    Json trail = Json::Array();
    for (const std::string& v : where->trail()) trail.Push(v);
    Json out = Json::Object()
                   .Add("agent_id", id)
                   .Add("vault", where->vault())
                   .Add("state", AgentStateName(where->state()))
                   .Add("hop", where->hop())
                   .Add("home_vault", where->home_vault())
                   .Add("trail", trail);
    if (!where->migrating_to().empty()) out.Add("migrating_to", where->migrating_to());
    std::cout << out.ToString() << "\n";
    return kExitOk;
  }
  std::cout << id << " is " << AgentStateName(where->state()) << " on " << where->vault()
            << " (hop " << where->hop() << ")";
  if (!where->migrating_to().empty()) std::cout << ", migrating to " << where->migrating_to();
  std::cout << "\n";
  if (!where->home_vault().empty()) std::cout << "home: " << where->home_vault() << "\n";
  std::cout << "asked: " << absl::StrJoin(where->trail(), " -> ") << "\n";
  return kExitOk;
}

std::string DetailOf(const vault::v1::AuditEntry& e, absl::string_view key) {
  for (const vault::v1::AuditEntry::Detail& d : e.details()) {
    if (d.key() == key) return d.value();
  }
  return "";
}

int JourneyCommand(const GlobalOptions& g, const std::string& id) {
  absl::StatusOr<Connection> conn = Connection::Connect(g.connect);
  if (!conn.ok()) return ReportConnectError(conn.status(), g.json());
  vault::v1::JourneyRequest req;
  req.set_id(id);
  vault::v1::JourneyResponse resp;
  absl::Status s = FromAgentsGrpc(conn->agents()->Journey(conn->Context().get(), req, &resp));
  if (!s.ok()) return ReportError(s, g.json());
  // The hops: each arrival (agent.migrate.in, in the log of the vault it arrived at), with the
  // receipt hash the source recorded when it learned of the commit (agent.departed).
  absl::flat_hash_map<std::string, std::string> receipts;  // transfer id -> receipt sha256
  for (const vault::v1::AuditEntry& e : resp.entries()) {
    if (e.action() == "agent.departed")
      receipts[DetailOf(e, "transfer_id")] = DetailOf(e, "receipt");
  }
  // Messages that crossed a hop: carried in it (agent.migrate.in's "messages"), or forwarded
  // by the vault it left (message.forwarded, in that vault's log, naming the hop).
  std::map<std::pair<std::string, std::string>, int> forwarded;  // (from vault, hop) -> count
  for (const vault::v1::AuditEntry& e : resp.entries()) {
    if (e.action() == "message.forwarded") ++forwarded[{e.vault(), DetailOf(e, "hop")}];
  }
  auto forwarded_on = [&](const vault::v1::AuditEntry& arrival) {
    auto it = forwarded.find({DetailOf(arrival, "from"), DetailOf(arrival, "hop")});
    return it == forwarded.end() ? 0 : it->second;
  };
  auto carried = [](const vault::v1::AuditEntry& arrival) {
    int n = 0;
    return absl::SimpleAtoi(DetailOf(arrival, "messages"), &n) ? n : 0;
  };
  std::vector<const vault::v1::AuditEntry*> arrivals;
  for (const vault::v1::AuditEntry& e : resp.entries()) {
    if (e.action() == "agent.migrate.in" && e.decision() == vault::v1::AuditEntry::ALLOWED) {
      arrivals.push_back(&e);
    }
  }
  if (g.json()) {
    Json hops = Json::Array();
    for (const vault::v1::AuditEntry* e : arrivals) {
      auto r = receipts.find(DetailOf(*e, "transfer_id"));
      hops.Push(Json::Object()
                    .Add("hop", DetailOf(*e, "hop"))
                    .Add("from", DetailOf(*e, "from"))
                    .Add("to", e->vault())
                    .Add("time_unix_micros", e->time_unix_micros())
                    .Add("transfer_id", DetailOf(*e, "transfer_id"))
                    .Add("grants", DetailOf(*e, "grants"))
                    .Add("narrowed", DetailOf(*e, "narrowed") == "yes")
                    .Add("messages_carried", carried(*e))
                    .Add("messages_forwarded", forwarded_on(*e))
                    .Add("receipt_sha256", r == receipts.end() ? "" : r->second));
    }
    Json entries = Json::Array();
    for (const vault::v1::AuditEntry& e : resp.entries()) {
      Json details = Json::Object();
      for (const vault::v1::AuditEntry::Detail& d : e.details()) details.Add(d.key(), d.value());
      entries.Push(Json::Object()
                       .Add("vault", e.vault())
                       .Add("sequence", e.sequence())
                       .Add("time_unix_micros", e.time_unix_micros())
                       .Add("actor", e.actor())
                       .Add("action", e.action())
                       .Add("decision",
                            e.decision() == vault::v1::AuditEntry::ALLOWED ? "allowed" : "denied")
                       .Add("motivation", e.motivation())
                       .Add("details", details));
    }
    Json read = Json::Array(), missing = Json::Array();
    for (const std::string& l : resp.logs_read()) read.Push(l);
    for (const std::string& l : resp.logs_missing()) missing.Push(l);
    std::cout << Json::Object()
                     .Add("agent_id", id)
                     .Add("hops", hops)
                     .Add("entries", entries)
                     .Add("logs_read", read)
                     .Add("logs_missing", missing)
                     .ToString()
              << "\n";
    return kExitOk;
  }
  std::cout << id << ": " << arrivals.size() << " hop" << (arrivals.size() == 1 ? "" : "s")
            << "; logs read: " << absl::StrJoin(resp.logs_read(), ", ");
  if (resp.logs_missing_size() > 0) {
    std::cout << "; no mirror of: " << absl::StrJoin(resp.logs_missing(), ", ");
  }
  std::cout << "\n\n";
  if (!arrivals.empty()) {
    std::vector<std::vector<std::string>> rows = {
        {"HOP", "FROM", "TO", "ARRIVED", "RECEIPT", "MESSAGES", "GRANTS THERE"}};
    for (const vault::v1::AuditEntry* e : arrivals) {
      auto r = receipts.find(DetailOf(*e, "transfer_id"));
      std::string receipt = r == receipts.end() ? "-" : r->second.substr(0, 16);
      std::string grants = DetailOf(*e, "grants");
      if (DetailOf(*e, "narrowed") == "yes") grants += " (narrowed)";
      rows.push_back({DetailOf(*e, "hop"), TerminalSafe(DetailOf(*e, "from")),
                      TerminalSafe(e->vault()), Micros(e->time_unix_micros()), receipt,
                      absl::StrCat(carried(*e), " carried, ", forwarded_on(*e), " forwarded"),
                      TerminalSafe(grants.empty() ? "none" : grants)});
    }
    PrintTable(rows);
    std::cout << "\n";
  }
  std::vector<std::vector<std::string>> rows = {{"TIME", "VAULT", "ACTION", "DECISION", "WHY"}};
  for (const vault::v1::AuditEntry& e : resp.entries()) {
    rows.push_back({Micros(e.time_unix_micros()), TerminalSafe(e.vault()), TerminalSafe(e.action()),
                    e.decision() == vault::v1::AuditEntry::ALLOWED ? "allowed" : "denied",
                    TerminalSafe(e.motivation())});
  }
  PrintTable(rows);
  return kExitOk;
}

}  // namespace

absl::StatusOr<vault::v1::LocateResponse> LocateAgent(const Connection& conn,
                                                      const std::string& id) {
  vault::v1::LocateRequest req;
  req.set_id(id);
  vault::v1::LocateResponse resp;
  VAULT_RETURN_IF_ERROR(FromAgentsGrpc(conn.agents()->Locate(conn.Context().get(), req, &resp)));
  return resp;
}

void AddAgentLocationCommands(CLI::App* agent, GlobalOptions& g, Command& command) {
  static std::string id;
  auto* where = agent->add_subcommand(
      "where",
      "Where an agent is now, asked of the federation: this vault's records, the home vault's "
      "location table, then each vault it departed to (prints the vault, its state and hop)");
  where->add_option("ID", id, "The agent id")->required();
  where->callback([&] { command = [&g] { return WhereCommand(g, id); }; });
  auto* journey = agent->add_subcommand(
      "journey",
      "Every hop of an agent (from, to, time, receipt, grants in force there) and every audit "
      "entry about it, from this vault's log and its mirrors of the members' logs");
  journey->add_option("ID", id, "The agent id")->required();
  journey->callback([&] { command = [&g] { return JourneyCommand(g, id); }; });
}

void AddMigrateCommands(CLI::App& app, GlobalOptions& g, Command& command) {
  static MigrateFlags f;
  auto* migrate = app.add_subcommand(
      "migrate",
      "Move an agent to another federation member: its vault asks it to checkpoint, waits "
      "--checkpoint-wait (or not at all: --no-checkpoint), then hands it over (its migrate grant "
      "must name the member); prints "
      "the destination's signed receipt (admin socket)");
  migrate->add_option("AGENT", f.id, "The agent id")->required();
  migrate->add_option("--to", f.to, "The destination member's name")->required();
  CLI::Option* wait =
      migrate
          ->add_option("--checkpoint-wait", f.checkpoint_wait_ms,
                       "Milliseconds the agent has to checkpoint (then its last one goes)")
          ->capture_default_str();
  migrate
      ->add_flag("--no-checkpoint", f.no_checkpoint,
                 "Do not ask the agent to checkpoint: its last checkpoint goes at once")
      ->excludes(wait);
  migrate->callback([&] { command = [&g] { return MigrateCommand(g, f); }; });
}

}  // namespace vault::vaultctl
