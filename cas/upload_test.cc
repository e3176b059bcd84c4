#include "cas/store_test_fixture.h"
#include "common/status_macros.h"

namespace vault::cas {
namespace {

using UploadTest = StoreTest;

// ---- Streaming uploads
// ---------------------------------------------------------------------------

TEST_F(UploadTest, LargeObjectUploadInOddPiecesIsChunked) {
  const std::string data = RandomBytes((2 << 20) + 13, 10);
  const Digest d = Digest::Of(data);
  absl::StatusOr<std::unique_ptr<Upload>> up = store_->StartUpload(d, 0);
  ASSERT_EQ(up.status(), absl::OkStatus());
  EXPECT_EQ((*up)->offset(), 0u);
  ASSERT_EQ(AppendInPieces(up->get(), data, 0, data.size(), {1, 4097, 65536, 333333, 7, 1000}),
            absl::OkStatus());
  EXPECT_EQ((*up)->offset(), data.size());
  absl::StatusOr<PutOutcome> out = (*up)->Finish();
  ASSERT_EQ(out.status(), absl::OkStatus());
  EXPECT_EQ(out->seq, 1u);
  EXPECT_FALSE(out->already_present);
  EXPECT_EQ((*up)->Finish().status().code(), StatusCode::kFailedPrecondition);
  up->reset();

  EXPECT_TRUE(SameBytes(ReadAllOk(d), data));
  const std::vector<std::string> expected = ExpectedChunks(data);
  absl::StatusOr<ObjectInfo> info = store_->Stat(d);
  ASSERT_EQ(info.status(), absl::OkStatus());
  EXPECT_TRUE(info->chunked);
  EXPECT_GT(info->chunk_count, 1u);
  EXPECT_EQ(info->chunk_count, expected.size());
  absl::flat_hash_set<std::string> distinct;
  for (const std::string& c : expected) distinct.insert(Sha256::Hash(c));
  EXPECT_EQ(CountRows("cas_chunks"), distinct.size());
  EXPECT_EQ(CountRows("cas_chunk_index"), distinct.size());
  EXPECT_EQ(CountRows("cas_uploads"), 0u);  // the finished upload left no records
  EXPECT_EQ(*store_->UploadOffset(d), 0u);
  EXPECT_EQ(FeedSeqs(), std::vector<uint64_t>{1});
  EXPECT_EQ(store_->totals().bytes, data.size());

  // The manifest lists the chunks in order.
  std::string manifest_bytes;
  ASSERT_TRUE(db_->db()
                  ->Get(rocksdb::ReadOptions(), db_->Handle("cas_data"), storage::ToSlice(d.Key()),
                        &manifest_bytes)
                  .ok());
  vault::v1::Manifest manifest;
  ASSERT_TRUE(manifest.ParseFromString(manifest_bytes));
  ASSERT_EQ(manifest.chunks_size(), static_cast<int>(expected.size()));
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(manifest.chunks(static_cast<int>(i)).sha256(), Sha256::Hash(expected[i]));
    EXPECT_EQ(manifest.chunks(static_cast<int>(i)).size(), expected[i].size());
  }
}

// ---- Chunk hints (a replicating sender marks the ends of its own chunks)

// Sizes of `d`'s chunks, from its reader.
std::vector<uint32_t> ChunkSizes(Store* store, const Digest& d) {
  std::vector<uint32_t> sizes;
  absl::StatusOr<std::unique_ptr<ObjectReader>> reader = store->OpenReader(d);
  EXPECT_EQ(reader.status(), absl::OkStatus());
  if (!reader.ok()) return sizes;
  for (const auto& [hash, size] : (*reader)->chunks()) sizes.push_back(size);
  return sizes;
}

// Sends `data` in messages of `pieces` bytes; a negative size marks a chunk's end.
absl::StatusOr<PutOutcome> UploadHinted(Store* store, absl::string_view data,
                                        const std::vector<int64_t>& pieces) {
  absl::StatusOr<std::unique_ptr<Upload>> up = store->StartUpload(Digest::Of(data), 0);
  if (!up.ok()) return up.status();
  (*up)->UseChunkHints();
  uint64_t at = 0;
  for (int64_t p : pieces) {
    const uint64_t n = static_cast<uint64_t>(p < 0 ? -p : p);
    VAULT_RETURN_IF_ERROR((*up)->Append(data.substr(at, n), /*chunk_end=*/p < 0));
    at += n;
  }
  if (at != data.size()) return absl::InternalError("pieces do not add up to the data");
  return (*up)->Finish();
}

// Marks within the bounds (16..256 KiB here; the last chunk shorter) are where the chunks end,
// a chunk sent in several messages included, and the object reads back whole.
TEST_F(UploadTest, ChunkHintsWithinTheBoundsAreTheChunks) {
  const std::string data = RandomBytes((600 << 10) + 100, 40);
  ASSERT_EQ(UploadHinted(store_.get(), data,
                         {-(100 << 10), 60 << 10, -(140 << 10), -(16 << 10), -(256 << 10),
                          -(28 << 10), -100})
                .status(),
            absl::OkStatus());
  const Digest d = Digest::Of(data);
  EXPECT_EQ(ChunkSizes(store_.get(), d),
            (std::vector<uint32_t>{100 << 10, 200 << 10, 16 << 10, 256 << 10, 28 << 10, 100}));
  EXPECT_TRUE(SameBytes(ReadAllOk(d), data));
  // Content alone would have cut elsewhere.
  EXPECT_NE(ExpectedChunks(data).size(), 6u);
}

// A mark below the smallest chunk (not the last), or a chunk growing past the largest without
// one, switches the rest of the upload to content-defined chunking: the chunks before stay as
// marked, the rest are exactly what content gives from there.
TEST_F(UploadTest, ChunkHintsOutOfTheBoundsFallBackToContentDefinedChunks) {
  const std::string data = RandomBytes(1 << 20, 41);
  // 100 KiB marked, then a 1-byte "chunk": content decides from byte 100 KiB on.
  ASSERT_EQ(
      UploadHinted(store_.get(), data, {-(100 << 10), -1, (1 << 20) - (100 << 10) - 1}).status(),
      absl::OkStatus());
  std::vector<uint32_t> want = {100 << 10};
  for (const std::string& c : ExpectedChunks(absl::string_view(data).substr(100 << 10))) {
    want.push_back(static_cast<uint32_t>(c.size()));
  }
  EXPECT_EQ(ChunkSizes(store_.get(), Digest::Of(data)), want);
  EXPECT_TRUE(SameBytes(ReadAllOk(Digest::Of(data)), data));

  // 300 KiB without a mark (past the 256 KiB bound): content-defined from the start.
  const std::string other = RandomBytes(1 << 20, 42);
  ASSERT_EQ(UploadHinted(store_.get(), other, {300 << 10, -((1 << 20) - (300 << 10))}).status(),
            absl::OkStatus());
  std::vector<uint32_t> content;
  for (const std::string& c : ExpectedChunks(other)) {
    content.push_back(static_cast<uint32_t>(c.size()));
  }
  EXPECT_EQ(ChunkSizes(store_.get(), Digest::Of(other)), content);
  EXPECT_TRUE(SameBytes(ReadAllOk(Digest::Of(other)), other));
}

// Marks do not vouch for anything: content that does not hash to the digest is refused, and
// no chunk of it is left referenced by an object.
TEST_F(UploadTest, ChunkHintsDoNotBypassTheDigestCheck) {
  const std::string data = RandomBytes(512 << 10, 43);
  std::string claimed = data;
  claimed[300 << 10] ^= 1;
  absl::StatusOr<std::unique_ptr<Upload>> up = store_->StartUpload(Digest::Of(claimed), 0);
  ASSERT_EQ(up.status(), absl::OkStatus());
  (*up)->UseChunkHints();
  ASSERT_EQ((*up)->Append(absl::string_view(data).substr(0, 256 << 10), true), absl::OkStatus());
  ASSERT_EQ((*up)->Append(absl::string_view(data).substr(256 << 10), true), absl::OkStatus());
  absl::StatusOr<PutOutcome> out = (*up)->Finish();
  EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument) << out.status();
  EXPECT_EQ(store_->Stat(Digest::Of(claimed)).status().code(), StatusCode::kNotFound);
}

TEST_F(UploadTest, ObjectJustAtThresholdIsChunked) {
  const std::string data = RandomBytes(kThreshold, 11);
  ASSERT_EQ(UploadWhole(data).status(), absl::OkStatus());
  absl::StatusOr<ObjectInfo> info = store_->Stat(Digest::Of(data));
  ASSERT_EQ(info.status(), absl::OkStatus());
  EXPECT_TRUE(info->chunked);
  EXPECT_EQ(info->chunk_count, ExpectedChunks(data).size());
  EXPECT_TRUE(SameBytes(ReadAllOk(Digest::Of(data)), data));
}

TEST_F(UploadTest, SmallObjectThroughUploadIsInline) {
  const std::string data = RandomBytes(5000, 12);
  absl::StatusOr<PutOutcome> out = UploadWhole(data, {3, 1000});
  ASSERT_EQ(out.status(), absl::OkStatus());
  EXPECT_EQ(out->seq, 1u);
  absl::StatusOr<ObjectInfo> info = store_->Stat(Digest::Of(data));
  ASSERT_EQ(info.status(), absl::OkStatus());
  EXPECT_FALSE(info->chunked);
  EXPECT_EQ(info->chunk_count, 0u);
  EXPECT_TRUE(SameBytes(ReadAllOk(Digest::Of(data)), data));
  EXPECT_EQ(CountRows("cas_chunks"), 0u);
  // And the empty object.
  absl::StatusOr<PutOutcome> empty = UploadWhole("");
  ASSERT_EQ(empty.status(), absl::OkStatus());
  EXPECT_EQ(empty->seq, 2u);
  EXPECT_EQ(ReadAllOk(Digest::Of("")), "");
}

TEST_F(UploadTest, UploadOfPresentObjectIsAlreadyPresent) {
  EXPECT_EQ(PutOk("small").seq, 1u);
  absl::StatusOr<PutOutcome> again = UploadWhole("small");
  ASSERT_EQ(again.status(), absl::OkStatus());
  EXPECT_EQ(again->seq, 1u);
  EXPECT_TRUE(again->already_present);

  const std::string large = RandomBytes(700000, 13);
  absl::StatusOr<PutOutcome> first = UploadWhole(large);
  ASSERT_EQ(first.status(), absl::OkStatus());
  EXPECT_EQ(first->seq, 2u);
  const size_t chunk_rows = CountRows("cas_chunks");
  absl::StatusOr<PutOutcome> second = UploadWhole(large, {12345});
  ASSERT_EQ(second.status(), absl::OkStatus());
  EXPECT_EQ(second->seq, 2u);
  EXPECT_TRUE(second->already_present);
  EXPECT_EQ(CountRows("cas_chunks"), chunk_rows);
  EXPECT_EQ(FeedSeqs(), (std::vector<uint64_t>{1, 2}));
}

TEST_F(UploadTest, ObjectsSharingContentShareChunks) {
  const std::string a = RandomBytes(3 << 20, 14);
  std::string b = a;
  for (size_t i = 0; i < 10; ++i) b[(3 << 19) + i] ^= 0x77;  // a small edit in the middle
  ASSERT_EQ(UploadWhole(a).status(), absl::OkStatus());
  const size_t rows_a = CountRows("cas_chunks");
  absl::flat_hash_set<std::string> distinct_a;
  for (const std::string& c : ExpectedChunks(a)) distinct_a.insert(Sha256::Hash(c));
  EXPECT_EQ(rows_a, distinct_a.size());

  absl::StatusOr<PutOutcome> out_b = UploadWhole(b, {77777});
  ASSERT_EQ(out_b.status(), absl::OkStatus());
  EXPECT_EQ(out_b->seq, 2u);
  const size_t rows_b = CountRows("cas_chunks");
  absl::StatusOr<ObjectInfo> info_b = store_->Stat(Digest::Of(b));
  ASSERT_EQ(info_b.status(), absl::OkStatus());
  ASSERT_GT(info_b->chunk_count, 20u);
  EXPECT_GT(rows_b, rows_a);
  EXPECT_LE(rows_b - rows_a, 3u) << "b has " << info_b->chunk_count << " chunks";
  EXPECT_TRUE(SameBytes(ReadAllOk(Digest::Of(a)), a));
  EXPECT_TRUE(SameBytes(ReadAllOk(Digest::Of(b)), b));
}

TEST_F(UploadTest, ResumeAfterDestroyingTheUpload) {
  const std::string data = RandomBytes((2 << 20) + 99, 15);
  const Digest d = Digest::Of(data);
  const uint64_t sent = (1 << 20) + 5;
  {
    absl::StatusOr<std::unique_ptr<Upload>> up = store_->StartUpload(d, 0);
    ASSERT_EQ(up.status(), absl::OkStatus());
    ASSERT_EQ(AppendInPieces(up->get(), data, 0, sent, {10007, 3}), absl::OkStatus());
    EXPECT_EQ((*up)->offset(), sent);
  }  // destroyed without Finish
  absl::StatusOr<uint64_t> offset = store_->UploadOffset(d);
  ASSERT_EQ(offset.status(), absl::OkStatus());
  EXPECT_GT(*offset, 0u);
  EXPECT_LE(*offset, sent);
  EXPECT_TRUE(ChunkEnds(data).contains(*offset)) << *offset << " is not a chunk boundary";
  EXPECT_GT(*offset, sent - 4 * kAvg);  // at most one maximal chunk is still buffered
  EXPECT_EQ(store_->Contains(d).value_or(true), false);
  EXPECT_EQ(store_->last_seq(), 0u);

  EXPECT_EQ(store_->StartUpload(d, *offset + 1).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(store_->StartUpload(d, *offset - 1).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(store_->StartUpload(d, sent).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(store_->StartUpload(d, data.size() + 1).status().code(), StatusCode::kOutOfRange);
  // The refused attempts changed nothing.
  EXPECT_EQ(*store_->UploadOffset(d), *offset);

  absl::StatusOr<std::unique_ptr<Upload>> up = store_->StartUpload(d, *offset);
  ASSERT_EQ(up.status(), absl::OkStatus());
  EXPECT_EQ((*up)->offset(), *offset);
  ASSERT_EQ(AppendInPieces(up->get(), data, *offset, data.size(), {65535, 17}), absl::OkStatus());
  absl::StatusOr<PutOutcome> out = (*up)->Finish();
  ASSERT_EQ(out.status(), absl::OkStatus());
  EXPECT_EQ(out->seq, 1u);
  EXPECT_FALSE(out->already_present);
  up->reset();
  EXPECT_TRUE(SameBytes(ReadAllOk(d), data));
  EXPECT_EQ(store_->Stat(d)->chunk_count, ExpectedChunks(data).size());
  EXPECT_EQ(*store_->UploadOffset(d), 0u);
  EXPECT_EQ(CountRows("cas_uploads"), 0u);
}

TEST_F(UploadTest, ResumeAcrossReopeningDatabaseAndStore) {
  const std::string data = RandomBytes((3 << 20) + 1, 16);
  const Digest d = Digest::Of(data);
  {
    absl::StatusOr<std::unique_ptr<Upload>> up = store_->StartUpload(d, 0);
    ASSERT_EQ(up.status(), absl::OkStatus());
    ASSERT_EQ(AppendInPieces(up->get(), data, 0, 2 << 20, {131072}), absl::OkStatus());
  }
  const uint64_t before = *store_->UploadOffset(d);
  ASSERT_GT(before, 0u);
  ASSERT_NO_FATAL_FAILURE(Reopen());

  absl::StatusOr<uint64_t> offset = store_->UploadOffset(d);
  ASSERT_EQ(offset.status(), absl::OkStatus());
  EXPECT_EQ(*offset, before);
  EXPECT_TRUE(ChunkEnds(data).contains(*offset));
  EXPECT_EQ(store_->StartUpload(d, *offset + 1).status().code(), StatusCode::kFailedPrecondition);
  absl::StatusOr<std::unique_ptr<Upload>> up = store_->StartUpload(d, *offset);
  ASSERT_EQ(up.status(), absl::OkStatus());
  ASSERT_EQ(AppendInPieces(up->get(), data, *offset, data.size(), {50001}), absl::OkStatus());
  absl::StatusOr<PutOutcome> out = (*up)->Finish();
  ASSERT_EQ(out.status(), absl::OkStatus());
  EXPECT_EQ(out->seq, 1u);
  up->reset();
  EXPECT_TRUE(SameBytes(ReadAllOk(d), data));
  ASSERT_NO_FATAL_FAILURE(Reopen());
  EXPECT_TRUE(SameBytes(ReadAllOk(d), data));
  EXPECT_EQ(*store_->UploadOffset(d), 0u);
}

TEST_F(UploadTest, StartingAgainAtZeroDiscardsProgress) {
  const std::string data = RandomBytes(1 << 20, 17);
  const Digest d = Digest::Of(data);
  {
    absl::StatusOr<std::unique_ptr<Upload>> up = store_->StartUpload(d, 0);
    ASSERT_EQ(up.status(), absl::OkStatus());
    ASSERT_EQ(AppendInPieces(up->get(), data, 0, 700000, {70000}), absl::OkStatus());
  }
  ASSERT_GT(*store_->UploadOffset(d), 0u);
  absl::StatusOr<std::unique_ptr<Upload>> up = store_->StartUpload(d, 0);
  ASSERT_EQ(up.status(), absl::OkStatus());
  EXPECT_EQ(*store_->UploadOffset(d), 0u);
  ASSERT_EQ(AppendInPieces(up->get(), data, 0, data.size(), {99999}), absl::OkStatus());
  ASSERT_EQ((*up)->Finish().status(), absl::OkStatus());
  up->reset();
  EXPECT_TRUE(SameBytes(ReadAllOk(d), data));
}

TEST_F(UploadTest, ANewerUploadTakesOverAndTheOlderOneIsAborted) {
  const std::string data = RandomBytes(600000, 18);
  const Digest d = Digest::Of(data);
  absl::StatusOr<std::unique_ptr<Upload>> first = store_->StartUpload(d, 0);
  ASSERT_EQ(first.status(), absl::OkStatus());
  ASSERT_EQ(AppendInPieces(first->get(), data, 0, 300000, {4096}), absl::OkStatus());
  const uint64_t durable = *store_->UploadOffset(d);
  ASSERT_GT(durable, 0u);

  // A client that lost its connection resumes at once; the stale stream stops.
  absl::StatusOr<std::unique_ptr<Upload>> second = store_->StartUpload(d, durable);
  ASSERT_EQ(second.status(), absl::OkStatus());
  EXPECT_EQ((*first)->Append("x").code(), StatusCode::kAborted);
  EXPECT_EQ((*first)->Finish().status().code(), StatusCode::kAborted);
  first->reset();  // destroying the stale upload leaves the new claim alone
  ASSERT_EQ(AppendInPieces(second->get(), data, durable, data.size(), {4096}), absl::OkStatus());
  absl::StatusOr<PutOutcome> out = (*second)->Finish();
  ASSERT_EQ(out.status(), absl::OkStatus());
  EXPECT_EQ(out->seq, 1u);
  EXPECT_TRUE(SameBytes(ReadAllOk(d), data));

  // Small objects too.
  absl::StatusOr<std::unique_ptr<Upload>> small = store_->StartUpload(Digest::Of("tiny"), 0);
  ASSERT_EQ(small.status(), absl::OkStatus());
  absl::StatusOr<std::unique_ptr<Upload>> small2 = store_->StartUpload(Digest::Of("tiny"), 0);
  ASSERT_EQ(small2.status(), absl::OkStatus());
  EXPECT_EQ((*small)->Append("tiny").code(), StatusCode::kAborted);
  ASSERT_EQ((*small2)->Append("tiny"), absl::OkStatus());
  EXPECT_EQ((*small2)->Finish().status(), absl::OkStatus());
}

TEST_F(UploadTest, InlineUploadsShareABoundedBuffer) {
  options_.max_upload_buffer_bytes = 3000;
  ASSERT_NO_FATAL_FAILURE(Reopen());
  const std::string a = RandomBytes(2000, 30), b = RandomBytes(2000, 31);
  absl::StatusOr<std::unique_ptr<Upload>> ua = store_->StartUpload(Digest::Of(a), 0);
  ASSERT_EQ(ua.status(), absl::OkStatus());
  // 2000 + 2000 > 3000: refused until the first upload ends.
  EXPECT_EQ(store_->StartUpload(Digest::Of(b), 0).status().code(), StatusCode::kResourceExhausted);
  ASSERT_EQ((*ua)->Append(a), absl::OkStatus());
  ASSERT_EQ((*ua)->Finish().status(), absl::OkStatus());
  ua->reset();
  absl::StatusOr<std::unique_ptr<Upload>> ub = store_->StartUpload(Digest::Of(b), 0);
  ASSERT_EQ(ub.status(), absl::OkStatus());
  // Chunked uploads hold no whole-object buffer and are not counted.
  const std::string big = RandomBytes(kThreshold + 1000, 32);
  EXPECT_EQ(store_->StartUpload(Digest::Of(big), 0).status(), absl::OkStatus());
}

TEST_F(UploadTest, RefusedStartUploadReleasesItsClaim) {
  const Digest small = Digest::Of("tiny");
  EXPECT_EQ(store_->StartUpload(small, 1).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(store_->StartUpload(small, 5).status().code(), StatusCode::kOutOfRange);
  absl::StatusOr<std::unique_ptr<Upload>> up = store_->StartUpload(small, 0);
  EXPECT_EQ(up.status(), absl::OkStatus());
}

TEST_F(UploadTest, LargeUploadWithHashMismatchStoresNothing) {
  const std::string data = RandomBytes(1 << 20, 20);
  const std::string other = RandomBytes(1 << 20, 21);
  absl::StatusOr<Digest> claimed = Digest::FromParts(Sha256::Hash(other), data.size());
  ASSERT_EQ(claimed.status(), absl::OkStatus());
  absl::StatusOr<std::unique_ptr<Upload>> up = store_->StartUpload(*claimed, 0);
  ASSERT_EQ(up.status(), absl::OkStatus());
  ASSERT_EQ(AppendInPieces(up->get(), data, 0, data.size(), {65536}), absl::OkStatus());
  ASSERT_GT(*store_->UploadOffset(*claimed), 0u);
  absl::StatusOr<PutOutcome> out = (*up)->Finish();
  EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument) << out.status();
  EXPECT_EQ((*up)->Finish().status().code(), StatusCode::kFailedPrecondition);
  up->reset();
  EXPECT_EQ(store_->Contains(*claimed).value_or(true), false);
  EXPECT_EQ(store_->Contains(Digest::Of(data)).value_or(true), false);
  EXPECT_EQ(*store_->UploadOffset(*claimed), 0u);
  EXPECT_EQ(CountRows("cas_uploads"), 0u);
  EXPECT_EQ(store_->last_seq(), 0u);
  EXPECT_EQ(FeedSeqs(), std::vector<uint64_t>{});
  EXPECT_EQ(store_->totals().objects, 0u);
}

TEST_F(UploadTest, SmallUploadWithHashMismatchStoresNothing) {
  absl::StatusOr<Digest> claimed = Digest::FromParts(Sha256::Hash("other"), 5);
  ASSERT_EQ(claimed.status(), absl::OkStatus());
  absl::StatusOr<std::unique_ptr<Upload>> up = store_->StartUpload(*claimed, 0);
  ASSERT_EQ(up.status(), absl::OkStatus());
  ASSERT_EQ((*up)->Append("hello"), absl::OkStatus());
  EXPECT_EQ((*up)->Finish().status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->Contains(*claimed).value_or(true), false);
  EXPECT_EQ(store_->last_seq(), 0u);
}

TEST_F(UploadTest, FinishBeforeAllBytesIsFailedPrecondition) {
  const std::string data = RandomBytes(800000, 22);
  const Digest d = Digest::Of(data);
  absl::StatusOr<std::unique_ptr<Upload>> up = store_->StartUpload(d, 0);
  ASSERT_EQ(up.status(), absl::OkStatus());
  EXPECT_EQ((*up)->Finish().status().code(), StatusCode::kFailedPrecondition);
  ASSERT_EQ(AppendInPieces(up->get(), data, 0, 500000, {100000}), absl::OkStatus());
  EXPECT_EQ((*up)->Finish().status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(store_->Contains(d).value_or(true), false);
  EXPECT_GT(*store_->UploadOffset(d), 0u);  // the durable part stays
  // The same upload can still complete.
  ASSERT_EQ(AppendInPieces(up->get(), data, 500000, data.size(), {100000}), absl::OkStatus());
  absl::StatusOr<PutOutcome> out = (*up)->Finish();
  ASSERT_EQ(out.status(), absl::OkStatus());
  EXPECT_EQ(out->seq, 1u);
  EXPECT_TRUE(SameBytes(ReadAllOk(d), data));

  // Small objects as well.
  absl::StatusOr<std::unique_ptr<Upload>> small = store_->StartUpload(Digest::Of("hello"), 0);
  ASSERT_EQ(small.status(), absl::OkStatus());
  ASSERT_EQ((*small)->Append("hel"), absl::OkStatus());
  EXPECT_EQ((*small)->Finish().status().code(), StatusCode::kFailedPrecondition);
  ASSERT_EQ((*small)->Append("lo"), absl::OkStatus());
  ASSERT_EQ((*small)->Finish().status(), absl::OkStatus());
}

TEST_F(UploadTest, AppendPastTheSizeIsInvalidArgument) {
  absl::StatusOr<std::unique_ptr<Upload>> up = store_->StartUpload(Digest::Of("hello"), 0);
  ASSERT_EQ(up.status(), absl::OkStatus());
  EXPECT_EQ((*up)->Append("hello!").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*up)->offset(), 0u);
  ASSERT_EQ((*up)->Append("hello"), absl::OkStatus());
  EXPECT_EQ((*up)->Append("x").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*up)->Append(""), absl::OkStatus());
  EXPECT_EQ((*up)->offset(), 5u);
  ASSERT_EQ((*up)->Finish().status(), absl::OkStatus());
  EXPECT_EQ((*up)->Append("").code(), StatusCode::kFailedPrecondition);  // finished
  EXPECT_EQ(ReadAllOk(Digest::Of("hello")), "hello");

  const std::string data = RandomBytes(300000, 23);
  absl::StatusOr<std::unique_ptr<Upload>> large = store_->StartUpload(Digest::Of(data), 0);
  ASSERT_EQ(large.status(), absl::OkStatus());
  ASSERT_EQ((*large)->Append(absl::string_view(data).substr(0, 299999)), absl::OkStatus());
  EXPECT_EQ((*large)->Append("ab").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*large)->offset(), 299999u);
  ASSERT_EQ((*large)->Append(absl::string_view(data).substr(299999)), absl::OkStatus());
  ASSERT_EQ((*large)->Finish().status(), absl::OkStatus());
  EXPECT_TRUE(SameBytes(ReadAllOk(Digest::Of(data)), data));
}

TEST_F(UploadTest, SmallObjectCannotResumeAtAnOffset) {
  EXPECT_EQ(store_->StartUpload(Digest::Of("hello"), 3).status().code(),
            StatusCode::kFailedPrecondition);
  const std::string below = RandomBytes(kThreshold - 1, 24);
  EXPECT_EQ(store_->StartUpload(Digest::Of(below), 1).status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(store_->StartUpload(Digest::Of("hello"), 6).status().code(), StatusCode::kOutOfRange);
}

TEST_F(UploadTest, AbandonedUploadsExpireWhenTheStoreOpens) {
  const std::string data = RandomBytes(1 << 20, 25);
  const Digest d = Digest::Of(data);
  {
    absl::StatusOr<std::unique_ptr<Upload>> up = store_->StartUpload(d, 0);
    ASSERT_EQ(up.status(), absl::OkStatus());
    ASSERT_EQ(AppendInPieces(up->get(), data, 0, 800000, {100000}), absl::OkStatus());
  }
  ASSERT_GT(*store_->UploadOffset(d), 0u);
  ASSERT_NO_FATAL_FAILURE(Reopen());
  ASSERT_GT(*store_->UploadOffset(d), 0u);  // within the TTL: kept
  options_.upload_ttl = absl::Milliseconds(1);
  absl::SleepFor(absl::Milliseconds(20));
  ASSERT_NO_FATAL_FAILURE(Reopen());
  EXPECT_EQ(*store_->UploadOffset(d), 0u);
  EXPECT_EQ(CountRows("cas_uploads"), 0u);
  EXPECT_EQ(store_->StartUpload(d, 1).status().code(), StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace vault::cas
