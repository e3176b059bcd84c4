#include "node/tls_material.h"

#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/obj_mac.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <memory>
#include <string>

#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace vault::node {
namespace {

constexpr absl::Duration kYear = absl::Hours(24 * 365);

struct X509Deleter {
  void operator()(X509* p) const { X509_free(p); }
};
struct EvpPkeyDeleter {
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
};
struct GeneralNamesDeleter {
  void operator()(GENERAL_NAMES* p) const { GENERAL_NAMES_free(p); }
};
struct BasicConstraintsDeleter {
  void operator()(BASIC_CONSTRAINTS* p) const { BASIC_CONSTRAINTS_free(p); }
};
using X509Ptr = std::unique_ptr<X509, X509Deleter>;
using EvpPkeyPtr = std::unique_ptr<EVP_PKEY, EvpPkeyDeleter>;

X509Ptr ParseCert(const std::string& pem) {
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new_mem_buf(pem.data(), pem.size()), BIO_free);
  return X509Ptr(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
}

EvpPkeyPtr ParseKey(const std::string& pem) {
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new_mem_buf(pem.data(), pem.size()), BIO_free);
  return EvpPkeyPtr(PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
}

std::string SubjectCn(X509* cert) {
  char buf[256] = {};
  X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, buf, sizeof(buf));
  return buf;
}

std::string IssuerCn(X509* cert) {
  char buf[256] = {};
  X509_NAME_get_text_by_NID(X509_get_issuer_name(cert), NID_commonName, buf, sizeof(buf));
  return buf;
}

// True when the certificate's basicConstraints extension is critical and says CA = `is_ca`.
bool HasCriticalBasicConstraints(X509* cert, bool is_ca) {
  int critical = -1;
  std::unique_ptr<BASIC_CONSTRAINTS, BasicConstraintsDeleter> bc(static_cast<BASIC_CONSTRAINTS*>(
      X509_get_ext_d2i(cert, NID_basic_constraints, &critical, nullptr)));
  return bc != nullptr && critical == 1 && (bc->ca != 0) == is_ca;
}

void ExpectP256KeyMatching(const KeyAndCert& kc, X509* cert) {
  EvpPkeyPtr key = ParseKey(kc.key_pem);
  ASSERT_NE(key, nullptr);
  EXPECT_EQ(EVP_PKEY_get_base_id(key.get()), EVP_PKEY_EC);
  char group[64] = {};
  size_t group_len = 0;
  ASSERT_EQ(EVP_PKEY_get_group_name(key.get(), group, sizeof(group), &group_len), 1);
  EXPECT_STREQ(group, "prime256v1");
  EXPECT_EQ(X509_check_private_key(cert, key.get()), 1);
  EXPECT_EQ(X509_get_signature_nid(cert), NID_ecdsa_with_SHA256);
  EXPECT_EQ(kc.key_pem.rfind("-----BEGIN PRIVATE KEY-----", 0), 0u);
}

TEST(TlsMaterial, CreatesSelfSignedFederationCa) {
  absl::StatusOr<KeyAndCert> ca = CreateFederationCa("acme", 10 * kYear);
  ASSERT_TRUE(ca.ok()) << ca.status();
  X509Ptr cert = ParseCert(ca->cert_pem);
  ASSERT_NE(cert, nullptr);
  EXPECT_EQ(SubjectCn(cert.get()), "acme");
  EXPECT_EQ(IssuerCn(cert.get()), "acme");
  EXPECT_TRUE(HasCriticalBasicConstraints(cert.get(), /*is_ca=*/true));
  EXPECT_NE(X509_get_key_usage(cert.get()) & KU_KEY_CERT_SIGN, 0u);
  EXPECT_NE(X509_get_key_usage(cert.get()) & KU_CRL_SIGN, 0u);
  EXPECT_NE(X509_get0_subject_key_id(cert.get()), nullptr);
  EXPECT_GT(X509_cmp_current_time(X509_get0_notAfter(cert.get())), 0);
  EXPECT_LT(X509_cmp_current_time(X509_get0_notBefore(cert.get())), 0);
  ExpectP256KeyMatching(*ca, cert.get());
  EXPECT_TRUE(VerifyIssuedBy(ca->cert_pem, ca->cert_pem).ok());

  absl::StatusOr<std::string> cn = CertificateCommonName(ca->cert_pem);
  ASSERT_TRUE(cn.ok()) << cn.status();
  EXPECT_EQ(*cn, "acme");
}

TEST(TlsMaterial, CaSerialsAreRandom) {
  absl::StatusOr<KeyAndCert> a = CreateFederationCa("acme", kYear);
  absl::StatusOr<KeyAndCert> b = CreateFederationCa("acme", kYear);
  ASSERT_TRUE(a.ok() && b.ok());
  X509Ptr ca = ParseCert(a->cert_pem);
  X509Ptr cb = ParseCert(b->cert_pem);
  ASSERT_TRUE(ca != nullptr && cb != nullptr);
  EXPECT_NE(ASN1_INTEGER_cmp(X509_get0_serialNumber(ca.get()), X509_get0_serialNumber(cb.get())),
            0);
}

TEST(TlsMaterial, CreateFederationCaRefusesBadArguments) {
  EXPECT_EQ(CreateFederationCa("", kYear).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CreateFederationCa(std::string(65, 'a'), kYear).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CreateFederationCa("acme", absl::ZeroDuration()).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CreateFederationCa("acme", absl::InfiniteDuration()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(TlsMaterial, MemberCertVerifiesAgainstItsCa) {
  absl::StatusOr<KeyAndCert> ca = CreateFederationCa("acme", 10 * kYear);
  ASSERT_TRUE(ca.ok()) << ca.status();
  absl::StatusOr<KeyAndCert> member = IssueMemberCert(*ca, "vault-a", kYear);
  ASSERT_TRUE(member.ok()) << member.status();
  absl::Status status = VerifyIssuedBy(member->cert_pem, ca->cert_pem);
  EXPECT_TRUE(status.ok()) << status;
}

TEST(TlsMaterial, MemberCertDoesNotVerifyAgainstAnotherCa) {
  absl::StatusOr<KeyAndCert> ca = CreateFederationCa("acme", kYear);
  absl::StatusOr<KeyAndCert> other_ca = CreateFederationCa("acme", kYear);  // same name
  ASSERT_TRUE(ca.ok() && other_ca.ok());
  absl::StatusOr<KeyAndCert> member = IssueMemberCert(*ca, "vault-a", kYear);
  ASSERT_TRUE(member.ok()) << member.status();
  absl::Status status = VerifyIssuedBy(member->cert_pem, other_ca->cert_pem);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnauthenticated) << status;
}

TEST(TlsMaterial, MemberCertHasNameUsagesAndKeyIds) {
  absl::StatusOr<KeyAndCert> ca = CreateFederationCa("acme", kYear);
  ASSERT_TRUE(ca.ok()) << ca.status();
  absl::StatusOr<KeyAndCert> member = IssueMemberCert(*ca, "vault-a", kYear);
  ASSERT_TRUE(member.ok()) << member.status();
  X509Ptr cert = ParseCert(member->cert_pem);
  X509Ptr ca_cert = ParseCert(ca->cert_pem);
  ASSERT_TRUE(cert != nullptr && ca_cert != nullptr);

  EXPECT_EQ(SubjectCn(cert.get()), "vault-a");
  EXPECT_EQ(X509_NAME_cmp(X509_get_issuer_name(cert.get()), X509_get_subject_name(ca_cert.get())),
            0);

  std::unique_ptr<GENERAL_NAMES, GeneralNamesDeleter> sans(static_cast<GENERAL_NAMES*>(
      X509_get_ext_d2i(cert.get(), NID_subject_alt_name, nullptr, nullptr)));
  ASSERT_NE(sans, nullptr);
  ASSERT_EQ(sk_GENERAL_NAME_num(sans.get()), 1);
  const GENERAL_NAME* san = sk_GENERAL_NAME_value(sans.get(), 0);
  ASSERT_EQ(san->type, GEN_DNS);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(ASN1_STRING_get0_data(san->d.dNSName)),
                        ASN1_STRING_length(san->d.dNSName)),
            "vault-a");

  EXPECT_TRUE(HasCriticalBasicConstraints(cert.get(), /*is_ca=*/false));
  EXPECT_EQ(X509_check_ca(cert.get()), 0);
  const uint32_t ku = X509_get_key_usage(cert.get());
  EXPECT_NE(ku & KU_DIGITAL_SIGNATURE, 0u);
  EXPECT_NE(ku & KU_KEY_ENCIPHERMENT, 0u);
  EXPECT_EQ(ku & KU_KEY_CERT_SIGN, 0u);
  const uint32_t xku = X509_get_extended_key_usage(cert.get());
  EXPECT_NE(xku & XKU_SSL_SERVER, 0u);
  EXPECT_NE(xku & XKU_SSL_CLIENT, 0u);

  const ASN1_OCTET_STRING* ski = X509_get0_subject_key_id(cert.get());
  const ASN1_OCTET_STRING* aki = X509_get0_authority_key_id(cert.get());
  const ASN1_OCTET_STRING* ca_ski = X509_get0_subject_key_id(ca_cert.get());
  ASSERT_TRUE(ski != nullptr && aki != nullptr && ca_ski != nullptr);
  EXPECT_EQ(ASN1_OCTET_STRING_cmp(aki, ca_ski), 0);
  EXPECT_NE(ASN1_OCTET_STRING_cmp(ski, ca_ski), 0);

  ExpectP256KeyMatching(*member, cert.get());

  absl::StatusOr<std::string> cn = CertificateCommonName(member->cert_pem);
  ASSERT_TRUE(cn.ok()) << cn.status();
  EXPECT_EQ(*cn, "vault-a");
}

TEST(TlsMaterial, InvalidMemberNamesAreRefused) {
  absl::StatusOr<KeyAndCert> ca = CreateFederationCa("acme", kYear);
  ASSERT_TRUE(ca.ok()) << ca.status();
  for (const std::string& name : {
           std::string(""),
           std::string(64, 'a'),
           std::string("-vault"),
           std::string("vault-"),
           std::string("Vault-A"),
           std::string("vault_a"),
           std::string("vault.a"),
           std::string("vault a"),
           std::string("vault-a,DNS:evil"),
           std::string("vault\0a", 7),
       }) {
    EXPECT_EQ(IssueMemberCert(*ca, name, kYear).status().code(), absl::StatusCode::kInvalidArgument)
        << name;
  }
  EXPECT_TRUE(IssueMemberCert(*ca, std::string(63, 'a'), kYear).ok());
  EXPECT_TRUE(IssueMemberCert(*ca, "a", kYear).ok());
  EXPECT_TRUE(IssueMemberCert(*ca, "0-9", kYear).ok());
}

TEST(TlsMaterial, MismatchedCaKeyIsRefused) {
  absl::StatusOr<KeyAndCert> ca = CreateFederationCa("acme", kYear);
  absl::StatusOr<KeyAndCert> other_ca = CreateFederationCa("acme", kYear);
  ASSERT_TRUE(ca.ok() && other_ca.ok());
  const KeyAndCert mixed{other_ca->key_pem, ca->cert_pem};
  absl::Status status = IssueMemberCert(mixed, "vault-a", kYear).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
}

TEST(TlsMaterial, MemberCertCannotActAsCa) {
  absl::StatusOr<KeyAndCert> ca = CreateFederationCa("acme", kYear);
  ASSERT_TRUE(ca.ok()) << ca.status();
  absl::StatusOr<KeyAndCert> member = IssueMemberCert(*ca, "vault-a", kYear);
  ASSERT_TRUE(member.ok()) << member.status();
  EXPECT_EQ(IssueMemberCert(*member, "vault-b", kYear).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(TlsMaterial, UnparsablePemIsInvalidArgument) {
  absl::StatusOr<KeyAndCert> ca = CreateFederationCa("acme", kYear);
  ASSERT_TRUE(ca.ok()) << ca.status();
  EXPECT_EQ(CertificateCommonName("garbage").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(VerifyIssuedBy("garbage", ca->cert_pem).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(VerifyIssuedBy(ca->cert_pem, "garbage").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(IssueMemberCert(KeyAndCert{"garbage", ca->cert_pem}, "vault-a", kYear).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace vault::node
