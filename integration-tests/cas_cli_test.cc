// vaultctl cas put/get/stat/ls/has against a running vaultd over its admin (Unix) socket.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "integration-tests/harness.h"

namespace vault::integration {
namespace {

constexpr int kExitFailure = 1;  // vaultctl/output.h: any other failure (here: EIO)

struct TestFile {
  std::string path;
  std::string data;
};

class CasCliTest : public VaultTest {
 protected:
  void SetUp() override {
    VaultTest::SetUp();
    absl::StatusOr<Vaultd*> d = StartStandaloneVault("a");
    ASSERT_TRUE(d.ok()) << d.status();
    vaultd_ = *d;
    vault_ = (*d)->vault();

    std::mt19937_64 rng(Seed());
    files_ = {{root() + "/empty", ""},
              {root() + "/one-byte", "x"},
              {root() + "/100k", RandomBytes(rng, 100 << 10)},
              {root() + "/9m", RandomBytes(rng, 9 << 20)}};  // above the 4 MiB chunking threshold
    std::vector<std::string> args = {"--vault", vault_.socket, "cas", "put"};
    for (const TestFile& f : files_) {
      ASSERT_EQ(WriteFile(f.path, f.data), absl::OkStatus());
      args.push_back(f.path);
    }
    put_ = Vaultctl(args);
  }

  // Runs vaultctl against the vault's admin socket.
  RunResult Ctl(std::vector<std::string> args) {
    args.insert(args.begin(), {"--vault", vault_.socket});
    return Vaultctl(args);
  }

  Vaultd* vaultd_ = nullptr;
  VaultDir vault_;
  std::vector<TestFile> files_;
  RunResult put_;
};

TEST_F(CasCliTest, PutPrintsTheDigestOfEveryFile) {
  ASSERT_EQ(put_.exit_code, kExitOk) << put_;
  std::string want;
  for (const TestFile& f : files_) absl::StrAppend(&want, DigestText(f.data), "  ", f.path, "\n");
  EXPECT_EQ(put_.out, want);
  EXPECT_EQ(put_.err, "");
  // Independently of vaultctl's hashing: the empty file's well-known SHA-256.
  EXPECT_TRUE(absl::StartsWith(
      put_.out, "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855/0  "));
}

TEST_F(CasCliTest, GetReturnsIdenticalBytes) {
  ASSERT_EQ(put_.exit_code, kExitOk) << put_;
  for (size_t i = 0; i < files_.size(); ++i) {
    std::string out = absl::StrCat(root(), "/got-", i);
    RunResult get = Ctl({"cas", "get", DigestText(files_[i].data), "--out", out});
    ASSERT_EQ(get.exit_code, kExitOk) << get;
    EXPECT_EQ(get.out, "");
    absl::StatusOr<std::string> got = ReadFile(out);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_TRUE(*got == files_[i].data) << files_[i].path << ": " << got->size() << " bytes back";
  }
  // To stdout.
  RunResult get = Ctl({"cas", "get", DigestText("x")});
  EXPECT_EQ(get.exit_code, kExitOk) << get;
  EXPECT_EQ(get.out, "x");
}

TEST_F(CasCliTest, StatShowsTheLayout) {
  ASSERT_EQ(put_.exit_code, kExitOk) << put_;
  const std::string big = DigestText(files_[3].data);
  RunResult st = Ctl({"cas", "stat", big});
  ASSERT_EQ(st.exit_code, kExitOk) << st;
  EXPECT_TRUE(absl::StartsWith(st.out, absl::StrCat("digest:  ", big, "\nsize:    9437184\n",
                                                    "seq:     4\nlayout:  chunked (")))
      << st.out;

  const std::string small = DigestText(files_[2].data);
  st = Ctl({"cas", "stat", small});
  ASSERT_EQ(st.exit_code, kExitOk) << st;
  EXPECT_TRUE(absl::StartsWith(st.out, absl::StrCat("digest:  ", small, "\nsize:    102400\n",
                                                    "seq:     3\nlayout:  inline\nstored:  ")))
      << st.out;

  const std::string absent = DigestText("not stored");
  st = Ctl({"cas", "stat", absent});
  EXPECT_EQ(st.exit_code, kExitNotFound) << st;
  EXPECT_EQ(st.out, "");
  EXPECT_EQ(st.err, absl::StrCat("vaultctl: ", absent, " is not stored\n"));
}

TEST_F(CasCliTest, LsListsSeqsOneToN) {
  ASSERT_EQ(put_.exit_code, kExitOk) << put_;
  RunResult ls = Ctl({"cas", "ls"});
  ASSERT_EQ(ls.exit_code, kExitOk) << ls;
  std::vector<std::string> lines = absl::StrSplit(ls.out, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), files_.size()) << ls.out;
  for (size_t i = 0; i < lines.size(); ++i) {
    // "<seq>  <digest>  2024-01-02T03:04:05Z"
    std::string prefix = absl::StrCat(i + 1, "  ", DigestText(files_[i].data), "  ");
    EXPECT_TRUE(absl::StartsWith(lines[i], prefix)) << lines[i];
    EXPECT_EQ(lines[i].size(), prefix.size() + 20) << lines[i];
    EXPECT_TRUE(absl::EndsWith(lines[i], "Z")) << lines[i];
  }
  RunResult after = Ctl({"cas", "ls", "--after", "2", "--limit", "1"});
  ASSERT_EQ(after.exit_code, kExitOk) << after;
  EXPECT_TRUE(absl::StartsWith(after.out, absl::StrCat("3  ", DigestText(files_[2].data), "  ")))
      << after.out;
  EXPECT_EQ(std::count(after.out.begin(), after.out.end(), '\n'), 1) << after.out;
}

TEST_F(CasCliTest, HasExitsNotFoundWhenOneIsMissing) {
  ASSERT_EQ(put_.exit_code, kExitOk) << put_;
  const std::string d0 = DigestText(files_[0].data), d3 = DigestText(files_[3].data);
  const std::string absent = DigestText("not stored");
  RunResult has = Ctl({"cas", "has", d0, d3});
  EXPECT_EQ(has.exit_code, kExitOk) << has;
  EXPECT_EQ(has.out, absl::StrCat("present  ", d0, "\npresent  ", d3, "\n"));

  has = Ctl({"cas", "has", d0, absent, d3});
  EXPECT_EQ(has.exit_code, kExitNotFound) << has;
  EXPECT_EQ(has.out, absl::StrCat("present  ", d0, "\nmissing  ", absent, "\npresent  ", d3, "\n"));
}

TEST_F(CasCliTest, JsonOutputParses) {
  ASSERT_EQ(put_.exit_code, kExitOk) << put_;
  // put: one new file, one already stored.
  const std::string fresh = root() + "/fresh";
  ASSERT_EQ(WriteFile(fresh, "fresh bytes"), absl::OkStatus());
  RunResult put = Ctl({"--output", "json", "cas", "put", fresh, files_[3].path});
  ASSERT_EQ(put.exit_code, kExitOk) << put;
  EXPECT_EQ(put.out,
            absl::StrCat("[{\"file\":\"", fresh, "\",\"digest\":\"", DigestText("fresh bytes"),
                         "\",\"status\":\"stored\",\"seq\":5},", "{\"file\":\"", files_[3].path,
                         "\",\"digest\":\"", DigestText(files_[3].data),
                         "\",\"status\":\"present\",\"seq\":4}]\n"));

  // stat
  RunResult st = Ctl({"--output", "json", "cas", "stat", DigestText(files_[3].data)});
  ASSERT_EQ(st.exit_code, kExitOk) << st;
  EXPECT_EQ(JsonField(st.out, "digest"), DigestText(files_[3].data)) << st.out;
  EXPECT_EQ(JsonField(st.out, "present"), "true") << st.out;
  EXPECT_EQ(JsonField(st.out, "size"), "9437184") << st.out;
  EXPECT_EQ(JsonField(st.out, "seq"), "4") << st.out;
  EXPECT_EQ(JsonField(st.out, "layout"), "chunked") << st.out;
  st = Ctl({"--output", "json", "cas", "stat", DigestText("not stored")});
  EXPECT_EQ(st.exit_code, kExitNotFound) << st;
  EXPECT_EQ(st.out, absl::StrCat("{\"digest\":\"", DigestText("not stored"),
                                 "\",\"present\":false,\"upload_offset\":0}\n"));

  // has
  RunResult has =
      Ctl({"--output", "json", "cas", "has", DigestText(files_[1].data), DigestText("nope")});
  EXPECT_EQ(has.exit_code, kExitNotFound) << has;
  EXPECT_EQ(has.out, absl::StrCat("[{\"digest\":\"", DigestText(files_[1].data),
                                  "\",\"present\":true},{\"digest\":\"", DigestText("nope"),
                                  "\",\"present\":false}]\n"));
}

TEST_F(CasCliTest, PutOfAStoredSmallFileReportsItsSeq) {
  ASSERT_EQ(put_.exit_code, kExitOk) << put_;
  // The one-byte file is seq 2; putting it again must say so, as it does for large files.
  RunResult put = Ctl({"--output", "json", "cas", "put", files_[1].path});
  ASSERT_EQ(put.exit_code, kExitOk) << put;
  EXPECT_EQ(JsonField(put.out, "status"), "present") << put.out;
  EXPECT_EQ(JsonField(put.out, "seq"), "2") << put.out;
}

TEST_F(CasCliTest, AdminSocketIsPrivate) {
  struct stat st;
  ASSERT_EQ(lstat(vault_.socket.c_str(), &st), 0) << vault_.socket;
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EXPECT_EQ(st.st_uid, geteuid());
}

TEST_F(CasCliTest, MalformedDigestIsAUsageError) {
  for (const std::string& bad : {std::string("sha256:abc/1"), std::string("md5:00/1"),
                                 absl::StrCat("sha256:", std::string(64, 'g'), "/1"),
                                 absl::StrCat("sha256:", std::string(64, '0'), "/-1"),
                                 absl::StrCat("sha256:", std::string(64, '0'))}) {
    for (const char* cmd : {"get", "stat", "has"}) {
      RunResult r = Ctl({"cas", cmd, bad});
      EXPECT_EQ(r.exit_code, kExitUsage) << cmd << " " << bad << ": " << r;
      EXPECT_TRUE(absl::StartsWith(r.err, "vaultctl: invalid digest")) << r;
      EXPECT_EQ(r.out, "");
    }
  }
}

TEST_F(CasCliTest, TcpVaultWithoutTlsMaterialIsAUsageError) {
  // No --config, no --tls-*: vaultctl cannot speak mTLS and says so before dialing.
  RunResult r = Vaultctl({"--vault", "127.0.0.1:1", "cas", "ls"});
  EXPECT_EQ(r.exit_code, kExitUsage) << r;
  EXPECT_NE(r.err.find("mutual TLS needs --tls-cert, --tls-key and --tls-ca"), std::string::npos)
      << r;
}

// Many files (several BatchPut calls, a subdirectory, an empty file and one large enough to be
// streamed) with one that cannot be read in the middle: that one is reported, on stderr in its
// place, every other file is stored and printed in order, and the exit code is the error's.
TEST_F(CasCliTest, PutOfManyFilesStoresAllButTheUnreadableOne) {
  ASSERT_EQ(put_.exit_code, kExitOk) << put_;
  const std::string dir = root() + "/many";
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);
  ASSERT_EQ(mkdir((dir + "/sub").c_str(), 0755), 0);
  std::mt19937_64 rng(Seed() + 1);
  std::vector<TestFile> files;
  for (int i = 0; i < 2500; ++i) {
    files.push_back(
        {absl::StrCat(dir, "/f", absl::Dec(i, absl::kZeroPad4)), RandomBytes(rng, 4096)});
  }
  files.push_back({dir + "/sub/big", RandomBytes(rng, (2 << 20) + 1)});
  files.push_back({dir + "/sub/empty-too", ""});  // the same object as /empty: already present
  files.push_back({dir + "/sub/small", RandomBytes(rng, 100)});
  for (const TestFile& f : files) ASSERT_EQ(WriteFile(f.path, f.data), absl::OkStatus());
  // Unreadable: for root, whom file modes do not stop, a link to a file that fails every read.
  const std::string bad = files[1234].path;
  std::string want_err;
  int want_code;
  if (geteuid() == 0) {
    ASSERT_EQ(unlink(bad.c_str()), 0);
    ASSERT_EQ(symlink("/proc/self/mem", bad.c_str()), 0);
    want_err = absl::StrCat("vaultctl: ", bad, ": read ", bad, ": Input/output error\n");
    want_code = kExitFailure;
  } else {
    ASSERT_EQ(chmod(bad.c_str(), 0), 0);
    want_err = absl::StrCat("vaultctl: ", bad, ": open ", bad, ": Permission denied\n");
    want_code = kExitRefused;
  }

  RunResult put = Ctl({"cas", "put", dir});
  EXPECT_EQ(put.exit_code, want_code) << put.err;
  EXPECT_EQ(put.err, want_err);
  std::string want_out;
  for (const TestFile& f : files) {
    if (f.path != bad) absl::StrAppend(&want_out, DigestText(f.data), "  ", f.path, "\n");
  }
  EXPECT_TRUE(put.out == want_out)
      << "stdout differs: " << put.out.size() << " bytes, expected " << want_out.size();

  // All stored: the fixture's 4 objects and every new one (the empty file was one of those).
  RunResult ls = Ctl({"cas", "ls"});
  ASSERT_EQ(ls.exit_code, kExitOk) << ls;
  EXPECT_EQ(std::count(ls.out.begin(), ls.out.end(), '\n'), 4 + 2500 - 1 + 2) << ls.err;
  RunResult has = Ctl({"cas", "has", DigestText(files[0].data), DigestText(files[1233].data),
                       DigestText(files[1235].data), DigestText(files[2500].data)});
  EXPECT_EQ(has.exit_code, kExitOk) << has;

  // Again, as JSON: every file is present now, except the one that still cannot be read.
  put = Ctl({"--output", "json", "cas", "put", dir});
  EXPECT_EQ(put.exit_code, want_code) << put.err;
  EXPECT_EQ(put.err, "");
  size_t present = 0;
  for (size_t at = put.out.find("\"status\":\"present\""); at != std::string::npos;
       at = put.out.find("\"status\":\"present\"", at + 1)) {
    ++present;
  }
  EXPECT_EQ(present, files.size() - 1);

  // A directory named with a trailing "/": its files are "dir/x", not "dir//x".
  RunResult slash = Ctl({"cas", "put", dir + "/"});
  EXPECT_EQ(slash.exit_code, want_code) << slash.err;
  EXPECT_TRUE(slash.out == want_out) << "stdout differs: " << slash.out.substr(0, 200)
                                     << "\nexpected: " << want_out.substr(0, 200);
  EXPECT_NE(put.out.find(absl::StrCat("{\"file\":\"", bad, "\",\"status\":\"error\"")),
            std::string::npos);
}

// cas put retries BatchPut (idempotent) while the vault is unreachable or busy: a vault that
// comes back within the backoff gets the files.
TEST_F(CasCliTest, PutRetriesWhileTheVaultRestarts) {
  ASSERT_EQ(vaultd_->Stop(), std::optional<int>(0));
  const std::string file = root() + "/late";
  ASSERT_EQ(WriteFile(file, "stored after a restart"), absl::OkStatus());
  absl::StatusOr<std::unique_ptr<ChildProcess>> put = ChildProcess::Spawn(
      {VaultctlPath(), "--vault", vault_.socket, "cas", "put", file}, root() + "/put.log");
  ASSERT_TRUE(put.ok()) << put.status();
  absl::SleepFor(absl::Milliseconds(400));  // its first attempts fail: nothing listens
  ASSERT_EQ(vaultd_->Start(), absl::OkStatus());
  std::optional<int> code = (*put)->WaitExit(absl::Seconds(30));
  absl::StatusOr<std::string> log = ReadFile(root() + "/put.log");
  ASSERT_EQ(code, std::optional<int>(kExitOk)) << (log.ok() ? *log : "");
  EXPECT_EQ(Ctl({"cas", "has", DigestText("stored after a restart")}).exit_code, kExitOk);
}

}  // namespace
}  // namespace vault::integration
