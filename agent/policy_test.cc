#include "agent/policy.h"

#include "absl/strings/str_cat.h"
#include "agent/agent_store.h"
#include "capability/grant.h"
#include "common/testing/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vault::agent {
namespace {

using ::testing::HasSubstr;

class PolicyTest : public ::testing::Test {
 protected:
  std::unique_ptr<storage::Database> OpenDb() {
    std::vector<storage::ColumnFamilySpec> cfs = TrustPolicy::ColumnFamilies();
    for (auto& cf : AgentStore::ColumnFamilies()) cfs.push_back(cf);
    auto db = storage::Database::Open({.path = tmp_.path() + "/db"}, cfs);
    EXPECT_TRUE(db.ok()) << db.status();
    return *std::move(db);
  }
  static std::string Key(char seed) {
    return capability::PrivateKey::FromRawSeed(std::string(32, seed))->public_key().ToText();
  }
  common::testing::TempDir tmp_{"policy_test"};
};

std::vector<std::string> GrantStrings(
    const google::protobuf::RepeatedPtrField<vault::v1::Grant>& g) {
  std::vector<std::string> out;
  for (const auto& x : g) out.push_back(capability::GrantToString(x));
  return out;
}

TEST_F(PolicyTest, PresetsHaveExactGrants) {
  auto db = OpenDb();
  auto policy = TrustPolicy::Open(db.get(), {.vaults = {"vault-c", "vault-b"}});
  ASSERT_TRUE(policy.ok());
  vault::v1::TrustEntry e;
  e.set_principal(Key(1));
  e.set_preset("full");
  absl::StatusOr<vault::v1::TrustEntry> stored = (*policy)->Trust(e);
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_EQ(GrantStrings(stored->ceiling()),
            (std::vector<std::string>{"read /vault", "cas-read", "receive *", "write /vault",
                                      "cas-write", "send *", "spawn", "migrate vault-b vault-c"}));
  e.set_preset("read-only");
  stored = (*policy)->Trust(e);
  ASSERT_TRUE(stored.ok());
  EXPECT_EQ(GrantStrings(stored->ceiling()),
            (std::vector<std::string>{"read /vault", "cas-read", "receive *"}));
  e.set_preset("everything");
  EXPECT_EQ((*policy)->Trust(e).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(PolicyTest, ACeilingRefusalNamesTheGrantsTheCeilingAndTheFix) {
  auto db = OpenDb();
  const std::string admin = Key(9);
  auto policy = TrustPolicy::Open(db.get(), {.admins = {admin}, .vaults = {"vault-b"}});
  ASSERT_TRUE(policy.ok()) << policy.status();
  google::protobuf::RepeatedPtrField<vault::v1::Grant> grants;
  grants.Add()->set_kind(vault::v1::Grant::CAS_READ);
  vault::v1::Grant* net = grants.Add();
  net->set_kind(vault::v1::Grant::NETWORK);
  net->set_host("example.com");
  net->set_port(443);
  std::optional<vault::v1::TrustEntry> admin_entry =
      (*policy)->Lookup(*capability::PublicKey::FromText(admin));
  ASSERT_TRUE(admin_entry.has_value());
  EXPECT_EQ(CeilingRefusal(grants, *admin_entry),
            "the grant network example.com:443 is above the ceiling of this vault's "
            "administrators (agents.admins in its config: the preset \"full\": read /vault; "
            "cas-read; receive *; write /vault; cas-write; send *; spawn; migrate vault-b). Spawn "
            "it as a key trusted with them: vaultctl policy trust KEY --ceiling ...");
  vault::v1::TrustEntry e;
  e.set_principal(Key(1));
  e.set_preset("read-only");
  absl::StatusOr<vault::v1::TrustEntry> stored = (*policy)->Trust(e);
  ASSERT_TRUE(stored.ok()) << stored.status();
  grants.Add()->set_kind(vault::v1::Grant::CAS_WRITE);
  EXPECT_EQ(CeilingRefusal(grants, *stored),
            absl::StrCat("the grants network example.com:443; cas-write are above the ceiling of ",
                         Key(1),
                         " here (the preset \"read-only\", set by vaultctl policy trust; vaultctl "
                         "policy ls shows it). Widen it: vaultctl policy trust ",
                         Key(1), " --ceiling ..."));
  // An administrator added by policy trust has its own ceiling, which can be widened.
  e.set_principal(Key(2));
  e.set_admin(true);
  e.clear_preset();
  e.add_ceiling()->set_kind(vault::v1::Grant::CAS_READ);
  stored = (*policy)->Trust(e);
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_EQ(CeilingRefusal(grants, *stored),
            absl::StrCat("the grants network example.com:443; cas-write are above the ceiling of ",
                         Key(2),
                         " here (the grants cas-read, set by vaultctl policy trust; vaultctl "
                         "policy ls shows it). Widen it: vaultctl policy trust ",
                         Key(2), " --ceiling ..."));
}

TEST_F(PolicyTest, EntriesSurviveAReopenAndUntrustRemovesThem) {
  {
    auto db = OpenDb();
    auto policy = TrustPolicy::Open(db.get(), {});
    vault::v1::TrustEntry e;
    e.set_principal(Key(2));
    e.mutable_quota()->set_max_agents(3);
    vault::v1::Grant* g = e.add_ceiling();
    g->set_kind(vault::v1::Grant::READ);
    g->set_path("/vault/pub");
    ASSERT_TRUE((*policy)->Trust(e).ok());
  }
  auto db = OpenDb();
  auto policy = TrustPolicy::Open(db.get(), {});
  auto key = capability::PublicKey::FromText(Key(2));
  std::optional<vault::v1::TrustEntry> found = (*policy)->Lookup(*key);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->quota().max_agents(), 3u);
  EXPECT_EQ(GrantStrings(found->ceiling()), (std::vector<std::string>{"read /vault/pub"}));
  ASSERT_TRUE((*policy)->Untrust(Key(2)).ok());
  EXPECT_FALSE((*policy)->Lookup(*key).has_value());
  EXPECT_EQ((*policy)->Untrust(Key(2)).code(), absl::StatusCode::kNotFound);
}

TEST_F(PolicyTest, ConfigAdminsAreTrustedAndCannotBeChangedHere) {
  auto db = OpenDb();
  auto policy = TrustPolicy::Open(db.get(), {.admins = {Key(3)}});
  ASSERT_TRUE(policy.ok());
  auto key = capability::PublicKey::FromText(Key(3));
  std::optional<vault::v1::TrustEntry> found = (*policy)->Lookup(*key);
  ASSERT_TRUE(found.has_value());
  EXPECT_TRUE(found->admin());
  EXPECT_EQ(found->preset(), "full");
  absl::Status s = (*policy)->Untrust(Key(3));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()), HasSubstr("agents.admins"));
  vault::v1::TrustEntry e;
  e.set_principal(Key(3));
  e.set_preset("read-only");
  EXPECT_EQ((*policy)->Trust(e).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(PolicyTest, BadEntriesAreRefused) {
  auto db = OpenDb();
  auto policy = TrustPolicy::Open(db.get(), {});
  vault::v1::TrustEntry e;
  e.set_principal("ed25519:zz");
  e.set_preset("full");
  EXPECT_EQ((*policy)->Trust(e).status().code(), absl::StatusCode::kInvalidArgument);
  e.set_principal(Key(4));
  e.clear_preset();
  EXPECT_THAT(std::string((*policy)->Trust(e).status().message()),
              HasSubstr("a ceiling is required"));
  vault::v1::Grant* g = e.add_ceiling();
  g->set_kind(vault::v1::Grant::READ);
  g->set_path("/vault/../etc");
  EXPECT_EQ((*policy)->Trust(e).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(PolicyTest, AgentStoreKeepsRecordsAndNumbersLogLines) {
  auto db = OpenDb();
  AgentStore store(db.get());
  vault::v1::AgentRecord r;
  r.set_id("a-1");
  r.set_state(vault::v1::RUNNING);
  ASSERT_TRUE(store.Put(r).ok());
  EXPECT_EQ(store.Get("a-1")->state(), vault::v1::RUNNING);
  EXPECT_EQ(store.Get("a-2").status().code(), absl::StatusCode::kNotFound);
  for (int i = 0; i < 5; ++i) {
    vault::v1::AgentLogLine line;
    line.set_message(std::to_string(i));
    ASSERT_TRUE(store.AppendLog("a-1", line).ok());
  }
  std::vector<vault::v1::AgentLogLine> lines = store.ReadLogs("a-1", 3, 10);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0].seq(), 3u);
  EXPECT_EQ(lines[0].message(), "2");
  EXPECT_TRUE(store.ReadLogs("a-10", 0, 10).empty());  // no prefix confusion
  EXPECT_TRUE(store.WaitForLogs("a-1", 5, absl::Now()));
  EXPECT_FALSE(store.WaitForLogs("a-1", 6, absl::Now() + absl::Milliseconds(20)));
}

}  // namespace
}  // namespace vault::agent
