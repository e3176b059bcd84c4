#include "common/folder_lease.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/file_util.h"
#include "common/testing/temp_dir.h"
#include "gtest/gtest.h"

namespace vault::common {
namespace {

class FolderLeaseTest : public ::testing::Test {
 protected:
  std::string Make(const std::string& name) {
    const std::string dir = tmp_.path() + "/" + name;
    EXPECT_TRUE(MakeDirs(dir + "/sub", 0755).ok());
    EXPECT_TRUE(WriteFileAtomic(dir + "/sub/file", "bytes", 0644).ok());
    EXPECT_TRUE(MarkLeased(dir).ok());
    return dir;
  }
  int Sweep() {
    return RemoveUnleased(tmp_.path(),
                          [](absl::string_view name) { return absl::StartsWith(name, "run-"); });
  }

  testing::TempDir tmp_{"folder_lease_test"};
};

TEST_F(FolderLeaseTest, OnlyTheFoldersNobodyLeasesAreRemoved) {
  const std::string shared = Make("run-shared");
  const std::string exclusive = Make("run-exclusive");
  const std::string idle = Make("run-idle");
  const std::string other = Make("other");
  absl::StatusOr<FolderLease> a = FolderLease::Take(shared, /*exclusive=*/false);
  absl::StatusOr<FolderLease> b = FolderLease::Take(shared, /*exclusive=*/false);
  absl::StatusOr<FolderLease> c = FolderLease::Take(exclusive, /*exclusive=*/true);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_TRUE(a->held());

  EXPECT_EQ(Sweep(), 1);
  EXPECT_TRUE(PathExists(shared + "/sub/file"));
  EXPECT_TRUE(PathExists(exclusive + "/sub/file"));
  EXPECT_FALSE(PathExists(idle));
  EXPECT_TRUE(PathExists(other + "/sub/file"));  // not a name the caller claims

  *a = FolderLease();  // one of two shared holders lets go: still leased
  EXPECT_EQ(Sweep(), 0);
  *b = FolderLease();
  *c = FolderLease();
  EXPECT_EQ(Sweep(), 2);
  EXPECT_FALSE(PathExists(shared));
  EXPECT_FALSE(PathExists(exclusive));
}

TEST_F(FolderLeaseTest, ALeaseDiesWithItsProcessKilledBySigkill) {
  const std::string dir = Make("run-killed");
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    absl::StatusOr<FolderLease> lease = FolderLease::Take(dir, /*exclusive=*/false);
    const char c = lease.ok() ? 'y' : 'n';
    (void)!write(ready[1], &c, 1);
    pause();
    _exit(0);
  }
  close(ready[1]);
  char c = 0;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  close(ready[0]);
  ASSERT_EQ(c, 'y');
  EXPECT_EQ(Sweep(), 0);  // its holder is alive
  ASSERT_EQ(kill(child, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_EQ(Sweep(), 1);
  EXPECT_FALSE(PathExists(dir));
}

TEST_F(FolderLeaseTest, ATakeWaitingOnAFolderThatIsRemovedIsAborted) {
  const std::string dir = Make("run-raced");
  absl::StatusOr<FolderLease> remover = FolderLease::Take(dir, /*exclusive=*/true);
  ASSERT_TRUE(remover.ok());
  absl::Status waited;
  std::thread taker([&] { waited = FolderLease::Take(dir, /*exclusive=*/false).status(); });
  // Until the taker waits on the lock: /proc/locks lists a blocked request with "->".
  for (const absl::Time deadline = absl::Now() + absl::Seconds(10);
       !absl::StrContains(ReadFile("/proc/locks").value_or(""), "-> FLOCK") &&
       absl::Now() < deadline;) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  ASSERT_EQ(rename(dir.c_str(), (dir + "-gone").c_str()), 0);
  Make("run-raced");  // a new folder under the old name is not the one it locked either
  *remover = FolderLease();
  taker.join();
  EXPECT_EQ(waited.code(), absl::StatusCode::kAborted) << waited;
  EXPECT_TRUE(FolderLease::Take(dir, /*exclusive=*/false).ok());
}

TEST_F(FolderLeaseTest, AMissingFolderIsNotFoundAndAHalfRemovedOneIsFinished) {
  EXPECT_EQ(FolderLease::Take(tmp_.path() + "/run-none", false).status().code(),
            absl::StatusCode::kNotFound);
  const std::string leftover = Make(".removing-run-old");  // a remover was killed halfway
  EXPECT_EQ(Sweep(), 0);
  EXPECT_FALSE(PathExists(leftover));
}

TEST_F(FolderLeaseTest, AFolderWithoutTheMarkIsNeverRemoved) {
  // Another build's (which takes no leases): in use or not, nothing here can tell.
  const std::string legacy = tmp_.path() + "/run-legacy";
  ASSERT_TRUE(MakeDirs(legacy, 0755).ok());
  ASSERT_TRUE(WriteFileAtomic(legacy + "/file", "bytes", 0644).ok());
  EXPECT_EQ(Sweep(), 0);
  EXPECT_TRUE(PathExists(legacy + "/file"));
  ASSERT_TRUE(MarkLeased(legacy).ok());
  EXPECT_EQ(Sweep(), 1);
  EXPECT_FALSE(PathExists(legacy));
}

TEST_F(FolderLeaseTest, ASymlinkIsNeitherLeasedNorFollowed) {
  const std::string target = Make("target");
  ASSERT_EQ(symlink(target.c_str(), (tmp_.path() + "/run-link").c_str()), 0);
  EXPECT_FALSE(FolderLease::Take(tmp_.path() + "/run-link", false).ok());
  EXPECT_EQ(Sweep(), 0);
  EXPECT_TRUE(PathExists(target + "/sub/file"));
}

}  // namespace
}  // namespace vault::common
