#include "agent/effect_log.h"

#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "capability/signing_domains.h"
#include "common/sha256.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vault::agent {
namespace {

using ::testing::HasSubstr;
using vault::v1::HostRequest;
using vault::v1::HostResponse;

capability::PrivateKey Key() { return *capability::PrivateKey::Generate(); }

const EffectLog::Owner kOwner{"a-1", std::string(32, 'c'), "ed25519:00ff"};

HostRequest Get(const std::string& digest) {
  HostRequest r;
  r.set_call_id(7);
  r.mutable_cas_get()->mutable_digest()->set_sha256(digest);
  return r;
}

HostResponse Answer(const std::string& data) {
  HostResponse r;
  r.set_call_id(7);
  r.mutable_cas_get()->set_data(data);
  return r;
}

// A log of three calls, written out by `key`.
std::string ThreeCalls(const capability::PrivateKey& key, EffectLog* out = nullptr) {
  EffectLog log(kOwner, std::string("spawned with this"));
  log.Append("cas.get", "vault-a", RequestDigest(Get("one")), Answer("first"));
  log.Append("cas.get", "vault-a", RequestDigest(Get("two")), Answer("second"));
  log.Append("cas.get", "vault-b", RequestDigest(Get("three")), Answer("third"));
  if (out != nullptr) *out = log;
  return *log.WriteOut(key, "vault-b");
}

vault::v1::EffectLog Parse(const std::string& object) {
  vault::v1::EffectLog in;
  EXPECT_TRUE(in.ParseFromString(object.substr(kEffectLogMagic.size())));
  return in;
}

std::string Object(const vault::v1::EffectLog& in) {
  return absl::StrCat(kEffectLogMagic, in.SerializeAsString());
}

auto Trusting(const capability::PrivateKey& key) {
  return [raw = key.public_key().raw()](absl::string_view k) { return k == raw; };
}

TEST(EffectLog, ReadsBackWhatItWroteOut) {
  capability::PrivateKey key = Key();
  EffectLog original(kOwner, std::nullopt);
  std::string object = ThreeCalls(key, &original);
  ASSERT_TRUE(IsEffectLog(object));
  absl::StatusOr<EffectLog> back = EffectLog::Read(object, kOwner, Trusting(key));
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->size(), 3u);
  EXPECT_EQ(back->head(), original.head());
  EXPECT_TRUE(back->has_initial_state());
  EXPECT_EQ(back->initial_state(), "spawned with this");
  EXPECT_EQ(back->node(1).op(), "cas.get");
  EXPECT_EQ(back->node(2).vault(), "vault-b");
  EXPECT_EQ(back->node(1).request_sha256(), RequestDigest(Get("two")));
  HostResponse r;
  ASSERT_TRUE(r.ParseFromString(back->node(1).response()));
  EXPECT_EQ(r.cas_get().data(), "second");
  EXPECT_EQ(r.call_id(), 0u);  // call ids are not part of the log
}

TEST(EffectLog, TheCallIdIsNotPartOfARequestsDigest) {
  HostRequest a = Get("x"), b = Get("x");
  b.set_call_id(99);
  EXPECT_EQ(RequestDigest(a), RequestDigest(b));
  EXPECT_NE(RequestDigest(a), RequestDigest(Get("y")));
}

TEST(EffectLog, AnExtraNodeGoesIntoTheObjectOnly) {
  capability::PrivateKey key = Key();
  EffectLog log(kOwner, std::nullopt);
  log.Append("log", "vault-a", "r0", HostResponse());
  HostRequest migrate;
  migrate.mutable_migrate()->set_vault("vault-b");
  EffectLog::Extra extra{.op = "migrate", .request_sha256 = RequestDigest(migrate), .response = {}};
  extra.response.mutable_migrate()->set_vault("vault-b");
  absl::StatusOr<std::string> object = log.WriteOut(key, "vault-a", &extra);
  ASSERT_TRUE(object.ok());
  EXPECT_EQ(log.size(), 1u);
  absl::StatusOr<EffectLog> back = EffectLog::Read(*object, kOwner, Trusting(key));
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->size(), 2u);
  EXPECT_EQ(back->node(1).op(), "migrate");
  EXPECT_FALSE(back->has_initial_state());
}

TEST(EffectLog, DroppingTheLastNodeGoesBackToTheHeadBeforeIt) {
  capability::PrivateKey key = Key();
  EffectLog log(kOwner, std::nullopt);
  log.Append("log", "vault-a", "r0", HostResponse());
  const std::string head = log.head();
  log.Append("migrate", "vault-a", "r1", HostResponse());
  log.DropLast();
  EXPECT_EQ(log.size(), 1u);
  EXPECT_EQ(log.head(), head);
  absl::StatusOr<EffectLog> back =
      EffectLog::Read(*log.WriteOut(key, "vault-a"), kOwner, Trusting(key));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->size(), 1u);
}

TEST(EffectLog, AChangedResultIsRefused) {
  capability::PrivateKey key = Key();
  vault::v1::EffectLog in = Parse(ThreeCalls(key));
  HostResponse r = Answer("FORGED");
  r.set_call_id(0);
  in.mutable_nodes(1)->set_response(r.SerializeAsString());
  absl::StatusOr<EffectLog> back = EffectLog::Read(Object(in), kOwner, Trusting(key));
  EXPECT_EQ(back.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(back.status().message(),
            "effect log: effect 1 (cas.get)'s result does not match its digest (it was changed)");
}

TEST(EffectLog, AChangedResultWithItsDigestBreaksTheChain) {
  capability::PrivateKey key = Key();
  vault::v1::EffectLog in = Parse(ThreeCalls(key));
  HostResponse r = Answer("FORGED");
  r.set_call_id(0);
  in.mutable_nodes(1)->set_response(r.SerializeAsString());
  in.mutable_nodes(1)->set_response_sha256(common::Sha256::Hash(in.nodes(1).response()));
  absl::StatusOr<EffectLog> back = EffectLog::Read(Object(in), kOwner, Trusting(key));
  EXPECT_EQ(back.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(back.status().message(),
            "effect log: effect 2 (cas.get) does not follow effect 1 (the chain is broken there)");
}

TEST(EffectLog, TheLastResultChangedShowsInTheHead) {
  capability::PrivateKey key = Key();
  vault::v1::EffectLog in = Parse(ThreeCalls(key));
  HostResponse r = Answer("FORGED");
  in.mutable_nodes(2)->set_response(r.SerializeAsString());
  in.mutable_nodes(2)->set_response_sha256(common::Sha256::Hash(in.nodes(2).response()));
  absl::StatusOr<EffectLog> back = EffectLog::Read(Object(in), kOwner, Trusting(key));
  EXPECT_EQ(back.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(back.status().message(), HasSubstr("is not its chain's"));
}

// A forger who rebuilds the whole chain after changing a result still lacks the vault's key.
TEST(EffectLog, ARebuiltChainFailsTheSignature) {
  capability::PrivateKey key = Key();
  EffectLog forged(kOwner, std::string("spawned with this"));
  forged.Append("cas.get", "vault-a", RequestDigest(Get("one")), Answer("first"));
  forged.Append("cas.get", "vault-a", RequestDigest(Get("two")), Answer("FORGED"));
  forged.Append("cas.get", "vault-b", RequestDigest(Get("three")), Answer("third"));
  vault::v1::EffectLog in = Parse(*forged.WriteOut(Key(), "vault-b"));
  vault::v1::EffectLog real = Parse(ThreeCalls(key));
  in.set_signer(real.signer());
  in.set_signature(real.signature());
  absl::StatusOr<EffectLog> back = EffectLog::Read(Object(in), kOwner, Trusting(key));
  EXPECT_EQ(back.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(back.status().message(),
            "effect log: its signature does not verify (changed after it was written out)");
}

TEST(EffectLog, AStrangersSignatureIsRefused) {
  capability::PrivateKey stranger = Key();
  std::string object = ThreeCalls(stranger);
  absl::StatusOr<EffectLog> back = EffectLog::Read(object, kOwner, Trusting(Key()));
  EXPECT_EQ(back.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(back.status().message(),
              HasSubstr(absl::StrCat("signed by ", stranger.public_key().ToText(),
                                     ", which is neither this vault nor a member")));
}

TEST(EffectLog, AnotherAgentsCodesOrPrincipalsLogIsRefused) {
  capability::PrivateKey key = Key();
  const std::string object = ThreeCalls(key);
  EffectLog::Owner other = kOwner;
  other.agent_id = "a-2";
  EXPECT_EQ(EffectLog::Read(object, other, Trusting(key)).status().message(),
            "effect log: it is agent a-1's, not a-2's");
  other = kOwner;
  other.code_sha256 = std::string(32, 'd');
  EXPECT_EQ(
      EffectLog::Read(object, other, Trusting(key)).status().message(),
      absl::StrCat(
          "effect log: it is of the code sha256:", absl::BytesToHexString(std::string(32, 'c')),
          ", not of this agent's sha256:", absl::BytesToHexString(std::string(32, 'd'))));
  other = kOwner;
  other.principal = "ed25519:0100";
  EXPECT_EQ(EffectLog::Read(object, other, Trusting(key)).status().message(),
            "effect log: it is of an agent of ed25519:00ff, not of ed25519:0100");
}

TEST(EffectLog, ReorderedOrDroppedNodesAreRefused) {
  capability::PrivateKey key = Key();
  vault::v1::EffectLog in = Parse(ThreeCalls(key));
  in.mutable_nodes()->SwapElements(0, 1);
  EXPECT_EQ(EffectLog::Read(Object(in), kOwner, Trusting(key)).status().message(),
            "effect log: node 0 says it is effect 1");
  vault::v1::EffectLog dropped = Parse(ThreeCalls(key));
  dropped.mutable_nodes()->RemoveLast();
  EXPECT_THAT(EffectLog::Read(Object(dropped), kOwner, Trusting(key)).status().message(),
              HasSubstr("is not its chain's"));
}

TEST(EffectLog, AChangedInitialStateIsRefused) {
  capability::PrivateKey key = Key();
  vault::v1::EffectLog in = Parse(ThreeCalls(key));
  in.set_initial_state("something else");
  EXPECT_EQ(EffectLog::Read(Object(in), kOwner, Trusting(key)).status().message(),
            "effect log: effect 0 (cas.get) does not follow the log's start (its agent or initial "
            "state was changed)");
}

TEST(EffectLog, GarbageIsRefused) {
  auto any = [](absl::string_view) { return true; };
  EXPECT_EQ(EffectLog::Read("hello", kOwner, any).status().message(),
            "effect log: not an effect log (no vault-effect-log/1 header)");
  EXPECT_EQ(EffectLog::Read(absl::StrCat(kEffectLogMagic, "\xff\xff\xff"), kOwner, any)
                .status()
                .message(),
            "effect log: does not parse");
}

TEST(EffectLog, PastItsLimitItStopsAndRefusesToBeWrittenOut) {
  EffectLog log(kOwner, std::nullopt);
  const std::string big(1 << 20, 'x');
  for (int i = 0; i < 70 && !log.overflowed(); ++i) {
    log.Append("cas.get", "vault-a", "r", Answer(big));
  }
  EXPECT_TRUE(log.overflowed());
  EXPECT_LE(log.size(), 64u);
  absl::StatusOr<std::string> out = log.WriteOut(Key(), "vault-a");
  EXPECT_EQ(out.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(out.status().message(), HasSubstr("passed 64 MiB"));
}

}  // namespace
}  // namespace vault::agent

namespace vault::agent {
namespace {

// A log rebased on an execution state (a wasm agent's snapshot) starts from it: its earlier calls
// are gone, the snapshot is covered by the chain's start (so by the signature), and a later
// migrate's extra call (with its own snapshot) rebases the copy written out for the hop.
TEST(EffectLog, RebaseStartsTheLogFromASnapshot) {
  const capability::PrivateKey key = Key();
  EffectLog log(kOwner, std::string("spawned with this"));
  log.Append("cas.get", "vault-a", RequestDigest(Get("one")), Answer("first"));
  const std::string before = log.head();
  log.Rebase("snapshot one");
  EXPECT_EQ(log.size(), 0u);
  EXPECT_TRUE(log.has_snapshot());
  EXPECT_EQ(log.snapshot(), "snapshot one");
  EXPECT_EQ(log.snapshot_sha256(), common::Sha256::Hash("snapshot one"));
  EXPECT_NE(log.head(), before);
  EXPECT_EQ(log.initial_state(), "spawned with this");  // still what get_state answers
  log.Append("cas.get", "vault-a", RequestDigest(Get("two")), Answer("second"));
  absl::StatusOr<std::string> object = log.WriteOut(key, "vault-a");
  ASSERT_TRUE(object.ok()) << object.status();
  absl::StatusOr<EffectLog> back = EffectLog::Read(*object, kOwner, Trusting(key));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->snapshot(), "snapshot one");
  EXPECT_EQ(back->snapshot_sha256(), log.snapshot_sha256());
  ASSERT_EQ(back->size(), 1u);
  EXPECT_EQ(back->head(), log.head());
  // Another snapshot in its place: the chain no longer starts where its nodes say.
  vault::v1::EffectLog in = Parse(*object);
  in.set_snapshot("snapshot two");
  absl::StatusOr<EffectLog> changed = EffectLog::Read(Object(in), kOwner, Trusting(key));
  EXPECT_EQ(changed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(changed.status().message(),
              HasSubstr("effect 0 (cas.get) does not follow the log's start"));
  // A snapshot dropped (has_snapshot false): likewise.
  in = Parse(*object);
  in.set_has_snapshot(false);
  in.clear_snapshot();
  EXPECT_EQ(EffectLog::Read(Object(in), kOwner, Trusting(key)).status().code(),
            absl::StatusCode::kInvalidArgument);
  // The snapshot does not count towards the effects' size limit.
  EffectLog big(kOwner, std::nullopt);
  big.Rebase(std::string(kMaxEffectLogBytes + 10, 'x'));
  EXPECT_FALSE(big.overflowed());
  EXPECT_LT(big.bytes(), size_t{1024});
}

}  // namespace
}  // namespace vault::agent
