#include "sandbox/runner_files.h"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "common/file_util.h"
#include "common/testing/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vault::sandbox {
namespace {

using ::testing::HasSubstr;
using ::testing::MatchesRegex;

class RunnerFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    source_ = tmp_.path() + "/build";
    root_ = tmp_.path() + "/stage";
    ASSERT_TRUE(common::MakeDirs(source_, 0755).ok());
    Build("#!runner v1", "data v1");
  }
  void Build(const std::string& runner, const std::string& data) {
    ASSERT_TRUE(common::WriteFileAtomic(source_ + "/fake-runner", runner, 0755).ok());
    ASSERT_TRUE(common::WriteFileAtomic(source_ + "/data.txt", data, 0644).ok());
  }
  absl::StatusOr<StagedRunner> Stage() {
    return StageRunner(
        {.files = {"fake-runner", "data.txt"}, .env = "VAULT_FAKE_RUNNER_DIR", .folder = "fake"},
        source_, root_);
  }
  std::vector<std::string> Staged() const {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(root_)) {
      names.push_back(e.path().filename().string());
    }
    std::sort(names.begin(), names.end());
    return names;
  }
  static mode_t ModeOf(const std::string& path) {
    struct stat st {};
    EXPECT_EQ(stat(path.c_str(), &st), 0) << path;
    return st.st_mode & 07777;
  }

  common::testing::TempDir tmp_{"runner_files_test"};
  std::string source_;
  std::string root_;
};

TEST_F(RunnerFilesTest, OneCopyPerBuildNamedByItsBytesAndSharedByEveryVault) {
  absl::StatusOr<StagedRunner> a = Stage();
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_THAT(a->dir, MatchesRegex(".*/stage/fake-[0-9a-f]{16}"));
  EXPECT_EQ(*common::ReadFile(a->dir + "/fake-runner"), "#!runner v1");
  EXPECT_EQ(*common::ReadFile(a->dir + "/data.txt"), "data v1");
  EXPECT_EQ(ModeOf(a->dir + "/fake-runner"), 0755u);
  EXPECT_EQ(ModeOf(a->dir + "/data.txt"), 0644u);
  EXPECT_EQ(ModeOf(a->dir), 0711u);

  absl::StatusOr<StagedRunner> b = Stage();  // a second vault of the same build
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->dir, a->dir);
  EXPECT_EQ(Staged().size(), 1u);
}

TEST_F(RunnerFilesTest, AnotherBuildGetsItsOwnFolderAndUnusedOnesAreRemoved) {
  absl::StatusOr<StagedRunner> old_build = Stage();
  ASSERT_TRUE(old_build.ok()) << old_build.status();
  Build("#!runner v2", "data v1");
  absl::StatusOr<StagedRunner> new_build = Stage();
  ASSERT_TRUE(new_build.ok()) << new_build.status();
  EXPECT_NE(new_build->dir, old_build->dir);
  EXPECT_EQ(*common::ReadFile(new_build->dir + "/fake-runner"), "#!runner v2");
  EXPECT_EQ(*common::ReadFile(old_build->dir + "/fake-runner"), "#!runner v1");  // still in use

  // A staging whose writer died, and a folder of another type that nobody uses.
  ASSERT_TRUE(common::MakeDirs(root_ + "/.staging-fake-0123456789abcdef-1-x", 0711).ok());
  ASSERT_TRUE(common::MarkLeased(root_ + "/.staging-fake-0123456789abcdef-1-x").ok());
  ASSERT_TRUE(common::MakeDirs(root_ + "/other-0123456789abcdef", 0711).ok());
  ASSERT_TRUE(common::MarkLeased(root_ + "/other-0123456789abcdef").ok());
  *old_build = StagedRunner();  // the vault of the old build stopped
  absl::StatusOr<StagedRunner> again = Stage();
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->dir, new_build->dir);
  EXPECT_THAT(Staged(), ::testing::ElementsAre(new_build->dir.substr(root_.size() + 1),
                                               "other-0123456789abcdef"));
}

TEST_F(RunnerFilesTest, AMissingRunnerNamesWhereItLookedAndTheFix) {
  ASSERT_EQ(unlink((source_ + "/data.txt").c_str()), 0);
  absl::StatusOr<StagedRunner> staged = Stage();
  EXPECT_EQ(staged.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(staged.status().message(), HasSubstr(source_));
  EXPECT_THAT(staged.status().message(), HasSubstr("set VAULT_FAKE_RUNNER_DIR"));
}

}  // namespace
}  // namespace vault::sandbox
