// Host calls between agents: send (to an agent, or the operator's waiting query), receive (from
// the mailbox, or waiting for a message), share (an object with other agents). Another principal's
// agent is addressable only through grants naming it exactly, on both sides (RFC-0006 §9).
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "agent/internal/host_call.h"
#include "agent/internal/runtime_util.h"
#include "capability/grant.h"
#include "common/status_macros.h"

namespace vault::agent {

using vault::v1::Grant;
using vault::v1::HostRequest;
using vault::v1::HostResponse;

namespace {

// Does some grant of `kind` name exactly `agent` (not "*")? Whatever its message types: this
// decides whether another principal's agent is visible at all, not what may be sent to it.
bool NamesExactly(const std::vector<Grant>& grants, Grant::Kind kind, const std::string& agent) {
  for (const Grant& g : grants) {
    if (g.kind() == kind && g.agent() == agent) return true;
  }
  return false;
}

// What a grant held by an agent of `principal` may call `agent` (docs/spec.md): its id, and when
// it is of the same principal, its name and each of its groups. Names never reach across
// principals: another principal's agent is addressed by its id only.
std::vector<std::string> AddressesOf(LiveAgent& agent, const std::string& principal) {
  std::vector<std::string> out = {agent.id};
  if (agent.principal != principal) return out;
  absl::MutexLock lock(&agent.mu);
  const vault::v1::AgentSpec& spec = agent.record.spec();
  if (!spec.name().empty()) out.push_back(spec.name());
  out.insert(out.end(), spec.groups().begin(), spec.groups().end());
  return out;
}

// The first grant of `kind` to or from one of `addresses` with `type` that `live` holds, else
// the one naming the first address (what a denial reports).
Grant MessageGrant(LiveAgent& live, Grant::Kind kind, const std::vector<std::string>& addresses,
                   const std::string& type, bool* allowed) {
  absl::MutexLock lock(&live.mu);
  for (const std::string& address : addresses) {
    Grant g = MakeGrant(kind);
    g.set_agent(address);
    g.add_message_types(type);
    if (live.authority != nullptr && live.authority->Allows(g)) {
      *allowed = true;
      return g;
    }
  }
  *allowed = false;
  Grant g = MakeGrant(kind);
  g.set_agent(addresses.front());
  g.add_message_types(type);
  return g;
}

}  // namespace

namespace host_calls {

void AuthorizeSend(HostCallContext& ctx) {
  const HostRequest& request = ctx.request;
  HostCall& c = ctx.call;
  c.subject = request.send().to();
  if (request.send().to() == "operator") return;
  // The sender needs SEND {to, [type]}; the receiver's RECEIVE {from, [type]} is checked by the
  // handler. A malformed type ([a-z0-9._-]{1,64}; "vault.*" is the vault's own, except
  // "vault.answer") is a bad call, not a denial.
  c.status = capability::ValidateMessageType(request.send().type());
  if (!c.status.ok()) return;
  // `to` is an id, or a name among the sender's principal's agents; a grant may name the
  // receiver by its id, name or group.
  std::vector<std::string> addresses = {request.send().to()};
  if (std::shared_ptr<LiveAgent> to =
          ctx.services.Resolve(ctx.live->principal, request.send().to());
      to != nullptr && to != ctx.live) {
    c.subject = to->id;
    addresses = AddressesOf(*to, ctx.live->principal);
  }
  bool allowed;
  c.grant = MessageGrant(*ctx.live, Grant::SEND, addresses, request.send().type(), &allowed);
}

bool MayAddress(const std::string& to_principal,
                const google::protobuf::RepeatedPtrField<Grant>& to_grants,
                const vault::v1::MessageRecord& record, const std::vector<Grant>& sender_grants) {
  if (to_principal == record.from_principal()) return true;
  const std::vector<Grant> receiver(to_grants.begin(), to_grants.end());
  return NamesExactly(sender_grants, Grant::SEND, record.to()) &&
         NamesExactly(receiver, Grant::RECEIVE, record.from());
}

absl::Status ReceiverAccepts(LiveAgent& to, const vault::v1::MessageRecord& record,
                             const std::vector<Grant>& sender_grants) {
  if (record.from() == "operator") return absl::OkStatus();
  {
    // Its authority comes with its start: until then (a restart, an arrival) no answer is final.
    absl::MutexLock lock(&to.mu);
    if (to.authority == nullptr) {
      return absl::UnavailableError(
          absl::StrCat("agent ", to.id, " is not started here yet: try again"));
    }
  }
  // Isolation (RFC-0006 §9): another principal's agent is addressable only through grants
  // naming it exactly, on both sides; otherwise it is as if it did not exist.
  const bool same_principal = to.principal == record.from_principal();
  std::vector<Grant> receiver_grants;
  {
    absl::MutexLock lock(&to.mu);
    receiver_grants.assign(to.record.grants().begin(), to.record.grants().end());
  }
  if (!same_principal && (!NamesExactly(sender_grants, Grant::SEND, to.id) ||
                          !NamesExactly(receiver_grants, Grant::RECEIVE, record.from()))) {
    return absl::NotFoundError(
        absl::StrCat("no agent ", record.to(), " that this agent may send to"));
  }
  // The receiver may name the sender by its id, or (same principal) its name or a group.
  std::vector<std::string> addresses = {record.from()};
  if (same_principal) {
    addresses.insert(addresses.end(), record.from_addresses().begin(),
                     record.from_addresses().end());
  }
  bool accepts;
  (void)MessageGrant(to, Grant::RECEIVE, addresses, record.type(), &accepts);
  if (!accepts) {
    return absl::PermissionDeniedError(
        absl::StrCat("denied: agent ", to.id, " does not accept \"", record.type(),
                     "\" messages from ", record.from(), " (it has no receive grant for it)"));
  }
  return absl::OkStatus();
}

void AuthorizeShare(HostCallContext& ctx) {
  ctx.call.subject = DigestText(ctx.request.share().digest());
}

void Send(HostCallContext& ctx) {
  HostCallServices& s = ctx.services;
  const std::shared_ptr<LiveAgent> live = ctx.live;
  const HostRequest& request = ctx.request;
  HostCall& c = ctx.call;
  HostResponse& resp = c.response;
  const auto& send = request.send();
  c.bytes = send.data().size();
  if (send.to() == "operator") {
    // Only as the answer to an operator's query addressed to this agent.
    c.status = s.AnswerQuery(send.reply_to(), live->id, send.type(), send.data());
    if (c.status.ok()) {
      resp.mutable_send()->set_message_id(send.reply_to());
      absl::MutexLock lock(&live->mu);  // an answer is a message sent, as the query was received
      live->record.mutable_counters()->set_messages_sent(live->record.counters().messages_sent() +
                                                         1);
    }
    return;
  }
  // An agent here is checked here; one elsewhere by the vault it runs on, which hides it in the
  // same way (docs/messages.md).
  std::shared_ptr<LiveAgent> to = s.Resolve(live->principal, send.to());
  if (to.get() == live.get()) {
    c.status =
        absl::NotFoundError(absl::StrCat("no agent ", send.to(), " that this agent may send to"));
    return;
  }
  bool queued = false;
  absl::StatusOr<uint64_t> seq = s.SendMessage(live, to, send, &queued, &c.details);
  if (!seq.ok()) {
    c.status = seq.status();
    return;
  }
  {
    absl::MutexLock lock(&live->mu);
    live->record.mutable_counters()->set_messages_sent(live->record.counters().messages_sent() + 1);
  }
  resp.mutable_send()->set_message_id(*seq);
  resp.mutable_send()->set_seq(*seq);
  resp.mutable_send()->set_queued(queued);
}

void Receive(HostCallContext& ctx) {
  const std::shared_ptr<LiveAgent> live = ctx.live;
  const HostRequest& request = ctx.request;
  HostCall& c = ctx.call;
  HostResponse& resp = c.response;
  absl::MutexLock lock(&live->mu);
  if (live->pending_receive.has_value()) {
    c.status = absl::FailedPreconditionError("a receive is already waiting");
    return;
  }
  if (!live->mailbox.empty()) {
    *resp.mutable_receive()->mutable_message() = std::move(live->mailbox.front().message);
    const uint64_t n = live->mailbox.front().n;
    live->mailbox.pop_front();
    ctx.services.HandedLocked(*live, n);
    c.subject = resp.receive().message().from();
    c.bytes = resp.receive().message().data().size();
    if (live->empty_receives > 0) {
      c.details.emplace_back("empty_receives", absl::StrCat(live->empty_receives));
      live->empty_receives = 0;
    }
  } else if (request.receive().timeout_ms() == 0) {
    resp.mutable_receive()->set_timed_out(true);
    ++live->empty_receives;  // counted, not an entry of its own (see LiveAgent)
    c.audited = false;
  } else {
    absl::Time now = absl::Now();
    live->pending_receive = LiveAgent::PendingReceive{
        request.call_id(), now + absl::Milliseconds(request.receive().timeout_ms()), now,
        std::move(ctx.request_bytes)};
    c.deferred = true;
  }
}

void Share(HostCallContext& ctx) {
  HostCallServices& s = ctx.services;
  const std::shared_ptr<LiveAgent> live = ctx.live;
  const HostRequest& request = ctx.request;
  HostCall& c = ctx.call;
  HostResponse& resp = c.response;
  const auto& share = request.share();
  // The sharer must be able to read it, and address every agent it shares with.
  Grant read = MakeGrant(Grant::READ);
  read.set_hash(share.digest().sha256());
  bool can_read;
  std::vector<Grant> grants;
  {
    absl::MutexLock lock(&live->mu);
    can_read = live->shared.contains(share.digest().sha256()) ||
               (live->authority != nullptr && live->authority->Allows(read));
    grants.assign(live->record.grants().begin(), live->record.grants().end());
  }
  if (!can_read) {
    c.status =
        absl::PermissionDeniedError("denied: an agent can share only an object it may read itself");
    return;
  }
  absl::StatusOr<cas::Digest> shared = ToDigest(share.digest());
  if (!shared.ok()) {
    c.status = shared.status();
    return;
  }
  std::vector<std::shared_ptr<LiveAgent>> targets;
  for (const std::string& id : share.agents()) {
    std::shared_ptr<LiveAgent> to = s.Resolve(live->principal, id);
    if (to == nullptr ||
        (to->principal != live->principal && !NamesExactly(grants, Grant::SEND, id))) {
      c.status =
          absl::NotFoundError(absl::StrCat("no agent ", id, " that this agent may share with"));
      return;
    }
    targets.push_back(std::move(to));
  }
  if (!c.status.ok()) return;
  // Each receiver holds it from now on (design §12): recorded, then confirmed in the CAS, so
  // that no collection takes it meanwhile.
  for (const auto& to : targets) {
    if (c.status = s.RecordObject(*to, *shared, 0); !c.status.ok()) return;
  }
  absl::StatusOr<bool> present = cas::TouchIfStored(s.cas(), *shared);
  if (!present.ok() || !*present) {
    c.status =
        present.ok() ? absl::NotFoundError("no such object in this vault's CAS") : present.status();
    return;
  }
  for (const auto& to : targets) {
    absl::MutexLock lock(&to->mu);
    to->shared.insert(share.digest().sha256());
  }
  c.subject = absl::StrCat(DigestText(share.digest()), " -> ", absl::StrJoin(share.agents(), ","));
  resp.mutable_share();
}

}  // namespace host_calls
}  // namespace vault::agent
