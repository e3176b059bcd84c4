#include "cas/digest.h"

#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/escaping.h"
#include "gtest/gtest.h"

namespace vault::cas {
namespace {

constexpr char kEmptyHex[] = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
constexpr char kAbcHex[] = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";

void ExpectRefused(const std::string& text) {
  absl::StatusOr<Digest> d = Digest::Parse(text);
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument) << "accepted: " << text;
}

TEST(Digest, EmptyContentDigest) {
  Digest d = Digest::Of("");
  EXPECT_EQ(d.hex(), kEmptyHex);
  EXPECT_EQ(d.size(), 0u);
  EXPECT_EQ(d.ToString(), std::string("sha256:") + kEmptyHex + "/0");
  absl::StatusOr<Digest> parsed = Digest::Parse(std::string("sha256:") + kEmptyHex + "/0");
  ASSERT_EQ(parsed.status(), absl::OkStatus());
  EXPECT_EQ(*parsed, d);
}

TEST(Digest, AbcDigest) {
  Digest d = Digest::Of("abc");
  EXPECT_EQ(d.hex(), kAbcHex);
  EXPECT_EQ(d.size(), 3u);
  EXPECT_EQ(d.sha256(), absl::HexStringToBytes(kAbcHex));
  EXPECT_EQ(d.sha256().size(), kSha256Bytes);
  absl::StatusOr<Digest> parsed = Digest::Parse(std::string("sha256:") + kAbcHex + "/3");
  ASSERT_EQ(parsed.status(), absl::OkStatus());
  EXPECT_EQ(*parsed, d);
}

TEST(Digest, MillionAs) {
  // FIPS 180-2 test vector: one million 'a'.
  Digest d = Digest::Of(std::string(1000000, 'a'));
  EXPECT_EQ(d.ToString(),
            "sha256:cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0/1000000");
}

TEST(Digest, ParseToStringRoundTrip) {
  for (const std::string& text : {
           std::string("sha256:") + kAbcHex + "/3",
           std::string("sha256:") + kAbcHex + "/0",
           std::string("sha256:") + kEmptyHex + "/1234567890",
           std::string("sha256:") + kEmptyHex + "/18446744073709551615",
       }) {
    absl::StatusOr<Digest> d = Digest::Parse(text);
    ASSERT_EQ(d.status(), absl::OkStatus()) << text;
    EXPECT_EQ(d->ToString(), text);
  }
  absl::StatusOr<Digest> max =
      Digest::Parse(std::string("sha256:") + kEmptyHex + "/18446744073709551615");
  ASSERT_EQ(max.status(), absl::OkStatus());
  EXPECT_EQ(max->size(), UINT64_MAX);
}

TEST(Digest, ParseRefusesMalformedText) {
  const std::string hex = kAbcHex;
  std::string upper = hex;
  upper[10] = 'F';
  upper[0] = 'B';
  ExpectRefused("sha256:" + upper + "/3");
  ExpectRefused("sha256:" + hex.substr(0, 63) + "/3");
  ExpectRefused("sha256:" + hex + "a/3");
  ExpectRefused(hex + "/3");                                 // missing prefix
  ExpectRefused("sha512:" + hex + "/3");                     // wrong algorithm
  ExpectRefused("SHA256:" + hex + "/3");                     // prefix is lowercase
  ExpectRefused("sha256:" + hex);                            // missing size
  ExpectRefused("sha256:" + hex + "/");                      // empty size
  ExpectRefused("sha256:" + hex + "/03");                    // leading zero
  ExpectRefused("sha256:" + hex + "/00");                    // leading zero
  ExpectRefused("sha256:" + hex + "/-3");                    // negative
  ExpectRefused("sha256:" + hex + "/+3");                    // sign
  ExpectRefused("sha256:" + hex + "/18446744073709551616");  // 2^64
  ExpectRefused("sha256:" + hex + "/99999999999999999999999");
  ExpectRefused("sha256:" + hex + "/3x");  // trailing garbage
  ExpectRefused("sha256:" + hex + "/3 ");
  ExpectRefused("sha256:" + hex + "/3/4");
  ExpectRefused("sha256:" + hex + "/3\n");
  ExpectRefused(" sha256:" + hex + "/3");
  ExpectRefused("sha256:" + hex.substr(0, 62) + "g0/3");  // not hex
  ExpectRefused("sha256:/3");
  ExpectRefused("");
  ExpectRefused(std::string("sha256:") + hex + std::string("/3\0", 3));
}

TEST(Digest, ParseErrorMessageNamesTheInput) {
  absl::StatusOr<Digest> d = Digest::Parse("sha256:zz/1");
  ASSERT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(d.status().message().find("sha256:zz/1"), absl::string_view::npos)
      << d.status().message();
}

TEST(Digest, FromPartsChecksHashLength) {
  absl::StatusOr<Digest> ok = Digest::FromParts(Sha256::Hash("abc"), 3);
  ASSERT_EQ(ok.status(), absl::OkStatus());
  EXPECT_EQ(*ok, Digest::Of("abc"));
  EXPECT_EQ(Digest::FromParts(std::string(31, 'x'), 3).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Digest::FromParts(std::string(33, 'x'), 3).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Digest::FromParts("", 0).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(Digest, EqualityNeedsHashAndSize) {
  Digest abc = Digest::Of("abc");
  absl::StatusOr<Digest> other_size = Digest::FromParts(abc.sha256(), 4);
  ASSERT_EQ(other_size.status(), absl::OkStatus());
  EXPECT_FALSE(abc == *other_size);
  EXPECT_FALSE(abc == Digest::Of("abd"));
  absl::flat_hash_set<Digest> set = {abc, *other_size, Digest::Of("abc")};
  EXPECT_EQ(set.size(), 2u);
}

TEST(Digest, KeyLayoutAndRoundTrip) {
  absl::StatusOr<Digest> d = Digest::FromParts(Sha256::Hash("abc"), 0x0102030405060708ULL);
  ASSERT_EQ(d.status(), absl::OkStatus());
  const std::string key = d->Key();
  ASSERT_EQ(key.size(), 40u);
  EXPECT_EQ(key.substr(0, 32), Sha256::Hash("abc"));
  EXPECT_EQ(key.substr(32), std::string("\x01\x02\x03\x04\x05\x06\x07\x08", 8));
  absl::StatusOr<Digest> back = Digest::FromKey(key);
  ASSERT_EQ(back.status(), absl::OkStatus());
  EXPECT_EQ(*back, *d);
  EXPECT_EQ(back->size(), 0x0102030405060708ULL);

  for (uint64_t size : {uint64_t{0}, uint64_t{3}, uint64_t{255}, uint64_t{256}, UINT64_MAX}) {
    absl::StatusOr<Digest> e = Digest::FromParts(Sha256::Hash("x"), size);
    ASSERT_EQ(e.status(), absl::OkStatus());
    absl::StatusOr<Digest> r = Digest::FromKey(e->Key());
    ASSERT_EQ(r.status(), absl::OkStatus());
    EXPECT_EQ(*r, *e) << size;
  }
}

TEST(Digest, FromKeyRefusesWrongLength) {
  const std::string key = Digest::Of("abc").Key();
  EXPECT_EQ(Digest::FromKey(key.substr(0, 39)).status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(Digest::FromKey(key + "x").status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(Digest::FromKey("").status().code(), absl::StatusCode::kDataLoss);
}

TEST(Digest, KeysSortByHash) {
  absl::StatusOr<Digest> low = Digest::FromParts(std::string(32, '\x01'), 1000);
  absl::StatusOr<Digest> high = Digest::FromParts(std::string(32, '\x02'), 1);
  ASSERT_TRUE(low.ok() && high.ok());
  EXPECT_LT(low->Key(), high->Key());
}

TEST(Sha256, IncrementalEqualsOneShot) {
  std::string data;
  for (int i = 0; i < 100000; ++i) data.push_back(static_cast<char>((i * 131) ^ (i >> 8)));
  const std::string expected = Sha256::Hash(data);
  ASSERT_EQ(expected.size(), kSha256Bytes);
  for (size_t piece :
       {size_t{1}, size_t{63}, size_t{64}, size_t{65}, size_t{4096}, size_t{99999}}) {
    Sha256 h;
    for (size_t at = 0; at < data.size(); at += piece)
      h.Update(absl::string_view(data).substr(at, piece));
    EXPECT_EQ(h.Finish(), expected) << "piece " << piece;
  }
}

TEST(Sha256, FinishResetsForReuse) {
  Sha256 h;
  h.Update("ab");
  h.Update("c");
  EXPECT_EQ(absl::BytesToHexString(h.Finish()), kAbcHex);
  EXPECT_EQ(absl::BytesToHexString(h.Finish()), kEmptyHex);  // nothing since the reset
  h.Update("abc");
  EXPECT_EQ(absl::BytesToHexString(h.Finish()), kAbcHex);
}

TEST(Sha256, MoveKeepsState) {
  Sha256 h;
  h.Update("ab");
  Sha256 moved(std::move(h));
  moved.Update("c");
  EXPECT_EQ(absl::BytesToHexString(moved.Finish()), kAbcHex);
  Sha256 assigned;
  assigned.Update("junk");
  moved.Update("a");
  assigned = std::move(moved);
  assigned.Update("bc");
  EXPECT_EQ(absl::BytesToHexString(assigned.Finish()), kAbcHex);
}

TEST(Sha256, EmptyOneShot) { EXPECT_EQ(absl::BytesToHexString(Sha256::Hash("")), kEmptyHex); }

}  // namespace
}  // namespace vault::cas
