// Migration, the destination's side of a hop: the transfer records and fences, the Offer, the
// Commit that adopts the agent, and the Status that settles a hop whose outcome its source lost.
// The agent runtime's side of migration (design §7): the source freezes the agent, appends the
// MIGRATE link and persists "migrating" before anything leaves; the destination verifies the
// whole chain again at Commit and writes the agent record, the transfer record and the audit
// entry in one durable write. A Commit whose answer is lost is settled with Status, which
// fences an uncommitted transfer off for good, so an agent never runs in two vaults and is
// never lost. The wire (gRPC over mutual TLS) is migration/'s.
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

using vault::v1::AgentRecord;
using vault::v1::AgentState;

absl::StatusOr<std::optional<vault::v1::TransferRecord>> AgentRuntime::Impl::LoadTransfer(
    const std::string& transfer_id, const std::string& source) const {
  // The committed record (any member's: a replay is refused whoever sends it), else `source`'s
  // own fence. A fence binds only the member that set it, and lives under a key of its own, so
  // that no member's fence can replace another's (which would let that member's delayed Commit
  // land after it resumed the agent).
  for (const std::string& key : {transfer_id, FenceKey(transfer_id, source)}) {
    std::string value;
    rocksdb::Status s = deps_.db->db()->Get(rocksdb::ReadOptions(), deps_.db->Handle(kTransfers),
                                            storage::ToSlice(key), &value);
    if (s.IsNotFound()) continue;
    VAULT_RETURN_IF_ERROR(storage::ToStatus(s, "read a transfer record"));
    vault::v1::TransferRecord t;
    if (!t.ParseFromString(value)) return absl::DataLossError("a transfer record does not parse");
    if (t.outcome() == vault::v1::TransferStatusResponse::ABORTED && t.source_vault() != source) {
      continue;  // a fence stored under the id itself (before fences had keys of their own)
    }
    return t;
  }
  return std::nullopt;
}

absl::StatusOr<capability::VerifiedChain> AgentRuntime::Impl::VerifyArrival(
    const vault::v1::MigrationPackage& p) {
  capability::VerifyContext ctx = BaseContext();
  ctx.trusted_root = [this](const capability::PublicKey& key) {
    return policy_->Lookup(key).has_value();
  };
  ctx.transfer_seen = [this, &p](absl::string_view id) {
    absl::StatusOr<std::optional<vault::v1::TransferRecord>> t =
        LoadTransfer(std::string(id), p.source_vault());
    return !t.ok() || t->has_value();  // unreadable counts as seen: refuse
  };
  capability::ChainVerifier verifier(&link_cache_);
  absl::StatusOr<capability::VerifiedChain> v = verifier.Verify(p.chain(), ctx);
  if (!v.ok()) {
    return absl::PermissionDeniedError(absl::StrCat(
        "the chain is refused (", capability::ChainErrorName(capability::ChainErrorOf(v.status())),
        "): ", v.status().message()));
  }
  VAULT_ASSIGN_OR_RETURN(vault::v1::LinkPayload last,
                         capability::ParseLinkPayload(p.chain().links().rbegin()->payload()));
  if (last.kind() != vault::v1::LinkPayload::MIGRATE) {
    return absl::InvalidArgumentError("the chain's last link must be a MIGRATE link");
  }
  std::optional<capability::PublicKey> source = MemberKey(p.source_vault());
  if (!source.has_value() || source->raw() != last.issuer()) {
    return absl::PermissionDeniedError(
        absl::StrCat("the MIGRATE link is not signed by the source vault ", p.source_vault()));
  }
  if (p.agent_id() != v->agent_id) {
    return absl::InvalidArgumentError("the package's agent id differs from the chain's");
  }
  if (p.spec().code_digest().sha256() != v->code.sha256() ||
      p.spec().code_digest().size() != v->code.size()) {
    return absl::InvalidArgumentError("the spec's code digest differs from the chain's");
  }
  if (p.state().sha256() != last.state().sha256() || p.state().size() != last.state().size()) {
    return absl::InvalidArgumentError("the package's state digest differs from the MIGRATE link's");
  }
  if (p.principal() != v->root->ToText()) {
    return absl::InvalidArgumentError("the package's principal is not the chain's root");
  }
  VAULT_RETURN_IF_ERROR(ValidateAgentId(v->agent_id));
  return v;
}

absl::StatusOr<std::vector<vault::v1::Digest>> AgentRuntime::Impl::OfferIn(
    const vault::v1::MigrationPackage& p, const std::string& caller) {
  if (caller != p.source_vault()) {
    return absl::PermissionDeniedError(
        absl::StrCat("member ", caller, " offers an agent from ", p.source_vault()));
  }
  absl::StatusOr<capability::VerifiedChain> v = VerifyArrival(p);
  if (!v.ok()) {
    Audit(audit::MakeEntry(p.source_vault(), "agent.migrate.refused", p.agent_id(),
                           vault::v1::AuditEntry::DENIED, std::string(v.status().message()),
                           {{"phase", "offer"}}),
          /*durable=*/true);
    return v.status();
  }
  // An agent of a sandbox type this vault cannot run is refused before anything moves.
  if (absl::StatusOr<sandbox::Sandbox*> type = SandboxFor(p.spec().sandbox()); !type.ok()) {
    Audit(audit::MakeEntry(p.source_vault(), "agent.migrate.refused", p.agent_id(),
                           vault::v1::AuditEntry::DENIED, std::string(type.status().message()),
                           {{"phase", "offer"}}),
          /*durable=*/true);
    return type.status();
  }
  std::vector<vault::v1::Digest> missing;
  std::vector<vault::v1::Digest> wanted = {p.spec().code_digest(), p.state()};
  for (const vault::v1::Digest& c : p.carried()) wanted.push_back(c);
  for (const vault::v1::Digest& d : wanted) {
    VAULT_ASSIGN_OR_RETURN(cas::Digest digest, ToDigest(d));
    VAULT_ASSIGN_OR_RETURN(bool present, deps_.cas->Contains(digest));
    if (!present) missing.push_back(d);
  }
  const bool code_here =
      missing.empty() || !(missing.front().sha256() == p.spec().code_digest().sha256() &&
                           missing.front().size() == p.spec().code_digest().size());
  // (Not for a paused arrival: it must not run before it is frozen.)
  if (code_here && !p.paused()) PrestartArrival(p, *v);
  return missing;
}

absl::StatusOr<vault::v1::SignedReceipt> AgentRuntime::Impl::CommitIn(
    const vault::v1::MigrationPackage& p, const std::string& caller, const std::string* state,
    std::function<void()>* after_answer) {
  if (caller != p.source_vault()) {
    return absl::PermissionDeniedError(
        absl::StrCat("member ", caller, " commits an agent from ", p.source_vault()));
  }
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return absl::UnavailableError("the vault is stopping");
  }
  if (state != nullptr && state->size() > kStateInCommit) {
    return absl::InvalidArgumentError(absl::StrCat("a Commit carries states of at most ",
                                                   kStateInCommit, " bytes, not ", state->size()));
  }
  // Checked again at the Commit (the Offer did): agents may have been disabled since, or the
  // Offer answered by a vault that did not check. Refused before anything is committed, so the
  // agent resumes at its source.
  if (absl::StatusOr<sandbox::Sandbox*> type = SandboxFor(p.spec().sandbox()); !type.ok()) {
    Audit(audit::MakeEntry(p.source_vault(), "agent.migrate.refused", p.agent_id(),
                           vault::v1::AuditEntry::DENIED, std::string(type.status().message()),
                           {{"phase", "commit"}}),
          /*durable=*/true);
    return type.status();
  }
  const absl::Time commit_start = absl::Now();
  // One commit or fence at a time: Status's abort and Commit never interleave.
  absl::MutexLock commit_lock(&commit_mu_);
  VAULT_ASSIGN_OR_RETURN(vault::v1::LinkPayload last,
                         capability::ParseLinkPayload(p.chain().links().rbegin()->payload()));
  // A refused Commit ends the process its Offer started, if any (an adopted one is gone from
  // prestarts_ by then).
  absl::Cleanup end_prestart = [&] { EndPrestart({p.source_vault(), last.transfer_id()}); };
  VAULT_ASSIGN_OR_RETURN(std::optional<vault::v1::TransferRecord> seen,
                         LoadTransfer(last.transfer_id(), p.source_vault()));
  if (seen.has_value()) {
    return absl::AlreadyExistsError(
        absl::StrCat("transfer ", TransferText(last.transfer_id()), " was already ",
                     TransferStatusOutcomeName(seen->outcome()), " here (a replay?); ask Status"));
  }
  absl::StatusOr<capability::VerifiedChain> v = VerifyArrival(p);
  if (!v.ok()) {
    Audit(audit::MakeEntry(p.source_vault(), "agent.migrate.refused", p.agent_id(),
                           vault::v1::AuditEntry::DENIED, std::string(v.status().message()),
                           {{"phase", "commit"}}),
          /*durable=*/true);
    return v.status();
  }
  // A state carried in the Commit is stored as the CAS would: every byte checked against its
  // digest first; a mismatch is refused (and audited), never stored.
  if (state != nullptr) {
    VAULT_ASSIGN_OR_RETURN(cas::Digest want, ToDigest(p.state()));
    if (absl::Status put = deps_.cas->Put(want, *state).status(); !put.ok()) {
      absl::Status bad(put.code(),
                       absl::StrCat("the state carried in the Commit: ", put.message()));
      vault::v1::AuditEntry e = audit::MakeEntry(p.source_vault(), "agent.migrate.refused",
                                                 p.agent_id(), vault::v1::AuditEntry::DENIED,
                                                 std::string(bad.message()), {{"phase", "commit"}});
      e.set_priority(vault::v1::AuditEntry::HIGH);
      Audit(std::move(e), /*durable=*/true);
      return bad;
    }
  }
  // Every object is here, whole (the CAS verified each on the way in).
  for (const vault::v1::Digest& d : {p.spec().code_digest(), p.state()}) {
    VAULT_ASSIGN_OR_RETURN(cas::Digest digest, ToDigest(d));
    VAULT_ASSIGN_OR_RETURN(bool present, deps_.cas->Contains(digest));
    if (!present) {
      return absl::FailedPreconditionError(
          absl::StrCat("object ", DigestText(d), " has not arrived (Offer names what to send)"));
    }
  }
  std::optional<vault::v1::TrustEntry> trust = policy_->Lookup(*v->root);
  if (!trust.has_value()) return absl::PermissionDeniedError("the root principal is not trusted");
  // Never two: an agent may arrive only where it is not (or where it departed from).
  // An agent that departed from here and whose frozen process is still being ended is not here:
  // its entry is forgotten now, so that its end neither persists its old record over the new
  // one nor removes the new entry.
  if (std::shared_ptr<LiveAgent> here = Find(p.agent_id()); here != nullptr) {
    absl::MutexLock lock(&here->mu);
    if (here->record.state() != vault::v1::DEPARTED) {
      return absl::AlreadyExistsError(absl::StrCat("agent ", p.agent_id(), " is already here"));
    }
    FlushDeparture(*here);  // (before the new record: never written over it)
    absl::MutexLock agents_lock(&mu_);
    ForgetLocked(here);
  }
  absl::StatusOr<AgentRecord> stored = store_->Get(p.agent_id());
  if (stored.ok() && stored->state() != vault::v1::DEPARTED) {
    return absl::AlreadyExistsError(
        absl::StrCat("agent ", p.agent_id(), " ended here (", StateName(stored->state()), ")"));
  }
  uint32_t max_agents = trust->quota().max_agents() != 0 ? trust->quota().max_agents()
                                                         : options_.config.default_max_agents();
  if (CountLive(v->root->ToText()) >= max_agents) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "principal ", v->root->ToText(), " already runs ", max_agents, " agents here (its quota)"));
  }
  // Attenuation: what the agent holds here, and what the next hop starts from.
  google::protobuf::RepeatedPtrField<vault::v1::Grant> chain_grants(v->grants.begin(),
                                                                    v->grants.end());
  AgentRecord record;
  record.set_id(p.agent_id());
  *record.mutable_spec() = p.spec();
  *record.mutable_chain() = p.chain();
  for (vault::v1::Grant& g : capability::Intersect(chain_grants, trust->ceiling())) {
    *record.add_grants() = std::move(g);
  }
  *record.mutable_constraints() =
      capability::IntersectConstraints(v->constraints, trust->ceiling_constraints());
  record.set_principal(v->root->ToText());
  record.set_hop(v->hop);
  *record.mutable_state_digest() = p.state();
  record.set_has_state(true);
  *record.mutable_counters() = p.counters();
  record.set_home_vault(p.home_vault());
  record.set_arrived_from(p.source_vault());
  const int64_t now = absl::ToUnixMillis(absl::Now());
  // A paused agent arrives paused (its process starts, frozen, until an operator resumes it).
  record.set_state(p.paused() ? vault::v1::PAUSED : vault::v1::SPAWNED);
  record.set_reason(absl::StrCat("arrived from ", p.source_vault(), p.paused() ? ", paused" : ""));
  record.set_spawned_unix_ms(now);
  record.set_updated_unix_ms(now);
  if (stored.ok()) {
    record.set_incarnation(stored->incarnation());  // incarnations only grow on one vault
  }

  vault::v1::ReceiptPayload rp;
  rp.set_version(1);
  rp.set_transfer_id(last.transfer_id());
  rp.set_agent_id(p.agent_id());
  rp.set_from_vault(p.source_vault());
  rp.set_to_vault(options_.vault_name);
  rp.set_hop(v->hop);
  *rp.mutable_state() = p.state();
  *rp.mutable_grants() = record.grants();
  rp.set_committed_unix_ms(now);
  VAULT_ASSIGN_OR_RETURN(vault::v1::SignedReceipt receipt, SignReceipt(rp, *deps_.vault_key));
  vault::v1::TransferRecord t;
  t.set_outcome(vault::v1::TransferStatusResponse::COMMITTED);
  *t.mutable_receipt() = receipt;
  t.set_agent_id(p.agent_id());
  t.set_unix_ms(now);
  t.set_source_vault(p.source_vault());

  std::string grants;
  for (const vault::v1::Grant& g : record.grants()) {
    absl::StrAppend(&grants, grants.empty() ? "" : "; ", capability::GrantToString(g));
  }
  vault::v1::AuditEntry entry = audit::MakeEntry(
      p.source_vault(), "agent.migrate.in", p.agent_id(), vault::v1::AuditEntry::ALLOWED,
      p.spec().purpose(),
      {{"from", p.source_vault()},
       {"transfer_id", TransferText(last.transfer_id())},
       {"hop", absl::StrCat(v->hop)},
       {"state", DigestText(p.state())},
       {"state_in_commit", state != nullptr ? "yes" : "no"},
       {"grants", grants},
       {"narrowed", static_cast<int>(record.grants_size()) != static_cast<int>(v->grants.size())
                        ? "yes"
                        : "no"}});
  // The commit point: record, transfer id and audit entry in one durable write.
  const std::string transfer_bytes = t.SerializeAsString();
  VAULT_RETURN_IF_ERROR(deps_.log
                            ->AppendWith(std::move(entry),
                                         [&](rocksdb::WriteBatch* batch) {
                                           store_->AddPut(batch, record);
                                           batch->Put(deps_.db->Handle(kTransfers),
                                                      storage::ToSlice(last.transfer_id()),
                                                      storage::ToSlice(transfer_bytes));
                                         })
                            .status());
  // Committed: from here on the answer is the receipt, whatever happens to the start.
  // The process started at the Offer, if it was started for exactly this hop, is adopted.
  std::shared_ptr<LiveAgent> live =
      TakePrestart({p.source_vault(), last.transfer_id()}, PrestartKey(p, record.constraints()));
  const bool prestarted = live != nullptr;
  if (live == nullptr) live = std::make_shared<LiveAgent>(record.id(), record.principal());
  {
    absl::MutexLock agent_lock(&live->mu);
    live->record = std::move(record);
    // (Before it is published: the watchdog must not see the held process's start time.)
    live->started = absl::Now();
    live->last_heartbeat = live->started;
    // Its wall-time limit counts from now, as a process started now would.
    if (prestarted) live->handle->RestartWallClock();
  }
  {
    absl::MutexLock lock(&mu_);
    agents_[live->id] = live;
  }
  const absl::Time committed = absl::Now();
  ForwardLocation(p.home_vault(), receipt, p.agent_id());
  // Its RUNNING state need not be synced: the committed record starts it again after a crash.
  // A held process is adopted now, and reads its first frame once the answer has left: its
  // first steps (typically reading its state back) then do not delay the answer.
  const bool defer_io = prestarted && after_answer != nullptr;
  absl::Status launched = Launch(live, std::nullopt, /*sync_started=*/false, defer_io);
  // (Also after a failed launch: StartIo serves a process that still runs, as Launch would have.)
  if (defer_io) *after_answer = [this, live] { StartIo(live); };
  const absl::Time started = absl::Now();
  const std::string transfer = TransferText(last.transfer_id());
  if (!launched.ok()) {
    common::LogWith(spdlog::level::err, {.agent = live->id, .transfer = transfer},
                    "agent {} arrived from {} but could not start: {}", live->id, p.source_vault(),
                    launched.ToString());
  } else {
    common::LogWith(spdlog::level::info, {.agent = live->id, .transfer = transfer},
                    "agent {} arrived from {} (transfer {}; commit {:.1f} ms, start {:.1f} ms{})",
                    live->id, p.source_vault(), transfer,
                    absl::ToDoubleMilliseconds(committed - commit_start),
                    absl::ToDoubleMilliseconds(started - committed),
                    prestarted ? ", its process started at the offer" : "");
    if (p.paused()) {
      absl::MutexLock agent_lock(&live->mu);
      if (live->handle != nullptr) {
        absl::Status paused = live->handle->Pause();
        if (!paused.ok()) {
          common::LogAgent(spdlog::level::warn, live->id, "agent {}: could not pause: {}", live->id,
                           paused.ToString());
        }
      }
    }
  }
  return receipt;
}

absl::StatusOr<vault::v1::TransferStatusResponse> AgentRuntime::Impl::TransferStatus(
    const std::string& transfer_id, bool abort_if_unknown, const std::string& caller) {
  if (transfer_id.size() != 16) {
    return absl::InvalidArgumentError(
        absl::StrCat("a transfer id is 16 bytes, not ", transfer_id.size()));
  }
  absl::MutexLock commit_lock(&commit_mu_);
  VAULT_ASSIGN_OR_RETURN(std::optional<vault::v1::TransferRecord> t,
                         LoadTransfer(transfer_id, caller));
  vault::v1::TransferStatusResponse out;
  if (t.has_value()) {
    if (!t->source_vault().empty() && t->source_vault() != caller) {
      return absl::PermissionDeniedError(
          absl::StrCat("transfer ", TransferText(transfer_id), " is not ", caller, "'s"));
    }
    out.set_outcome(t->outcome());
    if (t->has_receipt()) *out.mutable_receipt() = t->receipt();
    return out;
  }
  out.set_outcome(vault::v1::TransferStatusResponse::UNKNOWN);
  if (abort_if_unknown) {
    // The fence: a Commit of this transfer id is refused from now on.
    vault::v1::TransferRecord fence;
    fence.set_outcome(vault::v1::TransferStatusResponse::ABORTED);
    fence.set_unix_ms(absl::ToUnixMillis(absl::Now()));
    fence.set_source_vault(caller);
    rocksdb::WriteBatch batch;
    batch.Put(deps_.db->Handle(kTransfers), storage::ToSlice(FenceKey(transfer_id, caller)),
              fence.SerializeAsString());
    VAULT_RETURN_IF_ERROR(deps_.db->Write(&batch));
    EndPrestart({caller, transfer_id});
  }
  return out;
}

std::string TransferStatusOutcomeName(vault::v1::TransferStatusResponse::Outcome o) {
  switch (o) {
    case vault::v1::TransferStatusResponse::UNKNOWN:
      return "not committed";
    case vault::v1::TransferStatusResponse::COMMITTED:
      return "committed";
    case vault::v1::TransferStatusResponse::ABORTED:
      return "aborted";
    default:
      return "unknown outcome";
  }
}

}  // namespace vault::agent
