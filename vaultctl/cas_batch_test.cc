#include "vaultctl/cas_batch.h"

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "node/grpc_status.h"
#include "vault/v1/cas.pb.h"

namespace vault::vaultctl {
namespace {

std::string Bytes(const grpc::ByteBuffer& b) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(b.Dump(&slices).ok());
  std::string out;
  for (const grpc::Slice& s : slices) {
    out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return out;
}

absl::StatusOr<cas::Digest> AppendString(BatchPutWriter& w, const std::string& data) {
  return w.Append(data.size(), [&](char* dst, size_t room) -> absl::StatusOr<size_t> {
    EXPECT_EQ(room, data.size() + 1);
    std::memcpy(dst, data.data(), data.size());
    return data.size();
  });
}

// The writer's bytes are exactly protobuf's serialization of the same request, sizes chosen
// around varint boundaries (127/128, 16383/16384) and the empty object (proto3 leaves out a zero
// size and empty data).
TEST(CasBatchWriter, BytesAreTheProtobufSerialization) {
  std::mt19937_64 rng(7);
  std::vector<std::string> contents;
  for (size_t n : {0, 1, 127, 128, 4096, 16383, 16384, 1 << 20}) {
    std::string s(n, '\0');
    for (char& c : s) c = static_cast<char>(rng());
    contents.push_back(std::move(s));
  }
  BatchPutWriter w(8 << 20, 100);
  vault::v1::BatchPutRequest want;
  for (const std::string& c : contents) {
    absl::StatusOr<cas::Digest> d = AppendString(w, c);
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_EQ(*d, cas::Digest::Of(c));
    auto* item = want.add_items();
    node::ToProto(*d, item->mutable_digest());
    item->set_data(c);
  }
  EXPECT_EQ(w.items(), contents.size());
  std::string got = Bytes(w.Finish());
  EXPECT_EQ(got, want.SerializeAsString());
  vault::v1::BatchPutRequest parsed;
  ASSERT_TRUE(parsed.ParseFromString(got));
  ASSERT_EQ(parsed.items_size(), static_cast<int>(contents.size()));
  EXPECT_EQ(parsed.items(7).data(), contents[7]);
  EXPECT_TRUE(w.empty());
  EXPECT_EQ(w.data_bytes(), 0u);
}

// A file that cannot be read leaves the batch as it was: the items before and after it are the
// whole request.
TEST(CasBatchWriter, FailedAppendLeavesNoTrace) {
  BatchPutWriter w(1 << 20, 10);
  ASSERT_TRUE(AppendString(w, "before").ok());
  absl::StatusOr<cas::Digest> bad = w.Append(5000, [](char* dst, size_t) -> absl::StatusOr<size_t> {
    std::memset(dst, 'x', 3000);  // half read, then the error
    return absl::PermissionDeniedError("read f: Permission denied");
  });
  EXPECT_EQ(bad.status(), absl::PermissionDeniedError("read f: Permission denied"));
  ASSERT_TRUE(AppendString(w, "after").ok());
  EXPECT_EQ(w.items(), 2u);
  EXPECT_EQ(w.data_bytes(), 11u);
  vault::v1::BatchPutRequest want;
  for (const char* c : {"before", "after"}) {
    auto* item = want.add_items();
    node::ToProto(cas::Digest::Of(c), item->mutable_digest());
    item->set_data(c);
  }
  EXPECT_EQ(Bytes(w.Finish()), want.SerializeAsString());
}

TEST(CasBatchWriter, FitsByBytesAndItems) {
  BatchPutWriter w(10, 2);
  EXPECT_TRUE(w.Fits(10));
  EXPECT_FALSE(w.Fits(11));
  ASSERT_TRUE(AppendString(w, "abcdef").ok());
  EXPECT_TRUE(w.Fits(4));
  EXPECT_FALSE(w.Fits(5));
  ASSERT_TRUE(AppendString(w, "").ok());
  EXPECT_FALSE(w.Fits(0));  // two items already
  EXPECT_FALSE(AppendString(w, "").ok());
  (void)w.Finish();
  EXPECT_TRUE(w.Fits(10));
}

}  // namespace
}  // namespace vault::vaultctl
