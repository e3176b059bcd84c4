// The container type end to end under the real runc: a static probe is the whole image; the
// sandbox starts it, watches it and ends it as it does any agent's.
#include "sandbox/container/container_sandbox.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/testing/temp_dir.h"
#include "common/unique_fd.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vault::sandbox {
namespace {

using ::testing::HasSubstr;

constexpr char kImage[] = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

std::string ReadAll(int fd) {
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR)) {
    if (n > 0) out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

class ContainerSandboxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "runc runs containers as root here";
    ASSERT_EQ(chmod(tmp_.path().c_str(), 0711), 0);
    root_ = tmp_.Path("rootfs");
    for (const char* d : {"", "/proc", "/dev", "/sys", "/work", "/tmp", "/.vault", "/bin"}) {
      ASSERT_EQ(mkdir((root_ + d).c_str(), 0755), 0) << d;
    }
    ASSERT_TRUE(common::WriteFileAtomic(root_ + "/.vault/init", "", 0755).ok());
    std::filesystem::copy_file(CONTAINER_PROBE, root_ + "/bin/probe");
    ASSERT_EQ(chmod((root_ + "/bin/probe").c_str(), 0755), 0);
    ContainerSandboxOptions options;
    options.state_dir = tmp_.Path("state");
    options.init_dir = std::filesystem::path(CONTAINER_INIT).parent_path().string();
    options.stage_root = tmp_.Path("stage");
    options.images = [this](const std::string& hex, uint64_t) -> absl::StatusOr<ContainerImage> {
      if (hex != kImage) return absl::NotFoundError(absl::StrCat("no image sha256:", hex));
      ContainerImage image;
      image.rootfs = root_;
      image.entrypoint = {"probe"};
      image.cmd = {"exit", "0"};
      image.env = {"GREETING=from the image", "PATH=/bin"};
      return image;
    };
    absl::StatusOr<std::unique_ptr<ContainerSandbox>> box = ContainerSandbox::Create(options);
    ASSERT_TRUE(box.ok()) << box.status();
    box_ = std::move(*box);
  }

  // A spec for the image with `command` (empty: the image's), output to a pipe and a channel.
  SandboxSpec Spec(const std::vector<std::string>& command) {
    CodeObject code;
    code.digest = kImage;
    code.command = command;
    SandboxSpec spec;
    absl::Status set = box_->SetProgram(code, &spec);
    EXPECT_TRUE(set.ok()) << set;
    int out[2], sv[2];
    EXPECT_EQ(pipe2(out, O_CLOEXEC), 0);
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    out_read_ = common::UniqueFd(out[0]);
    out_write_ = common::UniqueFd(out[1]);
    host_end_ = common::UniqueFd(sv[0]);
    guest_end_ = common::UniqueFd(sv[1]);
    spec.stdout_fd = out_write_.get();
    spec.stderr_fd = out_write_.get();
    spec.channel_fd = guest_end_.get();
    spec.limits.wall_time = absl::Seconds(60);
    return spec;
  }
  std::unique_ptr<SandboxHandle> Spawn(const SandboxSpec& spec) {
    absl::StatusOr<std::unique_ptr<SandboxHandle>> handle = box_->Spawn(spec);
    EXPECT_TRUE(handle.ok()) << handle.status();
    out_write_.Reset();
    guest_end_.Reset();
    return handle.ok() ? std::move(*handle) : nullptr;
  }
  ExitInfo WaitFor(SandboxHandle& handle) {
    absl::StatusOr<ExitInfo> exit = handle.Wait(absl::Seconds(60));
    EXPECT_TRUE(exit.ok()) << exit.status();
    return exit.ok() ? *exit : ExitInfo{};
  }

  common::testing::TempDir tmp_{"container_sandbox_test"};
  std::string root_;
  std::unique_ptr<ContainerSandbox> box_;
  common::UniqueFd out_read_, out_write_, host_end_, guest_end_;
};

TEST_F(ContainerSandboxTest, RunsTheImagesProgramAndReportsItsExit) {
  EXPECT_THAT(box_->description(), HasSubstr("runc version"));
  auto handle = Spawn(Spec({"probe", "exit", "7"}));
  ASSERT_NE(handle, nullptr);
  ExitInfo exit = WaitFor(*handle);
  EXPECT_TRUE(exit.exited);
  EXPECT_EQ(exit.exit_code, 7);
  EXPECT_FALSE(exit.killed);
  EXPECT_EQ(exit.limit, LimitHit::kNone);
  // The image's entrypoint and cmd when the spec names no command.
  handle = Spawn(Spec({}));
  ASSERT_NE(handle, nullptr);
  exit = WaitFor(*handle);
  EXPECT_TRUE(exit.exited);
  EXPECT_EQ(exit.exit_code, 0);
}

TEST_F(ContainerSandboxTest, TheImagesEnvironmentComesWithItAndTheSpecsWins) {
  SandboxSpec spec = Spec({"/bin/probe", "env", "GREETING"});
  auto handle = Spawn(spec);
  ASSERT_NE(handle, nullptr);
  WaitFor(*handle);
  EXPECT_EQ(ReadAll(out_read_.get()), "GREETING=from the image cwd=/work\n");
  spec = Spec({"/bin/probe", "env", "GREETING"});
  spec.env.push_back("GREETING=from the spec");
  handle = Spawn(spec);
  ASSERT_NE(handle, nullptr);
  WaitFor(*handle);
  EXPECT_EQ(ReadAll(out_read_.get()), "GREETING=from the spec cwd=/work\n");
}

TEST_F(ContainerSandboxTest, EveryFenceHoldsAroundTheProgram) {
  SandboxSpec spec = Spec({"/bin/probe"});
  spec.limits.storage_bytes = 1 << 20;
  auto handle = Spawn(spec);
  ASSERT_NE(handle, nullptr);
  ExitInfo exit = WaitFor(*handle);
  const std::string out = ReadAll(out_read_.get());
  EXPECT_TRUE(exit.exited) << out;
  EXPECT_EQ(exit.exit_code, 7) << out;
  EXPECT_THAT(out, HasSubstr("uid 0 gid 0\n"));
  EXPECT_THAT(out, HasSubstr("CapEff 0000000000000000\n"));
  EXPECT_THAT(out, HasSubstr("NoNewPrivs 1\n"));
  EXPECT_THAT(out, HasSubstr("root_write EROFS\n"));
  EXPECT_THAT(out, HasSubstr("mount EPERM\n"));
  EXPECT_THAT(out, HasSubstr("work_fill ENOSPC after 1024 KiB\n"));
  EXPECT_THAT(out, HasSubstr("net lo\n"));
  EXPECT_THAT(out, HasSubstr("ptrace EPERM\n"));
  EXPECT_THAT(out, HasSubstr("socket_inet EPERM\n"));
  EXPECT_THAT(out, HasSubstr("fd3 ok\n"));
  EXPECT_EQ(ReadAll(host_end_.get()), "hello over fd 3");
  EXPECT_FALSE(std::filesystem::exists(root_ + "/planted"));
}

TEST_F(ContainerSandboxTest, TheWorkFolderIsReadAfterTheEnd) {
  auto handle = Spawn(Spec({"/bin/probe", "write", "out.txt", "forty-two"}));
  ASSERT_NE(handle, nullptr);
  ExitInfo exit = WaitFor(*handle);
  EXPECT_EQ(exit.exit_code, 0) << ReadAll(out_read_.get());
  absl::StatusOr<std::string> read = handle->ReadWorkFile("out.txt", 1 << 10);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, "forty-two");
  EXPECT_GT(exit.final_usage.work_bytes, 0u);
  absl::StatusOr<SandboxHandle::CopyStats> copied = handle->CopyWorkDirTo(tmp_.Path("copy"));
  ASSERT_TRUE(copied.ok()) << copied.status();
  EXPECT_EQ(copied->files, 1u);
  EXPECT_EQ(*common::ReadFile(tmp_.Path("copy/out.txt")), "forty-two");
  // Nothing of it stays mounted on the host.
  EXPECT_TRUE(std::filesystem::is_empty(tmp_.Path("state/scratch")));
}

TEST_F(ContainerSandboxTest, PauseResumeAndKill) {
  auto handle = Spawn(Spec({"/bin/probe", "spin"}));
  ASSERT_NE(handle, nullptr);
  ASSERT_TRUE(handle->Pause().ok());
  EXPECT_TRUE(handle->paused());
  absl::StatusOr<Usage> before = handle->GetUsage();
  ASSERT_TRUE(before.ok()) << before.status();
  absl::SleepFor(absl::Milliseconds(300));
  absl::StatusOr<Usage> after = handle->GetUsage();
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(before->cpu_time, after->cpu_time);  // frozen: no CPU
  EXPECT_EQ(after->processes, 2u);               // the init and the probe
  ASSERT_TRUE(handle->Resume().ok());
  absl::SleepFor(absl::Milliseconds(300));
  after = handle->GetUsage();
  ASSERT_TRUE(after.ok());
  EXPECT_GT(after->cpu_time, before->cpu_time);
  ASSERT_TRUE(handle->Pause().ok());
  ASSERT_TRUE(handle->Kill().ok());  // frozen, and still it ends
  ExitInfo exit = WaitFor(*handle);
  EXPECT_FALSE(exit.exited);
  EXPECT_EQ(exit.signal, SIGKILL);
  EXPECT_TRUE(exit.killed);
  EXPECT_TRUE(std::filesystem::is_empty(tmp_.Path("state/runc")));  // deleted from runc's state
}

TEST_F(ContainerSandboxTest, LimitsEndTheContainerAndSayWhich) {
  SandboxSpec spec = Spec({"/bin/probe", "sleep"});
  spec.limits.wall_time = absl::Milliseconds(500);
  auto handle = Spawn(spec);
  ASSERT_NE(handle, nullptr);
  ExitInfo exit = WaitFor(*handle);
  EXPECT_EQ(exit.limit, LimitHit::kWallTime);
  EXPECT_FALSE(exit.killed);

  spec = Spec({"/bin/probe", "memory"});
  spec.limits.memory_bytes = 32 << 20;
  handle = Spawn(spec);
  ASSERT_NE(handle, nullptr);
  exit = WaitFor(*handle);
  EXPECT_EQ(exit.limit, LimitHit::kMemory) << DescribeExit(exit);
  EXPECT_LE(exit.final_usage.memory_peak_bytes, uint64_t{32} << 20);

  spec = Spec({"/bin/probe", "spin"});
  spec.limits.cpu_seconds = 1;
  handle = Spawn(spec);
  ASSERT_NE(handle, nullptr);
  exit = WaitFor(*handle);
  EXPECT_EQ(exit.limit, LimitHit::kCpuTime) << DescribeExit(exit);

  spec = Spec({"/bin/probe", "fork"});
  spec.limits.max_processes = 10;
  handle = Spawn(spec);
  ASSERT_NE(handle, nullptr);
  exit = WaitFor(*handle);
  // The init and the probe count: 8 more.
  EXPECT_EQ(ReadAll(out_read_.get()), "fork refused after 8\n");
}

TEST_F(ContainerSandboxTest, AMissingProgramOrImageIsAClearError) {
  absl::StatusOr<std::unique_ptr<SandboxHandle>> handle =
      box_->Spawn(Spec({"/bin/no-such-program"}));
  ASSERT_FALSE(handle.ok());
  EXPECT_EQ(handle.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(handle.status().message(), HasSubstr("/bin/no-such-program"));
  EXPECT_TRUE(std::filesystem::is_empty(tmp_.Path("state/runc")));
  EXPECT_TRUE(std::filesystem::is_empty(tmp_.Path("state/bundles")));
  EXPECT_TRUE(std::filesystem::is_empty(tmp_.Path("state/scratch")));

  CodeObject code;
  code.digest = std::string(64, 'f');
  SandboxSpec spec;
  EXPECT_EQ(box_->SetProgram(code, &spec).code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace vault::sandbox
