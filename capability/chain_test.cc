// Adversarial tests of the capability-chain verifier (design §5, capability/chain.h).
//
// The fixture builds valid chains
//
//   link 0  P -DELEGATE-> Q        (P: the trusted root principal, Q: a delegate)
//   link 1  Q -SPAWN->    A        (A: vault-a, the agent's home vault; agent id + code from here)
//   link 2  A -MIGRATE->  B        (hop 1, transfer id, state digest)
//   link 3  B -MIGRATE->  C        (hop 2)
//
// and each test breaks exactly one rule and asserts the exact ChainError, the exact failing link
// index and the exact absl status code. Tests marked `// Regression:` pin a defect this suite found
// (fixed).
#include "capability/chain.h"

#include <openssl/evp.h>
#include <openssl/rand.h>

#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "capability/principal.h"
#include "capability/revocation.h"
#include "common/testing/temp_dir.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "gtest/gtest.h"
#include "storage/database.h"
#include "vault/v1/capability.pb.h"

namespace vault::capability {
namespace {

using vault::v1::Chain;
using vault::v1::Constraints;
using vault::v1::Digest;
using vault::v1::Grant;
using vault::v1::LinkPayload;
using vault::v1::SignedLink;

constexpr uint64_t kGiB = uint64_t{1} << 30;
constexpr char kAgentId[] = "agent-7f3a";

// --- helpers -------------------------------------------------------------------------------------

PrivateKey KeyFromSeed(char seed) {
  absl::StatusOr<PrivateKey> key = PrivateKey::FromRawSeed(std::string(32, seed));
  if (!key.ok()) {
    ADD_FAILURE() << key.status();
    std::abort();
  }
  return std::move(*key);
}

std::string RandomBytes(size_t n) {
  std::string out(n, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(out.data()), static_cast<int>(n)) != 1) {
    std::abort();
  }
  return out;
}

std::string Sha256(absl::string_view data) {
  unsigned char out[32];
  unsigned int len = 0;
  if (EVP_Digest(data.data(), data.size(), out, &len, EVP_sha256(), nullptr) != 1) std::abort();
  return std::string(reinterpret_cast<char*>(out), len);
}

Digest MakeDigest(absl::string_view content) {
  Digest d;
  d.set_sha256(Sha256(content));
  d.set_size(content.size());
  return d;
}

// The deterministic serialization, computed independently of chain.cc.
std::string CanonicalBytes(const google::protobuf::Message& m) {
  std::string out;
  {
    google::protobuf::io::StringOutputStream stream(&out);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    m.SerializeToCodedStream(&coded);
  }
  return out;
}

// A link over `bytes` exactly, signed by `key` (any key, any bytes).
SignedLink SignRaw(absl::string_view bytes, const PrivateKey& key) {
  SignedLink link;
  link.set_payload(std::string(bytes));
  absl::StatusOr<std::string> sig = key.Sign(absl::StrCat(kLinkDomain, bytes));
  if (!sig.ok()) std::abort();
  link.set_signature(*sig);
  return link;
}

Grant PathGrant(Grant::Kind kind, absl::string_view path) {
  Grant g;
  g.set_kind(kind);
  g.set_path(std::string(path));
  return g;
}
Grant Read(absl::string_view path) { return PathGrant(Grant::READ, path); }
Grant Write(absl::string_view path) { return PathGrant(Grant::WRITE, path); }
Grant Network(absl::string_view host, uint32_t port) {
  Grant g;
  g.set_kind(Grant::NETWORK);
  g.set_host(std::string(host));
  g.set_port(port);
  return g;
}
Grant Migrate(std::vector<std::string> vaults) {
  Grant g;
  g.set_kind(Grant::MIGRATE);
  for (std::string& v : vaults) g.add_vaults(std::move(v));
  return g;
}
Grant Bare(Grant::Kind kind) {
  Grant g;
  g.set_kind(kind);
  return g;
}
Grant ReadHash(absl::string_view hash) {
  Grant g;
  g.set_kind(Grant::READ);
  g.set_hash(std::string(hash));
  return g;
}

std::vector<Grant> DefaultGrants() {
  return {Read("/vault/pub"), Write("/vault/pub/out"), Network("*.example.com", 443),
          Migrate({"vault-b", "vault-c"}), Bare(Grant::CAS_READ)};
}

Constraints DefaultConstraints() {
  Constraints c;
  c.set_max_migrations(3);
  c.set_max_memory_bytes(kGiB);
  return c;
}

void SetGrants(LinkPayload* p, const std::vector<Grant>& grants) {
  p->clear_grants();
  for (const Grant& g : grants) *p->add_grants() = g;
}

// Replaces the grant of `kind` in `p` (the first one) by `g`.
void ReplaceGrant(LinkPayload* p, Grant::Kind kind, const Grant& g) {
  for (Grant& existing : *p->mutable_grants()) {
    if (existing.kind() == kind) {
      existing = g;
      return;
    }
  }
  ADD_FAILURE() << "no grant of kind " << kind;
}

// EXPECT_REFUSED(verify_result, kError, index, kStatusCode)
::testing::AssertionResult IsRefused(const absl::StatusOr<VerifiedChain>& v, ChainError error,
                                     int index, absl::StatusCode code) {
  if (v.ok()) {
    return ::testing::AssertionFailure()
           << "the chain verified; expected " << ChainErrorName(error) << " at link " << index;
  }
  const absl::Status& s = v.status();
  if (ChainErrorOf(s) != error || FailingLink(s) != index || s.code() != code) {
    return ::testing::AssertionFailure()
           << "got " << ChainErrorName(ChainErrorOf(s)) << " at link " << FailingLink(s) << " ("
           << s << "); expected " << ChainErrorName(error) << " at link " << index << " with "
           << absl::StatusCodeToString(code);
  }
  return ::testing::AssertionSuccess();
}
#define EXPECT_REFUSED(v, error, index, code) \
  EXPECT_TRUE(IsRefused((v), ChainError::error, (index), absl::StatusCode::code))

// A RevocationStore on a fresh RocksDB database.
struct Revocations {
  Revocations() : dir("chain_test") {
    absl::StatusOr<std::unique_ptr<storage::Database>> d = storage::Database::Open(
        {.path = dir.Path("db"), .sync_writes = false}, RevocationStore::ColumnFamilies());
    if (!d.ok()) {
      ADD_FAILURE() << d.status();
      std::abort();
    }
    db = std::move(*d);
    absl::StatusOr<std::unique_ptr<RevocationStore>> s = RevocationStore::Open(db.get());
    if (!s.ok()) {
      ADD_FAILURE() << s.status();
      std::abort();
    }
    store = std::move(*s);
  }
  void RevokeLink(absl::string_view link_hash, const PrivateKey& by) {
    vault::v1::RevocationPayload p;
    p.set_version(1);
    p.set_revoker(by.public_key().raw());
    p.set_link_hash(std::string(link_hash));
    p.set_reason("test");
    Add(p, by);
  }
  void RevokeAgent(absl::string_view agent_id, const PrivateKey& by) {
    vault::v1::RevocationPayload p;
    p.set_version(1);
    p.set_revoker(by.public_key().raw());
    p.set_agent_id(std::string(agent_id));
    Add(p, by);
  }
  void Add(const vault::v1::RevocationPayload& p, const PrivateKey& by) {
    absl::StatusOr<vault::v1::SignedRevocation> r = SignRevocation(p, by);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_TRUE(store->Add(*r).ok());
  }
  // Wires the store into `ctx` the way the vault does.
  void Use(VerifyContext* ctx) const {
    const RevocationStore* s = store.get();
    ctx->link_revoked = [s](absl::string_view h, const PublicKey& by) {
      return s->LinkRevoked(h, by);
    };
    ctx->agent_revoked = [s](absl::string_view a, const PublicKey& by) {
      return s->AgentRevoked(a, by);
    };
  }

  common::testing::TempDir dir;
  std::unique_ptr<storage::Database> db;
  std::unique_ptr<RevocationStore> store;
};

// --- the fixture ---------------------------------------------------------------------------------

class ChainTest : public ::testing::Test {
 protected:
  using BytesEdit = std::function<void(int, std::string*)>;
  using LinkEdit = std::function<void(int, SignedLink*)>;

  ChainTest()
      : p_(KeyFromSeed(1)),
        q_(KeyFromSeed(2)),
        a_(KeyFromSeed(3)),
        b_(KeyFromSeed(4)),
        c_(KeyFromSeed(5)),
        x_(KeyFromSeed(6)),
        code_(MakeDigest("agent code v1")) {}

  int64_t Ms(absl::Duration from_now) const { return absl::ToUnixMillis(now_ + from_now); }

  // Payloads along `route` (P, Q, home vault, next vaults...): link 0 DELEGATE, link 1 SPAWN,
  // the rest MIGRATE; windows nested a day inside each other around now.
  std::vector<LinkPayload> PayloadsVia(const std::vector<const PrivateKey*>& route) const {
    std::vector<LinkPayload> out;
    for (size_t i = 0; i + 1 < route.size(); ++i) {
      LinkPayload l;
      l.set_version(kLinkVersion);
      l.set_kind(i == 0   ? LinkPayload::DELEGATE
                 : i == 1 ? LinkPayload::SPAWN
                          : LinkPayload::MIGRATE);
      l.set_issuer(route[i]->public_key().raw());
      l.set_audience(route[i + 1]->public_key().raw());
      if (i >= 1) {
        l.set_agent_id(kAgentId);
        *l.mutable_code() = code_;
      }
      SetGrants(&l, DefaultGrants());
      *l.mutable_constraints() = DefaultConstraints();
      const int days = 10 - static_cast<int>(i);
      l.set_not_before_unix_ms(Ms(-absl::Hours(24 * days)));
      l.set_not_after_unix_ms(Ms(absl::Hours(24 * days)));
      l.set_hop(i >= 2 ? static_cast<uint32_t>(i - 1) : 0);
      if (i >= 2) {
        l.set_transfer_id(RandomBytes(16));
        *l.mutable_state() = MakeDigest(absl::StrCat("agent state at hop ", i - 1));
      }
      out.push_back(std::move(l));
    }
    return out;
  }

  // The first `n` links of P -> Q -> A -> B -> C.
  std::vector<LinkPayload> Payloads(int n) const {
    std::vector<const PrivateKey*> route = {&p_, &q_, &a_, &b_, &c_};
    route.resize(n + 1);
    return PayloadsVia(route);
  }

  const PrivateKey* KeyOf(absl::string_view raw) const {
    for (const PrivateKey* k : {&p_, &q_, &a_, &b_, &c_, &x_}) {
      if (k->public_key().raw() == raw) return k;
    }
    return nullptr;
  }

  // Signs the payloads in order, each `parent` the hash of the previous signed link. `edit_bytes`
  // may rewrite link i's canonical bytes before they are (properly) signed by the issuer;
  // `edit_link` may tamper with the signed link before the next link names it as parent. An
  // issuer without a known private key is signed for by X (its key check fails first).
  Chain Build(std::vector<LinkPayload> payloads, const BytesEdit& edit_bytes = nullptr,
              const LinkEdit& edit_link = nullptr) const {
    Chain chain;
    for (size_t i = 0; i < payloads.size(); ++i) {
      LinkPayload& p = payloads[i];
      if (i > 0) p.set_parent(LinkHash(chain.links(static_cast<int>(i) - 1)));
      const PrivateKey* key = KeyOf(p.issuer());
      SignedLink link;
      if (key != nullptr && edit_bytes == nullptr) {
        absl::StatusOr<SignedLink> signed_link = SignLink(p, *key);
        EXPECT_TRUE(signed_link.ok()) << signed_link.status();
        if (signed_link.ok()) link = *signed_link;
      } else {
        std::string bytes = CanonicalBytes(p);
        if (edit_bytes) edit_bytes(static_cast<int>(i), &bytes);
        link = SignRaw(bytes, key != nullptr ? *key : x_);
      }
      if (edit_link) edit_link(static_cast<int>(i), &link);
      *chain.add_links() = std::move(link);
    }
    return chain;
  }

  Chain Valid(int n) const { return Build(Payloads(n)); }

  VerifyContext Context(const PrivateKey& here) const {
    VerifyContext ctx;
    ctx.this_vault = here.public_key();
    ctx.trusted_root = [root = p_.public_key()](const PublicKey& k) { return k == root; };
    ctx.vault_key = [a = a_.public_key(), b = b_.public_key(),
                     c = c_.public_key()](absl::string_view name) -> std::optional<PublicKey> {
      if (name == "vault-a") return a;
      if (name == "vault-b") return b;
      if (name == "vault-c") return c;
      return std::nullopt;
    };
    ctx.now = now_;
    return ctx;
  }

  static absl::StatusOr<VerifiedChain> Verify(const Chain& chain, const VerifyContext& ctx,
                                              LinkCache* cache = nullptr) {
    return ChainVerifier(cache).Verify(chain, ctx);
  }

  // Builds the 3-link chain with link `index` changed by `edit`, and verifies it at B.
  absl::StatusOr<VerifiedChain> VerifyEdited(int index,
                                             const std::function<void(LinkPayload*)>& edit,
                                             int n = 3) const {
    std::vector<LinkPayload> payloads = Payloads(n);
    edit(&payloads[index]);
    const PrivateKey* here[] = {&p_, &q_, &a_, &b_, &c_};
    return Verify(Build(std::move(payloads)), Context(*here[n]));
  }

  const absl::Time now_ = absl::FromUnixMillis(1'700'000'000'000);
  PrivateKey p_, q_, a_, b_, c_, x_;
  const Digest code_;
};

void ExpectSameGrants(const std::vector<Grant>& got,
                      const google::protobuf::RepeatedPtrField<Grant>& want) {
  ASSERT_EQ(got.size(), static_cast<size_t>(want.size()));
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(CanonicalBytes(got[i]), CanonicalBytes(want[static_cast<int>(i)])) << "grant " << i;
  }
}

// --- the valid chains ----------------------------------------------------------------------------

TEST_F(ChainTest, SignLinkIsCanonicalAndChecksTheIssuer) {
  LinkPayload p = Payloads(1)[0];
  absl::StatusOr<SignedLink> link = SignLink(p, p_);
  ASSERT_TRUE(link.ok()) << link.status();
  EXPECT_EQ(link->payload(), CanonicalBytes(p));
  EXPECT_EQ(link->signature().size(), PublicKey::kSignatureSize);
  EXPECT_TRUE(
      p_.public_key().Verify(absl::StrCat(kLinkDomain, link->payload()), link->signature()).ok());
  absl::StatusOr<LinkPayload> parsed = ParseLinkPayload(link->payload());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(CanonicalBytes(*parsed), CanonicalBytes(p));
  EXPECT_EQ(LinkHash(*link).size(), 32u);

  absl::StatusOr<SignedLink> wrong = SignLink(p, q_);
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(ChainTest, ThreeLinkChainVerifiesAtB) {
  std::vector<LinkPayload> payloads = Payloads(3);
  Chain chain = Build(payloads);
  absl::StatusOr<VerifiedChain> v = Verify(chain, Context(b_));
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->agent_id, kAgentId);
  EXPECT_EQ(v->code.sha256(), code_.sha256());
  EXPECT_EQ(v->code.size(), code_.size());
  ASSERT_TRUE(v->root.has_value());
  EXPECT_TRUE(*v->root == p_.public_key());
  EXPECT_EQ(v->hop, 1u);
  ExpectSameGrants(v->grants, payloads[2].grants());
  EXPECT_EQ(CanonicalBytes(v->constraints), CanonicalBytes(payloads[2].constraints()));
  EXPECT_EQ(v->last_transfer_id, payloads[2].transfer_id());
  EXPECT_EQ(v->not_after_unix_ms, payloads[2].not_after_unix_ms());
  EXPECT_EQ(v->link_hashes,
            (std::vector<std::string>{LinkHash(chain.links(0)), LinkHash(chain.links(1)),
                                      LinkHash(chain.links(2))}));
  EXPECT_EQ(v->signatures_checked, 3);
}

TEST_F(ChainTest, FourLinkChainVerifiesAtC) {
  std::vector<LinkPayload> payloads = Payloads(4);
  Chain chain = Build(payloads);
  absl::StatusOr<VerifiedChain> v = Verify(chain, Context(c_));
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->agent_id, kAgentId);
  EXPECT_EQ(v->hop, 2u);
  ASSERT_TRUE(v->root.has_value());
  EXPECT_TRUE(*v->root == p_.public_key());
  ExpectSameGrants(v->grants, payloads[3].grants());
  EXPECT_EQ(v->last_transfer_id, payloads[3].transfer_id());
  ASSERT_EQ(v->link_hashes.size(), 4u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(v->link_hashes[i], LinkHash(chain.links(i)));
  EXPECT_EQ(v->signatures_checked, 4);
}

TEST_F(ChainTest, SpawnedChainVerifiesAtTheHomeVaultA) {
  std::vector<LinkPayload> payloads = Payloads(2);
  Chain chain = Build(payloads);
  absl::StatusOr<VerifiedChain> v = Verify(chain, Context(a_));
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->agent_id, kAgentId);
  EXPECT_EQ(v->hop, 0u);
  EXPECT_EQ(v->last_transfer_id, "");
  ASSERT_TRUE(v->root.has_value());
  EXPECT_TRUE(*v->root == p_.public_key());
  ExpectSameGrants(v->grants, payloads[1].grants());
  EXPECT_EQ(v->link_hashes,
            (std::vector<std::string>{LinkHash(chain.links(0)), LinkHash(chain.links(1))}));
}

TEST_F(ChainTest, RootMaySpawnDirectly) {
  Chain chain = Build(PayloadsVia({&p_, &p_, &a_, &b_}));  // P -DELEGATE-> P -SPAWN-> A -> B
  ASSERT_TRUE(Verify(chain, Context(b_)).ok());
  std::vector<LinkPayload> payloads = Payloads(3);
  payloads.erase(payloads.begin());  // P -SPAWN-> A: the root is the SPAWN link
  payloads[0].set_issuer(p_.public_key().raw());
  absl::StatusOr<VerifiedChain> v = Verify(Build(payloads), Context(b_));
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->hop, 1u);
}

TEST_F(ChainTest, AttenuatedChainVerifies) {
  std::vector<LinkPayload> payloads = Payloads(3);
  const std::string hash = Sha256("a cas object");
  SetGrants(&payloads[2],
            {Read("/vault/pub/docs"), Write("/vault/pub/out/x"), Network("api.example.com", 443),
             Network("*.a.example.com", 443), Migrate({"vault-c"}), ReadHash(hash)});
  payloads[2].mutable_constraints()->set_max_memory_bytes(kGiB / 2);
  payloads[2].mutable_constraints()->set_max_migrations(2);
  payloads[2].mutable_constraints()->set_max_runtime_ms(60'000);  // a new limit narrows
  payloads[2].mutable_constraints()->set_expires_unix_ms(Ms(absl::Hours(1)));
  payloads[2].set_not_before_unix_ms(payloads[1].not_before_unix_ms());  // equal ends: nested
  payloads[2].set_not_after_unix_ms(payloads[1].not_after_unix_ms());
  absl::StatusOr<VerifiedChain> v = Verify(Build(payloads), Context(b_));
  ASSERT_TRUE(v.ok()) << v.status();
  ExpectSameGrants(v->grants, payloads[2].grants());
  EXPECT_EQ(v->constraints.max_runtime_ms(), 60'000u);
}

TEST_F(ChainTest, ClockSkewBoundaries) {
  const auto at = [&](absl::Duration nb, absl::Duration na) {
    return VerifyEdited(2, [&](LinkPayload* p) {
      p->set_not_before_unix_ms(Ms(nb));
      p->set_not_after_unix_ms(Ms(na));
    });
  };
  // Valid up to (not including) not_after + skew, and from not_before - skew.
  EXPECT_TRUE(at(-absl::Hours(1), -absl::Seconds(30) + absl::Milliseconds(1)).ok());
  EXPECT_REFUSED(at(-absl::Hours(1), -absl::Seconds(30)), kExpired, 2, kPermissionDenied);
  EXPECT_TRUE(at(absl::Seconds(30), absl::Hours(1)).ok());
  EXPECT_REFUSED(at(absl::Seconds(30) + absl::Milliseconds(1), absl::Hours(1)), kNotYetValid, 2,
                 kPermissionDenied);
}

// --- widened authority ---------------------------------------------------------------------------

TEST_F(ChainTest, WidenedPathToItsParent) {
  EXPECT_REFUSED(
      VerifyEdited(2, [](LinkPayload* p) { ReplaceGrant(p, Grant::READ, Read("/vault")); }),
      kWidened, 2, kPermissionDenied);
}

TEST_F(ChainTest, WidenedPathToTheRoot) {
  EXPECT_REFUSED(VerifyEdited(2, [](LinkPayload* p) { ReplaceGrant(p, Grant::READ, Read("/")); }),
                 kWidened, 2, kPermissionDenied);
}

TEST_F(ChainTest, SiblingPathIsNotCovered) {
  // /vault/pub covers /vault/pub/x by whole segments, never /vault/public.
  EXPECT_REFUSED(
      VerifyEdited(2, [](LinkPayload* p) { ReplaceGrant(p, Grant::READ, Read("/vault/public")); }),
      kWidened, 2, kPermissionDenied);
  EXPECT_REFUSED(
      VerifyEdited(
          2, [](LinkPayload* p) { ReplaceGrant(p, Grant::WRITE, Write("/vault/pub/outbox")); }),
      kWidened, 2, kPermissionDenied);
}

TEST_F(ChainTest, ReadDoesNotCoverWrite) {
  EXPECT_REFUSED(
      VerifyEdited(
          2, [](LinkPayload* p) { ReplaceGrant(p, Grant::WRITE, Write("/vault/pub/other")); }),
      kWidened, 2, kPermissionDenied);
}

TEST_F(ChainTest, WidenedHostToAShorterSuffix) {
  // Link 1 narrows to *.a.example.com; link 2 goes back to *.example.com.
  std::vector<LinkPayload> payloads = Payloads(3);
  ReplaceGrant(&payloads[1], Grant::NETWORK, Network("*.a.example.com", 443));
  EXPECT_REFUSED(Verify(Build(payloads), Context(b_)), kWidened, 2, kPermissionDenied);
  ReplaceGrant(&payloads[2], Grant::NETWORK, Network("a.example.com", 443));  // the bare suffix
  EXPECT_REFUSED(Verify(Build(payloads), Context(b_)), kWidened, 2, kPermissionDenied);
  // "*.com" is wider still, but grant.cc refuses a wildcard over a single label outright (a whole
  // top-level domain is never a valid scope): malformed, not widened.
  ReplaceGrant(&payloads[2], Grant::NETWORK, Network("*.com", 443));
  EXPECT_REFUSED(Verify(Build(payloads), Context(b_)), kMalformed, 2, kInvalidArgument);
}

TEST_F(ChainTest, WidenedHostToAnotherDomain) {
  EXPECT_REFUSED(
      VerifyEdited(
          2, [](LinkPayload* p) { ReplaceGrant(p, Grant::NETWORK, Network("example.org", 443)); }),
      kWidened, 2, kPermissionDenied);
}

TEST_F(ChainTest, WildcardDoesNotCoverTheBareSuffix) {
  EXPECT_REFUSED(
      VerifyEdited(
          2, [](LinkPayload* p) { ReplaceGrant(p, Grant::NETWORK, Network("example.com", 443)); }),
      kWidened, 2, kPermissionDenied);
}

TEST_F(ChainTest, LookAlikeHostIsNotCovered) {
  EXPECT_REFUSED(VerifyEdited(2,
                              [](LinkPayload* p) {
                                ReplaceGrant(p, Grant::NETWORK,
                                             Network("example.com.evil.net", 443));
                              }),
                 kWidened, 2, kPermissionDenied);
  EXPECT_REFUSED(VerifyEdited(2,
                              [](LinkPayload* p) {
                                ReplaceGrant(p, Grant::NETWORK, Network("evilexample.com", 443));
                              }),
                 kWidened, 2, kPermissionDenied);
  EXPECT_REFUSED(VerifyEdited(2,
                              [](LinkPayload* p) {
                                ReplaceGrant(p, Grant::NETWORK,
                                             Network("a.example.com.evil.net", 443));
                              }),
                 kWidened, 2, kPermissionDenied);
}

TEST_F(ChainTest, WidenedPortToAny) {
  EXPECT_REFUSED(
      VerifyEdited(
          2, [](LinkPayload* p) { ReplaceGrant(p, Grant::NETWORK, Network("*.example.com", 0)); }),
      kWidened, 2, kPermissionDenied);
  EXPECT_REFUSED(
      VerifyEdited(
          2, [](LinkPayload* p) { ReplaceGrant(p, Grant::NETWORK, Network("*.example.com", 80)); }),
      kWidened, 2, kPermissionDenied);
}

TEST_F(ChainTest, WidenedMigrateSet) {
  EXPECT_REFUSED(
      VerifyEdited(2,
                   [](LinkPayload* p) {
                     ReplaceGrant(p, Grant::MIGRATE, Migrate({"vault-a", "vault-b", "vault-c"}));
                   }),
      kWidened, 2, kPermissionDenied);
}

TEST_F(ChainTest, WidenedByANewKind) {
  EXPECT_REFUSED(VerifyEdited(2, [](LinkPayload* p) { *p->add_grants() = Bare(Grant::CAS_WRITE); }),
                 kWidened, 2, kPermissionDenied);
  EXPECT_REFUSED(VerifyEdited(2, [](LinkPayload* p) { *p->add_grants() = Bare(Grant::SPAWN); }),
                 kWidened, 2, kPermissionDenied);
}

TEST_F(ChainTest, ReadHashNeedsCasReadOrTheSameHash) {
  // Link 1 without cas-read: a READ(hash) at link 2 is not covered.
  std::vector<LinkPayload> payloads = Payloads(3);
  SetGrants(&payloads[1], {Read("/vault/pub"), Migrate({"vault-b"})});
  SetGrants(&payloads[2], {ReadHash(Sha256("x"))});
  EXPECT_REFUSED(Verify(Build(payloads), Context(b_)), kWidened, 2, kPermissionDenied);
}

TEST_F(ChainTest, WidenedMaxMemory) {
  EXPECT_REFUSED(
      VerifyEdited(
          2, [](LinkPayload* p) { p->mutable_constraints()->set_max_memory_bytes(kGiB + 1); }),
      kWidened, 2, kPermissionDenied);
}

TEST_F(ChainTest, WidenedMaxMigrations) {
  EXPECT_REFUSED(
      VerifyEdited(2, [](LinkPayload* p) { p->mutable_constraints()->set_max_migrations(4); }),
      kWidened, 2, kPermissionDenied);
}

TEST_F(ChainTest, DroppedLimitIsUnlimitedAndWidens) {
  EXPECT_REFUSED(
      VerifyEdited(2, [](LinkPayload* p) { p->mutable_constraints()->clear_max_memory_bytes(); }),
      kWidened, 2, kPermissionDenied);
  EXPECT_REFUSED(
      VerifyEdited(2, [](LinkPayload* p) { p->mutable_constraints()->clear_max_migrations(); }),
      kWidened, 2, kPermissionDenied);
  EXPECT_REFUSED(VerifyEdited(2, [](LinkPayload* p) { p->clear_constraints(); }), kWidened, 2,
                 kPermissionDenied);
}

TEST_F(ChainTest, WidenedExpiry) {
  std::vector<LinkPayload> payloads = Payloads(3);
  for (LinkPayload& p : payloads) p.mutable_constraints()->set_expires_unix_ms(Ms(absl::Hours(1)));
  std::vector<LinkPayload> later = payloads;
  later[2].mutable_constraints()->set_expires_unix_ms(Ms(absl::Hours(2)));
  EXPECT_REFUSED(Verify(Build(later), Context(b_)), kWidened, 2, kPermissionDenied);
  std::vector<LinkPayload> dropped = payloads;
  dropped[2].mutable_constraints()->clear_expires_unix_ms();
  EXPECT_REFUSED(Verify(Build(dropped), Context(b_)), kWidened, 2, kPermissionDenied);
}

// --- malformed scopes ----------------------------------------------------------------------------

// Fields outside the signed payloads (in a SignedLink or the Chain) are signed by no one and
// would not count against the size budget: refused, whatever they hold.
TEST_F(ChainTest, UnknownFieldsOutsideTheSignedPayloadsAreMalformed) {
  Chain chain = Build(Payloads(3));
  ASSERT_TRUE(Verify(chain, Context(b_)).ok());
  Chain in_link = chain;
  in_link.mutable_links(1)
      ->GetReflection()
      ->MutableUnknownFields(in_link.mutable_links(1))
      ->AddLengthDelimited(99, std::string(1 << 20, 'x'));
  EXPECT_REFUSED(Verify(in_link, Context(b_)), kMalformed, 1, kInvalidArgument);
  Chain in_chain = chain;
  in_chain.GetReflection()->MutableUnknownFields(&in_chain)->AddVarint(7, 1);
  EXPECT_REFUSED(Verify(in_chain, Context(b_)), kMalformed, -1, kInvalidArgument);
  // The same, arriving as bytes.
  std::string wire = chain.SerializeAsString();
  wire += std::string("\xf8\x06\x01", 3);  // field 111, varint 1
  Chain parsed;
  ASSERT_TRUE(parsed.ParseFromString(wire));
  EXPECT_REFUSED(Verify(parsed, Context(b_)), kMalformed, -1, kInvalidArgument);
}

TEST_F(ChainTest, DotDotPathIsMalformed) {
  EXPECT_REFUSED(
      VerifyEdited(
          2, [](LinkPayload* p) { ReplaceGrant(p, Grant::READ, Read("/vault/pub/../secret")); }),
      kMalformed, 2, kInvalidArgument);
  EXPECT_REFUSED(
      VerifyEdited(2, [](LinkPayload* p) { ReplaceGrant(p, Grant::READ, Read("/vault/pub/..")); }),
      kMalformed, 2, kInvalidArgument);
}

TEST_F(ChainTest, DoubleSlashPathIsMalformed) {
  EXPECT_REFUSED(
      VerifyEdited(2, [](LinkPayload* p) { ReplaceGrant(p, Grant::READ, Read("/vault//pub")); }),
      kMalformed, 2, kInvalidArgument);
}

TEST_F(ChainTest, PercentEscapedPathIsMalformed) {
  EXPECT_REFUSED(VerifyEdited(2,
                              [](LinkPayload* p) {
                                ReplaceGrant(p, Grant::READ, Read("/vault/pub/%2e%2e/secret"));
                              }),
                 kMalformed, 2, kInvalidArgument);
  EXPECT_REFUSED(
      VerifyEdited(2, [](LinkPayload* p) { ReplaceGrant(p, Grant::READ, Read("/vault/pub%2Fx")); }),
      kMalformed, 2, kInvalidArgument);
}

TEST_F(ChainTest, OtherUnnormalizedPathsAreMalformed) {
  for (absl::string_view path :
       {"/vault/pub/.", "/vault/./pub", "vault/pub", "/vault/pub/", "", "/vault\\pub"}) {
    SCOPED_TRACE(path);
    EXPECT_REFUSED(
        VerifyEdited(2, [&](LinkPayload* p) { ReplaceGrant(p, Grant::READ, Read(path)); }),
        kMalformed, 2, kInvalidArgument);
  }
  EXPECT_REFUSED(VerifyEdited(2,
                              [](LinkPayload* p) {
                                ReplaceGrant(p, Grant::READ,
                                             Read(std::string("/vault/pub/a\0b", 14)));
                              }),
                 kMalformed, 2, kInvalidArgument);
}

TEST_F(ChainTest, UnnormalizedHostsAndVaultListsAreMalformed) {
  for (absl::string_view host : {"*.Example.com", "example.com.", "*.example..com",
                                 "-a.example.com", "a.*.example.com", "*"}) {
    SCOPED_TRACE(host);
    EXPECT_REFUSED(
        VerifyEdited(2,
                     [&](LinkPayload* p) { ReplaceGrant(p, Grant::NETWORK, Network(host, 443)); }),
        kMalformed, 2, kInvalidArgument);
  }
  EXPECT_REFUSED(
      VerifyEdited(2,
                   [](LinkPayload* p) {
                     ReplaceGrant(p, Grant::MIGRATE, Migrate({"vault-c", "vault-b"}));  // unsorted
                   }),
      kMalformed, 2, kInvalidArgument);
  EXPECT_REFUSED(
      VerifyEdited(2,
                   [](LinkPayload* p) {
                     ReplaceGrant(p, Grant::MIGRATE, Migrate({"vault-b", "vault-b"}));  // duplicate
                   }),
      kMalformed, 2, kInvalidArgument);
}

TEST_F(ChainTest, MalformedGrantInTheRootIsRefused) {
  EXPECT_REFUSED(
      VerifyEdited(0, [](LinkPayload* p) { ReplaceGrant(p, Grant::READ, Read("/vault/../etc")); }),
      kMalformed, 0, kInvalidArgument);
  // A scope field that does not belong to the kind.
  EXPECT_REFUSED(VerifyEdited(2,
                              [](LinkPayload* p) {
                                Grant g = Bare(Grant::CAS_READ);
                                g.set_path("/vault/pub");
                                ReplaceGrant(p, Grant::CAS_READ, g);
                              }),
                 kMalformed, 2, kInvalidArgument);
}

// --- signatures and keys -------------------------------------------------------------------------

TEST_F(ChainTest, LinkSignedByAKeyOtherThanItsIssuer) {
  Chain chain = Build(Payloads(3), nullptr, [&](int i, SignedLink* link) {
    if (i == 1) *link = SignRaw(link->payload(), x_);  // issuer field still says Q
  });
  EXPECT_REFUSED(Verify(chain, Context(b_)), kBadSignature, 1, kUnauthenticated);
}

TEST_F(ChainTest, IssuerThatIsNotThePreviousAudience) {
  // X signs a link naming itself as issuer: the signature is good, the linkage is not.
  EXPECT_REFUSED(VerifyEdited(1, [&](LinkPayload* p) { p->set_issuer(x_.public_key().raw()); }),
                 kBrokenLink, 1, kPermissionDenied);
}

TEST_F(ChainTest, SignaturesSwappedBetweenTwoLinks) {
  Chain chain = Valid(3);
  std::string s1 = chain.links(1).signature();
  chain.mutable_links(1)->set_signature(chain.links(2).signature());
  chain.mutable_links(2)->set_signature(s1);
  EXPECT_REFUSED(Verify(chain, Context(b_)), kBadSignature, 1, kUnauthenticated);
}

TEST_F(ChainTest, PayloadBitFlipInAFieldValueIsABadSignature) {
  // Flipping a bit inside the transfer id's bytes leaves a payload that still parses, has no
  // unknown field and is canonical, so only the signature can catch it: kBadSignature, not
  // kMalformed.
  Chain chain = Build(Payloads(3), nullptr, [](int i, SignedLink* link) {
    if (i != 2) return;
    absl::StatusOr<LinkPayload> p = ParseLinkPayload(link->payload());
    ASSERT_TRUE(p.ok());
    size_t at = link->payload().find(p->transfer_id());
    ASSERT_NE(at, std::string::npos);
    std::string bytes = link->payload();
    bytes[at + 7] = static_cast<char>(bytes[at + 7] ^ 0x10);
    EXPECT_TRUE(ParseLinkPayload(bytes).ok());
    link->set_payload(bytes);
  });
  EXPECT_REFUSED(Verify(chain, Context(b_)), kBadSignature, 2, kUnauthenticated);
}

TEST_F(ChainTest, PayloadBitFlipInATagIsMalformed) {
  // Byte 0 is the tag of `version` (0x08: field 1, varint). Flipping its low bit makes it field 1
  // with wire type 1 (fixed64): the field no longer parses as `version`, so the payload is
  // unparsable or carries an unknown field. Parsing comes before the signature: kMalformed.
  Chain chain = Build(Payloads(3), nullptr, [](int i, SignedLink* link) {
    if (i != 2) return;
    std::string bytes = link->payload();
    ASSERT_EQ(bytes[0], '\x08');
    bytes[0] = '\x09';
    EXPECT_FALSE(ParseLinkPayload(bytes).ok());
    link->set_payload(bytes);
  });
  EXPECT_REFUSED(Verify(chain, Context(b_)), kMalformed, 2, kInvalidArgument);
}

TEST_F(ChainTest, SignatureBitFlip) {
  for (int byte : {0, 31, 32, 63}) {
    SCOPED_TRACE(byte);
    Chain chain = Build(Payloads(3), nullptr, [&](int i, SignedLink* link) {
      if (i != 2) return;
      std::string sig = link->signature();
      sig[byte] = static_cast<char>(sig[byte] ^ 0x01);
      link->set_signature(sig);
    });
    EXPECT_REFUSED(Verify(chain, Context(b_)), kBadSignature, 2, kUnauthenticated);
  }
}

TEST_F(ChainTest, MalleatedSignatureSPlusL) {
  // L = 2^252 + 27742317777372353535851937790883648493, little-endian.
  static constexpr unsigned char kL[32] = {0xed, 0xd3, 0xf5, 0x5c, 0x1a, 0x63, 0x12, 0x58,
                                           0xd6, 0x9c, 0xf7, 0xa2, 0xde, 0xf9, 0xde, 0x14,
                                           0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
                                           0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10};
  Chain chain = Build(Payloads(3), nullptr, [&](int i, SignedLink* link) {
    if (i != 2) return;
    std::string sig = link->signature();
    unsigned carry = 0;
    for (int k = 0; k < 32; ++k) {
      unsigned sum = static_cast<unsigned char>(sig[32 + k]) + kL[k] + carry;
      sig[32 + k] = static_cast<char>(sum & 0xff);
      carry = sum >> 8;
    }
    ASSERT_EQ(carry, 0u);  // S < L, so S + L < 2^254
    link->set_signature(sig);
  });
  EXPECT_REFUSED(Verify(chain, Context(b_)), kBadSignature, 2, kUnauthenticated);
}

TEST_F(ChainTest, SignatureOf63Bytes) {
  Chain chain = Valid(3);
  chain.mutable_links(2)->mutable_signature()->pop_back();
  EXPECT_REFUSED(Verify(chain, Context(b_)), kBadSignature, 2, kUnauthenticated);
}

TEST_F(ChainTest, SignatureOf65Bytes) {
  Chain chain = Valid(3);
  chain.mutable_links(2)->mutable_signature()->push_back('\0');
  EXPECT_REFUSED(Verify(chain, Context(b_)), kBadSignature, 2, kUnauthenticated);
}

TEST_F(ChainTest, EmptySignature) {
  Chain chain = Valid(3);
  chain.mutable_links(0)->clear_signature();
  EXPECT_REFUSED(Verify(chain, Context(b_)), kBadSignature, 0, kUnauthenticated);
}

TEST_F(ChainTest, SignatureWithoutTheDomainPrefix) {
  Chain chain = Build(Payloads(3), nullptr, [&](int i, SignedLink* link) {
    if (i != 1) return;
    absl::StatusOr<std::string> sig = q_.Sign(link->payload());
    ASSERT_TRUE(sig.ok());
    link->set_signature(*sig);
  });
  EXPECT_REFUSED(Verify(chain, Context(b_)), kBadSignature, 1, kUnauthenticated);
}

TEST_F(ChainTest, IdentityPointIssuerIsABadKey) {
  std::string identity(32, '\0');
  identity[0] = '\x01';
  EXPECT_REFUSED(VerifyEdited(1, [&](LinkPayload* p) { p->set_issuer(identity); }), kBadKey, 1,
                 kInvalidArgument);
}

TEST_F(ChainTest, SmallOrderAudienceIsABadKey) {
  // A point of order 8.
  const std::string order8 =
      absl::HexStringToBytes("26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05");
  EXPECT_REFUSED(VerifyEdited(0, [&](LinkPayload* p) { p->set_audience(order8); }), kBadKey, 0,
                 kInvalidArgument);
}

TEST_F(ChainTest, NonCanonicalOrShortIssuerKeyIsABadKey) {
  // y = p + 2: not canonical (and not small order).
  const std::string noncanonical =
      absl::HexStringToBytes("efffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f");
  EXPECT_REFUSED(VerifyEdited(1, [&](LinkPayload* p) { p->set_issuer(noncanonical); }), kBadKey, 1,
                 kInvalidArgument);
  EXPECT_REFUSED(
      VerifyEdited(1, [&](LinkPayload* p) { p->set_issuer(q_.public_key().raw().substr(0, 31)); }),
      kBadKey, 1, kInvalidArgument);
  EXPECT_REFUSED(VerifyEdited(2, [&](LinkPayload* p) { p->clear_audience(); }), kBadKey, 2,
                 kInvalidArgument);
}

// Regression: an encoding that is not a point of the curve (y = 2: the x^2 it implies is not a
// square mod p) used to pass PublicKey::FromRaw and be refused only as kBadSignature; FromRaw now
// decodes the point, so it is kBadKey.
TEST_F(ChainTest, OffCurveIssuerIsABadKey) {
  std::string off_curve(32, '\0');
  off_curve[0] = '\x02';
  EXPECT_REFUSED(VerifyEdited(1, [&](LinkPayload* p) { p->set_issuer(off_curve); }), kBadKey, 1,
                 kInvalidArgument);
}

// --- linkage -------------------------------------------------------------------------------------

TEST_F(ChainTest, MissingMiddleLink) {
  Chain chain = Valid(4);
  chain.mutable_links()->DeleteSubrange(2, 1);  // P->Q, Q->A, B->C
  EXPECT_REFUSED(Verify(chain, Context(c_)), kBrokenLink, 2, kPermissionDenied);
}

TEST_F(ChainTest, MissingMiddleLinksWithMatchingKeysIsAParentMismatch) {
  // P -> Q -> A -> B -> A -> B: dropping the round trip A -> B -> A leaves issuers and audiences
  // that still line up; only the parent hash shows that links are missing.
  std::vector<LinkPayload> payloads = PayloadsVia({&p_, &q_, &a_, &b_, &a_, &b_});
  for (LinkPayload& p : payloads) ReplaceGrant(&p, Grant::MIGRATE, Migrate({"vault-a", "vault-b"}));
  Chain chain = Build(payloads);
  ASSERT_TRUE(Verify(chain, Context(b_)).ok());
  chain.mutable_links()->DeleteSubrange(2, 2);
  absl::StatusOr<VerifiedChain> v = Verify(chain, Context(b_));
  EXPECT_REFUSED(v, kBrokenLink, 2, kPermissionDenied);
  EXPECT_TRUE(absl::StrContains(v.status().message(), "parent")) << v.status();
}

TEST_F(ChainTest, ReorderedLinks) {
  Chain chain = Valid(4);
  chain.mutable_links()->SwapElements(2, 3);  // P->Q, Q->A, B->C, A->B
  EXPECT_REFUSED(Verify(chain, Context(b_)), kBrokenLink, 2, kPermissionDenied);
  Chain kinds = Valid(3);
  kinds.mutable_links()->SwapElements(0, 1);  // the SPAWN link first: a root with a parent
  EXPECT_REFUSED(Verify(kinds, Context(b_)), kBrokenLink, 0, kPermissionDenied);
}

TEST_F(ChainTest, SplicedLinkFromAnotherChainOfTheSamePrincipals) {
  // Another agent spawned by Q at A and moved to B: the same principals, every link valid.
  std::vector<LinkPayload> other_payloads = Payloads(3);
  for (int i = 1; i < 3; ++i) other_payloads[i].set_agent_id("agent-other");
  Chain other = Build(other_payloads);
  ASSERT_TRUE(Verify(other, Context(b_)).ok());
  Chain mine = Valid(3);
  *mine.mutable_links(2) = other.links(2);  // issuer A = the previous audience; parent differs
  absl::StatusOr<VerifiedChain> v = Verify(mine, Context(b_));
  EXPECT_REFUSED(v, kBrokenLink, 2, kPermissionDenied);
  EXPECT_TRUE(absl::StrContains(v.status().message(), "parent")) << v.status();
}

TEST_F(ChainTest, WrongParentHash) {
  Chain chain = Build(Payloads(3), [&](int i, std::string* bytes) {
    if (i != 2) return;
    LinkPayload p;
    ASSERT_TRUE(p.ParseFromString(*bytes));
    p.set_parent(Sha256("not the previous link"));
    *bytes = CanonicalBytes(p);
  });
  EXPECT_REFUSED(Verify(chain, Context(b_)), kBrokenLink, 2, kPermissionDenied);
}

TEST_F(ChainTest, RootWithAParent) {
  EXPECT_REFUSED(VerifyEdited(0, [](LinkPayload* p) { p->set_parent(Sha256("x")); }), kBrokenLink,
                 0, kPermissionDenied);
}

// --- time ----------------------------------------------------------------------------------------

TEST_F(ChainTest, ExpiredLink) {
  EXPECT_REFUSED(VerifyEdited(2,
                              [&](LinkPayload* p) {
                                p->set_not_before_unix_ms(Ms(-absl::Hours(2)));
                                p->set_not_after_unix_ms(Ms(-absl::Hours(1)));
                              }),
                 kExpired, 2, kPermissionDenied);
}

TEST_F(ChainTest, ExpiredByConstraint) {
  EXPECT_REFUSED(VerifyEdited(2,
                              [&](LinkPayload* p) {
                                p->mutable_constraints()->set_expires_unix_ms(Ms(-absl::Hours(1)));
                              }),
                 kExpired, 2, kPermissionDenied);
}

TEST_F(ChainTest, NotYetValidLink) {
  EXPECT_REFUSED(VerifyEdited(2,
                              [&](LinkPayload* p) {
                                p->set_not_before_unix_ms(Ms(absl::Hours(1)));
                                p->set_not_after_unix_ms(Ms(absl::Hours(2)));
                              }),
                 kNotYetValid, 2, kPermissionDenied);
}

TEST_F(ChainTest, ChildWindowOutlivesParent) {
  std::vector<LinkPayload> payloads = Payloads(3);
  payloads[2].set_not_after_unix_ms(payloads[1].not_after_unix_ms() + 1);
  EXPECT_REFUSED(Verify(Build(payloads), Context(b_)), kTimeNotNested, 2, kPermissionDenied);
}

TEST_F(ChainTest, ChildWindowStartsBeforeParent) {
  std::vector<LinkPayload> payloads = Payloads(3);
  payloads[2].set_not_before_unix_ms(payloads[1].not_before_unix_ms() - 1);
  EXPECT_REFUSED(Verify(Build(payloads), Context(b_)), kTimeNotNested, 2, kPermissionDenied);
}

TEST_F(ChainTest, EmptyWindowIsMalformed) {
  EXPECT_REFUSED(VerifyEdited(2,
                              [&](LinkPayload* p) {
                                p->set_not_before_unix_ms(Ms(absl::ZeroDuration()));
                                p->set_not_after_unix_ms(Ms(absl::ZeroDuration()));
                              }),
                 kMalformed, 2, kInvalidArgument);
}

// --- hops and migration --------------------------------------------------------------------------

TEST_F(ChainTest, HopSkipped) {
  std::vector<LinkPayload> payloads = Payloads(4);
  payloads[2].set_hop(2);  // 0 -> 2
  payloads[3].set_hop(3);
  EXPECT_REFUSED(Verify(Build(payloads), Context(c_)), kBadHop, 2, kPermissionDenied);
}

TEST_F(ChainTest, HopRepeated) {
  EXPECT_REFUSED(VerifyEdited(
                     3, [](LinkPayload* p) { p->set_hop(1); }, 4),
                 kBadHop, 3, kPermissionDenied);
}

TEST_F(ChainTest, SpawnWithANonZeroHop) {
  EXPECT_REFUSED(VerifyEdited(1, [](LinkPayload* p) { p->set_hop(1); }), kBadHop, 1,
                 kPermissionDenied);
}

TEST_F(ChainTest, HopOverTheLimit) {
  std::vector<LinkPayload> payloads = Payloads(4);
  for (LinkPayload& p : payloads) p.mutable_constraints()->set_max_migrations(1);
  EXPECT_REFUSED(Verify(Build(payloads), Context(c_)), kHopLimit, 3, kPermissionDenied);
  for (LinkPayload& p : payloads) p.mutable_constraints()->set_max_migrations(2);
  EXPECT_TRUE(Verify(Build(payloads), Context(c_)).ok());  // at the limit
  for (LinkPayload& p : payloads) p.mutable_constraints()->set_max_migrations(0);
  EXPECT_REFUSED(Verify(Build(payloads), Context(c_)), kHopLimit, 2, kPermissionDenied);
}

TEST_F(ChainTest, MigrateToAVaultThePreviousGrantDoesNotName) {
  std::vector<LinkPayload> payloads = Payloads(4);
  ReplaceGrant(&payloads[2], Grant::MIGRATE, Migrate({"vault-b"}));
  ReplaceGrant(&payloads[3], Grant::MIGRATE, Migrate({"vault-b"}));
  EXPECT_REFUSED(Verify(Build(payloads), Context(c_)), kMigrateNotGranted, 3, kPermissionDenied);
}

TEST_F(ChainTest, MigrateWithoutAnyMigrateGrant) {
  std::vector<LinkPayload> payloads = Payloads(3);
  for (LinkPayload& p : payloads) SetGrants(&p, {Read("/vault/pub")});
  EXPECT_REFUSED(Verify(Build(payloads), Context(b_)), kMigrateNotGranted, 2, kPermissionDenied);
}

TEST_F(ChainTest, MigrateToAVaultNameTheFederationDoesNotKnow) {
  VerifyContext ctx = Context(b_);
  ctx.vault_key = [c = c_.public_key()](absl::string_view name) -> std::optional<PublicKey> {
    if (name == "vault-c") return c;
    return std::nullopt;  // vault-b is not (or no longer) a member
  };
  EXPECT_REFUSED(Verify(Valid(3), ctx), kMigrateNotGranted, 2, kPermissionDenied);
  ctx.vault_key = nullptr;
  EXPECT_REFUSED(Verify(Valid(3), ctx), kMigrateNotGranted, 2, kPermissionDenied);
}

// --- transfers -----------------------------------------------------------------------------------

TEST_F(ChainTest, TransferSeenHereBefore) {
  std::vector<LinkPayload> payloads = Payloads(3);
  VerifyContext ctx = Context(b_);
  ctx.transfer_seen = [id = payloads[2].transfer_id()](absl::string_view t) { return t == id; };
  EXPECT_REFUSED(Verify(Build(payloads), ctx), kReplayedTransfer, 2, kAlreadyExists);
}

TEST_F(ChainTest, EarlierTransferSeenHereIsNoReplay) {
  // The agent was at this vault before (link 2's transfer); coming back by a new transfer is fine.
  std::vector<LinkPayload> payloads = Payloads(4);
  VerifyContext ctx = Context(c_);
  ctx.transfer_seen = [id = payloads[2].transfer_id()](absl::string_view t) { return t == id; };
  EXPECT_TRUE(Verify(Build(payloads), ctx).ok());
}

TEST_F(ChainTest, SameTransferIdTwiceInOneChain) {
  std::vector<LinkPayload> payloads = Payloads(4);
  payloads[3].set_transfer_id(payloads[2].transfer_id());
  EXPECT_REFUSED(Verify(Build(payloads), Context(c_)), kReplayedTransfer, 3, kAlreadyExists);
}

TEST_F(ChainTest, TransferIdOfTheWrongSize) {
  EXPECT_REFUSED(VerifyEdited(2, [](LinkPayload* p) { p->set_transfer_id(RandomBytes(15)); }),
                 kMalformed, 2, kInvalidArgument);
  EXPECT_REFUSED(VerifyEdited(2, [](LinkPayload* p) { p->set_transfer_id(RandomBytes(17)); }),
                 kMalformed, 2, kInvalidArgument);
}

// A MIGRATE link without a transfer id is malformed (chain.h), not a replay.
TEST_F(ChainTest, MissingTransferIdOnMigrate) {
  EXPECT_REFUSED(VerifyEdited(2, [](LinkPayload* p) { p->clear_transfer_id(); }), kMalformed, 2,
                 kInvalidArgument);
}

TEST_F(ChainTest, MigrateWithoutStateDigest) {
  EXPECT_REFUSED(VerifyEdited(2, [](LinkPayload* p) { p->clear_state(); }), kMalformed, 2,
                 kInvalidArgument);
}

TEST_F(ChainTest, TransferIdOutsideMigrate) {
  EXPECT_REFUSED(VerifyEdited(1, [](LinkPayload* p) { p->set_transfer_id(RandomBytes(16)); }),
                 kMalformed, 1, kInvalidArgument);
  EXPECT_REFUSED(VerifyEdited(1, [](LinkPayload* p) { *p->mutable_state() = MakeDigest("s"); }),
                 kMalformed, 1, kInvalidArgument);
}

// --- encodings -----------------------------------------------------------------------------------

TEST_F(ChainTest, UnknownFieldInAProperlySignedPayload) {
  Chain chain = Build(Payloads(3), [](int i, std::string* bytes) {
    if (i == 2) bytes->append("\x98\x06\x01", 3);  // field 99, varint 1
  });
  EXPECT_REFUSED(Verify(chain, Context(b_)), kMalformed, 2, kInvalidArgument);
}

TEST_F(ChainTest, UnknownFieldInANestedMessage) {
  // Field 15 appended inside the code Digest; re-serialized with the unknown field kept.
  Chain chain = Build(Payloads(3), [](int i, std::string* bytes) {
    if (i != 2) return;
    LinkPayload p;
    ASSERT_TRUE(p.ParseFromString(*bytes));
    p.mutable_code()->GetReflection()->MutableUnknownFields(p.mutable_code())->AddVarint(15, 1);
    *bytes = CanonicalBytes(p);
  });
  EXPECT_REFUSED(Verify(chain, Context(b_)), kMalformed, 2, kInvalidArgument);
}

TEST_F(ChainTest, FutureVersion) {
  EXPECT_REFUSED(VerifyEdited(2, [](LinkPayload* p) { p->set_version(2); }), kUnsupportedVersion, 2,
                 kInvalidArgument);
  EXPECT_REFUSED(VerifyEdited(0, [](LinkPayload* p) { p->set_version(2); }), kUnsupportedVersion, 0,
                 kInvalidArgument);
}

TEST_F(ChainTest, NonCanonicalFieldOrder) {
  Chain chain = Build(Payloads(3), [](int i, std::string* bytes) {
    if (i != 2) return;
    ASSERT_EQ(bytes->substr(0, 2), std::string("\x08\x01", 2));
    std::string moved = bytes->substr(2) + std::string("\x08\x01", 2);  // version last
    LinkPayload a, b;
    ASSERT_TRUE(a.ParseFromString(*bytes));
    ASSERT_TRUE(b.ParseFromString(moved));
    ASSERT_EQ(CanonicalBytes(a), CanonicalBytes(b));  // the same fields
    *bytes = moved;
  });
  EXPECT_REFUSED(Verify(chain, Context(b_)), kMalformed, 2, kInvalidArgument);
}

TEST_F(ChainTest, NonCanonicalRedundantVarint) {
  Chain chain = Build(Payloads(3), [](int i, std::string* bytes) {
    if (i != 2) return;
    ASSERT_EQ(bytes->substr(0, 2), std::string("\x08\x01", 2));
    bytes->replace(0, 2, std::string("\x08\x81\x00", 3));  // version 1 in two bytes
    LinkPayload p;
    ASSERT_TRUE(p.ParseFromString(*bytes));
    ASSERT_EQ(p.version(), 1u);
  });
  EXPECT_REFUSED(Verify(chain, Context(b_)), kMalformed, 2, kInvalidArgument);
}

TEST_F(ChainTest, NonCanonicalExplicitDefaultOrRepeatedField) {
  Chain zero = Build(Payloads(3), [](int i, std::string* bytes) {
    if (i == 1) bytes->append("\x60\x00", 2);  // hop = 0, written explicitly
  });
  EXPECT_REFUSED(Verify(zero, Context(b_)), kMalformed, 1, kInvalidArgument);
  Chain twice = Build(Payloads(3), [](int i, std::string* bytes) {
    if (i == 1) *bytes = std::string("\x08\x07", 2) + *bytes;  // version 7, then version 1 wins
  });
  EXPECT_REFUSED(Verify(twice, Context(b_)), kMalformed, 1, kInvalidArgument);
}

TEST_F(ChainTest, KindNotSet) {
  EXPECT_REFUSED(VerifyEdited(0, [](LinkPayload* p) { p->clear_kind(); }), kMalformed, 0,
                 kInvalidArgument);
  EXPECT_REFUSED(
      VerifyEdited(2, [](LinkPayload* p) { p->set_kind(static_cast<LinkPayload::Kind>(9)); }),
      kMalformed, 2, kInvalidArgument);
}

// --- size, trust, audience -----------------------------------------------------------------------

TEST_F(ChainTest, TooManyLinks) {
  Chain one = Valid(1);
  Chain chain;
  for (int i = 0; i < 65; ++i) *chain.add_links() = one.links(0);
  EXPECT_REFUSED(Verify(chain, Context(b_)), kTooLarge, -1, kInvalidArgument);
  chain.mutable_links()->RemoveLast();  // 64: not too large; fails on linkage instead
  EXPECT_REFUSED(Verify(chain, Context(b_)), kBrokenLink, 1, kPermissionDenied);
}

TEST_F(ChainTest, TooManyBytes) {
  Chain chain = Valid(3);
  size_t bytes = 0;
  for (const SignedLink& l : chain.links()) bytes += l.payload().size() + l.signature().size();
  VerifyContext ctx = Context(b_);
  ctx.max_bytes = bytes - 1;
  EXPECT_REFUSED(Verify(chain, ctx), kTooLarge, -1, kInvalidArgument);
  ctx.max_bytes = bytes;
  EXPECT_TRUE(Verify(chain, ctx).ok());
}

TEST_F(ChainTest, EmptyChain) {
  EXPECT_REFUSED(Verify(Chain(), Context(b_)), kMalformed, -1, kInvalidArgument);
}

TEST_F(ChainTest, UntrustedRoot) {
  VerifyContext ctx = Context(b_);
  ctx.trusted_root = [x = x_.public_key()](const PublicKey& k) { return k == x; };
  EXPECT_REFUSED(Verify(Valid(3), ctx), kUntrustedRoot, 0, kPermissionDenied);
  ctx.trusted_root = nullptr;
  EXPECT_REFUSED(Verify(Valid(3), ctx), kUntrustedRoot, 0, kPermissionDenied);
}

TEST_F(ChainTest, TrustedDelegateIsNotAChainRootUnlessItSignsTheRoot) {
  // Q is trusted but the chain's root is P's link: P is not trusted here.
  VerifyContext ctx = Context(b_);
  ctx.trusted_root = [q = q_.public_key()](const PublicKey& k) { return k == q; };
  EXPECT_REFUSED(Verify(Valid(3), ctx), kUntrustedRoot, 0, kPermissionDenied);
}

TEST_F(ChainTest, WrongAudience) {
  EXPECT_REFUSED(Verify(Valid(3), Context(c_)), kWrongAudience, 2, kPermissionDenied);
  EXPECT_REFUSED(Verify(Valid(3), Context(a_)), kWrongAudience, 2, kPermissionDenied);
  EXPECT_REFUSED(Verify(Valid(2), Context(b_)), kWrongAudience, 1, kPermissionDenied);
}

// --- identity and kinds --------------------------------------------------------------------------

TEST_F(ChainTest, AgentIdChangedInAMigrateLink) {
  EXPECT_REFUSED(VerifyEdited(2, [](LinkPayload* p) { p->set_agent_id("agent-other"); }),
                 kIdentityChanged, 2, kPermissionDenied);
}

TEST_F(ChainTest, CodeDigestChanged) {
  EXPECT_REFUSED(VerifyEdited(2, [](LinkPayload* p) { *p->mutable_code() = MakeDigest("evil"); }),
                 kIdentityChanged, 2, kPermissionDenied);
  EXPECT_REFUSED(
      VerifyEdited(2, [](LinkPayload* p) { p->mutable_code()->set_size(p->code().size() + 1); }),
      kIdentityChanged, 2, kPermissionDenied);
}

TEST_F(ChainTest, SpawnWithoutAgentOrCode) {
  EXPECT_REFUSED(VerifyEdited(1, [](LinkPayload* p) { p->clear_agent_id(); }), kMalformed, 1,
                 kInvalidArgument);
  EXPECT_REFUSED(
      VerifyEdited(1, [](LinkPayload* p) { p->mutable_code()->set_sha256(std::string(31, 'x')); }),
      kMalformed, 1, kInvalidArgument);
}

TEST_F(ChainTest, SecondSpawn) {
  EXPECT_REFUSED(VerifyEdited(2,
                              [](LinkPayload* p) {
                                p->set_kind(LinkPayload::SPAWN);
                                p->set_hop(0);
                                p->clear_transfer_id();
                                p->clear_state();
                              }),
                 kBadKind, 2, kPermissionDenied);
}

TEST_F(ChainTest, MigrateBeforeSpawn) {
  EXPECT_REFUSED(VerifyEdited(1,
                              [&](LinkPayload* p) {
                                p->set_kind(LinkPayload::MIGRATE);
                                p->set_hop(1);
                                p->set_transfer_id(RandomBytes(16));
                                *p->mutable_state() = MakeDigest("s");
                              }),
                 kBadKind, 1, kPermissionDenied);
  EXPECT_REFUSED(VerifyEdited(0, [](LinkPayload* p) { p->set_kind(LinkPayload::MIGRATE); }),
                 kBadKind, 0, kPermissionDenied);
}

TEST_F(ChainTest, DelegateAfterSpawn) {
  EXPECT_REFUSED(VerifyEdited(2,
                              [](LinkPayload* p) {
                                p->set_kind(LinkPayload::DELEGATE);
                                p->set_hop(0);
                                p->clear_transfer_id();
                                p->clear_state();
                              }),
                 kBadKind, 2, kPermissionDenied);
}

// --- revocations ---------------------------------------------------------------------------------

TEST_F(ChainTest, RevokedAncestor) {
  Revocations r;
  Chain chain = Valid(3);
  VerifyContext ctx = Context(b_);
  r.Use(&ctx);
  ASSERT_TRUE(Verify(chain, ctx).ok());
  r.RevokeLink(LinkHash(chain.links(1)), p_);
  EXPECT_REFUSED(Verify(chain, ctx), kRevoked, 1, kPermissionDenied);
}

TEST_F(ChainTest, RevocationThatArrivesFirst) {
  Revocations r;
  Chain chain = Valid(3);
  r.RevokeLink(LinkHash(chain.links(1)), p_);  // before the chain is ever verified
  VerifyContext ctx = Context(b_);
  r.Use(&ctx);
  LinkCache cache;
  EXPECT_REFUSED(Verify(chain, ctx, &cache), kRevoked, 1, kPermissionDenied);
  EXPECT_REFUSED(Verify(chain, ctx, &cache), kRevoked, 1, kPermissionDenied);
}

TEST_F(ChainTest, AgentRevokedByTheDelegate) {
  Revocations r;
  r.RevokeAgent(kAgentId, q_);
  VerifyContext ctx = Context(b_);
  r.Use(&ctx);
  // The agent id first appears in the SPAWN link (1), whose issuer is Q.
  EXPECT_REFUSED(Verify(Valid(3), ctx), kRevoked, 1, kPermissionDenied);
}

TEST_F(ChainTest, RevocationByAnUnrelatedPrincipalHasNoEffect) {
  Revocations r;
  Chain chain = Valid(3);
  for (int i = 0; i < 3; ++i) r.RevokeLink(LinkHash(chain.links(i)), x_);
  r.RevokeAgent(kAgentId, x_);
  VerifyContext ctx = Context(b_);
  r.Use(&ctx);
  EXPECT_TRUE(Verify(chain, ctx).ok());
}

TEST_F(ChainTest, RevocationByAPrincipalBelowTheLinkHasNoEffect) {
  // B appears in the chain only below link 0 (as audience of link 2): it cannot cut P's link.
  Revocations r;
  Chain chain = Valid(3);
  r.RevokeLink(LinkHash(chain.links(0)), b_);
  r.RevokeLink(LinkHash(chain.links(1)), b_);
  VerifyContext ctx = Context(b_);
  r.Use(&ctx);
  EXPECT_TRUE(Verify(chain, ctx).ok());
}

TEST_F(ChainTest, LinkRenouncedByItsAudience) {
  Revocations r;
  Chain chain = Valid(3);
  r.RevokeLink(LinkHash(chain.links(1)), a_);
  VerifyContext ctx = Context(b_);
  r.Use(&ctx);
  EXPECT_REFUSED(Verify(chain, ctx), kRevoked, 1, kPermissionDenied);
}

TEST_F(ChainTest, RevokedLinkCutsEveryChainThroughIt) {
  Revocations r;
  Chain chain = Valid(4);
  r.RevokeLink(LinkHash(chain.links(2)), q_);
  VerifyContext ctx = Context(c_);
  r.Use(&ctx);
  EXPECT_REFUSED(Verify(chain, ctx), kRevoked, 2, kPermissionDenied);
}

// Regression: an agent revocation by a principal of the chain counts when that principal is a
// link's audience too — the vault doing the check (the last audience) can stop an agent from
// arriving. It used to be asked only about issuers.
TEST_F(ChainTest, AgentRevokedByTheLastAudience) {
  Revocations r;
  r.RevokeAgent(kAgentId, b_);
  VerifyContext ctx = Context(b_);
  r.Use(&ctx);
  EXPECT_REFUSED(Verify(Valid(3), ctx), kRevoked, 2, kPermissionDenied);
}

// --- the link cache ------------------------------------------------------------------------------

TEST_F(ChainTest, CachedChainCostsNoSignatureCheck) {
  LinkCache cache;
  Chain chain = Valid(3);
  absl::StatusOr<VerifiedChain> first = Verify(chain, Context(b_), &cache);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->signatures_checked, 3);
  EXPECT_EQ(cache.size(), 3u);
  absl::StatusOr<VerifiedChain> second = Verify(chain, Context(b_), &cache);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->signatures_checked, 0);
  EXPECT_EQ(second->link_hashes, first->link_hashes);
}

TEST_F(ChainTest, ExtendingACachedChainCostsOneSignatureCheck) {
  LinkCache cache;
  Chain four = Valid(4);
  Chain three;
  for (int i = 0; i < 3; ++i) *three.add_links() = four.links(i);
  ASSERT_TRUE(Verify(three, Context(b_), &cache).ok());
  absl::StatusOr<VerifiedChain> v = Verify(four, Context(c_), &cache);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->signatures_checked, 1);
}

TEST_F(ChainTest, CachedPrefixDoesNotExcuseATamperedLink) {
  LinkCache cache;
  Chain four = Valid(4);
  Chain three;
  for (int i = 0; i < 3; ++i) *three.add_links() = four.links(i);
  ASSERT_TRUE(Verify(three, Context(b_), &cache).ok());

  // A tampered new link after the cached prefix.
  Chain bad_tail = four;
  (*bad_tail.mutable_links(3)->mutable_signature())[5] ^= 0x01;
  EXPECT_REFUSED(Verify(bad_tail, Context(c_), &cache), kBadSignature, 3, kUnauthenticated);
  EXPECT_FALSE(cache.Contains(LinkHash(bad_tail.links(3))));
  // A tampered link inside the cached prefix: its hash changes, so it is checked again.
  Chain bad_middle = three;
  (*bad_middle.mutable_links(1)->mutable_signature())[40] ^= 0x01;
  EXPECT_REFUSED(Verify(bad_middle, Context(b_), &cache), kBadSignature, 1, kUnauthenticated);
  // The same with a payload byte: the agent id "agent-7f3a" becomes "agent-6f3a".
  bad_middle = three;
  std::string payload = bad_middle.links(1).payload();
  const size_t at = payload.find(kAgentId);
  ASSERT_NE(at, std::string::npos);
  payload[at + 6] ^= 0x01;
  ASSERT_TRUE(ParseLinkPayload(payload).ok());
  bad_middle.mutable_links(1)->set_payload(payload);
  EXPECT_REFUSED(Verify(bad_middle, Context(b_), &cache), kBadSignature, 1, kUnauthenticated);
  // And the untouched chain still verifies from the cache.
  absl::StatusOr<VerifiedChain> again = Verify(three, Context(b_), &cache);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->signatures_checked, 0);
}

TEST_F(ChainTest, CacheDoesNotSkipTheOtherChecks) {
  LinkCache cache;
  Chain chain = Valid(3);
  ASSERT_TRUE(Verify(chain, Context(b_), &cache).ok());
  EXPECT_REFUSED(Verify(chain, Context(c_), &cache), kWrongAudience, 2, kPermissionDenied);
  VerifyContext later = Context(b_);
  later.now = now_ + absl::Hours(24 * 9);  // link 2 (8 days) is over, link 1 (9 days) is not
  EXPECT_REFUSED(Verify(chain, later, &cache), kExpired, 2, kPermissionDenied);
  Revocations r;
  r.RevokeLink(LinkHash(chain.links(0)), p_);
  VerifyContext revoked = Context(b_);
  r.Use(&revoked);
  EXPECT_REFUSED(Verify(chain, revoked, &cache), kRevoked, 0, kPermissionDenied);
}

TEST_F(ChainTest, BoundedCacheStaysCorrect) {
  LinkCache cache(2);
  Chain chain = Valid(4);
  for (int round = 0; round < 3; ++round) {
    absl::StatusOr<VerifiedChain> v = Verify(chain, Context(c_), &cache);
    ASSERT_TRUE(v.ok()) << v.status();
    EXPECT_LE(cache.size(), 2u);
    EXPECT_GE(v->signatures_checked, 2);  // at most two of the four can be cached
  }
}

TEST_F(ChainTest, ErrorNamesAndPayloads) {
  EXPECT_EQ(ChainErrorName(ChainError::kRevoked), "REVOKED");
  EXPECT_EQ(ChainErrorOf(absl::OkStatus()), ChainError::kNone);
  EXPECT_EQ(FailingLink(absl::InternalError("x")), -1);
  absl::StatusOr<VerifiedChain> v = Verify(Valid(3), Context(c_));
  ASSERT_FALSE(v.ok());
  EXPECT_TRUE(absl::StrContains(v.status().message(), "link 2")) << v.status();
}

}  // namespace
}  // namespace vault::capability
