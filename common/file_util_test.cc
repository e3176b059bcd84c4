#include "common/file_util.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "common/testing/temp_dir.h"
#include "gtest/gtest.h"

namespace vault::common {
namespace {

// A fresh directory per test, removed with everything in it afterwards.
class FileUtilTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = tmp_.path(); }
  std::string Path(const std::string& name) const { return dir_ + "/" + name; }

  static mode_t ModeOf(const std::string& path) {
    struct stat st;
    EXPECT_EQ(stat(path.c_str(), &st), 0) << path;
    return st.st_mode & 07777;
  }

  common::testing::TempDir tmp_{"file_util_test"};
  std::string dir_;
};

// Sets the umask for the scope of a test and restores it.
class ScopedUmask {
 public:
  explicit ScopedUmask(mode_t mask) : old_(umask(mask)) {}
  ~ScopedUmask() { umask(old_); }

 private:
  mode_t old_;
};

TEST_F(FileUtilTest, WriteNewFileCreatesWithContent) {
  const std::string path = Path("new");
  ASSERT_EQ(WriteNewFile(path, "hello\n", 0600), absl::OkStatus());
  absl::StatusOr<std::string> back = ReadFile(path);
  ASSERT_EQ(back.status(), absl::OkStatus());
  EXPECT_EQ(*back, "hello\n");
  EXPECT_EQ(ModeOf(path), 0600u);
}

TEST_F(FileUtilTest, WriteNewFileRefusesExistingFileAndKeepsContent) {
  const std::string path = Path("existing");
  ASSERT_EQ(WriteNewFile(path, "original", 0640), absl::OkStatus());
  absl::Status s = WriteNewFile(path, "replacement", 0600);
  EXPECT_EQ(s.code(), absl::StatusCode::kAlreadyExists) << s;
  absl::StatusOr<std::string> back = ReadFile(path);
  ASSERT_EQ(back.status(), absl::OkStatus());
  EXPECT_EQ(*back, "original");
  EXPECT_EQ(ModeOf(path), 0640u);
}

TEST_F(FileUtilTest, WriteNewFileModeIgnoresUmask) {
  ScopedUmask mask(0077);
  const std::string path = Path("shared");
  ASSERT_EQ(WriteNewFile(path, "x", 0644), absl::OkStatus());
  EXPECT_EQ(ModeOf(path), 0644u);
}

TEST_F(FileUtilTest, WriteFileAtomicModeIgnoresUmask) {
  ScopedUmask mask(0777);
  const std::string path = Path("atomic");
  ASSERT_EQ(WriteFileAtomic(path, "x", 0604), absl::OkStatus());
  EXPECT_EQ(ModeOf(path), 0604u);
}

TEST_F(FileUtilTest, WriteFileAtomicCreatesAndReplaces) {
  const std::string path = Path("conf");
  ASSERT_EQ(WriteFileAtomic(path, "first version, longer than the second", 0600), absl::OkStatus());
  ASSERT_EQ(WriteFileAtomic(path, "second", 0644), absl::OkStatus());
  absl::StatusOr<std::string> back = ReadFile(path);
  ASSERT_EQ(back.status(), absl::OkStatus());
  EXPECT_EQ(*back, "second");
  EXPECT_EQ(ModeOf(path), 0644u);
  // No temporary file is left behind.
  int entries = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
    EXPECT_EQ(entry.path().filename().string(), "conf");
    ++entries;
  }
  EXPECT_EQ(entries, 1);
}

TEST_F(FileUtilTest, WriteFileAtomicIntoMissingDirectoryIsNotFound) {
  absl::Status s = WriteFileAtomic(Path("no/such/file"), "x", 0600);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_FALSE(PathExists(Path("no")));
}

TEST_F(FileUtilTest, ReadPrivateFileRefusesGroupOrOtherPermissions) {
  ASSERT_EQ(WriteNewFile(Path("key"), "secret", 0600), absl::OkStatus());
  absl::StatusOr<std::string> got = ReadPrivateFile(Path("key"));
  ASSERT_EQ(got.status(), absl::OkStatus());
  EXPECT_EQ(*got, "secret");
  for (mode_t mode : {0640, 0604, 0644, 0660, 0601}) {
    ASSERT_EQ(chmod(Path("key").c_str(), mode), 0);
    absl::Status s = ReadPrivateFile(Path("key")).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << std::oct << mode;
    EXPECT_NE(s.message().find("chmod 600"), absl::string_view::npos) << s.message();
  }
  ASSERT_EQ(MakeDirs(Path("dir"), 0700), absl::OkStatus());
  EXPECT_EQ(ReadPrivateFile(Path("dir")).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ReadPrivateFile(Path("missing")).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(FileUtilTest, ReadFileRoundTripsBinaryAndLargeContent) {
  std::string data;
  for (int i = 0; i < 300000; ++i) data.push_back(static_cast<char>(i * 7 % 256));
  const std::string path = Path("binary");
  ASSERT_EQ(WriteNewFile(path, data, 0600), absl::OkStatus());
  absl::StatusOr<std::string> back = ReadFile(path);
  ASSERT_EQ(back.status(), absl::OkStatus());
  EXPECT_EQ(*back, data);
}

TEST_F(FileUtilTest, ReadFileOfEmptyFileIsEmpty) {
  const std::string path = Path("empty");
  ASSERT_EQ(WriteNewFile(path, "", 0600), absl::OkStatus());
  absl::StatusOr<std::string> back = ReadFile(path);
  ASSERT_EQ(back.status(), absl::OkStatus());
  EXPECT_EQ(*back, "");
}

TEST_F(FileUtilTest, ReadFileOfMissingFileIsNotFound) {
  absl::StatusOr<std::string> back = ReadFile(Path("missing"));
  EXPECT_EQ(back.status().code(), absl::StatusCode::kNotFound) << back.status();
}

TEST_F(FileUtilTest, PathExists) {
  EXPECT_TRUE(PathExists(dir_));
  EXPECT_FALSE(PathExists(Path("missing")));
  ASSERT_EQ(WriteNewFile(Path("f"), "", 0600), absl::OkStatus());
  EXPECT_TRUE(PathExists(Path("f")));
  // A dangling symlink exists (lstat).
  ASSERT_EQ(symlink(Path("nowhere").c_str(), Path("link").c_str()), 0);
  EXPECT_TRUE(PathExists(Path("link")));
}

TEST_F(FileUtilTest, MakeDirsCreatesNestedDirectories) {
  const std::string nested = Path("a/b/c");
  ASSERT_EQ(MakeDirs(nested, 0750), absl::OkStatus());
  struct stat st;
  ASSERT_EQ(stat(nested.c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  // Already a directory: OK again.
  EXPECT_EQ(MakeDirs(nested, 0750), absl::OkStatus());
  // Trailing and doubled slashes are tolerated.
  EXPECT_EQ(MakeDirs(Path("a//b/d/"), 0750), absl::OkStatus());
  EXPECT_TRUE(PathExists(Path("a/b/d")));
}

TEST_F(FileUtilTest, MakeDirsWorksWithRelativePaths) {
  char old_cwd[4096];
  ASSERT_NE(getcwd(old_cwd, sizeof(old_cwd)), nullptr);
  ASSERT_EQ(chdir(dir_.c_str()), 0);
  absl::Status s = MakeDirs("rel/x", 0700);
  ASSERT_EQ(chdir(old_cwd), 0);
  EXPECT_EQ(s, absl::OkStatus());
  EXPECT_TRUE(PathExists(Path("rel/x")));
}

TEST_F(FileUtilTest, MakeDirsOnAFileIsFailedPrecondition) {
  const std::string file = Path("file");
  ASSERT_EQ(WriteNewFile(file, "content", 0600), absl::OkStatus());
  absl::Status s = MakeDirs(file, 0700);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  absl::StatusOr<std::string> back = ReadFile(file);
  ASSERT_EQ(back.status(), absl::OkStatus());
  EXPECT_EQ(*back, "content");
}

TEST_F(FileUtilTest, MakeDirsOfEmptyPathIsInvalidArgument) {
  EXPECT_EQ(MakeDirs("", 0700).code(), absl::StatusCode::kInvalidArgument);
}

TEST(PosixError, MapsErrnoToCanonicalCodes) {
  EXPECT_EQ(PosixError(ENOENT, "x").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(PosixError(EEXIST, "x").code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(PosixError(EACCES, "x").code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(PosixError(ENOSPC, "x").code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(PosixError(EINVAL, "x").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PosixError(EAGAIN, "x").code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(PosixError(EIO, "x").code(), absl::StatusCode::kInternal);
  EXPECT_EQ(PosixError(ENOENT, "open /a").message(), "open /a: No such file or directory");
}

TEST(ResolvePath, JoinsRelativePathsOnly) {
  EXPECT_EQ(ResolvePath("/etc/vault", "key.pem"), "/etc/vault/key.pem");
  EXPECT_EQ(ResolvePath("/etc/vault/", "key.pem"), "/etc/vault/key.pem");
  EXPECT_EQ(ResolvePath("/etc/vault", "sub/key.pem"), "/etc/vault/sub/key.pem");
  EXPECT_EQ(ResolvePath("conf", "key.pem"), "conf/key.pem");
  EXPECT_EQ(ResolvePath("/etc/vault", "/abs/key.pem"), "/abs/key.pem");
  EXPECT_EQ(ResolvePath("/etc/vault", ""), "");
  EXPECT_EQ(ResolvePath("", "key.pem"), "key.pem");
  EXPECT_EQ(ResolvePath("/", "key.pem"), "/key.pem");
}

TEST(DirName, Cases) {
  EXPECT_EQ(DirName("/var/lib/vault/a.conf"), "/var/lib/vault");
  EXPECT_EQ(DirName("dir/file"), "dir");
  EXPECT_EQ(DirName("file"), ".");
  EXPECT_EQ(DirName(""), ".");
  EXPECT_EQ(DirName("/file"), "/");
  EXPECT_EQ(DirName("/"), "/");
}

}  // namespace
}  // namespace vault::common
