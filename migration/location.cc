// Where agents are, across the federation (docs/migration.md "Location, journey and remote
// control"):
//  - Where: what this vault knows of an agent (its record here; at its home vault, also the
//    latest location the receipts of its hops reported).
//  - Locate: follows that knowledge from vault to vault until the vault that hosts the agent.
//  - Located: the home vault's side of location forwarding. The vault an agent arrives at sends
//    the hop's receipt (signed by itself) to the agent's home, through the outbox.
//  - Journey: every audit entry about the agent in this vault's log and its mirrors of the
//    members' logs.
#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "agent/agent_store.h"
#include "audit/log_store.h"
#include "common/status_macros.h"
#include "migration/internal/transfer.h"
#include "migration/migration.h"
#include "migration/receipt.h"
#include "spdlog/spdlog.h"
#include "storage/database.h"

namespace vault::migration {

using vault::v1::AgentRecord;

namespace {

// How long a location update is retried before it is dropped (a lost one leaves the
// departed_to trail, which Locate follows).
constexpr absl::Duration kOutboxGiveUp = absl::Hours(6);

}  // namespace

absl::StatusOr<std::optional<vault::v1::AgentLocation>> Migration::LoadLocation(
    const std::string& id) const {
  std::string value;
  rocksdb::Status s = deps_.db->db()->Get(rocksdb::ReadOptions(), deps_.db->Handle(kLocations),
                                          storage::ToSlice(id), &value);
  if (s.IsNotFound()) return std::nullopt;
  VAULT_RETURN_IF_ERROR(storage::ToStatus(s, "read an agent location"));
  vault::v1::AgentLocation l;
  if (!l.ParseFromString(value)) return absl::DataLossError("an agent location does not parse");
  return l;
}

vault::v1::WhereResponse Migration::Where(const std::string& id) {
  vault::v1::WhereResponse out;
  absl::StatusOr<AgentRecord> known = deps_.port->RecordOf(id);
  if (!known.ok()) return out;
  const AgentRecord& r = *known;
  out.set_state(r.state());
  out.set_hop(r.hop());
  out.set_home_vault(r.home_vault().empty() ? options_.vault_name : r.home_vault());
  if (r.state() == vault::v1::DEPARTED || r.state() == vault::v1::MIGRATING) {
    out.set_departed_to(r.migration().to_vault());
  }
  if (out.home_vault() == options_.vault_name) {
    absl::StatusOr<std::optional<vault::v1::AgentLocation>> l = LoadLocation(id);
    if (l.ok() && l->has_value()) *out.mutable_located() = **l;
  }
  return out;
}

absl::StatusOr<std::string> Migration::WhereIs(const std::string& id) {
  absl::StatusOr<vault::v1::LocateResponse> located = Locate(id);
  if (absl::IsNotFound(located.status()) &&
      absl::StrContains(located.status().message(), "not reachable")) {
    // A member that could not be asked may host it: not an answer yet.
    return absl::UnavailableError(located.status().message());
  }
  VAULT_ASSIGN_OR_RETURN(vault::v1::LocateResponse l, std::move(located));
  if (l.vault().empty()) {
    return absl::UnavailableError(
        absl::StrCat("agent ", id, " is migrating to ", l.migrating_to()));
  }
  return l.vault();
}

absl::StatusOr<vault::v1::LocateResponse> Migration::Locate(const std::string& id) {
  VAULT_RETURN_IF_ERROR(agent::ValidateAgentId(id));
  vault::v1::LocateResponse out;
  auto where_at = [&](const std::string& vault) -> absl::StatusOr<vault::v1::WhereResponse> {
    if (vault == options_.vault_name) return Where(id);
    if (deps_.transport == nullptr) {
      return absl::FailedPreconditionError(
          "this vault cannot reach members (no federation TLS material)");
    }
    return deps_.transport->Where(vault, id);
  };
  std::string at = options_.vault_name;
  vault::v1::WhereResponse w = Where(id);
  out.add_trail(at);
  if (w.state() == vault::v1::AGENT_STATE_UNSPECIFIED) {
    // Never here: ask every member; the one that holds it (not departed) wins, else the
    // furthest departure.
    std::vector<std::string> unreachable;
    std::optional<std::pair<std::string, vault::v1::WhereResponse>> best;
    for (const vault::v1::Member& m : options_.members) {
      if (m.name() == options_.vault_name) continue;
      absl::StatusOr<vault::v1::WhereResponse> ws = where_at(m.name());
      if (!ws.ok()) {
        unreachable.push_back(absl::StrCat(m.name(), " (", ws.status().message(), ")"));
        continue;
      }
      if (ws->state() == vault::v1::AGENT_STATE_UNSPECIFIED) continue;
      auto rank = [](const vault::v1::WhereResponse& x) {
        return std::make_pair(x.state() != vault::v1::DEPARTED, x.hop());
      };
      if (!best.has_value() || rank(*ws) > rank(best->second)) best.emplace(m.name(), *ws);
    }
    if (!best.has_value()) {
      return absl::NotFoundError(
          absl::StrCat("no member knows agent ", id,
                       unreachable.empty()
                           ? ""
                           : absl::StrCat("; not reachable: ", absl::StrJoin(unreachable, ", "))));
    }
    at = best->first;
    w = best->second;
    out.add_trail(at);
  }
  const size_t max_steps = 2 * options_.members.size() + 4;
  for (size_t step = 0;; ++step) {
    if (!w.home_vault().empty()) out.set_home_vault(w.home_vault());
    std::string next;
    if (w.state() == vault::v1::DEPARTED && w.located().hop() > w.hop() &&
        !w.located().vault().empty()) {
      next = w.located().vault();  // the home's newer knowledge: skip the hops between
    } else if (w.state() == vault::v1::DEPARTED) {
      next = w.departed_to();
    } else if (w.state() == vault::v1::MIGRATING) {
      // Mid-hop: the destination may have committed already (the source has not heard yet).
      absl::StatusOr<vault::v1::WhereResponse> there = where_at(w.departed_to());
      if (there.ok() && there->state() != vault::v1::AGENT_STATE_UNSPECIFIED &&
          there->hop() > w.hop()) {
        next = w.departed_to();
      } else {
        out.set_migrating_to(w.departed_to());
      }
    }
    if (next.empty()) {
      out.set_vault(at);
      out.set_state(w.state());
      out.set_hop(w.hop());
      if (at == options_.vault_name) {
        out.set_vault_key(deps_.vault_key->public_key().raw());
      } else if (std::optional<capability::PublicKey> k = MemberKey(at); k.has_value()) {
        out.set_vault_key(k->raw());
      }
      return out;
    }
    if (step >= max_steps) {
      return absl::DataLossError(absl::StrCat("the trail of agent ", id, " does not end (",
                                              absl::StrJoin(out.trail(), " -> "), ")"));
    }
    absl::StatusOr<vault::v1::WhereResponse> ws = where_at(next);
    if (!ws.ok()) {
      return absl::UnavailableError(absl::StrCat("agent ", id, " departed from ", at, " to ", next,
                                                 ", which does not answer (", ws.status().message(),
                                                 "); trail: ", absl::StrJoin(out.trail(), " -> ")));
    }
    if (ws->state() == vault::v1::AGENT_STATE_UNSPECIFIED) {
      return absl::DataLossError(
          absl::StrCat("agent ", id, " departed from ", at, " to ", next,
                       ", which has no record of it; trail: ", absl::StrJoin(out.trail(), " -> ")));
    }
    at = next;
    w = *std::move(ws);
    out.add_trail(at);
  }
}

void Migration::ForwardLocation(const std::string& home, const vault::v1::SignedReceipt& receipt,
                                const std::string& agent_id) {
  if (home == options_.vault_name || deps_.transport == nullptr) return;
  outbox_->Add(
      absl::StrCat("location of agent ", agent_id, " to its home ", home),
      [this, home, receipt] { return deps_.transport->Located(home, receipt).status(); },
      kOutboxGiveUp);
}

absl::StatusOr<vault::v1::LocatedResponse> Migration::Located(
    const vault::v1::SignedReceipt& receipt, const std::string& caller) {
  std::optional<capability::PublicKey> key = MemberKey(caller);
  if (!key.has_value()) return absl::PermissionDeniedError("the caller is not a member");
  VAULT_ASSIGN_OR_RETURN(vault::v1::ReceiptPayload p, OpenReceipt(receipt, *key));
  if (p.to_vault() != caller) {
    return absl::PermissionDeniedError(
        absl::StrCat("member ", caller, " reports a receipt of ", p.to_vault()));
  }
  absl::MutexLock lock(&location_mu_);
  // (Its record here, read under location_mu_: the live one when it runs here again, whose hop
  // is the newest.)
  absl::StatusOr<AgentRecord> home = deps_.port->RecordOf(p.agent_id());
  if (!home.ok() || !(home->home_vault().empty() || home->home_vault() == options_.vault_name)) {
    return absl::FailedPreconditionError(
        absl::StrCat("this vault is not the home of agent ", p.agent_id()));
  }
  VAULT_ASSIGN_OR_RETURN(std::optional<vault::v1::AgentLocation> held, LoadLocation(p.agent_id()));
  vault::v1::LocatedResponse out;
  const uint32_t known_hop = home->hop();
  if ((held.has_value() && held->hop() >= p.hop()) || known_hop >= p.hop()) return out;
  vault::v1::AgentLocation l;
  l.set_vault(caller);
  l.set_hop(p.hop());
  *l.mutable_receipt() = receipt;
  l.set_unix_ms(absl::ToUnixMillis(absl::Now()));
  rocksdb::WriteBatch batch;
  batch.Put(deps_.db->Handle(kLocations), storage::ToSlice(p.agent_id()), l.SerializeAsString());
  VAULT_RETURN_IF_ERROR(deps_.db->Write(&batch));
  out.set_updated(true);
  return out;
}

absl::StatusOr<vault::v1::JourneyResponse> Migration::Journey(const std::string& id) {
  VAULT_RETURN_IF_ERROR(agent::ValidateAgentId(id));
  vault::v1::JourneyResponse out;
  std::vector<std::string> logs = {options_.vault_name};
  for (const vault::v1::Member& m : options_.members) {
    if (m.name() != options_.vault_name) logs.push_back(m.name());
  }
  for (const std::string& name : logs) {
    audit::LogStore log(deps_.db, name);
    VAULT_ASSIGN_OR_RETURN(vault::v1::LogHead head, log.ReadHead());
    if (head.size() == 0 && name != options_.vault_name) {
      out.add_logs_missing(name);
      continue;
    }
    out.add_logs_read(name);
    absl::Status bad = absl::OkStatus();
    VAULT_RETURN_IF_ERROR(
        log.ScanEntries(0, [&](uint64_t, absl::string_view, absl::string_view bytes) {
          if (!absl::StrContains(bytes, id)) return true;  // cheap filter before parsing
          vault::v1::AuditEntry e;
          if (!e.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
            bad = absl::DataLossError(absl::StrCat("an entry of log ", name, " does not parse"));
            return false;
          }
          if (e.subject() == id) *out.add_entries() = std::move(e);
          return true;
        }));
    VAULT_RETURN_IF_ERROR(bad);
  }
  std::stable_sort(out.mutable_entries()->begin(), out.mutable_entries()->end(),
                   [](const vault::v1::AuditEntry& a, const vault::v1::AuditEntry& b) {
                     return a.time_unix_micros() < b.time_unix_micros();
                   });
  if (out.entries_size() == 0) {
    return absl::NotFoundError(absl::StrCat("no audit entry about agent ", id, " in the logs of ",
                                            absl::StrJoin(out.logs_read(), ", ")));
  }
  return out;
}

}  // namespace vault::migration
