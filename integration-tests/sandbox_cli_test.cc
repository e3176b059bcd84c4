// `vaultctl sandbox run` and `vaultctl sandbox fences` as an operator uses them: the real
// vaultctl binary, as root and as an unprivileged user (setpriv), reporting how programs ended.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "integration-tests/harness.h"

namespace vault::integration {
namespace {

using ::testing::HasSubstr;

class SandboxCliTest : public VaultTest {
 protected:
  RunResult Run(std::vector<std::string> args, absl::Duration timeout = absl::Seconds(60)) {
    args.insert(args.begin(), "sandbox");
    return Vaultctl(args, timeout);
  }
  bool FencesComplete() { return Run({"fences"}).exit_code == kExitOk; }
};

TEST_F(SandboxCliTest, JsonReportAndTheProgramsExitCode) {
  if (!FencesComplete()) GTEST_SKIP() << "a sandbox fence is missing on this machine";
  RunResult r = Vaultctl({"-o", "json", "sandbox", "run", "--", "/bin/sh", "-c",
                          "echo to-stdout; echo to-stderr >&2; exit 3"});
  EXPECT_EQ(r.exit_code, 3) << r;
  // stdout holds only the report; the program's output went to stderr.
  EXPECT_THAT(
      r.out,
      HasSubstr("{\"exited\":true,\"exit_code\":3,\"limit\":\"none\",\"peak_memory_bytes\":"));
  EXPECT_EQ(r.out.find("to-stdout"), std::string::npos);
  EXPECT_THAT(r.err, HasSubstr("to-stdout\n"));
  EXPECT_THAT(r.err, HasSubstr("to-stderr\n"));
}

TEST_F(SandboxCliTest, TextReportGoesToStderr) {
  if (!FencesComplete()) GTEST_SKIP() << "a sandbox fence is missing on this machine";
  RunResult r = Run({"run", "--", "/bin/echo", "hello"});
  EXPECT_EQ(r.exit_code, 0) << r;
  EXPECT_EQ(r.out, "hello\n");
  EXPECT_THAT(r.err, HasSubstr("sandbox: exited with code 0; peak memory "));
}

TEST_F(SandboxCliTest, LimitsAreReportedWithTheSignal) {
  if (!FencesComplete()) GTEST_SKIP() << "a sandbox fence is missing on this machine";
  RunResult wall =
      Vaultctl({"-o", "json", "sandbox", "run", "--wall-seconds", "0.5", "--", "/bin/sleep", "30"});
  EXPECT_EQ(wall.exit_code, 128 + 9) << wall;
  EXPECT_THAT(wall.out, HasSubstr("{\"exited\":false,\"signal\":9,\"limit\":\"wall-time\""));
  if (access("/usr/bin/python3", X_OK) == 0) {
    RunResult memory = Vaultctl({"-o", "json", "sandbox", "run", "--memory", "32M", "--",
                                 "/usr/bin/python3", "-c", "b = bytearray(100 << 20)"});
    EXPECT_EQ(memory.exit_code, 128 + 9) << memory;
    EXPECT_THAT(memory.out, HasSubstr("\"signal\":9,\"limit\":\"memory\""));
  }
  RunResult cpu = Vaultctl({"-o", "json", "sandbox", "run", "--cpu-seconds", "1", "--", "/bin/sh",
                            "-c", "while :; do :; done"});
  EXPECT_THAT(cpu.out, HasSubstr("\"limit\":\"cpu-time\"")) << cpu;
}

TEST_F(SandboxCliTest, WorkDirectoryIsCopiedOutWithoutFollowingLinks) {
  if (!FencesComplete()) GTEST_SKIP() << "a sandbox fence is missing on this machine";
  std::string out_dir = root() + "/work-out";
  RunResult r = Vaultctl({"-o", "json", "sandbox", "run", "--work", out_dir, "--", "/bin/sh", "-c",
                          "echo -n A > /work/a && mkdir /work/sub && echo -n BB > /work/sub/b && "
                          "ln -s /etc/shadow /work/link && mkfifo /work/fifo"});
  EXPECT_EQ(r.exit_code, 0) << r;
  EXPECT_THAT(r.out, HasSubstr("\"work\":{\"dir\":\"" + out_dir +
                               "\",\"files\":2,\"bytes\":3,\"skipped\":2}"));
  std::ifstream a(out_dir + "/a");
  std::string text((std::istreambuf_iterator<char>(a)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "A");
  EXPECT_TRUE(std::filesystem::exists(out_dir + "/sub/b"));
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::symlink_status(out_dir + "/link")));
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::symlink_status(out_dir + "/fifo")));
  // A second run refuses the now non-empty folder and says so.
  RunResult again = Run({"run", "--work", out_dir, "--", "/bin/true"});
  EXPECT_EQ(again.exit_code, 125) << again;
  EXPECT_THAT(again.err, HasSubstr("is not empty"));
}

// Hard links and sparse files take little of the sandbox's quota; copying them out must not
// take more of the host's disk than the quota.
TEST_F(SandboxCliTest, CopyOutIsBoundedByTheStorageQuota) {
  if (!FencesComplete()) GTEST_SKIP() << "a sandbox fence is missing on this machine";
  std::string out_dir = root() + "/sparse-out";
  RunResult r = Run({"run", "--storage", "1M", "--work", out_dir, "--", "/bin/sh", "-c",
                     "truncate -s 32M /work/sparse && echo made"});
  EXPECT_EQ(r.exit_code, 125) << r;
  EXPECT_THAT(r.out, HasSubstr("made"));
  EXPECT_THAT(r.err, HasSubstr("add up to more than 1048576 bytes"));
  std::error_code ec;
  EXPECT_LE(std::filesystem::file_size(out_dir + "/sparse", ec), uint64_t{2} << 20);
}

// The child drops the host's descriptors before it applies the open-files limit.
TEST_F(SandboxCliTest, SmallOpenFilesLimitStillStarts) {
  if (!FencesComplete()) GTEST_SKIP() << "a sandbox fence is missing on this machine";
  RunResult r = Run({"run", "--files", "16", "--", "/bin/sh", "-c", "ulimit -n"});
  EXPECT_EQ(r.exit_code, 0) << r;
  EXPECT_EQ(r.out, "16\n");
}

TEST_F(SandboxCliTest, BadInputGetsClearErrors) {
  RunResult missing = Run({"run", "--", "/usr/bin/no-such-program"});
  if (missing.exit_code == 125) GTEST_SKIP() << "sandbox unavailable: " << missing.err;
  EXPECT_EQ(missing.exit_code, 127) << missing;
  EXPECT_THAT(missing.err, HasSubstr("cannot execute /usr/bin/no-such-program"));
  RunResult size = Run({"run", "--memory", "12X", "--", "/bin/true"});
  EXPECT_EQ(size.exit_code, kExitUsage) << size;
  EXPECT_THAT(size.err, HasSubstr("--memory: \"12X\" is not a size"));
  RunResult tiny = Run({"run", "--memory", "1K", "--", "/bin/true"});
  EXPECT_EQ(tiny.exit_code, kExitUsage) << tiny;
  EXPECT_THAT(tiny.err, HasSubstr("limit memory_bytes = 1024 is outside"));
  RunResult none = Run({"run"});
  EXPECT_EQ(none.exit_code, kExitUsage) << none;
  RunResult relative = Run({"run", "--", "sh"});
  EXPECT_EQ(relative.exit_code, 125) << relative;
  EXPECT_THAT(relative.err, HasSubstr("program must be an absolute path"));
}

// vaultd need not run as root: the sandbox maps the caller's own uid and says which fences
// it lacks (here: cgroups, which need a delegated, writable hierarchy).
TEST_F(SandboxCliTest, UnprivilegedUserGetsTheSandboxWithoutCgroups) {
  if (geteuid() != 0 || access("/usr/bin/setpriv", X_OK) != 0) {
    GTEST_SKIP() << "needs root (to become nobody) and setpriv";
  }
  // Copies of the binaries that nobody can reach.
  std::string bin = root() + "/bin";
  std::filesystem::create_directories(bin);
  chmod(root().c_str(), 0755);
  chmod(bin.c_str(), 0755);
  std::filesystem::path init =
      std::filesystem::path(VaultctlPath()).parent_path() / "../sandbox/vault-sandbox-init";
  std::filesystem::copy_file(VaultctlPath(), bin + "/vaultctl");
  std::filesystem::copy_file(init, bin + "/vault-sandbox-init");
  chmod((bin + "/vaultctl").c_str(), 0755);
  chmod((bin + "/vault-sandbox-init").c_str(), 0755);
  std::vector<std::string> as_nobody = {"/usr/bin/setpriv", "--reuid=65534",   "--regid=65534",
                                        "--clear-groups",   bin + "/vaultctl", "sandbox"};
  auto run = [&](std::vector<std::string> args) {
    std::vector<std::string> argv = as_nobody;
    argv.insert(argv.end(), args.begin(), args.end());
    return RunProgram(argv, absl::Seconds(60));
  };
  RunResult fences = run({"fences"});
  EXPECT_EQ(fences.exit_code, kExitRefused) << fences;
  EXPECT_THAT(fences.out, HasSubstr("host ids: the caller's own uid (not root)"));
  EXPECT_THAT(fences.out, HasSubstr("cgroups: MISSING"));
  RunResult refused = run({"run", "--", "/bin/true"});
  EXPECT_EQ(refused.exit_code, 125) << refused;
  EXPECT_THAT(refused.err, HasSubstr("sandbox fences required by policy are missing: cgroups"));
  // A supplementary group cannot be dropped in an unprivileged user namespace: agents would keep
  // it, so the sandbox refuses to run at all.
  std::vector<std::string> with_group = {
      "/usr/bin/setpriv", "--reuid=65534", "--regid=65534",   "--groups=6", bin + "/vaultctl",
      "sandbox",          "run",           "--allow-missing", "cgroups",    "--",
      "/bin/true"};
  RunResult grouped = RunProgram(with_group, absl::Seconds(60));
  EXPECT_EQ(grouped.exit_code, 125) << grouped;
  EXPECT_THAT(grouped.err, HasSubstr("no supplementary groups (this unprivileged process has 6;"));
  RunResult r = run({"run", "--allow-missing", "cgroups", "--", "/bin/sh", "-c",
                     "id -u; cat /proc/self/uid_map; grep -E '^(CapEff|NoNewPrivs|Seccomp):' "
                     "/proc/self/status"});
  EXPECT_EQ(r.exit_code, 0) << r;
  EXPECT_THAT(r.out, ::testing::StartsWith("1000\n"));  // no log line on stdout
  EXPECT_THAT(r.out, HasSubstr(" 1000      65534          1\n"));
  EXPECT_THAT(r.err, HasSubstr("sandbox fence: memory: v1: cannot create cgroups in"));
  EXPECT_THAT(r.out, HasSubstr("CapEff:\t0000000000000000\nNoNewPrivs:\t1\nSeccomp:\t2\n"));
}

// vaultd probes the sandbox at start and says what it found, in its log and in `status`.
TEST_F(SandboxCliTest, VaultdReportsTheSandboxFences) {
  absl::StatusOr<Vaultd*> vaultd = StartStandaloneVault("fences");
  ASSERT_TRUE(vaultd.ok()) << vaultd.status();
  RunResult status = Vaultctl({"--vault", (*vaultd)->socket(), "-o", "json", "status"});
  ASSERT_EQ(status.exit_code, kExitOk) << status;
  EXPECT_THAT(status.out, HasSubstr("\"sandbox_fences\":\"namespaces (user, mount, pid, net, ipc, "
                                    "uts, cgroup): active\\nseccomp filter: active\\n"));
  std::ifstream log((*vaultd)->log_path());
  std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_THAT(text, HasSubstr("sandbox fence: seccomp filter: active"));
  if (FencesComplete()) {
    EXPECT_THAT(status.out, HasSubstr("\"agents_enabled\":true,\"agents_disabled_reason\":\"\""));
    RunResult text_status = Vaultctl({"--vault", (*vaultd)->socket(), "status"});
    EXPECT_THAT(text_status.out, HasSubstr("agents:   enabled\nsandbox:\n  namespaces"));
  } else {
    EXPECT_THAT(status.out, HasSubstr("\"agents_enabled\":false"));
    EXPECT_THAT(text,
                HasSubstr("agents are disabled: sandbox fences required by policy are missing"));
  }
}

}  // namespace
}  // namespace vault::integration
