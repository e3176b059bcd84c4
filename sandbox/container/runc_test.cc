// The config OciConfigJson writes, run by the real runc (Debian's, 1.1) around a static probe
// that reports what it can do from inside: the fences hold as the config says.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/file_util.h"
#include "common/random.h"
#include "common/testing/temp_dir.h"
#include "common/unique_fd.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sandbox/container/oci_config.h"
#include "sandbox/container/scratch.h"
#include "sandbox/posix/seccomp.h"

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
    for (const char* d : {"", "/proc", "/dev", "/sys", "/work", "/tmp", "/.vault"}) {
      ASSERT_EQ(mkdir((root_ + d).c_str(), 0755), 0) << d;
    }
    ASSERT_TRUE(common::WriteFileAtomic(root_ + "/.vault/init", "", 0755).ok());
    absl::StatusOr<SeccompPrograms> programs = BuildSeccompPrograms();
    ASSERT_TRUE(programs.ok()) << programs.status();
    programs_ = SerializeSeccompPrograms(*programs);
    std::filesystem::copy_file(CONTAINER_PROBE, root_ + "/probe");
    ASSERT_EQ(chmod((root_ + "/probe").c_str(), 0755), 0);
    ASSERT_EQ(mkdir(tmp_.Path("bundle").c_str(), 0700), 0);
    id_ = "runc-test-" + *common::RandomHex(6);
  }
  void TearDown() override {
    if (id_.empty()) return;
    Runc({"delete", "-f", id_});
    // The cgroup folders runc leaves above its own: under this process's cgroup of each
    // hierarchy, where a relative cgroupsPath puts them.
    absl::StatusOr<std::string> mine = common::ReadFile("/proc/self/cgroup");
    if (!mine.ok()) return;
    for (absl::string_view line : absl::StrSplit(*mine, '\n', absl::SkipEmpty())) {
      std::vector<std::string> f = absl::StrSplit(line, absl::MaxSplits(':', 2));
      if (f.size() != 3) continue;
      absl::string_view hierarchy = f[1].empty() ? absl::string_view("unified") : f[1];
      absl::ConsumePrefix(&hierarchy, "name=");
      rmdir(absl::StrCat("/sys/fs/cgroup/", hierarchy, f[2] == "/" ? "" : f[2], "/vault-runc-test")
                .c_str());
    }
  }

  struct Ran {
    int status = -1;
    std::string out, channel;
  };
  // runc run with fd 3 one end of a socketpair and fd 4 a memfd of `programs` (the seccomp
  // programs unless given); stdout and stderr collected.
  Ran Run(const ContainerSpec& spec, const std::string* programs = nullptr) {
    if (programs == nullptr) programs = &programs_;
    common::UniqueFd bpf(memfd_create("seccomp", MFD_CLOEXEC));
    EXPECT_EQ(write(bpf.get(), programs->data(), programs->size()),
              static_cast<ssize_t>(programs->size()));
    EXPECT_EQ(lseek(bpf.get(), 0, SEEK_SET), 0);
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
      // Out of the way of the targets first: any source may sit at 3 or 4.
      const int devnull = fcntl(open("/dev/null", O_RDWR), F_DUPFD_CLOEXEC, 10);
      const int o = fcntl(out[1], F_DUPFD_CLOEXEC, 10);
      const int ch = fcntl(sv[1], F_DUPFD_CLOEXEC, 10);
      const int b = fcntl(bpf.get(), F_DUPFD_CLOEXEC, 10);
      dup2(devnull, 0);
      dup2(o, 1);
      dup2(o, 2);
      dup2(ch, 3);
      dup2(b, 4);
      execlp("runc", "runc", "--root", state.c_str(), "run", "--bundle", bundle.c_str(),
             "--preserve-fds", "2", id_.c_str(), nullptr);
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
    c.init_path = CONTAINER_INIT;
    c.args = {"/probe"};
    c.host_id = kHostId;
    c.cgroups_path = "vault-runc-test/" + id_;
    c.limits.storage_bytes = 1 << 20;  // /work fills at 1 MiB
    if (!scratch_.has_value()) {
      absl::StatusOr<Scratch> scratch = MountScratch(tmp_.Path("scratch"), c.limits, kHostId);
      EXPECT_TRUE(scratch.ok()) << scratch.status();
      if (scratch.ok()) scratch_ = std::move(*scratch);
    }
    c.storage_dir = tmp_.Path("scratch");
    return c;
  }

  common::testing::TempDir tmp_{"runc_test"};
  std::string root_, id_, programs_;
  std::optional<Scratch> scratch_;
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
  // The posix sandbox's seccomp filters, installed by vault-container-init.
  EXPECT_THAT(ran.out, HasSubstr("ptrace EPERM\n"));
  EXPECT_THAT(ran.out, HasSubstr("socket_inet EPERM\n"));
  EXPECT_THAT(ran.out, HasSubstr("unshare EPERM\n"));
  EXPECT_THAT(ran.out, HasSubstr("tiocsti EPERM\n"));  // ENOTTY (stdin is /dev/null) without
  EXPECT_THAT(ran.out, HasSubstr("cwd /work home /work\n"));
  EXPECT_EQ(ran.channel, "hello over fd 3");
  // The image's root is as it was.
  EXPECT_FALSE(std::filesystem::exists(root_ + "/planted"));
}

// vault-container-init fails closed: without its filters the agent's program never runs.
TEST_F(RuncTest, NoProgramRunsWhenTheFiltersCannotBeInstalled) {
  for (const std::string& bad : {std::string(), std::string("\x05\x00\x00\x00garbage"),
                                 programs_.substr(0, programs_.size() / 2)}) {
    Ran ran = Run(Spec(), &bad);
    ASSERT_TRUE(WIFEXITED(ran.status)) << ran.out;
    EXPECT_EQ(WEXITSTATUS(ran.status), 126) << ran.out;
    EXPECT_THAT(ran.out, HasSubstr("vault-container-init: "));
    EXPECT_THAT(ran.out, ::testing::Not(HasSubstr("uid 0")));
    Runc({"delete", "-f", id_});
  }
}

}  // namespace
}  // namespace vault::sandbox
