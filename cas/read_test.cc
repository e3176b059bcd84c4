#include "cas/store_test_fixture.h"

namespace vault::cas {
namespace {

using ReadTest = StoreTest;

// ---- Read --------------------------------------------------------------------------------------

TEST_F(ReadTest, ReadWithOffsetAndLimit) {
  const std::string data = RandomBytes(1000, 7);
  const Digest d = Digest::Of(data);
  PutOk(data);
  EXPECT_TRUE(SameBytes(ReadRangeOk(d, 0, 0), data));
  EXPECT_TRUE(SameBytes(ReadRangeOk(d, 100, 50), data.substr(100, 50)));
  EXPECT_TRUE(SameBytes(ReadRangeOk(d, 100, 50, /*piece_bytes=*/7), data.substr(100, 50)));
  EXPECT_TRUE(SameBytes(ReadRangeOk(d, 999, 0), data.substr(999)));
  EXPECT_TRUE(SameBytes(ReadRangeOk(d, 990, 500), data.substr(990)));  // limit beyond the end
  EXPECT_TRUE(SameBytes(ReadRangeOk(d, 0, UINT64_MAX), data));
  EXPECT_TRUE(SameBytes(ReadRangeOk(d, 1000, 0), ""));  // offset == size: nothing, but OK
  EXPECT_EQ(ReadRange(d, 1001, 0).status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(ReadRange(d, UINT64_MAX, 1).status().code(), StatusCode::kOutOfRange);

  // Pieces of exactly piece_bytes, the last one shorter.
  std::vector<std::pair<uint64_t, size_t>> pieces;
  ASSERT_EQ(store_->Read(d, 10, 25, 10,
                         [&](uint64_t at, absl::string_view piece) {
                           pieces.emplace_back(at, piece.size());
                           return absl::OkStatus();
                         }),
            absl::OkStatus());
  EXPECT_EQ(pieces, (std::vector<std::pair<uint64_t, size_t>>{{10, 10}, {20, 10}, {30, 5}}));
}

TEST_F(ReadTest, ReadOfEmptyObject) {
  const Digest empty = Digest::Of("");
  PutOk("");
  EXPECT_TRUE(SameBytes(ReadRangeOk(empty, 0, 0), ""));
  EXPECT_TRUE(SameBytes(ReadRangeOk(empty, 0, 10), ""));
  EXPECT_EQ(ReadRange(empty, 1, 0).status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(ReadAllOk(empty), "");
}

TEST_F(ReadTest, ReadOfMissingObjectIsNotFound) {
  EXPECT_EQ(store_->ReadAll(Digest::Of("nothing")).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(ReadRange(Digest::Of("nothing"), 0, 0).status().code(), StatusCode::kNotFound);
}

TEST_F(ReadTest, ReadStopsAtSinkError) {
  const std::string data = RandomBytes(100, 8);
  PutOk(data);
  int calls = 0;
  absl::Status s = store_->Read(Digest::Of(data), 0, 0, 10, [&](uint64_t, absl::string_view) {
    return ++calls == 3 ? absl::CancelledError("client went away") : absl::OkStatus();
  });
  EXPECT_EQ(s, absl::CancelledError("client went away"));
  EXPECT_EQ(calls, 3);
}

TEST_F(ReadTest, ReadRangesOfChunkedObject) {
  const std::string data = RandomBytes((1 << 20) + 333, 9);
  const Digest d = Digest::Of(data);
  ASSERT_EQ(UploadWhole(data).status(), absl::OkStatus());
  const std::vector<std::string> chunks = ExpectedChunks(data);
  ASSERT_GT(chunks.size(), 3u);
  const uint64_t first_end = chunks[0].size();
  const uint64_t second_end = first_end + chunks[1].size();

  EXPECT_TRUE(SameBytes(ReadRangeOk(d, 0, 0), data));
  EXPECT_TRUE(SameBytes(ReadRangeOk(d, 0, 0, 4099), data));
  EXPECT_TRUE(SameBytes(ReadRangeOk(d, 0, 10), data.substr(0, 10)));  // inside the first chunk
  EXPECT_TRUE(
      SameBytes(ReadRangeOk(d, first_end - 5, 10), data.substr(first_end - 5, 10)));  // straddles
  EXPECT_TRUE(
      SameBytes(ReadRangeOk(d, first_end, chunks[1].size()), chunks[1]));  // exactly one chunk
  EXPECT_TRUE(
      SameBytes(ReadRangeOk(d, 1, second_end), data.substr(1, second_end)));  // spans three chunks
  EXPECT_TRUE(SameBytes(ReadRangeOk(d, data.size() - 7, 100), data.substr(data.size() - 7)));
  EXPECT_TRUE(SameBytes(ReadRangeOk(d, data.size(), 0), ""));
  EXPECT_EQ(ReadRange(d, data.size() + 1, 0).status().code(), StatusCode::kOutOfRange);
}

// ---- Corruption
// ----------------------------------------------------------------------------------

TEST_F(ReadTest, CorruptInlineObjectIsDataLoss) {
  const std::string data = RandomBytes(1000, 27);
  const Digest d = Digest::Of(data);
  PutOk(data);
  std::string flipped = data;
  flipped[500] ^= 0x01;
  ASSERT_NO_FATAL_FAILURE(Overwrite("cas_data", d.Key(), flipped));
  EXPECT_EQ(store_->ReadAll(d).status().code(), StatusCode::kDataLoss);
  int calls = 0;
  absl::Status s = store_->Read(d, 0, 10, 0, [&](uint64_t, absl::string_view) {
    ++calls;
    return absl::OkStatus();
  });
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_EQ(calls, 0) << "corrupt bytes were sent";
  ASSERT_NO_FATAL_FAILURE(Overwrite("cas_data", d.Key(), data.substr(0, 999)));
  EXPECT_EQ(store_->ReadAll(d).status().code(), StatusCode::kDataLoss);
  ASSERT_NO_FATAL_FAILURE(Overwrite("cas_data", d.Key(), data));
  EXPECT_TRUE(SameBytes(ReadAllOk(d), data));
}

TEST_F(ReadTest, CorruptChunkIsDataLoss) {
  const std::string data = RandomBytes(1 << 20, 28);
  const Digest d = Digest::Of(data);
  ASSERT_EQ(UploadWhole(data).status(), absl::OkStatus());
  const std::vector<std::string> chunks = ExpectedChunks(data);
  ASSERT_GT(chunks.size(), 3u);
  std::string bad = chunks[2];
  bad[bad.size() / 2] ^= 0x80;
  ASSERT_NO_FATAL_FAILURE(Overwrite("cas_chunks", Sha256::Hash(chunks[2]), bad));

  EXPECT_EQ(store_->ReadAll(d).status().code(), StatusCode::kDataLoss);
  const uint64_t chunk2_at = chunks[0].size() + chunks[1].size();
  EXPECT_EQ(ReadRange(d, chunk2_at + 1, 10).status().code(), StatusCode::kDataLoss);
  // Ranges that do not touch the bad chunk still read.
  EXPECT_TRUE(SameBytes(ReadRangeOk(d, 0, chunks[0].size()), chunks[0]));
  const uint64_t chunk3_at = chunk2_at + chunks[2].size();
  EXPECT_TRUE(SameBytes(ReadRangeOk(d, chunk3_at, 100), data.substr(chunk3_at, 100)));
}

// A stored object whose chunk has vanished is damaged storage, not a missing object.
TEST_F(ReadTest, MissingChunkIsDataLoss) {
  const std::string data = RandomBytes(1 << 20, 29);
  const Digest d = Digest::Of(data);
  ASSERT_EQ(UploadWhole(data).status(), absl::OkStatus());
  const std::vector<std::string> chunks = ExpectedChunks(data);
  ASSERT_TRUE(db_->db()
                  ->Delete(rocksdb::WriteOptions(), db_->Handle("cas_chunks"),
                           storage::ToSlice(Sha256::Hash(chunks[1])))
                  .ok());
  EXPECT_EQ(store_->Stat(d).status(), absl::OkStatus());
  EXPECT_EQ(store_->ReadAll(d).status().code(), StatusCode::kDataLoss);
}

TEST_F(ReadTest, CorruptManifestIsDataLoss) {
  const std::string data = RandomBytes(600000, 30);
  const Digest d = Digest::Of(data);
  ASSERT_EQ(UploadWhole(data).status(), absl::OkStatus());
  ASSERT_NO_FATAL_FAILURE(Overwrite("cas_data", d.Key(), "\xff\xff\xff"));
  EXPECT_EQ(store_->ReadAll(d).status().code(), StatusCode::kDataLoss);
  // A manifest that parses but does not cover the object.
  const std::vector<std::string> chunks = ExpectedChunks(data);
  vault::v1::Manifest shortened;
  for (size_t i = 0; i + 1 < chunks.size(); ++i) {
    vault::v1::ChunkRef* ref = shortened.add_chunks();
    ref->set_sha256(Sha256::Hash(chunks[i]));
    ref->set_size(static_cast<uint32_t>(chunks[i].size()));
  }
  ASSERT_NO_FATAL_FAILURE(Overwrite("cas_data", d.Key(), shortened.SerializeAsString()));
  EXPECT_EQ(store_->ReadAll(d).status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(ReadRange(d, 0, 10).status().code(), StatusCode::kDataLoss);
  // Regression (review): a manifest that parses, covers the size, and names only genuine
  // chunks, but in another order, would have assembled wrong bytes without an error.
  ASSERT_GE(chunks.size(), 2u);
  vault::v1::Manifest swapped;
  for (size_t i : std::vector<size_t>{1, 0}) {
    vault::v1::ChunkRef* ref = swapped.add_chunks();
    ref->set_sha256(Sha256::Hash(chunks[i]));
    ref->set_size(static_cast<uint32_t>(chunks[i].size()));
  }
  for (size_t i = 2; i < chunks.size(); ++i) {
    vault::v1::ChunkRef* ref = swapped.add_chunks();
    ref->set_sha256(Sha256::Hash(chunks[i]));
    ref->set_size(static_cast<uint32_t>(chunks[i].size()));
  }
  ASSERT_NO_FATAL_FAILURE(Overwrite("cas_data", d.Key(), swapped.SerializeAsString()));
  EXPECT_EQ(store_->ReadAll(d).status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(ReadRange(d, 0, 10).status().code(), StatusCode::kDataLoss);
}

TEST_F(ReadTest, ReaderServesManyRangesFromOneManifestLoad) {
  const std::string data = RandomBytes(900000, 33);
  const Digest d = Digest::Of(data);
  ASSERT_EQ(UploadWhole(data).status(), absl::OkStatus());
  absl::StatusOr<std::unique_ptr<ObjectReader>> reader = store_->OpenReader(d);
  ASSERT_EQ(reader.status(), absl::OkStatus());
  EXPECT_TRUE((*reader)->info().chunked);
  for (uint64_t off : {uint64_t{0}, uint64_t{1}, uint64_t{65535}, uint64_t{300001},
                       uint64_t{899999}, uint64_t{900000}}) {
    std::string got;
    ASSERT_EQ((*reader)->Read(off, 70000, 4096,
                              [&](uint64_t at, absl::string_view piece) {
                                EXPECT_EQ(at, off + got.size());
                                got.append(piece.data(), piece.size());
                                return absl::OkStatus();
                              }),
              absl::OkStatus());
    EXPECT_TRUE(SameBytes(got, data.substr(off, 70000))) << off;
  }
  EXPECT_EQ(
      (*reader)
          ->Read(900001, 1, 4096, [](uint64_t, absl::string_view) { return absl::OkStatus(); })
          .code(),
      StatusCode::kOutOfRange);
  EXPECT_EQ(store_->OpenReader(Digest::Of("absent")).status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace vault::cas
