// vaultctl federation status: the federation as the vault at the admin socket sees it.
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "node/grpc_status.h"
#include "vaultctl/commands.h"

namespace vault::vaultctl {
namespace {

using vault::v1::FederationStatusResponse;
using vault::v1::MemberView;
using vault::v1::VaultSummary;

std::string MirrorStateName(vault::v1::MirrorStatus::State s) {
  switch (s) {
    case vault::v1::MirrorStatus::FOLLOWING:
      return "following";
    case vault::v1::MirrorStatus::UNREACHABLE:
      return "unreachable";
    case vault::v1::MirrorStatus::FORKED:
      return "FORKED";
    case vault::v1::MirrorStatus::INVALID:
      return "INVALID";
    default:
      return "unknown";
  }
}

Json AgentsJson(const VaultSummary& s) {
  Json by_state = Json::Object();
  for (const VaultSummary::AgentCount& c : s.agents()) by_state.Add(c.state(), c.count());
  return by_state;
}

Json SummaryJson(const VaultSummary& s) {
  Json mirrors = Json::Array();
  for (const vault::v1::MirrorStatus& m : s.mirrors()) {
    mirrors.Push(Json::Object()
                     .Add("peer", m.peer())
                     .Add("state", MirrorStateName(m.state()))
                     .Add("entries", m.entries())
                     .Add("checkpoint_size", m.checkpoint_size())
                     .Add("last_error", m.last_error()));
  }
  Json follows = Json::Array();
  for (const VaultSummary::FollowCursor& f : s.follows()) {
    follows.Push(Json::Object().Add("peer", f.peer()).Add("cursor", f.cursor()));
  }
  return Json::Object()
      .Add("name", s.name())
      .Add("public_key", s.public_key())
      .Add("version", s.version())
      .Add("started_unix_ms", s.started_unix_ms())
      .Add("objects", s.object_count())
      .Add("stored_bytes", s.stored_bytes())
      .Add("last_seq", s.last_seq())
      .Add("audit_size", s.audit_size())
      .Add("checkpoint_size", s.checkpoint_size())
      .Add("agents_hosted", s.agents_hosted())
      .Add("agents_held", s.agents_held())
      .Add("agents", AgentsJson(s))
      .Add("mirrors", mirrors)
      .Add("follows", follows);
}

Json MemberJson(const MemberView& m) {
  Json out = Json::Object()
                 .Add("name", m.name())
                 .Add("address", m.address())
                 .Add("reachable", m.reachable());
  if (!m.reachable()) out.Add("error", m.error());
  if (m.reachable()) {
    out.Add("round_trip_ms", m.round_trip_ms()).Add("summary", SummaryJson(m.summary()));
  }
  if (m.has_mirror()) {
    out.Add("mirror", Json::Object()
                          .Add("state", MirrorStateName(m.mirror().state()))
                          .Add("entries", m.mirror().entries())
                          .Add("checkpoint_size", m.mirror().checkpoint_size())
                          .Add("last_error", m.mirror().last_error()));
  }
  if (m.has_mirror_lag()) out.Add("mirror_lag", m.mirror_lag());
  if (m.has_their_mirror_lag()) out.Add("their_mirror_lag", m.their_mirror_lag());
  out.Add("followed", m.followed());
  if (m.followed()) out.Add("follow_cursor", m.follow_cursor());
  if (m.has_replication_lag()) out.Add("replication_lag", m.replication_lag());
  return out;
}

std::string Opt(bool has, uint64_t value) { return has ? absl::StrCat(value) : "-"; }

void PrintText(const FederationStatusResponse& r) {
  const VaultSummary& self = r.self();
  std::cout << "this vault: " << self.name() << "  objects " << self.object_count() << " ("
            << HumanBytes(self.stored_bytes()) << ")  audit " << self.audit_size()
            << " entries (signed " << self.checkpoint_size() << ")  agents hosted "
            << self.agents_hosted();
  if (self.agents_held() > 0) std::cout << "  HELD " << self.agents_held() << " (--hold-agents)";
  std::cout << "\n\n";
  std::vector<std::vector<std::string>> rows = {{"MEMBER", "ADDRESS", "REACHABLE", "OBJECTS",
                                                 "AUDIT", "MIRROR", "MIRROR-LAG", "THEIR-LAG",
                                                 "AGENTS", "REPL-LAG"}};
  for (const MemberView& m : r.members()) {
    std::string mirror = m.has_mirror() ? absl::StrCat(MirrorStateName(m.mirror().state()), " ",
                                                       m.mirror().entries())
                                        : "-";
    std::string repl = m.followed() ? Opt(m.has_replication_lag(), m.replication_lag())
                                    : std::string("not followed");
    if (m.reachable()) {
      rows.push_back(
          {m.name(), m.address(), absl::StrCat("yes (", m.round_trip_ms(), " ms)"),
           absl::StrCat(m.summary().object_count()), absl::StrCat(m.summary().checkpoint_size()),
           mirror, Opt(m.has_mirror_lag(), m.mirror_lag()),
           Opt(m.has_their_mirror_lag(), m.their_mirror_lag()),
           m.summary().agents_held() > 0 ? absl::StrCat(m.summary().agents_hosted(), " (held ",
                                                        m.summary().agents_held(), ")")
                                         : absl::StrCat(m.summary().agents_hosted()),
           repl});
    } else {
      rows.push_back({m.name(), m.address(), "NO", "-", "-", mirror, "-", "-", "-", repl});
    }
  }
  PrintTable(rows);
  for (const MemberView& m : r.members()) {
    if (!m.reachable()) std::cout << m.name() << ": " << TerminalSafe(m.error()) << "\n";
    if (m.has_mirror() && !m.mirror().last_error().empty() && m.reachable()) {
      std::cout << m.name() << " mirror: " << TerminalSafe(m.mirror().last_error()) << "\n";
    }
  }
}

}  // namespace

void AddFederationStatusCommand(CLI::App* federation, GlobalOptions& g, Command& command) {
  auto* status = federation->add_subcommand(
      "status",
      "Every member as this vault sees it: reachable or not, objects, signed audit size, this "
      "vault's mirror of its log and the lag, its mirror of ours (THEIR-LAG), agents hosted, and "
      "CAS replication lag for members this vault follows. Exit 5 if any member is unreachable");
  static uint32_t timeout_ms = 2000;
  status->add_option("--member-timeout-ms", timeout_ms, "Deadline of each member's answer")
      ->check(CLI::Range(1, 60000))
      ->capture_default_str();
  status->callback([&g, &command] {
    command = [&g] {
      absl::StatusOr<Connection> conn = Connection::Connect(g.connect);
      if (!conn.ok()) return ReportConnectError(conn.status(), g.json());
      vault::v1::FederationStatusRequest req;
      req.set_timeout_ms(timeout_ms);
      FederationStatusResponse resp;
      // The call waits for the slowest member: its deadline is at least the members' plus a
      // margin for this vault's own work.
      std::unique_ptr<grpc::ClientContext> ctx = conn->Context();
      absl::Time at_least = absl::Now() + absl::Milliseconds(timeout_ms) + absl::Seconds(2);
      if (absl::FromChrono(ctx->deadline()) < at_least) {
        ctx->set_deadline(absl::ToChronoTime(at_least));
      }
      absl::Status s = node::FromGrpc(conn->federation()->Status(ctx.get(), req, &resp));
      if (!s.ok()) {
        if (absl::IsUnimplemented(s) || absl::IsPermissionDenied(s)) {
          s = absl::FailedPreconditionError(absl::StrCat(
              "federation status is served only on the vault's admin socket (", s.message(), ")"));
        }
        return ReportError(s, g.json());
      }
      bool all_reachable = true;
      for (const MemberView& m : resp.members()) all_reachable &= m.reachable();
      if (g.json()) {
        Json members = Json::Array();
        for (const MemberView& m : resp.members()) members.Push(MemberJson(m));
        std::cout << Json::Object()
                         .Add("self", SummaryJson(resp.self()))
                         .Add("members", members)
                         .Add("all_reachable", all_reachable)
                         .ToString()
                  << "\n";
      } else {
        PrintText(resp);
      }
      return all_reachable ? kExitOk : kExitUnavailable;
    };
  });
}

}  // namespace vault::vaultctl
