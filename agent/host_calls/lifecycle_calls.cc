// Host calls on the agent's own life: log, heartbeat, self_inspect, spawn_child, migrate, exit.
#include <algorithm>
#include <memory>
#include <optional>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "agent/internal/host_call.h"
#include "agent/internal/runtime_util.h"
#include "audit/log.h"
#include "capability/grant.h"
#include "capability/text_form.h"
#include "common/random.h"
#include "common/status_macros.h"
#include "sandbox/sandbox.h"

namespace vault::agent::host_calls {

using vault::v1::Grant;
using vault::v1::HostRequest;
using vault::v1::HostResponse;

void AuthorizeLog(HostCallContext& ctx) {
  ctx.call.subject = vault::v1::LogRequest::Level_Name(ctx.request.log().level());
}

void AuthorizeSpawnChild(HostCallContext& ctx) { ctx.call.grant = MakeGrant(Grant::SPAWN); }

void AuthorizeMigrate(HostCallContext& ctx) {
  const HostRequest& request = ctx.request;
  HostCall& c = ctx.call;
  c.subject = request.migrate().vault();
  c.grant = MakeGrant(Grant::MIGRATE);
  c.grant->add_vaults(request.migrate().vault());
  if (request.migrate().has_state_digest() && !request.migrate().state().empty()) {
    c.status = absl::InvalidArgumentError("a migrate carries its state or names it, not both");
  }
}

void AuthorizeExit(HostCallContext& ctx) {
  ctx.call.subject = absl::StrCat(ctx.request.exit().code());
}

void Log(HostCallContext& ctx) {
  HostCallServices& s = ctx.services;
  const std::shared_ptr<LiveAgent> live = ctx.live;
  const HostRequest& request = ctx.request;
  HostCall& c = ctx.call;
  uint64_t incarnation;
  {
    absl::MutexLock lock(&live->mu);
    incarnation = live->record.incarnation();
    live->record.mutable_counters()->set_log_lines(live->record.counters().log_lines() + 1);
  }
  std::string level = absl::AsciiStrToLower(c.subject);
  c.bytes = request.log().message().size();
  s.AppendLog(live->id, level, request.log().message(), incarnation);
}

void Heartbeat(HostCallContext& ctx) {
  const std::shared_ptr<LiveAgent> live = ctx.live;
  HostCall& c = ctx.call;
  HostResponse& resp = c.response;
  absl::MutexLock lock(&live->mu);
  live->last_heartbeat = absl::Now();
  resp.mutable_heartbeat()->set_checkpoint_requested(live->checkpoint_requested);
}

void SelfInspect(HostCallContext& ctx) {
  HostCallServices& s = ctx.services;
  const std::shared_ptr<LiveAgent> live = ctx.live;
  HostCall& c = ctx.call;
  HostResponse& resp = c.response;
  absl::MutexLock lock(&live->mu);
  // A non-const reference: clang 14 loses the guard of a const one reached through a shared_ptr.
  vault::v1::AgentRecord& r = live->record;
  vault::v1::SelfInspectResult* out = resp.mutable_self_inspect();
  out->set_agent_id(live->id);
  out->set_vault(s.vault_name());
  out->set_principal(live->principal);
  out->set_parent(r.parent());
  *out->mutable_grants() = r.grants();
  *out->mutable_constraints() = r.constraints();
  out->set_hop(r.hop());
  out->set_home_vault(r.home_vault().empty() ? s.vault_name() : r.home_vault());
  out->set_incarnation(r.incarnation());
  out->set_purpose(r.spec().purpose());
  sandbox::Limits limits;
  limits.memory_bytes = r.constraints().has_max_memory_bytes() ? r.constraints().max_memory_bytes()
                                                               : s.config().default_memory_bytes();
  uint64_t runtime_ms = r.constraints().has_max_runtime_ms() ? r.constraints().max_runtime_ms()
                                                             : s.config().default_runtime_ms();
  uint64_t cpu_ms =
      r.constraints().has_max_cpu_ms() ? r.constraints().max_cpu_ms() : s.config().default_cpu_ms();
  uint64_t storage = r.constraints().has_max_storage_bytes() ? r.constraints().max_storage_bytes()
                                                             : s.config().default_storage_bytes();
  int64_t up_ms = absl::ToInt64Milliseconds(absl::Now() - live->started);
  out->set_runtime_remaining_ms(std::max<int64_t>(0, static_cast<int64_t>(runtime_ms) - up_ms));
  if (live->handle != nullptr) {
    absl::StatusOr<sandbox::Usage> u = live->handle->GetUsage();
    if (u.ok()) {
      out->set_memory_bytes(u->memory_current_bytes);
      out->set_memory_remaining_bytes(limits.memory_bytes > u->memory_current_bytes
                                          ? limits.memory_bytes - u->memory_current_bytes
                                          : 0);
      int64_t used = absl::ToInt64Milliseconds(u->cpu_time);
      out->set_cpu_remaining_ms(std::max<int64_t>(0, static_cast<int64_t>(cpu_ms) - used));
      out->set_storage_remaining_bytes(storage > u->work_bytes ? storage - u->work_bytes : 0);
    }
  }
}

void SpawnChild(HostCallContext& ctx) {
  HostCallServices& s = ctx.services;
  const std::shared_ptr<LiveAgent> live = ctx.live;
  const HostRequest& request = ctx.request;
  HostCall& c = ctx.call;
  HostResponse& resp = c.response;
  const auto& sc = request.spawn_child();
  vault::v1::AgentSpec spec = sc.spec();
  // Code the parent wrote into the child's spec: stored as the parent's put once every check
  // passed (below).
  std::optional<std::string> inline_code;
  if (!sc.spec_text().empty()) {
    if (sc.has_spec()) {
      c.status = absl::InvalidArgumentError(
          "a spawn_child carries its spec as a message or as text, not both");
      return;
    }
    absl::StatusOr<capability::ParsedSpec> parsed =
        capability::ParseAgentSpecWithOptions(sc.spec_text(), "the child's spec", {});
    if (!parsed.ok()) {
      c.status = absl::InvalidArgumentError(parsed.status().message());
      return;
    }
    spec = std::move(parsed->spec);
    if (spec.has_code_source()) {
      inline_code = spec.code_source();
      *spec.mutable_code_digest() = FromDigest(cas::Digest::Of(*inline_code));
    }
  }
  if (!spec.has_code_digest()) {
    c.status = absl::InvalidArgumentError("a child's spec needs a code digest");
    return;
  }
  if (c.status = CheckSpecForms(spec); !c.status.ok()) return;
  if (spec.purpose().empty()) spec.set_purpose(std::string(kDefaultPurpose));
  if (absl::Status v = capability::ValidateGrants(spec.grants()); !v.ok()) {
    c.status = v;
    return;
  }
  vault::v1::AgentRecord child;
  bool narrowed;
  {
    absl::MutexLock lock(&live->mu);
    // A non-const reference: clang 14 loses the guard of a const one reached through a shared_ptr.
    vault::v1::AgentRecord& r = live->record;
    Grant read = MakeGrant(Grant::READ);
    read.set_hash(spec.code_digest().sha256());
    if (!inline_code.has_value() &&
        spec.code_digest().sha256() != r.spec().code_digest().sha256() &&
        !live->shared.contains(spec.code_digest().sha256()) && !live->authority->Allows(read)) {
      c.status = absl::PermissionDeniedError(
          "denied: a child's code must be the parent's own or an object it may read");
      return;
    }
    narrowed = !capability::IsSubset(spec.grants(), r.grants()).ok();
    for (Grant& g : capability::Intersect(spec.grants(), r.grants()))
      *child.add_grants() = std::move(g);
    *child.mutable_constraints() =
        capability::IntersectConstraints(spec.constraints(), r.constraints());
  }
  absl::StatusOr<std::string> child_id = common::RandomHex(8);
  if (!child_id.ok()) {
    c.status = child_id.status();
    return;
  }
  child.set_id(absl::StrCat("a-", *child_id));
  child.set_principal(live->principal);
  child.set_parent(live->id);
  *spec.mutable_grants() = child.grants();
  *child.mutable_spec() = spec;
  const uint32_t max_agents = s.MaxAgents(live->principal);
  if (s.CountLive(live->principal) >= max_agents) {
    c.status = absl::ResourceExhaustedError(
        absl::StrCat("this principal already runs ", max_agents, " agents here (its quota)"));
    return;
  }
  if (inline_code.has_value()) {
    if (c.status = s.ChargeStorage(live->principal, inline_code->size()); !c.status.ok()) return;
    absl::StatusOr<cas::PutOutcome> put =
        cas::PutObject(s.cas(), cas::Digest::Of(*inline_code), *inline_code);
    if (!put.ok() || put->already_present) s.RefundStorage(live->principal, inline_code->size());
    if (!put.ok()) {
      c.status = put.status();
      return;
    }
  }
  absl::StatusOr<std::shared_ptr<LiveAgent>> spawned =
      s.CreateAndLaunch(child, sc.has_state() ? &sc.state() : nullptr);
  if (!spawned.ok()) {
    c.status = spawned.status();
    return;
  }
  c.subject = child.id();
  if (narrowed) {
    vault::v1::AuditEntry warn = audit::MakeEntry(
        live->id, "agent.spawn.narrowed", child.id(), vault::v1::AuditEntry::ALLOWED,
        "the child asked for more than its parent holds; its grants were narrowed",
        {{"asked", absl::StrCat(sc.spec().grants_size(), " grants")},
         {"granted", absl::StrCat(child.grants_size(), " grants")}});
    warn.set_priority(vault::v1::AuditEntry::HIGH);
    s.Audit(std::move(warn), /*durable=*/true);
  }
  vault::v1::SpawnChildResult* out = resp.mutable_spawn_child();
  out->set_agent_id(child.id());
  *out->mutable_grants() = child.grants();
  out->set_narrowed(narrowed);
}

void Migrate(HostCallContext& ctx) {
  HostCallServices& s = ctx.services;
  const std::shared_ptr<LiveAgent> live = ctx.live;
  const HostRequest& request = ctx.request;
  HostCall& c = ctx.call;
  // The hop runs on the migration pool, not on this worker (a transfer takes as long as
  // its objects). It answers the call only with a failure; on success the process ends
  // (the agent continues at the destination).
  const uint64_t call_id = request.call_id();
  // A state named by digest: one the agent may read (as a checkpoint's), stored here.
  std::optional<cas::Digest> named;
  // An agent that replays moves with its effect log (written out after the freeze: ReplayState),
  // ending with this migrate as answered at the destination, where its replay returns from it.
  bool replays, snapshots;
  {
    absl::MutexLock lock(&live->mu);
    replays = live->effects != nullptr;
    snapshots = replays && live->snapshots;
  }
  if (replays) {
    EffectLog::Extra arrived{.op = c.op, .request_sha256 = {}, .response = {}};
    {
      absl::MutexLock lock(&live->mu);
      arrived.request_sha256 = LogDigest(*live, request);
    }
    arrived.response.mutable_migrate()->set_vault(request.migrate().vault());
    // An agent that snapshots (wasm) moves with the execution state it was in when it called:
    // the log handed over starts from it.
    if (snapshots) {
      if (request.migrate().has_state_digest()) {
        absl::MutexLock lock(&live->mu);
        const std::string& sha = request.migrate().state_digest().sha256();
        if (!MayReadLocked(*live, sha) && !live->snapshot_objects.contains(sha)) {
          c.status = absl::PermissionDeniedError(
              "denied: migrate names a state this agent may not read (it did not put it)");
          return;
        }
      }
      absl::StatusOr<std::string> snap = SnapshotBytes(
          s, request.migrate().state(),
          request.migrate().has_state_digest() ? &request.migrate().state_digest() : nullptr);
      if (!snap.ok()) {
        c.status = snap.status();
        return;
      }
      arrived.snapshot = *std::move(snap);
    }
    absl::MutexLock lock(&live->mu);
    live->migrate_extra = std::move(arrived);
  } else if (request.migrate().has_state_digest()) {
    absl::StatusOr<cas::Digest> d = ToDigest(request.migrate().state_digest());
    if (!d.ok()) {
      c.status = d.status();
      return;
    }
    bool may;
    {
      absl::MutexLock lock(&live->mu);
      may = MayReadLocked(*live, d->sha256());
    }
    if (!may) {
      c.status = absl::PermissionDeniedError(absl::StrCat(
          "denied: migrate names the state ", d->ToString(),
          ", which this agent may not read (it did not put it, and no grant covers it)"));
      return;
    }
    absl::StatusOr<bool> present = cas::TouchIfStored(s.cas(), *d);  // held from now on
    if (!present.ok() || !*present) {
      c.status = present.ok()
                     ? absl::NotFoundError(absl::StrCat("the migrate names ", d->ToString(),
                                                        ", which is not in this vault's CAS"))
                     : present.status();
      return;
    }
    named = *d;
  }
  {
    absl::MutexLock lock(&live->mu);
    live->migrate_call_id = call_id;
  }
  c.deferred = true;
  s.Audit(
      audit::MakeEntry(
          live->id, "host.migrate", request.migrate().vault(), vault::v1::AuditEntry::ALLOWED, "",
          {{"call_id", absl::StrCat(call_id)},
           {"state", named.has_value() ? named->ToString() : Sha256Hex(request.migrate().state())},
           {"grant", capability::GrantToString(*c.grant)}}),
      /*durable=*/true);
  if (absl::Status started = s.StartMigration(live, call_id, request.migrate().vault(),
                                              request.migrate().state(), named);
      !started.ok()) {
    absl::MutexLock lock(&live->mu);
    live->migrate_call_id = 0;
    c.deferred = false;
    c.status = started;
  }
}

void Exit(HostCallContext& ctx) {
  HostCallServices& s = ctx.services;
  const std::shared_ptr<LiveAgent> live = ctx.live;
  const HostRequest& request = ctx.request;
  HostCall& c = ctx.call;
  if (request.exit().has_result()) {
    absl::StatusOr<cas::Digest> d = ToDigest(request.exit().result());
    absl::StatusOr<bool> present = d.ok() ? cas::TouchIfStored(s.cas(), *d) : d.status();
    if (!present.ok() || !*present) {
      c.status = present.ok()
                     ? absl::NotFoundError("the result names an object that is not in the CAS")
                     : present.status();
      return;
    }
    c.subject = d->ToString();
  }
  absl::MutexLock lock(&live->mu);
  live->exit_requested = true;
  live->exit_code = request.exit().code();
  live->end_cause = EndCause::kExitCall;
  live->end_reason = request.exit().message().empty()
                         ? absl::StrCat("exit(", request.exit().code(), ")")
                         : request.exit().message();
  if (request.exit().has_result()) *live->record.mutable_result() = request.exit().result();
  // The process gets a moment to leave by itself, then it is ended.
  live->exit_deadline = absl::Now() + absl::Seconds(1);
}

}  // namespace vault::agent::host_calls
