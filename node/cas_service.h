// node: the gRPC `Cas` service (proto/vault/v1/cas.proto) over a cas::Store.
//
// Callback API: reactors never block; storage work runs on a bounded common::Executor, and a
// full executor answers RESOURCE_EXHAUSTED. Streams are flow-controlled: the next message is
// read (or written) only when the previous one has been handled.
//
//   node::CasService cas(store.get(), &executor, limits);
//   builder.RegisterService(&cas);
//
// Audit: one entry per call for the objects it stored (their count, bytes, feed range and the
// SHA-256 of their digest list), and one DENIED entry per object refused. A call whose entries
// cannot be written fails with that error (the objects stay stored; a retry finds them present).
//
// Thread-safety: the service is thread-safe; the store, executor and auditor must outlive it.
#ifndef VAULT_NODE_CAS_SERVICE_H_
#define VAULT_NODE_CAS_SERVICE_H_

#include <cstdint>

#include "cas/store.h"
#include "common/executor.h"
#include "node/auditor.h"
#include "vault/v1/cas.grpc.pb.h"

namespace vault::node {

struct CasLimits {
  uint64_t max_batch_bytes = 4 << 20;
  uint32_t max_find_missing = 100000;
  uint32_t max_batch_items = 10000;
  uint32_t get_piece_bytes = 1 << 20;
  uint32_t feed_page = 1000;
  uint32_t max_ranges = 4096;         // RangeFingerprints: ranges per call
  uint32_t max_range_listing = 4096;  // RangeFingerprints: list_below
};

class CasService final : public vault::v1::Cas::CallbackService {
 public:
  // Every object stored and every object refused is recorded through `auditor`.
  CasService(cas::Store* store, common::Executor* executor, CasLimits limits, Auditor* auditor)
      : store_(store), executor_(executor), limits_(limits), auditor_(auditor) {}

  grpc::ServerUnaryReactor* FindMissing(grpc::CallbackServerContext* ctx,
                                        const vault::v1::FindMissingRequest* req,
                                        vault::v1::FindMissingResponse* resp) override;
  grpc::ServerUnaryReactor* BatchPut(grpc::CallbackServerContext* ctx,
                                     const vault::v1::BatchPutRequest* req,
                                     vault::v1::BatchPutResponse* resp) override;
  grpc::ServerUnaryReactor* BatchGet(grpc::CallbackServerContext* ctx,
                                     const vault::v1::BatchGetRequest* req,
                                     vault::v1::BatchGetResponse* resp) override;
  grpc::ServerReadReactor<vault::v1::PutRequest>* Put(grpc::CallbackServerContext* ctx,
                                                      vault::v1::PutResponse* resp) override;
  grpc::ServerWriteReactor<vault::v1::GetResponse>* Get(grpc::CallbackServerContext* ctx,
                                                        const vault::v1::GetRequest* req) override;
  grpc::ServerUnaryReactor* Stat(grpc::CallbackServerContext* ctx,
                                 const vault::v1::StatRequest* req,
                                 vault::v1::StatResponse* resp) override;
  grpc::ServerWriteReactor<vault::v1::FeedResponse>* Feed(
      grpc::CallbackServerContext* ctx, const vault::v1::FeedRequest* req) override;
  grpc::ServerUnaryReactor* FindMissingChunks(grpc::CallbackServerContext* ctx,
                                              const vault::v1::FindMissingChunksRequest* req,
                                              vault::v1::FindMissingChunksResponse* resp) override;
  grpc::ServerUnaryReactor* GetManifest(grpc::CallbackServerContext* ctx,
                                        const vault::v1::GetManifestRequest* req,
                                        vault::v1::GetManifestResponse* resp) override;
  grpc::ServerUnaryReactor* RangeFingerprints(grpc::CallbackServerContext* ctx,
                                              const vault::v1::RangeFingerprintsRequest* req,
                                              vault::v1::RangeFingerprintsResponse* resp) override;

 private:
  cas::Store* const store_;
  common::Executor* const executor_;
  const CasLimits limits_;
  Auditor* const auditor_;
};

}  // namespace vault::node

#endif  // VAULT_NODE_CAS_SERVICE_H_
