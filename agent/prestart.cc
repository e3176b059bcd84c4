// An arriving agent's process started at its Offer, held until the Commit adopts it
// (Prestart in agent/internal/runtime_impl.h; docs/migration.md, protocol step 2): the sandbox's
// launch, which on an idle kernel waits for an RCU grace period, then overlaps the transfer of
// the agent's objects instead of following the Commit.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "agent/internal/runtime_impl.h"
#include "capability/grant.h"
#include "common/log_fields.h"
#include "spdlog/spdlog.h"

namespace vault::agent {

// What a held process was started for: the whole MIGRATE link (agent, code, grants,
// constraints, state, transfer id, and through its parent hash the chain and its root), and the
// constraints this vault narrowed them to.
std::string PrestartKey(const vault::v1::MigrationPackage& p,
                        const vault::v1::Constraints& narrowed) {
  return absl::StrCat(p.chain().links().rbegin()->SerializeAsString(), "\n",
                      narrowed.SerializeAsString());
}

namespace {

// Ends a held process and gives its code folder back (its exit handler then has nothing to do).
void EndHeld(AgentRuntime::Impl& impl, const std::shared_ptr<LiveAgent>& live) {
  absl::MutexLock lock(&live->mu);
  // (A process that would not die keeps its code folder: its exit handler gives it back.)
  if (live->handle != nullptr && !live->handle->Kill().ok()) return;
  if (!live->code_key.empty()) impl.code_->Release(std::exchange(live->code_key, ""));
}

}  // namespace

void AgentRuntime::Impl::EndHeldLater(std::shared_ptr<LiveAgent> live) {
  if (live == nullptr) return;
  // A kill waits for the reap (and the cgroup's removal): not under the caller's locks.
  if (!lifecycle_->Schedule([this, live] { EndHeld(*this, live); })) EndHeld(*this, live);
}

void AgentRuntime::Impl::PrestartArrival(const vault::v1::MigrationPackage& p,
                                         const capability::VerifiedChain& v) {
  if (!SandboxFor(p.spec().sandbox()).ok()) return;  // the Offer or the Commit refuses it
  if (Find(p.agent_id()) != nullptr) return;         // the Commit refuses it
  std::optional<vault::v1::TrustEntry> trust = policy_->Lookup(*v.root);
  if (!trust.has_value()) return;  // the Commit refuses it
  absl::StatusOr<cas::Digest> code = ToDigest(p.spec().code_digest());
  if (!code.ok()) return;
  const uint32_t max_agents = trust->quota().max_agents() != 0
                                  ? trust->quota().max_agents()
                                  : options_.config.default_max_agents();
  if (CountLive(v.root->ToText()) >= max_agents) return;  // the Commit refuses it
  const vault::v1::Constraints constraints =
      capability::IntersectConstraints(v.constraints, trust->ceiling_constraints());
  const std::string key = PrestartKey(p, constraints);
  const PrestartId id{p.source_vault(), v.last_transfer_id};
  auto live = std::make_shared<LiveAgent>(p.agent_id(), v.root->ToText());
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
    prestarts_[id] = Prestart{.live = live, .key = key, .expires = absl::Now() + kPrestartTtl};
  }
  // Off the Offer's thread: its answer (and the objects after it) must not wait for the start.
  const bool scheduled =
      lifecycle_->Schedule([this, live, code = *code, constraints, id, type = p.spec().sandbox()] {
        absl::Status started;
        {
          absl::MutexLock lock(&live->mu);
          live->held = true;
          started = StartProcess(live, code, constraints, type);
        }
        bool mine;
        {
          absl::MutexLock lock(&mu_);
          auto it = prestarts_.find(id);
          mine = it != prestarts_.end() && it->second.live == live;
          if (mine && started.ok()) it->second.ready = true;
          if (mine && !started.ok()) prestarts_.erase(it);
          prestart_cv_.SignalAll();
        }
        if (!started.ok()) {
          common::LogAgent(spdlog::level::debug, live->id,
                           "agent {}: no process started at the offer ({}); the commit starts one",
                           live->id, started.ToString());
        } else if (!mine) {
          EndHeld(*this, live);  // taken, fenced or expired while it started
        }
      });
  if (!scheduled) {
    absl::MutexLock lock(&mu_);
    prestarts_.erase(id);
  }
}

std::shared_ptr<LiveAgent> AgentRuntime::Impl::TakePrestart(const PrestartId& id,
                                                            const std::string& key) {
  std::shared_ptr<LiveAgent> live;
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
    const bool usable = ready && it->second.key == key;
    live = std::move(it->second.live);
    prestarts_.erase(it);
    if (!ready) return nullptr;  // still starting: its starter ends it, finding it gone
    if (!usable) {
      EndHeldLater(std::move(live));  // started for another hop (other limits, chain or root)
      return nullptr;
    }
  }
  absl::MutexLock agent_lock(&live->mu);
  // Adopted only while its process runs and nothing is ending it: one that died meanwhile is
  // not reused (its exit handler may still be on its way); the Commit starts a fresh one.
  if (!live->running || live->exited.load() || live->conn == nullptr ||
      live->end_cause != EndCause::kNone) {
    live->mu.Unlock();
    EndHeldLater(live);
    live->mu.Lock();
    return nullptr;
  }
  return live;
}

void AgentRuntime::Impl::EndPrestart(const PrestartId& id) {
  std::shared_ptr<LiveAgent> live;
  {
    absl::MutexLock lock(&mu_);
    auto it = prestarts_.find(id);
    if (it == prestarts_.end()) return;
    const bool ready = it->second.ready;
    live = std::move(it->second.live);
    prestarts_.erase(it);
    if (!ready) return;  // its starter ends it once it is up
  }
  EndHeldLater(std::move(live));
}

void AgentRuntime::Impl::ExpirePrestarts(bool all) {
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

}  // namespace vault::agent
