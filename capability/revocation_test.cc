// Tests of signed revocations and the RevocationStore (design §5, capability/revocation.h).
#include "capability/revocation.h"

#include <openssl/evp.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "capability/chain.h"
#include "capability/principal.h"
#include "common/testing/temp_dir.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "gtest/gtest.h"
#include "storage/database.h"
#include "vault/v1/capability.pb.h"

namespace vault::capability {
namespace {

using vault::v1::RevocationPayload;
using vault::v1::SignedRevocation;

PrivateKey Key(char seed) {
  absl::StatusOr<PrivateKey> key = PrivateKey::FromRawSeed(std::string(32, seed));
  if (!key.ok()) std::abort();
  return std::move(*key);
}

std::string Sha256(absl::string_view data) {
  unsigned char out[32];
  unsigned int len = 0;
  if (EVP_Digest(data.data(), data.size(), out, &len, EVP_sha256(), nullptr) != 1) std::abort();
  return std::string(reinterpret_cast<char*>(out), len);
}

std::string Canonical(const RevocationPayload& p) {
  std::string out;
  {
    google::protobuf::io::StringOutputStream stream(&out);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    p.SerializeToCodedStream(&coded);
  }
  return out;
}

// `bytes` exactly, signed by `key` in the revocation domain (no checks).
SignedRevocation SignRaw(absl::string_view bytes, const PrivateKey& key,
                         absl::string_view domain = kRevocationDomain) {
  SignedRevocation r;
  r.set_payload(std::string(bytes));
  absl::StatusOr<std::string> sig = key.Sign(absl::StrCat(domain, bytes));
  if (!sig.ok()) std::abort();
  r.set_signature(*sig);
  return r;
}

class RevocationTest : public ::testing::Test {
 protected:
  RevocationTest() : p_(Key(11)), x_(Key(12)), dir_("revocation_test"), hash_(Sha256("link")) {}

  RevocationPayload LinkRevocation(const PrivateKey& by) const {
    RevocationPayload p;
    p.set_version(1);
    p.set_revoker(by.public_key().raw());
    p.set_link_hash(hash_);
    p.set_issued_unix_ms(1'700'000'000'000);
    p.set_reason("key compromised");
    return p;
  }
  RevocationPayload AgentRevocation(const PrivateKey& by) const {
    RevocationPayload p;
    p.set_version(1);
    p.set_revoker(by.public_key().raw());
    p.set_agent_id("agent-7f3a");
    p.set_issued_unix_ms(1'700'000'000'000);
    return p;
  }

  SignedRevocation Signed(const RevocationPayload& p, const PrivateKey& by) const {
    absl::StatusOr<SignedRevocation> r = SignRevocation(p, by);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : SignedRevocation();
  }

  void OpenStore() {
    absl::StatusOr<std::unique_ptr<storage::Database>> db =
        storage::Database::Open({.path = dir_.Path("db")}, RevocationStore::ColumnFamilies());
    ASSERT_TRUE(db.ok()) << db.status();
    db_ = std::move(*db);
    absl::StatusOr<std::unique_ptr<RevocationStore>> store = RevocationStore::Open(db_.get());
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
  }
  void CloseStore() {
    store_.reset();
    db_.reset();
  }

  PrivateKey p_, x_;
  common::testing::TempDir dir_;
  const std::string hash_;
  std::unique_ptr<storage::Database> db_;
  std::unique_ptr<RevocationStore> store_;
};

TEST_F(RevocationTest, SignOpenRoundTrip) {
  for (const RevocationPayload& p : {LinkRevocation(p_), AgentRevocation(p_)}) {
    SignedRevocation r = Signed(p, p_);
    EXPECT_EQ(r.payload(), Canonical(p));
    EXPECT_EQ(r.signature().size(), PublicKey::kSignatureSize);
    absl::StatusOr<RevocationPayload> opened = OpenRevocation(r);
    ASSERT_TRUE(opened.ok()) << opened.status();
    EXPECT_EQ(Canonical(*opened), Canonical(p));
  }
}

TEST_F(RevocationTest, SignRefusesAKeyThatIsNotTheRevoker) {
  EXPECT_EQ(SignRevocation(LinkRevocation(p_), x_).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(RevocationTest, TamperedPayloadValueIsUnauthenticated) {
  // A bit of the reason string: still a canonical payload, so only the signature catches it.
  SignedRevocation r = Signed(LinkRevocation(p_), p_);
  std::string bytes = r.payload();
  const size_t at = bytes.find("compromised");
  ASSERT_NE(at, std::string::npos);
  bytes[at] ^= 0x01;
  r.set_payload(bytes);
  EXPECT_EQ(OpenRevocation(r).status().code(), absl::StatusCode::kUnauthenticated);
}

TEST_F(RevocationTest, TamperedRevokerIsUnauthenticated) {
  // The revoker swapped for X's key: a valid key, but P's signature.
  SignedRevocation r = Signed(LinkRevocation(p_), p_);
  RevocationPayload p = LinkRevocation(p_);
  p.set_revoker(x_.public_key().raw());
  r.set_payload(Canonical(p));
  EXPECT_EQ(OpenRevocation(r).status().code(), absl::StatusCode::kUnauthenticated);
}

TEST_F(RevocationTest, TamperedPayloadStructureIsInvalidArgument) {
  SignedRevocation r = Signed(LinkRevocation(p_), p_);
  std::string bytes = r.payload();
  ASSERT_EQ(bytes[0], '\x08');
  bytes[0] = '\x09';  // field 1 as fixed64: unparsable or an unknown field
  r.set_payload(bytes);
  EXPECT_EQ(OpenRevocation(r).status().code(), absl::StatusCode::kInvalidArgument);
  r.set_payload("\xff\xff\xff");
  EXPECT_EQ(OpenRevocation(r).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(RevocationTest, TamperedSignature) {
  SignedRevocation r = Signed(LinkRevocation(p_), p_);
  SignedRevocation flipped = r;
  (*flipped.mutable_signature())[10] ^= 0x01;
  EXPECT_EQ(OpenRevocation(flipped).status().code(), absl::StatusCode::kUnauthenticated);
  SignedRevocation short_sig = r;
  short_sig.mutable_signature()->pop_back();
  EXPECT_EQ(OpenRevocation(short_sig).status().code(), absl::StatusCode::kInvalidArgument);
  SignedRevocation no_sig = r;
  no_sig.clear_signature();
  EXPECT_EQ(OpenRevocation(no_sig).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(RevocationTest, SignedByAnotherKeyOrInAnotherDomain) {
  const std::string bytes = Canonical(LinkRevocation(p_));
  EXPECT_EQ(OpenRevocation(SignRaw(bytes, x_)).status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(OpenRevocation(SignRaw(bytes, p_, kLinkDomain)).status().code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_TRUE(OpenRevocation(SignRaw(bytes, p_)).ok());
}

TEST_F(RevocationTest, BothTargetsOrNeither) {
  RevocationPayload both = LinkRevocation(p_);
  both.set_agent_id("agent-7f3a");
  EXPECT_EQ(SignRevocation(both, p_).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(OpenRevocation(SignRaw(Canonical(both), p_)).status().code(),
            absl::StatusCode::kInvalidArgument);
  RevocationPayload neither = LinkRevocation(p_);
  neither.clear_link_hash();
  EXPECT_EQ(SignRevocation(neither, p_).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(OpenRevocation(SignRaw(Canonical(neither), p_)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(RevocationTest, LinkHashNot32Bytes) {
  for (size_t n : {size_t{1}, size_t{31}, size_t{33}, size_t{64}}) {
    SCOPED_TRACE(n);
    RevocationPayload p = LinkRevocation(p_);
    p.set_link_hash(std::string(n, 'h'));
    EXPECT_EQ(SignRevocation(p, p_).status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(OpenRevocation(SignRaw(Canonical(p), p_)).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
}

TEST_F(RevocationTest, VersionOtherThanOne) {
  for (uint32_t version : {0u, 2u}) {
    SCOPED_TRACE(version);
    RevocationPayload p = LinkRevocation(p_);
    p.set_version(version);
    EXPECT_EQ(SignRevocation(p, p_).status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(OpenRevocation(SignRaw(Canonical(p), p_)).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
}

TEST_F(RevocationTest, UnknownFieldOrNonCanonicalEncoding) {
  const std::string bytes = Canonical(LinkRevocation(p_));
  EXPECT_EQ(OpenRevocation(SignRaw(bytes + std::string("\x78\x01", 2), p_)).status().code(),
            absl::StatusCode::kInvalidArgument);  // field 15
  ASSERT_EQ(bytes.substr(0, 2), std::string("\x08\x01", 2));
  EXPECT_EQ(OpenRevocation(SignRaw(bytes.substr(2) + bytes.substr(0, 2), p_)).status().code(),
            absl::StatusCode::kInvalidArgument);  // version last
  EXPECT_EQ(
      OpenRevocation(SignRaw(std::string("\x08\x81\x00", 3) + bytes.substr(2), p_)).status().code(),
      absl::StatusCode::kInvalidArgument);  // version in a redundant varint
}

TEST_F(RevocationTest, InvalidRevokerKey) {
  std::string identity(32, '\0');
  identity[0] = '\x01';
  RevocationPayload p = LinkRevocation(p_);
  p.set_revoker(identity);
  EXPECT_EQ(OpenRevocation(SignRaw(Canonical(p), p_)).status().code(),
            absl::StatusCode::kInvalidArgument);
  p.set_revoker(p_.public_key().raw().substr(0, 31));
  EXPECT_EQ(OpenRevocation(SignRaw(Canonical(p), p_)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(RevocationTest, StoreAnswersForTheRevokerOnly) {
  OpenStore();
  EXPECT_EQ(store_->epoch(), 0u);
  EXPECT_FALSE(store_->LinkRevoked(hash_, p_.public_key()));
  ASSERT_TRUE(store_->Add(Signed(LinkRevocation(p_), p_)).ok());
  EXPECT_TRUE(store_->LinkRevoked(hash_, p_.public_key()));
  EXPECT_FALSE(store_->LinkRevoked(hash_, x_.public_key()));
  EXPECT_FALSE(store_->LinkRevoked(Sha256("another link"), p_.public_key()));
  EXPECT_FALSE(store_->AgentRevoked("agent-7f3a", p_.public_key()));
  ASSERT_TRUE(store_->Add(Signed(AgentRevocation(x_), x_)).ok());
  EXPECT_TRUE(store_->AgentRevoked("agent-7f3a", x_.public_key()));
  EXPECT_FALSE(store_->AgentRevoked("agent-7f3a", p_.public_key()));
  EXPECT_FALSE(store_->AgentRevoked("agent-7f3", x_.public_key()));
  EXPECT_EQ(store_->size(), 2u);
  EXPECT_EQ(store_->epoch(), 2u);
}

TEST_F(RevocationTest, AllReturnsEachStoredRevocationAsSignedOnceAfterReopening) {
  OpenStore();
  const SignedRevocation a = Signed(LinkRevocation(p_), p_);
  const SignedRevocation b = Signed(AgentRevocation(x_), x_);
  ASSERT_TRUE(store_->Add(a).ok());
  ASSERT_TRUE(store_->Add(b).ok());
  ASSERT_TRUE(store_->Add(a).ok());  // held already: not stored twice
  CloseStore();
  OpenStore();
  absl::StatusOr<std::vector<SignedRevocation>> all = store_->All();
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), 2u);
  std::vector<std::string> got = {(*all)[0].SerializeAsString(), (*all)[1].SerializeAsString()};
  std::sort(got.begin(), got.end());
  std::vector<std::string> want = {a.SerializeAsString(), b.SerializeAsString()};
  std::sort(want.begin(), want.end());
  EXPECT_EQ(got, want);
}

TEST_F(RevocationTest, AgentAndLinkTargetsDoNotMix) {
  OpenStore();
  RevocationPayload p = AgentRevocation(p_);
  p.set_agent_id(std::string(32, 'a'));  // as long as a link hash
  ASSERT_TRUE(store_->Add(Signed(p, p_)).ok());
  EXPECT_TRUE(store_->AgentRevoked(std::string(32, 'a'), p_.public_key()));
  EXPECT_FALSE(store_->LinkRevoked(std::string(32, 'a'), p_.public_key()));
}

TEST_F(RevocationTest, AddIsIdempotent) {
  OpenStore();
  ASSERT_TRUE(store_->Add(Signed(LinkRevocation(p_), p_)).ok());
  EXPECT_EQ(store_->epoch(), 1u);
  ASSERT_TRUE(store_->Add(Signed(LinkRevocation(p_), p_)).ok());
  EXPECT_EQ(store_->epoch(), 1u);
  // The same target and revoker, said again later for another reason: nothing new.
  RevocationPayload again = LinkRevocation(p_);
  again.set_issued_unix_ms(again.issued_unix_ms() + 1000);
  again.set_reason("still compromised");
  ASSERT_TRUE(store_->Add(Signed(again, p_)).ok());
  EXPECT_EQ(store_->epoch(), 1u);
  EXPECT_EQ(store_->size(), 1u);
  // The same target by another revoker is new.
  ASSERT_TRUE(store_->Add(Signed(LinkRevocation(x_), x_)).ok());
  EXPECT_EQ(store_->epoch(), 2u);
}

TEST_F(RevocationTest, AddRefusesAnInvalidRevocation) {
  OpenStore();
  SignedRevocation forged = SignRaw(Canonical(LinkRevocation(p_)), x_);
  EXPECT_EQ(store_->Add(forged).code(), absl::StatusCode::kUnauthenticated);
  EXPECT_FALSE(store_->LinkRevoked(hash_, p_.public_key()));
  EXPECT_EQ(store_->epoch(), 0u);
  EXPECT_EQ(store_->size(), 0u);
}

TEST_F(RevocationTest, RevocationsSurviveAReopen) {
  OpenStore();
  ASSERT_TRUE(store_->Add(Signed(LinkRevocation(p_), p_)).ok());
  ASSERT_TRUE(store_->Add(Signed(AgentRevocation(p_), p_)).ok());
  CloseStore();
  OpenStore();
  EXPECT_TRUE(store_->LinkRevoked(hash_, p_.public_key()));
  EXPECT_TRUE(store_->AgentRevoked("agent-7f3a", p_.public_key()));
  EXPECT_FALSE(store_->LinkRevoked(hash_, x_.public_key()));
  EXPECT_EQ(store_->size(), 2u);
  const uint64_t epoch = store_->epoch();
  EXPECT_GE(epoch, 2u);
  ASSERT_TRUE(store_->Add(Signed(LinkRevocation(p_), p_)).ok());  // still held: no change
  EXPECT_EQ(store_->epoch(), epoch);
  ASSERT_TRUE(store_->Add(Signed(LinkRevocation(x_), x_)).ok());
  EXPECT_EQ(store_->epoch(), epoch + 1);
}

}  // namespace
}  // namespace vault::capability
