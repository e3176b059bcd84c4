// Helpers of the posix sandbox's lifecycle tests (linux_sandbox_test.cc,
// linux_sandbox_clone_test.cc): one LinuxSandbox for the suite, a pipe read to its end, a shell
// spec, a run to the end.
#ifndef VAULT_SANDBOX_POSIX_LINUX_SANDBOX_TESTING_H_
#define VAULT_SANDBOX_POSIX_LINUX_SANDBOX_TESTING_H_

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>
#include <thread>

#include "absl/time/time.h"
#include "sandbox/posix/linux_sandbox.h"

namespace vault::sandbox {

// One sandbox for the suite (probing the kernel costs a clone).
inline LinuxSandbox* Shared() {
  static LinuxSandbox* sandbox = [] {
    absl::StatusOr<std::unique_ptr<LinuxSandbox>> created = LinuxSandbox::Create({});
    if (!created.ok()) {
      fprintf(stderr, "LinuxSandbox::Create: %s\n", created.status().ToString().c_str());
      return static_cast<LinuxSandbox*>(nullptr);
    }
    return created->release();
  }();
  return sandbox;
}

#define REQUIRE_SANDBOX() \
  if (Shared() == nullptr) GTEST_SKIP() << "the sandbox's fences are not available here"

// Reads a pipe to the end on a thread while the sandbox runs.
class Capture {
 public:
  Capture() {
    int fds[2];
    EXPECT_EQ(pipe2(fds, O_CLOEXEC), 0);
    read_ = fds[0];
    write_ = fds[1];
    reader_ = std::thread([this] {
      char buf[4096];
      ssize_t n;
      while ((n = read(read_, buf, sizeof buf)) > 0) text_.append(buf, static_cast<size_t>(n));
    });
  }
  ~Capture() {
    CloseWriter();
    if (reader_.joinable()) reader_.join();
    close(read_);
  }
  int fd() const { return write_; }
  void CloseWriter() {
    if (write_ >= 0) close(write_);
    write_ = -1;
  }
  std::string Finish() {
    CloseWriter();
    if (reader_.joinable()) reader_.join();
    return text_;
  }

 private:
  int read_ = -1;
  int write_ = -1;
  std::thread reader_;
  std::string text_;
};

inline SandboxSpec Shell(const std::string& script) {
  SandboxSpec spec;
  spec.program = "/bin/sh";
  spec.argv = {"sh", "-c", script};
  spec.limits.wall_time = absl::Seconds(30);
  return spec;
}

inline ExitInfo RunToEnd(SandboxSpec spec, std::string* out = nullptr) {
  Capture capture;
  spec.stdout_fd = capture.fd();
  spec.stderr_fd = capture.fd();
  absl::StatusOr<std::unique_ptr<SandboxHandle>> handle = Shared()->Spawn(spec);
  EXPECT_TRUE(handle.ok()) << handle.status();
  if (!handle.ok()) return {};
  capture.CloseWriter();
  absl::StatusOr<ExitInfo> exit = (*handle)->Wait(absl::Seconds(60));
  EXPECT_TRUE(exit.ok()) << exit.status();
  std::string text = capture.Finish();
  if (out != nullptr) *out = text;
  return exit.ok() ? *exit : ExitInfo{};
}

}  // namespace vault::sandbox

#endif  // VAULT_SANDBOX_POSIX_LINUX_SANDBOX_TESTING_H_
