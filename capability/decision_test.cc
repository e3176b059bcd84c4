#include "capability/decision.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace vault::capability {
namespace {

using vault::v1::Grant;

Grant Path(Grant::Kind kind, const std::string& path) {
  Grant g;
  g.set_kind(kind);
  g.set_path(path);
  return g;
}

TEST(AgentAuthority, AllowsWhatItsGrantsCoverAndNothingElse) {
  AgentAuthority a({Path(Grant::READ, "/vault/pub"), Path(Grant::WRITE, "/vault/pub/out")});
  EXPECT_TRUE(a.Allows(Path(Grant::READ, "/vault/pub/prices.csv")));
  EXPECT_TRUE(a.Allows(Path(Grant::WRITE, "/vault/pub/out/result")));
  EXPECT_FALSE(a.Allows(Path(Grant::READ, "/vault/public/secret")));  // sibling, not child
  EXPECT_FALSE(a.Allows(Path(Grant::WRITE, "/vault/pub/other")));
  EXPECT_FALSE(a.Allows(Path(Grant::READ, "/vault/pub/../secret")));  // invalid: never allowed
  // The second time the answers come from the cache, and are the same.
  EXPECT_TRUE(a.Allows(Path(Grant::READ, "/vault/pub/prices.csv")));
  EXPECT_FALSE(a.Allows(Path(Grant::READ, "/vault/public/secret")));
}

// The cache key holds every field of an operation: two URLs under one kind are two decisions
// (a key without the url once let a cached "allowed" answer every URL).
TEST(AgentAuthority, UrlOperationsAreDecidedOneByOne) {
  Grant rss;
  rss.set_kind(Grant::READ);
  rss.set_url("http://127.0.0.1:8080/rss/*");
  AgentAuthority a({rss});
  Grant feed = rss, secret = rss;
  feed.set_url("http://127.0.0.1:8080/rss/feed");
  secret.set_url("http://127.0.0.1:8080/private");
  EXPECT_TRUE(a.Allows(feed));
  EXPECT_FALSE(a.Allows(secret));
  EXPECT_FALSE(a.Allows(secret));  // cached, still its own answer
}

// OperationKey must change with every field of Grant: one added to the message and not to the
// key would make different operations share a cached decision. This fails when Grant grows.
TEST(OperationKey, CoversEveryFieldOfGrant) {
  EXPECT_EQ(Grant::descriptor()->field_count(), 9)
      << "Grant has a new field: add it to OperationKey (capability/decision.cc), then here";
  Grant base;
  base.set_kind(Grant::READ);
  std::string base_key;
  OperationKey(base, &base_key);
  const google::protobuf::Reflection* r = base.GetReflection();
  for (int i = 0; i < Grant::descriptor()->field_count(); ++i) {
    const google::protobuf::FieldDescriptor* f = Grant::descriptor()->field(i);
    Grant changed = base;
    if (f->is_repeated()) {
      r->AddString(&changed, f, "x");
    } else if (f->cpp_type() == google::protobuf::FieldDescriptor::CPPTYPE_STRING) {
      r->SetString(&changed, f, "x");
    } else if (f->cpp_type() == google::protobuf::FieldDescriptor::CPPTYPE_UINT32) {
      r->SetUInt32(&changed, f, 7);
    } else if (f->cpp_type() == google::protobuf::FieldDescriptor::CPPTYPE_ENUM) {
      r->SetEnumValue(&changed, f, Grant::WRITE);
    } else {
      ADD_FAILURE() << "field " << f->name() << " has a type this test does not vary";
      continue;
    }
    std::string key;
    OperationKey(changed, &key);
    EXPECT_NE(key, base_key) << "OperationKey ignores Grant." << f->name();
  }
}

TEST(AgentAuthority, RevokedDeniesEverythingIncludingCachedAnswers) {
  AgentAuthority a({Path(Grant::READ, "/")});
  const Grant op = Path(Grant::READ, "/vault/pub/a");
  ASSERT_TRUE(a.Allows(op));
  a.Revoke();
  EXPECT_TRUE(a.revoked());
  EXPECT_FALSE(a.Allows(op));
  EXPECT_FALSE(a.Allows(Path(Grant::READ, "/b")));
}

TEST(AgentAuthority, KeysDoNotCollideAcrossFields) {
  // Same bytes in different fields must not share a cache entry.
  Grant send;
  send.set_kind(Grant::SEND);
  send.set_agent("a-1");
  AgentAuthority a({send});
  Grant receive;
  receive.set_kind(Grant::RECEIVE);
  receive.set_agent("a-1");
  EXPECT_TRUE(a.Allows(send));
  EXPECT_FALSE(a.Allows(receive));
  std::string k1, k2;
  Grant x = Path(Grant::READ, "ab");
  Grant y;
  y.set_kind(Grant::READ);
  y.set_hash("ab");
  OperationKey(x, &k1);
  OperationKey(y, &k2);
  EXPECT_NE(k1, k2);
}

Grant Message(Grant::Kind kind, const std::string& agent, std::vector<std::string> types) {
  Grant g;
  g.set_kind(kind);
  g.set_agent(agent);
  for (std::string& t : types) g.add_message_types(std::move(t));
  return g;
}

// A decision for one message type must never answer for another: the cache key holds the types.
TEST(AgentAuthority, CachedDecisionsAreKeptPerMessageType) {
  AgentAuthority a({Message(Grant::SEND, "a-1", {"ping"}), Message(Grant::RECEIVE, "*", {})});
  EXPECT_TRUE(a.Allows(Message(Grant::SEND, "a-1", {"ping"})));
  EXPECT_FALSE(a.Allows(Message(Grant::SEND, "a-1", {"stop"})));
  EXPECT_FALSE(a.Allows(Message(Grant::SEND, "a-1", {})));  // any type: more than "ping"
  // Again, from the cache, in the other order.
  EXPECT_FALSE(a.Allows(Message(Grant::SEND, "a-1", {"stop"})));
  EXPECT_TRUE(a.Allows(Message(Grant::SEND, "a-1", {"ping"})));
  EXPECT_FALSE(a.Allows(Message(Grant::SEND, "a-1", {})));

  AgentAuthority b({Message(Grant::SEND, "a-1", {"stop"})});
  EXPECT_FALSE(b.Allows(Message(Grant::SEND, "a-1", {"ping"})));
  EXPECT_TRUE(b.Allows(Message(Grant::SEND, "a-1", {"stop"})));

  std::string k1, k2, k3;
  OperationKey(Message(Grant::SEND, "a-1", {"ping"}), &k1);
  OperationKey(Message(Grant::SEND, "a-1", {"stop"}), &k2);
  OperationKey(Message(Grant::SEND, "a-1", {}), &k3);
  EXPECT_NE(k1, k2);
  EXPECT_NE(k1, k3);
  // One list's entries never pass for the other's.
  Grant vaults;
  vaults.set_kind(Grant::SEND);
  vaults.add_vaults("ping");
  std::string k4;
  OperationKey(vaults, &k4);
  EXPECT_NE(k1, k4);
}

TEST(AgentAuthority, AFullCacheStillAnswersCorrectly) {
  AgentAuthority a({Path(Grant::READ, "/vault/pub")}, /*max_cached=*/2);
  for (int i = 0; i < 10; ++i) {
    EXPECT_TRUE(a.Allows(Path(Grant::READ, "/vault/pub/f" + std::to_string(i))));
    EXPECT_FALSE(a.Allows(Path(Grant::READ, "/vault/priv/f" + std::to_string(i))));
  }
}

}  // namespace
}  // namespace vault::capability
