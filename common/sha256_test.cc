#include "common/sha256.h"

#include <string>

#include "absl/strings/escaping.h"
#include "gtest/gtest.h"

namespace vault::common {
namespace {

std::string Hex(const std::string& raw) { return absl::BytesToHexString(raw); }

// FIPS 180-2 test vectors.
TEST(Sha256, MatchesTheStandardVectors) {
  EXPECT_EQ(Hex(Sha256::Hash("")),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Hex(Sha256::Hash("abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Hex(Sha256::Hash("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST(Sha256, IncrementalPartsAndOneShotAgree) {
  const std::string whole = "the quick brown fox jumps over the lazy dog";
  Sha256 h;
  h.Update("the quick ");
  h.Update("");
  h.Update("brown fox jumps over the lazy dog");
  EXPECT_EQ(h.Finish(), Sha256::Hash(whole));
  // Finish resets: the same object hashes again from nothing.
  h.Update("abc");
  EXPECT_EQ(Hex(h.Finish()), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Sha256::HashParts({"the quick ", "brown fox ", "jumps over the lazy dog"}),
            Sha256::Hash(whole));
  unsigned char out[kSha256Bytes];
  Sha256::HashInto(whole, out);
  EXPECT_EQ(std::string(reinterpret_cast<char*>(out), kSha256Bytes), Sha256::Hash(whole));
}

}  // namespace
}  // namespace vault::common
