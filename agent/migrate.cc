// The agent runtime's side of migration (design §7), the source's half (the destination's is
// migrate_in.cc): the source freezes the agent, appends the MIGRATE link and persists
// "migrating" before anything leaves; the destination verifies the whole chain again at Commit
// and writes the agent record, the transfer record and the audit entry in one durable write. A
// Commit whose answer is lost is settled with Status, which fences an uncommitted transfer off
// for good, so an agent never runs in two vaults and is never lost. The wire (gRPC over mutual
// TLS) is migration/'s.
#include <algorithm>
#include <future>
#include <string>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "agent/internal/runtime_impl.h"
#include "agent/internal/transfer.h"
#include "capability/chain.h"
#include "capability/grant.h"
#include "capability/signing_domains.h"
#include "cas/digest.h"
#include "common/log_fields.h"
#include "common/proto_util.h"
#include "common/random.h"
#include "common/status_macros.h"
#include "spdlog/spdlog.h"

namespace vault::agent {
namespace {

using vault::v1::AgentRecord;
using vault::v1::AgentState;

using capability::kReceiptDomain;
// How long a Migrate call keeps asking Status itself before it leaves the outcome to the
// background resolver.
constexpr absl::Duration kInlineResolve = absl::Seconds(3);

// A definite "no" from the destination's Offer: there is nothing to settle.
bool IsAmbiguous(const absl::Status& s) {
  return absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s) || absl::IsCancelled(s) ||
         absl::IsUnknown(s) || absl::IsInternal(s) || absl::IsAborted(s);
}

}  // namespace

std::vector<storage::ColumnFamilySpec> MigrationColumnFamilies() {
  return {storage::ColumnFamilySpec{kTransfers}, LocationColumnFamily()};
}

absl::StatusOr<vault::v1::SignedReceipt> SignReceipt(const vault::v1::ReceiptPayload& payload,
                                                     const capability::PrivateKey& key) {
  vault::v1::SignedReceipt r;
  r.set_payload(common::SerializeDeterministic(payload));
  VAULT_ASSIGN_OR_RETURN(*r.mutable_signature(),
                         key.Sign(absl::StrCat(kReceiptDomain, r.payload())));
  return r;
}

absl::StatusOr<vault::v1::ReceiptPayload> OpenReceipt(const vault::v1::SignedReceipt& receipt,
                                                      const capability::PublicKey& signer) {
  VAULT_RETURN_IF_ERROR(
      signer.Verify(absl::StrCat(kReceiptDomain, receipt.payload()), receipt.signature()));
  vault::v1::ReceiptPayload p;
  if (!p.ParseFromString(receipt.payload()) || p.version() != 1) {
    return absl::InvalidArgumentError("the receipt does not parse (version 1)");
  }
  return p;
}

// ---------------------------------------------------------------------------------------------
// Source.

std::optional<capability::PublicKey> AgentRuntime::Impl::MemberKey(absl::string_view name) const {
  for (const vault::v1::Member& m : options_.members) {
    if (m.name() == name) {
      absl::StatusOr<capability::PublicKey> k = capability::PublicKey::FromText(m.public_key());
      if (k.ok()) return *k;
    }
  }
  return std::nullopt;
}

namespace {

// The destination's checks of design §7, step 1: this vault can reach members, and `to_vault`
// is one of them, not this vault. Returns its key.
absl::StatusOr<capability::PublicKey> CheckDestination(const AgentRuntime::Impl& impl,
                                                       const std::string& to_vault) {
  if (impl.transport_ == nullptr) {
    return absl::FailedPreconditionError(
        "this vault cannot migrate agents: it has no federation TLS material (see "
        "docs/migration.md)");
  }
  if (to_vault == impl.options_.vault_name) {
    return absl::InvalidArgumentError("the agent is already on " + to_vault);
  }
  std::optional<capability::PublicKey> to_key = impl.MemberKey(to_vault);
  if (!to_key.has_value()) {
    return absl::NotFoundError(absl::StrCat("no federation member named \"", to_vault, "\""));
  }
  return *std::move(to_key);
}

// The agent's checks of design §7, step 1 (changing nothing): it runs (or is paused), has a chain
// of its own, a migrate grant naming `to_vault`, and a hop left under max-migrations.
absl::Status CheckAgentMayGo(const LiveAgent& live, const std::string& to_vault)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(live.mu) {
  const AgentRecord& r = live.record;
  if (r.state() != vault::v1::RUNNING && r.state() != vault::v1::PAUSED) {
    return absl::FailedPreconditionError(
        absl::StrCat("agent ", live.id, " is ", StateName(r.state()), ", not running"));
  }
  if (r.chain().links_size() == 0) {
    return absl::FailedPreconditionError(
        "an agent spawned by another agent has no chain of its own and cannot migrate");
  }
  // Recorded as running but its process not (yet) started: after a vault restart or a failed
  // hop it is being started again. Not a denial: its authority is not loaded yet.
  if (!live.running || live.authority == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("agent ", live.id, " is being started on this vault; try again"));
  }
  vault::v1::Grant go;
  go.set_kind(vault::v1::Grant::MIGRATE);
  go.add_vaults(to_vault);
  if (live.authority == nullptr || !live.authority->Allows(go)) {
    return absl::PermissionDeniedError(
        absl::StrCat("denied: agent ", live.id, " has no migrate grant naming ", to_vault));
  }
  if (static_cast<size_t>(r.chain().links_size()) + 1 > kMaxAgentChainLinks) {
    return absl::FailedPreconditionError(absl::StrCat(
        "agent ", live.id, " has made ", r.hop(), " hops: its chain (a link per hop) would exceed ",
        kMaxAgentChainLinks, " links"));
  }
  if (r.constraints().has_max_migrations() && r.hop() + 1 > r.constraints().max_migrations()) {
    return absl::PermissionDeniedError(
        absl::StrCat("denied: agent ", live.id, " has made ", r.hop(), " of its ",
                     r.constraints().max_migrations(), " migrations (max-migrations)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status AgentRuntime::Impl::RefusedAtSource(const std::string& id, const std::string& to,
                                                 const std::string& requested_by,
                                                 absl::Status why) {
  Audit(audit::MakeEntry(requested_by == "agent" ? id : "local-admin", "agent.migrate.refused", id,
                         vault::v1::AuditEntry::DENIED, std::string(why.message()),
                         {{"to", to}, {"phase", "source"}, {"requested_by", requested_by}}),
        /*durable=*/true);
  return why;
}

absl::StatusOr<vault::v1::MigrateAgentResponse> AgentRuntime::Impl::MigrateOut(
    const std::shared_ptr<LiveAgent>& live, const std::string& to_vault,
    const std::optional<std::string>& state, const std::string& requested_by,
    const std::optional<cas::Digest>& named_state) {
  absl::StatusOr<capability::PublicKey> to_key_or = CheckDestination(*this, to_vault);
  if (!to_key_or.ok()) return RefusedAtSource(live->id, to_vault, requested_by, to_key_or.status());
  const capability::PublicKey to_key = *std::move(to_key_or);
  HopTimes times;
  times.start = absl::Now();
  // Store the handed-over state first: nothing below may fail after the freeze for want of it.
  // (A state named by digest is in the CAS already: the migrate host call checked it.)
  std::optional<cas::Digest> state_digest = named_state;
  if (!state_digest.has_value() && state.has_value()) {
    cas::Digest d = cas::Digest::Of(*state);
    VAULT_RETURN_IF_ERROR(PutObject(*deps_.cas, d, *state).status());
    state_digest = d;
  }
  // Frozen from here on: no effect of the agent can happen during the handoff. Calls not yet
  // handled are refused (the gate), the process stops (the freezer), and the calls already past
  // the gate finish before the state is read (the drain; the agent's own migrate call is one).
  AgentState resume_state;
  {
    absl::MutexLock lock(&live->mu);
    // The checks of design §7, step 1, before anything changes.
    if (absl::Status may = CheckAgentMayGo(*live, to_vault); !may.ok()) {
      return RefusedAtSource(live->id, to_vault, requested_by, may);
    }
    resume_state = live->record.state();
    live->migrating_out = true;
    if (live->handle != nullptr && resume_state == vault::v1::RUNNING) {
      if (absl::Status paused = live->handle->Pause(); !paused.ok()) {
        live->migrating_out = false;
        return paused;
      }
    }
  }
  // (The agent's own migrate call is not among them: it was deferred before this ran.)
  constexpr uint32_t own_calls = 0;
  const absl::Time drain_deadline = absl::Now() + absl::Seconds(10);
  while (live->in_flight.load() > own_calls && absl::Now() < drain_deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  // The Offer and the objects (started below, once the hop's record is built).
  std::future<absl::StatusOr<Sent>> sent_ahead;
  {
    absl::MutexLock lock(&live->mu);
    times.frozen = absl::Now();
    AgentRecord& r = live->record;
    auto unfreeze = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(live->mu) {
      live->migrating_out = false;
      if (resume_state == vault::v1::RUNNING && live->handle != nullptr) {
        (void)live->handle->Resume();
      }
    };
    if (live->in_flight.load() > own_calls) {
      unfreeze();
      return absl::UnavailableError("the agent's host calls did not finish within 10 s");
    }
    absl::StatusOr<vault::v1::LinkPayload> last_or =
        capability::ParseLinkPayload(r.chain().links().rbegin()->payload());
    if (!last_or.ok()) {
      unfreeze();
      return last_or.status();
    }
    const vault::v1::LinkPayload& last = *last_or;
    if (!state_digest.has_value()) {
      if (r.has_state()) {
        absl::StatusOr<cas::Digest> d = ToDigest(r.state_digest());
        if (!d.ok()) {
          unfreeze();
          return d.status();
        }
        state_digest = *d;
      } else {
        state_digest = cas::Digest::Of("");
        if (absl::Status put = deps_.cas->Put(*state_digest, "").status(); !put.ok()) {
          unfreeze();
          return put;
        }
      }
    }
    vault::v1::LinkPayload hop;
    hop.set_version(capability::kLinkVersion);
    hop.set_kind(vault::v1::LinkPayload::MIGRATE);
    hop.set_parent(capability::LinkHash(*r.chain().links().rbegin()));
    hop.set_issuer(deps_.vault_key->public_key().raw());
    hop.set_audience(to_key.raw());
    hop.set_agent_id(live->id);
    *hop.mutable_code() = last.code();
    *hop.mutable_grants() = r.grants();
    *hop.mutable_constraints() = r.constraints();
    const int64_t now = absl::ToUnixMillis(absl::Now());
    hop.set_not_before_unix_ms(std::max(now, last.not_before_unix_ms()));
    hop.set_not_after_unix_ms(last.not_after_unix_ms());
    hop.set_hop(r.hop() + 1);
    absl::StatusOr<std::string> transfer_id = common::RandomBytes(16);
    if (!transfer_id.ok()) {
      unfreeze();
      return transfer_id.status();
    }
    hop.set_transfer_id(*std::move(transfer_id));
    *hop.mutable_state() = FromDigest(*state_digest);
    absl::StatusOr<vault::v1::SignedLink> link = capability::SignLink(hop, *deps_.vault_key);
    if (!link.ok()) {
      unfreeze();
      return link.status();
    }
    vault::v1::OutboundMigration* m = r.mutable_migration();
    m->Clear();
    m->set_to_vault(to_vault);
    m->set_transfer_id(hop.transfer_id());
    *m->mutable_chain() = r.chain();
    *m->mutable_chain()->add_links() = *std::move(link);
    *m->mutable_state() = hop.state();
    m->set_started_unix_ms(now);
    m->set_requested_by(requested_by);
    m->set_resume_state(resume_state);
    *r.mutable_state_digest() = FromDigest(*state_digest);
    r.set_has_state(true);
    // The Offer and the objects leave while MIGRATING is being persisted: neither can make the
    // destination commit anything (only the Commit can, and it leaves once MIGRATING is
    // durable), so a crash meanwhile leaves nothing to settle. (async|deferred: without a
    // thread to spare, RunTransfer sends them itself.)
    sent_ahead = std::async(std::launch::async | std::launch::deferred,
                            [this, to_vault, package = PackageOf(r), t = &times] {
                              return OfferAndSend(to_vault, package, t);
                            });
    // Persisted before the Commit: whatever happens next, a restart finds the hop to settle.
    absl::Status persisted =
        Transition(*live, vault::v1::MIGRATING, absl::StrCat("migrating to ", to_vault), false,
                   {{"to", to_vault},
                    {"transfer_id", TransferText(hop.transfer_id())},
                    {"hop", absl::StrCat(hop.hop())},
                    {"requested_by", requested_by}});
    if (!persisted.ok()) {
      r.clear_migration();
      r.set_state(resume_state);
      unfreeze();
      return persisted;  // (after the Offer: sent_ahead's destructor waits for it)
    }
    times.persisted = absl::Now();
  }
  absl::StatusOr<vault::v1::MigrateAgentResponse> out =
      RunTransfer(live, /*background=*/false, &sent_ahead, &times);
  if (out.ok()) {
    auto ms = [](absl::Duration d) { return absl::ToDoubleMilliseconds(d); };
    const absl::Time now = absl::Now();
    common::LogAgent(spdlog::level::info, live->id,
                     "agent {}: handed to {} in {:.1f} ms (freeze {:.1f}, persist {:.1f} beside "
                     "offer {:.1f} and {} objects {:.1f}, then {:.1f} more; commit {:.1f}, "
                     "departed {:.1f})",
                     live->id, to_vault, ms(now - times.start), ms(times.frozen - times.start),
                     ms(times.persisted - times.frozen), ms(times.offer), times.objects_sent,
                     ms(times.objects), ms(std::max(times.sent, times.persisted) - times.persisted),
                     ms(times.committed - std::max(times.sent, times.persisted)),
                     ms(now - times.committed));
  }
  return out;
}

void AgentRuntime::Impl::MigrateForAgent(const std::shared_ptr<LiveAgent>& live, uint64_t call_id,
                                         const std::string& to, const std::string& state,
                                         const std::optional<cas::Digest>& state_digest) {
  absl::StatusOr<vault::v1::MigrateAgentResponse> moved =
      state_digest.has_value() ? MigrateOut(live, to, std::nullopt, "agent", state_digest)
                               : MigrateOut(live, to, state, "agent");
  bool answer = false;
  {
    absl::MutexLock lock(&live->mu);
    // Refused before the freeze (or resumed here, already answered): the call fails now.
    if (!moved.ok() && live->migrate_call_id == call_id &&
        live->record.state() != vault::v1::MIGRATING) {
      live->migrate_call_id = 0;
      answer = true;
    }
  }
  if (!answer) return;
  vault::v1::HostFrame frame;
  frame.mutable_response()->set_call_id(call_id);
  frame.mutable_response()->set_code(static_cast<int>(moved.status().code()));
  frame.mutable_response()->set_message(std::string(moved.status().message()));
  SendFrame(live, frame);
}

absl::StatusOr<vault::v1::MigrateAgentResponse> AgentRuntime::Impl::MigrateOperator(
    const vault::v1::MigrateAgentRequest& request) {
  std::shared_ptr<LiveAgent> live = Find(request.id());
  if (live == nullptr) {
    return absl::NotFoundError(absl::StrCat("no running agent ", request.id(), " on this vault"));
  }
  // A hop that cannot happen is refused before the agent is disturbed (no checkpoint request,
  // no wait); MigrateOut checks again after the wait.
  if (absl::Status dest = CheckDestination(*this, request.to_vault()).status(); !dest.ok()) {
    return RefusedAtSource(request.id(), request.to_vault(), "operator", dest);
  }
  // Ask for a checkpoint (a "vault.checkpoint" message), wait a bounded time, and go with the
  // last checkpoint either way.
  uint64_t before;
  bool ask;
  {
    absl::MutexLock lock(&live->mu);
    if (absl::Status may = CheckAgentMayGo(*live, request.to_vault()); !may.ok()) {
      live->mu.Unlock();
      absl::Status refused = RefusedAtSource(request.id(), request.to_vault(), "operator", may);
      live->mu.Lock();
      return refused;
    }
    before = live->record.counters().checkpoints();
    ask = !request.no_checkpoint_request() && live->running &&
          live->record.state() == vault::v1::RUNNING;
    if (ask) live->checkpoint_requested = true;
  }
  bool checkpointed = false;
  if (ask) {
    vault::v1::Message m;
    m.set_from("vault");
    m.set_type("vault.checkpoint");
    (void)Deliver(live, std::move(m));
    const absl::Time deadline =
        absl::Now() +
        absl::Milliseconds(request.checkpoint_wait_ms() != 0 ? request.checkpoint_wait_ms() : 2000);
    // Woken by the checkpoint itself (the condition is evaluated whenever the mutex is
    // released), not by polling: the wait is never longer than the checkpoint or the deadline.
    absl::MutexLock lock(&live->mu);
    auto done = [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
      return live->record.counters().checkpoints() > before || !live->running;
    };
    live->mu.AwaitWithDeadline(absl::Condition(&done), deadline);
    checkpointed = live->record.counters().checkpoints() > before;
  }
  VAULT_ASSIGN_OR_RETURN(vault::v1::MigrateAgentResponse out,
                         MigrateOut(live, request.to_vault(), std::nullopt, "operator"));
  out.set_checkpointed(checkpointed);
  return out;
}

vault::v1::MigrationPackage AgentRuntime::Impl::PackageOf(const AgentRecord& r) const {
  vault::v1::MigrationPackage p;
  p.set_agent_id(r.id());
  *p.mutable_spec() = r.spec();
  *p.mutable_chain() = r.migration().chain();
  *p.mutable_state() = r.migration().state();
  p.set_source_vault(options_.vault_name);
  p.set_home_vault(r.home_vault().empty() ? options_.vault_name : r.home_vault());
  *p.mutable_counters() = r.counters();
  p.set_principal(r.principal());
  p.set_paused(r.migration().resume_state() == vault::v1::PAUSED);
  return p;
}

// States up to this size travel in the Commit (every member accepts messages of 2 MiB).

absl::StatusOr<AgentRuntime::Impl::Sent> AgentRuntime::Impl::OfferAndSend(
    const std::string& to_vault, const vault::v1::MigrationPackage& package, HopTimes* times) {
  const absl::Time start = absl::Now();
  // A small state rides in the Commit: one call and one durable write fewer at the destination.
  // It is read (and checked) while the Offer is answered; the destination usually lacks it.
  std::future<absl::StatusOr<std::string>> state_read;
  // (With the package, the Commit must fit in a member's smallest message limit, 2 MiB.)
  if (package.state().size() <= kStateInCommit &&
      package.ByteSizeLong() + package.state().size() + (64 << 10) <= (2u << 20)) {
    VAULT_ASSIGN_OR_RETURN(cas::Digest digest, ToDigest(package.state()));
    // Unverified: the destination hashes every byte (a mismatch it reports is checked against
    // this store's copy, RunTransfer).
    state_read = std::async(std::launch::async | std::launch::deferred, [this, digest] {
      return deps_.cas->ReadAll(digest, cas::ReadCheck::kUnverified);
    });
  }
  VAULT_ASSIGN_OR_RETURN(std::vector<vault::v1::Digest> missing,
                         transport_->Offer(to_vault, package));
  const absl::Time offered = absl::Now();
  Sent sent;
  auto state = std::find_if(missing.begin(), missing.end(), [&](const vault::v1::Digest& d) {
    return d.sha256() == package.state().sha256() && d.size() == package.state().size();
  });
  if (state != missing.end() && state_read.valid()) {
    VAULT_ASSIGN_OR_RETURN(sent.state, state_read.get());
    missing.erase(state);
  }
  if (!missing.empty()) VAULT_RETURN_IF_ERROR(transport_->SendObjects(to_vault, missing));
  if (times != nullptr) {
    times->offer = offered - start;
    times->objects = absl::Now() - offered;
    times->objects_sent = missing.size() + (sent.state.has_value() ? 1 : 0);
  }
  return sent;
}

absl::StatusOr<vault::v1::MigrateAgentResponse> AgentRuntime::Impl::RunTransfer(
    const std::shared_ptr<LiveAgent>& live, bool background,
    std::future<absl::StatusOr<Sent>>* sent_ahead, HopTimes* times) {
  vault::v1::MigrationPackage package;
  std::string to_vault, transfer_id;
  {
    absl::MutexLock lock(&live->mu);
    if (live->record.state() != vault::v1::MIGRATING) {
      return absl::FailedPreconditionError("the agent is not migrating");
    }
    package = PackageOf(live->record);
    to_vault = live->record.migration().to_vault();
    transfer_id = live->record.migration().transfer_id();
  }
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
      VAULT_RETURN_IF_ERROR(ResumeAfterFailedHop(live, why));
      return absl::Status(
          IsAmbiguous(sent.status()) ? absl::StatusCode::kUnavailable : sent.status().code(), why);
    }
    absl::StatusOr<vault::v1::SignedReceipt> receipt =
        transport_->Commit(to_vault, package, sent->state.has_value() ? &*sent->state : nullptr);
    if (times != nullptr) times->committed = absl::Now();
    if (receipt.ok()) {
      absl::StatusOr<vault::v1::MigrateAgentResponse> gone = Departed(live, *receipt);
      if (!absl::IsDataLoss(gone.status())) return gone;
      // Committed, with a receipt that does not verify: never resume; ask again (below).
    } else if (!IsAmbiguous(receipt.status())) {
      commit_refused = receipt.status();
      // The state was read without being checked (OfferAndSend): a mismatch the destination
      // found may be damage here, which is then what the hop reports.
      if (absl::IsInvalidArgument(commit_refused) && sent->state.has_value()) {
        absl::StatusOr<cas::Digest> digest = ToDigest(package.state());
        absl::Status mine = digest.ok() ? deps_.cas->ReadAll(*digest).status() : digest.status();
        if (absl::IsDataLoss(mine)) {
          commit_refused = absl::DataLossError(
              absl::StrCat("the agent's state is damaged on this vault: ", mine.message()));
        }
      }
    }
    common::LogWith(spdlog::level::warn, {.agent = live->id, .transfer = TransferText(transfer_id)},
                    "agent {}: Commit to {} failed ({}); asking for the transfer's outcome",
                    live->id, to_vault, receipt.status().ToString());
  }
  // The outcome is unknown: ask until it is known (Status fences an uncommitted transfer off).
  absl::Duration backoff = absl::Milliseconds(100);
  const absl::Time give_up_inline = absl::Now() + kInlineResolve;
  for (;;) {
    absl::StatusOr<vault::v1::TransferStatusResponse> st =
        transport_->Status(to_vault, transfer_id, /*abort_if_unknown=*/true);
    if (st.ok()) {
      if (st->outcome() == vault::v1::TransferStatusResponse::COMMITTED) {
        absl::StatusOr<vault::v1::MigrateAgentResponse> gone = Departed(live, st->receipt());
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
      VAULT_RETURN_IF_ERROR(ResumeAfterFailedHop(live, why));
      return absl::Status(commit_refused.ok() ? absl::StatusCode::kAborted : commit_refused.code(),
                          why);
    }
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return absl::UnavailableError("the vault is stopping; settled at restart");
    }
    if (!background && absl::Now() > give_up_inline) {
      ScheduleResolve(live);
      return absl::UnavailableError(absl::StrCat("the outcome of the migration to ", to_vault,
                                                 " is not known yet (", st.status().message(),
                                                 "); the agent stays frozen and the vault keeps "
                                                 "asking ",
                                                 to_vault, " until it knows"));
    }
    absl::SleepFor(backoff);
    backoff = std::min(backoff * 2, absl::Seconds(5));
  }
}

void AgentRuntime::Impl::ScheduleResolve(const std::shared_ptr<LiveAgent>& live) {
  absl::MutexLock lock(&mu_);
  if (stopping_) return;  // settled at the next start
  resolvers_.emplace_back([this, live] {
    absl::StatusOr<vault::v1::MigrateAgentResponse> r = RunTransfer(live, /*background=*/true);
    if (!r.ok()) {
      common::LogAgent(spdlog::level::info, live->id, "agent {}: migration settled: {}", live->id,
                       r.status().ToString());
    }
  });
}

absl::StatusOr<vault::v1::MigrateAgentResponse> AgentRuntime::Impl::Departed(
    const std::shared_ptr<LiveAgent>& live, const vault::v1::SignedReceipt& receipt) {
  vault::v1::MigrateAgentResponse out;
  bool process;
  {
    absl::MutexLock lock(&live->mu);
    AgentRecord& r = live->record;
    const vault::v1::OutboundMigration& m = r.migration();
    std::optional<capability::PublicKey> key = MemberKey(m.to_vault());
    if (!key.has_value()) return absl::InternalError("the destination's key is gone");
    absl::StatusOr<vault::v1::ReceiptPayload> p = OpenReceipt(receipt, *key);
    if (!p.ok() || p->transfer_id() != m.transfer_id() || p->agent_id() != live->id) {
      // A member that commits and answers with a bad receipt: keep asking, never resume.
      absl::Status bad = absl::DataLossError(
          absl::StrCat("the receipt from ", m.to_vault(), " is invalid: ",
                       p.ok() ? "it names another transfer" : std::string(p.status().message())));
      vault::v1::AuditEntry e =
          audit::MakeEntry(deps_.vault_key->public_key().ToText(), "agent.migrate.bad_receipt",
                           live->id, vault::v1::AuditEntry::DENIED, std::string(bad.message()),
                           {{"to", m.to_vault()}, {"transfer_id", TransferText(m.transfer_id())}});
      e.set_priority(vault::v1::AuditEntry::HIGH);
      Audit(std::move(e), /*durable=*/true);
      return bad;
    }
    r.mutable_migration()->set_receipt(receipt.SerializeAsString());
    r.set_hop(p->hop());
    out.set_to_vault(m.to_vault());
    out.set_hop(p->hop());
    out.set_receipt(receipt.SerializeAsString());
    out.set_receipt_sha256(cas::Sha256::Hash(out.receipt()));
    *out.mutable_grants() = p->grants();
    *out.mutable_state() = p->state();
    live->end_cause = EndCause::kDeparted;
    live->end_reason = absl::StrCat("departed to ", m.to_vault());
    process = live->running && live->handle != nullptr;
    std::vector<std::pair<std::string, std::string>> details = {
        {"to", m.to_vault()},
        {"transfer_id", TransferText(m.transfer_id())},
        {"hop", absl::StrCat(p->hop())},
        {"receipt", absl::BytesToHexString(out.receipt_sha256())}};
    if (process) {
      live->departure =
          ApplyTransition(*live, vault::v1::DEPARTED, live->end_reason, false, std::move(details));
    } else {
      // No process (agents off, or a hop settled after a restart): nothing to wait for, and the
      // entry goes at once, so the write is made now.
      VAULT_RETURN_IF_ERROR(
          Transition(*live, vault::v1::DEPARTED, live->end_reason, false, std::move(details)));
    }
  }
  // The answer does not wait for DEPARTED's durable write (~1 ms of every hop): the hop is
  // settled already (the destination committed; its receipt is verified), the record reads
  // DEPARTED from now on, and after a crash before the write the record still reads MIGRATING,
  // which the next start settles with Status (COMMITTED, with the receipt) as for a lost answer.
  // Then the frozen process ends (it can do nothing meanwhile: frozen, its calls refused); the
  // exit handler (kDeparted) forgets the agent here.
  if (!process) {
    absl::MutexLock lock(&mu_);
    ForgetLocked(live);
    return out;
  }
  auto finish = [this, live]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    absl::MutexLock lock(&live->mu);
    FlushDeparture(*live);
    if (live->running && live->handle != nullptr) (void)live->handle->Kill();
  };
  if (!lifecycle_->Schedule(finish)) finish();
  return out;
}

absl::Status AgentRuntime::Impl::ResumeAfterFailedHop(const std::shared_ptr<LiveAgent>& live,
                                                      const std::string& why) {
  bool launch = false;
  uint64_t answer_call = 0;
  {
    absl::MutexLock lock(&live->mu);
    AgentRecord& r = live->record;
    if (r.state() != vault::v1::MIGRATING) return absl::OkStatus();
    const AgentState back =
        r.migration().resume_state() == vault::v1::PAUSED ? vault::v1::PAUSED : vault::v1::RUNNING;
    r.clear_migration();
    live->migrating_out = false;
    VAULT_RETURN_IF_ERROR(Transition(*live, back, why, /*high_priority=*/true,
                                     {{"outcome", "resumed here"}}, "agent.migrate.failed"));
    if (live->handle != nullptr && live->running) {
      if (back == vault::v1::RUNNING) (void)live->handle->Resume();
      answer_call = std::exchange(live->migrate_call_id, 0);
    } else {
      launch = true;  // after a restart of this vault: start it again from the handed state
    }
  }
  if (answer_call != 0) {
    // The agent's migrate call fails; it goes on here.
    vault::v1::HostFrame frame;
    frame.mutable_response()->set_call_id(answer_call);
    frame.mutable_response()->set_code(static_cast<int>(absl::StatusCode::kAborted));
    frame.mutable_response()->set_message(why);
    SendFrame(live, frame);
  }
  if (launch) {
    absl::Status s = Launch(live);
    if (!s.ok()) {
      common::LogAgent(spdlog::level::err, live->id, "agent {}: could not resume here: {}",
                       live->id, s.ToString());
    }
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// Destination.

}  // namespace vault::agent
