// A container agent crossing a federation (docs/containers.md, "An image moves with its agent"):
// three real vaultds a, b, c (mutual TLS on loopback). The repository's reactive example image
// is imported on a and on c, not on b. The agent moves a -> b -> c by operator migration: b,
// lacking the image, receives its blobs with the agent's state and imports it from its CAS; c,
// which has it, receives the state alone. On each vault the agent answers a query.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "integration-tests/migration_fixture.h"

namespace vault::integration {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class ContainerMigrationTest : public MigrationTest {
 protected:
  // Container agents' host ids reach the data folders through these.
  void BeforeVaultdsStart() override {
    ASSERT_EQ(chmod(root().c_str(), 0711), 0);
    for (const char* v : {"a", "b", "c"}) ASSERT_EQ(chmod(V(v).dir.c_str(), 0711), 0);
  }

  // The line vaultd logs for a hop of `id` from `from` to `to`.
  std::string HopLine(const std::string& from, const std::string& id, const std::string& to) {
    const std::string log = ReadFile(M(from).vaultd->log_path()).value_or("");
    for (absl::string_view line : absl::StrSplit(log, '\n')) {
      if (absl::StrContains(line, absl::StrCat("agent ", id, ": handed to ", to, " "))) {
        return std::string(line);
      }
    }
    return "no hop line in " + from + "'s log";
  }

  // The agent answers an operator query on `vault` (the reactive example's "vault.query").
  void ExpectAnswers(const std::string& vault, const std::string& id) {
    RunResult q = Ctl(vault, {"agent", "query", id, "how many?", "--timeout", "10"});
    EXPECT_EQ(q.exit_code, kExitOk) << q;
  }
};

TEST_F(ContainerMigrationTest, AContainerAgentCrossesTheFederationItsImageOncePerLink) {
  if (geteuid() != 0 || access("/usr/sbin/runc", X_OK) != 0) {
    GTEST_SKIP() << "container agents need root and runc";
  }
  for (const char* v : {"a", "b", "c"}) {
    ASSERT_THAT(Ctl(v, {"status"}).out, HasSubstr("container: runc version"));
  }
  ASSERT_NO_FATAL_FAILURE(TrustOwnerEverywhere());
  for (const char* v : {"a", "b", "c"}) {
    ASSERT_NO_FATAL_FAILURE(Trust(v, owner_key_, {"receive:*", "migrate:a,b,c", "read:/vault"}));
  }
  const std::string image_tar = VAULT_IT_EXAMPLE_IMAGES "/vault-example-reactive.oci.tar";
  std::string image;
  for (const char* v : {"a", "c"}) {
    RunResult imported = Ctl(v, {"-o", "json", "image", "import", image_tar});
    ASSERT_EQ(imported.exit_code, kExitOk) << imported;
    image = JsonField(imported.out, "id").value_or("?");
  }
  EXPECT_THAT(Ctl("b", {"-o", "json", "image", "ls"}).out, Not(HasSubstr(image)));

  const std::string spec = root() + "/reactive.scm";
  ASSERT_TRUE(WriteFile(spec,
                        "(agent (purpose \"answers queries wherever it is\")\n"
                        "  (image \"vault-example-reactive\")\n"
                        "  (capabilities (receive (from \"*\")) (migrate (vaults a b c)))\n"
                        "  (constraints (max-runtime 300) (max-migrations 3)))\n")
                  .ok());
  const std::string id = Spawn("a", spec, owner_key_, std::string("answered=0"));
  ASSERT_FALSE(id.empty());
  WaitRunning("a", id);
  ExpectAnswers("a", id);

  RunResult hop = Ctl("a", {"-o", "json", "migrate", id, "--to", "b"});
  ASSERT_EQ(hop.exit_code, kExitOk) << hop;
  WaitRunning("b", id);
  ExpectAnswers("b", id);
  // b imported the image from the blobs the hop brought: manifest, config and layer, with the
  // state.
  RunResult b_images = Ctl("b", {"-o", "json", "image", "ls"});
  EXPECT_THAT(b_images.out, HasSubstr(image));
  EXPECT_THAT(b_images.out, HasSubstr(R"("source_format":"cas")"));
  EXPECT_THAT(HopLine("a", id, "b"), HasSubstr(" and 4 objects "));

  hop = Ctl("b", {"-o", "json", "migrate", id, "--to", "c"});
  ASSERT_EQ(hop.exit_code, kExitOk) << hop;
  WaitRunning("c", id);
  ExpectAnswers("c", id);
  // c had the image: the state alone crossed.
  EXPECT_THAT(HopLine("b", id, "c"), HasSubstr(" and 1 objects "));
  // Its journey, read on c, names the image it runs.
  RunResult journey = Ctl("c", {"-o", "json", "agent", "journey", id});
  EXPECT_THAT(journey.out, HasSubstr(absl::StrCat(R"("image":")", image, R"(")"))) << journey;
}

}  // namespace
}  // namespace vault::integration
