// vaultctl: a BatchPut request built in its wire form, for `vaultctl cas put` of many small files.
//
// Each file's bytes are read straight into the one buffer that gRPC then sends: no std::string
// per file, no protobuf message to fill and serialize again (the bytes are what
// vault.v1.BatchPutRequest::SerializeAsString() gives for the same items, field for field).
//
//   BatchPutWriter w(kDataBytes, kItems);
//   if (!w.Fits(size)) Send(w.Finish());
//   absl::StatusOr<cas::Digest> d = w.Append(size, [&](char* dst, size_t room) { ...read... });
//
// Thread-safety: a BatchPutWriter is used by one thread at a time. The ByteBuffer it finishes
// owns its memory (released when gRPC and every copy are done with it).
#ifndef VAULT_VAULTCTL_CAS_BATCH_H_
#define VAULT_VAULTCTL_CAS_BATCH_H_

#include <grpcpp/support/byte_buffer.h>

#include <cstddef>
#include <cstdint>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "cas/digest.h"

namespace vault::vaultctl {

class BatchPutWriter {
 public:
  // A batch holds at most `max_data_bytes` of file content in at most `max_items` items.
  BatchPutWriter(uint64_t max_data_bytes, size_t max_items);
  ~BatchPutWriter();
  BatchPutWriter(const BatchPutWriter&) = delete;
  BatchPutWriter& operator=(const BatchPutWriter&) = delete;

  // Whether an item of `size` bytes fits. An empty batch takes any item up to max_data_bytes.
  bool Fits(uint64_t size) const;
  bool empty() const { return items_ == 0; }
  size_t items() const { return items_; }
  uint64_t data_bytes() const { return data_bytes_; }

  // Appends an item of exactly `size` bytes (Fits(size) must hold). `fill` writes the content
  // to `dst`, which has room for size + 1 bytes (so a file that grew can be told apart), and
  // returns how many it wrote; it must fail unless that is `size`. On success the item is in the
  // batch and its digest is returned; on failure the batch is as it was before.
  absl::StatusOr<cas::Digest> Append(
      uint64_t size, absl::FunctionRef<absl::StatusOr<size_t>(char* dst, size_t room)> fill);

  // The serialized vault.v1.BatchPutRequest of the items appended since the last Finish; the
  // writer is empty afterwards.
  grpc::ByteBuffer Finish();

 private:
  void Reserve();

  const uint64_t max_data_bytes_;
  const size_t max_items_;
  const size_t capacity_;
  char* buf_ = nullptr;  // malloc'ed, capacity_ bytes; handed to the ByteBuffer by Finish
  size_t len_ = 0;
  size_t items_ = 0;
  uint64_t data_bytes_ = 0;
  cas::Sha256 hash_;
};

}  // namespace vault::vaultctl

#endif  // VAULT_VAULTCTL_CAS_BATCH_H_
