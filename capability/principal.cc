#include "capability/principal.h"

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <sys/stat.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/file_util.h"
#include "common/status_macros.h"

namespace vault::capability {
namespace {

// Every OpenSSL object is owned by a unique_ptr that calls its free function.
template <auto kFree>
struct OpenSslDeleter {
  template <typename T>
  void operator()(T* p) const {
    kFree(p);
  }
};
using BioPtr = std::unique_ptr<BIO, OpenSslDeleter<BIO_free>>;
using EvpPkeyPtr = std::unique_ptr<EVP_PKEY, OpenSslDeleter<EVP_PKEY_free>>;
using EvpPkeyCtxPtr = std::unique_ptr<EVP_PKEY_CTX, OpenSslDeleter<EVP_PKEY_CTX_free>>;
using EvpMdCtxPtr = std::unique_ptr<EVP_MD_CTX, OpenSslDeleter<EVP_MD_CTX_free>>;
using Pkcs8Ptr = std::unique_ptr<PKCS8_PRIV_KEY_INFO, OpenSslDeleter<PKCS8_PRIV_KEY_INFO_free>>;

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

const unsigned char* Bytes(absl::string_view s) {
  return reinterpret_cast<const unsigned char*>(s.data());
}

absl::StatusOr<BioPtr> ReadOnlyBio(absl::string_view data) {
  if (data.size() > static_cast<size_t>(INT_MAX)) {
    return absl::InvalidArgumentError("PEM input too large");
  }
  BioPtr bio(BIO_new_mem_buf(data.data(), static_cast<int>(data.size())));
  if (bio == nullptr) return OpenSslError(absl::StatusCode::kInternal, "BIO_new_mem_buf");
  return bio;
}

// The y coordinates (sign bit cleared, little-endian hex) of the 8 points of order 1, 2, 4 and 8,
// plus the non-canonical encodings y = p and y = p + 1 of y = 0 and y = 1. With the sign bit 0 or
// 1 they cover every small-order encoding (as in libsodium's blocklist).
constexpr absl::string_view kSmallOrderY[] = {
    // y = 0: (+-sqrt(-1), 0), order 4.
    "0000000000000000000000000000000000000000000000000000000000000000",
    // y = 1: the identity (0, 1), order 1.
    "0100000000000000000000000000000000000000000000000000000000000000",
    // Order 8.
    "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05",
    // Order 8.
    "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a",
    // y = p - 1 = -1: (0, -1), order 2.
    "ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
    // y = p (non-canonical 0).
    "edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
    // y = p + 1 (non-canonical 1).
    "eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
};

bool IsSmallOrder(absl::string_view raw32) {
  std::string y(raw32);
  y[31] = static_cast<char>(static_cast<unsigned char>(y[31]) & 0x7f);
  const std::string hex = absl::BytesToHexString(y);
  for (absl::string_view small : kSmallOrderY) {
    if (hex == small) return true;
  }
  return false;
}

// True when the encoded y (the low 255 bits, little-endian) is >= p = 2^255 - 19, whose encoding
// is ed ff .. ff 7f.
bool IsNonCanonical(absl::string_view raw32) {
  const unsigned char* b = Bytes(raw32);
  if ((b[31] & 0x7f) != 0x7f) return false;
  for (int i = 30; i >= 1; --i) {
    if (b[i] != 0xff) return false;
  }
  return b[0] >= 0xed;
}

// True when the encoding decodes to a point of the curve -x^2 + y^2 = 1 + d x^2 y^2 (RFC 8032
// §5.1.3): x^2 = (y^2 - 1) / (d y^2 + 1) must be a square mod p, and x = 0 must not carry the sign
// bit. OpenSSL would only find out at verification time; an identity must be a point. The square
// test is a Jacobi symbol of (y^2 - 1)(d y^2 + 1) (the same residuosity as the quotient), so no
// modular exponentiation is needed.
bool IsOnCurve(absl::string_view raw32) {
  unsigned char be[32];
  const unsigned char* b = Bytes(raw32);
  for (int i = 0; i < 32; ++i) be[i] = b[31 - i];
  const bool x_sign = (be[0] & 0x80) != 0;
  be[0] &= 0x7f;
  using Bn = std::unique_ptr<BIGNUM, decltype(&BN_free)>;
  auto bn = [] { return Bn(BN_new(), BN_free); };
  // p = 2^255 - 19 and d = -121665 / 121666 mod p, computed once.
  static const BIGNUM* const kP = [] {
    BIGNUM* p = BN_new();
    BN_set_bit(p, 255);
    BN_sub_word(p, 19);
    return p;
  }();
  static const BIGNUM* const kD = [] {
    BN_CTX* ctx = BN_CTX_new();
    BIGNUM* inv = BN_new();
    BIGNUM* d = BN_new();
    BN_set_word(inv, 121666);
    BN_mod_inverse(inv, inv, kP, ctx);
    BN_set_word(d, 121665);
    BN_mod_mul(d, d, inv, kP, ctx);
    BN_sub(d, kP, d);
    BN_free(inv);
    BN_CTX_free(ctx);
    return d;
  }();
  std::unique_ptr<BN_CTX, decltype(&BN_CTX_free)> ctx(BN_CTX_new(), BN_CTX_free);
  Bn y = bn(), y2 = bn(), num = bn(), den = bn(), w = bn();
  if (ctx == nullptr || y == nullptr || y2 == nullptr || num == nullptr || den == nullptr ||
      w == nullptr || BN_bin2bn(be, 32, y.get()) == nullptr) {
    return false;
  }
  BN_mod_sqr(y2.get(), y.get(), kP, ctx.get());                    // y^2
  BN_mod_sub(num.get(), y2.get(), BN_value_one(), kP, ctx.get());  // y^2 - 1
  BN_mod_mul(den.get(), kD, y2.get(), kP, ctx.get());
  BN_mod_add(den.get(), den.get(), BN_value_one(), kP, ctx.get());  // d y^2 + 1
  if (BN_is_zero(num.get())) return !x_sign;                        // x = 0
  if (BN_is_zero(den.get())) return false;
  BN_mod_mul(w.get(), num.get(), den.get(), kP, ctx.get());
  return BN_kronecker(w.get(), kP, ctx.get()) == 1;
}

bool IsLowerHex(absl::string_view s) {
  for (char c : s) {
    if (!absl::ascii_isdigit(c) && !(c >= 'a' && c <= 'f')) return false;
  }
  return true;
}

}  // namespace

// --- PublicKey ---------------------------------------------------------------------------------

namespace {

// Keys that passed every check: identities repeat (the same principals and vaults sign every
// chain), and decoding the point costs as much as a fifth of a signature verification. Bounded;
// cleared when full.
class ValidatedKeys {
 public:
  bool Contains(absl::string_view raw) {
    absl::MutexLock lock(&mu_);
    return keys_.contains(raw);
  }
  void Insert(absl::string_view raw) {
    absl::MutexLock lock(&mu_);
    if (keys_.size() >= 4096) keys_.clear();
    keys_.emplace(raw);
  }

 private:
  absl::Mutex mu_;
  absl::flat_hash_set<std::string> keys_ ABSL_GUARDED_BY(mu_);
};

ValidatedKeys& Validated() {
  static ValidatedKeys* keys = new ValidatedKeys();
  return *keys;
}

}  // namespace

absl::StatusOr<PublicKey> PublicKey::FromRaw(absl::string_view raw32) {
  if (raw32.size() == kRawSize && Validated().Contains(raw32)) {
    return PublicKey(std::string(raw32));
  }
  if (raw32.size() != kRawSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("Ed25519 public key must be ", kRawSize, " bytes, got ", raw32.size()));
  }
  if (IsSmallOrder(raw32)) {
    return absl::InvalidArgumentError(
        absl::StrCat("Ed25519 public key is a small-order point: ", absl::BytesToHexString(raw32)));
  }
  if (IsNonCanonical(raw32)) {
    return absl::InvalidArgumentError(
        absl::StrCat("Ed25519 public key is not canonically encoded (y >= 2^255-19): ",
                     absl::BytesToHexString(raw32)));
  }
  if (!IsOnCurve(raw32)) {
    return absl::InvalidArgumentError(
        absl::StrCat("Ed25519 public key is not a curve point: ", absl::BytesToHexString(raw32)));
  }
  Validated().Insert(raw32);
  return PublicKey(std::string(raw32));
}

absl::StatusOr<PublicKey> PublicKey::FromText(absl::string_view text) {
  if (!absl::StartsWith(text, kTextPrefix)) {
    return absl::InvalidArgumentError(
        absl::StrCat("public key must start with \"", kTextPrefix, "\": \"", text, "\""));
  }
  absl::string_view hex = text.substr(kTextPrefix.size());
  if (hex.size() != 2 * kRawSize) {
    return absl::InvalidArgumentError(absl::StrCat("public key must have ", 2 * kRawSize,
                                                   " hex characters after \"", kTextPrefix,
                                                   "\", got ", hex.size()));
  }
  if (!IsLowerHex(hex)) {
    return absl::InvalidArgumentError(absl::StrCat("public key must be lowercase hex after \"",
                                                   kTextPrefix, "\": \"", text, "\""));
  }
  return FromRaw(absl::HexStringToBytes(hex));
}

std::string PublicKey::ToText() const {
  return absl::StrCat(kTextPrefix, absl::BytesToHexString(raw_));
}

std::string PublicKey::ShortId() const { return absl::BytesToHexString(raw_.substr(0, 4)); }

absl::Status PublicKey::Verify(absl::string_view message, absl::string_view signature) const {
  if (signature.size() != kSignatureSize) {
    return absl::InvalidArgumentError(absl::StrCat("Ed25519 signature must be ", kSignatureSize,
                                                   " bytes, got ", signature.size()));
  }
  EvpPkeyPtr pkey(EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, nullptr, Bytes(raw_), raw_.size()));
  if (pkey == nullptr) {
    return OpenSslError(absl::StatusCode::kInternal, "EVP_PKEY_new_raw_public_key");
  }
  EvpMdCtxPtr ctx(EVP_MD_CTX_new());
  if (ctx == nullptr) return OpenSslError(absl::StatusCode::kInternal, "EVP_MD_CTX_new");
  if (EVP_DigestVerifyInit(ctx.get(), nullptr, nullptr, nullptr, pkey.get()) != 1) {
    return OpenSslError(absl::StatusCode::kInternal, "EVP_DigestVerifyInit");
  }
  if (EVP_DigestVerify(ctx.get(), Bytes(signature), signature.size(), Bytes(message),
                       message.size()) != 1) {
    return OpenSslError(absl::StatusCode::kUnauthenticated,
                        absl::StrCat("Ed25519 signature does not verify for key ", ShortId()));
  }
  return absl::OkStatus();
}

// --- PrivateKey --------------------------------------------------------------------------------

struct PrivateKey::Impl {
  EvpPkeyPtr pkey;
};

PrivateKey::PrivateKey(std::unique_ptr<Impl> impl, PublicKey public_key)
    : impl_(std::move(impl)), public_key_(std::move(public_key)) {}
PrivateKey::PrivateKey(PrivateKey&& other) noexcept = default;
PrivateKey& PrivateKey::operator=(PrivateKey&& other) noexcept = default;
PrivateKey::~PrivateKey() = default;

absl::StatusOr<PrivateKey> PrivateKey::FromImpl(std::unique_ptr<Impl> impl) {
  if (EVP_PKEY_get_id(impl->pkey.get()) != EVP_PKEY_ED25519) {
    return absl::InvalidArgumentError("private key is not an Ed25519 key");
  }
  std::string raw(PublicKey::kRawSize, '\0');
  size_t len = raw.size();
  if (EVP_PKEY_get_raw_public_key(impl->pkey.get(), reinterpret_cast<unsigned char*>(raw.data()),
                                  &len) != 1 ||
      len != raw.size()) {
    return OpenSslError(absl::StatusCode::kInternal, "EVP_PKEY_get_raw_public_key");
  }
  VAULT_ASSIGN_OR_RETURN(PublicKey public_key, PublicKey::FromRaw(raw));
  return PrivateKey(std::move(impl), std::move(public_key));
}

absl::StatusOr<PrivateKey> PrivateKey::Generate() {
  EvpPkeyCtxPtr ctx(EVP_PKEY_CTX_new_id(EVP_PKEY_ED25519, nullptr));
  if (ctx == nullptr) return OpenSslError(absl::StatusCode::kInternal, "EVP_PKEY_CTX_new_id");
  if (EVP_PKEY_keygen_init(ctx.get()) != 1) {
    return OpenSslError(absl::StatusCode::kInternal, "EVP_PKEY_keygen_init");
  }
  EVP_PKEY* pkey = nullptr;
  if (EVP_PKEY_keygen(ctx.get(), &pkey) != 1) {
    return OpenSslError(absl::StatusCode::kInternal, "EVP_PKEY_keygen");
  }
  auto impl = std::make_unique<Impl>();
  impl->pkey.reset(pkey);
  return FromImpl(std::move(impl));
}

absl::StatusOr<PrivateKey> PrivateKey::FromRawSeed(absl::string_view seed32) {
  if (seed32.size() != kSeedSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("Ed25519 seed must be ", kSeedSize, " bytes, got ", seed32.size()));
  }
  auto impl = std::make_unique<Impl>();
  impl->pkey.reset(
      EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, nullptr, Bytes(seed32), seed32.size()));
  if (impl->pkey == nullptr) {
    return OpenSslError(absl::StatusCode::kInternal, "EVP_PKEY_new_raw_private_key");
  }
  return FromImpl(std::move(impl));
}

absl::StatusOr<PrivateKey> PrivateKey::FromPem(absl::string_view pem) {
  VAULT_ASSIGN_OR_RETURN(BioPtr bio, ReadOnlyBio(pem));
  // Only unencrypted PKCS#8 ("PRIVATE KEY") is read, so OpenSSL never asks for a passphrase.
  Pkcs8Ptr p8(PEM_read_bio_PKCS8_PRIV_KEY_INFO(bio.get(), nullptr, nullptr, nullptr));
  if (p8 == nullptr) {
    return OpenSslError(absl::StatusCode::kInvalidArgument,
                        "not an unencrypted PKCS#8 PEM private key (-----BEGIN PRIVATE KEY-----)");
  }
  auto impl = std::make_unique<Impl>();
  impl->pkey.reset(EVP_PKCS82PKEY(p8.get()));
  if (impl->pkey == nullptr) {
    return OpenSslError(absl::StatusCode::kInvalidArgument, "cannot decode PKCS#8 private key");
  }
  return FromImpl(std::move(impl));
}

absl::StatusOr<PrivateKey> PrivateKey::LoadFile(const std::string& path) {
  VAULT_ASSIGN_OR_RETURN(std::string pem, common::ReadPrivateFile(path));
  absl::StatusOr<PrivateKey> key = FromPem(pem);
  if (!key.ok()) {
    return absl::Status(key.status().code(),
                        absl::StrCat("private key file ", path, ": ", key.status().message()));
  }
  return key;
}

absl::StatusOr<std::string> PrivateKey::ToPem() const {
  if (impl_ == nullptr) return absl::FailedPreconditionError("PrivateKey was moved from");
  // A secure-memory BIO: the PEM is cleansed from OpenSSL's buffer when the BIO is freed.
  BioPtr bio(BIO_new(BIO_s_secmem()));
  if (bio == nullptr) return OpenSslError(absl::StatusCode::kInternal, "BIO_new");
  if (PEM_write_bio_PKCS8PrivateKey(bio.get(), impl_->pkey.get(), nullptr, nullptr, 0, nullptr,
                                    nullptr) != 1) {
    return OpenSslError(absl::StatusCode::kInternal, "PEM_write_bio_PKCS8PrivateKey");
  }
  char* data = nullptr;
  long len = BIO_get_mem_data(bio.get(), &data);
  if (len <= 0 || data == nullptr) {
    return OpenSslError(absl::StatusCode::kInternal, "BIO_get_mem_data");
  }
  return std::string(data, static_cast<size_t>(len));
}

absl::Status PrivateKey::SaveNewFile(const std::string& path) const {
  VAULT_ASSIGN_OR_RETURN(std::string pem, ToPem());
  return common::WriteNewFile(path, pem, 0600);
}

absl::StatusOr<std::string> PrivateKey::Sign(absl::string_view message) const {
  if (impl_ == nullptr) return absl::FailedPreconditionError("PrivateKey was moved from");
  EvpMdCtxPtr ctx(EVP_MD_CTX_new());
  if (ctx == nullptr) return OpenSslError(absl::StatusCode::kInternal, "EVP_MD_CTX_new");
  if (EVP_DigestSignInit(ctx.get(), nullptr, nullptr, nullptr, impl_->pkey.get()) != 1) {
    return OpenSslError(absl::StatusCode::kInternal, "EVP_DigestSignInit");
  }
  std::string signature(PublicKey::kSignatureSize, '\0');
  size_t len = signature.size();
  if (EVP_DigestSign(ctx.get(), reinterpret_cast<unsigned char*>(signature.data()), &len,
                     Bytes(message), message.size()) != 1 ||
      len != signature.size()) {
    return OpenSslError(absl::StatusCode::kInternal, "EVP_DigestSign");
  }
  return signature;
}

}  // namespace vault::capability
