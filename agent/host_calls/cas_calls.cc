// Host calls on the content-addressed store: cas_get, cas_put and the streaming put
// (cas_upload_start, cas_upload_append, cas_upload_finish), charged to the principal's storage
// quota.
#include <algorithm>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "agent/internal/host_call.h"
#include "agent/internal/runtime_util.h"
#include "common/status_macros.h"

namespace vault::agent {

using vault::v1::Grant;
using vault::v1::HostRequest;
using vault::v1::HostResponse;

namespace {

// Streaming CAS puts (cas_upload_*) an agent may have open at once.
constexpr size_t kMaxOpenUploads = 4;

}  // namespace

// One streaming CAS put of an agent (cas_upload_start/append/finish). The storage it reserved
// (`charged`) is given back by whoever removes it from LiveAgent::uploads, once.
struct HostUpload {
  HostUpload(cas::Digest d, bool state_) : digest(std::move(d)), state(state_) {}
  const cas::Digest digest;
  const bool state;      // the agent's own state (CasUploadStartRequest.state): no grant needed
  uint64_t charged = 0;  // set before it is published in LiveAgent::uploads, then constant

  absl::Mutex mu;  // one append or finish at a time
  // The CAS's upload (which verifies the content at Finish); null when the CAS held the object
  // when the upload started: then `hash` checks that the agent sent its bytes all the same.
  std::unique_ptr<cas::Upload> upload ABSL_GUARDED_BY(mu);
  cas::Sha256 hash ABSL_GUARDED_BY(mu);
  uint64_t received ABSL_GUARDED_BY(mu) = 0;
};

bool IsStateUpload(LiveAgent& live, const HostRequest& request) {
  uint64_t id;
  switch (request.call_case()) {
    case HostRequest::kCasUploadStart: {
      absl::MutexLock lock(&live.mu);
      return request.cas_upload_start().state() && live.snapshots;
    }
    case HostRequest::kCasUploadAppend:
      id = request.cas_upload_append().upload_id();
      break;
    case HostRequest::kCasUploadFinish:
      id = request.cas_upload_finish().upload_id();
      break;
    default:
      return false;
  }
  absl::MutexLock lock(&live.mu);
  auto it = live.uploads.find(id);
  return it != live.uploads.end() && it->second->state;
}

void DropUploads(HostCallServices& services, LiveAgent& live) {
  for (auto& [id, upload] : live.uploads) services.RefundStorage(live.principal, upload->charged);
  live.uploads.clear();
}

namespace host_calls {
namespace {

// The agent's open upload `id`, or NOT_FOUND.
absl::StatusOr<std::shared_ptr<HostUpload>> OpenUpload(LiveAgent& live, uint64_t id) {
  absl::MutexLock lock(&live.mu);
  auto it = live.uploads.find(id);
  if (it == live.uploads.end()) {
    return absl::NotFoundError(
        absl::StrCat("no open upload ", id, " (never started, finished or dropped)"));
  }
  return it->second;
}

}  // namespace

void AuthorizeCasGet(HostCallContext& ctx) {
  const HostRequest& request = ctx.request;
  HostCall& c = ctx.call;
  const std::string& h = request.cas_get().digest().sha256();
  c.subject = DigestText(request.cas_get().digest());
  Grant g = MakeGrant(Grant::READ);
  g.set_hash(h);
  c.grant = g;
  LiveAgent& live = *ctx.live;
  absl::MutexLock lock(&live.mu);
  // Its own code and state, and what it put or was shared with it, need no grant (a read grant
  // on the hash covers the rest).
  c.allowed_without_grant = live.shared.contains(h) ||
                            (live.record.has_state() && live.record.state_digest().sha256() == h) ||
                            live.record.spec().code_digest().sha256() == h;
}

void AuthorizeCasWrite(HostCallContext& ctx) {
  const HostRequest& request = ctx.request;
  HostCall& c = ctx.call;
  c.grant = MakeGrant(Grant::CAS_WRITE);
  // A runner's upload of its agent's snapshot (an agent whose sandbox snapshots) needs no grant:
  // the quota still counts it, and only a checkpoint or migrate may name what it stores.
  auto state_upload = [&](uint64_t id) {
    absl::MutexLock lock(&ctx.live->mu);
    auto it = ctx.live->uploads.find(id);
    return it != ctx.live->uploads.end() && it->second->state;
  };
  switch (request.call_case()) {
    case HostRequest::kCasUploadStart:
      c.subject = DigestText(request.cas_upload_start().digest());
      {
        absl::MutexLock lock(&ctx.live->mu);
        c.allowed_without_grant = request.cas_upload_start().state() && ctx.live->snapshots;
      }
      break;
    case HostRequest::kCasUploadAppend:
      c.subject = absl::StrCat("upload ", request.cas_upload_append().upload_id());
      c.allowed_without_grant = state_upload(request.cas_upload_append().upload_id());
      break;
    case HostRequest::kCasUploadFinish:
      c.subject = absl::StrCat("upload ", request.cas_upload_finish().upload_id());
      c.durable = !request.cas_upload_finish().abort();  // it stores an object
      c.allowed_without_grant = state_upload(request.cas_upload_finish().upload_id());
      break;
    default:
      break;
  }
}

void CasGet(HostCallContext& ctx) {
  HostCallServices& s = ctx.services;
  const HostRequest& request = ctx.request;
  HostCall& c = ctx.call;
  HostResponse& resp = c.response;
  absl::StatusOr<cas::Digest> digest = ToDigest(request.cas_get().digest());
  if (!digest.ok()) {
    c.status = digest.status();
    return;
  }
  uint64_t offset = request.cas_get().offset();
  uint64_t limit = request.cas_get().limit();
  if (offset > digest->size()) {
    c.status = absl::OutOfRangeError("offset past the end of the object");
    return;
  }
  uint64_t want = limit == 0 ? digest->size() - offset : std::min(limit, digest->size() - offset);
  if (want > ctx.max_payload) {
    c.status =
        absl::ResourceExhaustedError(absl::StrCat("the range is ", want, " bytes; read at most ",
                                                  ctx.max_payload, " per call (offset/limit)"));
    return;
  }
  std::string data;
  c.status = s.cas().Read(*digest, offset, want, 1 << 20, [&](uint64_t, absl::string_view piece) {
    data.append(piece.data(), piece.size());
    return absl::OkStatus();
  });
  if (!c.status.ok()) return;
  c.bytes = data.size();
  resp.mutable_cas_get()->set_size(digest->size());
  resp.mutable_cas_get()->set_data(std::move(data));
}

void CasPut(HostCallContext& ctx) {
  HostCallServices& s = ctx.services;
  const std::shared_ptr<LiveAgent> live = ctx.live;
  const HostRequest& request = ctx.request;
  HostCall& c = ctx.call;
  HostResponse& resp = c.response;
  const std::string& data = request.cas_put().data();
  cas::Digest d = cas::Digest::Of(data);
  c.subject = d.ToString();
  c.bytes = data.size();
  // An object already stored costs nothing more.
  absl::StatusOr<bool> present = s.cas().Contains(d);
  const bool charged = !present.ok() || !*present;
  if (charged) {
    if (c.status = s.ChargeStorage(live->principal, data.size()); !c.status.ok()) return;
  }
  // Recorded before it is stored: the agent holds it from the moment it is (design §12).
  if (c.status = s.RecordObject(*live, d, charged ? data.size() : 0); !c.status.ok()) {
    if (charged) s.RefundStorage(live->principal, data.size());
    return;
  }
  absl::StatusOr<cas::PutOutcome> out = cas::PutObject(s.cas(), d, data);
  if (charged && (!out.ok() || out->already_present)) {
    s.RefundStorage(live->principal, data.size());
    if (out.ok()) s.RecordObject(*live, d, 0).IgnoreError();  // charged to whoever stored it
  }
  if (!out.ok()) {
    c.status = out.status();
    return;
  }
  {
    absl::MutexLock lock(&live->mu);
    if (!out->already_present) {
      live->record.mutable_counters()->set_bytes_written(live->record.counters().bytes_written() +
                                                         data.size());
    }
    live->shared.insert(d.sha256());  // it may read back what it wrote
  }
  *resp.mutable_cas_put()->mutable_digest() = FromDigest(d);
  resp.mutable_cas_put()->set_already_present(out->already_present);
}

void CasUploadStart(HostCallContext& ctx) {
  HostCallServices& s = ctx.services;
  const std::shared_ptr<LiveAgent> live = ctx.live;
  const HostRequest& request = ctx.request;
  HostCall& c = ctx.call;
  HostResponse& resp = c.response;
  absl::StatusOr<cas::Digest> d = ToDigest(request.cas_upload_start().digest());
  if (!d.ok()) {
    c.status = d.status();
    return;
  }
  c.subject = d->ToString();
  auto too_many = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(live->mu) -> absl::Status {
    if (live->uploads.size() < kMaxOpenUploads) return absl::OkStatus();
    return absl::ResourceExhaustedError(absl::StrCat("this agent has ", live->uploads.size(),
                                                     " uploads open (at most ", kMaxOpenUploads,
                                                     "): finish or abort one first"));
  };
  {
    absl::MutexLock lock(&live->mu);
    if (c.status = too_many(); !c.status.ok()) return;
  }
  // As cas_put: an object already stored costs nothing more (but its bytes must still be
  // sent, and hash to it, before the agent may name it); else its size is reserved now.
  absl::StatusOr<bool> present = s.cas().Contains(*d);
  if (!present.ok()) {
    c.status = present.status();
    return;
  }
  bool state_upload;
  {
    absl::MutexLock lock(&live->mu);
    state_upload = request.cas_upload_start().state() && live->snapshots;
  }
  auto up = std::make_shared<HostUpload>(*d, state_upload);
  if (!*present) {
    if (c.status = s.ChargeStorage(live->principal, d->size()); !c.status.ok()) return;
    absl::StatusOr<std::unique_ptr<cas::Upload>> started = s.cas().StartUpload(*d, 0);
    if (!started.ok()) {
      s.RefundStorage(live->principal, d->size());
      c.status = started.status();
      return;
    }
    up->charged = d->size();
    absl::MutexLock upload_lock(&up->mu);
    up->upload = *std::move(started);
  }
  uint64_t id = 0;
  {
    absl::MutexLock lock(&live->mu);
    // Checked again: calls of one agent run on several workers; and an agent that ended
    // meanwhile had its uploads dropped already.
    c.status = live->running ? too_many() : absl::FailedPreconditionError("the agent is ending");
    if (c.status.ok()) {
      id = live->next_upload_id++;
      live->uploads.emplace(id, up);
    }
  }
  if (!c.status.ok()) {
    s.RefundStorage(live->principal, up->charged);
    return;
  }
  resp.mutable_cas_upload_start()->set_upload_id(id);
  resp.mutable_cas_upload_start()->set_max_piece_bytes(ctx.max_payload);
}

void CasUploadAppend(HostCallContext& ctx) {
  HostCallServices& s = ctx.services;
  const std::shared_ptr<LiveAgent> live = ctx.live;
  const HostRequest& request = ctx.request;
  HostCall& c = ctx.call;
  HostResponse& resp = c.response;
  const auto& append = request.cas_upload_append();
  c.bytes = append.data().size();
  absl::StatusOr<std::shared_ptr<HostUpload>> open = OpenUpload(*live, append.upload_id());
  if (!open.ok()) {
    c.status = open.status();
    return;
  }
  std::shared_ptr<HostUpload> up = *std::move(open);
  absl::MutexLock upload_lock(&up->mu);
  if (append.offset() != up->received) {
    c.status = absl::FailedPreconditionError(
        absl::StrCat("upload ", append.upload_id(), " has received ", up->received,
                     " bytes; an append at offset ", append.offset(), " is out of order"));
    return;
  }
  if (append.data().size() > up->digest.size() - up->received) {
    c.status = absl::InvalidArgumentError(
        absl::StrCat("upload ", append.upload_id(), " would receive more than the ",
                     up->digest.size(), " bytes of ", up->digest.ToString()));
    return;
  }
  if (up->upload != nullptr) {
    c.status = up->upload->Append(append.data());
  } else {
    up->hash.Update(append.data());
  }
  if (!c.status.ok()) {
    // The CAS's upload is in an unknown state (or another one took the object over): the
    // agent starts again.
    std::shared_ptr<HostUpload> dropped;
    {
      absl::MutexLock lock(&live->mu);
      auto it = live->uploads.find(append.upload_id());
      if (it != live->uploads.end() && it->second == up) {
        dropped = std::move(it->second);
        live->uploads.erase(it);
      }
    }
    if (dropped != nullptr) s.RefundStorage(live->principal, dropped->charged);
    c.status = absl::Status(c.status.code(), absl::StrCat(c.status.message(), " (upload ",
                                                          append.upload_id(), " dropped)"));
    return;
  }
  up->received += append.data().size();
  resp.mutable_cas_upload_append()->set_received(up->received);
}

void CasUploadFinish(HostCallContext& ctx) {
  HostCallServices& s = ctx.services;
  const std::shared_ptr<LiveAgent> live = ctx.live;
  const HostRequest& request = ctx.request;
  HostCall& c = ctx.call;
  HostResponse& resp = c.response;
  const auto& finish = request.cas_upload_finish();
  absl::StatusOr<std::shared_ptr<HostUpload>> open = OpenUpload(*live, finish.upload_id());
  if (!open.ok()) {
    c.status = open.status();
    return;
  }
  std::shared_ptr<HostUpload> up = *std::move(open);
  c.subject = up->digest.ToString();
  absl::MutexLock upload_lock(&up->mu);
  if (!finish.abort() && up->received != up->digest.size()) {
    // Stays open: the agent may send the rest.
    c.status = absl::FailedPreconditionError(
        absl::StrCat("upload ", finish.upload_id(), " has received ", up->received, " of the ",
                     up->digest.size(), " bytes of ", up->digest.ToString()));
    return;
  }
  // The upload ends here, whatever the outcome.
  bool taken = false;
  {
    absl::MutexLock lock(&live->mu);
    auto it = live->uploads.find(finish.upload_id());
    if (it != live->uploads.end() && it->second == up) {
      live->uploads.erase(it);
      taken = true;
    }
  }
  if (!taken) {
    c.status =
        absl::NotFoundError(absl::StrCat("upload ", finish.upload_id(), " was dropped meanwhile"));
    return;
  }
  if (finish.abort()) {
    s.RefundStorage(live->principal, up->charged);
    resp.mutable_cas_upload_finish();
    return;
  }
  absl::StatusOr<cas::PutOutcome> out;
  // What the agent stores it holds from the moment it is stored (design §12); a runner's
  // snapshot its checkpoint holds.
  absl::Status recorded =
      up->state ? absl::OkStatus() : s.RecordObject(*live, up->digest, up->charged);
  if (!recorded.ok()) {
    out = recorded;  // nothing stored
  } else if (up->upload != nullptr) {
    out = up->upload->Finish();
  } else if (up->hash.Finish() != up->digest.sha256()) {
    out = absl::InvalidArgumentError(absl::StrCat("digest mismatch: the bytes sent do not hash to ",
                                                  up->digest.ToString(), "; nothing stored"));
  } else {
    // Stored before the upload began: confirmed, so that no collection takes it now.
    absl::StatusOr<bool> present = cas::TouchIfStored(s.cas(), up->digest);
    if (!present.ok()) {
      out = present.status();
    } else if (!*present) {
      out = absl::UnavailableError(absl::StrCat("object ", up->digest.ToString(),
                                                " was removed while it was being uploaded; "
                                                "upload it again"));
    } else {
      out = cas::PutOutcome{.seq = 0, .already_present = true};
    }
  }
  up->upload.reset();
  if (!out.ok() || out->already_present) s.RefundStorage(live->principal, up->charged);
  if (out.ok() && out->already_present && up->charged != 0 && !up->state) {
    s.RecordObject(*live, up->digest, 0).IgnoreError();  // charged to whoever stored it
  }
  if (!out.ok()) {
    c.status = out.status();
    return;
  }
  c.bytes = up->digest.size();
  {
    absl::MutexLock lock(&live->mu);
    if (!out->already_present) {
      live->record.mutable_counters()->set_bytes_written(live->record.counters().bytes_written() +
                                                         up->digest.size());
    }
    // It may read back (and name) what it put; a runner's snapshot only its checkpoint or
    // migrate may name.
    if (up->state) {
      live->snapshot_objects.insert(up->digest.sha256());
    } else {
      live->shared.insert(up->digest.sha256());
    }
  }
  *resp.mutable_cas_upload_finish()->mutable_digest() = FromDigest(up->digest);
  resp.mutable_cas_upload_finish()->set_already_present(out->already_present);
}

}  // namespace host_calls
}  // namespace vault::agent
