// Migration, the destination's side of a hop (design §7): the transfer records and fences, the
// Offer, the Commit that adopts the agent, and the Status that settles a hop whose outcome its
// source lost. The Commit verifies the whole chain again and writes the agent record, the
// transfer record and the audit entry in one durable write; Status fences an uncommitted
// transfer off for good. So an agent never runs in two vaults and is never lost.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "agent/agent_store.h"
#include "audit/log.h"
#include "capability/chain.h"
#include "capability/grant.h"
#include "cas/digest.h"
#include "cas/digest_proto.h"
#include "common/log_fields.h"
#include "common/status_macros.h"
#include "migration/internal/image_blobs.h"
#include "migration/internal/transfer.h"
#include "migration/migration.h"
#include "migration/receipt.h"
#include "spdlog/spdlog.h"
#include "storage/database.h"

namespace vault::migration {

using vault::v1::AgentRecord;

absl::StatusOr<std::optional<vault::v1::TransferRecord>> Migration::LoadTransfer(
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

absl::StatusOr<capability::VerifiedChain> Migration::VerifyArrival(
    const vault::v1::MigrationPackage& p) {
  capability::VerifyContext ctx = deps_.port->BaseContext();
  ctx.trusted_root = [this](const capability::PublicKey& key) {
    return deps_.port->policy().Lookup(key).has_value();
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
  VAULT_RETURN_IF_ERROR(agent::ValidateAgentId(v->agent_id));
  return v;
}

absl::Status Migration::RefusedArrival(const vault::v1::MigrationPackage& p,
                                       const std::string& phase, absl::Status why,
                                       bool high_priority) {
  vault::v1::AuditEntry e = audit::MakeEntry(p.source_vault(), "agent.migrate.refused",
                                             p.agent_id(), vault::v1::AuditEntry::DENIED,
                                             std::string(why.message()), {{"phase", phase}});
  if (high_priority) e.set_priority(vault::v1::AuditEntry::HIGH);
  deps_.port->Audit(std::move(e), /*durable=*/true);
  return why;
}

absl::StatusOr<std::vector<vault::v1::Digest>> Migration::OfferIn(
    const vault::v1::MigrationPackage& p, const std::string& caller) {
  if (caller != p.source_vault()) {
    return absl::PermissionDeniedError(
        absl::StrCat("member ", caller, " offers an agent from ", p.source_vault()));
  }
  absl::StatusOr<capability::VerifiedChain> v = VerifyArrival(p);
  if (!v.ok()) return RefusedArrival(p, "offer", v.status());
  // An agent of a sandbox type this vault cannot run is refused before anything moves.
  if (absl::Status type = deps_.port->CanRun(p.spec().sandbox()); !type.ok()) {
    return RefusedArrival(p, "offer", type);
  }
  std::vector<vault::v1::Digest> missing;
  std::vector<vault::v1::Digest> wanted = {p.spec().code_digest(), p.state()};
  for (const vault::v1::Digest& c : p.carried()) wanted.push_back(c);
  for (const vault::v1::Digest& d : wanted) {
    VAULT_ASSIGN_OR_RETURN(cas::Digest digest, cas::FromProto(d));
    // Confirmed when present, so that no collection takes it before the agent's record holds
    // it (design §12).
    absl::Status touched = deps_.cas->Touch(digest);
    if (absl::IsNotFound(touched)) {
      missing.push_back(d);
    } else if (!touched.ok()) {
      return touched;
    }
  }
  // (A container agent's code is its whole image: the manifest and every blob it names.)
  const bool code_here =
      missing.empty() || (p.spec().sandbox() != "container" &&
                          !(missing.front().sha256() == p.spec().code_digest().sha256() &&
                            missing.front().size() == p.spec().code_digest().size()));
  // (Not for a paused arrival: it must not run before it is frozen.)
  if (code_here && !p.paused()) PrestartArrival(p, *v);
  return missing;
}

absl::StatusOr<vault::v1::SignedReceipt> Migration::CommitIn(const vault::v1::MigrationPackage& p,
                                                             const std::string& caller,
                                                             const std::string* state,
                                                             std::function<void()>* after_answer) {
  if (caller != p.source_vault()) {
    return absl::PermissionDeniedError(
        absl::StrCat("member ", caller, " commits an agent from ", p.source_vault()));
  }
  if (stopping() || deps_.port->Stopping()) {
    return absl::UnavailableError("the vault is stopping");
  }
  if (state != nullptr && state->size() > kStateInCommit) {
    return absl::InvalidArgumentError(absl::StrCat("a Commit carries states of at most ",
                                                   kStateInCommit, " bytes, not ", state->size()));
  }
  // Checked again at the Commit (the Offer did): agents may have been disabled since, or the
  // Offer answered by a vault that did not check. Refused before anything is committed, so the
  // agent resumes at its source.
  if (absl::Status type = deps_.port->CanRun(p.spec().sandbox()); !type.ok()) {
    return RefusedArrival(p, "commit", type);
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
  if (!v.ok()) return RefusedArrival(p, "commit", v.status());
  // A state carried in the Commit is stored as the CAS would: every byte checked against its
  // digest first; a mismatch is refused (and audited), never stored.
  if (state != nullptr) {
    VAULT_ASSIGN_OR_RETURN(cas::Digest want, cas::FromProto(p.state()));
    if (absl::Status put = deps_.cas->Put(want, *state).status(); !put.ok()) {
      return RefusedArrival(
          p, "commit",
          absl::Status(put.code(),
                       absl::StrCat("the state carried in the Commit: ", put.message())),
          /*high_priority=*/true);
    }
  }
  // Every object is here, whole (the CAS verified each on the way in): for a container agent,
  // every blob of its image too, as this vault reads its manifest (whatever the package's
  // carried list said), so that it can import the image when the agent starts.
  std::vector<vault::v1::Digest> needed = {p.spec().code_digest(), p.state()};
  if (p.spec().sandbox() == "container") {
    absl::StatusOr<std::vector<vault::v1::Digest>> blobs =
        internal::ImageBlobsOf(*deps_.cas, p.spec());
    if (!blobs.ok() && !absl::IsNotFound(blobs.status())) {
      return RefusedArrival(p, "commit", blobs.status());
    }
    if (blobs.ok()) needed.insert(needed.end(), blobs->begin(), blobs->end());
  }
  for (const vault::v1::Digest& d : needed) {
    VAULT_ASSIGN_OR_RETURN(cas::Digest digest, cas::FromProto(d));
    VAULT_ASSIGN_OR_RETURN(bool present, deps_.cas->Contains(digest));
    if (!present) {
      return absl::FailedPreconditionError(absl::StrCat(
          "object ", digest.ToString(), " has not arrived (Offer names what to send)"));
    }
  }
  // Its messages (docs/messages.md), each checked before any is adopted.
  std::optional<vault::v1::MailboxTransfer> mailbox;
  if (p.has_mailbox()) {
    VAULT_ASSIGN_OR_RETURN(cas::Digest digest, cas::FromProto(p.mailbox()));
    VAULT_ASSIGN_OR_RETURN(bool present, deps_.cas->Contains(digest));
    if (!present) {
      return absl::FailedPreconditionError(
          absl::StrCat("the agent's mailbox ", digest.ToString(),
                       " has not arrived (Offer names what to send)"));
    }
    absl::StatusOr<vault::v1::MailboxTransfer> read =
        deps_.port->ReadArrivalMailbox(p.agent_id(), p.mailbox());
    if (!read.ok()) return RefusedArrival(p, "commit", read.status(), /*high_priority=*/true);
    mailbox = *std::move(read);
  }
  std::optional<vault::v1::TrustEntry> trust = deps_.port->policy().Lookup(*v->root);
  if (!trust.has_value()) return absl::PermissionDeniedError("the root principal is not trusted");
  // Never two: an agent may arrive only where it is not (or where it departed from).
  VAULT_ASSIGN_OR_RETURN(const uint64_t incarnation, deps_.port->MakeRoomForArrival(p.agent_id()));
  const uint32_t max_agents = deps_.port->MaxAgents(v->root->ToText());
  if (deps_.port->CountLive(v->root->ToText()) >= max_agents) {
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
  record.set_incarnation(incarnation);  // incarnations only grow on one vault

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
  absl::StatusOr<cas::Digest> state_digest = cas::FromProto(p.state());
  vault::v1::AuditEntry entry = audit::MakeEntry(
      p.source_vault(), "agent.migrate.in", p.agent_id(), vault::v1::AuditEntry::ALLOWED,
      p.spec().purpose(),
      {{"from", p.source_vault()},
       {"transfer_id", TransferText(last.transfer_id())},
       {"hop", absl::StrCat(v->hop)},
       {"state", state_digest.ok() ? state_digest->ToString() : "(invalid digest)"},
       {"state_in_commit", state != nullptr ? "yes" : "no"},
       {"messages", absl::StrCat(mailbox.has_value() ? mailbox->mailbox_size() : 0)},
       {"grants", grants},
       {"narrowed", static_cast<int>(record.grants_size()) != static_cast<int>(v->grants.size())
                        ? "yes"
                        : "no"}});
  if (p.spec().sandbox() == "container") {
    // A container agent's code is its image: the journey shows which (docs/containers.md).
    vault::v1::AuditEntry::Detail* image = entry.add_details();
    image->set_key("image");
    image->set_value(
        absl::StrCat("sha256:", absl::BytesToHexString(p.spec().code_digest().sha256())));
  }
  // The commit point: record, transfer id and audit entry in one durable write.
  const std::string transfer_bytes = t.SerializeAsString();
  VAULT_RETURN_IF_ERROR(
      deps_.port->CommitArrival(record, std::move(entry), [&](rocksdb::WriteBatch* batch) {
        batch->Put(deps_.db->Handle(kTransfers), storage::ToSlice(last.transfer_id()),
                   storage::ToSlice(transfer_bytes));
        deps_.port->AddArrivalMailbox(batch, p.agent_id(),
                                      mailbox.has_value() ? &*mailbox : nullptr);
      }));
  // Committed: from here on the answer is the receipt, whatever happens to the start.
  // The process started at the Offer, if it was started for exactly this hop, is adopted.
  agent::AgentRef held =
      TakePrestart({p.source_vault(), last.transfer_id()}, PrestartKey(p, record.constraints()));
  const bool prestarted = held != nullptr;
  const absl::Time committed = absl::Now();
  // Its RUNNING state need not be synced: the committed record starts it again after a crash.
  // A held process is adopted now, and reads its first frame once the answer has left: its
  // first steps (typically reading its state back) then do not delay the answer.
  absl::Status launched = deps_.port->StartArrival(held, std::move(record), after_answer);
  const absl::Time started = absl::Now();
  ForwardLocation(p.home_vault(), receipt, p.agent_id());
  const std::string transfer = TransferText(last.transfer_id());
  if (!launched.ok()) {
    common::LogWith(spdlog::level::err, {.agent = p.agent_id(), .transfer = transfer},
                    "agent {} arrived from {} but could not start: {}", p.agent_id(),
                    p.source_vault(), launched.ToString());
  } else {
    common::LogWith(spdlog::level::info, {.agent = p.agent_id(), .transfer = transfer},
                    "agent {} arrived from {} (transfer {}; commit {:.1f} ms, start {:.1f} ms{})",
                    p.agent_id(), p.source_vault(), transfer,
                    absl::ToDoubleMilliseconds(committed - commit_start),
                    absl::ToDoubleMilliseconds(started - committed),
                    prestarted ? ", its process started at the offer" : "");
  }
  return receipt;
}

absl::StatusOr<vault::v1::TransferStatusResponse> Migration::TransferStatus(
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

}  // namespace vault::migration
