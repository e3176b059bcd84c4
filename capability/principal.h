// Principal identity: Ed25519 key pairs for people and vaults (design §2).
//
// A principal's id is its 32-byte raw public key, printed as "ed25519:<64 lowercase hex>" and, in
// tables, as the first 8 hex characters. Private keys live in PKCS#8 PEM files of mode 0600.
//
//   VAULT_ASSIGN_OR_RETURN(PrivateKey key, PrivateKey::Generate());
//   VAULT_RETURN_IF_ERROR(key.SaveNewFile("/var/lib/vault/a/vault.key"));
//   VAULT_ASSIGN_OR_RETURN(std::string sig, key.Sign(receipt_bytes));
//
//   VAULT_ASSIGN_OR_RETURN(PublicKey peer, PublicKey::FromText(member.public_key()));
//   VAULT_RETURN_IF_ERROR(peer.Verify(receipt_bytes, sig));  // UNAUTHENTICATED if forged
//
// Thread-safety: PublicKey is an immutable value; PrivateKey is immutable after construction. All
// const methods of both may be called concurrently from any number of threads.
#ifndef VAULT_CAPABILITY_PRINCIPAL_H_
#define VAULT_CAPABILITY_PRINCIPAL_H_

#include <cstddef>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace vault::capability {

// A validated Ed25519 public key. Construction refuses non-canonical encodings and the small-order
// points, so every PublicKey can be used as an identity.
class PublicKey {
 public:
  static constexpr size_t kRawSize = 32;
  static constexpr size_t kSignatureSize = 64;
  static constexpr absl::string_view kTextPrefix = "ed25519:";

  // `raw32` is the RFC 8032 encoding. INVALID_ARGUMENT on a wrong length, a non-canonical
  // encoding (y >= 2^255 - 19) or a point of small order.
  static absl::StatusOr<PublicKey> FromRaw(absl::string_view raw32);
  // Parses "ed25519:<64 lowercase hex>". INVALID_ARGUMENT on any other form.
  static absl::StatusOr<PublicKey> FromText(absl::string_view text);

  // "ed25519:" + 64 lowercase hex characters.
  std::string ToText() const;
  // The first 8 hex characters, for tables and logs.
  std::string ShortId() const;
  const std::string& raw() const { return raw_; }

  // OK when `signature` is a valid Ed25519 signature of `message` by this key. INVALID_ARGUMENT if
  // the signature is not 64 bytes, UNAUTHENTICATED if it does not verify.
  absl::Status Verify(absl::string_view message, absl::string_view signature) const;

  friend bool operator==(const PublicKey& a, const PublicKey& b) { return a.raw_ == b.raw_; }

 private:
  explicit PublicKey(std::string raw) : raw_(std::move(raw)) {}

  std::string raw_;  // kRawSize bytes
};

// An Ed25519 private key. Move-only; a moved-from PrivateKey may only be destroyed or assigned to.
class PrivateKey {
 public:
  static constexpr size_t kSeedSize = 32;

  static absl::StatusOr<PrivateKey> Generate();
  // The 32-byte RFC 8032 secret seed. INVALID_ARGUMENT on a wrong length.
  static absl::StatusOr<PrivateKey> FromRawSeed(absl::string_view seed32);
  // An unencrypted PKCS#8 PEM ("-----BEGIN PRIVATE KEY-----") holding an Ed25519 key.
  // INVALID_ARGUMENT otherwise.
  static absl::StatusOr<PrivateKey> FromPem(absl::string_view pem);
  // Reads a PEM file written by SaveNewFile. NOT_FOUND when missing; FAILED_PRECONDITION when it is
  // not a regular file or its mode grants any permission to group or other.
  static absl::StatusOr<PrivateKey> LoadFile(const std::string& path);

  PrivateKey(PrivateKey&& other) noexcept;
  PrivateKey& operator=(PrivateKey&& other) noexcept;
  ~PrivateKey();

  // PKCS#8 PEM, unencrypted.
  absl::StatusOr<std::string> ToPem() const;
  // Writes ToPem() to a new file of mode 0600. ALREADY_EXISTS (file untouched) if `path` exists.
  absl::Status SaveNewFile(const std::string& path) const;

  const PublicKey& public_key() const { return public_key_; }
  // A 64-byte Ed25519 signature of `message`.
  absl::StatusOr<std::string> Sign(absl::string_view message) const;

 private:
  struct Impl;  // owns the OpenSSL key

  PrivateKey(std::unique_ptr<Impl> impl, PublicKey public_key);
  // Checks that `impl` holds an Ed25519 key and derives its public key.
  static absl::StatusOr<PrivateKey> FromImpl(std::unique_ptr<Impl> impl);

  std::unique_ptr<Impl> impl_;
  PublicKey public_key_;
};

}  // namespace vault::capability

#endif  // VAULT_CAPABILITY_PRINCIPAL_H_
