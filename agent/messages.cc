// Messages between agents, here and across the federation (design §11, docs/messages.md).
//
// A message an agent sends is numbered (its per-sender sequence number, reserved in durable
// blocks so a restart never reuses one) and signed by this vault (messaging/signed_message.h).
// It is accepted once it is durable in the receiver's mailbox, here (AcceptMail) or at the
// member the receiver runs on (Messages.Deliver, found through the departed_to trail, the
// locations learnt from earlier deliveries, or Locate), or, when that member cannot be
// reached now, in the sender's outbox (unsent_), which a thread drains in order. Receivers
// drop a sequence number at or below the last one they accepted from that sender
// (ALREADY_EXISTS), so a retry after a lost answer never delivers twice. A hop carries the
// agent's mailbox, its seen numbers and its outbox (StoreMailbox; the destination adopts them
// in its Commit); what reaches the old vault afterwards is forwarded along the trail.
#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "agent/internal/host_call.h"
#include "agent/internal/runtime_impl.h"
#include "agent/internal/runtime_util.h"
#include "audit/log.h"
#include "cas/store.h"
#include "common/log_fields.h"
#include "common/status_macros.h"
#include "messaging/signed_message.h"
#include "spdlog/spdlog.h"

namespace vault::agent {

using vault::v1::AgentRecord;
using vault::v1::Grant;
using vault::v1::MessageRecord;
using vault::v1::SignedMessage;

namespace {

// Sequence numbers are reserved this many at a time (one synced record write per block).
constexpr uint64_t kSeqBlock = 1024;
// How long a send tries the receiver's vault before the message waits in the outbox.
constexpr absl::Duration kSendAttempt = absl::Seconds(2);
// How long a send waits for a receiver that is mid-hop here before it queues the message.
constexpr absl::Duration kInTransitWait = absl::Seconds(1);
// Members a message may be forwarded through along a trail.
constexpr uint32_t kMaxForwards = 16;
constexpr absl::Duration kUnsentMinBackoff = absl::Milliseconds(50);
constexpr absl::Duration kUnsentMaxBackoff = absl::Seconds(5);

// The outcome is not known, or the receiver cannot take it now: try again later.
bool Retryable(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kCancelled:
    case absl::StatusCode::kUnknown:
    case absl::StatusCode::kInternal:
      return true;
    default:
      return false;
  }
}

vault::v1::Message ToMessage(const SignedMessage& m, const MessageRecord& r, uint64_t id) {
  vault::v1::Message out;
  out.set_id(id);
  out.set_from(r.from());
  out.set_type(r.type());
  out.set_data(m.data());
  out.set_sent_unix_ms(r.sent_unix_ms());
  out.set_reply_to(r.reply_to());
  out.set_seq(r.seq());
  out.set_from_vault(r.sending_vault());
  out.set_from_principal(r.from_principal());
  out.set_signed_record(m.record());
  out.set_signature(m.signature());
  return out;
}

}  // namespace

messaging::MessageContext AgentRuntime::Impl::MessageChecks() const {
  messaging::MessageContext ctx;
  ctx.chain_context = BaseContext();
  ctx.vault_key = ctx.chain_context.vault_key;
  ctx.max_data_bytes = options_.config.max_frame_bytes();
  return ctx;
}

absl::StatusOr<uint64_t> AgentRuntime::Impl::NextSeqLocked(LiveAgent& live) {
  vault::v1::AgentCounters* counters = live.record.mutable_counters();
  if (live.next_seq == 0) live.next_seq = counters->message_seq() + 1;
  if (live.next_seq > counters->message_seq()) {
    const uint64_t before = counters->message_seq();
    counters->set_message_seq(live.next_seq + kSeqBlock - 1);
    if (absl::Status s = PersistLocked(live); !s.ok()) {
      counters->set_message_seq(before);
      return s;
    }
  }
  return live.next_seq++;
}

absl::StatusOr<uint64_t> AgentRuntime::Impl::SendMessage(
    const std::shared_ptr<LiveAgent>& live, const std::shared_ptr<LiveAgent>& to_local,
    const vault::v1::SendRequest& send, bool* queued,
    std::vector<std::pair<std::string, std::string>>* details) {
  *queued = false;
  const std::string to_id = to_local != nullptr ? to_local->id : send.to();
  if (to_local == nullptr && !ValidateAgentId(to_id).ok()) {
    // A name reaches only the live agents of this vault.
    return absl::NotFoundError(
        absl::StrCat("no agent ", send.to(), " that this agent may send to"));
  }
  absl::MutexLock send_lock(&live->send_mu);
  MessageRecord record;
  record.set_from(live->id);
  record.set_to(to_id);
  record.set_type(send.type());
  record.set_reply_to(send.reply_to());
  record.set_sending_vault(options_.vault_name);
  record.set_sent_unix_ms(absl::ToUnixMillis(absl::Now()));
  record.set_from_principal(live->principal);
  std::string chain;
  std::vector<Grant> sender_grants;
  {
    absl::MutexLock lock(&live->mu);
    VAULT_ASSIGN_OR_RETURN(uint64_t seq, NextSeqLocked(*live));
    record.set_seq(seq);
    const vault::v1::AgentSpec& spec = live->record.spec();
    if (!spec.name().empty()) record.add_from_addresses(spec.name());
    for (const std::string& g : spec.groups()) record.add_from_addresses(g);
    if (live->record.chain().links_size() > 0) live->record.chain().SerializeToString(&chain);
    sender_grants.assign(live->record.grants().begin(), live->record.grants().end());
  }
  VAULT_ASSIGN_OR_RETURN(
      SignedMessage signed_message,
      messaging::SignMessage(record, send.data(), std::move(chain), *deps_.vault_key));
  const uint64_t seq = record.seq();
  details->emplace_back("seq", absl::StrCat(seq));
  details->emplace_back("message", messaging::MessageHash(signed_message));
  auto queue = [&]() -> absl::StatusOr<uint64_t> {
    VAULT_RETURN_IF_ERROR(Enqueue(live->id, seq, signed_message));
    *queued = true;
    details->emplace_back("queued", "true");
    return seq;
  };
  // Behind messages that wait already: one sender's messages go in order.
  if (UnsentCount(live->id) > 0) return queue();
  if (to_local != nullptr) {
    const absl::Time until = absl::Now() + kInTransitWait;
    for (;;) {
      absl::Status s = AcceptMail(to_local, signed_message, record, sender_grants).status();
      if (s.ok()) {
        details->emplace_back("delivered_at", options_.vault_name);
        return seq;
      }
      // The receiver is mid-hop: its outcome decides where the message goes.
      if (s.code() != absl::StatusCode::kUnavailable) return s;
      if (absl::Now() >= until) return queue();
      absl::SleepFor(absl::Milliseconds(5));
    }
  }
  if (absl::StatusOr<AgentRecord> stored = store_->Get(to_id);
      stored.ok() &&
      (stored->state() == vault::v1::TERMINATED || stored->state() == vault::v1::COMPLETED ||
       stored->state() == vault::v1::FAILED) &&
      host_calls::MayAddress(stored->principal(), stored->grants(), record, sender_grants)) {
    return absl::FailedPreconditionError(absl::StrCat("agent ", to_id, " has ended"));
  }
  if (signed_message.chain().empty()) {
    // A child agent: nothing but this vault vouches for it, so its messages stay here.
    return absl::NotFoundError(
        absl::StrCat("no agent ", to_id,
                     " on this vault (an agent spawned by another agent reaches only the "
                     "agents of its own vault)"));
  }
  absl::StatusOr<vault::v1::DeliverResponse> r =
      RouteRemote(signed_message, record, absl::Now() + kSendAttempt);
  if (r.ok()) {
    details->emplace_back("delivered_at", r->delivered_at());
    return seq;
  }
  if (r.status().code() == absl::StatusCode::kAlreadyExists) return seq;
  if (Retryable(r.status().code())) return queue();
  if (r.status().code() == absl::StatusCode::kNotFound ||
      r.status().code() == absl::StatusCode::kFailedPrecondition) {
    // (Whether another vault's agent ended is not this sender's to learn.)
    return absl::NotFoundError(absl::StrCat("no agent ", to_id, " that this agent may send to"));
  }
  return r.status();
}

absl::StatusOr<uint64_t> AgentRuntime::Impl::AcceptMail(const std::shared_ptr<LiveAgent>& to,
                                                        const SignedMessage& message,
                                                        const MessageRecord& record,
                                                        const std::vector<Grant>& sender_grants) {
  VAULT_RETURN_IF_ERROR(host_calls::ReceiverAccepts(*to, record, sender_grants));
  const bool from_agent = record.from() != "operator";
  uint64_t n;
  {
    absl::MutexLock lock(&to->mu);
    const vault::v1::AgentState state = to->record.state();
    if (state == vault::v1::TERMINATED || state == vault::v1::COMPLETED ||
        state == vault::v1::FAILED) {
      return absl::FailedPreconditionError(absl::StrCat("agent ", to->id, " has ended"));
    }
    // Mid-hop, just departed (its trail is written as it leaves), not started yet after a
    // restart, or arriving: the sender tries again.
    if (to->migrating_out || state == vault::v1::DEPARTED || state == vault::v1::MIGRATING ||
        !to->running || !to->mail_loaded) {
      return absl::UnavailableError(absl::StrCat("agent ", to->id, " is ",
                                                 to->migrating_out ? "migrating" : StateName(state),
                                                 " here: try again"));
    }
    if (from_agent) {
      if (to->writing_from.contains(record.from())) {
        return absl::UnavailableError(absl::StrCat("a message of agent ", record.from(),
                                                   " to agent ", to->id,
                                                   " is being written: try again"));
      }
      auto it = to->seen.find(record.from());
      const uint64_t seen = it == to->seen.end() ? 0 : it->second;
      if (record.seq() <= seen) {
        return absl::AlreadyExistsError(
            absl::StrCat("message ", record.seq(), " of agent ", record.from(), " to agent ",
                         to->id, " was accepted before (the last accepted is ", seen, ")"));
      }
    }
    if (to->mailbox.size() + to->accepting >= options_.config.mailbox_capacity()) {
      return absl::ResourceExhaustedError(
          absl::StrCat("the mailbox of agent ", to->id, " is full (",
                       options_.config.mailbox_capacity(), " messages): try again later"));
    }
    n = to->next_mail_n++;
    ++to->accepting;
    if (from_agent) to->writing_from.insert(record.from());
  }
  rocksdb::WriteBatch batch;
  mailboxes_->AddMail(&batch, to->id, n, message);
  if (from_agent) mailboxes_->SetSeen(&batch, to->id, record.from(), record.seq());
  absl::Status written = mailboxes_->Write(&batch);
  // An agent's message keeps its sender's number as its id (a reply names it in reply_to).
  const uint64_t id = from_agent ? record.seq() : next_message_id_.fetch_add(1);
  vault::v1::Message m = ToMessage(message, record, id);
  std::optional<LiveAgent::PendingReceive> waiting;
  {
    absl::MutexLock lock(&to->mu);
    if (from_agent) to->writing_from.erase(record.from());
    if (!written.ok()) {
      --to->accepting;
      return written;
    }
    const vault::v1::AgentState state = to->record.state();
    if (state == vault::v1::TERMINATED || state == vault::v1::COMPLETED ||
        state == vault::v1::FAILED) {
      // It ended meanwhile (its mailbox was removed): what was written goes too.
      --to->accepting;
      rocksdb::WriteBatch undo;
      mailboxes_->DeleteMail(&undo, to->id, n);
      if (from_agent) mailboxes_->DeleteSeen(&undo, to->id, record.from());
      (void)mailboxes_->WriteUnsynced(&undo);
      return absl::FailedPreconditionError(absl::StrCat("agent ", to->id, " has ended"));
    }
    if (from_agent) to->seen[record.from()] = record.seq();
    to->record.mutable_counters()->set_messages_received(to->record.counters().messages_received() +
                                                         1);
    // (Not while frozen for a hop: what it holds then travels with it.)
    if (to->pending_receive.has_value() && !to->migrating_out) {
      waiting = std::move(to->pending_receive);
      to->pending_receive.reset();
      // Handed from now on, before the agent can see it (and checkpoint past it).
      HandedLocked(*to, n);
    } else {
      to->mailbox.push_back({std::move(m), n});
      --to->accepting;
    }
  }
  if (waiting.has_value()) {
    // Counted as accepting until it is answered: a freeze waits for it.
    AnswerReceive(to, *std::move(waiting), std::move(m));
    absl::MutexLock lock(&to->mu);
    --to->accepting;
  }
  return id;
}

void AgentRuntime::Impl::HandedLocked(LiveAgent& live, uint64_t n) {
  if (n == 0) return;
  live.handed.push_back(n);
  // An agent that never checkpoints: the oldest beyond kMaxHanded are taken as read.
  if (live.handed.size() > kMaxHanded) AckHandedLocked(live, {live.handed.front()});
}

void AgentRuntime::Impl::AddAcksLocked(rocksdb::WriteBatch* batch, LiveAgent& live) {
  for (uint64_t n : live.ack_with_record) mailboxes_->DeleteMail(batch, live.id, n);
}

void AgentRuntime::Impl::AppliedAcksLocked(LiveAgent& live) {
  const absl::flat_hash_set<uint64_t> acked(live.ack_with_record.begin(),
                                            live.ack_with_record.end());
  std::erase_if(live.handed, [&](uint64_t n) { return acked.contains(n); });
}

void AgentRuntime::Impl::AckHandedLocked(LiveAgent& live, const std::vector<uint64_t>& ns) {
  const absl::flat_hash_set<uint64_t> acked(ns.begin(), ns.end());
  rocksdb::WriteBatch batch;
  std::vector<uint64_t> kept;
  for (uint64_t n : live.handed) {
    if (acked.contains(n)) {
      mailboxes_->DeleteMail(&batch, live.id, n);
    } else {
      kept.push_back(n);
    }
  }
  if (kept.size() == live.handed.size()) return;
  live.handed = std::move(kept);
  // Durable like the state that covers them: one lost with the machine would be given again
  // to an agent whose state already has it.
  if (absl::Status s = mailboxes_->Write(&batch); !s.ok()) {
    common::LogAgent(spdlog::level::warn, live.id, "agent {}: received messages stay stored: {}",
                     live.id, s.ToString());
  }
}

absl::Status AgentRuntime::Impl::LoadMailLocked(LiveAgent& live) {
  VAULT_ASSIGN_OR_RETURN(messaging::MailboxStore::Loaded loaded, mailboxes_->Load(live.id));
  live.mailbox.clear();
  for (messaging::MailboxStore::Mail& mail : loaded.mailbox) {
    absl::StatusOr<MessageRecord> r = messaging::ParseRecord(mail.message.record());
    if (!r.ok())
      return absl::DataLossError(absl::StrCat("a stored message: ", r.status().message()));
    const uint64_t id = r->from() != "operator" ? r->seq() : next_message_id_.fetch_add(1);
    live.mailbox.push_back({ToMessage(mail.message, *r, id), mail.n});
  }
  live.seen = std::move(loaded.seen);
  live.handed.clear();  // (it resumes from a state that covers none of them)
  live.next_mail_n = loaded.next_n;
  live.next_seq = 0;
  live.mail_loaded = true;
  return absl::OkStatus();
}

absl::StatusOr<vault::v1::DeliverResponse> AgentRuntime::Impl::RouteRemote(
    const SignedMessage& message, const MessageRecord& record, absl::Time deadline) {
  if (members_ == nullptr) {
    return absl::UnavailableError("this vault cannot reach members (no federation TLS material)");
  }
  const std::string& to = record.to();
  // Where to start: what an earlier delivery taught, else this vault's trail, else Locate.
  std::string target;
  bool cached = false;
  {
    absl::MutexLock lock(&mu_);
    if (auto it = locations_.find(to); it != locations_.end()) {
      target = it->second;
      cached = true;
    }
  }
  if (target.empty()) {
    absl::StatusOr<AgentRecord> r = store_->Get(to);
    if (r.ok() && r->state() == vault::v1::DEPARTED) {
      target = r->migration().to_vault();
    } else if (r.ok() && r->state() == vault::v1::MIGRATING) {
      // (Its destination may not have committed: where it ends up is known after the hop.)
      return absl::UnavailableError(absl::StrCat("agent ", to, " is migrating: try again"));
    } else if (r.ok() && (r->state() == vault::v1::TERMINATED ||
                          r->state() == vault::v1::COMPLETED || r->state() == vault::v1::FAILED)) {
      return absl::NotFoundError(absl::StrCat("agent ", to, " has ended"));
    } else if (r.ok()) {
      return absl::UnavailableError(absl::StrCat("agent ", to, " is not running here yet"));
    }
  }
  for (int attempt = 0;; ++attempt) {
    if (target.empty()) {
      Migrator* m = migrator();
      if (m == nullptr) return absl::NotFoundError(absl::StrCat("no agent ", to));
      VAULT_ASSIGN_OR_RETURN(target, m->WhereIs(to));
      cached = false;
    }
    if (target == options_.vault_name) {
      if (cached) {
        // It was here, and is not now: ask again.
        absl::MutexLock lock(&mu_);
        locations_.erase(to);
        target.clear();
        cached = false;
        continue;
      }
      return absl::UnavailableError(absl::StrCat("agent ", to, " is on its way here"));
    }
    vault::v1::DeliverRequest request;
    *request.mutable_message() = message;
    absl::StatusOr<vault::v1::DeliverResponse> r = members_->Deliver(target, request, deadline);
    if (r.ok()) {
      absl::MutexLock lock(&mu_);
      if (locations_.size() > 100000) locations_.clear();
      if (r->delivered_at() == options_.vault_name) {
        locations_.erase(to);  // (it is here: Find reaches it from now on)
      } else {
        locations_[to] = r->delivered_at();
      }
      return r;
    }
    if (cached && attempt == 0 && r.status().code() == absl::StatusCode::kNotFound) {
      // What was learnt is stale: ask again.
      absl::MutexLock lock(&mu_);
      locations_.erase(to);
      target.clear();
      continue;
    }
    return r.status();
  }
}

absl::StatusOr<vault::v1::DeliverResponse> AgentRuntime::Impl::DeliverFromMember(
    const vault::v1::DeliverRequest& request, const std::string& caller, absl::Time deadline) {
  const SignedMessage& message = request.message();
  auto refused = [&](absl::Status why, const std::string& to) {
    vault::v1::AuditEntry e = audit::MakeEntry(
        caller, "message.refused", to, vault::v1::AuditEntry::DENIED, std::string(why.message()),
        {{"message", messaging::MessageHash(message)},
         {"code", absl::StatusCodeToString(why.code())},
         {"forwards", absl::StrCat(request.forwards())}});
    if (why.code() == absl::StatusCode::kUnauthenticated ||
        why.code() == absl::StatusCode::kInvalidArgument) {
      e.set_priority(vault::v1::AuditEntry::HIGH);
    }
    Audit(std::move(e), /*durable=*/false);
    return why;
  };
  messaging::MessageVerifier verifier(&link_cache_);
  absl::StatusOr<messaging::VerifiedMessage> v = verifier.Verify(message, MessageChecks());
  if (!v.ok()) {
    // (Audited under the receiver it names, if the record says.)
    absl::StatusOr<MessageRecord> named = messaging::ParseRecord(message.record());
    return refused(v.status(), named.ok() ? named->to() : "");
  }
  const MessageRecord& r = v->record;
  // Between vaults only an agent's message with its own chain: the operator's and a child's
  // (it has none) stay on their vault, as nothing else vouches for who sent them.
  if (!v->chain.has_value()) {
    return refused(absl::UnauthenticatedError(absl::StrCat(
                       "message refused: ", r.from() == "operator"
                                                ? "an operator's message does not cross vaults"
                                                : "its sender has no chain of its own")),
                   r.to());
  }
  // Its principal must be one this vault trusts: an unknown key proves nothing about an id.
  if (!v->chain->root.has_value() || !policy_->Lookup(*v->chain->root).has_value()) {
    return refused(absl::UnauthenticatedError(
                       absl::StrCat("message refused: its sender's principal ", r.from_principal(),
                                    " is not trusted by ", options_.vault_name)),
                   r.to());
  }
  std::vector<Grant> sender_grants = v->chain->grants;
  std::shared_ptr<LiveAgent> to = Find(r.to());
  if (to != nullptr) {
    absl::Status s = AcceptMail(to, message, r, sender_grants).status();
    if (s.code() == absl::StatusCode::kAlreadyExists) {
      Audit(audit::MakeEntry(caller, "message.duplicate", r.to(), vault::v1::AuditEntry::DENIED,
                             std::string(s.message()),
                             {{"message", messaging::MessageHash(message)},
                              {"from", r.from()},
                              {"seq", absl::StrCat(r.seq())}}),
            /*durable=*/false);
      return s;
    }
    // The answer to UNAVAILABLE is retried: not audited each time.
    if (!s.ok()) return s.code() == absl::StatusCode::kUnavailable ? s : refused(s, r.to());
    Audit(audit::MakeEntry(caller, "message.delivered", r.to(), vault::v1::AuditEntry::ALLOWED, "",
                           {{"message", messaging::MessageHash(message)},
                            {"from", r.from()},
                            {"from_vault", r.sending_vault()},
                            {"seq", absl::StrCat(r.seq())},
                            {"type", r.type()},
                            {"bytes", absl::StrCat(message.data().size())},
                            {"forwards", absl::StrCat(request.forwards())}}),
          /*durable=*/false);
    vault::v1::DeliverResponse out;
    out.set_delivered_at(options_.vault_name);
    out.set_forwards(request.forwards());
    return out;
  }
  absl::StatusOr<AgentRecord> stored = store_->Get(r.to());
  if (!stored.ok()) {
    return refused(
        absl::NotFoundError(absl::StrCat("no agent ", r.to(), " on ", options_.vault_name)),
        r.to());
  }
  if (stored->hop() < request.min_hop()) {
    return refused(
        absl::FailedPreconditionError(absl::StrCat(
            "the trail of agent ", r.to(), " goes back: ", options_.vault_name, " knows it at hop ",
            stored->hop(), ", the member before at hop ", request.min_hop())),
        r.to());
  }
  if (!host_calls::MayAddress(stored->principal(), stored->grants(), r, sender_grants)) {
    return refused(
        absl::NotFoundError(absl::StrCat("no agent ", r.to(), " on ", options_.vault_name)),
        r.to());
  }
  const vault::v1::AgentState state = stored->state();
  if (state == vault::v1::TERMINATED || state == vault::v1::COMPLETED ||
      state == vault::v1::FAILED) {
    return refused(absl::FailedPreconditionError(absl::StrCat("agent ", r.to(), " has ended")),
                   r.to());
  }
  if (state != vault::v1::DEPARTED) {
    // Migrating, arriving, or not started yet after a restart: the sender tries again.
    return absl::UnavailableError(absl::StrCat("agent ", r.to(), " is ", StateName(state), " on ",
                                               options_.vault_name, ": try again"));
  }
  // It went on: forward along the trail.
  if (request.forwards() + 1 > kMaxForwards || members_ == nullptr) {
    return refused(absl::FailedPreconditionError(absl::StrCat(
                       "message to agent ", r.to(), " not forwarded: it was forwarded ",
                       request.forwards(), " times already (at most ", kMaxForwards, ")")),
                   r.to());
  }
  const std::string next = stored->migration().to_vault();
  vault::v1::DeliverRequest forward;
  *forward.mutable_message() = message;
  forward.set_forwards(request.forwards() + 1);
  forward.set_min_hop(stored->hop());
  absl::StatusOr<vault::v1::DeliverResponse> out = members_->Deliver(next, forward, deadline);
  if (out.ok()) {
    Audit(audit::MakeEntry(caller, "message.forwarded", r.to(), vault::v1::AuditEntry::ALLOWED, "",
                           {{"message", messaging::MessageHash(message)},
                            {"from", r.from()},
                            {"seq", absl::StrCat(r.seq())},
                            {"to_vault", next},
                            {"hop", absl::StrCat(stored->hop())},
                            {"delivered_at", out->delivered_at()}}),
          /*durable=*/false);
  }
  return out;
}

// ---- The outbox ----

absl::Status AgentRuntime::Impl::LoadUnsent() {
  VAULT_ASSIGN_OR_RETURN(std::vector<std::string> senders, mailboxes_->AgentsWithOutbox());
  absl::MutexLock lock(&unsent_mu_);
  for (const std::string& sender : senders) {
    VAULT_ASSIGN_OR_RETURN(messaging::MailboxStore::Loaded l, mailboxes_->Load(sender));
    Unsent& u = unsent_[sender];
    for (auto& [seq, m] : l.outbox) u.messages.emplace_back(seq, std::move(m));
  }
  return absl::OkStatus();
}

size_t AgentRuntime::Impl::UnsentCount(const std::string& sender) {
  absl::MutexLock lock(&unsent_mu_);
  auto it = unsent_.find(sender);
  return it == unsent_.end() ? 0 : it->second.messages.size();
}

absl::Status AgentRuntime::Impl::Enqueue(const std::string& sender, uint64_t seq,
                                         const SignedMessage& message) {
  absl::MutexLock lock(&unsent_mu_);
  Unsent& u = unsent_[sender];
  if (u.messages.size() >= options_.config.mailbox_capacity()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("this agent has ", u.messages.size(),
                     " messages waiting for their receivers' vaults: try again later"));
  }
  rocksdb::WriteBatch batch;
  mailboxes_->AddOutbox(&batch, sender, seq, message);
  VAULT_RETURN_IF_ERROR(mailboxes_->Write(&batch));
  if (u.messages.empty()) u.next_try = absl::Now() + kUnsentMinBackoff;  // (else: its backoff)
  u.messages.emplace_back(seq, message);
  unsent_cv_.Signal();
  return absl::OkStatus();
}

void AgentRuntime::Impl::DropUnsent(const std::string& sender) {
  absl::MutexLock lock(&unsent_mu_);
  unsent_.erase(sender);
}

void AgentRuntime::Impl::UnsentLoop() {
  absl::MutexLock lock(&unsent_mu_);
  while (!unsent_stop_) {
    absl::Time now = absl::Now(), next = now + absl::Seconds(1);
    // The sender that has waited longest goes first.
    std::string sender;
    absl::Time earliest = absl::InfiniteFuture();
    for (const auto& [id, u] : unsent_) {
      if (u.messages.empty()) continue;
      if (u.next_try <= now && u.next_try < earliest) {
        sender = id;
        earliest = u.next_try;
      }
      next = std::min(next, u.next_try);
    }
    if (sender.empty()) {
      unsent_cv_.WaitWithDeadline(&unsent_mu_, next);
      continue;
    }
    Unsent& u = unsent_[sender];
    auto [seq, message] = u.messages.front();
    unsent_mu_.Unlock();
    absl::Status outcome = DeliverUnsent(sender, message);
    unsent_mu_.Lock();
    auto it = unsent_.find(sender);
    if (it == unsent_.end() || it->second.messages.empty() ||
        it->second.messages.front().first != seq) {
      continue;  // it departed meanwhile (its outbox went with it)
    }
    if (Retryable(outcome.code()) || outcome.code() == absl::StatusCode::kResourceExhausted) {
      it->second.backoff = std::clamp(it->second.backoff * 2, kUnsentMinBackoff, kUnsentMaxBackoff);
      it->second.next_try = absl::Now() + it->second.backoff;
      continue;
    }
    it->second.messages.pop_front();
    it->second.backoff = absl::ZeroDuration();
    it->second.next_try = absl::Now();
    if (it->second.messages.empty()) unsent_.erase(it);
    rocksdb::WriteBatch batch;
    mailboxes_->DeleteOutbox(&batch, sender, seq);
    (void)mailboxes_->WriteUnsynced(&batch);
  }
}

absl::Status AgentRuntime::Impl::DeliverUnsent(const std::string& sender,
                                               const SignedMessage& message) {
  absl::StatusOr<MessageRecord> record = messaging::ParseRecord(message.record());
  if (!record.ok()) return record.status();
  if (std::shared_ptr<LiveAgent> from = Find(sender); from != nullptr) {
    absl::MutexLock lock(&from->mu);
    // Its outbox travels with it: not drained here while it is frozen for a hop.
    if (from->migrating_out || from->record.state() == vault::v1::MIGRATING) {
      return absl::UnavailableError("the sender is frozen for a hop");
    }
  }
  absl::Status outcome;
  std::string delivered_at;
  if (std::shared_ptr<LiveAgent> to = Find(record->to()); to != nullptr) {
    // The sender's grants as this vault holds them (its record: it ran here when it sent).
    std::vector<Grant> sender_grants;
    if (absl::StatusOr<AgentRecord> from = store_->Get(sender); from.ok()) {
      sender_grants.assign(from->grants().begin(), from->grants().end());
    }
    outcome = AcceptMail(to, message, *record, sender_grants).status();
    delivered_at = options_.vault_name;
  } else {
    absl::StatusOr<vault::v1::DeliverResponse> r =
        RouteRemote(message, *record, absl::Now() + kSendAttempt);
    outcome = r.status();
    if (r.ok()) delivered_at = r->delivered_at();
  }
  if (outcome.ok() || outcome.code() == absl::StatusCode::kAlreadyExists) {
    Audit(audit::MakeEntry(sender, "message.sent", record->to(), vault::v1::AuditEntry::ALLOWED,
                           "delivered from the outbox",
                           {{"message", messaging::MessageHash(message)},
                            {"seq", absl::StrCat(record->seq())},
                            {"delivered_at", delivered_at}}),
          /*durable=*/false);
    return absl::OkStatus();
  }
  if (Retryable(outcome.code()) || outcome.code() == absl::StatusCode::kResourceExhausted) {
    return outcome;
  }
  // Refused for good (the receiver ended, or its grants no longer take it).
  vault::v1::AuditEntry e = audit::MakeEntry(
      sender, "message.undeliverable", record->to(), vault::v1::AuditEntry::DENIED,
      std::string(outcome.message()),
      {{"message", messaging::MessageHash(message)}, {"seq", absl::StrCat(record->seq())}});
  e.set_priority(vault::v1::AuditEntry::HIGH);
  Audit(std::move(e), /*durable=*/true);
  AppendLog(sender, "warn",
            absl::StrCat("message ", record->seq(), " (", record->type(), ") to agent ",
                         record->to(), " could not be delivered: ", outcome.message()),
            0);
  return outcome;
}

// ---- Hops ----

absl::StatusOr<std::optional<cas::Digest>> AgentRuntime::Impl::StoreMailbox(const AgentRef& agent,
                                                                            bool covers_handed) {
  absl::flat_hash_set<uint64_t> covered;  // handed, and covered by the state that travels
  {
    // Deliveries past their checks land before the mailbox is read.
    absl::MutexLock lock(&agent->mu);
    LiveAgent* a = agent.get();
    auto settled = [a]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return a->accepting == 0; };
    if (!agent->mu.AwaitWithDeadline(absl::Condition(&settled), absl::Now() + absl::Seconds(10))) {
      return absl::UnavailableError("deliveries to the agent did not finish within 10 s");
    }
    if (covers_handed) covered.insert(agent->handed.begin(), agent->handed.end());
  }
  VAULT_ASSIGN_OR_RETURN(vault::v1::MailboxTransfer t, mailboxes_->TransferOf(agent->id, covered));
  if (t.mailbox_size() == 0 && t.seen_size() == 0 && t.outbox_size() == 0) return std::nullopt;
  const std::string bytes = t.SerializeAsString();
  cas::Digest d = cas::Digest::Of(bytes);
  VAULT_RETURN_IF_ERROR(cas::PutObject(*deps_.cas, d, bytes).status());
  return d;
}

absl::StatusOr<vault::v1::MailboxTransfer> AgentRuntime::Impl::ReadArrivalMailbox(
    const std::string& agent_id, const vault::v1::Digest& digest) {
  VAULT_ASSIGN_OR_RETURN(cas::Digest d, ToDigest(digest));
  VAULT_ASSIGN_OR_RETURN(std::string bytes, deps_.cas->ReadAll(d));
  vault::v1::MailboxTransfer t;
  if (!t.ParseFromString(bytes)) return absl::InvalidArgumentError("the mailbox does not parse");
  // Each as it was when it was sent (a sender's chain that expired or was revoked since does
  // not make its accepted messages, or the receiver's hop, void).
  messaging::MessageVerifier verifier(&link_cache_);
  messaging::MessageContext base = MessageChecks();
  base.chain_context.link_revoked = nullptr;
  base.chain_context.agent_revoked = nullptr;
  auto as_sent = [&base](const SignedMessage& m) {
    messaging::MessageContext ctx = base;
    if (absl::StatusOr<MessageRecord> r = messaging::ParseRecord(m.record()); r.ok()) {
      ctx.chain_context.now = absl::FromUnixMillis(r->sent_unix_ms());
    }
    return ctx;
  };
  for (const SignedMessage& m : t.mailbox()) {
    absl::StatusOr<messaging::VerifiedMessage> v = verifier.Verify(m, as_sent(m));
    if (!v.ok())
      return absl::InvalidArgumentError(
          absl::StrCat("a message in the mailbox: ", v.status().message()));
    if (v->record.to() != agent_id) {
      return absl::InvalidArgumentError(
          absl::StrCat("the mailbox holds a message to agent ", v->record.to()));
    }
  }
  for (const SignedMessage& m : t.outbox()) {
    // Signed by the vaults it was sent from, each then the sender's (its chain then ended there).
    absl::StatusOr<messaging::VerifiedMessage> v = verifier.Verify(m, as_sent(m));
    if (!v.ok())
      return absl::InvalidArgumentError(
          absl::StrCat("a message in the outbox: ", v.status().message()));
    if (v->record.from() != agent_id) {
      return absl::InvalidArgumentError(
          absl::StrCat("the outbox holds a message from agent ", v->record.from()));
    }
  }
  return t;
}

void AgentRuntime::Impl::AddArrivalMailbox(rocksdb::WriteBatch* batch, const std::string& agent_id,
                                           const vault::v1::MailboxTransfer* transfer) {
  mailboxes_->DeleteAgent(batch, agent_id);
  if (transfer != nullptr) mailboxes_->AddTransfer(batch, agent_id, *transfer);
}

void AgentRuntime::Impl::AdoptArrivalOutbox(const std::string& agent_id) {
  absl::StatusOr<messaging::MailboxStore::Loaded> l = mailboxes_->Load(agent_id);
  if (!l.ok() || l->outbox.empty()) return;
  absl::MutexLock lock(&unsent_mu_);
  Unsent& u = unsent_[agent_id];
  u.messages.clear();
  for (auto& [seq, m] : l->outbox) u.messages.emplace_back(seq, std::move(m));
  u.next_try = absl::Now();
  unsent_cv_.Signal();
}

void AgentRuntime::Impl::ForgetReceived(const std::string& agent_id) {
  rocksdb::WriteBatch batch;
  mailboxes_->DeleteAgent(&batch, agent_id, /*keep_outbox=*/true);
  (void)mailboxes_->WriteUnsynced(&batch);
}

void AgentRuntime::Impl::ForgetMailbox(const std::string& agent_id) {
  DropUnsent(agent_id);
  rocksdb::WriteBatch batch;
  mailboxes_->DeleteAgent(&batch, agent_id);
  (void)mailboxes_->WriteUnsynced(&batch);
}

}  // namespace vault::agent
