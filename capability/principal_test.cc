#include "capability/principal.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <system_error>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/testing/temp_dir.h"
#include "gtest/gtest.h"

namespace vault::capability {
namespace {

// RFC 8032 §7.1, TEST 1.
constexpr absl::string_view kRfcSeedHex =
    "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60";
constexpr absl::string_view kRfcPublicHex =
    "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a";
constexpr absl::string_view kRfcSignatureHex =
    "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b4"
    "6bd25bf5f0595bbe24655141438e7a100b";

// A fresh directory, removed at the end of the test.
class TempDir : public common::testing::TempDir {
 public:
  TempDir() : common::testing::TempDir("principal_test") {}
};

mode_t FileMode(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return 0;
  return st.st_mode & 07777;
}

TEST(PrivateKey, SignVerifyRoundTrip) {
  absl::StatusOr<PrivateKey> key = PrivateKey::Generate();
  ASSERT_TRUE(key.ok()) << key.status();
  absl::StatusOr<std::string> sig = key->Sign("hello");
  ASSERT_TRUE(sig.ok()) << sig.status();
  EXPECT_EQ(sig->size(), 64u);
  EXPECT_TRUE(key->public_key().Verify("hello", *sig).ok());
}

TEST(PrivateKey, TamperedMessageOrSignatureIsUnauthenticated) {
  absl::StatusOr<PrivateKey> key = PrivateKey::Generate();
  ASSERT_TRUE(key.ok()) << key.status();
  absl::StatusOr<std::string> sig = key->Sign("hello");
  ASSERT_TRUE(sig.ok()) << sig.status();

  EXPECT_EQ(key->public_key().Verify("hellp", *sig).code(), absl::StatusCode::kUnauthenticated);

  std::string bad = *sig;
  bad[10] ^= 0x01;
  EXPECT_EQ(key->public_key().Verify("hello", bad).code(), absl::StatusCode::kUnauthenticated);

  absl::StatusOr<PrivateKey> other = PrivateKey::Generate();
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_EQ(other->public_key().Verify("hello", *sig).code(), absl::StatusCode::kUnauthenticated);
}

TEST(PublicKey, WrongSignatureLengthIsInvalidArgument) {
  absl::StatusOr<PrivateKey> key = PrivateKey::Generate();
  ASSERT_TRUE(key.ok()) << key.status();
  absl::StatusOr<std::string> sig = key->Sign("hello");
  ASSERT_TRUE(sig.ok()) << sig.status();
  EXPECT_EQ(key->public_key().Verify("hello", sig->substr(0, 63)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(key->public_key().Verify("hello", *sig + "x").code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(PrivateKey, PemRoundTrip) {
  absl::StatusOr<PrivateKey> key = PrivateKey::Generate();
  ASSERT_TRUE(key.ok()) << key.status();
  absl::StatusOr<std::string> pem = key->ToPem();
  ASSERT_TRUE(pem.ok()) << pem.status();
  EXPECT_EQ(pem->rfind("-----BEGIN PRIVATE KEY-----", 0), 0u) << *pem;

  absl::StatusOr<PrivateKey> back = PrivateKey::FromPem(*pem);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->public_key(), key->public_key());
  absl::StatusOr<std::string> sig = back->Sign("m");
  ASSERT_TRUE(sig.ok()) << sig.status();
  EXPECT_TRUE(key->public_key().Verify("m", *sig).ok());
}

TEST(PrivateKey, FromPemRefusesGarbageAndOtherKeyTypes) {
  EXPECT_EQ(PrivateKey::FromPem("not a pem").status().code(), absl::StatusCode::kInvalidArgument);
  // A PKCS#8 P-256 key (openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256).
  constexpr absl::string_view kEcPem =
      "-----BEGIN PRIVATE KEY-----\n"
      "MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgFmwXkXJE0d6o26P3\n"
      "TUdmdjP3eQupKOeGGdZThi/WTYuhRANCAASnftZPd3UkSLZKTJPE69wMpwhJArmA\n"
      "GheEiK8ezG5zTQtjXOXc+8sGJrljMcp746Ish0dVs0d0mv+fkOqz8y8F\n"
      "-----END PRIVATE KEY-----\n";
  EXPECT_EQ(PrivateKey::FromPem(kEcPem).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(PrivateKey, SaveNewFileIsMode0600AndLoads) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  const std::string path = dir.path() + "/vault.key";
  absl::StatusOr<PrivateKey> key = PrivateKey::Generate();
  ASSERT_TRUE(key.ok()) << key.status();
  ASSERT_TRUE(key->SaveNewFile(path).ok());
  EXPECT_EQ(FileMode(path), 0600u);

  absl::StatusOr<PrivateKey> loaded = PrivateKey::LoadFile(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->public_key(), key->public_key());
}

TEST(PrivateKey, SaveNewFileRefusesExistingFileAndLeavesItUnchanged) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  const std::string path = dir.path() + "/vault.key";
  absl::StatusOr<PrivateKey> first = PrivateKey::Generate();
  absl::StatusOr<PrivateKey> second = PrivateKey::Generate();
  ASSERT_TRUE(first.ok() && second.ok());
  ASSERT_TRUE(first->SaveNewFile(path).ok());
  absl::StatusOr<std::string> before = common::ReadFile(path);
  ASSERT_TRUE(before.ok()) << before.status();

  EXPECT_EQ(second->SaveNewFile(path).code(), absl::StatusCode::kAlreadyExists);
  absl::StatusOr<std::string> after = common::ReadFile(path);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(*after, *before);
}

TEST(PrivateKey, LoadFileRefusesGroupOrOtherReadableFile) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  const std::string path = dir.path() + "/vault.key";
  absl::StatusOr<PrivateKey> key = PrivateKey::Generate();
  ASSERT_TRUE(key.ok()) << key.status();
  ASSERT_TRUE(key->SaveNewFile(path).ok());
  ASSERT_EQ(chmod(path.c_str(), 0644), 0);

  absl::Status status = PrivateKey::LoadFile(path).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(status.message().find(path), absl::string_view::npos) << status;
  EXPECT_NE(status.message().find("0644"), absl::string_view::npos) << status;
}

TEST(PrivateKey, LoadFileMissingIsNotFound) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  EXPECT_EQ(PrivateKey::LoadFile(dir.path() + "/absent.key").status().code(),
            absl::StatusCode::kNotFound);
}

TEST(PrivateKey, Rfc8032TestVector1) {
  absl::StatusOr<PrivateKey> key = PrivateKey::FromRawSeed(absl::HexStringToBytes(kRfcSeedHex));
  ASSERT_TRUE(key.ok()) << key.status();
  EXPECT_EQ(key->public_key().ToText(), absl::StrCat("ed25519:", kRfcPublicHex));

  absl::StatusOr<std::string> sig = key->Sign("");
  ASSERT_TRUE(sig.ok()) << sig.status();
  EXPECT_EQ(absl::BytesToHexString(*sig), kRfcSignatureHex);

  absl::StatusOr<PublicKey> pub = PublicKey::FromRaw(absl::HexStringToBytes(kRfcPublicHex));
  ASSERT_TRUE(pub.ok()) << pub.status();
  EXPECT_TRUE(pub->Verify("", absl::HexStringToBytes(kRfcSignatureHex)).ok());
}

TEST(PublicKey, TextRoundTripAndShortId) {
  absl::StatusOr<PublicKey> pub = PublicKey::FromText(absl::StrCat("ed25519:", kRfcPublicHex));
  ASSERT_TRUE(pub.ok()) << pub.status();
  EXPECT_EQ(pub->ToText(), absl::StrCat("ed25519:", kRfcPublicHex));
  EXPECT_EQ(pub->ShortId(), "d75a9801");
  EXPECT_EQ(pub->raw(), absl::HexStringToBytes(kRfcPublicHex));
}

TEST(PublicKey, FromTextRefusesMalformedText) {
  const std::string hex(kRfcPublicHex);
  for (const std::string& text : {
           absl::StrCat("ed448:", hex),
           hex,
           absl::StrCat("ED25519:", hex),
           absl::StrCat("ed25519:", hex.substr(2)),
           absl::StrCat("ed25519:", hex, "00"),
           absl::StrCat("ed25519:", "D75A", hex.substr(4)),
           absl::StrCat("ed25519:", "zz", hex.substr(2)),
       }) {
    EXPECT_EQ(PublicKey::FromText(text).status().code(), absl::StatusCode::kInvalidArgument)
        << text;
  }
}

TEST(PublicKey, FromRawRefusesWrongLength) {
  EXPECT_EQ(PublicKey::FromRaw(std::string(31, 'a')).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PublicKey::FromRaw(std::string(33, 'a')).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(PublicKey, FromRawRefusesSmallOrderPoints) {
  const char* kSmallOrder[] = {
      "0000000000000000000000000000000000000000000000000000000000000000",  // order 4
      "0100000000000000000000000000000000000000000000000000000000000000",  // identity
      "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05",  // order 8
      "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a",  // order 8
      "ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",  // order 2
      "edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",  // y = p
      "eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",  // y = p + 1
  };
  for (const char* hex : kSmallOrder) {
    std::string raw = absl::HexStringToBytes(hex);
    EXPECT_EQ(PublicKey::FromRaw(raw).status().code(), absl::StatusCode::kInvalidArgument) << hex;
    raw[31] = static_cast<char>(static_cast<unsigned char>(raw[31]) | 0x80);  // sign bit 1
    EXPECT_EQ(PublicKey::FromRaw(raw).status().code(), absl::StatusCode::kInvalidArgument)
        << hex << " with sign bit";
  }
}

TEST(PublicKey, FromRawRefusesNonCanonicalY) {
  // y = p + 2 .. 2^255 - 1 are >= p but not small-order encodings.
  for (unsigned char low : {0xefu, 0xf0u, 0xffu}) {
    std::string raw(32, '\xff');
    raw[0] = static_cast<char>(low);
    raw[31] = '\x7f';
    absl::Status status = PublicKey::FromRaw(raw).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(status.message().find("canonical"), absl::string_view::npos) << status;
  }
}

TEST(PrivateKey, MoveKeepsKeyUsable) {
  absl::StatusOr<PrivateKey> key = PrivateKey::Generate();
  ASSERT_TRUE(key.ok()) << key.status();
  const PublicKey pub = key->public_key();
  PrivateKey moved = std::move(*key);
  absl::StatusOr<std::string> sig = moved.Sign("x");
  ASSERT_TRUE(sig.ok()) << sig.status();
  EXPECT_TRUE(pub.Verify("x", *sig).ok());
}

}  // namespace
}  // namespace vault::capability
