// An arriving agent's process started at its Offer, held until the Commit adopts it
// (Migration::Prestart in migration/migration.h; docs/migration.md, protocol step 2): the
// sandbox's launch, which on an idle kernel waits for an RCU grace period, then overlaps the
// transfer of the agent's objects instead of following the Commit.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "capability/grant.h"
#include "cas/digest_proto.h"
#include "common/log_fields.h"
#include "migration/migration.h"
#include "spdlog/spdlog.h"

namespace vault::migration {

// What a held process was started for: the whole MIGRATE link (agent, code, grants,
// constraints, state, transfer id, and through its parent hash the chain and its root), and the
// constraints this vault narrowed them to.
std::string PrestartKey(const vault::v1::MigrationPackage& p,
                        const vault::v1::Constraints& narrowed) {
  return absl::StrCat(p.chain().links().rbegin()->SerializeAsString(), "\n",
                      narrowed.SerializeAsString());
}

void Migration::EndHeldLater(agent::AgentRef held) {
  if (held == nullptr) return;
  // A kill waits for the reap (and the cgroup's removal): not under the caller's locks.
  if (!held_->Schedule([this, held] { deps_.port->EndHeld(held); })) deps_.port->EndHeld(held);
}

void Migration::PrestartArrival(const vault::v1::MigrationPackage& p,
                                const capability::VerifiedChain& v) {
  if (!deps_.port->CanRun(p.spec().sandbox()).ok()) return;  // the Offer or the Commit refuses it
  if (deps_.port->Find(p.agent_id()) != nullptr) return;     // the Commit refuses it
  std::optional<vault::v1::TrustEntry> trust = deps_.port->policy().Lookup(*v.root);
  if (!trust.has_value()) return;  // the Commit refuses it
  absl::StatusOr<cas::Digest> code = cas::FromProto(p.spec().code_digest());
  if (!code.ok()) return;
  const std::string principal = v.root->ToText();
  if (deps_.port->CountLive(principal) >= deps_.port->MaxAgents(principal)) {
    return;  // the Commit refuses it
  }
  const vault::v1::Constraints constraints =
      capability::IntersectConstraints(v.constraints, trust->ceiling_constraints());
  const std::string key = PrestartKey(p, constraints);
  const PrestartId id{p.source_vault(), v.last_transfer_id};
  uint64_t token;
  {
    absl::MutexLock lock(&mu_);
    // Bounded: at most kMaxPrestarts processes, kMaxPrestartsPerMember of them for one member's
    // Offers, each for at most kPrestartTtl.
    size_t of_member = 0;
    for (const auto& [other, held] : prestarts_) of_member += other.first == id.first ? 1 : 0;
    if (stopping_ || prestarts_.size() >= kMaxPrestarts || of_member >= kMaxPrestartsPerMember ||
        prestarts_.contains(id)) {
      return;
    }
    token = next_prestart_token_++;
    prestarts_[id] = Prestart{.token = token, .key = key, .expires = absl::Now() + kPrestartTtl};
  }
  // Off the Offer's thread: its answer (and the objects after it) must not wait for the start.
  const bool scheduled = held_->Schedule([this, agent_id = p.agent_id(), principal, code = *code,
                                          constraints, id, token, spec = p.spec()] {
    absl::StatusOr<agent::AgentRef> started =
        deps_.port->StartHeld(agent_id, principal, code, constraints, spec);
    bool mine;
    {
      absl::MutexLock lock(&mu_);
      auto it = prestarts_.find(id);
      mine = it != prestarts_.end() && it->second.token == token;
      if (mine && started.ok()) {
        it->second.agent = *started;
        it->second.ready = true;
      }
      if (mine && !started.ok()) prestarts_.erase(it);
      prestart_cv_.SignalAll();
    }
    if (!started.ok()) {
      common::LogAgent(spdlog::level::debug, agent_id,
                       "agent {}: no process started at the offer ({}); the commit starts one",
                       agent_id, started.status().ToString());
    } else if (!mine) {
      deps_.port->EndHeld(*started);  // taken, fenced or expired while it started
    }
  });
  if (!scheduled) {
    absl::MutexLock lock(&mu_);
    prestarts_.erase(id);
  }
}

agent::AgentRef Migration::TakePrestart(const PrestartId& id, const std::string& key) {
  agent::AgentRef held;
  bool usable;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time deadline = absl::Now() + absl::Seconds(3);
    auto it = prestarts_.find(id);
    while (it != prestarts_.end() && !it->second.ready) {
      // Still starting: waiting is quicker than a second start (which the timeout falls back
      // to; the late one is then ended by its starter).
      if (prestart_cv_.WaitWithDeadline(&mu_, deadline)) break;
      it = prestarts_.find(id);
    }
    if (it == prestarts_.end()) return nullptr;
    const bool ready = it->second.ready;
    usable = ready && it->second.key == key;
    held = std::move(it->second.agent);
    prestarts_.erase(it);
    if (!ready) return nullptr;  // still starting: its starter ends it, finding it gone
  }
  if (!usable) {
    EndHeldLater(std::move(held));  // started for another hop (other limits, chain or root)
    return nullptr;
  }
  // Adopted only while its process runs and nothing is ending it: one that died meanwhile is
  // not reused (its exit handler may still be on its way); the Commit starts a fresh one.
  if (!deps_.port->HeldRuns(held)) {
    EndHeldLater(std::move(held));
    return nullptr;
  }
  return held;
}

void Migration::EndPrestart(const PrestartId& id) {
  agent::AgentRef held;
  {
    absl::MutexLock lock(&mu_);
    auto it = prestarts_.find(id);
    if (it == prestarts_.end()) return;
    const bool ready = it->second.ready;
    held = std::move(it->second.agent);
    prestarts_.erase(it);
    if (!ready) return;  // its starter ends it once it is up
  }
  EndHeldLater(std::move(held));
}

void Migration::ExpirePrestarts(bool all) {
  std::vector<PrestartId> expired;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = absl::Now();
    for (const auto& [id, p] : prestarts_) {
      if (all || p.expires <= now) expired.push_back(id);
    }
  }
  for (const PrestartId& id : expired) EndPrestart(id);
}

}  // namespace vault::migration
