// The config OciConfigJson writes, run by the real runc (Debian's, 1.1) around a static probe
// that reports what it can do from inside: the fences hold as the config says.
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/random.h"
#include "common/testing/temp_dir.h"
#include "common/unique_fd.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sandbox/container/oci_config.h"

namespace vault::sandbox {
namespace {

using ::testing::HasSubstr;

// Outside the vault's default host id range (200000 + 65536), so no sandbox of a test running
// beside this one holds it.
constexpr uint32_t kHostId = 265600;

std::string ReadAllFd(int fd) {
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR)) {
    if (n > 0) out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

class RuncTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "runc runs containers as root here";
    // Every folder above the root must be searchable by the container's host id.
    ASSERT_EQ(chmod(tmp_.path().c_str(), 0711), 0);
    root_ = tmp_.Path("rootfs");
    for (const char* d : {"", "/proc", "/dev", "/sys", "/work", "/tmp"}) {
      ASSERT_EQ(mkdir((root_ + d).c_str(), 0755), 0) << d;
    }
    std::filesystem::copy_file(CONTAINER_PROBE, root_ + "/probe");
    ASSERT_EQ(chmod((root_ + "/probe").c_str(), 0755), 0);
    ASSERT_EQ(mkdir(tmp_.Path("bundle").c_str(), 0700), 0);
    id_ = "runc-test-" + *common::RandomHex(6);
  }
  void TearDown() override {
    if (id_.empty()) return;
    Runc({"delete", "-f", id_});
    // The cgroup folders runc leaves above its own.
    for (const char* c : {"cpu", "cpuacct", "memory", "pids", "freezer", "blkio", "devices",
                          "cpuset", "systemd", "unified"}) {
      rmdir(absl::StrCat("/sys/fs/cgroup/", c, "/vault-runc-test").c_str());
    }
  }

  struct Ran {
    int status = -1;
    std::string out, channel;
  };
  // runc run with fd 3 one end of a socketpair; stdout collected.
  Ran Run(const ContainerSpec& spec) {
    Ran ran;
    absl::StatusOr<std::string> json = OciConfigJson(spec);
    EXPECT_TRUE(json.ok()) << json.status();
    EXPECT_TRUE(common::WriteFileAtomic(tmp_.Path("bundle/config.json"), *json, 0600).ok());
    int sv[2], out[2];
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    EXPECT_EQ(pipe2(out, O_CLOEXEC), 0);
    const std::string state = tmp_.Path("state");
    const std::string bundle = tmp_.Path("bundle");
    pid_t pid = fork();
    if (pid == 0) {
      int devnull = open("/dev/null", O_RDWR);
      dup2(devnull, 0);
      dup2(out[1], 1);
      dup2(sv[1], 3);
      execlp("runc", "runc", "--root", state.c_str(), "run", "--bundle", bundle.c_str(),
             "--preserve-fds", "1", id_.c_str(), nullptr);
      _exit(127);
    }
    close(sv[1]);
    close(out[1]);
    ran.out = ReadAllFd(out[0]);
    close(out[0]);
    waitpid(pid, &ran.status, 0);
    ran.channel = ReadAllFd(sv[0]);
    close(sv[0]);
    return ran;
  }
  void Runc(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {"runc", "--root", tmp_.Path("state")};
    argv.insert(argv.end(), args.begin(), args.end());
    pid_t pid = fork();
    if (pid == 0) {
      int devnull = open("/dev/null", O_RDWR);
      dup2(devnull, 1);
      dup2(devnull, 2);
      std::vector<char*> a;
      for (std::string& s : argv) a.push_back(s.data());
      a.push_back(nullptr);
      execvp("runc", a.data());
      _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
  }
  ContainerSpec Spec() {
    ContainerSpec c;
    c.rootfs = root_;
    c.args = {"/probe"};
    c.host_id = kHostId;
    c.cgroups_path = "vault-runc-test/" + id_;
    c.limits.storage_bytes = 1 << 20;  // /work fills at 1 MiB
    return c;
  }

  common::testing::TempDir tmp_{"runc_test"};
  std::string root_, id_;
};

TEST_F(RuncTest, TheProbeFindsEveryFenceTheConfigNames) {
  Ran ran = Run(Spec());
  ASSERT_TRUE(WIFEXITED(ran.status)) << ran.out;
  EXPECT_EQ(WEXITSTATUS(ran.status), 7) << ran.out;  // the probe's own exit code comes back
  // Root inside, the one host id outside.
  EXPECT_THAT(ran.out, HasSubstr("uid 0 gid 0\n"));
  EXPECT_THAT(ran.out,
              HasSubstr(absl::StrCat("uid_map          0     ", kHostId, "          1\n")));
  EXPECT_THAT(ran.out, HasSubstr("CapEff 0000000000000000\n"));
  EXPECT_THAT(ran.out, HasSubstr("CapBnd 0000000000000000\n"));
  EXPECT_THAT(ran.out, HasSubstr("NoNewPrivs 1\n"));
  EXPECT_THAT(ran.out, HasSubstr("root_write EROFS\n"));
  EXPECT_THAT(ran.out, HasSubstr("mount EPERM\n"));
  EXPECT_THAT(ran.out, HasSubstr("work_fill ENOSPC after 1024 KiB\n"));
  EXPECT_THAT(ran.out, HasSubstr("net lo\n"));
  EXPECT_THAT(ran.out, HasSubstr("keys masked\n"));
  EXPECT_THAT(ran.out, HasSubstr("fd3 ok\n"));
  EXPECT_THAT(ran.out, HasSubstr("cwd /work home /work\n"));
  EXPECT_EQ(ran.channel, "hello over fd 3");
  // The image's root is as it was.
  EXPECT_FALSE(std::filesystem::exists(root_ + "/planted"));
}

}  // namespace
}  // namespace vault::sandbox
