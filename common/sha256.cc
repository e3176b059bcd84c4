#include "common/sha256.h"

#include <openssl/evp.h>

#include <cstdlib>

namespace vault::common {

struct Sha256::Ctx {
  struct Free {
    void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
  };
  std::unique_ptr<EVP_MD_CTX, Free> md;
};

namespace {

const EVP_MD* Sha256Md() {
  static const EVP_MD* md = EVP_MD_fetch(nullptr, "SHA256", nullptr);
  if (md == nullptr) std::abort();  // no SHA-256 provider: OpenSSL is broken
  return md;
}

void InitOrDie(EVP_MD_CTX* c) {
  if (EVP_DigestInit_ex(c, Sha256Md(), nullptr) != 1) std::abort();
}

}  // namespace

Sha256::Sha256() : ctx_(new Ctx{std::unique_ptr<EVP_MD_CTX, Ctx::Free>(EVP_MD_CTX_new())}) {
  if (ctx_->md == nullptr) std::abort();
  InitOrDie(ctx_->md.get());
}
Sha256::~Sha256() = default;
Sha256::Sha256(Sha256&&) noexcept = default;
Sha256& Sha256::operator=(Sha256&&) noexcept = default;

void Sha256::Update(absl::string_view data) {
  if (EVP_DigestUpdate(ctx_->md.get(), data.data(), data.size()) != 1) std::abort();
}

void Sha256::FinishInto(unsigned char out[kSha256Bytes]) {
  unsigned int len = 0;
  if (EVP_DigestFinal_ex(ctx_->md.get(), out, &len) != 1 || len != kSha256Bytes) std::abort();
  InitOrDie(ctx_->md.get());
}

std::string Sha256::Finish() {
  std::string out(kSha256Bytes, '\0');
  FinishInto(reinterpret_cast<unsigned char*>(out.data()));
  return out;
}

void Sha256::HashInto(absl::string_view data, unsigned char out[kSha256Bytes]) {
  unsigned int len = 0;
  if (EVP_Digest(data.data(), data.size(), out, &len, Sha256Md(), nullptr) != 1 ||
      len != kSha256Bytes) {
    std::abort();
  }
}

std::string Sha256::Hash(absl::string_view data) {
  std::string out(kSha256Bytes, '\0');
  HashInto(data, reinterpret_cast<unsigned char*>(out.data()));
  return out;
}

std::string Sha256::HashParts(std::initializer_list<absl::string_view> parts) {
  Sha256 h;
  for (absl::string_view p : parts) h.Update(p);
  return h.Finish();
}

}  // namespace vault::common
