#include "node/cas_service_test_fixture.h"

namespace vault::node {
namespace {

// --- BatchPut / BatchGet ---

TEST_F(CasServiceTest, BatchPutThenBatchGetRoundTrip) {
  const std::vector<std::string> objects = {"hello", "", RandomBytes(100 << 10, 1)};
  BatchPutRequest put;
  for (const std::string& o : objects) {
    BatchPutRequest::Item* item = put.add_items();
    *item->mutable_digest() = DigestOf(o);
    item->set_data(o);
  }
  BatchPutResponse put_resp;
  {
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    grpc::Status s = stub()->BatchPut(&ctx, put, &put_resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  ASSERT_EQ(put_resp.results_size(), 3);
  for (int i = 0; i < 3; ++i) {
    const vault::v1::PutResult& r = put_resp.results(i);
    EXPECT_EQ(r.status().code(), 0) << r.status().message();
    EXPECT_TRUE(SameDigest(r.digest(), DigestOf(objects[i])));
    EXPECT_FALSE(r.already_present());
    EXPECT_EQ(r.seq(), static_cast<uint64_t>(i + 1));
  }

  // Again: already present, same sequence numbers, no new feed entries.
  BatchPutResponse again;
  {
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    ASSERT_TRUE(stub()->BatchPut(&ctx, put, &again).ok());
  }
  ASSERT_EQ(again.results_size(), 3);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(again.results(i).status().code(), 0);
    EXPECT_TRUE(again.results(i).already_present());
    EXPECT_EQ(again.results(i).seq(), static_cast<uint64_t>(i + 1));
  }
  EXPECT_EQ(store_->last_seq(), 3u);

  const vault::v1::Digest missing = DigestOf("not stored");
  BatchGetRequest get;
  *get.add_digests() = DigestOf(objects[2]);
  *get.add_digests() = missing;
  *get.add_digests() = DigestOf(objects[0]);
  *get.add_digests() = DigestOf(objects[1]);
  BatchGetResponse got;
  {
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    grpc::Status s = stub()->BatchGet(&ctx, get, &got);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  ASSERT_EQ(got.items_size(), 4);
  EXPECT_EQ(got.items(0).status().code(), 0);
  EXPECT_TRUE(got.items(0).data() == objects[2]);
  EXPECT_TRUE(SameDigest(got.items(0).digest(), DigestOf(objects[2])));
  EXPECT_EQ(got.items(1).status().code(), kNotFound);
  EXPECT_EQ(got.items(1).data(), "");
  EXPECT_TRUE(SameDigest(got.items(1).digest(), missing));
  EXPECT_EQ(got.items(2).status().code(), 0);
  EXPECT_EQ(got.items(2).data(), "hello");
  EXPECT_EQ(got.items(3).status().code(), 0);
  EXPECT_EQ(got.items(3).data(), "");
}

TEST_F(CasServiceTest, BatchGetRefusesItemsBeyondTheBatchLimit) {
  const std::string a = RandomBytes(100 << 10, 1);
  const std::string b = RandomBytes(100 << 10, 2);
  const std::string c = RandomBytes(100 << 10, 3);
  MustBatchPut({a, b});
  MustBatchPut({c});
  BatchGetRequest get;
  for (const std::string* o : {&a, &b, &c}) *get.add_digests() = DigestOf(*o);
  BatchGetResponse got;
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  ASSERT_TRUE(stub()->BatchGet(&ctx, get, &got).ok());
  ASSERT_EQ(got.items_size(), 3);
  EXPECT_EQ(got.items(0).status().code(), 0);
  EXPECT_TRUE(got.items(0).data() == a);
  EXPECT_EQ(got.items(1).status().code(), 0);
  EXPECT_TRUE(got.items(1).data() == b);
  EXPECT_EQ(got.items(2).status().code(), kResourceExhausted);  // 300 KiB > 256 KiB
  EXPECT_EQ(got.items(2).data(), "");
}

TEST_F(CasServiceTest, BatchPutReportsPerItemStatuses) {
  const std::string good = "good object";
  const std::string other = "evil object";  // same size as `good`
  BatchPutRequest put;
  BatchPutRequest::Item* item = put.add_items();
  *item->mutable_digest() = DigestOf(good);
  item->set_data(good);
  item = put.add_items();  // claims `good`'s twin but carries other bytes
  *item->mutable_digest() = DigestOf(good + "!");
  item->mutable_digest()->set_size(other.size());
  item->set_data(other);
  item = put.add_items();  // a 31-byte hash
  item->mutable_digest()->set_sha256(std::string(31, 'x'));
  item->mutable_digest()->set_size(3);
  item->set_data("abc");

  BatchPutResponse resp;
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  grpc::Status s = stub()->BatchPut(&ctx, put, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(resp.results_size(), 3);
  EXPECT_EQ(resp.results(0).status().code(), 0);
  EXPECT_EQ(resp.results(0).seq(), 1u);
  EXPECT_EQ(resp.results(1).status().code(), kInvalidArgument);
  EXPECT_NE(resp.results(1).status().message().find("digest mismatch"), std::string::npos)
      << resp.results(1).status().message();
  EXPECT_TRUE(SameDigest(resp.results(1).digest(), put.items(1).digest()));
  EXPECT_EQ(resp.results(2).status().code(), kInvalidArgument);
  EXPECT_NE(resp.results(2).status().message().find("32 bytes"), std::string::npos)
      << resp.results(2).status().message();
  EXPECT_EQ(resp.results(2).digest().sha256(), std::string(31, 'x'));
  EXPECT_EQ(resp.results(2).digest().size(), 3u);

  // Only the good one is stored.
  EXPECT_TRUE(MustStat(DigestOf(good)).present());
  EXPECT_FALSE(MustStat(put.items(1).digest()).present());
  EXPECT_FALSE(MustStat(DigestOf(other)).present());
  EXPECT_EQ(store_->last_seq(), 1u);
  GetResult back = Get(DigestOf(good), 0, 0);
  ASSERT_TRUE(back.status.ok()) << back.status.error_message();
  EXPECT_EQ(back.data, good);

  // The audit log witnesses both: the stored object (one entry for the call) and the refused
  // one (the malformed third item is no object and is not audited).
  std::vector<vault::v1::AuditEntry> entries = AuditEntries();
  ASSERT_EQ(entries.size(), 2u);
  const std::string good_text = cas::Digest::Of(good).ToString();
  EXPECT_EQ(entries[0].action(), "cas.put");
  EXPECT_EQ(entries[0].decision(), vault::v1::AuditEntry::ALLOWED);
  EXPECT_EQ(entries[0].subject(), good_text);
  EXPECT_EQ(entries[0].actor(), kLocalAdminActor);
  ASSERT_EQ(entries[0].details_size(), 5);
  EXPECT_EQ(entries[0].details(0).key(), "objects");
  EXPECT_EQ(entries[0].details(0).value(), "1");
  EXPECT_EQ(entries[0].details(2).value(), "1");  // feed_first
  EXPECT_EQ(entries[0].details(4).key(), "digests_sha256");
  EXPECT_EQ(entries[0].details(4).value(),
            absl::BytesToHexString(audit::AsBytes(audit::Sha256(good_text + "\n"))));
  EXPECT_EQ(entries[1].decision(), vault::v1::AuditEntry::DENIED);
  EXPECT_EQ(entries[1].subject(), DigestText(put.items(1).digest()));
  EXPECT_NE(entries[1].motivation().find("digest mismatch"), std::string::npos);
}

TEST_F(CasServiceTest, RefusedObjectsOfOneCallShareTheirAuditEntriesPastSixteen) {
  BatchPutRequest put;
  std::string rest;
  for (int i = 0; i < 40; ++i) {
    BatchPutRequest::Item* item = put.add_items();
    *item->mutable_digest() = DigestOf(absl::StrCat("claimed ", i));
    item->set_data(absl::StrCat("carried ", i));  // same length, other bytes
    if (i >= 16) absl::StrAppend(&rest, DigestText(item->digest()), "\n");
  }
  BatchPutResponse resp;
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  ASSERT_TRUE(stub()->BatchPut(&ctx, put, &resp).ok());
  std::vector<vault::v1::AuditEntry> entries = AuditEntries();
  ASSERT_EQ(entries.size(), 17u);
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(entries[i].decision(), vault::v1::AuditEntry::DENIED);
    EXPECT_EQ(entries[i].subject(), DigestText(put.items(i).digest()));
  }
  EXPECT_EQ(entries[16].subject(), "24 more objects");
  ASSERT_EQ(entries[16].details_size(), 2);
  EXPECT_EQ(entries[16].details(0).value(), "24");
  EXPECT_EQ(entries[16].details(1).value(),
            absl::BytesToHexString(audit::AsBytes(audit::Sha256(rest))));
}

TEST_F(CasServiceTest, BatchPutOverTheBatchLimitFailsTheWholeCall) {
  const std::string a = RandomBytes(150 << 10, 1);
  const std::string b = RandomBytes(150 << 10, 2);
  BatchPutRequest put;
  for (const std::string* o : {&a, &b}) {
    BatchPutRequest::Item* item = put.add_items();
    *item->mutable_digest() = DigestOf(*o);
    item->set_data(*o);
  }
  BatchPutResponse resp;
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  grpc::Status s = stub()->BatchPut(&ctx, put, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_EQ(resp.results_size(), 0);
  EXPECT_FALSE(MustStat(DigestOf(a)).present());
  EXPECT_FALSE(MustStat(DigestOf(b)).present());
  EXPECT_EQ(store_->last_seq(), 0u);
}

// A regression test for a review finding: 4,000,000 empty items in one 8 MB call made vaultd
// allocate 2 GB before any limit applied.
TEST_F(CasServiceTest, BatchCallsOverTheItemLimitFailWholeBeforeAnyWork) {
  BatchPutRequest put;
  BatchGetRequest get;
  for (int i = 0; i < 51; ++i) {
    std::string o = absl::StrCat("item ", i);
    BatchPutRequest::Item* item = put.add_items();
    *item->mutable_digest() = DigestOf(o);
    item->set_data(o);
    *get.add_digests() = DigestOf(o);
  }
  BatchPutResponse put_resp;
  grpc::ClientContext put_ctx;
  SetDeadline(&put_ctx);
  grpc::Status s = stub()->BatchPut(&put_ctx, put, &put_resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_EQ(s.error_message(), "BatchPut: 51 items; the limit is 50 per call");
  EXPECT_EQ(store_->last_seq(), 0u);
  BatchGetResponse get_resp;
  grpc::ClientContext get_ctx;
  SetDeadline(&get_ctx);
  s = stub()->BatchGet(&get_ctx, get, &get_resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_EQ(get_resp.items_size(), 0);
}

TEST_F(CasServiceTest, BatchPutRefusesObjectsAtTheChunkingThreshold) {
  const std::string big = RandomBytes(kChunkingThreshold, 1);
  BatchPutRequest put;
  BatchPutRequest::Item* item = put.add_items();
  *item->mutable_digest() = DigestOf(big);
  item->set_data(big);
  BatchPutResponse resp;
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  ASSERT_TRUE(stub()->BatchPut(&ctx, put, &resp).ok());
  ASSERT_EQ(resp.results_size(), 1);
  EXPECT_EQ(resp.results(0).status().code(), kInvalidArgument);
}

// --- FindMissing ---

TEST_F(CasServiceTest, FindMissingKeepsRequestOrderWithoutDuplicates) {
  const std::string a = "object a", b = "object b", c = "object c", d = "object d";
  MustBatchPut({b, d});
  FindMissingRequest req;
  for (const std::string* o : {&c, &b, &a, &c, &d, &a, &c}) *req.add_digests() = DigestOf(*o);
  FindMissingResponse resp;
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  grpc::Status s = stub()->FindMissing(&ctx, req, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(resp.missing_size(), 2);
  EXPECT_TRUE(SameDigest(resp.missing(0), DigestOf(c)));
  EXPECT_TRUE(SameDigest(resp.missing(1), DigestOf(a)));
}

TEST_F(CasServiceTest, FindMissingTreatsAnotherSizeAsAnotherObject) {
  MustBatchPut({"x"});
  vault::v1::Digest other_size = DigestOf("x");
  other_size.set_size(2);
  FindMissingRequest req;
  *req.add_digests() = DigestOf("x");
  *req.add_digests() = other_size;
  FindMissingResponse resp;
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  ASSERT_TRUE(stub()->FindMissing(&ctx, req, &resp).ok());
  ASSERT_EQ(resp.missing_size(), 1);
  EXPECT_TRUE(SameDigest(resp.missing(0), other_size));
}

TEST_F(CasServiceTest, FindMissingRefusesTooManyDigests) {
  FindMissingRequest req;
  for (uint32_t i = 0; i < kLimits.max_find_missing; ++i) {
    *req.add_digests() = DigestOf(absl::StrCat("object ", i));
  }
  {
    FindMissingResponse resp;
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    ASSERT_TRUE(stub()->FindMissing(&ctx, req, &resp).ok());
    EXPECT_EQ(resp.missing_size(), static_cast<int>(kLimits.max_find_missing));
  }
  *req.add_digests() = DigestOf("one too many");
  FindMissingResponse resp;
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  grpc::Status s = stub()->FindMissing(&ctx, req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_EQ(resp.missing_size(), 0);
}

TEST_F(CasServiceTest, FindMissingRefusesAMalformedDigest) {
  FindMissingRequest req;
  *req.add_digests() = DigestOf("fine");
  req.add_digests()->set_sha256("short");
  FindMissingResponse resp;
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  grpc::Status s = stub()->FindMissing(&ctx, req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("digests[1]"), std::string::npos) << s.error_message();
}

// --- Put / Get ---

TEST_F(CasServiceTest, StreamingPutThenGetReturnsExactBytes) {
  const std::string data = RandomBytes(1536 << 10, 42);
  const vault::v1::Digest digest = DigestOf(data);
  PutResponse resp;
  grpc::Status s = Put(digest, 0, data, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(resp.result().status().code(), 0);
  EXPECT_TRUE(SameDigest(resp.result().digest(), digest));
  EXPECT_FALSE(resp.result().already_present());
  EXPECT_EQ(resp.result().seq(), 1u);

  GetResult all = Get(digest, 0, 0);
  ASSERT_TRUE(all.status.ok()) << all.status.error_message();
  EXPECT_TRUE(all.data == data);
  EXPECT_TRUE(all.contiguous);
  EXPECT_EQ(all.messages, 16);  // 1.5 MiB in 100 KiB pieces

  GetResult range = Get(digest, 1000, 300000);
  ASSERT_TRUE(range.status.ok()) << range.status.error_message();
  EXPECT_TRUE(range.data == data.substr(1000, 300000));
  EXPECT_TRUE(range.contiguous);

  GetResult tail = Get(digest, data.size() - 10, 0);
  ASSERT_TRUE(tail.status.ok()) << tail.status.error_message();
  EXPECT_TRUE(tail.data == data.substr(data.size() - 10));

  GetResult past_limit = Get(digest, data.size() - 10, 1000);  // limit beyond the end
  ASSERT_TRUE(past_limit.status.ok()) << past_limit.status.error_message();
  EXPECT_TRUE(past_limit.data == data.substr(data.size() - 10));

  GetResult at_end = Get(digest, data.size(), 0);
  EXPECT_TRUE(at_end.status.ok()) << at_end.status.error_message();
  EXPECT_EQ(at_end.data, "");

  GetResult past_end = Get(digest, data.size() + 1, 0);
  EXPECT_EQ(past_end.status.error_code(), grpc::StatusCode::OUT_OF_RANGE);
  EXPECT_EQ(past_end.data, "");

  GetResult missing = Get(DigestOf("missing"), 0, 0);
  EXPECT_EQ(missing.status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(missing.data, "");

  StatResponse st = MustStat(digest);
  EXPECT_TRUE(st.present());
  EXPECT_EQ(st.seq(), 1u);
  EXPECT_EQ(st.layout(), StatResponse::CHUNKED);
  EXPECT_EQ(st.chunk_count(), ExpectedChunkCount(data));
  EXPECT_GE(st.chunk_count(), 6u);  // at most 256 KiB each

  // Putting it again changes nothing.
  PutResponse again;
  ASSERT_TRUE(Put(digest, 0, data, &again).ok());
  EXPECT_TRUE(again.result().already_present());
  EXPECT_EQ(again.result().seq(), 1u);
  EXPECT_EQ(store_->last_seq(), 1u);
}

TEST_F(CasServiceTest, GetOfAnInlineObjectHonorsOffsetAndLimit) {
  const std::string data = RandomBytes(200 << 10, 9);  // below the chunking threshold
  const vault::v1::Digest digest = DigestOf(data);
  PutResponse resp;
  ASSERT_TRUE(Put(digest, 0, data, &resp).ok());
  EXPECT_EQ(resp.result().seq(), 1u);
  EXPECT_EQ(MustStat(digest).layout(), StatResponse::INLINE);
  GetResult range = Get(digest, 150 << 10, 10 << 10);
  ASSERT_TRUE(range.status.ok()) << range.status.error_message();
  EXPECT_TRUE(range.data == data.substr(150 << 10, 10 << 10));
  EXPECT_TRUE(range.contiguous);
  GetResult all = Get(digest, 0, 0);
  ASSERT_TRUE(all.status.ok());
  EXPECT_TRUE(all.data == data);
  EXPECT_EQ(all.messages, 2);
}

TEST_F(CasServiceTest, GetOfAnEmptyObject) {
  MustBatchPut({""});
  GetResult got = Get(DigestOf(""), 0, 0);
  EXPECT_TRUE(got.status.ok()) << got.status.error_message();
  EXPECT_EQ(got.data, "");
  EXPECT_EQ(got.messages, 0);
  EXPECT_EQ(Get(DigestOf(""), 1, 0).status.error_code(), grpc::StatusCode::OUT_OF_RANGE);
}

TEST_F(CasServiceTest, PutOfWrongContentIsRefusedAndStoresNothing) {
  // Chunked: same size, other bytes.
  const std::string data = RandomBytes(300 << 10, 1);
  const std::string wrong = RandomBytes(300 << 10, 2);
  const vault::v1::Digest digest = DigestOf(data);
  grpc::Status s = Put(digest, 0, wrong);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  StatResponse st = MustStat(digest);
  EXPECT_FALSE(st.present());
  EXPECT_EQ(st.upload_offset(), 0u);  // the failed upload is discarded
  EXPECT_FALSE(MustStat(DigestOf(wrong)).present());

  // Inline: same size, other bytes.
  s = Put(DigestOf("small one"), 0, "small two");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_FALSE(MustStat(DigestOf("small one")).present());

  // More bytes than the size.
  s = Put(DigestOf("abc"), 0, "abcd");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_FALSE(MustStat(DigestOf("abc")).present());

  // Fewer bytes than the size: not finished; may resume.
  s = Put(DigestOf("abcd"), 0, "abc");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
  EXPECT_FALSE(MustStat(DigestOf("abcd")).present());
  EXPECT_EQ(store_->last_seq(), 0u);
}

TEST_F(CasServiceTest, PutResumesAfterTheClientCancels) {
  const std::string data = RandomBytes(1536 << 10, 7);
  const vault::v1::Digest digest = DigestOf(data);
  constexpr size_t kSent = 700 << 10;
  {
    PutResponse resp;
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    std::unique_ptr<grpc::ClientWriterInterface<PutRequest>> writer = stub()->Put(&ctx, &resp);
    for (size_t pos = 0; pos < kSent; pos += kPiece) {
      PutRequest req;
      if (pos == 0) *req.mutable_digest() = digest;
      req.set_data(data.substr(pos, std::min(kPiece, kSent - pos)));
      ASSERT_TRUE(writer->Write(req));
    }
    // Some chunks are durable (at most 256 KiB each, so 700 KiB make at least two).
    ASSERT_TRUE(WaitFor([&] { return MustStat(digest).upload_offset() > 0; }));
    ctx.TryCancel();
    EXPECT_EQ(writer->Finish().error_code(), grpc::StatusCode::CANCELLED);
  }
  // A new Put takes the object over at once (here a probe past the end, which changes no
  // progress); the cancelled stream stops at its next step. Wait for its last step to land.
  grpc::Status probe = Put(digest, digest.size() + 1, "");
  EXPECT_EQ(probe.error_code(), grpc::StatusCode::OUT_OF_RANGE) << probe.error_message();
  uint64_t last = MustStat(digest).upload_offset();
  ASSERT_TRUE(WaitFor([&] {
    absl::SleepFor(absl::Milliseconds(200));
    uint64_t now = MustStat(digest).upload_offset();
    bool stable = now == last;
    last = now;
    return stable;
  }));

  StatResponse st = MustStat(digest);
  EXPECT_FALSE(st.present());
  const uint64_t offset = st.upload_offset();
  EXPECT_GT(offset, 0u);
  EXPECT_LE(offset, kSent);

  // Resuming anywhere but the durable offset is refused, and keeps the progress.
  grpc::Status s = Put(digest, offset + 1, absl::string_view(data).substr(offset + 1));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
  s = Put(digest, offset - 1, absl::string_view(data).substr(offset - 1));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
  EXPECT_EQ(MustStat(digest).upload_offset(), offset);

  PutResponse resp;
  s = Put(digest, offset, absl::string_view(data).substr(offset), &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(resp.result().status().code(), 0);
  EXPECT_FALSE(resp.result().already_present());
  EXPECT_EQ(resp.result().seq(), 1u);

  GetResult back = Get(digest, 0, 0);
  ASSERT_TRUE(back.status.ok()) << back.status.error_message();
  EXPECT_TRUE(back.data == data);
  st = MustStat(digest);
  EXPECT_TRUE(st.present());
  EXPECT_EQ(st.upload_offset(), 0u);
  EXPECT_EQ(st.layout(), StatResponse::CHUNKED);
  EXPECT_EQ(st.chunk_count(), ExpectedChunkCount(data));  // same chunks as one pass
}

TEST_F(CasServiceTest, PutAtAWrongOffsetIsAFailedPrecondition) {
  // No upload in progress: only offset 0 is valid.
  const std::string big = RandomBytes(300 << 10, 3);
  grpc::Status s = Put(DigestOf(big), 64 << 10, absl::string_view(big).substr(64 << 10));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
  // Objects below the chunking threshold never resume.
  s = Put(DigestOf("small"), 1, "mall");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
  EXPECT_EQ(store_->last_seq(), 0u);
}

TEST_F(CasServiceTest, PutWithTheDigestInALaterMessageIsInvalid) {
  const std::string data = "0123456789";
  PutResponse resp;
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  std::unique_ptr<grpc::ClientWriterInterface<PutRequest>> writer = stub()->Put(&ctx, &resp);
  PutRequest first;
  *first.mutable_digest() = DigestOf(data);
  first.set_data(data.substr(0, 5));
  writer->Write(first);
  PutRequest second;
  *second.mutable_digest() = DigestOf(data);
  second.set_data(data.substr(5));
  writer->Write(second);
  writer->WritesDone();
  grpc::Status s = writer->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_FALSE(MustStat(DigestOf(data)).present());
}

TEST_F(CasServiceTest, PutWithAnOffsetInALaterMessageIsInvalid) {
  const std::string data = "0123456789";
  PutResponse resp;
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  std::unique_ptr<grpc::ClientWriterInterface<PutRequest>> writer = stub()->Put(&ctx, &resp);
  PutRequest first;
  *first.mutable_digest() = DigestOf(data);
  first.set_data(data.substr(0, 5));
  writer->Write(first);
  PutRequest second;
  second.set_offset(5);
  second.set_data(data.substr(5));
  writer->Write(second);
  writer->WritesDone();
  grpc::Status s = writer->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_FALSE(MustStat(DigestOf(data)).present());
}

TEST_F(CasServiceTest, EmptyPutStreamIsInvalid) {
  PutResponse resp;
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  std::unique_ptr<grpc::ClientWriterInterface<PutRequest>> writer = stub()->Put(&ctx, &resp);
  writer->WritesDone();
  grpc::Status s = writer->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
}

TEST_F(CasServiceTest, PutWithoutADigestIsInvalid) {
  PutRequest req;
  req.set_data("abc");
  PutResponse resp;
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  std::unique_ptr<grpc::ClientWriterInterface<PutRequest>> writer = stub()->Put(&ctx, &resp);
  writer->Write(req);
  writer->WritesDone();
  grpc::Status s = writer->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
}

TEST_F(CasServiceTest, PutOfAnEmptyObject) {
  PutResponse resp;
  grpc::Status s = Put(DigestOf(""), 0, "", &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(resp.result().seq(), 1u);
  EXPECT_TRUE(MustStat(DigestOf("")).present());
}

// --- Stat ---

TEST_F(CasServiceTest, StatReportsEveryField) {
  const int64_t before = absl::ToUnixMillis(absl::Now());
  MustBatchPut({"first", "second"});
  const int64_t after = absl::ToUnixMillis(absl::Now());

  StatResponse st = MustStat(DigestOf("second"));
  EXPECT_TRUE(st.present());
  EXPECT_TRUE(SameDigest(st.digest(), DigestOf("second")));
  EXPECT_EQ(st.seq(), 2u);
  EXPECT_EQ(st.layout(), StatResponse::INLINE);
  EXPECT_EQ(st.chunk_count(), 0u);
  EXPECT_GE(st.stored_unix_ms(), before);
  EXPECT_LE(st.stored_unix_ms(), after);
  EXPECT_EQ(st.upload_offset(), 0u);

  st = MustStat(DigestOf("absent"));
  EXPECT_FALSE(st.present());
  EXPECT_TRUE(SameDigest(st.digest(), DigestOf("absent")));
  EXPECT_EQ(st.seq(), 0u);
  EXPECT_EQ(st.layout(), StatResponse::LAYOUT_UNSPECIFIED);
  EXPECT_EQ(st.chunk_count(), 0u);
  EXPECT_EQ(st.upload_offset(), 0u);

  StatRequest bad;
  bad.mutable_digest()->set_sha256(std::string(33, 'x'));
  StatResponse resp;
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  EXPECT_EQ(stub()->Stat(&ctx, bad, &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

// --- Feed ---

TEST_F(CasServiceTest, FeedPagesWithAfterSeqAndLimit) {
  std::vector<std::string> objects;
  for (int i = 0; i < 5; ++i) objects.push_back(absl::StrCat("object ", i));
  EXPECT_EQ(MustBatchPut(objects), (std::vector<uint64_t>{1, 2, 3, 4, 5}));

  FeedResult page = Feed(0, 2);
  ASSERT_TRUE(page.status.ok()) << page.status.error_message();
  EXPECT_EQ(page.seqs, (std::vector<uint64_t>{1, 2}));
  ASSERT_EQ(page.messages.size(), 1u);
  ASSERT_EQ(page.messages[0].entries_size(), 2);
  EXPECT_TRUE(SameDigest(page.messages[0].entries(0).digest(), DigestOf(objects[0])));
  EXPECT_TRUE(SameDigest(page.messages[0].entries(1).digest(), DigestOf(objects[1])));
  EXPECT_GT(page.messages[0].entries(0).stored_unix_ms(), 0);
  EXPECT_EQ(page.messages[0].last_seq(), 5u);

  page = Feed(2, 2);
  ASSERT_TRUE(page.status.ok());
  EXPECT_EQ(page.seqs, (std::vector<uint64_t>{3, 4}));
  page = Feed(4, 2);
  ASSERT_TRUE(page.status.ok());
  EXPECT_EQ(page.seqs, (std::vector<uint64_t>{5}));
  ASSERT_EQ(page.messages.size(), 1u);
  EXPECT_TRUE(SameDigest(page.messages[0].entries(0).digest(), DigestOf(objects[4])));
  page = Feed(5, 2);
  ASSERT_TRUE(page.status.ok());
  EXPECT_TRUE(page.messages.empty());

  // No limit: everything, in server pages of 2.
  page = Feed(0, 0);
  ASSERT_TRUE(page.status.ok());
  EXPECT_EQ(page.seqs, (std::vector<uint64_t>{1, 2, 3, 4, 5}));
  EXPECT_EQ(page.messages.size(), 3u);
  // A limit above a page spans several messages.
  page = Feed(1, 3);
  ASSERT_TRUE(page.status.ok());
  EXPECT_EQ(page.seqs, (std::vector<uint64_t>{2, 3, 4}));
  EXPECT_EQ(page.messages.size(), 2u);
}

TEST_F(CasServiceTest, FeedFollowDeliversNewObjectsUntilTheClientCancels) {
  MustBatchPut({"before"});
  FeedRequest req;
  req.set_follow(true);
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  std::unique_ptr<grpc::ClientReaderInterface<FeedResponse>> reader = stub()->Feed(&ctx, req);
  FeedResponse resp;
  ASSERT_TRUE(reader->Read(&resp));
  ASSERT_EQ(resp.entries_size(), 1);
  EXPECT_EQ(resp.entries(0).seq(), 1u);

  // The stream is open and idle; an object stored now arrives on it.
  MustBatchPut({"after"});
  ASSERT_TRUE(reader->Read(&resp));  // bounded by the call's deadline
  ASSERT_EQ(resp.entries_size(), 1);
  EXPECT_EQ(resp.entries(0).seq(), 2u);
  EXPECT_TRUE(SameDigest(resp.entries(0).digest(), DigestOf("after")));
  EXPECT_EQ(resp.last_seq(), 2u);

  ctx.TryCancel();
  EXPECT_FALSE(reader->Read(&resp));
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
}

TEST_F(CasServiceTest, FeedFollowEndsWhenTheDeadlinePasses) {
  FeedRequest req;
  req.set_follow(true);
  grpc::ClientContext ctx;
  SetDeadline(&ctx, absl::Milliseconds(300));
  std::unique_ptr<grpc::ClientReaderInterface<FeedResponse>> reader = stub()->Feed(&ctx, req);
  FeedResponse resp;
  EXPECT_FALSE(reader->Read(&resp));
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
}

TEST_F(CasServiceTest, FeedFollowEndsUnavailableWhenTheStoreCloses) {
  FeedRequest req;
  req.set_follow(true);
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  std::unique_ptr<grpc::ClientReaderInterface<FeedResponse>> reader = stub()->Feed(&ctx, req);
  absl::SleepFor(absl::Milliseconds(100));  // let the stream go idle, waiting on the store
  absl::Time start = absl::Now();
  store_->Close();  // what vaultd's shutdown does first
  FeedResponse resp;
  EXPECT_FALSE(reader->Read(&resp));
  grpc::Status s = reader->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));  // not the call's deadline
}

// --- Overload ---

TEST_F(CasServiceTest, FullExecutorAnswersResourceExhausted) {
  common::Executor busy(/*threads=*/1, /*max_queue=*/1);
  CasService service(store_.get(), &busy, kLimits, auditor_.get());
  grpc::ServerBuilder builder;
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  std::unique_ptr<vault::v1::Cas::Stub> stub =
      vault::v1::Cas::NewStub(server->InProcessChannel(grpc::ChannelArguments()));

  absl::Notification started, release, drained;
  ASSERT_TRUE(busy.Schedule([&] {
    started.Notify();
    release.WaitForNotification();
  }));
  started.WaitForNotification();
  ASSERT_TRUE(busy.Schedule([&] { drained.Notify(); }));  // fills the queue
  ASSERT_FALSE(busy.Schedule([] {}));                     // full

  {
    FindMissingRequest req;
    *req.add_digests() = DigestOf("x");
    FindMissingResponse resp;
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    grpc::Status s = stub->FindMissing(&ctx, req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  }
  {
    StatRequest req;
    *req.mutable_digest() = DigestOf("x");
    StatResponse resp;
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    EXPECT_EQ(stub->Stat(&ctx, req, &resp).error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  }
  {
    GetRequest req;
    *req.mutable_digest() = DigestOf("x");
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    std::unique_ptr<grpc::ClientReader<GetResponse>> reader = stub->Get(&ctx, req);
    GetResponse resp;
    EXPECT_FALSE(reader->Read(&resp));
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  }
  {
    FeedRequest req;
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    std::unique_ptr<grpc::ClientReader<FeedResponse>> reader = stub->Feed(&ctx, req);
    FeedResponse resp;
    EXPECT_FALSE(reader->Read(&resp));
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  }
  {
    PutResponse resp;
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    std::unique_ptr<grpc::ClientWriter<PutRequest>> writer = stub->Put(&ctx, &resp);
    PutRequest req;
    *req.mutable_digest() = DigestOf("x");
    req.set_data("x");
    writer->Write(req);
    writer->WritesDone();
    EXPECT_EQ(writer->Finish().error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  }

  release.Notify();
  drained.WaitForNotification();
  // Once the queue has drained, calls go through again.
  FindMissingRequest req;
  *req.add_digests() = DigestOf("x");
  FindMissingResponse resp;
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  grpc::Status s = stub->FindMissing(&ctx, req, &resp);
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(resp.missing_size(), 1);

  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  server->Wait();
  busy.Shutdown();
}

}  // namespace
}  // namespace vault::node
