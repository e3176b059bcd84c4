#include "agent/effect_log.h"

#include <algorithm>
#include <utility>

#include "absl/base/internal/endian.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "capability/signing_domains.h"
#include "common/proto_util.h"
#include "common/sha256.h"
#include "common/status_macros.h"

namespace vault::agent {
namespace {

using vault::v1::EffectNode;

std::string Genesis(const vault::v1::EffectLog& log) {
  const absl::string_view nul("\0", 1);
  std::string start = common::Sha256::HashParts(
      {capability::kEffectLogDomain, log.agent_id(), nul, log.code_sha256(), log.principal(), nul,
       log.has_initial_state() ? "1" : "0",
       log.has_initial_state() ? common::Sha256::Hash(log.initial_state()) : std::string()});
  if (!log.has_snapshot()) return start;
  // A log rebased on an execution state starts from it too.
  return common::Sha256::HashParts({start, "snapshot", common::Sha256::Hash(log.snapshot())});
}

std::string Link(const EffectNode& n) {
  char seq[8];
  absl::big_endian::Store64(seq, n.seq());
  return common::Sha256::HashParts({n.prev(), absl::string_view(seq, 8), n.op(),
                                    absl::string_view("\0", 1), n.request_sha256(),
                                    n.response_sha256(), n.vault()});
}

std::string SignedBytes(absl::string_view agent_id, absl::string_view head) {
  return absl::StrCat(capability::kEffectLogDomain, agent_id, absl::string_view("\0", 1), head);
}

std::string Short(absl::string_view raw) { return absl::BytesToHexString(raw.substr(0, 8)); }

}  // namespace

EffectNode EffectLog::Prepare(absl::string_view op, absl::string_view vault,
                              absl::string_view request_sha256, vault::v1::HostResponse response) {
  EffectNode n;
  n.set_op(std::string(op));
  n.set_request_sha256(std::string(request_sha256));
  response.set_call_id(0);
  n.set_response(common::SerializeDeterministic(response));
  n.set_response_sha256(common::Sha256::Hash(n.response()));
  n.set_vault(std::string(vault));
  return n;
}

bool IsEffectLog(absl::string_view state) { return absl::StartsWith(state, kEffectLogMagic); }

std::string RequestDigest(const vault::v1::HostRequest& request) {
  vault::v1::HostRequest copy = request;
  copy.set_call_id(0);
  return common::Sha256::Hash(common::SerializeDeterministic(copy));
}

EffectLog::EffectLog(Owner owner, std::optional<std::string> initial_state) {
  log_.set_agent_id(std::move(owner.agent_id));
  log_.set_code_sha256(std::move(owner.code_sha256));
  log_.set_principal(std::move(owner.principal));
  log_.set_has_initial_state(initial_state.has_value());
  if (initial_state.has_value()) log_.set_initial_state(*std::move(initial_state));
  log_.set_head(Genesis(log_));
  initial_sha256_ = common::Sha256::Hash(log_.initial_state());
  bytes_ = log_.ByteSizeLong();
}

void EffectLog::Append(EffectNode n) {
  if (overflowed_) return;
  n.set_seq(size());
  n.set_prev(log_.head());
  bytes_ += n.ByteSizeLong() + 8;
  if (bytes_ > kMaxEffectLogBytes) {
    // Nothing can be written out any more: the memory goes back now.
    overflowed_ = true;
    log_.clear_nodes();
    return;
  }
  log_.set_head(Link(n));
  *log_.add_nodes() = std::move(n);
}

void EffectLog::Rebase(std::string snapshot) {
  log_.clear_nodes();
  log_.set_has_snapshot(true);
  log_.set_snapshot(std::move(snapshot));
  log_.set_head(Genesis(log_));
  snapshot_sha256_ = common::Sha256::Hash(log_.snapshot());
  bytes_ = log_.ByteSizeLong() - log_.snapshot().size();  // the snapshot has a limit of its own
  overflowed_ = false;
}

void EffectLog::DropLast() {
  if (log_.nodes_size() == 0) return;
  const EffectNode& last = log_.nodes(log_.nodes_size() - 1);
  bytes_ -= std::min(bytes_, last.ByteSizeLong() + 8);
  log_.set_head(last.prev());
  log_.mutable_nodes()->RemoveLast();
}

absl::StatusOr<std::string> EffectLog::WriteOut(const capability::PrivateKey& key,
                                                absl::string_view vault, const Extra* extra) const {
  if (overflowed_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the agent's effect log passed ", kMaxEffectLogBytes >> 20,
        " MiB: it can no longer checkpoint or move (end it and spawn it again from a state)"));
  }
  vault::v1::EffectLog out = log_;
  if (extra != nullptr) {
    EffectNode n = Prepare(extra->op, vault, extra->request_sha256, extra->response);
    n.set_seq(size());
    n.set_prev(out.head());
    out.set_head(Link(n));
    *out.add_nodes() = std::move(n);
  }
  out.set_signer(key.public_key().raw());
  VAULT_ASSIGN_OR_RETURN(std::string sig, key.Sign(SignedBytes(out.agent_id(), out.head())));
  out.set_signature(std::move(sig));
  return absl::StrCat(kEffectLogMagic, common::SerializeDeterministic(out));
}

absl::StatusOr<EffectLog> EffectLog::Read(
    absl::string_view object, const Owner& owner,
    const std::function<bool(absl::string_view raw_key)>& trusted) {
  if (!IsEffectLog(object)) {
    return absl::InvalidArgumentError(
        "effect log: not an effect log (no vault-effect-log/1 header)");
  }
  vault::v1::EffectLog in;
  if (!in.ParseFromArray(object.data() + kEffectLogMagic.size(),
                         static_cast<int>(object.size() - kEffectLogMagic.size()))) {
    return absl::InvalidArgumentError("effect log: does not parse");
  }
  if (in.agent_id() != owner.agent_id) {
    return absl::InvalidArgumentError(
        absl::StrCat("effect log: it is agent ", in.agent_id(), "'s, not ", owner.agent_id, "'s"));
  }
  if (in.code_sha256() != owner.code_sha256) {
    return absl::InvalidArgumentError(absl::StrCat(
        "effect log: it is of the code sha256:", absl::BytesToHexString(in.code_sha256()),
        ", not of this agent's sha256:", absl::BytesToHexString(owner.code_sha256)));
  }
  if (in.principal() != owner.principal) {
    return absl::InvalidArgumentError(absl::StrCat("effect log: it is of an agent of ",
                                                   in.principal(), ", not of ", owner.principal));
  }
  std::string head = Genesis(in);
  for (int i = 0; i < in.nodes_size(); ++i) {
    const EffectNode& n = in.nodes(i);
    if (n.seq() != static_cast<uint64_t>(i)) {
      return absl::InvalidArgumentError(
          absl::StrCat("effect log: node ", i, " says it is effect ", n.seq()));
    }
    if (n.prev() != head) {
      return absl::InvalidArgumentError(absl::StrCat(
          "effect log: effect ", i, " (", n.op(), ") does not follow ",
          i == 0 ? std::string("the log's start (its agent or initial state was changed)")
                 : absl::StrCat("effect ", i - 1, " (the chain is broken there)")));
    }
    if (common::Sha256::Hash(n.response()) != n.response_sha256()) {
      return absl::InvalidArgumentError(
          absl::StrCat("effect log: effect ", i, " (", n.op(),
                       ")'s result does not match its digest (it was changed)"));
    }
    if (vault::v1::HostResponse r; !r.ParseFromString(n.response())) {
      return absl::InvalidArgumentError(
          absl::StrCat("effect log: effect ", i, " (", n.op(), ")'s result does not parse"));
    }
    head = Link(n);
  }
  if (head != in.head()) {
    return absl::InvalidArgumentError(absl::StrCat("effect log: its head ", Short(in.head()),
                                                   " is not its chain's (", Short(head),
                                                   "): a result was changed"));
  }
  if (!trusted(in.signer())) {
    return absl::PermissionDeniedError(
        absl::StrCat("effect log: signed by ed25519:", absl::BytesToHexString(in.signer()),
                     ", which is neither this vault nor a member of its federation"));
  }
  absl::StatusOr<capability::PublicKey> signer = capability::PublicKey::FromRaw(in.signer());
  if (!signer.ok()) return absl::InvalidArgumentError("effect log: its signer is not a key");
  if (absl::Status v = signer->Verify(SignedBytes(in.agent_id(), in.head()), in.signature());
      !v.ok()) {
    return absl::UnauthenticatedError(
        "effect log: its signature does not verify (changed after it was written out)");
  }
  EffectLog log(owner, std::nullopt);
  log.bytes_ = object.size() - in.snapshot().size();
  in.clear_signer();
  in.clear_signature();
  log.initial_sha256_ = common::Sha256::Hash(in.initial_state());
  if (in.has_snapshot()) log.snapshot_sha256_ = common::Sha256::Hash(in.snapshot());
  log.log_ = std::move(in);
  return log;
}

}  // namespace vault::agent
