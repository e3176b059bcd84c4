// vaultctl migrate AGENT --to VAULT: moves an agent to another member (design §7) through its
// vault's admin socket. The vault asks the agent to checkpoint, waits a bounded time, and hands
// it over; what is printed is the receipt the destination signed.
#include <iostream>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "capability/grant.h"
#include "cas/digest.h"
#include "vault/v1/agent.grpc.pb.h"
#include "vault/v1/migration.pb.h"
#include "vaultctl/client.h"
#include "vaultctl/commands.h"
#include "vaultctl/output.h"

namespace vault::vaultctl {
namespace {

struct MigrateFlags {
  std::string id;
  std::string to;
  uint32_t checkpoint_wait_ms = 2000;
};

int MigrateCommand(const GlobalOptions& g, const MigrateFlags& f) {
  absl::StatusOr<Connection> conn = Connection::Connect(g.connect);
  if (!conn.ok()) return ReportConnectError(conn.status(), g.json());
  vault::v1::MigrateAgentRequest req;
  req.set_id(f.id);
  req.set_to_vault(f.to);
  req.set_checkpoint_wait_ms(f.checkpoint_wait_ms);
  vault::v1::MigrateAgentResponse resp;
  std::unique_ptr<grpc::ClientContext> ctx = conn->Context();
  // The checkpoint wait, the transfer and, when an answer is lost, a few Status calls.
  ctx->set_deadline(absl::ToChronoTime(absl::Now() + absl::Milliseconds(f.checkpoint_wait_ms) +
                                       absl::Minutes(2)));
  absl::Status s = FromAgentsGrpc(conn->agents()->Migrate(ctx.get(), req, &resp));
  if (!s.ok()) return ReportError(s, g.json());
  vault::v1::SignedReceipt receipt;
  receipt.ParseFromString(resp.receipt());
  const std::string receipt_hash = absl::BytesToHexString(cas::Sha256::Hash(resp.receipt()));
  std::vector<std::string> grants;
  for (const vault::v1::Grant& gr : resp.grants()) grants.push_back(capability::GrantToString(gr));
  if (g.json()) {
    Json gj = Json::Array();
    for (const std::string& s2 : grants) gj.Push(s2);
    std::cout << Json::Object()
                     .Add("agent_id", f.id)
                     .Add("to_vault", resp.to_vault())
                     .Add("hop", resp.hop())
                     .Add("checkpointed", resp.checkpointed())
                     .Add("receipt_sha256", receipt_hash)
                     .Add("receipt_payload_base64", absl::Base64Escape(receipt.payload()))
                     .Add("receipt_signature_base64", absl::Base64Escape(receipt.signature()))
                     .Add("grants", gj)
                     .ToString()
              << "\n";
  } else {
    std::cout << f.id << " now runs on " << resp.to_vault() << " (hop " << resp.hop() << ")\n"
              << "receipt sha256:" << receipt_hash << " signed by " << resp.to_vault() << "\n"
              << "state: " << (resp.checkpointed() ? "a fresh checkpoint" : "its last checkpoint")
              << "\n"
              << "grants there: " << (grants.empty() ? "none" : absl::StrJoin(grants, "; "))
              << "\n";
  }
  return kExitOk;
}

}  // namespace

void AddMigrateCommands(CLI::App& app, GlobalOptions& g, Command& command) {
  static MigrateFlags f;
  auto* migrate = app.add_subcommand(
      "migrate",
      "Move an agent to another federation member: its vault asks it to checkpoint, waits "
      "--checkpoint-wait, then hands it over (its migrate grant must name the member); prints "
      "the destination's signed receipt (admin socket)");
  migrate->add_option("AGENT", f.id, "The agent id")->required();
  migrate->add_option("--to", f.to, "The destination member's name")->required();
  migrate
      ->add_option("--checkpoint-wait", f.checkpoint_wait_ms,
                   "Milliseconds the agent has to checkpoint (then its last one goes)")
      ->capture_default_str();
  migrate->callback([&] { command = [&g] { return MigrateCommand(g, f); }; });
}

}  // namespace vault::vaultctl
