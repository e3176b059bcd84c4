// Container agents end to end (docs/containers.md): a real vaultd imports the repository's example
// image (sdk/cpp/make-image.sh: the static C++ SDK one-shot example as the whole root) and runs it
// under runc as a `(sandbox container)` agent, driven by the real vaultctl. The SDK works
// unchanged inside the image: the agent reads its input from the CAS over fd 3 and stores its
// result.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "integration-tests/agent_fixture.h"
#include "integration-tests/harness.h"

namespace vault::integration {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class ContainerAgentTest : public AgentTest {
 protected:
  void SetUp() override {
    AgentTest::SetUp();
    MakeFoldersSearchable();
    ASSERT_NO_FATAL_FAILURE(StartVault("ct"));
    if (IsSkipped()) return;
    RunResult status = Ctl({"status"});
    // As root with runc installed, the type must be there: a regression fails, never skips.
    if (geteuid() != 0 || access("/usr/sbin/runc", X_OK) != 0) {
      GTEST_SKIP() << "container agents need root and runc";
    }
    ASSERT_THAT(status.out, HasSubstr("container: runc version"));
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

// A vault killed with SIGKILL leaves no container running unwatched: vault-container-init sees
// the vault's end of its report pipe close and ends the container (runc does not tie a
// container's life to its caller's, as the posix sandbox's parent-death signal does).
TEST_F(ContainerAgentTest, ContainersEndWhenTheirVaultIsKilled) {
  RunResult imported =
      Ctl({"image", "import", VAULT_IT_EXAMPLE_IMAGES "/vault-example-reactive.oci.tar"});
  ASSERT_EQ(imported.exit_code, kExitOk) << imported;
  const std::string path = absl::StrCat(root(), "/reactive.scm");
  ASSERT_TRUE(WriteFile(path,
                        "(agent (purpose \"wait for messages\")\n"
                        "  (image \"vault-example-reactive\")\n"
                        "  (capabilities (receive (from \"*\")))\n"
                        "  (constraints (max-runtime 600)))\n")
                  .ok());
  const std::string id = Spawn(path);
  ASSERT_FALSE(id.empty());
  const std::string runc_root = vault_.data_dir + "/containers/runc";
  auto running = [&] {
    RunResult list = RunProgram({"/usr/sbin/runc", "--root", runc_root, "list"}, absl::Seconds(10));
    return absl::StrContains(list.out, " running ");
  };
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!running() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(50));
  ASSERT_TRUE(running()) << Ctl({"agent", "status", id});
  const std::string before = Trim(
      RunProgram({"/usr/sbin/runc", "--root", runc_root, "list", "-q"}, absl::Seconds(10)).out);
  ASSERT_FALSE(before.empty());
  vaultd_->Kill();
  const absl::Time gone = absl::Now() + absl::Seconds(10);
  while (running() && absl::Now() < gone) absl::SleepFor(absl::Milliseconds(50));
  EXPECT_FALSE(running()) << "a container outlived its vault";
  // The next start deletes what is left of it (and starts the agent again, in a new one).
  absl::StatusOr<Vaultd*> again = StartVaultd(vault_, {"--listen", "127.0.0.1:0"});
  ASSERT_TRUE(again.ok()) << again.status();
  RunResult list =
      RunProgram({"/usr/sbin/runc", "--root", runc_root, "list", "-q"}, absl::Seconds(10));
  EXPECT_THAT(list.out, Not(HasSubstr(before))) << list;
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
