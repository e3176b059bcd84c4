// vaultctl init never touches an existing vault and refuses invalid names.
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "integration-tests/harness.h"

namespace vault::integration {
namespace {

struct FileState {
  std::string content;  // empty for directories
  mode_t mode = 0;
  int64_t mtime_ns = 0;
  friend bool operator==(const FileState&, const FileState&) = default;
};

// Every path under `dir` (and `dir` itself) with its content, mode and mtime.
std::map<std::string, FileState> Snapshot(const std::string& dir) {
  std::map<std::string, FileState> out;
  auto add = [&](const std::string& path) {
    struct stat st;
    if (lstat(path.c_str(), &st) != 0) return;
    FileState f;
    f.mode = st.st_mode;
    f.mtime_ns = int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
    if (S_ISREG(st.st_mode)) f.content = ReadFile(path).value_or("<unreadable>");
    out[path] = f;
  };
  add(dir);
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) add(e.path().string());
  return out;
}

std::vector<std::string> Entries(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    out.push_back(e.path().filename().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

class InitTest : public VaultTest {};

TEST_F(InitTest, InitOnAnExistingVaultIsRefusedAndChangesNothing) {
  const std::string ca = CreateCa();
  ASSERT_FALSE(ca.empty());
  absl::StatusOr<VaultDir> a = InitVault("a", ca);
  ASSERT_TRUE(a.ok()) << a.status();
  const std::map<std::string, FileState> before = Snapshot(a->dir);
  const std::vector<std::string> root_before = Entries(root());
  ASSERT_GT(before.size(), 5u);

  const std::vector<std::vector<std::string>> attempts = {
      {"init", "--name", "a", "--dir", a->dir, "--listen", a->address, "--ca", ca},
      {"init", "--name", "a", "--dir", a->dir},                  // a CA of its own
      {"init", "--name", "other", "--dir", a->dir, "--ca", ca},  // another name
  };
  for (const std::vector<std::string>& args : attempts) {
    RunResult r = Vaultctl(args);
    EXPECT_EQ(r.exit_code, kExitRefused) << r;
    EXPECT_EQ(r.out, "");
    EXPECT_EQ(r.err, absl::StrCat("vaultctl: ", a->dir,
                                  " is not empty (an existing vault?); refusing to initialize it. "
                                  "Nothing changed. [ALREADY_EXISTS]\n"));
  }
  EXPECT_TRUE(Snapshot(a->dir) == before) << "vaultctl init modified an existing vault";
  EXPECT_EQ(Entries(root()), root_before) << "vaultctl init left something behind";

  // The vault is still whole: vaultd accepts it.
  RunResult check =
      RunProgram({VaultdPath(), "--config", a->config, "--check-config"}, absl::Seconds(30));
  EXPECT_EQ(check.exit_code, kExitOk) << check;
}

TEST_F(InitTest, InvalidNameIsRefusedWithAClearMessage) {
  const std::string dir = root() + "/v";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"Upper", "may contain only lowercase letters, digits and '-'"},
      {"under_score", "may contain only lowercase letters, digits and '-'"},
      {"-lead", "must not start or end with '-'"},
      {"trail-", "must not start or end with '-'"},
      {std::string(64, 'a'), "must be 1 to 63 characters"},
  };
  for (const auto& [name, why] : cases) {
    RunResult r = Vaultctl({"init", "--name", name, "--dir", dir});
    EXPECT_NE(r.exit_code, kExitOk) << r;
    EXPECT_EQ(r.exit_code, kExitRefused) << r;
    EXPECT_EQ(r.out, "");
    EXPECT_EQ(r.err,
              absl::StrCat("vaultctl: vault name \"", name, "\" ", why, " [INVALID_ARGUMENT]\n"));
    EXPECT_FALSE(std::filesystem::exists(dir)) << name;
  }
  EXPECT_EQ(Entries(root()), std::vector<std::string>{});
}

TEST_F(InitTest, InitIntoAnEmptyDirectoryWorks) {
  const std::string dir = root() + "/empty";
  ASSERT_TRUE(std::filesystem::create_directory(dir));
  RunResult r = Vaultctl({"--output", "json", "init", "--name", "e", "--dir", dir});
  ASSERT_EQ(r.exit_code, kExitOk) << r;
  EXPECT_EQ(JsonField(r.out, "config"), dir + "/vault.conf");
  EXPECT_EQ(Entries(dir), (std::vector<std::string>{"admin.key", "ca", "data", "tls", "vault.conf",
                                                    "vault.key"}));
  struct stat st;
  ASSERT_EQ(stat((dir + "/vault.key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(stat((dir + "/admin.key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(stat((dir + "/tls/vault.key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

// Regression (review): "--dir a/" built its temporary directory inside "a" and always failed,
// leaving "a" behind.
TEST_F(InitTest, TrailingSlashInDirWorksAndLeavesNoTemporaryDirectory) {
  const std::string dir = root() + "/slashed";
  RunResult r = Vaultctl({"--output", "json", "init", "--name", "s", "--dir", dir + "/"});
  ASSERT_EQ(r.exit_code, kExitOk) << r;
  EXPECT_EQ(JsonField(r.out, "config"), dir + "/vault.conf");
  EXPECT_EQ(Entries(dir), (std::vector<std::string>{"admin.key", "ca", "data", "tls", "vault.conf",
                                                    "vault.key"}));
  for (const std::string& e : Entries(root())) {
    EXPECT_FALSE(absl::StrContains(e, ".init-")) << "left behind: " << e;
  }
}

}  // namespace
}  // namespace vault::integration
