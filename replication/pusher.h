// replication: push — copy objects of this vault's store to a peer that lacks them.
//
// The peer is asked which objects it lacks (FindMissing, in batches); small missing objects go
// in BatchPut calls, large ones in streaming Puts, several calls in flight at once. A large
// object's chunks that the peer already stores (FindMissingChunks) are named instead of sent,
// and an interrupted stream resumes at the peer's durable offset (Stat.upload_offset). The peer
// hashes every byte and refuses a mismatch; objects it refuses are counted and listed, and the
// push goes on. Transient failures (the peer restarting, busy, a cut stream) are retried with
// backoff for up to PushOptions::retry_window; every call carries a deadline.
//
//   Pusher pusher(store, channel, PushOptions{});
//   VAULT_ASSIGN_OR_RETURN(PushStats stats, pusher.PushFeed(/*after_seq=*/0, nullptr));
//
// Thread-safety: a Pusher runs one push at a time (its own worker threads inside); Stop may be
// called from any thread. The store must outlive it.
#ifndef VAULT_REPLICATION_PUSHER_H_
#define VAULT_REPLICATION_PUSHER_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "cas/digest.h"
#include "cas/store.h"
#include "vault/v1/cas.grpc.pb.h"

namespace vault::replication {

struct PushOptions {
  int streams = 4;                      // calls in flight at once
  size_t find_missing_batch = 10000;    // digests per FindMissing
  uint64_t batch_bytes = 3 << 20;       // payload per BatchPut (peers accept 4 MiB by default)
  size_t batch_items = 4096;            // items per BatchPut
  uint64_t stream_threshold = 1 << 20;  // objects of at least this size are streamed
  size_t piece_bytes = 1 << 20;         // bytes per Put message
  absl::Duration call_timeout = absl::Seconds(30);
  // A stream's deadline: call_timeout plus its bytes at this rate.
  uint64_t min_rate_bytes_per_second = 4 << 20;
  absl::Duration retry_window = absl::Seconds(60);
  size_t max_refusals_listed = 64;
};

struct Refusal {
  cas::Digest digest;
  absl::Status status;
};

struct PushStats {
  uint64_t planned_objects = 0;  // the selection, when known up front (0: unknown)
  uint64_t planned_bytes = 0;
  uint64_t objects = 0;  // objects the peer stored for this push
  uint64_t bytes = 0;    // their bytes
  uint64_t skipped = 0;  // objects the peer already had
  uint64_t skipped_bytes = 0;
  uint64_t refused = 0;         // objects the peer refused (or that could not be read here)
  uint64_t chunks_skipped = 0;  // chunks of streamed objects the peer already had
  uint64_t chunk_bytes_skipped = 0;
  uint64_t resumed_bytes = 0;  // bytes an interrupted upload had left durable at the peer
  uint64_t sent_bytes = 0;     // object bytes that crossed the wire
  uint64_t retries = 0;        // transient failures retried
  uint64_t last_seq = 0;       // PushFeed: the last feed entry covered
  double seconds = 0;
  std::vector<Refusal> refusals;  // the first PushOptions::max_refusals_listed
  uint64_t done_objects() const { return objects + skipped + refused; }
  uint64_t done_bytes() const { return bytes + skipped_bytes; }
};

// Called (serialized) after each call that made progress, with the totals so far.
using ProgressFn = std::function<void(const PushStats&)>;

class Pusher {
 public:
  Pusher(const cas::Store* source, std::shared_ptr<grpc::Channel> peer, PushOptions options);
  ~Pusher();

  // Pushes these objects. NOT_FOUND, before anything is sent, when one is not stored here.
  absl::StatusOr<PushStats> PushDigests(absl::Span<const cas::Digest> digests,
                                        const ProgressFn& progress);
  // Pushes the objects of the source's change feed with seq > after_seq (0: all of them).
  absl::StatusOr<PushStats> PushFeed(uint64_t after_seq, const ProgressFn& progress);
  // Makes a push in progress end soon with CANCELLED.
  void Stop() { stopped_.store(true); }

 private:
  class Run;
  const cas::Store* const source_;
  const std::shared_ptr<grpc::Channel> channel_;
  const std::unique_ptr<vault::v1::Cas::Stub> stub_;
  const PushOptions options_;
  std::atomic<bool> stopped_{false};
};

}  // namespace vault::replication

#endif  // VAULT_REPLICATION_PUSHER_H_
