// vaultctl cas rm / pin / unpin / pins / gc / du: the CAS lifecycle (docs/operations.md
// "Reclaiming space"), through the CasAdmin service on a vault's admin socket.
//
//   vaultctl cas pin sha256:<hex>/<size> --reason "release 1.2" [--until 30d]
//   vaultctl cas rm sha256:<hex>/<size>...      # refused, naming the holder, while held
//   vaultctl cas gc --dry-run                   # what a collection would remove
//   vaultctl cas du
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "cas/digest.h"
#include "cas/digest_proto.h"
#include "node/grpc_status.h"
#include "vault/v1/cas_admin.grpc.pb.h"
#include "vaultctl/commands.h"
#include "vaultctl/output.h"

namespace vault::vaultctl {
namespace {

using node::FromGrpc;

// A collection of a large store runs for a while; its call still carries a deadline.
constexpr absl::Duration kCollectDeadline = absl::Hours(6);

absl::Status FromCasAdminGrpc(const grpc::Status& status) {
  absl::Status s = FromGrpc(status);
  if (absl::IsUnimplemented(s)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "this vault does not serve the CAS lifecycle commands here: they are served only on a "
        "vault's admin socket (--vault PATH or --config), by a vaultd that has them (",
        s.message(), ")"));
  }
  return s;
}

std::string Digest(const vault::v1::Digest& d) {
  absl::StatusOr<cas::Digest> digest = cas::FromProto(d);
  return digest.ok() ? digest->ToString() : "?";
}

std::string When(int64_t unix_ms) {
  return absl::FormatTime("%Y-%m-%d %H:%M:%S UTC", absl::FromUnixMillis(unix_ms),
                          absl::UTCTimeZone());
}

// "2027-01-31", "2027-01-31T12:00:00Z" (RFC 3339), or a duration from now: "90d", "12h", "30m".
absl::StatusOr<absl::Time> ParseUntil(const std::string& text) {
  absl::Time t;
  std::string err;
  if (absl::ParseTime(absl::RFC3339_full, text, &t, &err)) return t;
  if (absl::ParseTime("%Y-%m-%d", text, absl::UTCTimeZone(), &t, &err)) return t;
  absl::Duration d;
  int64_t days = 0;
  if (text.size() > 1 && text.back() == 'd' &&
      absl::SimpleAtoi(absl::string_view(text).substr(0, text.size() - 1), &days) && days > 0) {
    return absl::Now() + absl::Hours(24 * days);
  }
  if (absl::ParseDuration(text, &d) && d > absl::ZeroDuration()) return absl::Now() + d;
  return absl::InvalidArgumentError(
      absl::StrCat("--until \"", text,
                   "\" is neither a time (2027-01-31, 2027-01-31T12:00:00Z) nor a duration from "
                   "now (90d, 12h, 30m)"));
}

Json PinJson(const vault::v1::PinInfo& p) {
  return Json::Object()
      .Add("digest", Digest(p.digest()))
      .Add("reason", p.reason())
      .Add("until_unix_ms", p.until_unix_ms())
      .Add("by", p.by())
      .Add("pinned_unix_ms", p.pinned_unix_ms())
      .Add("expired", p.expired());
}

Json ReportJson(const vault::v1::CollectReport& r) {
  Json held_by = Json::Object();
  for (const auto& [source, n] : r.held_by()) held_by.Add(source, n);
  Json listed = Json::Array();
  for (const vault::v1::Digest& d : r.listed()) listed.Push(Digest(d));
  Json o = Json::Object();
  o.Add("dry_run", r.dry_run())
      .Add("trigger", r.trigger())
      .Add("objects", r.objects())
      .Add("bytes", r.bytes())
      .Add("held", r.held())
      .Add("held_bytes", r.held_bytes())
      .Add("held_by", held_by)
      .Add("young", r.young())
      .Add("young_bytes", r.young_bytes())
      .Add("removed", r.removed())
      .Add("removed_bytes", r.removed_bytes())
      .Add("kept_recent", r.kept_recent())
      .Add("chunks", r.chunks())
      .Add("chunks_unreferenced", r.chunks_unreferenced())
      .Add("chunk_bytes_unreferenced", r.chunk_bytes_unreferenced())
      .Add("chunks_removed", r.chunks_removed())
      .Add("pack_files", r.pack_files())
      .Add("pack_bytes", r.pack_bytes())
      .Add("pack_live_bytes", r.pack_live_bytes())
      .Add("packs_rewritten", r.packs_rewritten())
      .Add("pack_bytes_freed", r.pack_bytes_freed())
      .Add("pack_bytes_copied", r.pack_bytes_copied())
      .Add("pack_values_damaged", r.pack_values_damaged())
      .Add("started_unix_ms", r.started_unix_ms())
      .Add("took_ms", r.took_ms());
  if (r.dry_run()) o.Add("listed", listed);
  return o;
}

void PrintReport(const vault::v1::CollectReport& r) {
  std::vector<std::string> held_by;
  for (const auto& [source, n] : r.held_by()) held_by.push_back(absl::StrCat(n, " by ", source));
  std::cout << (r.dry_run() ? "dry run: nothing was removed\n" : "") << "objects:  " << r.objects()
            << " (" << HumanBytes(r.bytes()) << ")\n"
            << "held:     " << r.held() << " (" << HumanBytes(r.held_bytes()) << ")"
            << (held_by.empty() ? "" : absl::StrCat(": ", absl::StrJoin(held_by, ", "))) << "\n"
            << "young:    " << r.young() << " (" << HumanBytes(r.young_bytes())
            << "), kept: stored or confirmed within cas.gc.keep_unheld_seconds\n"
            << (r.dry_run() ? "would go: " : "removed:  ") << r.removed() << " ("
            << HumanBytes(r.removed_bytes()) << ")\n";
  if (r.kept_recent() > 0) {
    std::cout << "kept:     " << r.kept_recent() << " stored again or held while it ran\n";
  }
  std::cout << "chunks:   " << r.chunks_unreferenced() << " of " << r.chunks() << " unreferenced ("
            << HumanBytes(r.chunk_bytes_unreferenced()) << ")"
            << (r.dry_run() ? "" : absl::StrCat(", ", r.chunks_removed(), " removed")) << "\n"
            << "packs:    " << r.pack_files() << " files, " << HumanBytes(r.pack_bytes()) << ", "
            << HumanBytes(r.pack_live_bytes()) << " live";
  if (r.packs_rewritten() > 0) {
    std::cout << "; " << r.packs_rewritten() << " rewritten (" << HumanBytes(r.pack_bytes_copied())
              << " copied), " << HumanBytes(r.pack_bytes_freed()) << " freed";
  }
  std::cout << "\n";
  if (r.pack_values_damaged() > 0) {
    std::cout << "damaged:  " << r.pack_values_damaged()
              << " values failed their hash and kept their pack file: the scrub "
                 "(scrub.bytes_per_second, scrub.repair_from) repairs them from a member\n";
  }
  std::cout << "took:     " << r.took_ms() << " ms\n";
  for (const vault::v1::Digest& d : r.listed()) std::cout << "  " << Digest(d) << "\n";
}

int RmCommand(const GlobalOptions& g, const std::vector<std::string>& texts) {
  vault::v1::RemoveObjectsRequest req;
  for (const std::string& t : texts) {
    absl::StatusOr<cas::Digest> d = cas::Digest::Parse(t);
    if (!d.ok()) return ReportError(d.status(), g.json());
    cas::ToProto(*d, req.add_digests());
  }
  absl::StatusOr<Connection> conn = Connection::Connect(g.connect);
  if (!conn.ok()) return ReportConnectError(conn.status(), g.json());
  vault::v1::CasAdmin::Stub stub(conn->channel());
  vault::v1::RemoveObjectsResponse resp;
  absl::Status s = FromCasAdminGrpc(stub.Remove(conn->Context().get(), req, &resp));
  if (!s.ok()) return ReportError(s, g.json());
  int exit = kExitOk;
  Json arr = Json::Array();
  for (const vault::v1::RemovedObject& r : resp.results()) {
    const std::string digest = Digest(r.digest());
    if (!r.error().empty()) exit = kExitRefused;
    if (g.json()) {
      Json o = Json::Object().Add("digest", digest).Add("removed", r.removed());
      if (!r.error().empty()) o.Add("error", r.error());
      arr.Push(o);
    } else if (!r.error().empty()) {
      std::cerr << "vaultctl: kept: " << r.error() << "\n";
    } else {
      std::cout << (r.removed() ? "removed  " : "not stored  ") << digest << "\n";
    }
  }
  if (g.json()) std::cout << arr.ToString() << "\n";
  return exit;
}

int PinCommand(const GlobalOptions& g, const std::string& text, const std::string& reason,
               const std::string& until) {
  vault::v1::PinRequest req;
  absl::StatusOr<cas::Digest> d = cas::Digest::Parse(text);
  if (!d.ok()) return ReportError(d.status(), g.json());
  cas::ToProto(*d, req.mutable_digest());
  req.set_reason(reason);
  if (!until.empty()) {
    absl::StatusOr<absl::Time> t = ParseUntil(until);
    if (!t.ok()) return ReportError(t.status(), g.json());
    req.set_until_unix_ms(absl::ToUnixMillis(*t));
  }
  absl::StatusOr<Connection> conn = Connection::Connect(g.connect);
  if (!conn.ok()) return ReportConnectError(conn.status(), g.json());
  vault::v1::CasAdmin::Stub stub(conn->channel());
  vault::v1::PinResponse resp;
  absl::Status s = FromCasAdminGrpc(stub.Pin(conn->Context().get(), req, &resp));
  if (!s.ok()) return ReportError(s, g.json());
  if (g.json()) {
    std::cout << PinJson(resp.pin()).Add("replaced", resp.replaced()).ToString() << "\n";
  } else {
    std::cout << (resp.replaced() ? "pinned again  " : "pinned  ") << Digest(resp.pin().digest())
              << (resp.pin().until_unix_ms() == 0
                      ? std::string(" until unpinned")
                      : absl::StrCat(" until ", When(resp.pin().until_unix_ms())))
              << "\n";
  }
  return kExitOk;
}

int UnpinCommand(const GlobalOptions& g, const std::string& text) {
  vault::v1::UnpinRequest req;
  absl::StatusOr<cas::Digest> d = cas::Digest::Parse(text);
  if (!d.ok()) return ReportError(d.status(), g.json());
  cas::ToProto(*d, req.mutable_digest());
  absl::StatusOr<Connection> conn = Connection::Connect(g.connect);
  if (!conn.ok()) return ReportConnectError(conn.status(), g.json());
  vault::v1::CasAdmin::Stub stub(conn->channel());
  vault::v1::UnpinResponse resp;
  absl::Status s = FromCasAdminGrpc(stub.Unpin(conn->Context().get(), req, &resp));
  if (!s.ok()) return ReportError(s, g.json());
  if (g.json()) {
    std::cout << Json::Object().Add("digest", d->ToString()).Add("unpinned", true).ToString()
              << "\n";
  } else {
    std::cout << "unpinned  " << d->ToString() << "\n";
  }
  return kExitOk;
}

int PinsCommand(const GlobalOptions& g) {
  absl::StatusOr<Connection> conn = Connection::Connect(g.connect);
  if (!conn.ok()) return ReportConnectError(conn.status(), g.json());
  vault::v1::CasAdmin::Stub stub(conn->channel());
  vault::v1::ListPinsResponse resp;
  absl::Status s =
      FromCasAdminGrpc(stub.ListPins(conn->Context().get(), vault::v1::ListPinsRequest(), &resp));
  if (!s.ok()) return ReportError(s, g.json());
  if (g.json()) {
    Json arr = Json::Array();
    for (const vault::v1::PinInfo& p : resp.pins()) arr.Push(PinJson(p));
    std::cout << arr.ToString() << "\n";
    return kExitOk;
  }
  if (resp.pins_size() == 0) std::cerr << "no pins\n";
  for (const vault::v1::PinInfo& p : resp.pins()) {
    std::cout << Digest(p.digest()) << "  "
              << (p.until_unix_ms() == 0
                      ? std::string("until unpinned")
                      : absl::StrCat(p.expired() ? "ended " : "until ", When(p.until_unix_ms())))
              << "  by " << p.by() << (p.reason().empty() ? "" : absl::StrCat("  ", p.reason()))
              << "\n";
  }
  return kExitOk;
}

int GcCommand(const GlobalOptions& g, bool dry_run, uint32_t list, bool no_compact) {
  absl::StatusOr<Connection> conn = Connection::Connect(g.connect);
  if (!conn.ok()) return ReportConnectError(conn.status(), g.json());
  vault::v1::CasAdmin::Stub stub(conn->channel());
  vault::v1::CollectRequest req;
  req.set_dry_run(dry_run);
  req.set_list_limit(list);
  req.set_no_compact(no_compact);
  vault::v1::CollectReport resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + kCollectDeadline));
  absl::Status s = FromCasAdminGrpc(stub.Collect(&ctx, req, &resp));
  if (!s.ok()) return ReportError(s, g.json());
  if (g.json()) {
    std::cout << ReportJson(resp).ToString() << "\n";
  } else {
    PrintReport(resp);
  }
  return kExitOk;
}

int DuCommand(const GlobalOptions& g) {
  absl::StatusOr<Connection> conn = Connection::Connect(g.connect);
  if (!conn.ok()) return ReportConnectError(conn.status(), g.json());
  vault::v1::CasAdmin::Stub stub(conn->channel());
  vault::v1::UsageResponse resp;
  absl::Status s =
      FromCasAdminGrpc(stub.Usage(conn->Context().get(), vault::v1::UsageRequest(), &resp));
  if (!s.ok()) return ReportError(s, g.json());
  if (g.json()) {
    Json o = Json::Object()
                 .Add("objects", resp.objects())
                 .Add("bytes", resp.bytes())
                 .Add("pack_files", resp.pack_files())
                 .Add("pack_bytes", resp.pack_bytes())
                 .Add("pack_live_bytes", resp.pack_live_bytes())
                 .Add("pack_garbage_bytes", resp.pack_garbage_bytes())
                 .Add("database_bytes", resp.database_bytes())
                 .Add("pins", resp.pins());
    if (resp.has_last_collection()) o.Add("last_collection", ReportJson(resp.last_collection()));
    std::cout << o.ToString() << "\n";
    return kExitOk;
  }
  std::cout << "objects:   " << resp.objects() << " (" << HumanBytes(resp.bytes()) << ")\n"
            << "on disk:   " << HumanBytes(resp.pack_bytes() + resp.database_bytes()) << " ("
            << HumanBytes(resp.pack_bytes()) << " in " << resp.pack_files() << " pack files, "
            << HumanBytes(resp.database_bytes()) << " database)\n"
            << "garbage:   " << HumanBytes(resp.pack_garbage_bytes())
            << " in pack files (given back by compaction: vaultctl cas gc)\n"
            << "pins:      " << resp.pins() << "\n";
  if (resp.has_last_collection()) {
    const vault::v1::CollectReport& r = resp.last_collection();
    std::cout << "last gc:   " << When(r.started_unix_ms()) << " (" << r.trigger()
              << (r.dry_run() ? ", dry run" : "") << "): " << r.held() << " held, " << r.young()
              << " young, " << r.removed() << (r.dry_run() ? " would go" : " removed") << " ("
              << HumanBytes(r.removed_bytes()) << ")\n";
  } else {
    std::cout << "last gc:   none since vaultd started (vaultctl cas gc --dry-run shows what one "
                 "would remove)\n";
  }
  return kExitOk;
}

}  // namespace

void AddCasLifecycleCommands(CLI::App& cas, GlobalOptions& g, Command& command) {
  auto* rm = cas.add_subcommand(
      "rm",
      "Remove objects at once, whatever their age; refused for an object that something holds "
      "(a pin, an agent, an image), naming it (exit 4)");
  static std::vector<std::string> rm_digests;
  rm->add_option("DIGEST", rm_digests, "sha256:<hex>/<size>")->required();
  rm->callback([&] { command = [&g] { return RmCommand(g, rm_digests); }; });

  auto* pin = cas.add_subcommand("pin",
                                 "Keep an object whatever else holds it (until unpinned, "
                                 "or --until)");
  static std::string pin_digest, pin_reason, pin_until;
  pin->add_option("DIGEST", pin_digest, "sha256:<hex>/<size>")->required();
  pin->add_option("--reason", pin_reason, "Why (shown by `cas pins`, recorded in the audit log)");
  pin->add_option("--until", pin_until,
                  "When the pin ends by itself: a time (2027-01-31, 2027-01-31T12:00:00Z) or a "
                  "duration from now (90d, 12h)");
  pin->callback(
      [&] { command = [&g] { return PinCommand(g, pin_digest, pin_reason, pin_until); }; });

  auto* unpin = cas.add_subcommand("unpin", "Remove an object's pin (exit 3 if it has none)");
  static std::string unpin_digest;
  unpin->add_option("DIGEST", unpin_digest, "sha256:<hex>/<size>")->required();
  unpin->callback([&] { command = [&g] { return UnpinCommand(g, unpin_digest); }; });

  auto* pins = cas.add_subcommand("pins", "List the pins, ended ones included");
  pins->callback([&] { command = [&g] { return PinsCommand(g); }; });

  auto* gc = cas.add_subcommand(
      "gc",
      "Collect garbage now: remove the objects nothing holds that are older than "
      "cas.gc.keep_unheld_seconds, then the chunks nothing names, then rewrite the pack files "
      "whose live part is under cas.gc.compact_below_live_percent");
  static bool gc_dry_run = false, gc_no_compact = false;
  static uint32_t gc_list = 0;
  gc->add_flag("--dry-run", gc_dry_run, "Count what would go, remove nothing");
  gc->add_option("--list", gc_list, "With --dry-run: list up to this many objects that would go");
  gc->add_flag("--no-compact", gc_no_compact,
               "Leave the pack files as they are (compaction gives the space back to the file "
               "system)");
  gc->callback(
      [&] { command = [&g] { return GcCommand(g, gc_dry_run, gc_list, gc_no_compact); }; });

  auto* du = cas.add_subcommand("du",
                                "Show the store's size, on disk too, and the last "
                                "collection");
  du->callback([&] { command = [&g] { return DuCommand(g); }; });
}

}  // namespace vault::vaultctl
