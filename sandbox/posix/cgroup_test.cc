#include "sandbox/posix/cgroup.h"

#include <errno.h>
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/file_util.h"
#include "common/testing/temp_dir.h"

namespace vault::sandbox {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::SizeIs;

#define CG_CONCAT_INNER_(a, b) a##b
#define CG_CONCAT_(a, b) CG_CONCAT_INNER_(a, b)

#define ASSERT_OK(expr)                         \
  do {                                          \
    const ::absl::Status cg_status_ = (expr);   \
    ASSERT_TRUE(cg_status_.ok()) << cg_status_; \
  } while (0)

#define ASSERT_OK_AND_ASSIGN(lhs, expr)                \
  auto CG_CONCAT_(cg_statusor_, __LINE__) = (expr);    \
  ASSERT_TRUE(CG_CONCAT_(cg_statusor_, __LINE__).ok()) \
      << CG_CONCAT_(cg_statusor_, __LINE__).status();  \
  lhs = std::move(CG_CONCAT_(cg_statusor_, __LINE__)).value()

constexpr uint64_t kMiB = 1 << 20;

// A cgroup folder name no other test or test run uses.
std::string UniqueFolder(const std::string& test) {
  return absl::StrCat("vault-sandbox-test-", getpid(), "-", test);
}

std::string ReadText(const std::string& path) {
  absl::StatusOr<std::string> text = common::ReadFile(path);
  if (!text.ok()) return absl::StrCat("<", text.status().ToString(), ">");
  return std::string(absl::StripAsciiWhitespace(*text));
}

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
  ASSERT_TRUE(out.good()) << path;
}

// The cgroup mount points of this machine.
std::vector<std::string> CgroupMountPoints() {
  std::vector<std::string> mounts;
  for (absl::string_view line : absl::StrSplit(ReadText("/proc/self/mountinfo"), '\n')) {
    std::vector<std::string> fields = absl::StrSplit(line, ' ');
    auto dash = std::find(fields.begin(), fields.end(), "-");
    if (fields.size() < 5 || dash == fields.end() || dash + 1 == fields.end()) continue;
    if (dash[1] == "cgroup" || dash[1] == "cgroup2") mounts.push_back(fields[4]);
  }
  return mounts;
}

// Every directory "<...>/<folder>" (or "<...>/<folder>/<name>" when `name` is given) in the
// cgroup hierarchies of this machine, found by walking them: the test does not repeat the
// placement logic it checks.
// Tests running beside this one create and remove cgroups meanwhile: an entry that vanishes
// under the walk is skipped, and a walk the vanishing cut short is made again.
std::vector<std::string> FindDirs(const std::string& folder, const std::string& name = "") {
  namespace fs = std::filesystem;
  std::vector<std::string> found;
  for (int attempt = 0; attempt < 10; ++attempt) {
    found.clear();
    bool whole = true;
    for (const std::string& mount : CgroupMountPoints()) {
      std::error_code ec;
      for (fs::recursive_directory_iterator
               it(mount, fs::directory_options::skip_permission_denied, ec),
           end;
           !ec && it != end; it.increment(ec)) {
        std::error_code entry_ec;  // (one that vanished: not a directory any more)
        if (!it->is_directory(entry_ec)) continue;
        const fs::path& path = it->path();
        if (name.empty() ? path.filename() == folder
                         : path.filename() == name && path.parent_path().filename() == folder) {
          found.push_back(path.string());
        }
      }
      if (ec) whole = false;
    }
    if (whole) break;
  }
  return found;
}

// The one file named `file` among the "<folder>/<name>" directories, or "".
std::string FindFile(const std::string& folder, const std::string& name, const std::string& file) {
  for (const std::string& dir : FindDirs(folder, name)) {
    if (common::PathExists(dir + "/" + file)) return dir + "/" + file;
  }
  return "";
}

// Removes the folder and the (empty) cgroups in it from every hierarchy when the test ends.
class FolderCleanup {
 public:
  explicit FolderCleanup(std::string folder) : folder_(std::move(folder)) {}
  ~FolderCleanup() {
    namespace fs = std::filesystem;
    for (const std::string& dir : FindDirs(folder_)) {
      std::error_code ec;
      for (const fs::directory_entry& entry : fs::directory_iterator(dir, ec)) {
        if (entry.is_directory(ec)) rmdir(entry.path().c_str());
      }
      rmdir(dir.c_str());
    }
  }

 private:
  std::string folder_;
};

class Pipe {
 public:
  Pipe() {
    if (pipe2(fds_, O_CLOEXEC) != 0) std::abort();
  }
  ~Pipe() {
    close(fds_[0]);
    close(fds_[1]);
  }
  int read_fd() const { return fds_[0]; }
  int write_fd() const { return fds_[1]; }
  // Reads exactly `size` bytes; false on EOF or error.
  bool ReadFull(void* data, size_t size) const {
    char* p = static_cast<char*>(data);
    while (size > 0) {
      ssize_t n = read(fds_[0], p, size);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      p += n;
      size -= static_cast<size_t>(n);
    }
    return true;
  }
  void Signal() const {
    char c = 'g';
    if (write(fds_[1], &c, 1) != 1) std::abort();
  }
  void AwaitSignal() const {
    char c;
    if (!ReadFull(&c, 1)) _exit(100);
  }

 private:
  int fds_[2];
};

// A forked child running `body`; killed and reaped when the test has not reaped it.
class Child {
 public:
  template <typename Body>
  explicit Child(Body body) {
    pid_ = fork();
    if (pid_ < 0) std::abort();
    if (pid_ == 0) _exit(body());
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  ~Child() {
    if (!reaped_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  pid_t pid() const { return pid_; }
  // The wait status.
  int Wait() {
    int status = 0;
    if (waitpid(pid_, &status, 0) != pid_) return -1;
    reaped_ = true;
    return status;
  }

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
};

// Grandchildren, reparented to this process (a child subreaper) once their parent is gone.
class Grandchildren {
 public:
  Grandchildren() { prctl(PR_SET_CHILD_SUBREAPER, 1); }
  ~Grandchildren() {
    for (pid_t pid : pending_) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }
  void Add(pid_t pid) { pending_.insert(pid); }
  // Reaps each one; true when every one was killed by SIGKILL.
  bool AllKilled() {
    bool all = true;
    for (pid_t pid : pending_) {
      int status = 0;
      all &= waitpid(pid, &status, 0) == pid && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
    }
    pending_.clear();
    return all;
  }

 private:
  std::set<pid_t> pending_;
};

bool KilledBySigkill(int status) { return WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL; }

int SleepForever() {
  for (;;) pause();
}

int Spin() {
  volatile uint64_t counter = 0;
  for (;;) counter = counter + 1;
}

// Real cgroups need root here; the tests skip elsewhere.
#define SKIP_UNLESS_ROOT()                                             \
  do {                                                                 \
    if (geteuid() != 0) GTEST_SKIP() << "creating cgroups needs root"; \
  } while (0)

bool HasAll(const CgroupManager& manager, std::initializer_list<CgroupController> controllers) {
  for (CgroupController c : controllers) {
    if (!manager.Has(c)) return false;
  }
  return true;
}

// Freezes the spinning task in `cg` and checks it stops using CPU, then that it resumes after
// Thaw. `events` is the v2 cgroup.events to check for "frozen 1", if any.
void ExpectFreezeStopsCpu(Cgroup& cg, const std::string& events) {
  ASSERT_OK(cg.Freeze());
  if (!events.empty()) {
    EXPECT_THAT(ReadText(events), HasSubstr("frozen 1"));
  }
  ASSERT_OK_AND_ASSIGN(CgroupReadings frozen_start, cg.Read());
  absl::SleepFor(absl::Milliseconds(300));
  ASSERT_OK_AND_ASSIGN(CgroupReadings frozen_end, cg.Read());
  EXPECT_EQ(frozen_end.cpu_usage_ns, frozen_start.cpu_usage_ns);

  ASSERT_OK(cg.Thaw());
  if (!events.empty()) {
    EXPECT_THAT(ReadText(events), HasSubstr("frozen 0"));
  }
  absl::SleepFor(absl::Milliseconds(300));
  ASSERT_OK_AND_ASSIGN(CgroupReadings thawed, cg.Read());
  EXPECT_GT(thawed.cpu_usage_ns, frozen_end.cpu_usage_ns + 10'000'000);  // > 10 ms

  // CpuUsageNs reads through one descriptor kept open: each read is a fresh value.
  ASSERT_OK_AND_ASSIGN(uint64_t first, cg.CpuUsageNs());
  EXPECT_GE(first, thawed.cpu_usage_ns);
  absl::SleepFor(absl::Milliseconds(200));
  ASSERT_OK_AND_ASSIGN(uint64_t second, cg.CpuUsageNs());
  EXPECT_GT(second, first + 10'000'000);
  ASSERT_OK_AND_ASSIGN(CgroupReadings after, cg.Read());
  EXPECT_GE(after.cpu_usage_ns, second);
}

// ---- Detect on fake /proc files ----

TEST(CgroupManager, DetectFailsWhenMountinfoIsUnreadable) {
  common::testing::TempDir tmp("cgroup_test");
  auto manager = CgroupManager::Detect(
      {.mountinfo_path = tmp.Path("absent"), .cgroup_path = "/proc/self/cgroup"});
  EXPECT_EQ(manager.status().code(), absl::StatusCode::kNotFound) << manager.status();
}

TEST(CgroupManager, DetectRejectsInvalidFolder) {
  auto manager = CgroupManager::Detect({.folder = "../escape"});
  EXPECT_EQ(manager.status().code(), absl::StatusCode::kInvalidArgument) << manager.status();
}

TEST(CgroupManager, DetectPureV2LayoutUsesV2ForEveryController) {
  common::testing::TempDir tmp("cgroup_test");
  const std::string own = tmp.Path("cg/system.slice/vault.service");
  const std::string base = own + "/vault-sandbox";
  ASSERT_OK(common::MakeDirs(base, 0755));
  WriteText(tmp.Path("mountinfo"),
            absl::StrCat("22 1 8:1 / / rw,relatime - ext4 /dev/root rw\n", "30 22 0:26 / ",
                         tmp.Path("cg"),
                         " rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 "
                         "rw,nsdelegate,memory_recursiveprot\n"));
  WriteText(tmp.Path("cgroup"), "0::/system.slice/vault.service\n");
  WriteText(own + "/cgroup.controllers", "cpuset cpu io memory hugetlb pids rdma\n");
  WriteText(own + "/cgroup.subtree_control", "memory pids\n");
  // The folder as a kernel would show it (a plain directory here; the files mimic cgroupfs).
  WriteText(base + "/cgroup.subtree_control", "memory pids cpu\n");
  WriteText(base + "/cgroup.freeze", "0\n");
  WriteText(base + "/cpu.stat", "usage_usec 0\n");

  ASSERT_OK_AND_ASSIGN(auto manager, CgroupManager::Detect({.mountinfo_path = tmp.Path("mountinfo"),
                                                            .cgroup_path = tmp.Path("cgroup")}));
  EXPECT_EQ(manager->Describe(), "memory=v2 pids=v2 cpu=v2 cpuacct=v2 freezer=v2");
  EXPECT_EQ(manager->Warnings(), "");
  // Only the controller not yet enabled for the folder was written, in the process's cgroup.
  EXPECT_EQ(ReadText(own + "/cgroup.subtree_control"), "+cpu");
  EXPECT_EQ(ReadText(base + "/cgroup.subtree_control"), "memory pids cpu");

  ASSERT_OK_AND_ASSIGN(auto cg, manager->Create("sb", {}));
  EXPECT_TRUE(std::filesystem::is_directory(base + "/sb"));
  // A limit the fake tree has no file for: Create fails and leaves nothing behind.
  auto failed = manager->Create("sb2", {.max_pids = 8});
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kNotFound) << failed.status();
  EXPECT_THAT(failed.status().message(), HasSubstr(base + "/sb2/pids.max"));
  EXPECT_FALSE(common::PathExists(base + "/sb2"));
  ASSERT_OK(cg->Remove());
  EXPECT_FALSE(common::PathExists(base + "/sb"));
}

TEST(CgroupManager, DetectPureV2LayoutReportsMissingControllersWithReasons) {
  common::testing::TempDir tmp("cgroup_test");
  const std::string own = tmp.Path("cg/user.slice");
  ASSERT_OK(common::MakeDirs(own, 0755));
  WriteText(tmp.Path("mountinfo"),
            absl::StrCat("30 22 0:26 / ", tmp.Path("cg"), " rw,relatime - cgroup2 cgroup2 rw\n"));
  WriteText(tmp.Path("cgroup"), "0::/user.slice\n");
  WriteText(own + "/cgroup.controllers", "cpu memory\n");
  WriteText(own + "/cgroup.subtree_control", "\n");

  ASSERT_OK_AND_ASSIGN(auto manager, CgroupManager::Detect({.folder = "f",
                                                            .mountinfo_path = tmp.Path("mountinfo"),
                                                            .cgroup_path = tmp.Path("cgroup")}));
  EXPECT_EQ(manager->Describe(),
            "memory=missing pids=missing cpu=missing cpuacct=missing freezer=missing");
  EXPECT_FALSE(manager->Has(CgroupController::kMemory));
  std::vector<std::string> lines = absl::StrSplit(manager->Warnings(), '\n');
  ASSERT_THAT(lines, SizeIs(5));
  // The folder was created, but a plain directory has no cgroup.subtree_control to enable in.
  EXPECT_THAT(lines[0], HasSubstr("memory: "));
  EXPECT_THAT(lines[0], HasSubstr(own + "/f/cgroup.subtree_control"));
  EXPECT_THAT(lines[1], HasSubstr("pids: "));
  EXPECT_THAT(lines[1], HasSubstr("cgroup.controllers does not list \"pids\""));
  EXPECT_THAT(lines[3], HasSubstr("cpuacct: "));
  EXPECT_THAT(lines[3], HasSubstr(own + "/f/cpu.stat"));
  EXPECT_THAT(lines[4], HasSubstr("freezer: "));
  EXPECT_THAT(lines[4], HasSubstr(own + "/f/cgroup.freeze"));
}

TEST(CgroupManager, DetectCoMountedCpuCpuacctV1Layout) {
  common::testing::TempDir tmp("cgroup_test");
  const std::string fs = tmp.Path("fs/cgroup");
  WriteText(tmp.Path("mountinfo"),
            absl::StrCat("31 23 0:28 / ", fs, " rw - tmpfs tmpfs rw,mode=755\n",  //
                         "32 31 0:29 / ", fs,
                         "/cpu,cpuacct rw,nosuid shared:9 - cgroup cgroup rw,cpu,cpuacct\n",
                         // Mounted from inside a container: the root is its own cgroup.
                         "33 31 0:30 /docker/abc ", fs, "/memory rw - cgroup cgroup rw,memory\n",
                         "34 31 0:31 / ", fs, "/pids rw - cgroup cgroup rw,pids\n", "35 31 0:32 / ",
                         fs, "/freezer rw - cgroup cgroup rw,freezer\n", "36 31 0:33 / ", fs,
                         "/systemd rw - cgroup cgroup rw,xattr,name=systemd\n"));
  WriteText(tmp.Path("cgroup"),
            "6:freezer:/docker/abc\n5:pids:/docker/abc\n4:memory:/docker/abc\n"
            "3:cpu,cpuacct:/docker/abc\n1:name=systemd:/docker/abc\n");
  ASSERT_OK(common::MakeDirs(fs + "/cpu,cpuacct/docker/abc", 0755));
  ASSERT_OK(common::MakeDirs(fs + "/memory", 0755));
  ASSERT_OK(common::MakeDirs(fs + "/pids/docker/abc", 0755));
  // No fs/cgroup/freezer/docker/abc: the freezer folder cannot be created.

  ASSERT_OK_AND_ASSIGN(auto manager, CgroupManager::Detect({.folder = "f",
                                                            .mountinfo_path = tmp.Path("mountinfo"),
                                                            .cgroup_path = tmp.Path("cgroup")}));
  EXPECT_EQ(manager->Describe(), "memory=v1 pids=v1 cpu=v1 cpuacct=v1 freezer=missing");
  EXPECT_THAT(manager->Warnings(), HasSubstr("freezer: v1: mkdir " + fs + "/freezer/docker/abc/f"));
  EXPECT_TRUE(std::filesystem::is_directory(fs + "/cpu,cpuacct/docker/abc/f"));
  EXPECT_TRUE(std::filesystem::is_directory(fs + "/memory/f"));
  EXPECT_TRUE(std::filesystem::is_directory(fs + "/pids/docker/abc/f"));

  ASSERT_OK_AND_ASSIGN(auto cg, manager->Create("sb", {}));
  const std::vector<std::string> dirs = {fs + "/cpu,cpuacct/docker/abc/f/sb", fs + "/memory/f/sb",
                                         fs + "/pids/docker/abc/f/sb"};
  for (const std::string& dir : dirs) {
    ASSERT_TRUE(std::filesystem::is_directory(dir)) << dir;
    WriteText(dir + "/cgroup.procs", "");
  }
  ASSERT_OK(cg->AddProcess(4242));
  for (const std::string& dir : dirs) EXPECT_EQ(ReadText(dir + "/cgroup.procs"), "4242") << dir;
  EXPECT_EQ(cg->Freeze().code(), absl::StatusCode::kFailedPrecondition);

  auto failed = manager->Create("sb2", {.memory_bytes = 32 * kMiB});
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kNotFound) << failed.status();
  EXPECT_FALSE(common::PathExists(fs + "/cpu,cpuacct/docker/abc/f/sb2"));
  EXPECT_FALSE(common::PathExists(fs + "/memory/f/sb2"));
  EXPECT_FALSE(common::PathExists(fs + "/pids/docker/abc/f/sb2"));
}

// ---- Real cgroups ----

TEST(CgroupManager, DetectFindsV1ControllersOnThisMachine) {
  if (!common::PathExists("/sys/fs/cgroup/memory")) {
    GTEST_SKIP() << "no cgroup v1 memory hierarchy at /sys/fs/cgroup/memory: not the hybrid "
                    "layout this test describes";
  }
  SKIP_UNLESS_ROOT();
  const std::string folder = UniqueFolder("detect");
  FolderCleanup cleanup(folder);
  ASSERT_OK_AND_ASSIGN(auto manager, CgroupManager::Detect({.folder = folder}));
  EXPECT_EQ(manager->Describe(), "memory=v1 pids=v1 cpu=v1 cpuacct=v1 freezer=v1");
  EXPECT_EQ(manager->Warnings(), "");
  // The folder exists in each v1 hierarchy, and nowhere else.
  std::set<std::string> files;
  for (const std::string& dir : FindDirs(folder)) {
    for (const char* file : {"memory.limit_in_bytes", "pids.max", "cpu.cfs_quota_us",
                             "cpuacct.usage", "freezer.state", "cgroup.freeze"}) {
      if (common::PathExists(dir + "/" + file)) files.insert(file);
    }
  }
  EXPECT_EQ(files, (std::set<std::string>{"memory.limit_in_bytes", "pids.max", "cpu.cfs_quota_us",
                                          "cpuacct.usage", "freezer.state"}));
}

TEST(CgroupManager, CreateWritesLimits) {
  SKIP_UNLESS_ROOT();
  const std::string folder = UniqueFolder("limits");
  FolderCleanup cleanup(folder);
  ASSERT_OK_AND_ASSIGN(auto manager, CgroupManager::Detect({.folder = folder}));
  if (!HasAll(*manager,
              {CgroupController::kMemory, CgroupController::kPids, CgroupController::kCpu})) {
    GTEST_SKIP() << manager->Warnings();
  }
  ASSERT_OK_AND_ASSIGN(
      auto cg,
      manager->Create("sb", {.memory_bytes = 64 * kMiB, .max_pids = 16, .cpu_percent = 50}));
  int checked = 0;
  for (const std::string& dir : FindDirs(folder, "sb")) {
    auto check = [&](const char* file, const std::string& want) {
      if (!common::PathExists(dir + "/" + file)) return;
      EXPECT_EQ(ReadText(dir + "/" + file), want) << dir << "/" << file;
      ++checked;
    };
    check("memory.limit_in_bytes", "67108864");
    check("memory.memsw.limit_in_bytes", "67108864");
    check("memory.max", "67108864");
    check("memory.swap.max", "0");
    check("pids.max", "16");
    check("cpu.cfs_period_us", "100000");
    check("cpu.cfs_quota_us", "50000");
    check("cpu.max", "50000 100000");
  }
  EXPECT_GE(checked, 3);
  EXPECT_NE(FindFile(folder, "sb", "pids.max"), "");
  ASSERT_OK_AND_ASSIGN(CgroupReadings readings, cg->Read());
  EXPECT_EQ(readings.pids_current, 0u);
  EXPECT_EQ(readings.oom_kills, 0u);
  ASSERT_OK(cg->Remove());
}

TEST(CgroupManager, CreateRejectsInvalidNames) {
  common::testing::TempDir tmp("cgroup_test");
  // Name validation comes before any cgroup is touched, so an empty layout suffices.
  WriteText(tmp.Path("mountinfo"), "");
  WriteText(tmp.Path("cgroup"), "");
  ASSERT_OK_AND_ASSIGN(auto manager, CgroupManager::Detect({.mountinfo_path = tmp.Path("mountinfo"),
                                                            .cgroup_path = tmp.Path("cgroup")}));
  for (const std::string& name : {std::string(""), std::string("."), std::string(".."),
                                  std::string("a/b"), std::string("sp ace"), std::string("tab\t"),
                                  std::string("caf\xc3\xa9"), std::string(65, 'a')}) {
    auto cg = manager->Create(name, {});
    EXPECT_EQ(cg.status().code(), absl::StatusCode::kInvalidArgument) << "\"" << name << "\"";
  }
  // The longest valid name, with every allowed kind of character, passes validation; with no
  // controller at all there is nothing to create it in.
  std::string longest = "Az09._-" + std::string(57, 'x');
  auto cg = manager->Create(longest, {});
  EXPECT_EQ(cg.status().code(), absl::StatusCode::kFailedPrecondition) << cg.status();
  EXPECT_THAT(cg.status().message(), HasSubstr("memory: no cgroup v1 hierarchy"));
}

TEST(CgroupManager, CreateTwiceIsAlreadyExists) {
  SKIP_UNLESS_ROOT();
  const std::string folder = UniqueFolder("twice");
  FolderCleanup cleanup(folder);
  ASSERT_OK_AND_ASSIGN(auto manager, CgroupManager::Detect({.folder = folder}));
  if (!manager->Has(CgroupController::kMemory)) GTEST_SKIP() << manager->Warnings();
  ASSERT_OK_AND_ASSIGN(auto cg, manager->Create("dup", {.max_pids = 8}));
  auto again = manager->Create("dup", {.max_pids = 8});
  EXPECT_EQ(again.status().code(), absl::StatusCode::kAlreadyExists) << again.status();
  // The failed Create left the first one alone.
  EXPECT_THAT(FindDirs(folder, "dup"), Not(IsEmpty()));
  ASSERT_OK(cg->Remove());
}

TEST(Cgroup, AddProcessMovesChildIntoEveryHierarchy) {
  SKIP_UNLESS_ROOT();
  const std::string folder = UniqueFolder("add");
  FolderCleanup cleanup(folder);
  ASSERT_OK_AND_ASSIGN(auto manager, CgroupManager::Detect({.folder = folder}));
  if (!manager->Has(CgroupController::kPids)) GTEST_SKIP() << manager->Warnings();
  ASSERT_OK_AND_ASSIGN(auto cg, manager->Create("sb", {}));
  Child child(SleepForever);
  ASSERT_OK(cg->AddProcess(child.pid()));

  std::vector<std::string> dirs = FindDirs(folder, "sb");
  ASSERT_THAT(dirs, Not(IsEmpty()));
  for (const std::string& dir : dirs) {
    EXPECT_EQ(ReadText(dir + "/cgroup.procs"), absl::StrCat(child.pid())) << dir;
  }
  ASSERT_OK_AND_ASSIGN(CgroupReadings readings, cg->Read());
  EXPECT_EQ(readings.pids_current, 1u);
  EXPECT_EQ(cg->AddProcess(0).code(), absl::StatusCode::kInvalidArgument);

  ASSERT_OK(cg->KillAll());
  EXPECT_TRUE(KilledBySigkill(child.Wait()));
  ASSERT_OK(cg->Remove());
}

// The v1 "tasks" lines of /proc/<...>/cgroup, without the v2 line: "4:memory:/a/b" each.
std::set<std::string> V1Lines(const std::string& proc_cgroup) {
  std::set<std::string> lines;
  for (absl::string_view line : absl::StrSplit(ReadText(proc_cgroup), '\n', absl::SkipEmpty())) {
    if (!absl::StartsWith(line, "0::")) lines.emplace(line);
  }
  return lines;
}

TEST(Cgroup, ACloneOfAThreadInsideStartsInsideAndTheThreadAloneGoesBack) {
  SKIP_UNLESS_ROOT();
  const std::string folder = UniqueFolder("enter");
  FolderCleanup cleanup(folder);
  ASSERT_OK_AND_ASSIGN(auto manager, CgroupManager::Detect({.folder = folder}));
  if (!manager->Has(CgroupController::kPids)) GTEST_SKIP() << manager->Warnings();
  if (!absl::StrContains(manager->Describe(), "=v1")) GTEST_SKIP() << "no cgroup v1 hierarchy";
  // pids.max 2, the lowest a sandbox may have: the thread inside counts while it clones.
  ASSERT_OK_AND_ASSIGN(auto cg, manager->Create("sb", {.max_pids = 2}));
  const std::set<std::string> process_before = V1Lines("/proc/self/cgroup");

  pid_t child = -1;
  std::set<std::string> thread_inside, thread_after, thread_before;
  absl::Status entered_status;
  std::thread cloner([&] {
    const std::string self = absl::StrCat("/proc/self/task/", gettid(), "/cgroup");
    thread_before = V1Lines(self);
    absl::StatusOr<ThreadReturn> back = cg->EnterCallingThread();
    entered_status = back.status();
    if (!back.ok()) return;
    thread_inside = V1Lines(self);
    child = fork();
    if (child == 0) SleepForever();
    ReturnCallingThread(*back);
    thread_after = V1Lines(self);
  });
  cloner.join();
  ASSERT_OK(entered_status);
  ASSERT_GT(child, 0) << strerror(errno);
  ASSERT_OK(cg->AddClonedProcess(child));  // the v2 part, if any: nothing here

  // The thread went in, the clone was born there, the thread came back where it was; the rest
  // of the process never moved.
  EXPECT_NE(thread_inside, thread_before);
  EXPECT_EQ(thread_after, thread_before);
  EXPECT_EQ(V1Lines("/proc/self/cgroup"), process_before);
  std::vector<std::string> dirs = FindDirs(folder, "sb");
  ASSERT_THAT(dirs, Not(IsEmpty()));
  for (const std::string& dir : dirs) {
    // Only the clone: a kill of this cgroup (which lists cgroup.procs) cannot reach this test.
    EXPECT_EQ(ReadText(dir + "/cgroup.procs"), absl::StrCat(child)) << dir;
  }
  ASSERT_OK_AND_ASSIGN(CgroupReadings readings, cg->Read());
  EXPECT_EQ(readings.pids_current, 1u);
  EXPECT_EQ(cg->AddClonedProcess(0).code(), absl::StatusCode::kInvalidArgument);

  ASSERT_OK(cg->KillAll());
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(KilledBySigkill(status));
  ASSERT_OK(cg->Remove());
}

TEST(Cgroup, EnteringACgroupThatIsGoneMovesNothing) {
  SKIP_UNLESS_ROOT();
  const std::string folder = UniqueFolder("gone");
  FolderCleanup cleanup(folder);
  ASSERT_OK_AND_ASSIGN(auto manager, CgroupManager::Detect({.folder = folder}));
  if (!manager->Has(CgroupController::kPids)) GTEST_SKIP() << manager->Warnings();
  if (!absl::StrContains(manager->Describe(), "=v1")) GTEST_SKIP() << "no cgroup v1 hierarchy";
  // One hierarchy's folder removed behind the cgroup's back, each in turn: the thread enters
  // the hierarchies before it, then fails, and must be taken back out of those.
  const size_t hierarchies = FindDirs(folder).size();
  ASSERT_GE(hierarchies, 2u);
  for (size_t gone = 0; gone < hierarchies; ++gone) {
    const std::string name = absl::StrCat("sb", gone);
    ASSERT_OK_AND_ASSIGN(auto cg, manager->Create(name, {}));
    std::vector<std::string> dirs = FindDirs(folder, name);
    ASSERT_EQ(dirs.size(), hierarchies);
    ASSERT_EQ(rmdir(dirs[gone].c_str()), 0) << strerror(errno);
    absl::Status entered;
    std::set<std::string> before, after;
    std::thread t([&] {
      const std::string self = absl::StrCat("/proc/self/task/", gettid(), "/cgroup");
      before = V1Lines(self);
      entered = cg->EnterCallingThread().status();
      after = V1Lines(self);
    });
    t.join();
    EXPECT_EQ(entered.code(), absl::StatusCode::kNotFound) << entered;
    EXPECT_EQ(after, before) << dirs[gone];
    for (size_t i = 0; i < dirs.size(); ++i) {
      if (i == gone) continue;
      EXPECT_EQ(ReadText(dirs[i] + "/cgroup.procs"), "") << dirs[i];
    }
  }
}

TEST(Cgroup, FreezeStopsCpuUsageAndThawResumesIt) {
  SKIP_UNLESS_ROOT();
  const std::string folder = UniqueFolder("freeze");
  FolderCleanup cleanup(folder);
  ASSERT_OK_AND_ASSIGN(auto manager, CgroupManager::Detect({.folder = folder}));
  if (!HasAll(*manager, {CgroupController::kCpuAcct, CgroupController::kFreezer})) {
    GTEST_SKIP() << manager->Warnings();
  }
  ASSERT_OK_AND_ASSIGN(auto cg, manager->Create("sb", {}));
  Child child(Spin);
  ASSERT_OK(cg->AddProcess(child.pid()));
  ExpectFreezeStopsCpu(*cg, "");
  ASSERT_OK(cg->KillAll());
  EXPECT_TRUE(KilledBySigkill(child.Wait()));
  ASSERT_OK(cg->Remove());
}

TEST(Cgroup, KillAllKillsChildAndItsGrandchildren) {
  SKIP_UNLESS_ROOT();
  const std::string folder = UniqueFolder("kill");
  FolderCleanup cleanup(folder);
  ASSERT_OK_AND_ASSIGN(auto manager, CgroupManager::Detect({.folder = folder}));
  if (!manager->Has(CgroupController::kPids)) GTEST_SKIP() << manager->Warnings();
  ASSERT_OK_AND_ASSIGN(auto cg, manager->Create("sb", {}));

  constexpr int kGrandchildren = 3;
  Grandchildren grandchildren;
  Pipe go;
  Pipe report;
  Child child([&] {
    go.AwaitSignal();  // forks only once it is in the cgroup
    pid_t pids[kGrandchildren];
    for (pid_t& pid : pids) {
      pid = fork();
      if (pid == 0) SleepForever();
      if (pid < 0) _exit(1);
    }
    if (write(report.write_fd(), pids, sizeof(pids)) != sizeof(pids)) _exit(2);
    return SleepForever();
  });
  ASSERT_OK(cg->AddProcess(child.pid()));
  go.Signal();
  pid_t pids[kGrandchildren];
  ASSERT_TRUE(report.ReadFull(pids, sizeof(pids)));
  for (pid_t pid : pids) grandchildren.Add(pid);
  ASSERT_OK_AND_ASSIGN(CgroupReadings before, cg->Read());
  EXPECT_EQ(before.pids_current, 1u + kGrandchildren);

  ASSERT_OK(cg->KillAll());
  for (const std::string& dir : FindDirs(folder, "sb")) {
    EXPECT_EQ(ReadText(dir + "/cgroup.procs"), "") << dir;
  }
  EXPECT_TRUE(KilledBySigkill(child.Wait()));
  EXPECT_TRUE(grandchildren.AllKilled());
  ASSERT_OK_AND_ASSIGN(CgroupReadings after, cg->Read());
  EXPECT_EQ(after.pids_current, 0u);
  ASSERT_OK(cg->Remove());
}

TEST(Cgroup, PidsLimitRefusesForksBeyondMax) {
  SKIP_UNLESS_ROOT();
  const std::string folder = UniqueFolder("pids");
  FolderCleanup cleanup(folder);
  ASSERT_OK_AND_ASSIGN(auto manager, CgroupManager::Detect({.folder = folder}));
  if (!manager->Has(CgroupController::kPids)) GTEST_SKIP() << manager->Warnings();
  ASSERT_OK_AND_ASSIGN(auto cg, manager->Create("sb", {.max_pids = 4}));

  constexpr int kAttempts = 10;
  struct Report {
    int forked = 0;
    int first_errno = 0;
    pid_t pids[kAttempts] = {};
  };
  Grandchildren grandchildren;
  Pipe go;
  Pipe report_pipe;
  Child child([&] {
    go.AwaitSignal();
    Report report;
    for (int i = 0; i < kAttempts; ++i) {
      pid_t pid = fork();
      if (pid == 0) SleepForever();
      if (pid > 0) {
        report.pids[report.forked++] = pid;
      } else if (report.first_errno == 0) {
        report.first_errno = errno;
      }
    }
    if (write(report_pipe.write_fd(), &report, sizeof(report)) != sizeof(report)) _exit(2);
    return SleepForever();
  });
  ASSERT_OK(cg->AddProcess(child.pid()));
  go.Signal();
  Report report;
  ASSERT_TRUE(report_pipe.ReadFull(&report, sizeof(report)));
  for (int i = 0; i < report.forked; ++i) grandchildren.Add(report.pids[i]);
  // The child itself counts: three more fit under pids.max = 4.
  EXPECT_EQ(report.forked, 3);
  EXPECT_EQ(report.first_errno, EAGAIN);
  ASSERT_OK_AND_ASSIGN(CgroupReadings readings, cg->Read());
  EXPECT_EQ(readings.pids_current, 4u);

  // Frozen first: a task killed in a frozen v1 cgroup only dies once thawed, which KillAll does.
  ASSERT_OK(cg->Freeze());
  ASSERT_OK(cg->KillAll());
  EXPECT_TRUE(KilledBySigkill(child.Wait()));
  EXPECT_TRUE(grandchildren.AllKilled());
  ASSERT_OK(cg->Remove());
}

TEST(Cgroup, MemoryLimitOomKillsChild) {
  SKIP_UNLESS_ROOT();
  const std::string folder = UniqueFolder("oom");
  FolderCleanup cleanup(folder);
  ASSERT_OK_AND_ASSIGN(auto manager, CgroupManager::Detect({.folder = folder}));
  if (!manager->Has(CgroupController::kMemory)) GTEST_SKIP() << manager->Warnings();
  ASSERT_OK_AND_ASSIGN(auto cg, manager->Create("sb", {.memory_bytes = 32 * kMiB}));

  Pipe go;
  Child child([&] {
    go.AwaitSignal();
    constexpr size_t kSize = 256 * kMiB;
    void* p = mmap(nullptr, kSize, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return 1;
    for (size_t i = 0; i < kSize; i += 4096) static_cast<volatile char*>(p)[i] = 1;
    return 0;  // survived: the limit did not hold
  });
  ASSERT_OK(cg->AddProcess(child.pid()));
  go.Signal();
  int status = child.Wait();
  EXPECT_TRUE(KilledBySigkill(status)) << "wait status " << status;
  ASSERT_OK_AND_ASSIGN(CgroupReadings readings, cg->Read());
  EXPECT_GE(readings.oom_kills, 1u);
  EXPECT_GT(readings.memory_peak, 16 * kMiB);
  EXPECT_LE(readings.memory_peak, 32 * kMiB);
  ASSERT_OK(cg->Remove());
}

TEST(Cgroup, V2FreezerFreezesThawsAndKills) {
  SKIP_UNLESS_ROOT();
  const std::string folder = UniqueFolder("v2freezer");
  FolderCleanup cleanup(folder);
  ASSERT_OK_AND_ASSIGN(auto manager,
                       CgroupManager::Detect({.folder = folder, .prefer_v2_freezer = true}));
  if (!absl::StrContains(manager->Describe(), "freezer=v2")) {
    if (common::PathExists("/sys/fs/cgroup/unified/cgroup.procs")) {
      FAIL() << "a cgroup2 mount exists but the v2 freezer was not used: " << manager->Describe()
             << "\n"
             << manager->Warnings();
    }
    GTEST_SKIP() << "no cgroup v2 freezer: " << manager->Warnings();
  }
  if (!manager->Has(CgroupController::kCpuAcct)) GTEST_SKIP() << manager->Warnings();
  ASSERT_OK_AND_ASSIGN(auto cg, manager->Create("sb", {}));
  const std::string events = FindFile(folder, "sb", "cgroup.events");
  ASSERT_NE(events, "");

  Grandchildren grandchildren;
  Pipe go;
  Pipe report;
  Child child([&] {
    go.AwaitSignal();
    pid_t pid = fork();
    if (pid == 0) SleepForever();
    if (write(report.write_fd(), &pid, sizeof(pid)) != sizeof(pid)) _exit(2);
    return Spin();
  });
  ASSERT_OK(cg->AddProcess(child.pid()));
  go.Signal();
  pid_t grandchild = 0;
  ASSERT_TRUE(report.ReadFull(&grandchild, sizeof(grandchild)));
  ASSERT_GT(grandchild, 0);
  grandchildren.Add(grandchild);
  EXPECT_THAT(ReadText(events), HasSubstr("populated 1"));

  ExpectFreezeStopsCpu(*cg, events);
  // cgroup.kill works on a frozen v2 cgroup too.
  ASSERT_OK(cg->Freeze());
  ASSERT_OK(cg->KillAll());
  EXPECT_TRUE(KilledBySigkill(child.Wait()));
  EXPECT_TRUE(grandchildren.AllKilled());
  EXPECT_THAT(ReadText(events), HasSubstr("populated 0"));
  ASSERT_OK(cg->Remove());
}

TEST(Cgroup, RemoveDeletesFolders) {
  SKIP_UNLESS_ROOT();
  const std::string folder = UniqueFolder("remove");
  FolderCleanup cleanup(folder);
  ASSERT_OK_AND_ASSIGN(auto manager, CgroupManager::Detect({.folder = folder}));
  if (!manager->Has(CgroupController::kMemory)) GTEST_SKIP() << manager->Warnings();
  ASSERT_OK_AND_ASSIGN(auto cg, manager->Create("sb", {.memory_bytes = 16 * kMiB}));
  EXPECT_THAT(FindDirs(folder, "sb"), Not(IsEmpty()));
  ASSERT_OK(cg->Remove());
  EXPECT_THAT(FindDirs(folder, "sb"), IsEmpty());
  ASSERT_OK(cg->Remove());  // nothing left: still OK

  // The destructor removes a cgroup nobody removed.
  ASSERT_OK_AND_ASSIGN(auto dropped, manager->Create("dropped", {}));
  EXPECT_THAT(FindDirs(folder, "dropped"), Not(IsEmpty()));
  dropped.reset();
  EXPECT_THAT(FindDirs(folder, "dropped"), IsEmpty());
}

TEST(CgroupManager, RemoveStaleRemovesEmptyLeftoversOnly) {
  SKIP_UNLESS_ROOT();
  const std::string folder = UniqueFolder("stale");
  FolderCleanup cleanup(folder);
  ASSERT_OK_AND_ASSIGN(auto manager, CgroupManager::Detect({.folder = folder}));
  if (!manager->Has(CgroupController::kPids)) GTEST_SKIP() << manager->Warnings();
  // A leftover of a crashed process: the cgroups exist, nothing owns them.
  std::vector<std::string> folders = FindDirs(folder);
  ASSERT_THAT(folders, Not(IsEmpty()));
  for (const std::string& dir : folders) ASSERT_EQ(mkdir((dir + "/leftover").c_str(), 0755), 0);
  // A cgroup in use stays.
  ASSERT_OK_AND_ASSIGN(auto busy, manager->Create("busy", {}));
  Child child(SleepForever);
  ASSERT_OK(busy->AddProcess(child.pid()));

  EXPECT_EQ(manager->RemoveStale(), 1);
  EXPECT_THAT(FindDirs(folder, "leftover"), IsEmpty());
  EXPECT_THAT(FindDirs(folder, "busy"), SizeIs(folders.size()));

  ASSERT_OK(busy->KillAll());
  EXPECT_TRUE(KilledBySigkill(child.Wait()));
  ASSERT_OK(busy->Remove());
  EXPECT_EQ(manager->RemoveStale(), 0);
}

// The leftovers of a vault SIGKILLed while an agent was frozen (mid-migration): the cgroup
// still holds the frozen task, which cannot act on its parent-death signal. RemoveStale thaws
// and kills it, then removes the cgroup; a cgroup that is not stale keeps its task.
TEST(CgroupManager, RemoveStaleKillsTheFrozenTasksOfAStaleCgroup) {
  SKIP_UNLESS_ROOT();
  const std::string folder = UniqueFolder("frozen");
  FolderCleanup cleanup(folder);
  ASSERT_OK_AND_ASSIGN(auto manager, CgroupManager::Detect({.folder = folder}));
  if (!manager->Has(CgroupController::kFreezer)) GTEST_SKIP() << manager->Warnings();
  ASSERT_OK_AND_ASSIGN(auto orphan, manager->Create("orphan", {}));
  ASSERT_OK_AND_ASSIGN(auto kept, manager->Create("kept", {}));
  Child frozen(SleepForever), alive(SleepForever);
  ASSERT_OK(orphan->AddProcess(frozen.pid()));
  ASSERT_OK(kept->AddProcess(alive.pid()));
  ASSERT_OK(orphan->Freeze());

  EXPECT_EQ(manager->RemoveStale([](const std::string& name) { return name == "orphan"; }), 1);
  EXPECT_TRUE(KilledBySigkill(frozen.Wait()));
  EXPECT_THAT(FindDirs(folder, "orphan"), IsEmpty());
  EXPECT_THAT(FindDirs(folder, "kept"), Not(IsEmpty()));
  EXPECT_EQ(kill(alive.pid(), 0), 0);  // still there

  ASSERT_OK(kept->KillAll());
  EXPECT_TRUE(KilledBySigkill(alive.Wait()));
  ASSERT_OK(kept->Remove());
}

}  // namespace
}  // namespace vault::sandbox
