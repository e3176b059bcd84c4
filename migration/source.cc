// Migration, the source's side of a hop (design §7; the destination's is destination.cc): the
// source freezes the agent, appends the MIGRATE link and persists "migrating" before anything
// can commit; then the Offer, the objects and the Commit. A Commit whose answer is lost is
// settled with Status, which fences an uncommitted transfer off for good, so the agent either
// departs with the destination's receipt or resumes here, never both.
#include <algorithm>
#include <future>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "audit/log.h"
#include "capability/chain.h"
#include "capability/grant.h"
#include "cas/digest.h"
#include "cas/digest_proto.h"
#include "common/log_fields.h"
#include "common/random.h"
#include "common/status_macros.h"
#include "google/protobuf/util/json_util.h"
#include "migration/internal/image_blobs.h"
#include "migration/internal/transfer.h"
#include "migration/migration.h"
#include "migration/receipt.h"
#include "spdlog/spdlog.h"
#include "vault/v1/image.pb.h"

namespace vault::migration {
namespace {

using vault::v1::AgentRecord;
using vault::v1::AgentState;

// How long a Migrate call keeps asking Status itself before it leaves the outcome to the
// background resolver.
constexpr absl::Duration kInlineResolve = absl::Seconds(3);

// A definite "no" from the destination's Offer: there is nothing to settle.
bool IsAmbiguous(const absl::Status& s) {
  return absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s) || absl::IsCancelled(s) ||
         absl::IsUnknown(s) || absl::IsInternal(s) || absl::IsAborted(s);
}

}  // namespace

absl::StatusOr<capability::PublicKey> Migration::CheckDestination(
    const std::string& to_vault) const {
  if (deps_.transport == nullptr) {
    return absl::FailedPreconditionError(
        "this vault cannot migrate agents: it has no federation TLS material (see "
        "docs/migration.md)");
  }
  if (to_vault == options_.vault_name) {
    return absl::InvalidArgumentError("the agent is already on " + to_vault);
  }
  std::optional<capability::PublicKey> to_key = MemberKey(to_vault);
  if (!to_key.has_value()) {
    return absl::NotFoundError(absl::StrCat("no federation member named \"", to_vault, "\""));
  }
  return *std::move(to_key);
}

absl::Status Migration::RefusedAtSource(const std::string& id, const std::string& to,
                                        const std::string& requested_by, absl::Status why) {
  deps_.port->Audit(
      audit::MakeEntry(requested_by == "agent" ? id : "local-admin", "agent.migrate.refused", id,
                       vault::v1::AuditEntry::DENIED, std::string(why.message()),
                       {{"to", to}, {"phase", "source"}, {"requested_by", requested_by}}),
      /*durable=*/true);
  return why;
}

absl::StatusOr<vault::v1::MigrateAgentResponse> Migration::MigrateOut(
    const agent::AgentRef& agent, const std::string& to_vault,
    const std::optional<std::string>& state, const std::string& requested_by,
    const std::optional<cas::Digest>& named_state) {
  const AgentRecord before = deps_.port->Record(agent);
  const std::string& id = before.id();
  absl::StatusOr<capability::PublicKey> to_key_or = CheckDestination(to_vault);
  if (!to_key_or.ok()) return RefusedAtSource(id, to_vault, requested_by, to_key_or.status());
  const capability::PublicKey to_key = *std::move(to_key_or);
  HopTimes times;
  times.start = absl::Now();
  // Store the handed-over state first: nothing below may fail after the freeze for want of it.
  // (A state named by digest is in the CAS already: the migrate host call checked it.)
  std::optional<cas::Digest> state_digest = named_state;
  if (!state_digest.has_value() && state.has_value()) {
    cas::Digest d = cas::Digest::Of(*state);
    VAULT_RETURN_IF_ERROR(cas::PutObject(*deps_.cas, d, *state).status());
    state_digest = d;
  }
  // Frozen from here on: no effect of the agent can happen during the handoff. Calls not yet
  // handled are refused, the process stops, and the calls already past the gate finish before
  // the state is read (the agent's own migrate call is not among them: it was deferred).
  bool refused = false;
  absl::StatusOr<AgentRecord> frozen = deps_.port->Freeze(agent, to_vault, &refused);
  if (!frozen.ok()) {
    if (refused) return RefusedAtSource(id, to_vault, requested_by, frozen.status());
    return frozen.status();
  }
  times.frozen = absl::Now();
  const AgentRecord& r = *frozen;
  const AgentState resume_state = r.state();
  auto unfreeze = [&](absl::Status why) {
    deps_.port->Unfreeze(agent);
    return why;
  };
  absl::StatusOr<vault::v1::LinkPayload> last_or =
      capability::ParseLinkPayload(r.chain().links().rbegin()->payload());
  if (!last_or.ok()) return unfreeze(last_or.status());
  const vault::v1::LinkPayload& last = *last_or;
  // An agent that replays goes with its effect log as it stands now, frozen (ending with its own
  // migrate when that is what moves it), whatever else it named.
  absl::StatusOr<std::optional<cas::Digest>> log = deps_.port->ReplayState(agent);
  if (!log.ok()) return unfreeze(log.status());
  if (log->has_value()) state_digest = **log;
  if (!state_digest.has_value()) {
    if (r.has_state()) {
      absl::StatusOr<cas::Digest> d = cas::FromProto(r.state_digest());
      if (!d.ok()) return unfreeze(d.status());
      state_digest = *d;
    } else {
      state_digest = cas::Digest::Of("");
      if (absl::Status put = deps_.cas->Put(*state_digest, "").status(); !put.ok()) {
        return unfreeze(put);
      }
    }
  }
  // Its messages go with it: its mailbox, the sequence numbers it has seen, its outbox.
  // (Messages it was handed are in a state it made itself: its own migrate's, its effect log.)
  const bool covers_handed = requested_by == "agent" || log->has_value();
  absl::StatusOr<std::optional<cas::Digest>> mailbox =
      deps_.port->StoreMailbox(agent, covers_handed);
  if (!mailbox.ok()) return unfreeze(mailbox.status());
  vault::v1::LinkPayload hop;
  hop.set_version(capability::kLinkVersion);
  hop.set_kind(vault::v1::LinkPayload::MIGRATE);
  hop.set_parent(capability::LinkHash(*r.chain().links().rbegin()));
  hop.set_issuer(deps_.vault_key->public_key().raw());
  hop.set_audience(to_key.raw());
  hop.set_agent_id(id);
  *hop.mutable_code() = last.code();
  *hop.mutable_grants() = r.grants();
  *hop.mutable_constraints() = r.constraints();
  const int64_t now = absl::ToUnixMillis(absl::Now());
  hop.set_not_before_unix_ms(std::max(now, last.not_before_unix_ms()));
  hop.set_not_after_unix_ms(last.not_after_unix_ms());
  hop.set_hop(r.hop() + 1);
  absl::StatusOr<std::string> transfer_id = common::RandomBytes(16);
  if (!transfer_id.ok()) return unfreeze(transfer_id.status());
  hop.set_transfer_id(*std::move(transfer_id));
  *hop.mutable_state() = cas::ToProto(*state_digest);
  absl::StatusOr<vault::v1::SignedLink> link = capability::SignLink(hop, *deps_.vault_key);
  if (!link.ok()) return unfreeze(link.status());
  vault::v1::OutboundMigration m;
  m.set_to_vault(to_vault);
  m.set_transfer_id(hop.transfer_id());
  *m.mutable_chain() = r.chain();
  *m.mutable_chain()->add_links() = *std::move(link);
  *m.mutable_state() = hop.state();
  m.set_started_unix_ms(now);
  m.set_requested_by(requested_by);
  m.set_resume_state(resume_state);
  if (mailbox->has_value()) *m.mutable_mailbox() = cas::ToProto(**mailbox);
  AgentRecord migrating = r;
  *migrating.mutable_migration() = m;
  // The Offer and the objects leave while MIGRATING is being persisted: neither can make the
  // destination commit anything (only the Commit can, and it leaves once MIGRATING is
  // durable), so a crash meanwhile leaves nothing to settle. (async|deferred: without a
  // thread to spare, RunTransfer sends them itself.)
  std::future<absl::StatusOr<Sent>> sent_ahead =
      std::async(std::launch::async | std::launch::deferred,
                 [this, to_vault, package = PackageOf(migrating), t = &times] {
                   return OfferAndSend(to_vault, package, t);
                 });
  // Persisted before the Commit: whatever happens next, a restart finds the hop to settle.
  absl::Status persisted =
      deps_.port->PersistMigrating(agent, std::move(m),
                                   {{"to", to_vault},
                                    {"transfer_id", TransferText(hop.transfer_id())},
                                    {"hop", absl::StrCat(hop.hop())},
                                    {"requested_by", requested_by}},
                                   covers_handed);
  if (!persisted.ok()) return unfreeze(persisted);  // (sent_ahead's destructor waits for it)
  times.persisted = absl::Now();
  absl::StatusOr<vault::v1::MigrateAgentResponse> out =
      RunTransfer(agent, /*background=*/false, &sent_ahead, &times);
  if (out.ok()) {
    auto ms = [](absl::Duration d) { return absl::ToDoubleMilliseconds(d); };
    const absl::Time done = absl::Now();
    common::LogAgent(spdlog::level::info, id,
                     "agent {}: handed to {} in {:.1f} ms (freeze {:.1f}, persist {:.1f} beside "
                     "offer {:.1f} and {} objects {:.1f}, then {:.1f} more; commit {:.1f}, "
                     "departed {:.1f})",
                     id, to_vault, ms(done - times.start), ms(times.frozen - times.start),
                     ms(times.persisted - times.frozen), ms(times.offer), times.objects_sent,
                     ms(times.objects), ms(std::max(times.sent, times.persisted) - times.persisted),
                     ms(times.committed - std::max(times.sent, times.persisted)),
                     ms(done - times.committed));
  }
  return out;
}

absl::Status Migration::StartForAgent(const agent::AgentRef& agent, uint64_t call_id,
                                      std::string to, std::string state,
                                      std::optional<cas::Digest> state_digest) {
  const bool queued = hops_->Schedule(
      [this, agent, call_id, to = std::move(to), state = std::move(state), state_digest] {
        absl::StatusOr<vault::v1::MigrateAgentResponse> moved =
            state_digest.has_value() ? MigrateOut(agent, to, std::nullopt, "agent", state_digest)
                                     : MigrateOut(agent, to, state, "agent");
        // Refused before the freeze (or resumed here, already answered): the call fails now.
        if (!moved.ok()) deps_.port->FailMigrateCall(agent, call_id, moved.status());
      });
  if (!queued) return absl::UnavailableError("the vault is stopping");
  return absl::OkStatus();
}

absl::StatusOr<vault::v1::MigrateAgentResponse> Migration::Migrate(
    const vault::v1::MigrateAgentRequest& request) {
  agent::AgentRef agent = deps_.port->Find(request.id());
  if (agent == nullptr) {
    return absl::NotFoundError(absl::StrCat("no running agent ", request.id(), " on this vault"));
  }
  // A hop that cannot happen is refused before the agent is disturbed (no checkpoint request,
  // no wait); MigrateOut checks again after the wait.
  if (absl::Status dest = CheckDestination(request.to_vault()).status(); !dest.ok()) {
    return RefusedAtSource(request.id(), request.to_vault(), "operator", dest);
  }
  if (absl::Status may = deps_.port->CheckMayGo(agent, request.to_vault()); !may.ok()) {
    return RefusedAtSource(request.id(), request.to_vault(), "operator", may);
  }
  // Ask for a checkpoint (a "vault.checkpoint" message), wait a bounded time, and go with the
  // last checkpoint either way.
  bool checkpointed = false;
  if (!request.no_checkpoint_request()) {
    checkpointed = deps_.port->AskCheckpoint(
        agent, absl::Milliseconds(request.checkpoint_wait_ms() != 0 ? request.checkpoint_wait_ms()
                                                                    : 2000));
  }
  VAULT_ASSIGN_OR_RETURN(vault::v1::MigrateAgentResponse out,
                         MigrateOut(agent, request.to_vault(), std::nullopt, "operator"));
  out.set_checkpointed(checkpointed);
  return out;
}

vault::v1::MigrationPackage Migration::PackageOf(const AgentRecord& r) const {
  vault::v1::MigrationPackage p;
  // A container agent's image travels with it (internal/image_blobs.h). An image the source
  // cannot read leaves the list short, and the destination's Commit refuses the hop naming
  // the blob it lacks: the agent stays here.
  absl::StatusOr<std::vector<vault::v1::Digest>> blobs =
      internal::ImageBlobsOf(*deps_.cas, r.spec());
  if (blobs.ok()) {
    for (vault::v1::Digest& d : *blobs) *p.add_carried() = std::move(d);
  }
  p.set_agent_id(r.id());
  *p.mutable_spec() = r.spec();
  *p.mutable_chain() = r.migration().chain();
  *p.mutable_state() = r.migration().state();
  p.set_source_vault(options_.vault_name);
  p.set_home_vault(r.home_vault().empty() ? options_.vault_name : r.home_vault());
  *p.mutable_counters() = r.counters();
  p.set_principal(r.principal());
  p.set_paused(r.migration().resume_state() == vault::v1::PAUSED);
  if (r.migration().has_mailbox()) {
    *p.mutable_mailbox() = r.migration().mailbox();
    *p.add_carried() = r.migration().mailbox();
  }
  return p;
}

absl::StatusOr<Migration::Sent> Migration::OfferAndSend(const std::string& to_vault,
                                                        const vault::v1::MigrationPackage& package,
                                                        HopTimes* times) {
  const absl::Time start = absl::Now();
  // A small state rides in the Commit: one call and one durable write fewer at the destination.
  // It is read (and checked) while the Offer is answered; the destination usually lacks it.
  std::future<absl::StatusOr<std::string>> state_read;
  // (With the package, the Commit must fit in a member's smallest message limit, 2 MiB.)
  if (package.state().size() <= kStateInCommit &&
      package.ByteSizeLong() + package.state().size() + (64 << 10) <= (2u << 20)) {
    VAULT_ASSIGN_OR_RETURN(cas::Digest digest, cas::FromProto(package.state()));
    // Unverified: the destination hashes every byte (a mismatch it reports is checked against
    // this store's copy, RunTransfer).
    state_read = std::async(std::launch::async | std::launch::deferred, [this, digest] {
      return deps_.cas->ReadAll(digest, cas::ReadCheck::kUnverified);
    });
  }
  VAULT_ASSIGN_OR_RETURN(std::vector<vault::v1::Digest> missing,
                         deps_.transport->Offer(to_vault, package));
  const absl::Time offered = absl::Now();
  Sent sent;
  auto state = std::find_if(missing.begin(), missing.end(), [&](const vault::v1::Digest& d) {
    return d.sha256() == package.state().sha256() && d.size() == package.state().size();
  });
  if (state != missing.end() && state_read.valid()) {
    VAULT_ASSIGN_OR_RETURN(sent.state, state_read.get());
    missing.erase(state);
  }
  if (!missing.empty()) VAULT_RETURN_IF_ERROR(deps_.transport->SendObjects(to_vault, missing));
  if (times != nullptr) {
    times->offer = offered - start;
    times->objects = absl::Now() - offered;
    times->objects_sent = missing.size() + (sent.state.has_value() ? 1 : 0);
  }
  return sent;
}

absl::StatusOr<vault::v1::MigrateAgentResponse> Migration::RunTransfer(
    const agent::AgentRef& agent, bool background, std::future<absl::StatusOr<Sent>>* sent_ahead,
    HopTimes* times) {
  const AgentRecord r = deps_.port->Record(agent);
  if (r.state() != vault::v1::MIGRATING) {
    return absl::FailedPreconditionError("the agent is not migrating");
  }
  const std::string& id = r.id();
  const vault::v1::MigrationPackage package = PackageOf(r);
  const std::string to_vault = r.migration().to_vault();
  const std::string transfer_id = r.migration().transfer_id();
  // A Commit the destination refused outright (not a lost answer): its reason is the hop's.
  absl::Status commit_refused;
  if (!background) {
    // Offer and objects: no Commit has been sent yet, so any failure leaves nothing to settle.
    absl::StatusOr<Sent> sent = sent_ahead != nullptr && sent_ahead->valid()
                                    ? sent_ahead->get()
                                    : OfferAndSend(to_vault, package);
    if (times != nullptr) times->sent = absl::Now();
    if (!sent.ok()) {
      std::string why =
          absl::StrCat("migration to ", to_vault, " refused: ", sent.status().message());
      VAULT_RETURN_IF_ERROR(deps_.port->ResumeAfterFailedHop(agent, why));
      return absl::Status(
          IsAmbiguous(sent.status()) ? absl::StatusCode::kUnavailable : sent.status().code(), why);
    }
    absl::StatusOr<vault::v1::SignedReceipt> receipt = deps_.transport->Commit(
        to_vault, package, sent->state.has_value() ? &*sent->state : nullptr);
    if (times != nullptr) times->committed = absl::Now();
    if (receipt.ok()) {
      absl::StatusOr<vault::v1::MigrateAgentResponse> gone = Departed(agent, *receipt);
      if (!absl::IsDataLoss(gone.status())) return gone;
      // Committed, with a receipt that does not verify: never resume; ask again (below).
    } else if (!IsAmbiguous(receipt.status())) {
      commit_refused = receipt.status();
      // The state was read without being checked (OfferAndSend): a mismatch the destination
      // found may be damage here, which is then what the hop reports.
      if (absl::IsInvalidArgument(commit_refused) && sent->state.has_value()) {
        absl::StatusOr<cas::Digest> digest = cas::FromProto(package.state());
        absl::Status mine = digest.ok() ? deps_.cas->ReadAll(*digest).status() : digest.status();
        if (absl::IsDataLoss(mine)) {
          commit_refused = absl::DataLossError(
              absl::StrCat("the agent's state is damaged on this vault: ", mine.message()));
        }
      }
    }
    common::LogWith(spdlog::level::warn, {.agent = id, .transfer = TransferText(transfer_id)},
                    "agent {}: Commit to {} failed ({}); asking for the transfer's outcome", id,
                    to_vault, receipt.status().ToString());
  }
  // The outcome is unknown: ask until it is known (Status fences an uncommitted transfer off).
  absl::Duration backoff = absl::Milliseconds(100);
  const absl::Time give_up_inline = absl::Now() + kInlineResolve;
  for (;;) {
    absl::StatusOr<vault::v1::TransferStatusResponse> st =
        deps_.transport->Status(to_vault, transfer_id, /*abort_if_unknown=*/true);
    if (st.ok()) {
      if (st->outcome() == vault::v1::TransferStatusResponse::COMMITTED) {
        absl::StatusOr<vault::v1::MigrateAgentResponse> gone = Departed(agent, st->receipt());
        if (!absl::IsDataLoss(gone.status())) return gone;
        // A committed transfer whose receipt does not verify (a member misbehaving): the agent
        // stays frozen; keep asking (with backoff) for one that does.
        st = gone.status();
      }
    }
    if (st.ok()) {
      std::string why = absl::StrCat("migration to ", to_vault, " did not commit (",
                                     TransferStatusOutcomeName(st->outcome()), ")");
      if (!commit_refused.ok()) {
        why = absl::StrCat("migration to ", to_vault, " refused: ", commit_refused.message());
      }
      VAULT_RETURN_IF_ERROR(deps_.port->ResumeAfterFailedHop(agent, why));
      return absl::Status(commit_refused.ok() ? absl::StatusCode::kAborted : commit_refused.code(),
                          why);
    }
    if (stopping() || deps_.port->Stopping()) {
      return absl::UnavailableError("the vault is stopping; settled at restart");
    }
    if (!background && absl::Now() > give_up_inline) {
      ScheduleResolve(agent);
      return absl::UnavailableError(absl::StrCat("the outcome of the migration to ", to_vault,
                                                 " is not known yet (", st.status().message(),
                                                 "); the agent stays frozen and the vault keeps "
                                                 "asking ",
                                                 to_vault, " until it knows"));
    }
    if (!Sleep(backoff)) return absl::UnavailableError("the vault is stopping; settled at restart");
    backoff = std::min(backoff * 2, absl::Seconds(5));
  }
}

void Migration::Settle(const agent::AgentRef& agent) { ScheduleResolve(agent); }

void Migration::ScheduleResolve(const agent::AgentRef& agent) {
  absl::MutexLock lock(&mu_);
  if (stopping_) return;  // settled at the next start
  resolvers_.emplace_back([this, agent] {
    absl::StatusOr<vault::v1::MigrateAgentResponse> r = RunTransfer(agent, /*background=*/true);
    if (!r.ok()) {
      const std::string id = deps_.port->Record(agent).id();
      common::LogAgent(spdlog::level::info, id, "agent {}: migration settled: {}", id,
                       r.status().ToString());
    }
  });
}

absl::StatusOr<vault::v1::MigrateAgentResponse> Migration::Departed(
    const agent::AgentRef& agent, const vault::v1::SignedReceipt& receipt) {
  const AgentRecord r = deps_.port->Record(agent);
  const vault::v1::OutboundMigration& m = r.migration();
  std::optional<capability::PublicKey> key = MemberKey(m.to_vault());
  if (!key.has_value()) return absl::InternalError("the destination's key is gone");
  absl::StatusOr<vault::v1::ReceiptPayload> p = OpenReceipt(receipt, *key);
  if (!p.ok() || p->transfer_id() != m.transfer_id() || p->agent_id() != r.id()) {
    // A member that commits and answers with a bad receipt: keep asking, never resume.
    absl::Status bad = absl::DataLossError(absl::StrCat(
        "the receipt from ", m.to_vault(),
        " is invalid: ", p.ok() ? "it names another transfer" : std::string(p.status().message())));
    vault::v1::AuditEntry e =
        audit::MakeEntry(deps_.vault_key->public_key().ToText(), "agent.migrate.bad_receipt",
                         r.id(), vault::v1::AuditEntry::DENIED, std::string(bad.message()),
                         {{"to", m.to_vault()}, {"transfer_id", TransferText(m.transfer_id())}});
    e.set_priority(vault::v1::AuditEntry::HIGH);
    deps_.port->Audit(std::move(e), /*durable=*/true);
    return bad;
  }
  vault::v1::MigrateAgentResponse out;
  out.set_to_vault(m.to_vault());
  out.set_hop(p->hop());
  out.set_receipt(receipt.SerializeAsString());
  out.set_receipt_sha256(cas::Sha256::Hash(out.receipt()));
  *out.mutable_grants() = p->grants();
  *out.mutable_state() = p->state();
  VAULT_RETURN_IF_ERROR(
      deps_.port->MarkDeparted(agent, receipt, p->hop(),
                               {{"to", m.to_vault()},
                                {"transfer_id", TransferText(m.transfer_id())},
                                {"hop", absl::StrCat(p->hop())},
                                {"receipt", absl::BytesToHexString(out.receipt_sha256())}}));
  return out;
}

}  // namespace vault::migration
