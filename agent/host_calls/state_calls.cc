// Host calls on the agent's own state: get_state, checkpoint.
#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "agent/internal/host_call.h"
#include "agent/internal/runtime_util.h"
#include "common/status_macros.h"

namespace vault::agent {

absl::StatusOr<std::string> SnapshotBytes(HostCallServices& services, const std::string& state,
                                          const vault::v1::Digest* named) {
  if (named == nullptr) return state;
  VAULT_ASSIGN_OR_RETURN(cas::Digest d, ToDigest(*named));
  if (d.size() > kMaxSnapshotBytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the snapshot is ", d.size(), " bytes; a snapshot may have at most ", kMaxSnapshotBytes));
  }
  absl::StatusOr<std::string> bytes = services.cas().ReadAll(d);
  if (absl::IsNotFound(bytes.status())) {
    return absl::NotFoundError(
        absl::StrCat("the snapshot ", d.ToString(), " is not in this vault's CAS"));
  }
  return bytes;
}

}  // namespace vault::agent

namespace vault::agent::host_calls {

using vault::v1::Grant;
using vault::v1::HostRequest;
using vault::v1::HostResponse;

void AuthorizeCheckpoint(HostCallContext& ctx) {
  const HostRequest& request = ctx.request;
  HostCall& c = ctx.call;
  if (!request.checkpoint().has_state_digest()) return;
  // A state already in the CAS: the agent must be able to read it (as cas_get).
  const vault::v1::Digest& d = request.checkpoint().state_digest();
  c.subject = DigestText(d);
  if (!request.checkpoint().state().empty()) {
    c.status = absl::InvalidArgumentError("a checkpoint carries its state or names it, not both");
    return;
  }
  Grant g = MakeGrant(Grant::READ);
  g.set_hash(d.sha256());
  c.grant = g;
  absl::MutexLock lock(&ctx.live->mu);
  c.allowed_without_grant =
      MayReadLocked(*ctx.live, d.sha256()) || ctx.live->snapshot_objects.contains(d.sha256());
}

void GetState(HostCallContext& ctx) {
  HostCallServices& s = ctx.services;
  const std::shared_ptr<LiveAgent> live = ctx.live;
  const HostRequest& request = ctx.request;
  HostCall& c = ctx.call;
  HostResponse& resp = c.response;
  vault::v1::Digest d;
  bool has;
  // An agent that replays: its state is its effect log; what it reads is the state it was
  // spawned with, kept in the log (or, asked by its runner, the snapshot the log starts from).
  std::optional<std::string> kept;  // the range asked for, for an agent that replays
  const bool snapshot = request.get_state().snapshot();
  {
    absl::MutexLock lock(&live->mu);
    if (snapshot && live->effects == nullptr) {
      has = false;
    } else if (live->effects != nullptr) {
      has = snapshot ? live->effects->has_snapshot() : live->effects->has_initial_state();
      if (has) {
        const std::string& whole =
            snapshot ? live->effects->snapshot() : live->effects->initial_state();
        d.set_sha256(snapshot ? live->effects->snapshot_sha256()
                              : live->effects->initial_state_sha256());
        d.set_size(whole.size());
        const uint64_t offset = std::min<uint64_t>(request.get_state().offset(), whole.size());
        const uint64_t limit = request.get_state().limit();
        const uint64_t left = whole.size() - offset;
        const uint64_t want = limit == 0 ? left : std::min<uint64_t>(limit, left);
        if (want <= ctx.max_payload)
          kept = whole.substr(offset, want);
        else
          kept = std::string();  // refused below, by size
      }
    } else {
      has = live->record.has_state();
      d = live->record.state_digest();
    }
  }
  resp.mutable_get_state()->set_present(has);
  if (!has) return;
  c.subject = DigestText(d);
  absl::StatusOr<cas::Digest> digest = ToDigest(d);
  if (!digest.ok()) {
    c.status = digest.status();
    return;
  }
  // A range of it (all of it by default), which must fit in a frame.
  const uint64_t size = digest->size();
  const uint64_t offset = request.get_state().offset();
  const uint64_t limit = request.get_state().limit();
  if (offset > size) {
    c.status = absl::OutOfRangeError(
        absl::StrCat("offset ", offset, " is past the end of the state (", size, " bytes)"));
    return;
  }
  const uint64_t want = limit == 0 ? size - offset : std::min(limit, size - offset);
  if (want > ctx.max_payload) {
    c.status = absl::ResourceExhaustedError(
        absl::StrCat("the range is ", want, " bytes of a state of ", size, "; read at most ",
                     ctx.max_payload, " per call (get_state offset/limit)"));
    return;
  }
  std::string data;
  data.reserve(want);
  if (kept.has_value()) {
    data = *std::move(kept);
  } else if (want > 0) {
    c.status = s.cas().Read(*digest, offset, want, 1 << 20, [&](uint64_t, absl::string_view piece) {
      data.append(piece.data(), piece.size());
      return absl::OkStatus();
    });
    if (!c.status.ok()) return;
  }
  c.bytes = data.size();
  vault::v1::StateResult* out = resp.mutable_get_state();
  *out->mutable_digest() = d;
  out->set_size(size);
  out->set_state(std::move(data));
}

void Checkpoint(HostCallContext& ctx) {
  HostCallServices& s = ctx.services;
  const std::shared_ptr<LiveAgent> live = ctx.live;
  const HostRequest& request = ctx.request;
  HostCall& c = ctx.call;
  HostResponse& resp = c.response;
  cas::Digest d;
  if (request.checkpoint().has_state_digest()) {
    // Named by digest (the agent may read it: checked above): it must be stored here.
    absl::StatusOr<cas::Digest> named = ToDigest(request.checkpoint().state_digest());
    absl::StatusOr<bool> present =
        named.ok() ? s.cas().Contains(*named) : absl::StatusOr<bool>(named.status());
    if (!present.ok() || !*present) {
      c.status = present.ok()
                     ? absl::NotFoundError(absl::StrCat("the checkpoint names ", named->ToString(),
                                                        ", which is not in this vault's CAS"))
                     : present.status();
      return;
    }
    d = *named;
  } else {
    const std::string& state = request.checkpoint().state();
    d = cas::Digest::Of(state);
    if (absl::Status put = cas::PutObject(s.cas(), d, state).status(); !put.ok()) {
      c.status = put;
      return;
    }
    c.bytes = state.size();
  }
  c.subject = d.ToString();
  // An agent whose sandbox snapshots (wasm): the state is its execution state, taken in this
  // call; its log starts again from it (this call, which its next start makes again, first).
  // It becomes the agent's log only once it is stored, so a checkpoint that fails leaves the log
  // as it was.
  std::optional<EffectLog> rebased;
  std::vector<uint64_t> handed;  // the messages it had received: this state covers them
  {
    absl::MutexLock lock(&live->mu);
    if (live->snapshots && live->effects != nullptr) rebased.emplace(*live->effects);
    handed = live->handed;
  }
  if (rebased.has_value()) {
    absl::StatusOr<std::string> snap = SnapshotBytes(
        s, request.checkpoint().state(),
        request.checkpoint().has_state_digest() ? &request.checkpoint().state_digest() : nullptr);
    if (!snap.ok()) {
      c.status = snap.status();
      return;
    }
    rebased->Rebase(*std::move(snap));
  }
  // An agent that replays resumes from its effect log (up to this call, which its next start
  // makes again: a checkpoint is the same whenever it is made).
  absl::StatusOr<std::optional<cas::Digest>> log =
      s.StoreEffectLog(live, /*with_migrate=*/false, rebased.has_value() ? &*rebased : nullptr);
  if (!log.ok()) {
    c.status = log.status();
    return;
  }
  absl::MutexLock lock(&live->mu);
  if (rebased.has_value() && live->effects != nullptr) {
    live->effects = std::make_unique<EffectLog>(*std::move(rebased));
  }
  *live->record.mutable_state_digest() = FromDigest(log->value_or(d));
  live->record.set_has_state(true);
  live->record.mutable_counters()->set_checkpoints(live->record.counters().checkpoints() + 1);
  live->checkpoint_requested = false;
  // The messages this state covers leave the store in the record's own write.
  live->ack_with_record = std::move(handed);
  c.status = s.Persist(*live);
  *resp.mutable_checkpoint()->mutable_digest() = FromDigest(d);
}
}  // namespace vault::agent::host_calls
