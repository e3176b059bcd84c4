// The agents' part of the CAS lifecycle (design §12): which objects they hold, the record of
// what each stored or was given (agent_objects.h), and the refunds of what the collector removes.
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "agent/internal/runtime_impl.h"
#include "cas/digest_proto.h"
#include "common/status_macros.h"

namespace vault::agent {
namespace {

using vault::v1::AgentRecord;

// Whether the objects of an agent in `r`'s state stay: it exists here (running, paused, on its
// way out and not yet received), or it ended within `keep_ended` (its operator may still fetch
// its result and what it stored).
bool Holds(const AgentRecord& r, absl::Time now, absl::Duration keep_ended) {
  if (r.state() == vault::v1::DEPARTED && r.migration().receipt().empty()) return true;
  if (!Ended(r.state())) return true;
  return absl::FromUnixMillis(r.ended_unix_ms()) + keep_ended > now;
}

void HoldRecordObjects(const AgentRecord& r, cas::RootSink& sink) {
  auto hold = [&](const vault::v1::Digest& d, absl::string_view what) {
    absl::StatusOr<cas::Digest> digest = cas::FromProto(d);
    if (digest.ok()) sink.Hold(*digest, absl::StrCat("agent ", r.id(), " (", what, ")"));
  };
  if (r.spec().has_code_digest()) hold(r.spec().code_digest(), "code");
  if (r.has_state()) hold(r.state_digest(), "state");
  if (r.has_result()) hold(r.result(), "result");
  if (r.has_migration()) {
    if (r.migration().has_state()) hold(r.migration().state(), "state in a hop");
    if (r.migration().has_mailbox()) hold(r.migration().mailbox(), "mailbox in a hop");
  }
}

}  // namespace

absl::Status AgentRuntime::Impl::RecordObject(const LiveAgent& live, const cas::Digest& digest,
                                              uint64_t charged) {
  return objects_->Record(live.id, live.principal, digest, charged);
}

absl::Status AgentRuntime::Impl::ListCasRoots(cas::RootSink& sink, absl::Time now,
                                              absl::Duration keep_ended) {
  // The records on disk, then the live ones (newer: a state not yet persisted counts too).
  VAULT_ASSIGN_OR_RETURN(std::vector<AgentRecord> records, store_->LoadAll());
  absl::flat_hash_set<std::string> holding;
  for (const AgentRecord& r : records) {
    if (!Holds(r, now, keep_ended)) continue;
    holding.insert(r.id());
    HoldRecordObjects(r, sink);
  }
  std::vector<std::shared_ptr<LiveAgent>> live;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, agent] : agents_) live.push_back(agent);
  }
  for (const std::shared_ptr<LiveAgent>& agent : live) {
    absl::MutexLock lock(&agent->mu);
    AgentRecord& r = agent->record;
    holding.insert(r.id());  // it is here: whatever it stored may be read again
    HoldRecordObjects(r, sink);
  }
  return objects_->ForEach([&](const AgentObject& o) {
    sink.Track(o.digest);
    if (holding.contains(o.agent_id)) {
      sink.Hold(o.digest, absl::StrCat("agent ", o.agent_id, " (stored or given)"));
    }
  });
}

absl::Status AgentRuntime::Impl::AddCasRemoval(const cas::Digest& digest,
                                               rocksdb::WriteBatch* batch) {
  std::vector<StorageRefund> refunds;
  // The agents here now: one that recorded the object after the roots were read keeps its entry.
  auto live = [this](const std::string& id) {
    absl::MutexLock lock(&mu_);
    return agents_.contains(id);
  };
  VAULT_RETURN_IF_ERROR(objects_->AddRemoval(digest, live, batch, &refunds));
  if (refunds.empty()) return absl::OkStatus();
  absl::MutexLock lock(&refunds_mu_);
  pending_refunds_[digest.Key()] = std::move(refunds);  // replaces those of a write that failed
  return absl::OkStatus();
}

void AgentRuntime::Impl::CasObjectsRemoved(const std::vector<cas::Digest>& digests) {
  std::vector<StorageRefund> due;
  {
    absl::MutexLock lock(&refunds_mu_);
    for (const cas::Digest& d : digests) {
      auto it = pending_refunds_.find(d.Key());
      if (it == pending_refunds_.end()) continue;
      for (StorageRefund& r : it->second) due.push_back(std::move(r));
      pending_refunds_.erase(it);
    }
  }
  for (const StorageRefund& r : due) quota_->Refund(r.principal, r.bytes);
}

absl::Status AgentRuntime::ListCasRoots(cas::RootSink& sink, absl::Time now,
                                        absl::Duration keep_ended) {
  return impl_->ListCasRoots(sink, now, keep_ended);
}
absl::Status AgentRuntime::AddCasRemoval(const cas::Digest& digest, rocksdb::WriteBatch* batch) {
  return impl_->AddCasRemoval(digest, batch);
}
void AgentRuntime::CasObjectsRemoved(const std::vector<cas::Digest>& digests) {
  impl_->CasObjectsRemoved(digests);
}
uint64_t AgentRuntime::StorageUsed(const std::string& principal) {
  return impl_->StorageUsed(principal);
}

}  // namespace vault::agent
