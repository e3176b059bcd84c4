#include "replication/reconciler.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "replication/fetcher.h"
#include "replication/internal/rpc.h"
#include "replication/key_space.h"

namespace vault::replication {
namespace {

using internal::Context;
using internal::FromGrpc;

// What the peer said about one range.
struct PeerRange {
  uint64_t count = 0;
  std::string fingerprint;
  std::vector<cas::Digest> digests;  // when listed
};

std::vector<std::pair<std::string, std::string>> WireRanges(const std::vector<KeySpan>& spans) {
  std::vector<std::pair<std::string, std::string>> out;
  out.reserve(spans.size());
  for (const KeySpan& s : spans) out.emplace_back(s.start(), s.end());
  return out;
}

}  // namespace

Reconciler::Reconciler(cas::Store* store, std::shared_ptr<grpc::Channel> peer,
                       std::string peer_name, ReconcileOptions options)
    : store_(store),
      channel_(peer),
      stub_(vault::v1::Cas::NewStub(peer)),
      peer_name_(std::move(peer_name)),
      options_(options),
      pusher_(std::make_unique<Pusher>(store, peer, options.push_options)) {}

Reconciler::~Reconciler() = default;

void Reconciler::Stop() {
  stopped_.store(true);
  pusher_->Stop();
}

absl::StatusOr<ReconcileStats> Reconciler::Compare() {
  ReconcileStats stats;
  const absl::Time start = absl::Now();
  VAULT_RETURN_IF_ERROR(CompareInto(&stats));
  stats.compare_seconds = stats.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  return stats;
}

absl::Status Reconciler::CompareInto(ReconcileStats* stats) {
  if (options_.max_bytes != 0 && options_.min_bytes > options_.max_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("the selection's min_bytes (",
                                                   options_.min_bytes, ") is above its max_bytes (",
                                                   options_.max_bytes, ")"));
  }
  const absl::Time start = absl::Now();
  internal::RetryPolicy retry{.window = options_.retry_window,
                              .stopped = [this] { return stopped(); }};
  // Asks the peer about `spans` (several calls when there are many); `list_below` 0 asks for
  // fingerprints only.
  auto ask = [&](const std::vector<KeySpan>& spans,
                 uint32_t list_below) -> absl::StatusOr<std::vector<PeerRange>> {
    std::vector<PeerRange> out;
    out.reserve(spans.size());
    for (size_t at = 0; at < spans.size(); at += options_.max_ranges_per_call) {
      if (stopped()) return absl::CancelledError("reconcile stopped");
      const size_t n = std::min<size_t>(options_.max_ranges_per_call, spans.size() - at);
      vault::v1::RangeFingerprintsRequest req;
      req.set_list_below(list_below);
      for (size_t i = at; i < at + n; ++i) {
        vault::v1::KeyRange* r = req.add_ranges();
        r->set_start(spans[i].start());
        r->set_end(spans[i].end());
      }
      vault::v1::RangeFingerprintsResponse resp;
      VAULT_RETURN_IF_ERROR(internal::Retry(retry, [&]() -> absl::Status {
        resp.Clear();
        ++stats->round_trips;
        return FromGrpc(stub_->RangeFingerprints(Context(options_.call_timeout).get(), req, &resp),
                        absl::StrCat("RangeFingerprints of ", peer_name_));
      }));
      stats->wire_bytes += req.ByteSizeLong() + resp.ByteSizeLong();
      if (resp.ranges_size() != static_cast<int>(n)) {
        return absl::DataLossError(absl::StrCat(peer_name_, " answered ", resp.ranges_size(),
                                                " range fingerprints for ", n, " ranges"));
      }
      for (size_t i = 0; i < n; ++i) {
        const vault::v1::RangeFingerprint& r = resp.ranges(static_cast<int>(i));
        PeerRange p{.count = r.count(), .fingerprint = r.fingerprint()};
        if (r.count() <= list_below) {
          // The listing must be exactly the range's objects, in key order.
          if (static_cast<uint64_t>(r.digests_size()) != r.count()) {
            return absl::DataLossError(absl::StrCat(peer_name_, " listed ", r.digests_size(),
                                                    " digests for a range of ", r.count()));
          }
          std::string prev;
          for (const vault::v1::Digest& pd : r.digests()) {
            absl::StatusOr<cas::Digest> d = internal::FromProto(pd);
            if (!d.ok() || !spans[at + i].Contains(*d) || d->Key() <= prev) {
              return absl::DataLossError(
                  absl::StrCat(peer_name_, " listed a digest out of its range or order"));
            }
            prev = d->Key();
            p.digests.push_back(*std::move(d));
          }
        }
        out.push_back(std::move(p));
      }
    }
    return out;
  };

  // A differing range to list: by both sides, or only here when the peer holds nothing there.
  struct ToList {
    KeySpan span;
    bool peer_empty = false;
  };
  std::vector<KeySpan> to_compare = {KeySpan::All()};
  std::vector<ToList> to_list;
  auto split = [&](const KeySpan& span, uint64_t count, std::vector<KeySpan>* out) {
    for (const KeySpan& part :
         Split(span, Fanout(count, options_.leaf_target, options_.max_fanout))) {
      out->push_back(part);
    }
  };
  while (!to_compare.empty() || !to_list.empty()) {
    ++stats->rounds;
    std::vector<KeySpan> next_compare;
    std::vector<ToList> next_list;
    if (!to_compare.empty()) {
      VAULT_ASSIGN_OR_RETURN(std::vector<PeerRange> theirs, ask(to_compare, 0));
      VAULT_ASSIGN_OR_RETURN(std::vector<cas::RangeSummary> ours,
                             store_->RangeFingerprints(WireRanges(to_compare), 0));
      stats->ranges_compared += to_compare.size();
      for (size_t i = 0; i < to_compare.size(); ++i) {
        const PeerRange& t = theirs[i];
        const cas::RangeSummary& o = ours[i];
        if (t.count == o.count && t.fingerprint == o.fingerprint) continue;
        if (t.count <= options_.list_below || to_compare[i].width() < 2) {
          next_list.push_back({to_compare[i], /*peer_empty=*/t.count == 0});
        } else {
          split(to_compare[i], std::max(t.count, o.count), &next_compare);
        }
      }
    }
    if (!to_list.empty()) {
      std::vector<KeySpan> spans, ask_peer;
      for (const ToList& l : to_list) {
        spans.push_back(l.span);
        if (!l.peer_empty) ask_peer.push_back(l.span);
      }
      VAULT_ASSIGN_OR_RETURN(
          std::vector<cas::RangeSummary> ours,
          store_->RangeFingerprints(WireRanges(spans), std::numeric_limits<uint64_t>::max()));
      std::vector<PeerRange> theirs;
      if (!ask_peer.empty()) {
        VAULT_ASSIGN_OR_RETURN(theirs, ask(ask_peer, std::max<uint32_t>(options_.list_below, 1)));
      }
      stats->ranges_listed += to_list.size();
      size_t k = 0;
      for (size_t i = 0; i < to_list.size(); ++i) {
        static const PeerRange kNothing;
        const PeerRange& t = to_list[i].peer_empty ? kNothing : theirs[k++];
        if (t.count > options_.list_below) {
          if (to_list[i].span.width() < 2) {
            return absl::DataLossError(absl::StrCat(
                peer_name_, " reports ", t.count,
                " objects whose keys share one 8-byte prefix (digests do not collide like that)"));
          }
          split(to_list[i].span, t.count, &next_compare);  // it grew since it was fingerprinted
          continue;
        }
        ListDifference diff = DiffSorted(ours[i].digests, t.digests);
        for (cas::Digest& d : diff.only_ours) {
          if (!Selected(d)) {
            ++stats->not_selected;
            continue;
          }
          stats->missing_there_bytes += d.size();
          stats->missing_there.push_back(std::move(d));
        }
        for (cas::Digest& d : diff.only_theirs) {
          if (!Selected(d)) {
            ++stats->not_selected;
            continue;
          }
          stats->missing_here_bytes += d.size();
          stats->missing_here.push_back(std::move(d));
        }
      }
    }
    to_compare = std::move(next_compare);
    to_list = std::move(next_list);
  }
  stats->compare_seconds = absl::ToDoubleSeconds(absl::Now() - start);
  return absl::OkStatus();
}

absl::StatusOr<ReconcileStats> Reconciler::Run(const ReconcileProgressFn& progress) {
  const absl::Time start = absl::Now();
  ReconcileStats stats;
  VAULT_RETURN_IF_ERROR(CompareInto(&stats));
  stats.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  if (progress) progress(ReconcileStage::kCompared, stats);
  if (options_.dry_run) return stats;
  if (options_.push && !stats.missing_there.empty()) {
    VAULT_ASSIGN_OR_RETURN(stats.pushed,
                           pusher_->PushDigests(stats.missing_there, [&](const PushStats& p) {
                             stats.pushed = p;
                             stats.seconds = absl::ToDoubleSeconds(absl::Now() - start);
                             if (progress) progress(ReconcileStage::kCopying, stats);
                           }));
  }
  if (options_.pull && !stats.missing_here.empty()) {
    VAULT_RETURN_IF_ERROR(Pull(&stats, progress));
  }
  stats.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  return stats;
}

absl::Status Reconciler::Pull(ReconcileStats* stats, const ReconcileProgressFn& progress) {
  Fetcher fetcher(store_, channel_, peer_name_, [this] { return stopped(); });
  absl::Time last_report = absl::Now();
  return fetcher.FetchAll(
      stats->missing_here, [&](const cas::Digest& d, const absl::StatusOr<cas::PutOutcome>& o) {
        if (o.ok()) {
          ++stats->pulled_objects;
          stats->pulled_bytes += d.size();
        } else {
          ++stats->pull_refused;
          if (stats->pull_refusals.size() < options_.push_options.max_refusals_listed) {
            stats->pull_refusals.push_back(Refusal{d, o.status()});
          }
        }
        if (progress && absl::Now() - last_report >= absl::Milliseconds(100)) {
          last_report = absl::Now();
          progress(ReconcileStage::kCopying, *stats);
        }
      });
}

}  // namespace vault::replication
