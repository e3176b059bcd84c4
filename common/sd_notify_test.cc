#include "common/sd_notify.h"

#include <poll.h>
#include <stddef.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/testing/temp_dir.h"
#include "common/unique_fd.h"
#include "gtest/gtest.h"

namespace vault::common {
namespace {

// A bound AF_UNIX datagram socket playing the service manager: a path, or an abstract name when
// `name` starts with '@'.
class NotifyListener {
 public:
  explicit NotifyListener(const std::string& name) : name_(name) {
    fd_.Reset(socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    EXPECT_TRUE(fd_.valid()) << strerror(errno);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, name.data(), name.size());
    socklen_t len = offsetof(sockaddr_un, sun_path) + name.size();
    if (name[0] == '@') {
      addr.sun_path[0] = '\0';
    } else {
      len += 1;
    }
    EXPECT_EQ(bind(fd_.get(), reinterpret_cast<sockaddr*>(&addr), len), 0) << strerror(errno);
  }

  // The next datagram, or "<timeout>" after 5 s.
  std::string Receive() {
    pollfd p{fd_.get(), POLLIN, 0};
    if (poll(&p, 1, 5000) != 1) return "<timeout>";
    char buf[4096];
    ssize_t n = recv(fd_.get(), buf, sizeof(buf), 0);
    if (n < 0) return absl::StrCat("<recv: ", strerror(errno), ">");
    return std::string(buf, static_cast<size_t>(n));
  }

  // True when nothing is waiting.
  bool Empty() {
    pollfd p{fd_.get(), POLLIN, 0};
    return poll(&p, 1, 0) == 0;
  }

 private:
  std::string name_;
  UniqueFd fd_;
};

// Sets an environment variable for one test and restores the old value.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = getenv(name)) {
      old_ = old;
      had_ = true;
    }
    if (value == nullptr) {
      unsetenv(name);
    } else {
      setenv(name, value, 1);
    }
  }
  ~ScopedEnv() {
    if (had_) {
      setenv(name_, old_.c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

TEST(SdNotify, SendsExactBytesToAPathSocket) {
  testing::TempDir tmp("sd_notify_test");
  const std::string path = tmp.Path("notify");
  NotifyListener listener(path);
  ASSERT_EQ(SdNotifyTo(path, "READY=1"), absl::OkStatus());
  EXPECT_EQ(listener.Receive(), "READY=1");
  ASSERT_EQ(SdNotifyTo(path, "STOPPING=1\nSTATUS=draining"), absl::OkStatus());
  EXPECT_EQ(listener.Receive(), "STOPPING=1\nSTATUS=draining");
  EXPECT_TRUE(listener.Empty());
}

TEST(SdNotify, SendsToAnAbstractSocket) {
  const std::string name = absl::StrCat("@vault-sd-notify-test-", getpid());
  NotifyListener listener(name);
  ASSERT_EQ(SdNotifyTo(name, "READY=1"), absl::OkStatus());
  EXPECT_EQ(listener.Receive(), "READY=1");
  EXPECT_TRUE(listener.Empty());
}

TEST(SdNotify, ReadsNotifySocketFromTheEnvironment) {
  const std::string name = absl::StrCat("@vault-sd-notify-env-", getpid());
  NotifyListener listener(name);
  ScopedEnv env("NOTIFY_SOCKET", name.c_str());
  ASSERT_EQ(SdNotify("READY=1"), absl::OkStatus());
  EXPECT_EQ(listener.Receive(), "READY=1");
  ASSERT_EQ(SdNotify("STOPPING=1"), absl::OkStatus());
  EXPECT_EQ(listener.Receive(), "STOPPING=1");
}

TEST(SdNotify, WithoutNotifySocketSendsNothingAndSucceeds) {
  {
    ScopedEnv env("NOTIFY_SOCKET", nullptr);
    EXPECT_EQ(SdNotify("READY=1"), absl::OkStatus());
  }
  ScopedEnv env("NOTIFY_SOCKET", "");
  EXPECT_EQ(SdNotify("READY=1"), absl::OkStatus());
}

TEST(SdNotify, RefusesARelativeSocketName) {
  EXPECT_EQ(SdNotifyTo("run/notify", "READY=1").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SdNotifyTo("", "READY=1").code(), absl::StatusCode::kInvalidArgument);
}

TEST(SdNotify, RefusesAnEmptyState) {
  EXPECT_EQ(SdNotifyTo("/run/notify", "").code(), absl::StatusCode::kInvalidArgument);
}

TEST(SdNotify, RefusesANameLongerThanSunPath) {
  sockaddr_un addr;
  // A path needs room for its NUL: sizeof(sun_path) bytes of name do not fit...
  const std::string path = "/" + std::string(sizeof(addr.sun_path) - 1, 'p');
  EXPECT_EQ(SdNotifyTo(path, "READY=1").code(), absl::StatusCode::kInvalidArgument);
  // ...while an abstract name may use every byte.
  const std::string abstract =
      absl::StrCat("@", getpid(), "-", std::string(sizeof(addr.sun_path), 'a'))
          .substr(0, sizeof(addr.sun_path));
  NotifyListener listener(abstract);
  ASSERT_EQ(SdNotifyTo(abstract, "READY=1"), absl::OkStatus());
  EXPECT_EQ(listener.Receive(), "READY=1");
  EXPECT_EQ(SdNotifyTo(abstract + "x", "READY=1").code(), absl::StatusCode::kInvalidArgument);
}

TEST(SdNotify, MissingSocketIsNotFound) {
  testing::TempDir tmp("sd_notify_test");
  EXPECT_EQ(SdNotifyTo(tmp.Path("absent"), "READY=1").code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace vault::common
