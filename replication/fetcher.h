// replication: fetch — copy objects from a peer into this vault's store, every byte verified.
//
// Small objects come in BatchGet calls and are stored with PutMany (which hashes each); large
// ones come in Get streams into a resumable upload that resumes at this vault's durable offset
// and takes the chunks this store already holds from here (GetManifest + AppendStoredChunk). The
// store refuses bytes that do not hash to the digest (INVALID_ARGUMENT): nothing corrupt is
// stored. ReadVerified fetches an object into memory, verified, for repairs (the scrub).
//
//   Fetcher fetcher(store, channel, "vault-b", [&] { return stopping; });
//   VAULT_RETURN_IF_ERROR(fetcher.FetchAll(missing, [&](const cas::Digest& d,
//                                                        const absl::StatusOr<cas::PutOutcome>& o)
//                                                        {
//     ...  // per object: stored, already present, refused (Refusal(o.status())) or not served
//   }));
//
// Thread-safety: one thread at a time; the store must outlive it. Every call has a deadline.
#ifndef VAULT_REPLICATION_FETCHER_H_
#define VAULT_REPLICATION_FETCHER_H_

#include <grpcpp/grpcpp.h>

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "cas/digest.h"
#include "cas/store.h"
#include "vault/v1/cas.grpc.pb.h"

namespace vault::replication {

struct FetchOptions {
  uint64_t small_object = 1 << 20;  // fetched with BatchGet below this
  uint64_t batch_bytes = 3 << 20;   // payload per BatchGet
  absl::Duration call_timeout = absl::Seconds(30);
  // A Get stream's deadline: call_timeout plus its bytes at this rate.
  uint64_t min_rate_bytes_per_second = 4 << 20;
};

class Fetcher {
 public:
  // The outcome of one object: stored (or already present), refused by the store (Refusal), or
  // not served by the peer (any other error).
  using RecordFn =
      std::function<void(const cas::Digest& d, const absl::StatusOr<cas::PutOutcome>& outcome)>;

  Fetcher(cas::Store* store, std::shared_ptr<grpc::Channel> channel, std::string peer,
          std::function<bool()> stopping, FetchOptions options = FetchOptions());

  // A failure of the bytes themselves (the object is refused), as opposed to one of the transfer.
  static bool Refusal(const absl::Status& s) {
    return absl::IsInvalidArgument(s) || absl::IsDataLoss(s);
  }
  // The peer no longer has the object (it removed it, design §12): nothing to copy.
  static bool RemovedAtPeer(const absl::Status& s) { return absl::IsNotFound(s); }

  // Fetches and stores `digests` in order, small ones batched; `record` gets each outcome. A
  // failure of the transfer itself (the peer unreachable, a cut stream, stopping: CANCELLED) ends
  // it and is returned; objects not yet recorded were not fetched.
  absl::Status FetchAll(absl::Span<const cas::Digest> digests, const RecordFn& record);
  // One BatchGet of small objects, stored with PutMany.
  absl::Status FetchBatch(absl::Span<const cas::Digest> digests, const RecordFn& record);
  // One large object, streamed into a resumable upload.
  absl::StatusOr<cas::PutOutcome> FetchLarge(const cas::Digest& d);
  // The whole object in memory, checked against its digest (DATA_LOSS when the peer's bytes do
  // not match; NOT_FOUND when the peer does not store it; FAILED_PRECONDITION above max_bytes).
  absl::StatusOr<std::string> ReadVerified(const cas::Digest& d, uint64_t max_bytes);

 private:
  // Streams [offset, offset + limit) of `d` from the peer to `sink`.
  absl::Status Get(const cas::Digest& d, uint64_t offset, uint64_t limit,
                   const std::function<absl::Status(absl::string_view)>& sink);

  cas::Store* const store_;
  const std::unique_ptr<vault::v1::Cas::Stub> stub_;
  const std::string peer_;
  const std::function<bool()> stopping_;
  const FetchOptions options_;
};

}  // namespace vault::replication

#endif  // VAULT_REPLICATION_FETCHER_H_
