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

TEST(AgentAuthority, AFullCacheStillAnswersCorrectly) {
  AgentAuthority a({Path(Grant::READ, "/vault/pub")}, /*max_cached=*/2);
  for (int i = 0; i < 10; ++i) {
    EXPECT_TRUE(a.Allows(Path(Grant::READ, "/vault/pub/f" + std::to_string(i))));
    EXPECT_FALSE(a.Allows(Path(Grant::READ, "/vault/priv/f" + std::to_string(i))));
  }
}

}  // namespace
}  // namespace vault::capability
