#include "agent/file_tree.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/testing/temp_dir.h"
#include "common/unique_fd.h"
#include "gtest/gtest.h"

namespace vault::agent {
namespace {

using absl::StatusCode;
using common::UniqueFd;

constexpr uint64_t kMax = 1 << 20;
constexpr absl::string_view kPasswd = "root:x:0:0:root:/root:/bin/bash\n";

// A fresh temporary directory (removed afterwards) holding the tree's root and, beside it,
// "outside": a stand-in for /etc, with a "passwd", that no vault path may reach.
struct Scene {
  Scene() {
    EXPECT_EQ(mkdir(outside.c_str(), 0700), 0) << strerror(errno);
    EXPECT_EQ(common::WriteFileAtomic(outside + "/passwd", kPasswd, 0644), absl::OkStatus());
    absl::StatusOr<std::unique_ptr<FileTree>> opened = FileTree::Open(root);
    EXPECT_TRUE(opened.ok()) << opened.status();
    if (opened.ok()) tree = std::move(*opened);
  }
  std::string Root(const std::string& name) const { return root + "/" + name; }
  std::string Outside(const std::string& name) const { return outside + "/" + name; }

  common::testing::TempDir tmp{"file_tree_test"};
  const std::string root = tmp.Path("root");
  const std::string outside = tmp.Path("outside");
  std::unique_ptr<FileTree> tree;
};

std::string HostRead(const std::string& path) {
  absl::StatusOr<std::string> data = common::ReadFile(path);
  EXPECT_TRUE(data.ok()) << data.status();
  return data.ok() ? *data : "<unreadable>";
}

void HostWrite(const std::string& path, absl::string_view data) {
  ASSERT_EQ(common::WriteFileAtomic(path, data, 0644), absl::OkStatus());
}

// The file type and permission bits of `path` itself (not a link's target); 0 when missing.
mode_t LstatMode(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0 ? st.st_mode : 0;
}

std::vector<std::string> HostNames(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

// Checks that "outside" still holds exactly the untouched passwd.
void ExpectOutsideUntouched(const Scene& scene) {
  EXPECT_EQ(HostNames(scene.outside), std::vector<std::string>{"passwd"});
  EXPECT_EQ(HostRead(scene.Outside("passwd")), kPasswd);
}

// Runs `fn` in a forked child and returns what it returned (0..255), or -1 when it has not
// returned within `timeout`: the child is then killed, so a call that blocks fails the test
// rather than hanging it.
int RunInChild(std::chrono::milliseconds timeout, const std::function<int()>& fn) {
  const pid_t pid = fork();
  if (pid < 0) return -2;
  if (pid == 0) _exit(fn());
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -3;
}

// Enters a mount namespace of this process's own (in a user namespace when not privileged), with
// every mount private so that nothing mounted reaches the host's.
bool EnterPrivateMountNamespace() {
  if (unshare(CLONE_NEWNS) != 0) {
    const uid_t uid = getuid();
    const gid_t gid = getgid();
    if (unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) return false;
    for (const auto& [file, text] :
         {std::pair<std::string, std::string>{"/proc/self/setgroups", "deny"},
          {"/proc/self/uid_map", absl::StrCat("0 ", uid, " 1")},
          {"/proc/self/gid_map", absl::StrCat("0 ", gid, " 1")}}) {
      UniqueFd fd(open(file.c_str(), O_WRONLY | O_CLOEXEC));
      if (!fd.valid() ||
          write(fd.get(), text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
        return false;
      }
    }
  }
  return mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0;
}

// --- Normal behaviour ---

TEST(FileTree, DoesCreateTheRootWithParents) {
  common::testing::TempDir tmp("file_tree_test");
  const std::string root = tmp.Path("a/b/files");
  absl::StatusOr<std::unique_ptr<FileTree>> tree = FileTree::Open(root);
  ASSERT_TRUE(tree.ok()) << tree.status();
  EXPECT_EQ((*tree)->root(), root);
  EXPECT_EQ(LstatMode(root), S_IFDIR | 0700);
  EXPECT_EQ(LstatMode(tmp.Path("a")), S_IFDIR | 0700);
}

TEST(FileTree, DoesRefuseARootThatIsNotADirectory) {
  common::testing::TempDir tmp("file_tree_test");
  HostWrite(tmp.Path("file"), "x");
  EXPECT_EQ(FileTree::Open(tmp.Path("file")).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(FileTree::Open("").status().code(), StatusCode::kInvalidArgument);
}

TEST(FileTree, DoesWriteThenReadBackExactBytes) {
  Scene scene;
  ASSERT_NE(scene.tree, nullptr);
  std::string data("a\0b\xff\n", 5);
  for (int i = 0; i < 256; ++i) data.push_back(static_cast<char>(i));
  absl::StatusOr<uint64_t> size = scene.tree->Write("/vault/blob", data, false);
  ASSERT_TRUE(size.ok()) << size.status();
  EXPECT_EQ(*size, data.size());
  absl::StatusOr<FileRead> back = scene.tree->Read("/vault/blob", 0, 0, kMax);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->data, data);
  EXPECT_EQ(back->size, data.size());
  EXPECT_EQ(HostRead(scene.Root("blob")), data);
  EXPECT_EQ(LstatMode(scene.Root("blob")), S_IFREG | 0600);
}

TEST(FileTree, DoesWriteAnEmptyFile) {
  Scene scene;
  ASSERT_NE(scene.tree, nullptr);
  absl::StatusOr<uint64_t> size = scene.tree->Write("/vault/empty", "", false);
  ASSERT_TRUE(size.ok()) << size.status();
  EXPECT_EQ(*size, 0u);
  absl::StatusOr<FileRead> back = scene.tree->Read("/vault/empty", 0, 0, kMax);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->data, "");
  EXPECT_EQ(back->size, 0u);
}

TEST(FileTree, DoesReadFromOffsetUpToLimit) {
  Scene scene;
  ASSERT_NE(scene.tree, nullptr);
  ASSERT_TRUE(scene.tree->Write("/vault/f", "0123456789", false).ok());
  absl::StatusOr<FileRead> middle = scene.tree->Read("/vault/f", 3, 4, kMax);
  ASSERT_TRUE(middle.ok()) << middle.status();
  EXPECT_EQ(middle->data, "3456");
  EXPECT_EQ(middle->size, 10u);
  absl::StatusOr<FileRead> to_end = scene.tree->Read("/vault/f", 7, 0, kMax);
  ASSERT_TRUE(to_end.ok()) << to_end.status();
  EXPECT_EQ(to_end->data, "789");
  absl::StatusOr<FileRead> past_end = scene.tree->Read("/vault/f", 8, 100, kMax);
  ASSERT_TRUE(past_end.ok()) << past_end.status();
  EXPECT_EQ(past_end->data, "89");
  absl::StatusOr<FileRead> at_end = scene.tree->Read("/vault/f", 10, 0, kMax);
  ASSERT_TRUE(at_end.ok()) << at_end.status();
  EXPECT_EQ(at_end->data, "");
  EXPECT_EQ(at_end->size, 10u);
}

TEST(FileTree, DoesAppendCreatingTheFileFirst) {
  Scene scene;
  ASSERT_NE(scene.tree, nullptr);
  absl::StatusOr<uint64_t> size = scene.tree->Write("/vault/log", "abc", true);
  ASSERT_TRUE(size.ok()) << size.status();
  EXPECT_EQ(*size, 3u);
  size = scene.tree->Write("/vault/log", "def", true);
  ASSERT_TRUE(size.ok()) << size.status();
  EXPECT_EQ(*size, 6u);
  EXPECT_EQ(HostRead(scene.Root("log")), "abcdef");
  EXPECT_EQ(LstatMode(scene.Root("log")), S_IFREG | 0600);
  size = scene.tree->Write("/vault/log", "new", false);
  ASSERT_TRUE(size.ok()) << size.status();
  EXPECT_EQ(*size, 3u);
  size = scene.tree->Write("/vault/log", "er", true);
  ASSERT_TRUE(size.ok()) << size.status();
  EXPECT_EQ(*size, 5u);
  EXPECT_EQ(HostRead(scene.Root("log")), "newer");
}

TEST(FileTree, DoesCreateNestedDirectoriesBeneathTheRoot) {
  Scene scene;
  ASSERT_NE(scene.tree, nullptr);
  ASSERT_TRUE(scene.tree->Write("/vault/a/b/c/file", "deep", false).ok());
  EXPECT_EQ(LstatMode(scene.Root("a")), S_IFDIR | 0700);
  EXPECT_EQ(LstatMode(scene.Root("a/b")), S_IFDIR | 0700);
  EXPECT_EQ(LstatMode(scene.Root("a/b/c")), S_IFDIR | 0700);
  EXPECT_EQ(HostRead(scene.Root("a/b/c/file")), "deep");
  ASSERT_TRUE(scene.tree->Write("/vault/a/b/log", "x", true).ok());
  EXPECT_EQ(HostRead(scene.Root("a/b/log")), "x");
}

TEST(FileTree, DoesReplaceAtomicallyLeavingOpenReadersTheOldContent) {
  Scene scene;
  ASSERT_NE(scene.tree, nullptr);
  ASSERT_TRUE(scene.tree->Write("/vault/state", "old content", false).ok());
  UniqueFd reader(open(scene.Root("state").c_str(), O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(reader.valid());
  ASSERT_TRUE(scene.tree->Write("/vault/state", "new", false).ok());
  char buf[64];
  ssize_t n = pread(reader.get(), buf, sizeof buf, 0);
  ASSERT_GE(n, 0);
  EXPECT_EQ(std::string(buf, static_cast<size_t>(n)), "old content");
  absl::StatusOr<FileRead> back = scene.tree->Read("/vault/state", 0, 0, kMax);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->data, "new");
  // No temporary file is left behind.
  EXPECT_EQ(HostNames(scene.root), std::vector<std::string>{"state"});
}

TEST(FileTree, DoesListSortedWithSizesAndDirectoryFlags) {
  Scene scene;
  ASSERT_NE(scene.tree, nullptr);
  ASSERT_TRUE(scene.tree->Write("/vault/b", "12345", false).ok());
  ASSERT_TRUE(scene.tree->Write("/vault/a.txt", "1", false).ok());
  ASSERT_TRUE(scene.tree->Write("/vault/B/inner", "xy", false).ok());
  ASSERT_TRUE(scene.tree->Write("/vault/a/inner", "xyz", false).ok());
  absl::StatusOr<std::vector<FileEntry>> entries = scene.tree->List("/vault", 100);
  ASSERT_TRUE(entries.ok()) << entries.status();
  ASSERT_EQ(entries->size(), 4u);
  const std::vector<std::tuple<std::string, bool, uint64_t>> want = {
      {"B", true, 0}, {"a", true, 0}, {"a.txt", false, 1}, {"b", false, 5}};
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ((*entries)[i].name, std::get<0>(want[i]));
    EXPECT_EQ((*entries)[i].directory, std::get<1>(want[i])) << std::get<0>(want[i]);
    EXPECT_EQ((*entries)[i].size, std::get<2>(want[i])) << std::get<0>(want[i]);
  }
  absl::StatusOr<std::vector<FileEntry>> inner = scene.tree->List("/vault/a", 100);
  ASSERT_TRUE(inner.ok()) << inner.status();
  ASSERT_EQ(inner->size(), 1u);
  EXPECT_EQ((*inner)[0].name, "inner");
  EXPECT_EQ((*inner)[0].size, 3u);
}

TEST(FileTree, DoesListAnEmptyDirectory) {
  Scene scene;
  ASSERT_NE(scene.tree, nullptr);
  absl::StatusOr<std::vector<FileEntry>> entries = scene.tree->List("/vault", 0);
  ASSERT_TRUE(entries.ok()) << entries.status();
  EXPECT_TRUE(entries->empty());
}

TEST(FileTree, DoesRefuseListingMoreThanMaxEntries) {
  Scene scene;
  ASSERT_NE(scene.tree, nullptr);
  for (const char* name : {"/vault/x", "/vault/y", "/vault/z/file"}) {
    ASSERT_TRUE(scene.tree->Write(name, "1", false).ok()) << name;
  }
  // Entries that are not listed do not count.
  ASSERT_EQ(symlink("x", scene.Root("link").c_str()), 0);
  absl::StatusOr<std::vector<FileEntry>> exact = scene.tree->List("/vault", 3);
  ASSERT_TRUE(exact.ok()) << exact.status();
  EXPECT_EQ(exact->size(), 3u);
  EXPECT_EQ(scene.tree->List("/vault", 2).status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(scene.tree->List("/vault", 0).status().code(), StatusCode::kResourceExhausted);
}

TEST(FileTree, DoesMeasureUsageOfRegularFilesAndDirectories) {
  Scene scene;
  ASSERT_NE(scene.tree, nullptr);
  ASSERT_TRUE(scene.tree->Write("/vault/a", "12345", false).ok());
  ASSERT_TRUE(scene.tree->Write("/vault/d/e/b", "123", false).ok());
  ASSERT_EQ(symlink(scene.Outside("passwd").c_str(), scene.Root("link").c_str()), 0);
  ASSERT_EQ(mkfifo(scene.Root("fifo").c_str(), 0600), 0);
  absl::StatusOr<TreeUsage> usage = scene.tree->Usage();
  ASSERT_TRUE(usage.ok()) << usage.status();
  EXPECT_EQ(usage->bytes, 8u);
  EXPECT_EQ(usage->files, 2u);
  EXPECT_EQ(usage->directories, 2u);
}

TEST(FileTree, DoesKeepConcurrentWritesWhole) {
  Scene scene;
  ASSERT_NE(scene.tree, nullptr);
  constexpr int kThreads = 8;
  constexpr int kRounds = 20;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&scene, t] {
      const std::string mine(100, static_cast<char>('a' + t));
      for (int i = 0; i < kRounds; ++i) {
        EXPECT_TRUE(scene.tree->Write("/vault/shared", mine, false).ok());
        EXPECT_TRUE(scene.tree->Write(absl::StrCat("/vault/own/", t), mine, false).ok());
        EXPECT_TRUE(scene.tree->Write("/vault/log", mine.substr(0, 10), true).ok());
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  const std::string shared = HostRead(scene.Root("shared"));
  ASSERT_EQ(shared.size(), 100u);
  EXPECT_EQ(shared, std::string(100, shared[0]));
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(HostRead(scene.Root(absl::StrCat("own/", t))),
              std::string(100, static_cast<char>('a' + t)));
  }
  EXPECT_EQ(HostRead(scene.Root("log")).size(), size_t{kThreads * kRounds * 10});
  EXPECT_EQ(HostNames(scene.root), (std::vector<std::string>{"log", "own", "shared"}));
}

// --- Attacks: each tries to break a rule and must fail with the documented code ---

TEST(FileTree, DoesRefusePathsOutsideTheVaultGrammar) {
  Scene scene;
  ASSERT_NE(scene.tree, nullptr);
  const std::vector<std::string> bad = {"/vaultx",
                                        "/vault/../etc",
                                        "/vault/..",
                                        "/vault//a",
                                        "vault/a",
                                        "/vault/a/",
                                        "/vault/",
                                        "/vault/%2e%2e",
                                        "/vault/%2e%2e/etc/passwd",
                                        "/other",
                                        "/",
                                        "",
                                        "/vault/.",
                                        "/vault/a/./b",
                                        "/vault/a\\..\\..\\etc",
                                        std::string("/vault/a\0/../../etc", 19),
                                        "/vault/\xc0\xae\xc0\xae",
                                        "/vault/a b",
                                        "/../vault/a",
                                        std::string(5000, '/')};
  for (const std::string& path : bad) {
    EXPECT_EQ(scene.tree->Read(path, 0, 0, kMax).status().code(), StatusCode::kInvalidArgument)
        << path;
    EXPECT_EQ(scene.tree->Write(path, "x", false).status().code(), StatusCode::kInvalidArgument)
        << path;
    EXPECT_EQ(scene.tree->Write(path, "x", true).status().code(), StatusCode::kInvalidArgument)
        << path;
    EXPECT_EQ(scene.tree->List(path, 10).status().code(), StatusCode::kInvalidArgument) << path;
  }
  EXPECT_TRUE(HostNames(scene.root).empty());
  ExpectOutsideUntouched(scene);
}

TEST(FileTree, DoesRefuseASymlinkToOutsideOnThePath) {
  Scene scene;
  ASSERT_NE(scene.tree, nullptr);
  ASSERT_EQ(symlink(scene.outside.c_str(), scene.Root("etc").c_str()), 0);
  EXPECT_EQ(scene.tree->Read("/vault/etc/passwd", 0, 0, kMax).status().code(),
            StatusCode::kPermissionDenied);
  EXPECT_EQ(scene.tree->List("/vault/etc", 10).status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(scene.tree->Write("/vault/etc/passwd", "owned", false).status().code(),
            StatusCode::kPermissionDenied);
  EXPECT_EQ(scene.tree->Write("/vault/etc/passwd", "owned", true).status().code(),
            StatusCode::kPermissionDenied);
  EXPECT_EQ(scene.tree->Write("/vault/etc/cron.d/job", "owned", false).status().code(),
            StatusCode::kPermissionDenied);
  ExpectOutsideUntouched(scene);
}

TEST(FileTree, DoesRefuseASymlinkToDotDotOnThePath) {
  Scene scene;
  ASSERT_NE(scene.tree, nullptr);
  ASSERT_EQ(symlink("..", scene.Root("up").c_str()), 0);
  EXPECT_EQ(scene.tree->Read("/vault/up/outside/passwd", 0, 0, kMax).status().code(),
            StatusCode::kPermissionDenied);
  EXPECT_EQ(scene.tree->List("/vault/up", 10).status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(scene.tree->List("/vault/up/outside", 10).status().code(),
            StatusCode::kPermissionDenied);
  EXPECT_EQ(scene.tree->Write("/vault/up/outside/passwd", "owned", false).status().code(),
            StatusCode::kPermissionDenied);
  EXPECT_EQ(scene.tree->Write("/vault/up/outside/new", "owned", true).status().code(),
            StatusCode::kPermissionDenied);
  ExpectOutsideUntouched(scene);
}

TEST(FileTree, DoesRefuseEvenASymlinkThatStaysInsideTheTree) {
  Scene scene;
  ASSERT_NE(scene.tree, nullptr);
  ASSERT_TRUE(scene.tree->Write("/vault/real/f", "data", false).ok());
  ASSERT_EQ(symlink("real", scene.Root("alias").c_str()), 0);
  ASSERT_EQ(symlink("real/f", scene.Root("f").c_str()), 0);
  EXPECT_EQ(scene.tree->Read("/vault/alias/f", 0, 0, kMax).status().code(),
            StatusCode::kPermissionDenied);
  EXPECT_EQ(scene.tree->Read("/vault/f", 0, 0, kMax).status().code(),
            StatusCode::kPermissionDenied);
  EXPECT_EQ(scene.tree->Write("/vault/alias/g", "x", false).status().code(),
            StatusCode::kPermissionDenied);
  EXPECT_FALSE(std::filesystem::exists(scene.Root("real/g")));
}

TEST(FileTree, DoesRefuseReadingThroughAFinalSymlink) {
  Scene scene;
  ASSERT_NE(scene.tree, nullptr);
  ASSERT_EQ(symlink(scene.Outside("passwd").c_str(), scene.Root("passwd").c_str()), 0);
  ASSERT_EQ(symlink("../outside/passwd", scene.Root("relative").c_str()), 0);
  EXPECT_EQ(scene.tree->Read("/vault/passwd", 0, 0, kMax).status().code(),
            StatusCode::kPermissionDenied);
  EXPECT_EQ(scene.tree->Read("/vault/relative", 0, 0, kMax).status().code(),
            StatusCode::kPermissionDenied);
  EXPECT_EQ(scene.tree->List("/vault/passwd", 10).status().code(), StatusCode::kPermissionDenied);
}

TEST(FileTree, DoesReplaceAFinalSymlinkItselfNeverItsTarget) {
  Scene scene;
  ASSERT_NE(scene.tree, nullptr);
  ASSERT_EQ(symlink(scene.Outside("passwd").c_str(), scene.Root("passwd").c_str()), 0);
  // A dangling link: following it would create a file outside.
  ASSERT_EQ(symlink(scene.Outside("shadow").c_str(), scene.Root("shadow").c_str()), 0);
  absl::StatusOr<uint64_t> size = scene.tree->Write("/vault/passwd", "owned", false);
  ASSERT_TRUE(size.ok()) << size.status();
  EXPECT_EQ(*size, 5u);
  ASSERT_TRUE(scene.tree->Write("/vault/shadow", "owned", false).ok());
  ExpectOutsideUntouched(scene);
  EXPECT_EQ(LstatMode(scene.Root("passwd")), S_IFREG | 0600);
  EXPECT_EQ(HostRead(scene.Root("passwd")), "owned");
  EXPECT_EQ(LstatMode(scene.Root("shadow")), S_IFREG | 0600);
}

TEST(FileTree, DoesRefuseAppendingToASymlink) {
  Scene scene;
  ASSERT_NE(scene.tree, nullptr);
  ASSERT_EQ(symlink(scene.Outside("passwd").c_str(), scene.Root("passwd").c_str()), 0);
  ASSERT_EQ(symlink(scene.Outside("shadow").c_str(), scene.Root("shadow").c_str()), 0);
  ASSERT_TRUE(scene.tree->Write("/vault/real", "inside", false).ok());
  ASSERT_EQ(symlink("real", scene.Root("alias").c_str()), 0);
  EXPECT_EQ(scene.tree->Write("/vault/passwd", "evil::0:0::/:/bin/sh\n", true).status().code(),
            StatusCode::kPermissionDenied);
  EXPECT_EQ(scene.tree->Write("/vault/shadow", "evil", true).status().code(),
            StatusCode::kPermissionDenied);
  EXPECT_EQ(scene.tree->Write("/vault/alias", "more", true).status().code(),
            StatusCode::kPermissionDenied);
  ExpectOutsideUntouched(scene);
  EXPECT_EQ(HostRead(scene.Root("real")), "inside");
  EXPECT_EQ(LstatMode(scene.Root("passwd")) & S_IFMT, S_IFLNK);
}

TEST(FileTree, DoesRefuseAFifoWithoutBlocking) {
  Scene scene;
  ASSERT_NE(scene.tree, nullptr);
  const std::string fifo = scene.Root("fifo");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  // In a child, which is killed if it blocks: bit i of its exit code for call i that failed.
  const int failed = RunInChild(std::chrono::seconds(5), [&] {
    FileTree& tree = *scene.tree;
    const std::vector<absl::Status> statuses = {
        tree.Read("/vault/fifo", 0, 0, kMax).status(),
        tree.Write("/vault/fifo", "x", true).status(),
        tree.Write("/vault/fifo", "x", false).status(),
        tree.List("/vault/fifo", 10).status(),
        tree.Read("/vault/fifo/x", 0, 0, kMax).status(),
        tree.Write("/vault/fifo/x", "x", false).status(),
        tree.Write("/vault/fifo/x", "x", true).status(),
    };
    int bits = 0;
    for (size_t i = 0; i < statuses.size(); ++i) {
      if (statuses[i].code() != StatusCode::kFailedPrecondition) bits |= 1 << i;
    }
    return bits;
  });
  ASSERT_NE(failed, -1) << "a call blocked on the FIFO";
  EXPECT_EQ(failed, 0) << "bit mask of the calls that did not fail with FAILED_PRECONDITION";
  EXPECT_EQ(LstatMode(fifo) & S_IFMT, S_IFIFO);
  absl::StatusOr<std::vector<FileEntry>> entries = scene.tree->List("/vault", 10);
  ASSERT_TRUE(entries.ok()) << entries.status();
  EXPECT_TRUE(entries->empty());
}

TEST(FileTree, DoesRefuseASocket) {
  Scene scene;
  ASSERT_NE(scene.tree, nullptr);
  const std::string path = scene.Root("sock");
  UniqueFd sock(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  ASSERT_TRUE(sock.valid());
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  ASSERT_LT(path.size(), sizeof addr.sun_path);
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  ASSERT_EQ(bind(sock.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0)
      << strerror(errno);
  ASSERT_EQ(listen(sock.get(), 1), 0);
  EXPECT_EQ(scene.tree->Read("/vault/sock", 0, 0, kMax).status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(scene.tree->Write("/vault/sock", "x", true).status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(scene.tree->Write("/vault/sock", "x", false).status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(LstatMode(path) & S_IFMT, S_IFSOCK);
  absl::StatusOr<std::vector<FileEntry>> entries = scene.tree->List("/vault", 10);
  ASSERT_TRUE(entries.ok()) << entries.status();
  EXPECT_TRUE(entries->empty());
}

TEST(FileTree, DoesRefuseADevice) {
  Scene scene;
  ASSERT_NE(scene.tree, nullptr);
  const std::string path = scene.Root("null");
  if (mknod(path.c_str(), S_IFCHR | 0600, makedev(1, 3)) != 0) {
    GTEST_SKIP() << "cannot make a device node here: " << strerror(errno);
  }
  EXPECT_EQ(scene.tree->Read("/vault/null", 0, 0, kMax).status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(scene.tree->Write("/vault/null", "x", true).status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(scene.tree->Write("/vault/null", "x", false).status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(LstatMode(path) & S_IFMT, S_IFCHR);
  absl::StatusOr<std::vector<FileEntry>> entries = scene.tree->List("/vault", 10);
  ASSERT_TRUE(entries.ok()) << entries.status();
  EXPECT_TRUE(entries->empty());
}

TEST(FileTree, DoesRefuseCrossingIntoAnotherMount) {
  Scene scene;
  ASSERT_NE(scene.tree, nullptr);
  ASSERT_EQ(mkdir(scene.Root("mnt").c_str(), 0700), 0);
  constexpr int kSkip = 77;
  // In a child with a private mount namespace, so that the mount never reaches the host: bit i
  // of its exit code for check i that failed.
  const int failed = RunInChild(std::chrono::seconds(30), [&] {
    if (!EnterPrivateMountNamespace()) return kSkip;
    const std::string mnt = scene.Root("mnt");
    if (mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=64k,mode=0700") != 0) return kSkip;
    if (!common::WriteFileAtomic(mnt + "/x", "mounted", 0600).ok()) return kSkip;
    // Opened after the mount: a descriptor from before the namespace was made is on the
    // parent's copy of the mounts, where nothing is mounted on mnt.
    absl::StatusOr<std::unique_ptr<FileTree>> tree = FileTree::Open(scene.root);
    if (!tree.ok()) return kSkip;
    const std::vector<absl::Status> statuses = {
        (*tree)->Read("/vault/mnt/x", 0, 0, kMax).status(),
        (*tree)->List("/vault/mnt", 10).status(),
        (*tree)->Write("/vault/mnt/y", "y", false).status(),
        (*tree)->Write("/vault/mnt/x", "y", true).status(),
        (*tree)->Write("/vault/mnt/x", "y", false).status(),
    };
    int bits = 0;
    for (size_t i = 0; i < statuses.size(); ++i) {
      if (statuses[i].code() != StatusCode::kPermissionDenied) bits |= 1 << i;
    }
    absl::StatusOr<std::string> x = common::ReadFile(mnt + "/x");
    if (common::PathExists(mnt + "/y") || !x.ok() || *x != "mounted") bits |= 1 << 5;
    return bits;
  });
  if (failed == kSkip) GTEST_SKIP() << "cannot make a mount namespace here";
  EXPECT_EQ(failed, 0) << "bit mask of the failed checks";
}

TEST(FileTree, DoesRefuseReadingADirectory) {
  Scene scene;
  ASSERT_NE(scene.tree, nullptr);
  ASSERT_TRUE(scene.tree->Write("/vault/d/f", "x", false).ok());
  EXPECT_EQ(scene.tree->Read("/vault/d", 0, 0, kMax).status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(scene.tree->Read("/vault", 0, 0, kMax).status().code(),
            StatusCode::kFailedPrecondition);
}

TEST(FileTree, DoesReportMissingFilesAsNotFound) {
  Scene scene;
  ASSERT_NE(scene.tree, nullptr);
  EXPECT_EQ(scene.tree->Read("/vault/missing", 0, 0, kMax).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(scene.tree->Read("/vault/no/such/file", 0, 0, kMax).status().code(),
            StatusCode::kNotFound);
  EXPECT_EQ(scene.tree->List("/vault/missing", 10).status().code(), StatusCode::kNotFound);
  // Reading never creates anything.
  EXPECT_TRUE(HostNames(scene.root).empty());
}

TEST(FileTree, DoesRefuseWritingOverADirectory) {
  Scene scene;
  ASSERT_NE(scene.tree, nullptr);
  ASSERT_TRUE(scene.tree->Write("/vault/d/f", "keep", false).ok());
  EXPECT_EQ(scene.tree->Write("/vault/d", "x", false).status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(scene.tree->Write("/vault/d", "x", true).status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(scene.tree->Write("/vault", "x", false).status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(scene.tree->Write("/vault", "x", true).status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(LstatMode(scene.Root("d")) & S_IFMT, S_IFDIR);
  EXPECT_EQ(HostRead(scene.Root("d/f")), "keep");
  EXPECT_EQ(HostNames(scene.Root("d")), std::vector<std::string>{"f"});
}

TEST(FileTree, DoesRefuseAParentThatIsARegularFile) {
  Scene scene;
  ASSERT_NE(scene.tree, nullptr);
  ASSERT_TRUE(scene.tree->Write("/vault/f", "file", false).ok());
  EXPECT_EQ(scene.tree->Write("/vault/f/x", "x", false).status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(scene.tree->Write("/vault/f/x", "x", true).status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(scene.tree->Write("/vault/f/x/y", "x", false).status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(scene.tree->Read("/vault/f/x", 0, 0, kMax).status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(scene.tree->List("/vault/f/x", 10).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(scene.tree->List("/vault/f", 10).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(HostRead(scene.Root("f")), "file");
}

TEST(FileTree, DoesRefuseReadingMoreThanMaxBytes) {
  Scene scene;
  ASSERT_NE(scene.tree, nullptr);
  ASSERT_TRUE(scene.tree->Write("/vault/f", std::string(100, 'x'), false).ok());
  EXPECT_EQ(scene.tree->Read("/vault/f", 0, 0, 50).status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(scene.tree->Read("/vault/f", 0, 51, 50).status().code(),
            StatusCode::kResourceExhausted);
  EXPECT_EQ(scene.tree->Read("/vault/f", 49, 0, 50).status().code(),
            StatusCode::kResourceExhausted);
  EXPECT_EQ(scene.tree->Read("/vault/f", 0, 1, 0).status().code(), StatusCode::kResourceExhausted);
  // What fits is read: a range of exactly max_bytes, or a limit beyond what the file holds.
  absl::StatusOr<FileRead> exact = scene.tree->Read("/vault/f", 0, 50, 50);
  ASSERT_TRUE(exact.ok()) << exact.status();
  EXPECT_EQ(exact->data.size(), 50u);
  EXPECT_EQ(exact->size, 100u);
  absl::StatusOr<FileRead> tail = scene.tree->Read("/vault/f", 60, 0, 50);
  ASSERT_TRUE(tail.ok()) << tail.status();
  EXPECT_EQ(tail->data.size(), 40u);
  absl::StatusOr<FileRead> generous = scene.tree->Read("/vault/f", 90, 1000, 50);
  ASSERT_TRUE(generous.ok()) << generous.status();
  EXPECT_EQ(generous->data.size(), 10u);
}

TEST(FileTree, DoesRefuseAnOffsetPastTheEnd) {
  Scene scene;
  ASSERT_NE(scene.tree, nullptr);
  ASSERT_TRUE(scene.tree->Write("/vault/f", "0123456789", false).ok());
  EXPECT_EQ(scene.tree->Read("/vault/f", 11, 0, kMax).status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(scene.tree->Read("/vault/f", UINT64_MAX, 1, kMax).status().code(),
            StatusCode::kOutOfRange);
  EXPECT_EQ(scene.tree->Read("/vault/f", uint64_t{1} << 63, 0, kMax).status().code(),
            StatusCode::kOutOfRange);
}

}  // namespace
}  // namespace vault::agent
