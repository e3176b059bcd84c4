// replication: anti-entropy — find and copy the difference between this vault's object set and
// a peer's, without cursors (a lost cursor, a vault restored from a backup).
//
// Both sides fingerprint the same key ranges (Cas.RangeFingerprints: per range, the count and
// the SHA-256 of the object keys in order). Equal ranges are done. A differing range is split
// (KeySpan, Split) into parts of about `leaf_target` objects and the parts are compared in the
// next round; a differing range that the peer holds at most `list_below` objects of is listed
// (the peer's digests, beside this store's) and the lists are merged. So the wire carries a
// fingerprint per compared range and the digests of small differing ranges only: comparing two
// equal stores costs one call, and D differences among N objects about 2 + log(N / 256) rounds
// with O(D) ranges each. Objects only the peer holds are then fetched (Fetcher: verified before
// they are stored), objects only this vault holds are pushed (Pusher).
//
//   Reconciler r(store, channel, "vault-b", ReconcileOptions{.pull = true, .push = true});
//   VAULT_ASSIGN_OR_RETURN(ReconcileStats stats, r.Run(nullptr));
//
// Thread-safety: one Run at a time; Stop may be called from any thread. The store must outlive
// the Reconciler.
#ifndef VAULT_REPLICATION_RECONCILER_H_
#define VAULT_REPLICATION_RECONCILER_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cas/digest.h"
#include "cas/store.h"
#include "replication/pusher.h"
#include "vault/v1/cas.grpc.pb.h"

namespace vault::replication {

struct ReconcileOptions {
  bool pull = true;  // fetch what only the peer holds
  bool push = true;  // send what only this vault holds
  bool dry_run = false;
  // The selection, as a follow's: only differing objects of min_bytes to max_bytes bytes (0: no
  // upper bound) are reported and copied. The comparison still covers every object (a range's
  // fingerprint cannot leave objects out); ReconcileStats::not_selected counts the others.
  uint64_t min_bytes = 0;
  uint64_t max_bytes = 0;
  // A differing range the peer holds at most this many objects of is listed, not split.
  uint32_t list_below = 64;
  // A differing range is split into parts of about this many objects (at most max_fanout parts).
  uint64_t leaf_target = 32;
  uint64_t max_fanout = 256;
  // The first round compares the whole key space as one range.
  uint32_t max_ranges_per_call = 4096;  // the peer's limit (CasLimits::max_ranges)
  absl::Duration call_timeout = absl::Seconds(30);
  absl::Duration retry_window = absl::Seconds(60);
  PushOptions push_options;
};

struct ReconcileStats {
  uint64_t ranges_compared = 0;            // ranges whose fingerprints were compared
  uint64_t ranges_listed = 0;              // differing ranges whose digests were listed
  uint64_t round_trips = 0;                // RangeFingerprints calls
  uint64_t rounds = 0;                     // levels of the comparison
  uint64_t wire_bytes = 0;                 // RangeFingerprints requests and responses (serialized)
  std::vector<cas::Digest> missing_here;   // the peer holds them, this vault does not
  std::vector<cas::Digest> missing_there;  // this vault holds them, the peer does not
  uint64_t missing_here_bytes = 0;
  uint64_t missing_there_bytes = 0;
  uint64_t not_selected = 0;  // differing objects outside the selection: not reported, not copied
  double compare_seconds = 0;
  // The copy (empty with dry_run).
  PushStats pushed;
  uint64_t pulled_objects = 0;
  uint64_t pulled_bytes = 0;
  uint64_t pull_refused = 0;
  std::vector<Refusal> pull_refusals;  // the first PushOptions::max_refusals_listed
  double seconds = 0;
};

enum class ReconcileStage { kCompared, kCopying };
using ReconcileProgressFn = std::function<void(ReconcileStage, const ReconcileStats&)>;

class Reconciler {
 public:
  Reconciler(cas::Store* store, std::shared_ptr<grpc::Channel> peer, std::string peer_name,
             ReconcileOptions options);
  ~Reconciler();

  // Only the comparison: stats with the differences, nothing copied. INVALID_ARGUMENT when
  // min_bytes is above a non-zero max_bytes.
  absl::StatusOr<ReconcileStats> Compare();
  // Compares, then copies what differs (as the options say). `progress` may be null.
  absl::StatusOr<ReconcileStats> Run(const ReconcileProgressFn& progress);
  // Makes a run in progress end soon with CANCELLED.
  void Stop();

 private:
  absl::Status CompareInto(ReconcileStats* stats);
  absl::Status Pull(ReconcileStats* stats, const ReconcileProgressFn& progress);
  bool stopped() const { return stopped_.load(); }
  bool Selected(const cas::Digest& d) const {
    return d.size() >= options_.min_bytes &&
           (options_.max_bytes == 0 || d.size() <= options_.max_bytes);
  }

  cas::Store* const store_;
  const std::shared_ptr<grpc::Channel> channel_;
  const std::unique_ptr<vault::v1::Cas::Stub> stub_;
  const std::string peer_name_;
  const ReconcileOptions options_;
  const std::unique_ptr<Pusher> pusher_;
  std::atomic<bool> stopped_{false};
};

}  // namespace vault::replication

#endif  // VAULT_REPLICATION_RECONCILER_H_
