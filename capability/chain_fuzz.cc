// libFuzzer target: arbitrary bytes as a vault.v1.Chain, verified as a vault would. The chain
// verifier must never crash, hang or accept: a random chain cannot carry a valid signature by the
// trusted root, so every input must be refused with a ChainError. A second pass splices the
// input's bytes into the payload of a validly signed root link (signed by the fuzzer's own
// trusted key) to reach the rules past the signature check.
//
//   cmake -DVAULT_BUILD_FUZZ=ON -DCMAKE_CXX_COMPILER=clang++ ...; build/capability/chain_fuzz
//   -max_total_time=60
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "absl/time/time.h"
#include "capability/chain.h"
#include "capability/principal.h"

namespace {

using vault::capability::ChainError;
using vault::capability::ChainErrorOf;

const vault::capability::PrivateKey& RootKey() {
  static const auto* key = new vault::capability::PrivateKey(
      *vault::capability::PrivateKey::FromRawSeed(std::string(32, '\x07')));
  return *key;
}

vault::capability::VerifyContext Context() {
  vault::capability::VerifyContext ctx;
  const vault::capability::PublicKey root = RootKey().public_key();
  ctx.trusted_root = [root](const vault::capability::PublicKey& k) { return k == root; };
  ctx.now = absl::FromUnixMillis(1'800'000'000'000);
  return ctx;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const vault::capability::VerifyContext ctx = Context();
  vault::capability::ChainVerifier verifier(nullptr);
  const std::string bytes(reinterpret_cast<const char*>(data), size);

  vault::v1::Chain chain;
  if (chain.ParseFromString(bytes)) {
    absl::StatusOr<vault::capability::VerifiedChain> v = verifier.Verify(chain, ctx);
    if (v.ok() || ChainErrorOf(v.status()) == ChainError::kNone) std::abort();
  }

  // The input as a payload signed by the trusted root: past the signature check, every rule
  // still has to hold; acceptance is possible only for a well-formed payload, and then its
  // bytes must be canonical.
  vault::v1::Chain signed_chain;
  vault::v1::SignedLink* link = signed_chain.add_links();
  link->set_payload(bytes);
  absl::StatusOr<std::string> sig =
      RootKey().Sign(std::string(vault::capability::kLinkDomain) + bytes);
  if (!sig.ok()) std::abort();
  link->set_signature(*sig);
  absl::StatusOr<vault::capability::VerifiedChain> v = verifier.Verify(signed_chain, ctx);
  if (v.ok()) {
    absl::StatusOr<vault::v1::LinkPayload> p = vault::capability::ParseLinkPayload(bytes);
    if (!p.ok() || p->issuer() != RootKey().public_key().raw()) std::abort();
  } else if (ChainErrorOf(v.status()) == ChainError::kNone) {
    std::abort();
  }
  return 0;
}
