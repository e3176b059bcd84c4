#include "node/tls_material.h"

#include <openssl/asn1.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>

#include <climits>
#include <cstdint>
#include <memory>

#include "absl/strings/str_cat.h"
#include "common/random.h"
#include "common/status_macros.h"

namespace vault::node {
namespace {

// Every OpenSSL object is owned by a unique_ptr that calls its free function.
template <auto kFree>
struct OpenSslDeleter {
  template <typename T>
  void operator()(T* p) const {
    kFree(p);
  }
};
void FreeOpenSslBytes(unsigned char* p) { OPENSSL_free(p); }  // OPENSSL_free is a macro.

using Asn1IntegerPtr = std::unique_ptr<ASN1_INTEGER, OpenSslDeleter<ASN1_INTEGER_free>>;
using BignumPtr = std::unique_ptr<BIGNUM, OpenSslDeleter<BN_free>>;
using BioPtr = std::unique_ptr<BIO, OpenSslDeleter<BIO_free>>;
using EvpPkeyCtxPtr = std::unique_ptr<EVP_PKEY_CTX, OpenSslDeleter<EVP_PKEY_CTX_free>>;
using EvpPkeyPtr = std::unique_ptr<EVP_PKEY, OpenSslDeleter<EVP_PKEY_free>>;
using OpenSslBytesPtr = std::unique_ptr<unsigned char, OpenSslDeleter<FreeOpenSslBytes>>;
using X509ExtensionPtr = std::unique_ptr<X509_EXTENSION, OpenSslDeleter<X509_EXTENSION_free>>;
using X509Ptr = std::unique_ptr<X509, OpenSslDeleter<X509_free>>;
using X509StoreCtxPtr = std::unique_ptr<X509_STORE_CTX, OpenSslDeleter<X509_STORE_CTX_free>>;
using X509StorePtr = std::unique_ptr<X509_STORE, OpenSslDeleter<X509_STORE_free>>;

constexpr absl::Duration kBackdate = absl::Hours(1);
constexpr absl::Duration kMaxValidity = absl::Hours(24 * 366 * 100);
constexpr size_t kSerialBytes = 16;
constexpr size_t kMaxCommonName = 64;  // ub-common-name, RFC 5280
constexpr size_t kMaxMemberName = 63;  // one DNS label

// The edge where the OpenSSL error queue becomes an absl::Status: drains the queue into the
// message so that no stale entry leaks into a later, unrelated failure.
absl::Status OpenSslError(absl::StatusCode code, absl::string_view what) {
  std::string message(what);
  const char* separator = ": ";
  while (unsigned long err = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(err, buf, sizeof(buf));
    absl::StrAppend(&message, separator, buf);
    separator = "; ";
  }
  return absl::Status(code, message);
}

absl::Status Internal(absl::string_view what) {
  return OpenSslError(absl::StatusCode::kInternal, what);
}

absl::Status CheckValidity(absl::Duration validity) {
  if (validity <= absl::ZeroDuration() || validity > kMaxValidity) {
    return absl::InvalidArgumentError(absl::StrCat(
        "certificate validity must be in (0, 100 years], got ", absl::FormatDuration(validity)));
  }
  return absl::OkStatus();
}

absl::Status CheckMemberName(absl::string_view name) {
  if (name.empty() || name.size() > kMaxMemberName) {
    return absl::InvalidArgumentError(
        absl::StrCat("member name must be 1-", kMaxMemberName, " characters, got ", name.size()));
  }
  for (char c : name) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) {
      return absl::InvalidArgumentError(
          absl::StrCat("member name \"", name, "\" may only contain [a-z0-9-]"));
    }
  }
  if (name.front() == '-' || name.back() == '-') {
    return absl::InvalidArgumentError(
        absl::StrCat("member name \"", name, "\" must not start or end with '-'"));
  }
  return absl::OkStatus();
}

absl::StatusOr<BioPtr> ReadOnlyBio(absl::string_view data) {
  if (data.size() > static_cast<size_t>(INT_MAX)) {
    return absl::InvalidArgumentError("PEM input too large");
  }
  BioPtr bio(BIO_new_mem_buf(data.data(), static_cast<int>(data.size())));
  if (bio == nullptr) return Internal("BIO_new_mem_buf");
  return bio;
}

// Refuses encrypted PEM instead of prompting on the terminal for a passphrase.
int NoPassphrase(char* /*buf*/, int /*size*/, int /*rwflag*/, void* /*userdata*/) { return -1; }

absl::StatusOr<X509Ptr> ParseCertificate(absl::string_view pem, absl::string_view what) {
  VAULT_ASSIGN_OR_RETURN(BioPtr bio, ReadOnlyBio(pem));
  X509Ptr cert(PEM_read_bio_X509(bio.get(), nullptr, NoPassphrase, nullptr));
  if (cert == nullptr) {
    return OpenSslError(absl::StatusCode::kInvalidArgument,
                        absl::StrCat(what, " is not a PEM certificate"));
  }
  return cert;
}

absl::StatusOr<EvpPkeyPtr> ParsePrivateKey(absl::string_view pem, absl::string_view what) {
  VAULT_ASSIGN_OR_RETURN(BioPtr bio, ReadOnlyBio(pem));
  EvpPkeyPtr key(PEM_read_bio_PrivateKey(bio.get(), nullptr, NoPassphrase, nullptr));
  if (key == nullptr) {
    return OpenSslError(absl::StatusCode::kInvalidArgument,
                        absl::StrCat(what, " is not an unencrypted PEM private key"));
  }
  return key;
}

absl::StatusOr<EvpPkeyPtr> GenerateP256Key() {
  EvpPkeyCtxPtr ctx(EVP_PKEY_CTX_new_from_name(nullptr, "EC", nullptr));
  if (ctx == nullptr) return Internal("EVP_PKEY_CTX_new_from_name(EC)");
  if (EVP_PKEY_keygen_init(ctx.get()) != 1) return Internal("EVP_PKEY_keygen_init");
  if (EVP_PKEY_CTX_set_group_name(ctx.get(), "P-256") != 1) {
    return Internal("EVP_PKEY_CTX_set_group_name(P-256)");
  }
  EVP_PKEY* key = nullptr;
  if (EVP_PKEY_keygen(ctx.get(), &key) != 1) return Internal("EVP_PKEY_keygen");
  return EvpPkeyPtr(key);
}

absl::StatusOr<std::string> BioContents(BIO* bio) {
  char* data = nullptr;
  long len = BIO_get_mem_data(bio, &data);
  if (len <= 0 || data == nullptr) return Internal("BIO_get_mem_data");
  return std::string(data, static_cast<size_t>(len));
}

absl::StatusOr<std::string> PrivateKeyToPem(EVP_PKEY* key) {
  // A secure-memory BIO: the PEM is cleansed from OpenSSL's buffer when the BIO is freed.
  BioPtr bio(BIO_new(BIO_s_secmem()));
  if (bio == nullptr) return Internal("BIO_new");
  if (PEM_write_bio_PKCS8PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr) != 1) {
    return Internal("PEM_write_bio_PKCS8PrivateKey");
  }
  return BioContents(bio.get());
}

absl::StatusOr<std::string> CertificateToPem(X509* cert) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (bio == nullptr) return Internal("BIO_new");
  if (PEM_write_bio_X509(bio.get(), cert) != 1) return Internal("PEM_write_bio_X509");
  return BioContents(bio.get());
}

// A v3 certificate for `key` with a random 128-bit serial, subject CN = `common_name`, valid from
// now - kBackdate to now + `validity`. Issuer, extensions and signature are left to the caller.
absl::StatusOr<X509Ptr> NewCertificate(EVP_PKEY* key, absl::string_view common_name,
                                       absl::Duration validity) {
  X509Ptr cert(X509_new());
  if (cert == nullptr) return Internal("X509_new");
  if (X509_set_version(cert.get(), X509_VERSION_3) != 1) return Internal("X509_set_version");

  VAULT_ASSIGN_OR_RETURN(std::string serial_bytes, common::RandomBytes(kSerialBytes));
  BignumPtr serial_bn(BN_bin2bn(reinterpret_cast<const unsigned char*>(serial_bytes.data()),
                                static_cast<int>(serial_bytes.size()), nullptr));
  if (serial_bn == nullptr) return Internal("BN_bin2bn");
  Asn1IntegerPtr serial(BN_to_ASN1_INTEGER(serial_bn.get(), nullptr));
  if (serial == nullptr) return Internal("BN_to_ASN1_INTEGER");
  if (X509_set_serialNumber(cert.get(), serial.get()) != 1) {
    return Internal("X509_set_serialNumber");
  }

  if (X509_gmtime_adj(X509_getm_notBefore(cert.get()), -absl::ToInt64Seconds(kBackdate)) ==
          nullptr ||
      X509_gmtime_adj(X509_getm_notAfter(cert.get()), absl::ToInt64Seconds(validity)) == nullptr) {
    return Internal("X509_gmtime_adj");
  }

  X509_NAME* subject = X509_get_subject_name(cert.get());
  if (X509_NAME_add_entry_by_NID(subject, NID_commonName, MBSTRING_UTF8,
                                 reinterpret_cast<const unsigned char*>(common_name.data()),
                                 static_cast<int>(common_name.size()), -1, 0) != 1) {
    return OpenSslError(absl::StatusCode::kInvalidArgument,
                        absl::StrCat("invalid common name \"", common_name, "\""));
  }
  if (X509_set_pubkey(cert.get(), key) != 1) return Internal("X509_set_pubkey");
  return cert;
}

// Adds one extension in OpenSSL's configuration syntax ("critical,CA:TRUE"). `issuer` supplies
// the authorityKeyIdentifier and may be `cert` itself.
absl::Status AddExtension(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509ExtensionPtr ext(X509V3_EXT_conf_nid(nullptr, &ctx, nid, value));
  if (ext == nullptr) return Internal(absl::StrCat("X509V3_EXT_conf_nid(", OBJ_nid2sn(nid), ")"));
  if (X509_add_ext(cert, ext.get(), -1) != 1) return Internal("X509_add_ext");
  return absl::OkStatus();
}

absl::StatusOr<KeyAndCert> SignAndEncode(X509* cert, EVP_PKEY* signer, EVP_PKEY* subject_key) {
  if (X509_sign(cert, signer, EVP_sha256()) <= 0) return Internal("X509_sign");
  KeyAndCert out;
  VAULT_ASSIGN_OR_RETURN(out.key_pem, PrivateKeyToPem(subject_key));
  VAULT_ASSIGN_OR_RETURN(out.cert_pem, CertificateToPem(cert));
  return out;
}

}  // namespace

absl::StatusOr<KeyAndCert> CreateFederationCa(absl::string_view federation_name,
                                              absl::Duration validity) {
  if (federation_name.empty() || federation_name.size() > kMaxCommonName) {
    return absl::InvalidArgumentError(absl::StrCat("federation name must be 1-", kMaxCommonName,
                                                   " bytes, got ", federation_name.size()));
  }
  VAULT_RETURN_IF_ERROR(CheckValidity(validity));
  VAULT_ASSIGN_OR_RETURN(EvpPkeyPtr key, GenerateP256Key());
  VAULT_ASSIGN_OR_RETURN(X509Ptr cert, NewCertificate(key.get(), federation_name, validity));
  if (X509_set_issuer_name(cert.get(), X509_get_subject_name(cert.get())) != 1) {
    return Internal("X509_set_issuer_name");
  }
  // subjectKeyIdentifier first: the self-referencing authorityKeyIdentifier is computed from it.
  VAULT_RETURN_IF_ERROR(
      AddExtension(cert.get(), cert.get(), NID_basic_constraints, "critical,CA:TRUE"));
  VAULT_RETURN_IF_ERROR(
      AddExtension(cert.get(), cert.get(), NID_key_usage, "critical,keyCertSign,cRLSign"));
  VAULT_RETURN_IF_ERROR(AddExtension(cert.get(), cert.get(), NID_subject_key_identifier, "hash"));
  VAULT_RETURN_IF_ERROR(
      AddExtension(cert.get(), cert.get(), NID_authority_key_identifier, "keyid:always"));
  return SignAndEncode(cert.get(), key.get(), key.get());
}

absl::StatusOr<KeyAndCert> IssueMemberCert(const KeyAndCert& ca, absl::string_view member_name,
                                           absl::Duration validity) {
  VAULT_RETURN_IF_ERROR(CheckMemberName(member_name));
  VAULT_RETURN_IF_ERROR(CheckValidity(validity));
  VAULT_ASSIGN_OR_RETURN(X509Ptr ca_cert, ParseCertificate(ca.cert_pem, "CA certificate"));
  VAULT_ASSIGN_OR_RETURN(EvpPkeyPtr ca_key, ParsePrivateKey(ca.key_pem, "CA key"));
  if (X509_check_private_key(ca_cert.get(), ca_key.get()) != 1) {
    return OpenSslError(absl::StatusCode::kInvalidArgument,
                        "CA key does not match the CA certificate");
  }
  if (X509_check_ca(ca_cert.get()) == 0) {
    return absl::InvalidArgumentError("CA certificate is not a CA (basicConstraints CA:FALSE)");
  }

  VAULT_ASSIGN_OR_RETURN(EvpPkeyPtr key, GenerateP256Key());
  VAULT_ASSIGN_OR_RETURN(X509Ptr cert, NewCertificate(key.get(), member_name, validity));
  if (X509_set_issuer_name(cert.get(), X509_get_subject_name(ca_cert.get())) != 1) {
    return Internal("X509_set_issuer_name");
  }
  // The name was checked to be [a-z0-9-], so it cannot inject configuration syntax.
  const std::string san = absl::StrCat("DNS:", member_name);
  X509* issuer = ca_cert.get();
  VAULT_RETURN_IF_ERROR(
      AddExtension(cert.get(), issuer, NID_basic_constraints, "critical,CA:FALSE"));
  VAULT_RETURN_IF_ERROR(
      AddExtension(cert.get(), issuer, NID_key_usage, "critical,digitalSignature,keyEncipherment"));
  VAULT_RETURN_IF_ERROR(
      AddExtension(cert.get(), issuer, NID_ext_key_usage, "serverAuth,clientAuth"));
  VAULT_RETURN_IF_ERROR(AddExtension(cert.get(), issuer, NID_subject_alt_name, san.c_str()));
  VAULT_RETURN_IF_ERROR(AddExtension(cert.get(), issuer, NID_subject_key_identifier, "hash"));
  VAULT_RETURN_IF_ERROR(
      AddExtension(cert.get(), issuer, NID_authority_key_identifier, "keyid:always"));
  return SignAndEncode(cert.get(), ca_key.get(), key.get());
}

absl::StatusOr<std::string> CertificateCommonName(absl::string_view cert_pem) {
  VAULT_ASSIGN_OR_RETURN(X509Ptr cert, ParseCertificate(cert_pem, "certificate"));
  X509_NAME* subject = X509_get_subject_name(cert.get());
  int index = X509_NAME_get_index_by_NID(subject, NID_commonName, -1);
  if (index < 0) return absl::NotFoundError("certificate subject has no common name");
  ASN1_STRING* data = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(subject, index));
  unsigned char* utf8 = nullptr;
  int len = ASN1_STRING_to_UTF8(&utf8, data);
  if (len < 0) {
    return OpenSslError(absl::StatusCode::kInvalidArgument, "certificate common name");
  }
  OpenSslBytesPtr owned(utf8);
  return std::string(reinterpret_cast<const char*>(utf8), static_cast<size_t>(len));
}

absl::Status VerifyIssuedBy(absl::string_view cert_pem, absl::string_view ca_pem) {
  VAULT_ASSIGN_OR_RETURN(X509Ptr cert, ParseCertificate(cert_pem, "certificate"));
  VAULT_ASSIGN_OR_RETURN(X509Ptr ca, ParseCertificate(ca_pem, "CA certificate"));
  X509StorePtr store(X509_STORE_new());
  if (store == nullptr) return Internal("X509_STORE_new");
  if (X509_STORE_add_cert(store.get(), ca.get()) != 1) return Internal("X509_STORE_add_cert");
  X509StoreCtxPtr ctx(X509_STORE_CTX_new());
  if (ctx == nullptr) return Internal("X509_STORE_CTX_new");
  if (X509_STORE_CTX_init(ctx.get(), store.get(), cert.get(), nullptr) != 1) {
    return Internal("X509_STORE_CTX_init");
  }
  if (X509_verify_cert(ctx.get()) != 1) {
    const int err = X509_STORE_CTX_get_error(ctx.get());
    return OpenSslError(absl::StatusCode::kUnauthenticated,
                        absl::StrCat("certificate not issued by the federation CA: ",
                                     X509_verify_cert_error_string(err)));
  }
  return absl::OkStatus();
}

}  // namespace vault::node
