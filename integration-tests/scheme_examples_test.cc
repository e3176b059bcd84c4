// The RFC's patterns 1-3 as Scheme agents (sdk/scheme/examples/periodic.scm, one-shot.scm,
// reactive.scm), each spawned as shipped on a real vault and checked by what it leaves in the
// vault's files and CAS. (Pattern 4, mobile.scm, runs across two vaults in
// mobile_pattern_test.cc.)
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "integration-tests/agent_fixture.h"

namespace vault::integration {
namespace {

using ::testing::ElementsAre;

class SchemeExamplesTest : public AgentTest {
 protected:
  void SetUp() override {
    AgentTest::SetUp();
    ASSERT_NO_FATAL_FAILURE(StartVault("v"));
  }
  // A file of the vault's tree (/vault/<path>), created with its folders.
  void Put(const std::string& path, const std::string& data) {
    const std::string file = absl::StrCat(vault_.data_dir, "/files/", path);
    std::filesystem::create_directories(std::filesystem::path(file).parent_path());
    ASSERT_TRUE(WriteFile(file, data).ok());
  }
  std::string Read(const std::string& path) {
    absl::StatusOr<std::string> s = ReadFile(absl::StrCat(vault_.data_dir, "/files/", path));
    return s.ok() ? *s : absl::StrCat("<", s.status().ToString(), ">");
  }
  static std::string Example(const std::string& name) {
    return absl::StrCat(VAULT_IT_SDK_DIR, "/scheme/examples/", name);
  }
};

// Pattern 1: the first round archives what is new, then the agent sleeps its hour.
TEST_F(SchemeExamplesTest, PeriodicArchivesNewFeeds) {
  Put("feeds/a.xml", "<feed>a</feed>");
  Put("feeds/b.xml", "<feed>b</feed>");
  Put("archive/a.xml", "<feed>a</feed>");
  const std::string id = Spawn(Example("periodic.scm"));
  ASSERT_FALSE(id.empty());
  WaitLog(id, "archived 1 new: b.xml");
  EXPECT_EQ(Read("archive/b.xml"), "<feed>b</feed>");
  EXPECT_EQ(State(id), "running");  // asleep until the next round
  RunResult t = Ctl({"agent", "terminate", id, "--as", admin_key_});
  EXPECT_EQ(t.exit_code, kExitOk) << t;
}

// Pattern 2: one object in, its word count out, as the agent's result.
TEST_F(SchemeExamplesTest, OneShotCountsTheWordsOfItsInput) {
  const std::string input = "the quick brown\nfox  jumps";
  const std::string file = root() + "/input.txt";
  ASSERT_TRUE(WriteFile(file, input).ok());
  RunResult put = Ctl({"cas", "put", file});
  ASSERT_EQ(put.exit_code, kExitOk) << put;
  const std::string digest = DigestText(input);
  const std::string state_file = root() + "/input-hash";
  ASSERT_TRUE(WriteFile(state_file, digest).ok());
  // The grant names the hash alone; the code reads the object by its whole digest.
  const std::string hash = digest.substr(0, digest.find('/'));
  RunResult r = Ctl({"agent", "spawn", Example("one-shot.scm"), "--as", admin_key_, "--bind",
                     absl::StrCat("input-hash=", hash), "--state", state_file});
  ASSERT_EQ(r.exit_code, kExitOk) << r;
  const std::string id = Trim(r.out);
  const std::string status = WaitEnded(id);
  ASSERT_EQ(JsonField(status, "state"), "completed") << status;
  // Its result names the object it put, which holds the count.
  RunResult result = Ctl({"cas", "get", JsonField(status, "result").value_or("?")});
  ASSERT_EQ(result.exit_code, kExitOk) << result << status;
  EXPECT_EQ(result.out, DigestText("5 words\n"));
  RunResult count = Ctl({"cas", "get", result.out});
  ASSERT_EQ(count.exit_code, kExitOk) << count;
  EXPECT_EQ(count.out, "5 words\n");
}

// Pattern 3: each task message is handled as it comes; the agent waits for the next.
TEST_F(SchemeExamplesTest, ReactiveHandlesEachTaskItIsSent) {
  Put("tasks/t1.txt", "first task");
  Put("tasks/t2.txt", "second task");
  const std::string id = Spawn(Example("reactive.scm"));
  ASSERT_FALSE(id.empty());
  for (const char* name : {"t1.txt", "t2.txt"}) {
    const std::string data = absl::StrCat(root(), "/", name, ".msg");
    ASSERT_TRUE(WriteFile(data, name).ok());
    RunResult sent = Ctl({"agent", "send", id, "--type", "task", "--data", data});
    ASSERT_EQ(sent.exit_code, kExitOk) << sent;
    WaitLog(id, absl::StrCat("did ", name, " for operator"));
  }
  EXPECT_EQ(Read("results/t1.txt"), "FIRST TASK");
  EXPECT_EQ(Read("results/t2.txt"), "SECOND TASK");
  EXPECT_EQ(State(id), "running");
  RunResult t = Ctl({"agent", "terminate", id, "--as", admin_key_});
  EXPECT_EQ(t.exit_code, kExitOk) << t;
}

}  // namespace
}  // namespace vault::integration
