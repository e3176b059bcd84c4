// Digests without a crypto library: SHA-256 (FIPS 180-4) and the "sha256:<hex>/<size>" text
// form (DigestOf, DigestToText, ParseDigest in vault_agent.h).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "sdk/cpp/vault_agent.h"

namespace vault::sdk {
namespace {

bool IsLowerHex(absl::string_view s) {
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

// SHA-256 (FIPS 180-4), so that the SDK needs no crypto library: an object put in pieces is
// named by its digest before its first byte is sent.
class Sha256 {
 public:
  void Update(absl::string_view data) {
    total_ += data.size();
    if (buffered_ > 0) {
      size_t take = std::min(data.size(), sizeof block_ - buffered_);
      std::memcpy(block_ + buffered_, data.data(), take);
      buffered_ += take;
      data.remove_prefix(take);
      if (buffered_ < sizeof block_) return;
      Compress(block_);
      buffered_ = 0;
    }
    while (data.size() >= sizeof block_) {
      Compress(reinterpret_cast<const unsigned char*>(data.data()));
      data.remove_prefix(sizeof block_);
    }
    std::memcpy(block_, data.data(), data.size());
    buffered_ = data.size();
  }
  std::string Finish() {
    const uint64_t bits = total_ * 8;
    unsigned char pad[72] = {0x80};
    size_t pad_len = (buffered_ < 56 ? 56 : 120) - buffered_;
    for (int i = 0; i < 8; ++i) pad[pad_len + i] = static_cast<unsigned char>(bits >> (56 - 8 * i));
    Update(absl::string_view(reinterpret_cast<const char*>(pad), pad_len + 8));
    std::string out(32, '\0');
    for (int i = 0; i < 8; ++i) {
      for (int j = 0; j < 4; ++j) out[4 * i + j] = static_cast<char>(h_[i] >> (24 - 8 * j));
    }
    return out;
  }

 private:
  static uint32_t Rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }
  void Compress(const unsigned char* p) {
    static constexpr uint32_t k[64] = {
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
        0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
        0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
        0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
        0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
        0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
        0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
        0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
        0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
        0xc67178f2};
    uint32_t w[64];
    for (int i = 0; i < 16; ++i) {
      w[i] = (uint32_t{p[4 * i]} << 24) | (uint32_t{p[4 * i + 1]} << 16) |
             (uint32_t{p[4 * i + 2]} << 8) | uint32_t{p[4 * i + 3]};
    }
    for (int i = 16; i < 64; ++i) {
      uint32_t s0 = Rotr(w[i - 15], 7) ^ Rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
      uint32_t s1 = Rotr(w[i - 2], 17) ^ Rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
      w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = h_[0], b = h_[1], c = h_[2], d = h_[3], e = h_[4], f = h_[5], g = h_[6], h = h_[7];
    for (int i = 0; i < 64; ++i) {
      uint32_t t1 =
          h + (Rotr(e, 6) ^ Rotr(e, 11) ^ Rotr(e, 25)) + ((e & f) ^ (~e & g)) + k[i] + w[i];
      uint32_t t2 = (Rotr(a, 2) ^ Rotr(a, 13) ^ Rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
      h = g;
      g = f;
      f = e;
      e = d + t1;
      d = c;
      c = b;
      b = a;
      a = t1 + t2;
    }
    h_[0] += a;
    h_[1] += b;
    h_[2] += c;
    h_[3] += d;
    h_[4] += e;
    h_[5] += f;
    h_[6] += g;
    h_[7] += h;
  }

  uint32_t h_[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                    0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  unsigned char block_[64];
  size_t buffered_ = 0;
  uint64_t total_ = 0;
};

}  // namespace

vault::v1::Digest DigestOf(absl::string_view data) {
  Sha256 hash;
  hash.Update(data);
  vault::v1::Digest digest;
  digest.set_sha256(hash.Finish());
  digest.set_size(data.size());
  return digest;
}

std::string DigestToText(const vault::v1::Digest& digest) {
  return absl::StrCat("sha256:", absl::BytesToHexString(digest.sha256()), "/", digest.size());
}

absl::StatusOr<vault::v1::Digest> ParseDigest(absl::string_view text) {
  auto invalid = [&] {
    return absl::InvalidArgumentError(absl::StrCat(
        "not a digest (expected \"sha256:<64 lowercase hex>/<size>\"): \"", text, "\""));
  };
  absl::string_view rest = text;
  if (!absl::ConsumePrefix(&rest, "sha256:")) return invalid();
  size_t slash = rest.find('/');
  if (slash != 64) return invalid();
  absl::string_view hex = rest.substr(0, 64);
  absl::string_view size = rest.substr(65);
  if (!IsLowerHex(hex) || size.empty() || (size.size() > 1 && size[0] == '0')) return invalid();
  for (char c : size) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return invalid();
  }
  uint64_t n;
  if (!absl::SimpleAtoi(size, &n)) return invalid();  // overflow
  vault::v1::Digest digest;
  digest.set_sha256(absl::HexStringToBytes(hex));
  digest.set_size(n);
  return digest;
}

}  // namespace vault::sdk
