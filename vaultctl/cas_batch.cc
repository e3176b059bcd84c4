#include "vaultctl/cas_batch.h"

#include <google/protobuf/io/coded_stream.h>
#include <grpcpp/support/slice.h>

#include <cstdlib>
#include <cstring>
#include <new>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace vault::vaultctl {
namespace {

using google::protobuf::io::CodedOutputStream;

// Wire tags (field number << 3 | 2, length-delimited; size is a varint, 0).
constexpr uint8_t kItemsTag = 0x0a;   // BatchPutRequest.items = 1
constexpr uint8_t kDigestTag = 0x0a;  // BatchPutRequest.Item.digest = 1
constexpr uint8_t kDataTag = 0x12;    // BatchPutRequest.Item.data = 2
constexpr uint8_t kShaTag = 0x0a;     // Digest.sha256 = 1
constexpr uint8_t kSizeTag = 0x10;    // Digest.size = 2
// The most an item adds besides its data: two tags and lengths of the item, the digest field
// (tag, length, sha256 field, size field) and the data field's tag and length.
constexpr size_t kMaxItemOverhead = 1 + 10 + 1 + 1 + (2 + cas::kSha256Bytes) + 1 + 10 + 1 + 10;

uint8_t* Varint(uint64_t v, uint8_t* p) { return CodedOutputStream::WriteVarint64ToArray(v, p); }
size_t VarintSize(uint64_t v) { return CodedOutputStream::VarintSize64(v); }

}  // namespace

BatchPutWriter::BatchPutWriter(uint64_t max_data_bytes, size_t max_items)
    : max_data_bytes_(max_data_bytes),
      max_items_(max_items),
      capacity_(max_data_bytes + max_items * kMaxItemOverhead + 1) {}

BatchPutWriter::~BatchPutWriter() { std::free(buf_); }

void BatchPutWriter::Reserve() {
  if (buf_ != nullptr) return;
  buf_ = static_cast<char*>(std::malloc(capacity_));
  if (buf_ == nullptr) throw std::bad_alloc();
}

bool BatchPutWriter::Fits(uint64_t size) const {
  return items_ < max_items_ && size <= max_data_bytes_ - data_bytes_;
}

absl::StatusOr<cas::Digest> BatchPutWriter::Append(
    uint64_t size, absl::FunctionRef<absl::StatusOr<size_t>(char* dst, size_t room)> fill) {
  if (!Fits(size)) {
    return absl::InternalError(absl::StrCat("an item of ", size, " bytes does not fit the batch"));
  }
  Reserve();
  // Digest { sha256 = 1; size = 2 } and Item { digest = 1; data = 2 }; proto3 leaves out a zero
  // size and empty data, and so does this.
  const size_t digest_len = 2 + cas::kSha256Bytes + (size == 0 ? 0 : 1 + VarintSize(size));
  const size_t item_len = 1 + VarintSize(digest_len) + digest_len +
                          (size == 0 ? 0 : 1 + VarintSize(size) + static_cast<size_t>(size));
  auto* p = reinterpret_cast<uint8_t*>(buf_ + len_);
  *p++ = kItemsTag;
  p = Varint(item_len, p);
  *p++ = kDigestTag;
  p = Varint(digest_len, p);
  *p++ = kShaTag;
  *p++ = static_cast<uint8_t>(cas::kSha256Bytes);
  uint8_t* sha = p;  // filled in once the content is read
  p += cas::kSha256Bytes;
  if (size != 0) {
    *p++ = kSizeTag;
    p = Varint(size, p);
    *p++ = kDataTag;
    p = Varint(size, p);
  }
  char* data = reinterpret_cast<char*>(p);
  // Room for one byte more than expected, even for the last item (capacity_ counts it).
  absl::StatusOr<size_t> n = fill(data, static_cast<size_t>(size) + 1);
  if (!n.ok()) return n.status();
  if (*n != size) {
    return absl::InternalError(absl::StrCat("read ", *n, " bytes of an item of ", size));
  }
  absl::string_view content(data, static_cast<size_t>(size));
  hash_.Update(content);
  std::string raw = hash_.Finish();
  std::memcpy(sha, raw.data(), cas::kSha256Bytes);
  len_ = static_cast<size_t>(data + size - buf_);
  ++items_;
  data_bytes_ += size;
  return cas::Digest::FromParts(raw, size);
}

grpc::ByteBuffer BatchPutWriter::Finish() {
  grpc::ByteBuffer out;
  if (buf_ == nullptr || len_ == 0) {
    grpc::Slice empty;
    out = grpc::ByteBuffer(&empty, 1);
  } else {
    // The slice owns the buffer from here on: gRPC frees it when the last reference goes.
    grpc::Slice slice(buf_, len_, std::free);
    out = grpc::ByteBuffer(&slice, 1);
    buf_ = nullptr;
  }
  len_ = 0;
  items_ = 0;
  data_bytes_ = 0;
  return out;
}

}  // namespace vault::vaultctl
