#include <sys/stat.h>
#include <unistd.h>
// vaultd's life: config validation, one vaultd per data directory, clean SIGTERM shutdown and
// restart with the same objects.
#include <algorithm>
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "integration-tests/harness.h"

namespace vault::integration {
namespace {

class VaultdLifecycleTest : public VaultTest {
 protected:
  void SetUp() override {
    VaultTest::SetUp();
    absl::StatusOr<VaultDir> a = InitVault("a", /*ca_dir=*/"");
    ASSERT_TRUE(a.ok()) << a.status();
    vault_ = *a;
    absl::StatusOr<std::string> text = ReadFile(vault_.config);
    ASSERT_TRUE(text.ok()) << text.status();
    config_text_ = *text;
  }

  // Writes `text` as a config beside vault.conf (so relative paths resolve the same way).
  std::string WriteConfig(const std::string& name, const std::string& text) {
    std::string path = absl::StrCat(vault_.dir, "/", name);
    EXPECT_TRUE(WriteFile(path, text).ok());
    return path;
  }

  RunResult RunVaultd(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {VaultdPath()};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunProgram(argv, absl::Seconds(30));
  }

  // 1-based line of the first line of `text` starting with `prefix`; 0 if none.
  static int LineOf(const std::string& text, absl::string_view prefix) {
    int n = 0;
    for (absl::string_view line : absl::StrSplit(text, '\n')) {
      ++n;
      if (absl::StartsWith(line, prefix)) return n;
    }
    return 0;
  }

  VaultDir vault_;
  std::string config_text_;
};

TEST_F(VaultdLifecycleTest, TypoedFieldNameIsRefusedWithFileLineAndColumn) {
  const int line = LineOf(config_text_, "name: \"a\"");
  ASSERT_GT(line, 0) << config_text_;
  const std::string bad = WriteConfig(
      "typo.conf", absl::StrReplaceAll(config_text_, {{"\nname: \"a\"", "\nnmae: \"a\""}}));
  for (bool check : {false, true}) {
    std::vector<std::string> args = {"--config", bad};
    if (check) args.push_back("--check-config");
    RunResult r = RunVaultd(args);
    EXPECT_EQ(r.exit_code, kExitConfig) << r;
    EXPECT_FALSE(r.timed_out);
    EXPECT_EQ(r.err, absl::StrCat("vaultd: parse error: ", bad, ":", line,
                                  ":5: Message type \"vault.v1.VaultConfig\" has no field named "
                                  "\"nmae\".\n"));
    EXPECT_EQ(r.out, "");
  }
  EXPECT_FALSE(std::filesystem::exists(vault_.socket));
}

TEST_F(VaultdLifecycleTest, InvalidValueIsRefusedNamingTheField) {
  const std::string bad = WriteConfig("level.conf", config_text_ + "log_level: \"loud\"\n");
  RunResult r = RunVaultd({"--config", bad});
  EXPECT_EQ(r.exit_code, kExitConfig) << r;
  EXPECT_EQ(r.err, absl::StrCat("vaultd: ", bad,
                                ": field log_level: \"loud\" is not one of trace, debug, info, "
                                "warn, error, off\n"));

  // A missing file the config points at.
  const std::string missing = WriteConfig(
      "nokey.conf",
      absl::StrReplaceAll(config_text_, {{"key_file: \"vault.key\"", "key_file: \"gone.key\""}}));
  r = RunVaultd({"--config", missing, "--check-config"});
  EXPECT_EQ(r.exit_code, kExitConfig) << r;
  EXPECT_TRUE(absl::StartsWith(
      r.err, absl::StrCat("vaultd: ", missing, ": field key_file: ", vault_.dir, "/gone.key: ")))
      << r;
}

TEST_F(VaultdLifecycleTest, CheckConfigAcceptsTheConfigInitWrote) {
  RunResult r = RunVaultd({"--config", vault_.config, "--check-config"});
  EXPECT_EQ(r.exit_code, kExitOk) << r;
  EXPECT_EQ(r.out, absl::StrCat("vaultd: config ", vault_.config, " is valid\n"));
  EXPECT_EQ(r.err, "");
  EXPECT_FALSE(std::filesystem::exists(vault_.socket)) << "--check-config must not serve";
}

// Regression: a vaultd that fails to start must not touch the running vaultd's admin socket
// (bug found by this test: ~VaultNode -> Shutdown unlinks config_.admin_socket() even when
// Start failed before binding it).
TEST_F(VaultdLifecycleTest, SecondVaultdOnTheSameDataDirIsRefusedAndTheFirstKeepsServing) {
  absl::StatusOr<Vaultd*> first = StartVaultd(vault_);
  ASSERT_TRUE(first.ok()) << first.status();
  const std::string file = root() + "/obj";
  ASSERT_EQ(WriteFile(file, "kept"), absl::OkStatus());
  ASSERT_EQ(Vaultctl({"--vault", vault_.socket, "cas", "put", file}).exit_code, kExitOk);

  RunResult r = RunVaultd({"--config", vault_.config});
  EXPECT_FALSE(r.timed_out) << "the second vaultd kept running";
  EXPECT_EQ(r.exit_code, 1) << r;
  EXPECT_TRUE(absl::StrContains(
      r.err, absl::StrCat("data directory ", vault_.data_dir, " is in use by another vaultd")))
      << r;

  // The first one still serves, on the same socket.
  EXPECT_TRUE((*first)->Running());
  EXPECT_TRUE(std::filesystem::exists(vault_.socket)) << "the admin socket was removed";
  RunResult has = Vaultctl({"--vault", vault_.socket, "cas", "has", DigestText("kept")});
  EXPECT_EQ(has.exit_code, kExitOk) << has;
  RunResult status = Vaultctl({"--vault", vault_.socket, "status"});
  EXPECT_EQ(status.exit_code, kExitOk) << status;
  absl::StatusOr<std::string> ready = ReadFile(vault_.data_dir + "/vaultd.ready");
  ASSERT_TRUE(ready.ok());
  EXPECT_EQ(JsonField(*ready, "pid"), std::to_string((*first)->pid()));
}

// Regression: a second vault must not share a listening port with a running one (gRPC sets
// SO_REUSEPORT unless told not to, and the kernel then splits connections between the two).
TEST_F(VaultdLifecycleTest, SecondVaultCannotListenOnAPortInUse) {
  absl::StatusOr<Vaultd*> a = StartVaultd(vault_);
  ASSERT_TRUE(a.ok()) << a.status();
  absl::StatusOr<VaultDir> c = InitVault("c", /*ca_dir=*/"");
  ASSERT_TRUE(c.ok()) << c.status();
  absl::StatusOr<Vaultd*> second = StartVaultd(*c, {"--listen", vault_.address});
  ASSERT_FALSE(second.ok()) << "vault c serves on " << vault_.address << ", already vault a's";
  EXPECT_TRUE(absl::StrContains(second.status().message(),
                                absl::StrCat("cannot listen on ", vault_.address)))
      << second.status();
}

// Regression (review): a vault pointed at another live vault's admin socket took it over.
TEST_F(VaultdLifecycleTest, ALiveAdminSocketIsNotTakenOver) {
  absl::StatusOr<Vaultd*> a = StartVaultd(vault_, {"--listen", "127.0.0.1:0"});
  ASSERT_TRUE(a.ok()) << a.status();
  absl::StatusOr<VaultDir> c = InitVault("c", /*ca_dir=*/"");
  ASSERT_TRUE(c.ok()) << c.status();
  RunResult r = RunVaultd(
      {"--config", c->config, "--listen", "127.0.0.1:0", "--admin-socket", vault_.socket});
  EXPECT_EQ(r.exit_code, 1) << r;
  EXPECT_TRUE(absl::StrContains(
      r.err, absl::StrCat("admin socket ", vault_.socket, " is in use by another process")))
      << r;
  EXPECT_EQ(Vaultctl({"--vault", vault_.socket, "status"}).exit_code, kExitOk);
  // A path that is not a socket is never replaced.
  const std::string file = root() + "/not-a-socket";
  ASSERT_EQ(WriteFile(file, "keep me"), absl::OkStatus());
  r = RunVaultd({"--config", c->config, "--listen", "127.0.0.1:0", "--admin-socket", file});
  EXPECT_EQ(r.exit_code, 1) << r;
  EXPECT_TRUE(absl::StrContains(r.err, "exists and is not a socket")) << r;
  absl::StatusOr<std::string> kept = ReadFile(file);
  ASSERT_TRUE(kept.ok());
  EXPECT_EQ(*kept, "keep me");
}

// Regression (review): a TLS key readable by others passed --check-config.
TEST_F(VaultdLifecycleTest, CheckConfigRefusesAWorldReadableTlsKey) {
  const std::string key = vault_.dir + "/tls/vault.key";
  ASSERT_EQ(chmod(key.c_str(), 0644), 0);
  RunResult r = RunVaultd({"--config", vault_.config, "--check-config"});
  EXPECT_EQ(r.exit_code, 78) << r;
  EXPECT_TRUE(absl::StrContains(r.err, "field tls.key_file: secret file")) << r;
  EXPECT_TRUE(absl::StrContains(r.err, "has mode 0644")) << r;
}

// vaultd --help: "--listen host:port; port 0 picks one"; vaultd.ready then has the real port.
TEST_F(VaultdLifecycleTest, ListenPortZeroPicksAFreePort) {
  absl::StatusOr<Vaultd*> d = StartVaultd(vault_, {"--listen", "127.0.0.1:0"});
  ASSERT_TRUE(d.ok()) << d.status();
  const std::string& addr = (*d)->listen_address();
  ASSERT_TRUE(absl::StartsWith(addr, "127.0.0.1:")) << addr;
  EXPECT_NE(addr, "127.0.0.1:0");
  RunResult r =
      Vaultctl({"--config", vault_.config, "--vault", addr, "--server-name", "a", "cas", "ls"});
  EXPECT_EQ(r.exit_code, kExitOk) << r;
}

TEST_F(VaultdLifecycleTest, SigtermExitsCleanlyAndARestartServesTheSameObjects) {
  absl::StatusOr<Vaultd*> d = StartVaultd(vault_, {"--listen", "127.0.0.1:0"});
  ASSERT_TRUE(d.ok()) << d.status();
  std::mt19937_64 rng(Seed());
  std::vector<std::string> data = {"a", RandomBytes(rng, 70000), RandomBytes(rng, 5 << 20)};
  std::vector<std::string> args = {"--vault", vault_.socket, "cas", "put"};
  for (size_t i = 0; i < data.size(); ++i) {
    args.push_back(absl::StrCat(root(), "/f", i));
    ASSERT_EQ(WriteFile(args.back(), data[i]), absl::OkStatus());
  }
  ASSERT_EQ(Vaultctl(args).exit_code, kExitOk);

  const absl::Time start = absl::Now();
  std::optional<int> code = (*d)->Stop(absl::Seconds(10));  // the default drain time
  const absl::Duration took = absl::Now() - start;
  ASSERT_TRUE(code.has_value()) << "vaultd still runs 10 s after SIGTERM";
  EXPECT_EQ(*code, 0);
  EXPECT_LT(took, absl::Seconds(5)) << "an idle vaultd should stop at once";
  EXPECT_FALSE(std::filesystem::exists(vault_.socket)) << "socket left behind";
  EXPECT_FALSE(std::filesystem::exists(vault_.data_dir + "/vaultd.ready"));
  EXPECT_TRUE(absl::StrContains(ReadFile((*d)->log_path()).value_or(""), "vault a stopped"));

  absl::Status restarted = (*d)->Start();
  ASSERT_TRUE(restarted.ok()) << restarted;
  for (size_t i = 0; i < data.size(); ++i) {
    std::string out = absl::StrCat(root(), "/back", i);
    RunResult get =
        Vaultctl({"--vault", vault_.socket, "cas", "get", DigestText(data[i]), "--out", out});
    ASSERT_EQ(get.exit_code, kExitOk) << get;
    EXPECT_TRUE(ReadFile(out).value_or("") == data[i]) << i;
  }
  RunResult ls = Vaultctl({"--vault", vault_.socket, "cas", "ls"});
  EXPECT_EQ(ls.exit_code, kExitOk) << ls;
  EXPECT_EQ(std::count(ls.out.begin(), ls.out.end(), '\n'), 3) << ls.out;
}

// Files a vault keeps outside its data directory for its sandboxes (its code folder, the staged
// interpreter runners) do not pile up when vaults are killed or builds change: the next vault to
// start removes those nobody uses, and never one a live vault uses.
TEST_F(VaultdLifecycleTest, FoldersOfDeadVaultsGoAndThoseOfLiveOnesStay) {
  if (geteuid() != 0) GTEST_SKIP() << "only a vault run as root keeps files in /var/lib";
  auto code_of = [](const VaultDir& v) {
    return absl::StrCat("/var/lib/vault-sandbox/code/", v.name, "-",
                        Hex(Sha256(v.data_dir)).substr(0, 8));
  };
  const std::string runners = "/var/lib/vault-sandbox/runners";
  auto staged = [&] {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(runners)) {
      names.push_back(e.path().filename().string());
    }
    return names;
  };
  // A folder of another build that nobody uses (marked: its build took leases), and one of a build
  // that takes none (unmarked: it may be in use, and is left alone).
  auto plant = [](const std::string& dir, bool marked) {
    std::filesystem::create_directories(dir);
    EXPECT_TRUE(WriteFile(dir + "/file", "bytes").ok());
    if (marked) {
      EXPECT_TRUE(WriteFile(dir + "/.vault-lease", "").ok());
    }
  };
  absl::StatusOr<Vaultd*> a = StartVaultd(vault_, {"--listen", "127.0.0.1:0"});
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(std::filesystem::is_directory(code_of(vault_))) << code_of(vault_);
  const std::vector<std::string> used_by_a = staged();
  ASSERT_GE(used_by_a.size(), 2u) << "a scheme and a wasm runner";
  const std::string stale_runner = runners + "/wasm-00000000000000aa";
  const std::string legacy_runner = runners + "/wasm-00000000000000bb";
  const std::string stale_code = "/var/lib/vault-sandbox/code/gone-00000000";
  plant(stale_runner, true);
  plant(legacy_runner, false);
  plant(stale_code, true);

  absl::StatusOr<VaultDir> b_dir = InitVault("b", /*ca_dir=*/"");
  ASSERT_TRUE(b_dir.ok()) << b_dir.status();
  absl::StatusOr<Vaultd*> b = StartVaultd(*b_dir, {"--listen", "127.0.0.1:0"});
  ASSERT_TRUE(b.ok()) << b.status();
  // a lives: its folders stay; the unused ones went; the unmarked one stays.
  EXPECT_TRUE(std::filesystem::is_directory(code_of(vault_))) << "a live vault's code folder";
  for (const std::string& name : used_by_a) {
    EXPECT_TRUE(std::filesystem::is_directory(absl::StrCat(runners, "/", name))) << name;
  }
  EXPECT_FALSE(std::filesystem::exists(stale_runner));
  EXPECT_FALSE(std::filesystem::exists(stale_code));
  EXPECT_TRUE(std::filesystem::exists(legacy_runner + "/file"));
  std::filesystem::remove_all(legacy_runner);

  (*a)->Kill();
  EXPECT_TRUE(std::filesystem::is_directory(code_of(vault_)))
      << "SIGKILL removes nothing by itself";
  absl::StatusOr<VaultDir> c_dir = InitVault("c", /*ca_dir=*/"");
  ASSERT_TRUE(c_dir.ok()) << c_dir.status();
  absl::StatusOr<Vaultd*> c = StartVaultd(*c_dir, {"--listen", "127.0.0.1:0"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(std::filesystem::exists(code_of(vault_))) << "the killed vault's code folder";
  EXPECT_TRUE(std::filesystem::is_directory(code_of(*b_dir))) << "b still runs";
}

TEST_F(VaultdLifecycleTest, SigtermWithAStreamOpenExitsWithinTheDrainTime) {
  const std::string conf =
      WriteConfig("drain.conf", config_text_ + "server { drain_timeout_ms: 1500 }\n");
  VaultDir v = vault_;
  v.config = conf;
  absl::StatusOr<Vaultd*> d = StartVaultd(v, {"--listen", "127.0.0.1:0"});
  ASSERT_TRUE(d.ok()) << d.status();

  // A change-feed follower: a call that never ends by itself.
  std::unique_ptr<vault::v1::Cas::Stub> cas = CasStub(vault_.socket);
  grpc::ClientContext ctx;
  SetDeadline(&ctx, absl::Seconds(60));
  vault::v1::FeedRequest req;
  req.set_follow(true);
  std::unique_ptr<grpc::ClientReader<vault::v1::FeedResponse>> feed = cas->Feed(&ctx, req);
  // Make sure the call is established: put an object and read its feed entry.
  const std::string file = root() + "/obj";
  ASSERT_EQ(WriteFile(file, "followed"), absl::OkStatus());
  ASSERT_EQ(Vaultctl({"--vault", vault_.socket, "cas", "put", file}).exit_code, kExitOk);
  vault::v1::FeedResponse resp;
  ASSERT_TRUE(feed->Read(&resp));
  ASSERT_EQ(resp.entries_size(), 1);

  const absl::Time start = absl::Now();
  std::optional<int> code = (*d)->Stop(absl::Seconds(10));
  const absl::Duration took = absl::Now() - start;
  ASSERT_TRUE(code.has_value()) << "vaultd still runs 10 s after SIGTERM (drain is 1.5 s)";
  EXPECT_EQ(*code, 0);
  EXPECT_LT(took, absl::Seconds(5)) << "drain_timeout_ms is 1500";
  EXPECT_FALSE(std::filesystem::exists(vault_.socket));
  while (feed->Read(&resp)) {
  }
  grpc::Status s = feed->Finish();
  EXPECT_FALSE(s.ok());
}

}  // namespace
}  // namespace vault::integration
