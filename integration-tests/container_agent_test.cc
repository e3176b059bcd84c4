// Container agents end to end (docs/containers.md): a real vaultd imports the repository's example
// image (sdk/cpp/make-image.sh: the static C++ SDK one-shot example as the whole root) and runs it
// under runc as a `(sandbox container)` agent, driven by the real vaultctl. The SDK works
// unchanged inside the image: the agent reads its input from the CAS over fd 3 and stores its
// result.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "integration-tests/agent_fixture.h"
#include "integration-tests/harness.h"

namespace vault::integration {
namespace {

using ::testing::HasSubstr;

class ContainerAgentTest : public AgentTest {
 protected:
  void SetUp() override {
    AgentTest::SetUp();
    MakeFoldersSearchable();
    ASSERT_NO_FATAL_FAILURE(StartVault("ct"));
    if (IsSkipped()) return;
    RunResult status = Ctl({"status"});
    if (!absl::StrContains(status.out, "container: runc version")) {
      GTEST_SKIP() << "container agents are unavailable here: " << status.out;
    }
    RunResult imported =
        Ctl({"image", "import", VAULT_IT_EXAMPLE_IMAGES "/vault-example-one_shot.oci.tar"});
    ASSERT_EQ(imported.exit_code, kExitOk) << imported;
  }

  // A spec for the example image with `extra` forms.
  std::string Spec(const std::string& name, const std::string& extra) {
    const std::string path = absl::StrCat(root(), "/", name, ".scm");
    EXPECT_TRUE(WriteFile(path, absl::StrCat("(agent\n  (purpose \"uppercase, in a container\")\n"
                                             "  (image \"vault-example-one_shot\")\n",
                                             extra,
                                             "  (capabilities (cas-read) (cas-write))\n"
                                             "  (constraints (max-runtime 30)))\n"))
                    .ok());
    return path;
  }

  std::string PutInput(const std::string& text) {
    const std::string file = absl::StrCat(root(), "/input.txt");
    EXPECT_TRUE(WriteFile(file, text).ok());
    RunResult put = Ctl({"cas", "put", file});
    EXPECT_EQ(put.exit_code, kExitOk) << put;
    return Trim(put.out.substr(0, put.out.find(' ')));  // "sha256:<hex>/<size>  FILE"
  }
};

TEST_F(ContainerAgentTest, TheExampleImageRunsTheCppSdkUnchanged) {
  const std::string input = PutInput("hello from a container");
  const std::string id = Spawn(Spec("upper", ""), "", input);
  ASSERT_FALSE(id.empty());
  const std::string status = WaitEnded(id);
  EXPECT_EQ(JsonField(status, "state"), "completed") << status << Ctl({"agent", "logs", id});
  EXPECT_EQ(JsonField(status, "exit_code"), "0");
  EXPECT_EQ(JsonField(status, "result"), DigestText("HELLO FROM A CONTAINER"));
  RunResult get = Ctl({"cas", "get", DigestText("HELLO FROM A CONTAINER")});
  EXPECT_EQ(get.exit_code, kExitOk) << get;
  EXPECT_EQ(get.out, "HELLO FROM A CONTAINER");
  // The agent's code is the image's manifest (what its chain binds and the vault ran), and its
  // journey says which image it is.
  RunResult image = Ctl({"-o", "json", "image", "inspect", "vault-example-one_shot"});
  ASSERT_EQ(image.exit_code, kExitOk) << image;
  const std::string image_id = JsonField(image.out, "id").value_or("?");
  RunResult journey = Ctl({"-o", "json", "agent", "journey", id});
  ASSERT_EQ(journey.exit_code, kExitOk) << journey;
  EXPECT_THAT(journey.out, HasSubstr(absl::StrCat(R"("image":")", image_id, R"(")"))) << journey;
}

TEST_F(ContainerAgentTest, ACommandTheImageLacksOrAnUnknownImageIsAClearError) {
  RunResult missing =
      Ctl({"agent", "spawn", Spec("nope", "  (command \"/bin/nope\")\n"), "--as", admin_key_});
  EXPECT_NE(missing.exit_code, kExitOk);
  EXPECT_THAT(missing.err, HasSubstr("the image has no program /bin/nope")) << missing;

  const std::string path = absl::StrCat(root(), "/unknown.scm");
  ASSERT_TRUE(WriteFile(path, "(agent (purpose \"p\") (image \"no-such-image\"))\n").ok());
  RunResult unknown = Ctl({"agent", "spawn", path, "--as", admin_key_});
  EXPECT_EQ(unknown.exit_code, 3) << unknown;  // not found
  EXPECT_THAT(unknown.err, HasSubstr("(image \"no-such-image\")")) << unknown;
  EXPECT_THAT(unknown.err, HasSubstr("vaultctl image import")) << unknown;
}

}  // namespace
}  // namespace vault::integration
