// The vault hashes every byte it receives: uploads whose content does not match the claimed
// digest are refused and leave nothing behind. Talks gRPC directly to the admin socket.
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "integration-tests/harness.h"

namespace vault::integration {
namespace {

constexpr absl::Duration kCallTimeout = absl::Seconds(20);
constexpr int kInvalidArgument = 3;  // google.rpc.Code

class CorruptUploadTest : public VaultTest {
 protected:
  void SetUp() override {
    VaultTest::SetUp();
    absl::StatusOr<Vaultd*> d = StartStandaloneVault("a");
    ASSERT_TRUE(d.ok()) << d.status();
    cas_ = CasStub((*d)->socket());
  }

  // Digests FindMissing reports, as text, in order.
  std::vector<std::string> FindMissing(const std::vector<vault::v1::Digest>& digests) {
    vault::v1::FindMissingRequest req;
    for (const vault::v1::Digest& d : digests) *req.add_digests() = d;
    vault::v1::FindMissingResponse resp;
    grpc::ClientContext ctx;
    SetDeadline(&ctx, kCallTimeout);
    grpc::Status s = cas_->FindMissing(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    std::vector<std::string> out;
    for (const vault::v1::Digest& d : resp.missing()) out.push_back(DigestText(d));
    return out;
  }

  vault::v1::StatResponse Stat(const vault::v1::Digest& digest) {
    vault::v1::StatRequest req;
    *req.mutable_digest() = digest;
    vault::v1::StatResponse resp;
    grpc::ClientContext ctx;
    SetDeadline(&ctx, kCallTimeout);
    grpc::Status s = cas_->Stat(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp;
  }

  // Streams `data` as the content of `digest`, in 1 MiB messages.
  grpc::Status StreamPut(const vault::v1::Digest& digest, absl::string_view data,
                         vault::v1::PutResponse* resp) {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, kCallTimeout);
    std::unique_ptr<grpc::ClientWriter<vault::v1::PutRequest>> writer = cas_->Put(&ctx, resp);
    vault::v1::PutRequest req;
    *req.mutable_digest() = digest;
    for (size_t at = 0; at < data.size(); at += 1 << 20) {
      req.set_data(std::string(data.substr(at, 1 << 20)));
      if (!writer->Write(req)) break;  // the server finished early; Finish says why
      req.Clear();
    }
    writer->WritesDone();
    return writer->Finish();
  }

  std::unique_ptr<vault::v1::Cas::Stub> cas_;
};

TEST_F(CorruptUploadTest, BatchPutWithAMismatchedDigestIsRefusedPerItem) {
  const std::string good = "good bytes";
  const vault::v1::Digest claimed = DigestProto("original");  // same size as "tampered"
  const vault::v1::Digest actual = DigestProto("tampered");
  vault::v1::BatchPutRequest req;
  auto* item = req.add_items();
  *item->mutable_digest() = DigestProto(good);
  item->set_data(good);
  item = req.add_items();
  *item->mutable_digest() = claimed;
  item->set_data("tampered");
  item = req.add_items();  // wrong size claimed
  *item->mutable_digest() = DigestProto("short");
  item->mutable_digest()->set_size(6);
  item->set_data("short");

  vault::v1::BatchPutResponse resp;
  grpc::ClientContext ctx;
  SetDeadline(&ctx, kCallTimeout);
  grpc::Status s = cas_->BatchPut(&ctx, req, &resp);
  ASSERT_TRUE(s.ok()) << s.error_code() << " " << s.error_message();
  ASSERT_EQ(resp.results_size(), 3);
  EXPECT_EQ(resp.results(0).status().code(), 0) << resp.results(0).status().message();
  EXPECT_EQ(resp.results(0).seq(), 1u);
  EXPECT_EQ(resp.results(1).status().code(), kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(resp.results(1).status().message(), "digest mismatch"))
      << resp.results(1).status().message();
  EXPECT_EQ(DigestText(resp.results(1).digest()), DigestText(claimed));
  EXPECT_EQ(resp.results(2).status().code(), kInvalidArgument);

  std::vector<std::string> missing = FindMissing({DigestProto(good), claimed, actual});
  EXPECT_EQ(missing, (std::vector<std::string>{DigestText(claimed), DigestText(actual)}));
  EXPECT_FALSE(Stat(claimed).present());
}

TEST_F(CorruptUploadTest, StreamedPutWhoseLastByteDiffersIsRefused) {
  std::mt19937_64 rng(Seed());
  std::string data = RandomBytes(rng, 6 << 20);  // chunked: above the 4 MiB threshold
  const vault::v1::Digest digest = DigestProto(data);
  data.back() = static_cast<char>(data.back() ^ 0x01);

  vault::v1::PutResponse resp;
  grpc::Status s = StreamPut(digest, data, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_TRUE(absl::StrContains(s.error_message(), "digest mismatch")) << s.error_message();

  vault::v1::StatResponse st = Stat(digest);
  EXPECT_FALSE(st.present());
  EXPECT_EQ(st.upload_offset(), 0u) << "a refused upload must not stay resumable";
  EXPECT_EQ(FindMissing({digest}), std::vector<std::string>{DigestText(digest)});

  // The right bytes are then accepted.
  data.back() = static_cast<char>(data.back() ^ 0x01);
  s = StreamPut(digest, data, &resp);
  ASSERT_TRUE(s.ok()) << s.error_code() << " " << s.error_message();
  EXPECT_EQ(resp.result().status().code(), 0);
  EXPECT_EQ(resp.result().seq(), 1u);
  EXPECT_TRUE(Stat(digest).present());
}

TEST_F(CorruptUploadTest, StreamedPutOfASmallObjectWithAWrongDigestIsRefused) {
  const vault::v1::Digest digest = DigestProto("expected content");
  vault::v1::PutResponse resp;
  grpc::Status s = StreamPut(digest, "expected contenT", &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_FALSE(Stat(digest).present());
}

}  // namespace
}  // namespace vault::integration
