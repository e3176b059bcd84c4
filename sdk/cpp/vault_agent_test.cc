// A codec test of the SDK: the test plays the vault at the other end of a socketpair, writing
// the vault's frames before each call (the socket buffers them) and checking the agent's frames
// after it.
#include "sdk/cpp/vault_agent.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vault::sdk {
namespace {

using ::testing::HasSubstr;
using vault::v1::GuestFrame;
using vault::v1::HostFrame;

std::string Frame(const google::protobuf::MessageLite& message) {
  std::string body = message.SerializeAsString();
  uint32_t n = static_cast<uint32_t>(body.size());
  std::string frame = {static_cast<char>(n >> 24), static_cast<char>(n >> 16),
                       static_cast<char>(n >> 8), static_cast<char>(n)};
  return frame + body;
}

void WriteRaw(int fd, absl::string_view bytes) {
  ASSERT_EQ(write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
}

// Writes `bytes` with `passed` attached (SCM_RIGHTS).
void WriteWithFd(int fd, absl::string_view bytes, int passed) {
  iovec iov{const_cast<char*>(bytes.data()), bytes.size()};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &passed, sizeof passed);
  ASSERT_EQ(sendmsg(fd, &msg, 0), static_cast<ssize_t>(bytes.size()));
}

std::string ReadRaw(int fd, size_t n) {
  std::string out(n, '\0');
  size_t got = 0;
  while (got < n) {
    ssize_t r = read(fd, out.data() + got, n - got);
    if (r <= 0) break;
    got += static_cast<size_t>(r);
  }
  out.resize(got);
  return out;
}

// The agent's next frame, as the vault reads it.
GuestFrame ReadGuest(int fd) {
  std::string header = ReadRaw(fd, 4);
  GuestFrame frame;
  if (header.size() != 4) {
    ADD_FAILURE() << "no frame from the agent";
    return frame;
  }
  size_t n = (size_t{static_cast<unsigned char>(header[0])} << 24) |
             (size_t{static_cast<unsigned char>(header[1])} << 16) |
             (size_t{static_cast<unsigned char>(header[2])} << 8) |
             size_t{static_cast<unsigned char>(header[3])};
  EXPECT_TRUE(frame.ParseFromString(ReadRaw(fd, n)));
  return frame;
}

HostFrame Welcome(uint32_t max_frame_bytes = 1 << 20, uint32_t version = 1) {
  HostFrame frame;
  vault::v1::Welcome* welcome = frame.mutable_welcome();
  welcome->set_version(version);
  welcome->set_agent_id("agent-1");
  welcome->set_vault("vault-a");
  welcome->set_max_frame_bytes(max_frame_bytes);
  welcome->set_incarnation(2);
  return frame;
}

HostFrame Response(uint64_t call_id, int code = 0, const std::string& message = "") {
  HostFrame frame;
  frame.mutable_response()->set_call_id(call_id);
  frame.mutable_response()->set_code(code);
  frame.mutable_response()->set_message(message);
  return frame;
}

HostFrame HeartbeatResponse(uint64_t call_id, bool checkpoint_requested = false) {
  HostFrame frame = Response(call_id);
  frame.mutable_response()->mutable_heartbeat()->set_checkpoint_requested(checkpoint_requested);
  return frame;
}

vault::v1::Digest SomeDigest() {
  vault::v1::Digest digest;
  digest.set_sha256(std::string(32, '\xab'));
  digest.set_size(5);
  return digest;
}

// True when `fd` is no longer open in this process.
bool IsClosed(int fd) { return fcntl(fd, F_GETFD) < 0 && errno == EBADF; }

class SdkAgentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int fds[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
    vault_.Reset(fds[0]);
    agent_fd_ = fds[1];
  }
  void TearDown() override {
    if (!connected_) close(agent_fd_);
  }

  // Connects the agent with this welcome and consumes its hello.
  void Connect(const HostFrame& welcome = Welcome()) {
    WriteRaw(vault_.get(), Frame(welcome));
    absl::StatusOr<std::unique_ptr<Agent>> agent = Agent::Connect(agent_fd_);
    connected_ = true;
    ASSERT_TRUE(agent.ok()) << agent.status();
    agent_ = std::move(*agent);
    EXPECT_TRUE(ReadGuest(vault_.get()).has_hello());
  }

  UniqueFd vault_;
  int agent_fd_ = -1;
  bool connected_ = false;  // Connect owns agent_fd_ from then on
  std::unique_ptr<Agent> agent_;
};

TEST_F(SdkAgentTest, HelloFrameIsExactlyTheseBytes) {
  WriteRaw(vault_.get(), Frame(Welcome()));
  absl::StatusOr<std::unique_ptr<Agent>> agent = Agent::Connect(agent_fd_);
  connected_ = true;
  ASSERT_TRUE(agent.ok()) << agent.status();
  // GuestFrame{hello{version: 1, sdk: "vault-agent-cpp/0.1"}}: 25 bytes after the length.
  const std::string expected = std::string(
                                   "\x00\x00\x00\x19"
                                   "\x0a\x17"
                                   "\x08\x01"
                                   "\x12\x13",
                                   10) +
                               "vault-agent-cpp/0.1";
  EXPECT_EQ(ReadRaw(vault_.get(), expected.size()), expected);
  EXPECT_EQ((*agent)->agent_id(), "agent-1");
  EXPECT_EQ((*agent)->vault(), "vault-a");
  EXPECT_EQ((*agent)->incarnation(), 2u);
  EXPECT_EQ((*agent)->max_frame_bytes(), size_t{1} << 20);
}

TEST_F(SdkAgentTest, ConnectTakesTheChannelFromTheEnvironment) {
  WriteRaw(vault_.get(), Frame(Welcome()));
  ASSERT_EQ(setenv(kChannelFdEnv, absl::StrCat(agent_fd_).c_str(), 1), 0);
  absl::StatusOr<std::unique_ptr<Agent>> agent = Agent::Connect();
  unsetenv(kChannelFdEnv);
  connected_ = true;
  ASSERT_TRUE(agent.ok()) << agent.status();
  EXPECT_TRUE(ReadGuest(vault_.get()).has_hello());
  // Marked close-on-exec: programs the agent runs do not inherit the channel.
  EXPECT_NE(fcntl(agent_fd_, F_GETFD) & FD_CLOEXEC, 0);
}

TEST(SdkAgentConnect, NoChannelIsFailedPrecondition) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  close(fds[0]);
  absl::StatusOr<std::unique_ptr<Agent>> closed = Agent::Connect(fds[0]);
  EXPECT_EQ(closed.status().code(), absl::StatusCode::kFailedPrecondition);
  absl::StatusOr<std::unique_ptr<Agent>> pipe_end = Agent::Connect(fds[1]);  // not a socket
  EXPECT_EQ(pipe_end.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(IsClosed(fds[1]));  // Connect owned it
}

TEST_F(SdkAgentTest, RefusedHandshakeIsFailedPreconditionWithTheReason) {
  HostFrame refused;
  refused.set_refused("unknown agent");
  WriteRaw(vault_.get(), Frame(refused));
  absl::StatusOr<std::unique_ptr<Agent>> agent = Agent::Connect(agent_fd_);
  connected_ = true;
  EXPECT_EQ(agent.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(agent.status().message(), HasSubstr("unknown agent"));
  EXPECT_TRUE(IsClosed(agent_fd_));
}

TEST_F(SdkAgentTest, OtherProtocolVersionIsFailedPrecondition) {
  WriteRaw(vault_.get(), Frame(Welcome(1 << 20, /*version=*/2)));
  absl::StatusOr<std::unique_ptr<Agent>> agent = Agent::Connect(agent_fd_);
  connected_ = true;
  EXPECT_EQ(agent.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(agent.status().message(), HasSubstr("version 2"));
}

TEST_F(SdkAgentTest, RequestFrameIsExactlyTheseBytes) {
  Connect();
  WriteRaw(vault_.get(), Frame(HeartbeatResponse(1, /*checkpoint_requested=*/true)));
  absl::StatusOr<bool> checkpoint_requested = agent_->Heartbeat();
  ASSERT_TRUE(checkpoint_requested.ok()) << checkpoint_requested.status();
  EXPECT_TRUE(*checkpoint_requested);
  // GuestFrame{request{call_id: 1, heartbeat{}}}.
  const std::string expected("\x00\x00\x00\x06\x12\x04\x08\x01\x5a\x00", 10);
  EXPECT_EQ(ReadRaw(vault_.get(), expected.size()), expected);
}

TEST_F(SdkAgentTest, CallIdsIncreaseFromOneAndRequestsCarryTheirArguments) {
  Connect();
  HostFrame put = Response(1);
  *put.mutable_response()->mutable_cas_put()->mutable_digest() = SomeDigest();
  WriteRaw(vault_.get(), Frame(put));
  WriteRaw(vault_.get(), Frame(Response(2)));
  HostFrame written = Response(3);
  written.mutable_response()->mutable_write_file()->set_size(42);
  WriteRaw(vault_.get(), Frame(written));

  absl::StatusOr<vault::v1::Digest> digest = agent_->CasPut("hello");
  ASSERT_TRUE(digest.ok()) << digest.status();
  EXPECT_EQ(digest->SerializeAsString(), SomeDigest().SerializeAsString());
  ASSERT_TRUE(agent_->Log(vault::v1::LogRequest::WARN, "careful").ok());
  absl::StatusOr<uint64_t> size = agent_->WriteFile("/vault/pub/out", "data", /*append=*/true);
  ASSERT_TRUE(size.ok()) << size.status();
  EXPECT_EQ(*size, 42u);

  GuestFrame first = ReadGuest(vault_.get());
  EXPECT_EQ(first.request().call_id(), 1u);
  EXPECT_EQ(first.request().cas_put().data(), "hello");
  GuestFrame second = ReadGuest(vault_.get());
  EXPECT_EQ(second.request().call_id(), 2u);
  EXPECT_EQ(second.request().log().level(), vault::v1::LogRequest::WARN);
  EXPECT_EQ(second.request().log().message(), "careful");
  GuestFrame third = ReadGuest(vault_.get());
  EXPECT_EQ(third.request().call_id(), 3u);
  EXPECT_EQ(third.request().write_file().path(), "/vault/pub/out");
  EXPECT_TRUE(third.request().write_file().append());
}

TEST_F(SdkAgentTest, Code7IsPermissionDeniedAndTheChannelStaysUsable) {
  Connect();
  WriteRaw(vault_.get(), Frame(Response(1, 7, "no cas-write grant")));
  WriteRaw(vault_.get(), Frame(HeartbeatResponse(2)));
  absl::StatusOr<vault::v1::Digest> denied = agent_->CasPut("x");
  EXPECT_EQ(denied.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(denied.status().message(), "no cas-write grant");
  EXPECT_TRUE(agent_->Heartbeat().ok());
}

TEST_F(SdkAgentTest, OtherCodesKeepTheirCanonicalMeaning) {
  Connect();
  const std::vector<std::pair<int, absl::StatusCode>> cases = {
      {3, absl::StatusCode::kInvalidArgument},   {5, absl::StatusCode::kNotFound},
      {8, absl::StatusCode::kResourceExhausted}, {9, absl::StatusCode::kFailedPrecondition},
      {14, absl::StatusCode::kUnavailable},      {16, absl::StatusCode::kUnauthenticated},
      {99, absl::StatusCode::kUnknown},          {-1, absl::StatusCode::kUnknown},
  };
  uint64_t call_id = 1;
  for (const auto& [code, expected] : cases) {
    WriteRaw(vault_.get(), Frame(Response(call_id++, code, "why")));
    absl::StatusOr<std::string> got = agent_->ReadFile("/vault/pub/a", 0, 0);
    EXPECT_EQ(got.status().code(), expected) << "code " << code;
    EXPECT_THAT(got.status().message(), HasSubstr("why"));
  }
}

TEST_F(SdkAgentTest, OversizedIncomingFrameIsRefusedBeforeItsBody) {
  Connect(Welcome(/*max_frame_bytes=*/64));
  // A length of 65 and no body: reading the body would see the end of the stream (DATA_LOSS).
  WriteRaw(vault_.get(), std::string("\x00\x00\x00\x41", 4));
  ASSERT_EQ(shutdown(vault_.get(), SHUT_WR), 0);
  absl::StatusOr<bool> got = agent_->Heartbeat();
  EXPECT_EQ(got.status().code(), absl::StatusCode::kResourceExhausted) << got.status();
  EXPECT_EQ(agent_->Heartbeat().status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(SdkAgentTest, OversizedRequestIsNotSent) {
  Connect(Welcome(/*max_frame_bytes=*/64));
  EXPECT_EQ(agent_->WriteFile("/vault/a", std::string(100, 'x')).status().code(),
            absl::StatusCode::kInvalidArgument);
  WriteRaw(vault_.get(), Frame(HeartbeatResponse(1)));
  EXPECT_TRUE(agent_->Heartbeat().ok());
  EXPECT_TRUE(ReadGuest(vault_.get()).request().has_heartbeat());
}

TEST_F(SdkAgentTest, NetConnectReturnsTheDescriptorThatCameWithTheResponse) {
  Connect();
  int remote[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, remote), 0);
  HostFrame connected = Response(1);
  connected.mutable_response()->mutable_net_connect()->set_address("192.0.2.1:443");
  WriteWithFd(vault_.get(), Frame(connected), remote[0]);
  close(remote[0]);

  absl::StatusOr<UniqueFd> socket = agent_->NetConnect("example.org", 443, absl::Seconds(2));
  ASSERT_TRUE(socket.ok()) << socket.status();
  ASSERT_TRUE(socket->valid());
  WriteRaw(socket->get(), "ping");
  EXPECT_EQ(ReadRaw(remote[1], 4), "ping");
  close(remote[1]);

  GuestFrame request = ReadGuest(vault_.get());
  EXPECT_EQ(request.request().net_connect().host(), "example.org");
  EXPECT_EQ(request.request().net_connect().port(), 443u);
  EXPECT_EQ(request.request().net_connect().timeout_ms(), 2000u);
}

TEST_F(SdkAgentTest, HttpGetSendsTheRequestAndReturnsTheResult) {
  Connect();
  HostFrame answer = Response(1);
  auto* got = answer.mutable_response()->mutable_http_get();
  got->set_status(200);
  got->set_content_type("text/plain");
  got->set_body("papers");
  got->set_final_url("https://arxiv.org:443/rss/feed");
  WriteRaw(vault_.get(), Frame(answer));
  Agent::HttpOptions options;
  options.method = "POST";
  options.body = "q=1";
  options.timeout = absl::Seconds(3);
  absl::StatusOr<vault::v1::HttpGetResult> r = agent_->HttpGet("https://arxiv.org/rss/x", options);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status(), 200u);
  EXPECT_EQ(r->body(), "papers");
  EXPECT_EQ(r->final_url(), "https://arxiv.org:443/rss/feed");
  GuestFrame request = ReadGuest(vault_.get());
  EXPECT_EQ(request.request().http_get().url(), "https://arxiv.org/rss/x");
  EXPECT_EQ(request.request().http_get().method(), "POST");
  EXPECT_EQ(request.request().http_get().body(), "q=1");
  EXPECT_EQ(request.request().http_get().timeout_ms(), 3000u);
}

TEST_F(SdkAgentTest, StrayDescriptorIsClosedAndTheCallFails) {
  Connect();
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  WriteWithFd(vault_.get(), Frame(HeartbeatResponse(1)), pipe_fds[1]);
  close(pipe_fds[1]);  // the agent's copy is now the only write end

  absl::StatusOr<bool> got = agent_->Heartbeat();
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInternal) << got.status();
  char c;
  EXPECT_EQ(read(pipe_fds[0], &c, 1), 0);  // end of file: the agent closed the passed write end
  close(pipe_fds[0]);
  EXPECT_EQ(agent_->Heartbeat().status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(SdkAgentTest, DeniedNetConnectClosesAnyDescriptorThatCameWithIt) {
  Connect();
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  WriteWithFd(vault_.get(), Frame(Response(1, 7, "no network grant")), pipe_fds[1]);
  close(pipe_fds[1]);
  EXPECT_EQ(agent_->NetConnect("example.org", 80).status().code(),
            absl::StatusCode::kPermissionDenied);
  char c;
  EXPECT_EQ(read(pipe_fds[0], &c, 1), 0);
  close(pipe_fds[0]);
}

TEST_F(SdkAgentTest, NetConnectWithoutADescriptorIsAProtocolError) {
  Connect();
  HostFrame connected = Response(1);
  connected.mutable_response()->mutable_net_connect()->set_address("192.0.2.1:443");
  WriteRaw(vault_.get(), Frame(connected));
  EXPECT_EQ(agent_->NetConnect("example.org", 443).status().code(), absl::StatusCode::kInternal);
}

TEST_F(SdkAgentTest, PeerClosingMidFrameIsDataLoss) {
  Connect();
  WriteRaw(vault_.get(), std::string("\x00\x00\x00\x0a\x12\x02\x08", 7));  // 3 of 10 bytes
  // The vault stops writing (it still takes the request: a full close would fail the send).
  ASSERT_EQ(shutdown(vault_.get(), SHUT_WR), 0);
  EXPECT_EQ(agent_->Heartbeat().status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(agent_->Heartbeat().status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(SdkAgentTest, PeerClosingBetweenFramesIsUnavailable) {
  Connect();
  ASSERT_EQ(shutdown(vault_.get(), SHUT_WR), 0);
  EXPECT_EQ(agent_->Heartbeat().status().code(), absl::StatusCode::kUnavailable);
}

TEST_F(SdkAgentTest, VaultGoneBeforeTheRequestIsUnavailable) {
  Connect();
  vault_.Reset();
  EXPECT_EQ(agent_->Heartbeat().status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(agent_->Heartbeat().status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(SdkAgentTest, ResponseToAnotherCallIsAProtocolError) {
  Connect();
  WriteRaw(vault_.get(), Frame(HeartbeatResponse(7)));
  EXPECT_EQ(agent_->Heartbeat().status().code(), absl::StatusCode::kInternal);
}

TEST_F(SdkAgentTest, ResultOfAnotherKindIsAProtocolError) {
  Connect();
  HostFrame wrong = Response(1);
  wrong.mutable_response()->mutable_list();
  WriteRaw(vault_.get(), Frame(wrong));
  EXPECT_EQ(agent_->Heartbeat().status().code(), absl::StatusCode::kInternal);
}

TEST_F(SdkAgentTest, GetStateReportsPresence) {
  Connect();
  HostFrame absent = Response(1);
  absent.mutable_response()->mutable_get_state()->set_present(false);
  HostFrame present = Response(2);
  present.mutable_response()->mutable_get_state()->set_present(true);
  present.mutable_response()->mutable_get_state()->set_state("iterations=5");
  WriteRaw(vault_.get(), Frame(absent));
  WriteRaw(vault_.get(), Frame(present));
  absl::StatusOr<std::optional<std::string>> first = agent_->GetState();
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_FALSE(first->has_value());
  absl::StatusOr<std::optional<std::string>> second = agent_->GetState();
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->value_or(""), "iterations=5");
}

TEST_F(SdkAgentTest, ReceiveTimesOutOrReturnsTheMessage) {
  Connect();
  HostFrame timed_out = Response(1);
  timed_out.mutable_response()->mutable_receive()->set_timed_out(true);
  HostFrame message = Response(2);
  vault::v1::Message* m = message.mutable_response()->mutable_receive()->mutable_message();
  m->set_id(9);
  m->set_from("operator");
  m->set_type("vault.query");
  m->set_data("how many?");
  WriteRaw(vault_.get(), Frame(timed_out));
  WriteRaw(vault_.get(), Frame(message));

  absl::StatusOr<std::optional<vault::v1::Message>> none = agent_->Receive(absl::Seconds(1));
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(none->has_value());
  absl::StatusOr<std::optional<vault::v1::Message>> got = agent_->Receive(absl::ZeroDuration());
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ((*got)->id(), 9u);
  EXPECT_EQ((*got)->type(), "vault.query");

  EXPECT_EQ(ReadGuest(vault_.get()).request().receive().timeout_ms(), 1000u);
  EXPECT_EQ(ReadGuest(vault_.get()).request().receive().timeout_ms(), 0u);
}

int64_t ThreadCpuNs() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

TEST_F(SdkAgentTest, PollWindowComesFromTheEnvironmentAndIsClamped) {
  setenv(kPollWindowEnv, "20", 1);
  Connect();
  EXPECT_EQ(agent_->poll_window(), absl::Microseconds(20));
  agent_->SetPollWindow(absl::Seconds(5));
  EXPECT_EQ(agent_->poll_window(), kMaxPollWindow);
  agent_->SetPollWindow(-absl::Seconds(1));
  EXPECT_EQ(agent_->poll_window(), absl::ZeroDuration());
  unsetenv(kPollWindowEnv);
}

TEST_F(SdkAgentTest, DefaultPollWindow) {
  unsetenv(kPollWindowEnv);
  Connect();
  EXPECT_EQ(agent_->poll_window(), kDefaultPollWindow);
}

// An agent waiting long for an answer (a receive for a message that comes after 1 s) polls only
// for the window, then sleeps: its thread uses almost no CPU over the second.
TEST_F(SdkAgentTest, ALongWaitSleepsAfterTheWindow) {
  unsetenv(kPollWindowEnv);
  Connect();
  agent_->SetPollWindow(kMaxPollWindow);  // the longest window: still bounded
  std::thread vault([fd = vault_.get()] {
    GuestFrame request = ReadGuest(fd);
    EXPECT_TRUE(request.request().has_receive());
    absl::SleepFor(absl::Seconds(1));
    HostFrame answer = Response(request.request().call_id());
    answer.mutable_response()->mutable_receive()->mutable_message()->set_type("late");
    WriteRaw(fd, Frame(answer));
  });
  const int64_t cpu0 = ThreadCpuNs();
  const absl::Time t0 = absl::Now();
  absl::StatusOr<std::optional<vault::v1::Message>> m = agent_->Receive(absl::Seconds(10));
  const absl::Duration waited = absl::Now() - t0;
  const int64_t cpu = ThreadCpuNs() - cpu0;
  vault.join();
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_TRUE(m->has_value());
  EXPECT_EQ((*m)->type(), "late");
  EXPECT_GE(waited, absl::Milliseconds(900));
  EXPECT_LT(cpu, 20 * 1000 * 1000) << "ns of CPU while waiting 1 s";
}

// Answers already there are read at once; with polling off the SDK reads as before.
TEST_F(SdkAgentTest, CallsWorkWithPollingOff) {
  Connect();
  agent_->SetPollWindow(absl::ZeroDuration());
  for (uint64_t id = 1; id <= 3; ++id) {
    WriteRaw(vault_.get(), Frame(HeartbeatResponse(id)));
    absl::StatusOr<bool> hb = agent_->Heartbeat();
    ASSERT_TRUE(hb.ok()) << hb.status();
    EXPECT_TRUE(ReadGuest(vault_.get()).request().has_heartbeat());
  }
}

// Many calls whose answers come late: the SDK backs off (polls one call in 16 after 8 misses),
// and every answer is still read.
TEST_F(SdkAgentTest, LateAnswersAreNeverMissed) {
  Connect();
  agent_->SetPollWindow(absl::Microseconds(20));
  std::thread vault([fd = vault_.get()] {
    for (int i = 0; i < 40; ++i) {
      GuestFrame request = ReadGuest(fd);
      absl::SleepFor(absl::Microseconds(i % 2 == 0 ? 2000 : 0));
      WriteRaw(fd, Frame(HeartbeatResponse(request.request().call_id())));
    }
  });
  for (int i = 0; i < 40; ++i) {
    absl::StatusOr<bool> hb = agent_->Heartbeat();
    ASSERT_TRUE(hb.ok()) << i << ": " << hb.status();
  }
  vault.join();
}

TEST_F(SdkAgentTest, SpawnChildSendsStateOnlyWhenGiven) {
  Connect();
  HostFrame spawned = Response(1);
  spawned.mutable_response()->mutable_spawn_child()->set_agent_id("child-1");
  WriteRaw(vault_.get(), Frame(spawned));
  vault::v1::AgentSpec spec;
  spec.set_purpose("help");
  *spec.mutable_code_digest() = SomeDigest();
  absl::StatusOr<vault::v1::SpawnChildResult> child = agent_->SpawnChild(spec, std::string());
  ASSERT_TRUE(child.ok()) << child.status();
  EXPECT_EQ(child->agent_id(), "child-1");
  GuestFrame request = ReadGuest(vault_.get());
  EXPECT_TRUE(request.request().spawn_child().has_state());
  EXPECT_EQ(request.request().spawn_child().spec().purpose(), "help");
}

TEST_F(SdkAgentTest, ExitEndsTheProcessWithTheCodeOnceRecorded) {
  Connect();
  WriteRaw(vault_.get(), Frame(Response(1)));
  EXPECT_EXIT((void)agent_->Exit(3, "failed on purpose", SomeDigest()),
              ::testing::ExitedWithCode(3), "");
  GuestFrame request = ReadGuest(vault_.get());  // what the child sent
  EXPECT_EQ(request.request().exit().code(), 3);
  EXPECT_EQ(request.request().exit().message(), "failed on purpose");
  EXPECT_TRUE(request.request().exit().has_result());
}

TEST_F(SdkAgentTest, ExitReturnsWhenTheVaultRefusesIt) {
  Connect();
  WriteRaw(vault_.get(), Frame(Response(1, 5, "no such result object")));
  absl::Status ended = agent_->Exit(0, "", SomeDigest());
  EXPECT_EQ(ended.code(), absl::StatusCode::kNotFound);
}

TEST_F(SdkAgentTest, SelfInspectReportsTheVaultAndTheHop) {
  Connect();
  HostFrame inspected = Response(1);
  vault::v1::SelfInspectResult* self = inspected.mutable_response()->mutable_self_inspect();
  self->set_agent_id("agent-1");
  self->set_vault("vault-b");
  self->set_hop(2);
  self->set_incarnation(1);
  WriteRaw(vault_.get(), Frame(inspected));
  absl::StatusOr<vault::v1::SelfInspectResult> got = agent_->SelfInspect();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->vault(), "vault-b");  // where it runs now (the Welcome's vault() too)
  EXPECT_EQ(got->hop(), 2u);           // migrations so far
  EXPECT_TRUE(ReadGuest(vault_.get()).request().has_self_inspect());
}

TEST_F(SdkAgentTest, MigrateFrameIsExactlyTheseBytes) {
  Connect();
  WriteRaw(vault_.get(), Frame(Response(1, 10, "refused")));
  EXPECT_EQ(agent_->Migrate("b", "s").code(), absl::StatusCode::kAborted);
  // GuestFrame{request{call_id: 1, migrate (field 26){vault: "b", state: "s"}}}.
  const std::string expected(
      "\x00\x00\x00\x0d\x12\x0b\x08\x01\xd2\x01\x06\x0a\x01"
      "b\x12\x01"
      "s",
      17);
  EXPECT_EQ(ReadRaw(vault_.get(), expected.size()), expected);
}

TEST_F(SdkAgentTest, MigrateReturnsTheFailureAndTheAgentGoesOnHere) {
  Connect();
  WriteRaw(vault_.get(), Frame(Response(1, 10, "migration to vault-b refused: Offer to vault-b")));
  WriteRaw(vault_.get(), Frame(Response(2, 7, "no migrate grant names vault-c")));
  WriteRaw(vault_.get(), Frame(HeartbeatResponse(3)));

  absl::Status refused = agent_->Migrate("vault-b", std::string("state\0bytes", 11));
  EXPECT_EQ(refused.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(refused.message(), "migration to vault-b refused: Offer to vault-b");
  absl::Status denied = agent_->Migrate("vault-c", "");
  EXPECT_EQ(denied.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(denied.message(), "no migrate grant names vault-c");
  EXPECT_TRUE(agent_->Heartbeat().ok());  // the channel is still in step

  GuestFrame first = ReadGuest(vault_.get());
  EXPECT_EQ(first.request().call_id(), 1u);
  EXPECT_EQ(first.request().migrate().vault(), "vault-b");
  EXPECT_EQ(first.request().migrate().state(), std::string("state\0bytes", 11));
  GuestFrame second = ReadGuest(vault_.get());
  EXPECT_EQ(second.request().migrate().vault(), "vault-c");
  EXPECT_TRUE(second.request().migrate().state().empty());
  EXPECT_TRUE(ReadGuest(vault_.get()).request().has_heartbeat());
}

TEST_F(SdkAgentTest, MigrateAnsweredWithSuccessIsAProtocolError) {
  Connect();
  WriteRaw(vault_.get(), Frame(Response(1)));
  absl::Status got = agent_->Migrate("vault-b", "state");
  EXPECT_EQ(got.code(), absl::StatusCode::kInternal) << got;
  EXPECT_THAT(got.message(), HasSubstr("answered a migrate call with success"));
  // Where the agent runs is now unknown: the channel is closed for good.
  EXPECT_EQ(agent_->Heartbeat().status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(SdkAgentTest, MigrateEndedByTheVaultClosingTheChannelIsUnavailable) {
  Connect();
  ASSERT_EQ(shutdown(vault_.get(), SHUT_WR), 0);  // the agent went: its channel ends
  EXPECT_EQ(agent_->Migrate("vault-b", "state").code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(ReadGuest(vault_.get()).request().has_migrate());
}

TEST_F(SdkAgentTest, MigrateWithAStateOverTheFrameLimitPutsItFirst) {
  Connect(Welcome(/*max_frame_bytes=*/4096));  // pieces of 3072 bytes
  const std::string state(5000, 's');
  const vault::v1::Digest digest = DigestOf(state);
  HostFrame started = Response(1);
  started.mutable_response()->mutable_cas_upload_start()->set_upload_id(7);
  WriteRaw(vault_.get(), Frame(started));
  HostFrame appended = Response(2);
  appended.mutable_response()->mutable_cas_upload_append()->set_received(3072);
  WriteRaw(vault_.get(), Frame(appended));
  appended = Response(3);
  appended.mutable_response()->mutable_cas_upload_append()->set_received(5000);
  WriteRaw(vault_.get(), Frame(appended));
  HostFrame finished = Response(4);
  *finished.mutable_response()->mutable_cas_upload_finish()->mutable_digest() = digest;
  WriteRaw(vault_.get(), Frame(finished));
  WriteRaw(vault_.get(), Frame(Response(5, 10, "refused")));
  EXPECT_EQ(agent_->Migrate("vault-b", state).code(), absl::StatusCode::kAborted);
  EXPECT_EQ(ReadGuest(vault_.get()).request().cas_upload_start().digest().SerializeAsString(),
            digest.SerializeAsString());
  EXPECT_EQ(ReadGuest(vault_.get()).request().cas_upload_append().data(), state.substr(0, 3072));
  EXPECT_EQ(ReadGuest(vault_.get()).request().cas_upload_append().offset(), 3072u);
  EXPECT_EQ(ReadGuest(vault_.get()).request().cas_upload_finish().upload_id(), 7u);
  GuestFrame migrate = ReadGuest(vault_.get());
  EXPECT_EQ(migrate.request().migrate().vault(), "vault-b");
  EXPECT_TRUE(migrate.request().migrate().state().empty());
  EXPECT_EQ(migrate.request().migrate().state_digest().SerializeAsString(),
            digest.SerializeAsString());
}

TEST_F(SdkAgentTest, GetStateReadsALargeStateInPieces) {
  Connect(Welcome(/*max_frame_bytes=*/4096));  // pieces of 3072 bytes
  std::string state;
  for (int i = 0; i < 10000; ++i) state += static_cast<char>('a' + i % 26);
  const vault::v1::Digest digest = DigestOf(state);
  uint64_t call = 1;
  for (size_t at = 0; at < state.size(); at += 3072) {
    HostFrame piece = Response(call++);
    vault::v1::StateResult* r = piece.mutable_response()->mutable_get_state();
    r->set_present(true);
    r->set_size(state.size());
    *r->mutable_digest() = digest;
    r->set_state(state.substr(at, 3072));
    WriteRaw(vault_.get(), Frame(piece));
  }
  absl::StatusOr<std::optional<std::string>> got = agent_->GetState();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(got->value_or("") == state);
  for (uint64_t offset : {0, 3072, 6144, 9216}) {
    GuestFrame f = ReadGuest(vault_.get());
    EXPECT_EQ(f.request().get_state().offset(), offset);
    EXPECT_EQ(f.request().get_state().limit(), 3072u);
  }
}

TEST_F(SdkAgentTest, GetStateReadsAgainWhenTheStateChangesMeanwhile) {
  Connect(Welcome(/*max_frame_bytes=*/4096));
  const std::string old_state(5000, 'o'), new_state(4000, 'n');
  auto piece = [](uint64_t call, const std::string& state, size_t at) {
    HostFrame f = Response(call);
    vault::v1::StateResult* r = f.mutable_response()->mutable_get_state();
    r->set_present(true);
    r->set_size(state.size());
    *r->mutable_digest() = DigestOf(state);
    r->set_state(state.substr(at, 3072));
    return f;
  };
  WriteRaw(vault_.get(), Frame(piece(1, old_state, 0)));
  WriteRaw(vault_.get(), Frame(piece(2, new_state, 3072)));  // a checkpoint came between
  WriteRaw(vault_.get(), Frame(piece(3, new_state, 0)));
  WriteRaw(vault_.get(), Frame(piece(4, new_state, 3072)));
  absl::StatusOr<std::optional<std::string>> got = agent_->GetState();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(got->value_or("") == new_state);
}

TEST_F(SdkAgentTest, SmallStatesAndObjectsStillTakeOneFrame) {
  Connect(Welcome(/*max_frame_bytes=*/4096));
  HostFrame cp = Response(1);
  *cp.mutable_response()->mutable_checkpoint()->mutable_digest() = SomeDigest();
  WriteRaw(vault_.get(), Frame(cp));
  ASSERT_TRUE(agent_->Checkpoint(std::string(3072, 'x')).ok());
  EXPECT_EQ(ReadGuest(vault_.get()).request().checkpoint().state(), std::string(3072, 'x'));
}

TEST_F(SdkAgentTest, CheckpointOfALargeStateGoesInPiecesThenByDigest) {
  Connect(Welcome(/*max_frame_bytes=*/4096));
  const std::string state(7000, 'z');
  const vault::v1::Digest digest = DigestOf(state);
  HostFrame started = Response(1);
  started.mutable_response()->mutable_cas_upload_start()->set_upload_id(3);
  started.mutable_response()->mutable_cas_upload_start()->set_max_piece_bytes(3072);
  WriteRaw(vault_.get(), Frame(started));
  for (uint64_t call = 2; call <= 4; ++call) {
    HostFrame appended = Response(call);
    appended.mutable_response()->mutable_cas_upload_append();
    WriteRaw(vault_.get(), Frame(appended));
  }
  HostFrame finished = Response(5);
  *finished.mutable_response()->mutable_cas_upload_finish()->mutable_digest() = digest;
  WriteRaw(vault_.get(), Frame(finished));
  HostFrame cp = Response(6);
  *cp.mutable_response()->mutable_checkpoint()->mutable_digest() = digest;
  WriteRaw(vault_.get(), Frame(cp));
  absl::StatusOr<vault::v1::Digest> got = agent_->Checkpoint(state);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->SerializeAsString(), digest.SerializeAsString());
  // A state upload (needs no cas-write grant).
  GuestFrame start = ReadGuest(vault_.get());
  EXPECT_TRUE(start.request().has_cas_upload_start());
  EXPECT_TRUE(start.request().cas_upload_start().state());
  std::string sent;
  for (uint64_t offset : {0, 3072, 6144}) {
    GuestFrame f = ReadGuest(vault_.get());
    EXPECT_EQ(f.request().cas_upload_append().upload_id(), 3u);
    EXPECT_EQ(f.request().cas_upload_append().offset(), offset);
    sent += f.request().cas_upload_append().data();
  }
  EXPECT_EQ(sent, state);
  EXPECT_FALSE(ReadGuest(vault_.get()).request().cas_upload_finish().abort());
  EXPECT_EQ(ReadGuest(vault_.get()).request().checkpoint().state_digest().SerializeAsString(),
            digest.SerializeAsString());
}

TEST_F(SdkAgentTest, AFailedPieceAbortsTheUpload) {
  Connect(Welcome(/*max_frame_bytes=*/4096));
  HostFrame started = Response(1);
  started.mutable_response()->mutable_cas_upload_start()->set_upload_id(9);
  WriteRaw(vault_.get(), Frame(started));
  WriteRaw(vault_.get(), Frame(Response(2, 8, "no space left")));
  HostFrame aborted = Response(3);
  aborted.mutable_response()->mutable_cas_upload_finish();
  WriteRaw(vault_.get(), Frame(aborted));
  absl::StatusOr<vault::v1::Digest> got = agent_->CasPut(std::string(5000, 'q'));
  EXPECT_EQ(got.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(ReadGuest(vault_.get()).request().has_cas_upload_start());
  EXPECT_TRUE(ReadGuest(vault_.get()).request().has_cas_upload_append());
  GuestFrame abort = ReadGuest(vault_.get());
  EXPECT_EQ(abort.request().cas_upload_finish().upload_id(), 9u);
  EXPECT_TRUE(abort.request().cas_upload_finish().abort());
}

TEST_F(SdkAgentTest, APieceBiggerThanTheFrameIsNotSent) {
  Connect(Welcome(/*max_frame_bytes=*/4096));
  EXPECT_EQ(agent_->CasUploadAppend(1, 0, std::string(5000, 'x')).status().code(),
            absl::StatusCode::kInvalidArgument);
  WriteRaw(vault_.get(), Frame(HeartbeatResponse(1)));
  EXPECT_TRUE(agent_->Heartbeat().ok());
  EXPECT_TRUE(ReadGuest(vault_.get()).request().has_heartbeat());
}

TEST(SdkDigest, DigestOfIsTheSha256) {
  auto hex = [](const vault::v1::Digest& d) { return DigestToText(d); };
  EXPECT_EQ(hex(DigestOf("")),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855/0");
  EXPECT_EQ(hex(DigestOf("abc")),
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad/3");
  EXPECT_EQ(hex(DigestOf("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")),
            "sha256:248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1/56");
  EXPECT_EQ(hex(DigestOf(std::string(1000000, 'a'))),
            "sha256:cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0/1000000");
  EXPECT_EQ(hex(DigestOf(std::string(64, 'a'))),
            "sha256:ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb/64");
}

TEST(SdkDigest, TextRoundTrip) {
  vault::v1::Digest digest = SomeDigest();
  std::string hex;
  for (int i = 0; i < 32; ++i) hex += "ab";
  std::string text = DigestToText(digest);
  EXPECT_EQ(text, "sha256:" + hex + "/5");
  absl::StatusOr<vault::v1::Digest> parsed = ParseDigest(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->SerializeAsString(), digest.SerializeAsString());
}

TEST(SdkDigest, ParseIsStrict) {
  const std::string hex(64, 'a');
  EXPECT_TRUE(ParseDigest("sha256:" + hex + "/0").ok());
  for (const std::string& bad :
       {"sha256:" + hex, "sha256:" + hex + "/", "sha256:" + hex + "/01", "sha256:" + hex + "/+1",
        "sha256:" + hex + "/1 ", "sha256:" + std::string(64, 'A') + "/1",
        "sha256:" + hex.substr(1) + "/1", "sha512:" + hex + "/1",
        "sha256:" + hex + "/99999999999999999999999"}) {
    EXPECT_EQ(ParseDigest(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

}  // namespace
}  // namespace vault::sdk
