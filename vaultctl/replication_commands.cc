// vaultctl cas replicate / cas reconcile: the vault copies objects to (or reconciles with) a
// federation member. vaultctl asks the vault over its admin socket (Admin.Replicate,
// Admin.Reconcile); the vault holds the member identity and makes the calls over mutual TLS.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cas/digest.h"
#include "node/grpc_status.h"
#include "vaultctl/commands.h"
#include "vaultctl/output.h"

namespace vault::vaultctl {
namespace {

using node::FromGrpc;
using vault::v1::ReplicationProgress;

// A replication runs as long as it needs to; its stream still carries a deadline.
constexpr absl::Duration kJobDeadline = absl::Hours(24);

// Reads a job's progress stream, drawing a bar on a terminal; returns the final message.
absl::StatusOr<ReplicationProgress> Follow(grpc::ClientContext* ctx,
                                           grpc::ClientReader<ReplicationProgress>* reader,
                                           const std::string& label) {
  ReplicationProgress p, last;
  std::unique_ptr<Progress> bar;
  uint64_t shown_bytes = 0, shown_objects = 0;
  while (reader->Read(&p)) {
    if (bar == nullptr)
      bar = std::make_unique<Progress>(label, p.planned_bytes(), p.planned_objects());
    uint64_t objects = p.objects() + p.skipped() + p.refused() + p.pulled_objects();
    uint64_t bytes = p.bytes() + p.skipped_bytes() + p.pulled_bytes();
    bar->Add(bytes > shown_bytes ? bytes - shown_bytes : 0,
             objects > shown_objects ? objects - shown_objects : 0);
    shown_bytes = std::max(shown_bytes, bytes);
    shown_objects = std::max(shown_objects, objects);
    last = p;
  }
  if (bar != nullptr) bar->Done();
  absl::Status s = FromGrpc(reader->Finish());
  if (!s.ok()) return s;
  if (!last.done()) return absl::InternalError("the vault ended the call without a summary");
  return last;
}

Json SummaryJson(const std::string& peer, const ReplicationProgress& p) {
  Json refusals = Json::Array();
  for (const vault::v1::Refusal& r : p.refusals()) {
    absl::StatusOr<cas::Digest> d = cas::Digest::FromParts(r.digest().sha256(), r.digest().size());
    refusals.Push(
        Json::Object()
            .Add("digest", d.ok() ? d->ToString() : "malformed")
            .Add("code", absl::StatusCodeToString(static_cast<absl::StatusCode>(r.status().code())))
            .Add("message", r.status().message()));
  }
  return Json::Object()
      .Add("peer", peer)
      .Add("objects", p.objects())
      .Add("bytes", p.bytes())
      .Add("skipped", p.skipped())
      .Add("skipped_bytes", p.skipped_bytes())
      .Add("refused", p.refused())
      .Add("pulled_objects", p.pulled_objects())
      .Add("pulled_bytes", p.pulled_bytes())
      .Add("chunks_skipped", p.chunks_skipped())
      .Add("chunk_bytes_skipped", p.chunk_bytes_skipped())
      .Add("resumed_bytes", p.resumed_bytes())
      .Add("sent_bytes", p.sent_bytes())
      .Add("retries", p.retries())
      .Add("last_seq", p.last_seq())
      .Add("ranges_compared", p.ranges_compared())
      .Add("seconds", absl::StrFormat("%.3f", p.seconds()))
      .Add("refusals", refusals);
}

int Report(const GlobalOptions& g, const std::string& peer, const std::string& verb,
           const ReplicationProgress& p) {
  if (g.json()) {
    std::printf("%s\n", SummaryJson(peer, p).ToString().c_str());
  } else {
    std::printf("%s %s: %llu objects (%s) copied, %llu already there, %llu refused", verb.c_str(),
                peer.c_str(), static_cast<unsigned long long>(p.objects()),
                HumanBytes(p.bytes()).c_str(), static_cast<unsigned long long>(p.skipped()),
                static_cast<unsigned long long>(p.refused()));
    if (p.pulled_objects() > 0 || verb == "reconcile with") {
      std::printf(", %llu fetched (%s)", static_cast<unsigned long long>(p.pulled_objects()),
                  HumanBytes(p.pulled_bytes()).c_str());
    }
    if (p.chunks_skipped() > 0) {
      std::printf(", %llu chunks (%s) not sent: the peer had them",
                  static_cast<unsigned long long>(p.chunks_skipped()),
                  HumanBytes(p.chunk_bytes_skipped()).c_str());
    }
    std::printf(", in %.2f s\n", p.seconds());
    for (const vault::v1::Refusal& r : p.refusals()) {
      absl::StatusOr<cas::Digest> d =
          cas::Digest::FromParts(r.digest().sha256(), r.digest().size());
      std::printf("refused %s: %s\n", d.ok() ? d->ToString().c_str() : "malformed",
                  r.status().message().c_str());
    }
  }
  return p.refused() > 0 ? kExitRefused : kExitOk;
}

int ReplicateCommand(const GlobalOptions& g, const std::string& peer,
                     const std::vector<std::string>& digests, bool all, uint64_t since,
                     uint32_t streams) {
  if ((digests.empty() ? 0 : 1) + (all ? 1 : 0) + (since > 0 ? 1 : 0) != 1) {
    ReportError(absl::InvalidArgumentError(
                    "name the objects with DIGEST..., --all or --since CURSOR (one of them)"),
                g.json());
    return kExitUsage;
  }
  vault::v1::ReplicateRequest req;
  req.set_peer(peer);
  req.set_all(all);
  req.set_since_seq(since);
  req.set_streams(streams);
  for (const std::string& text : digests) {
    absl::StatusOr<cas::Digest> d = cas::Digest::Parse(text);
    if (!d.ok()) {
      ReportError(absl::InvalidArgumentError(absl::StrCat(text, ": ", d.status().message())),
                  g.json());
      return kExitUsage;
    }
    req.add_digests()->set_sha256(d->sha256());
    req.mutable_digests(req.digests_size() - 1)->set_size(d->size());
  }
  absl::StatusOr<Connection> conn = Connection::Connect(g.connect);
  if (!conn.ok()) return ReportConnectError(conn.status(), g.json());
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + kJobDeadline));
  std::unique_ptr<grpc::ClientReader<ReplicationProgress>> reader =
      conn->admin()->Replicate(&ctx, req);
  absl::StatusOr<ReplicationProgress> p = Follow(&ctx, reader.get(), "replicate");
  if (!p.ok()) return ReportError(p.status(), g.json());
  return Report(g, peer, "replicate to", *p);
}

std::string DigestText(const vault::v1::Digest& p) {
  absl::StatusOr<cas::Digest> d = cas::Digest::FromParts(p.sha256(), p.size());
  return d.ok() ? d->ToString() : "malformed";
}

int ReconcileReport(const GlobalOptions& g, const std::string& peer, const std::string& mode,
                    bool dry_run, const ReplicationProgress& p) {
  if (g.json()) {
    Json here = Json::Array(), there = Json::Array(), refusals = Json::Array();
    for (const vault::v1::Digest& d : p.missing_here_digests()) here.Push(DigestText(d));
    for (const vault::v1::Digest& d : p.missing_there_digests()) there.Push(DigestText(d));
    for (const vault::v1::Refusal& r : p.refusals()) {
      refusals.Push(Json::Object()
                        .Add("digest", DigestText(r.digest()))
                        .Add("code", absl::StatusCodeToString(
                                         static_cast<absl::StatusCode>(r.status().code())))
                        .Add("message", r.status().message()));
    }
    std::printf("%s\n", Json::Object()
                            .Add("peer", peer)
                            .Add("mode", mode)
                            .Add("dry_run", dry_run)
                            .Add("ranges_compared", p.ranges_compared())
                            .Add("ranges_listed", p.ranges_listed())
                            .Add("round_trips", p.round_trips())
                            .Add("compare_wire_bytes", p.compare_wire_bytes())
                            .Add("compare_seconds", absl::StrFormat("%.3f", p.compare_seconds()))
                            .Add("missing_here", p.missing_here())
                            .Add("missing_here_bytes", p.missing_here_bytes())
                            .Add("missing_there", p.missing_there())
                            .Add("missing_there_bytes", p.missing_there_bytes())
                            .Add("pushed", p.objects())
                            .Add("pushed_bytes", p.bytes())
                            .Add("already_there", p.skipped())
                            .Add("pulled", p.pulled_objects())
                            .Add("pulled_bytes", p.pulled_bytes())
                            .Add("copied", p.objects() + p.pulled_objects())
                            .Add("refused", p.refused())
                            .Add("seconds", absl::StrFormat("%.3f", p.seconds()))
                            .Add("missing_here_digests", here)
                            .Add("missing_there_digests", there)
                            .Add("refusals", refusals)
                            .ToString()
                            .c_str());
  } else {
    std::printf("compared with %s: %llu ranges in %llu round trips (%s), %.2f s\n", peer.c_str(),
                static_cast<unsigned long long>(p.ranges_compared()),
                static_cast<unsigned long long>(p.round_trips()),
                HumanBytes(p.compare_wire_bytes()).c_str(), p.compare_seconds());
    auto list = [](const char* what, uint64_t n, uint64_t bytes,
                   const google::protobuf::RepeatedPtrField<vault::v1::Digest>& digests) {
      std::printf("%s: %llu objects (%s)\n", what, static_cast<unsigned long long>(n),
                  HumanBytes(bytes).c_str());
      for (const vault::v1::Digest& d : digests) std::printf("  %s\n", DigestText(d).c_str());
      if (n > static_cast<uint64_t>(digests.size())) {
        std::printf("  ... and %llu more\n",
                    static_cast<unsigned long long>(n - static_cast<uint64_t>(digests.size())));
      }
    };
    list(absl::StrCat("only on ", peer, " (missing here)").c_str(), p.missing_here(),
         p.missing_here_bytes(), p.missing_here_digests());
    list(absl::StrCat("only here (missing on ", peer, ")").c_str(), p.missing_there(),
         p.missing_there_bytes(), p.missing_there_digests());
    if (dry_run) {
      std::printf("dry run: nothing copied\n");
    } else {
      std::printf("pushed %llu objects (%s), fetched %llu objects (%s), %llu refused, in %.2f s\n",
                  static_cast<unsigned long long>(p.objects()), HumanBytes(p.bytes()).c_str(),
                  static_cast<unsigned long long>(p.pulled_objects()),
                  HumanBytes(p.pulled_bytes()).c_str(),
                  static_cast<unsigned long long>(p.refused()), p.seconds());
    }
    for (const vault::v1::Refusal& r : p.refusals()) {
      std::printf("refused %s: %s\n", DigestText(r.digest()).c_str(), r.status().message().c_str());
    }
  }
  return p.refused() > 0 ? kExitRefused : kExitOk;
}

int ReconcileCommand(const GlobalOptions& g, const std::string& peer, bool push, bool pull,
                     bool both, bool dry_run, uint64_t min_bytes, uint64_t max_bytes) {
  if (push + pull + both > 1) {
    ReportError(absl::InvalidArgumentError("name at most one of --push, --pull, --both"), g.json());
    return kExitUsage;
  }
  if (max_bytes != 0 && min_bytes > max_bytes) {
    ReportError(absl::InvalidArgumentError("--min-bytes is above --max-bytes"), g.json());
    return kExitUsage;
  }
  vault::v1::ReconcileRequest req;
  req.set_peer(peer);
  req.set_push(push || (!pull && !push));
  req.set_pull(pull || (!pull && !push));
  req.set_dry_run(dry_run);
  req.set_min_bytes(min_bytes);
  req.set_max_bytes(max_bytes);
  const std::string mode = req.push() && req.pull() ? "both" : req.push() ? "push" : "pull";
  absl::StatusOr<Connection> conn = Connection::Connect(g.connect);
  if (!conn.ok()) return ReportConnectError(conn.status(), g.json());
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + kJobDeadline));
  std::unique_ptr<grpc::ClientReader<ReplicationProgress>> reader =
      conn->admin()->Reconcile(&ctx, req);
  absl::StatusOr<ReplicationProgress> p = Follow(&ctx, reader.get(), "reconcile");
  if (!p.ok()) return ReportError(p.status(), g.json());
  return ReconcileReport(g, peer, mode, dry_run, *p);
}

}  // namespace

void AddReplicationCommands(CLI::App& cas, GlobalOptions& g, Command& command) {
  auto* rep = cas.add_subcommand(
      "replicate",
      "Copy objects to a federation member that lacks them (the vault pushes them over mutual "
      "TLS); exit 4 if the peer refused any");
  static std::string rep_peer;
  static std::vector<std::string> rep_digests;
  static bool rep_all = false;
  static uint64_t rep_since = 0;
  static uint32_t rep_streams = 0;
  rep->add_option("--to", rep_peer, "The member's name")->required();
  rep->add_option("DIGEST", rep_digests, "Objects to copy (sha256:<hex>/<size>)");
  rep->add_flag("--all", rep_all, "Every stored object");
  rep->add_option("--since", rep_since,
                  "The objects stored after this change-feed sequence number (cas ls)");
  rep->add_option("--streams", rep_streams, "Calls in flight (default 4)");
  rep->callback([&] {
    command = [&g] {
      return ReplicateCommand(g, rep_peer, rep_digests, rep_all, rep_since, rep_streams);
    };
  });

  auto* rec = cas.add_subcommand(
      "reconcile",
      "Find the objects this vault and a member do not share (range fingerprints, no cursors) "
      "and copy them: both ways by default; exit 4 if any was refused");
  static std::string rec_peer;
  static bool rec_push = false, rec_pull = false, rec_both = false, rec_dry_run = false;
  static uint64_t rec_min_bytes = 0, rec_max_bytes = 0;
  rec->add_option("PEER", rec_peer, "The member's name")->required();
  rec->add_flag("--push", rec_push, "Only send the objects the peer lacks");
  rec->add_flag("--pull", rec_pull, "Only fetch the objects this vault lacks");
  rec->add_flag("--both", rec_both, "Both (the default)");
  rec->add_flag("--dry-run", rec_dry_run, "Only print what differs");
  rec->add_option("--min-bytes", rec_min_bytes,
                  "Only objects of at least this many bytes (the comparison covers all)");
  rec->add_option("--max-bytes", rec_max_bytes, "Only objects of at most this many bytes (0: any)");
  rec->callback([&] {
    command = [&g] {
      return ReconcileCommand(g, rec_peer, rec_push, rec_pull, rec_both, rec_dry_run, rec_min_bytes,
                              rec_max_bytes);
    };
  });
}

}  // namespace vault::vaultctl
