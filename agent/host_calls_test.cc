// The host calls for states and objects larger than a frame: get_state by range, the streaming
// CAS put (cas_upload_start/append/finish), and checkpoint/migrate naming a state by digest.
// A real AgentRuntime (RocksDB, CAS, audit log, trust policy, signed SPAWN links) runs agents in
// a fake sandbox that hands the test the agent's end of the channel: the test speaks the
// host-call protocol itself, frame by frame, as a hostile agent could.
#include <arpa/inet.h>
#include <sys/socket.h>
#include <unistd.h>

#include <deque>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "agent/runtime.h"
#include "audit/log.h"
#include "audit/log_store.h"
#include "capability/chain.h"
#include "cas/digest.h"
#include "cas/store.h"
#include "common/random.h"
#include "common/testing/temp_dir.h"
#include "gtest/gtest.h"
#include "sandbox/registry.h"
#include "sandbox/sandbox.h"
#include "storage/database.h"
#include "vault/v1/hostcall.pb.h"

namespace vault::agent {
namespace {

using vault::v1::Grant;
using vault::v1::HostRequest;
using vault::v1::HostResponse;

constexpr int kOk = 0;
constexpr int kInvalidArgument = 3;
constexpr int kNotFound = 5;
constexpr int kPermissionDenied = 7;
constexpr int kResourceExhausted = 8;
constexpr int kFailedPrecondition = 9;
constexpr int kOutOfRange = 11;

std::string RandomString(size_t n) {
  absl::StatusOr<std::string> s = common::RandomBytes(n);
  if (!s.ok()) std::abort();
  return *std::move(s);
}

vault::v1::Digest ToProto(const cas::Digest& d) {
  vault::v1::Digest p;
  p.set_sha256(d.sha256());
  p.set_size(d.size());
  return p;
}

// A sandbox that runs nothing: Spawn hands the agent's end of the channel to the test, Kill
// ends the "process" (on_exit on a thread of its own, as the real sandbox's watcher does).
class FakeHandle : public sandbox::SandboxHandle {
 public:
  FakeHandle(std::string id, std::function<void(const sandbox::ExitInfo&)> on_exit, int out_fd)
      : id_(std::move(id)), on_exit_(std::move(on_exit)), out_fd_(out_fd) {}
  ~FakeHandle() override {
    {
      absl::MutexLock lock(&mu_);
      ended_ = true;  // (no on_exit for a handle destroyed while it "runs")
      if (out_fd_ >= 0) close(out_fd_);
      out_fd_ = -1;
    }
    if (exiter_.joinable()) {
      if (exiter_.get_id() == std::this_thread::get_id()) {
        exiter_.detach();
      } else {
        exiter_.join();
      }
    }
  }
  const std::string& id() const override { return id_; }
  absl::Status Pause() override {
    paused_ = true;
    return absl::OkStatus();
  }
  absl::Status Resume() override {
    paused_ = false;
    return absl::OkStatus();
  }
  void RestartWallClock() override {}  // (no wall-time limit in this fake)
  void SetWallTime(absl::Duration) override {}
  absl::Status Kill() override {
    absl::MutexLock lock(&mu_);
    if (ended_) return absl::OkStatus();
    ended_ = true;
    if (out_fd_ >= 0) close(out_fd_);
    out_fd_ = -1;
    exiter_ = std::thread([on_exit = on_exit_] {
      sandbox::ExitInfo exit;
      exit.killed = true;
      exit.signal = 9;
      if (on_exit) on_exit(exit);
    });
    return absl::OkStatus();
  }
  absl::StatusOr<sandbox::ExitInfo> Wait(absl::Duration) override {
    return absl::UnimplementedError("fake");
  }
  absl::StatusOr<sandbox::Usage> GetUsage() override { return sandbox::Usage{}; }
  absl::StatusOr<uint64_t> GetWorkBytes() override { return 0; }
  bool paused() const override { return paused_; }
  absl::StatusOr<std::string> ReadWorkFile(const std::string&, size_t) override {
    return absl::UnimplementedError("fake");
  }
  absl::StatusOr<CopyStats> CopyWorkDirTo(const std::string&) override {
    return absl::UnimplementedError("fake");
  }

 private:
  const std::string id_;
  const std::function<void(const sandbox::ExitInfo&)> on_exit_;
  absl::Mutex mu_;
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  int out_fd_ ABSL_GUARDED_BY(mu_);
  std::thread exiter_;
  bool paused_ = false;
};

class FakeSandbox : public sandbox::Sandbox {
 public:
  const char* type() const override { return "posix"; }
  absl::Status SetProgram(const sandbox::CodeObject& code,
                          sandbox::SandboxSpec* spec) const override {
    spec->program = "/code/agent";
    spec->code_dir = code.dir;
    return absl::OkStatus();
  }
  absl::StatusOr<std::unique_ptr<sandbox::SandboxHandle>> Spawn(
      const sandbox::SandboxSpec& spec) override {
    int channel = dup(spec.channel_fd);
    int out = dup(spec.stdout_fd);  // held open: the agent's output pipe stays quiet
    absl::MutexLock lock(&mu_);
    channels_.push_back(channel);
    return std::make_unique<FakeHandle>(spec.name, spec.on_exit, out);
  }
  // The channel of the next agent started.
  int TakeChannel() {
    absl::MutexLock lock(&mu_);
    mu_.AwaitWithTimeout(absl::Condition(
                             +[](std::deque<int>* c) { return !c->empty(); }, &channels_),
                         absl::Seconds(10));
    if (channels_.empty()) return -1;
    int fd = channels_.front();
    channels_.pop_front();
    return fd;
  }

 private:
  absl::Mutex mu_;
  std::deque<int> channels_ ABSL_GUARDED_BY(mu_);
};

// The agent's side of the channel, frame by frame.
class Guest {
 public:
  explicit Guest(int fd) : fd_(fd) {}
  ~Guest() {
    if (fd_ >= 0) close(fd_);
  }
  bool WriteRaw(const std::string& bytes) {
    uint32_t len = htonl(static_cast<uint32_t>(bytes.size()));
    std::string out(reinterpret_cast<const char*>(&len), 4);
    out += bytes;
    size_t at = 0;
    while (at < out.size()) {
      ssize_t n = write(fd_, out.data() + at, out.size() - at);
      if (n <= 0) return false;
      at += static_cast<size_t>(n);
    }
    return true;
  }
  bool ReadExact(char* p, size_t n) {
    while (n > 0) {
      ssize_t r = read(fd_, p, n);
      if (r <= 0) return false;
      p += r;
      n -= static_cast<size_t>(r);
    }
    return true;
  }
  std::optional<vault::v1::HostFrame> Read() {
    uint32_t len;
    if (!ReadExact(reinterpret_cast<char*>(&len), 4)) return std::nullopt;
    std::string body(ntohl(len), '\0');
    if (!ReadExact(body.data(), body.size())) return std::nullopt;
    vault::v1::HostFrame f;
    if (!f.ParseFromString(body)) return std::nullopt;
    return f;
  }
  bool Hello() {
    vault::v1::GuestFrame g;
    g.mutable_hello()->set_version(1);
    if (!WriteRaw(g.SerializeAsString())) return false;
    std::optional<vault::v1::HostFrame> f = Read();
    if (!f.has_value() || !f->has_welcome()) return false;
    max_frame_ = f->welcome().max_frame_bytes();
    return true;
  }
  // One call and its answer (code -1 when the channel failed).
  HostResponse Call(HostRequest request) {
    request.set_call_id(next_id_++);
    vault::v1::GuestFrame g;
    *g.mutable_request() = std::move(request);
    HostResponse failed;
    failed.set_code(-1);
    if (!WriteRaw(g.SerializeAsString())) return failed;
    std::optional<vault::v1::HostFrame> f = Read();
    if (!f.has_value() || !f->has_response()) return failed;
    return f->response();
  }
  uint32_t max_frame() const { return max_frame_; }

  // The host calls, as an SDK would make them.
  HostResponse GetState(uint64_t offset, uint64_t limit) {
    HostRequest r;
    r.mutable_get_state()->set_offset(offset);
    r.mutable_get_state()->set_limit(limit);
    return Call(r);
  }
  HostResponse Start(const cas::Digest& d) {
    HostRequest r;
    *r.mutable_cas_upload_start()->mutable_digest() = ToProto(d);
    return Call(r);
  }
  HostResponse Append(uint64_t id, uint64_t offset, const std::string& data) {
    HostRequest r;
    r.mutable_cas_upload_append()->set_upload_id(id);
    r.mutable_cas_upload_append()->set_offset(offset);
    r.mutable_cas_upload_append()->set_data(data);
    return Call(r);
  }
  HostResponse Finish(uint64_t id, bool abort = false) {
    HostRequest r;
    r.mutable_cas_upload_finish()->set_upload_id(id);
    r.mutable_cas_upload_finish()->set_abort(abort);
    return Call(r);
  }
  // Start, the bytes in pieces of `piece`, finish: the finish's answer (or the first failure).
  HostResponse Upload(const cas::Digest& d, const std::string& data, size_t piece) {
    HostResponse started = Start(d);
    if (started.code() != kOk) return started;
    const uint64_t id = started.cas_upload_start().upload_id();
    for (size_t at = 0; at < data.size(); at += piece) {
      HostResponse appended = Append(id, at, data.substr(at, piece));
      if (appended.code() != kOk) return appended;
    }
    return Finish(id);
  }
  HostResponse CheckpointByDigest(const cas::Digest& d) {
    HostRequest r;
    *r.mutable_checkpoint()->mutable_state_digest() = ToProto(d);
    return Call(r);
  }

 private:
  int fd_;
  uint64_t next_id_ = 1;
  uint32_t max_frame_ = 0;
};

class HostCallsTest : public ::testing::Test {
 protected:
  // The vault, with frames of `max_frame` bytes and a storage quota of `quota` bytes per
  // principal.
  void StartVault(uint32_t max_frame, uint64_t quota) {
    // The runtime makes its code root (and the folders above it that it owns) 0711: keep it
    // off /tmp.
    if (geteuid() == 0) {
      std::string templ = "/run/vault-host-calls-test.XXXXXX";
      ASSERT_NE(mkdtemp(templ.data()), nullptr);
      code_root_parent_ = templ;
    }
    std::vector<storage::ColumnFamilySpec> cfs = cas::Store::ColumnFamilies();
    for (auto& cf : audit::LogStore::ColumnFamilies()) cfs.push_back(cf);
    for (auto& cf : AgentRuntime::ColumnFamilies()) cfs.push_back(cf);
    absl::StatusOr<std::unique_ptr<storage::Database>> db = storage::Database::Open(
        {.path = tmp_.Path("db"), .sync_writes = false, .block_cache_mb = 8}, cfs);
    ASSERT_TRUE(db.ok()) << db.status();
    db_ = *std::move(db);
    absl::StatusOr<std::unique_ptr<cas::Store>> store = cas::Store::Open(db_.get(), {});
    ASSERT_TRUE(store.ok()) << store.status();
    cas_ = *std::move(store);
    vault_key_ = std::make_unique<capability::PrivateKey>(*capability::PrivateKey::Generate());
    absl::StatusOr<std::unique_ptr<audit::AuditLog>> log = audit::AuditLog::Open(
        db_.get(), vault_key_.get(), {.vault_name = "vault-a", .background_checkpoints = false});
    ASSERT_TRUE(log.ok()) << log.status();
    log_ = *std::move(log);

    RuntimeOptions options;
    vault::v1::AgentsConfig& c = options.config;
    c.set_files_dir(tmp_.Path("files"));
    c.set_max_frame_bytes(max_frame);
    c.set_read_timeout_ms(5000);
    c.set_call_deadline_ms(10000);
    c.set_flag_after_denials(10);
    c.set_terminate_after_denials(100);
    c.set_mailbox_capacity(16);
    c.set_default_memory_bytes(256 << 20);
    c.set_default_cpu_ms(60000);
    c.set_default_runtime_ms(600000);
    c.set_default_storage_bytes(64 << 20);
    c.set_default_max_agents(100);
    c.set_default_max_storage_bytes(quota);
    c.set_default_max_calls_per_second(100000);
    c.set_stop_checkpoint_ms(100);
    c.set_worker_threads(2);
    options.vault_name = "vault-a";
    options.data_dir = tmp_.Path("data");
    options.code_root = code_root_parent_.empty() ? tmp_.Path("code") : code_root_parent_ + "/code";
    vault::v1::Member a, b;
    a.set_name("vault-a");
    a.set_public_key(vault_key_->public_key().ToText());
    b.set_name("vault-b");
    b.set_public_key(capability::PrivateKey::Generate()->public_key().ToText());
    options.members = {a, b};
    RuntimeDeps deps;
    deps.db = db_.get();
    deps.cas = cas_.get();
    deps.log = log_.get();
    deps.vault_key = vault_key_.get();
    sandboxes_.Add(&sandbox_);
    deps.sandboxes = &sandboxes_;
    deps.agents_enabled = true;
    absl::StatusOr<std::unique_ptr<AgentRuntime>> runtime =
        AgentRuntime::Start(std::move(options), std::move(deps));
    ASSERT_TRUE(runtime.ok()) << runtime.status();
    runtime_ = *std::move(runtime);

    owner_ = std::make_unique<capability::PrivateKey>(*capability::PrivateKey::Generate());
    vault::v1::TrustEntry trust;
    trust.set_principal(owner_->public_key().ToText());
    trust.set_preset("full");
    ASSERT_TRUE(runtime_->policy()->Trust(trust).ok());
    code_ = cas::Digest::Of("#!/bin/false\n");
    ASSERT_TRUE(cas_->Put(code_, "#!/bin/false\n").ok());
  }

  void TearDown() override {
    if (runtime_ != nullptr) runtime_->Stop();
    runtime_.reset();
    log_.reset();
    cas_.reset();
    db_.reset();
    if (!code_root_parent_.empty()) std::filesystem::remove_all(code_root_parent_);
  }

  // Spawns an agent holding `grants` and says hello for it.
  std::unique_ptr<Guest> Spawn(std::vector<Grant> grants, std::string* id = nullptr) {
    vault::v1::SpawnRequest req;
    vault::v1::AgentSpec* spec = req.mutable_spec();
    spec->set_purpose("host calls test");
    *spec->mutable_code_digest() = ToProto(code_);
    for (const Grant& g : grants) *spec->add_grants() = g;
    vault::v1::LinkPayload p;
    p.set_version(capability::kLinkVersion);
    p.set_kind(vault::v1::LinkPayload::SPAWN);
    p.set_issuer(owner_->public_key().raw());
    p.set_audience(vault_key_->public_key().raw());
    p.set_agent_id(absl::StrCat("a-", absl::BytesToHexString(RandomString(8))));
    *p.mutable_code() = ToProto(code_);
    *p.mutable_grants() = spec->grants();
    const absl::Time now = absl::Now();
    p.set_not_before_unix_ms(absl::ToUnixMillis(now - absl::Seconds(60)));
    p.set_not_after_unix_ms(absl::ToUnixMillis(now + absl::Hours(1)));
    absl::StatusOr<vault::v1::SignedLink> link = capability::SignLink(p, *owner_);
    EXPECT_TRUE(link.ok()) << link.status();
    if (!link.ok()) return nullptr;
    *req.mutable_chain()->add_links() = *std::move(link);
    absl::StatusOr<vault::v1::SpawnResponse> spawned = runtime_->Spawn(req);
    EXPECT_TRUE(spawned.ok()) << spawned.status();
    if (!spawned.ok()) return nullptr;
    if (id != nullptr) *id = spawned->agent_id();
    int fd = sandbox_.TakeChannel();
    EXPECT_GE(fd, 0);
    auto guest = std::make_unique<Guest>(fd);
    EXPECT_TRUE(guest->Hello());
    return guest;
  }

  static Grant Bare(Grant::Kind kind) {
    Grant g;
    g.set_kind(kind);
    return g;
  }
  static Grant Migrate(const std::string& vault) {
    Grant g = Bare(Grant::MIGRATE);
    g.add_vaults(vault);
    return g;
  }
  static Grant ReadHash(const cas::Digest& d) {
    Grant g = Bare(Grant::READ);
    g.set_hash(d.sha256());
    return g;
  }

  // The agent's record state, once it is no longer RUNNING (or after 10 s).
  vault::v1::AgentState WaitEnded(const std::string& id) {
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    for (;;) {
      absl::StatusOr<vault::v1::AgentStatus> st = runtime_->Get(id);
      if (st.ok() && st->record().state() != vault::v1::RUNNING) return st->record().state();
      if (absl::Now() > deadline) return vault::v1::RUNNING;
      absl::SleepFor(absl::Milliseconds(20));
    }
  }

  common::testing::TempDir tmp_{"host_calls_test"};
  std::string code_root_parent_;
  FakeSandbox sandbox_;
  sandbox::SandboxRegistry sandboxes_;
  std::unique_ptr<storage::Database> db_;
  std::unique_ptr<cas::Store> cas_;
  std::unique_ptr<capability::PrivateKey> vault_key_;
  std::unique_ptr<audit::AuditLog> log_;
  std::unique_ptr<AgentRuntime> runtime_;
  std::unique_ptr<capability::PrivateKey> owner_;
  cas::Digest code_;
};

constexpr uint32_t kFrame = 64 << 10;
constexpr size_t kPiece = kFrame - 1024;

TEST_F(HostCallsTest, UploadsALargeObjectAndCheckpointsByItsDigest) {
  StartVault(kFrame, 64 << 20);
  std::string id;
  std::unique_ptr<Guest> agent = Spawn({Bare(Grant::CAS_WRITE)}, &id);
  ASSERT_NE(agent, nullptr);
  const std::string state = RandomString((5 << 20) + 12345);  // chunked in the CAS
  const cas::Digest d = cas::Digest::Of(state);
  HostResponse started = agent->Start(d);
  ASSERT_EQ(started.code(), kOk) << started.message();
  EXPECT_EQ(started.cas_upload_start().max_piece_bytes(), kPiece);
  HostResponse put = agent->Upload(d, state, kPiece);
  ASSERT_EQ(put.code(), kOk) << put.message();
  EXPECT_EQ(put.cas_upload_finish().digest().sha256(), d.sha256());
  EXPECT_FALSE(put.cas_upload_finish().already_present());
  EXPECT_TRUE(*cas_->Contains(d));
  // (The first upload was left open: finish it with the rest of the bytes.)
  const uint64_t first = started.cas_upload_start().upload_id();
  EXPECT_EQ(agent->Finish(first).code(), kFailedPrecondition);  // nothing received yet

  HostResponse cp = agent->CheckpointByDigest(d);
  ASSERT_EQ(cp.code(), kOk) << cp.message();
  EXPECT_EQ(cp.checkpoint().digest().sha256(), d.sha256());
  absl::StatusOr<vault::v1::AgentStatus> st = runtime_->Get(id);
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->record().state_digest().sha256(), d.sha256());
  EXPECT_EQ(st->record().state_digest().size(), d.size());

  // Read back in pieces.
  std::string back;
  while (back.size() < state.size()) {
    HostResponse r = agent->GetState(back.size(), kPiece);
    ASSERT_EQ(r.code(), kOk) << r.message();
    ASSERT_TRUE(r.get_state().present());
    EXPECT_EQ(r.get_state().size(), state.size());
    ASSERT_FALSE(r.get_state().state().empty());
    back += r.get_state().state();
  }
  EXPECT_TRUE(back == state);
}

TEST_F(HostCallsTest, GetStateRanges) {
  StartVault(kFrame, 64 << 20);
  std::unique_ptr<Guest> agent = Spawn({Bare(Grant::CAS_WRITE)});
  ASSERT_NE(agent, nullptr);
  // No state yet.
  HostResponse none = agent->GetState(0, 0);
  ASSERT_EQ(none.code(), kOk);
  EXPECT_FALSE(none.get_state().present());

  const std::string state = RandomString(200000);
  const cas::Digest d = cas::Digest::Of(state);
  ASSERT_EQ(agent->Upload(d, state, kPiece).code(), kOk);
  ASSERT_EQ(agent->CheckpointByDigest(d).code(), kOk);
  // The whole of it does not fit in a frame.
  HostResponse whole = agent->GetState(0, 0);
  EXPECT_EQ(whole.code(), kResourceExhausted) << whole.message();
  // A range that fits; the end; past the end.
  HostResponse mid = agent->GetState(1000, 500);
  ASSERT_EQ(mid.code(), kOk);
  EXPECT_EQ(mid.get_state().state(), state.substr(1000, 500));
  EXPECT_EQ(mid.get_state().size(), state.size());
  EXPECT_EQ(mid.get_state().digest().sha256(), d.sha256());
  HostResponse tail = agent->GetState(state.size() - 10, 0);
  ASSERT_EQ(tail.code(), kOk);
  EXPECT_EQ(tail.get_state().state(), state.substr(state.size() - 10));
  HostResponse at_end = agent->GetState(state.size(), 0);
  ASSERT_EQ(at_end.code(), kOk);
  EXPECT_TRUE(at_end.get_state().state().empty());
  HostResponse past = agent->GetState(state.size() + 1, 0);
  EXPECT_EQ(past.code(), kOutOfRange) << past.message();

  // A small state still comes whole in one frame.
  HostRequest small;
  small.mutable_checkpoint()->set_state("small");
  ASSERT_EQ(agent->Call(small).code(), kOk);
  HostResponse one = agent->GetState(0, 0);
  ASSERT_EQ(one.code(), kOk);
  EXPECT_EQ(one.get_state().state(), "small");
  EXPECT_EQ(one.get_state().size(), 5u);
}

TEST_F(HostCallsTest, CheckpointByADigestItDidNotPutIsDenied) {
  StartVault(kFrame, 64 << 20);
  // Somebody else's object, in this vault's CAS.
  const std::string secret = RandomString(100000);
  const cas::Digest d = cas::Digest::Of(secret);
  ASSERT_TRUE(cas_->Put(d, secret).ok());
  std::string id;
  std::unique_ptr<Guest> agent = Spawn({Bare(Grant::CAS_WRITE), Migrate("vault-b")}, &id);
  ASSERT_NE(agent, nullptr);
  HostResponse cp = agent->CheckpointByDigest(d);
  EXPECT_EQ(cp.code(), kPermissionDenied) << cp.message();
  // Nor may it leave with it as its state.
  HostRequest migrate;
  migrate.mutable_migrate()->set_vault("vault-b");
  *migrate.mutable_migrate()->mutable_state_digest() = ToProto(d);
  HostResponse moved = agent->Call(migrate);
  EXPECT_EQ(moved.code(), kPermissionDenied) << moved.message();
  // An object that does not exist is refused the same way (no probing for what exists).
  const cas::Digest missing = cas::Digest::Of("not stored anywhere");
  EXPECT_EQ(agent->CheckpointByDigest(missing).code(), kPermissionDenied);
  // Knowing the digest is not enough to claim it by re-uploading other bytes.
  const std::string forged = RandomString(secret.size());
  HostResponse claimed = agent->Upload(d, forged, kPiece);
  EXPECT_EQ(claimed.code(), kInvalidArgument) << claimed.message();
  EXPECT_EQ(agent->CheckpointByDigest(d).code(), kPermissionDenied);
  // Both bytes and a digest: malformed.
  HostRequest both;
  both.mutable_checkpoint()->set_state("x");
  *both.mutable_checkpoint()->mutable_state_digest() = ToProto(d);
  EXPECT_EQ(agent->Call(both).code(), kInvalidArgument);
  absl::StatusOr<vault::v1::AgentStatus> st = runtime_->Get(id);
  ASSERT_TRUE(st.ok());
  EXPECT_FALSE(st->record().has_state());
  EXPECT_EQ(st->record().counters().denials(), 4u);

  // Sending the very bytes makes it the agent's to name (already present: no new storage).
  HostResponse sent = agent->Upload(d, secret, kPiece);
  ASSERT_EQ(sent.code(), kOk) << sent.message();
  EXPECT_TRUE(sent.cas_upload_finish().already_present());
  EXPECT_EQ(agent->CheckpointByDigest(d).code(), kOk);
}

TEST_F(HostCallsTest, CheckpointByDigestUnderAReadGrant) {
  StartVault(kFrame, 64 << 20);
  const std::string shared = RandomString(70000);
  const cas::Digest d = cas::Digest::Of(shared);
  ASSERT_TRUE(cas_->Put(d, shared).ok());
  const cas::Digest missing = cas::Digest::Of("granted but never stored");
  std::unique_ptr<Guest> agent = Spawn({ReadHash(d), ReadHash(missing)});
  ASSERT_NE(agent, nullptr);
  EXPECT_EQ(agent->CheckpointByDigest(d).code(), kOk);
  // May read it, but it is not here.
  EXPECT_EQ(agent->CheckpointByDigest(missing).code(), kNotFound);
  HostResponse r = agent->GetState(0, 100);
  ASSERT_EQ(r.code(), kOk);
  EXPECT_EQ(r.get_state().state(), shared.substr(0, 100));
}

TEST_F(HostCallsTest, UploadsNeedCasWrite) {
  StartVault(kFrame, 64 << 20);
  std::unique_ptr<Guest> agent = Spawn({Bare(Grant::CAS_READ)});
  ASSERT_NE(agent, nullptr);
  EXPECT_EQ(agent->Start(cas::Digest::Of("x")).code(), kPermissionDenied);
}

// The grant-free state upload is a wasm runner's (an agent whose sandbox snapshots: its upload
// of a snapshot, covered by integration-tests/wasm_test.cc). Any other agent asking for one
// still needs cas-write: the flag buys it nothing.
TEST_F(HostCallsTest, AStateUploadOfAnAgentThatDoesNotSnapshotNeedsCasWrite) {
  StartVault(kFrame, 8 << 20);
  std::unique_ptr<Guest> agent = Spawn({Bare(Grant::CAS_READ)});
  ASSERT_NE(agent, nullptr);
  HostRequest start;
  *start.mutable_cas_upload_start()->mutable_digest() = ToProto(cas::Digest::Of("x"));
  start.mutable_cas_upload_start()->set_state(true);
  EXPECT_EQ(agent->Call(start).code(), kPermissionDenied);
}

TEST_F(HostCallsTest, AnUploadOverTheStorageQuotaIsRefused) {
  StartVault(kFrame, 8 << 20);
  std::unique_ptr<Guest> agent = Spawn({Bare(Grant::CAS_WRITE)});
  ASSERT_NE(agent, nullptr);
  const cas::Digest big = cas::Digest::Of(RandomString(9 << 20));
  HostResponse over = agent->Start(big);
  EXPECT_EQ(over.code(), kResourceExhausted) << over.message();
  // The quota is reserved at start: a second 5 MiB upload does not fit beside the first.
  const std::string five = RandomString(5 << 20);
  const cas::Digest d5 = cas::Digest::Of(five);
  HostResponse first = agent->Start(d5);
  ASSERT_EQ(first.code(), kOk) << first.message();
  const cas::Digest other5 = cas::Digest::Of(RandomString(5 << 20));
  EXPECT_EQ(agent->Start(other5).code(), kResourceExhausted);
  // Aborted: its reservation is given back.
  HostResponse aborted = agent->Finish(first.cas_upload_start().upload_id(), /*abort=*/true);
  ASSERT_EQ(aborted.code(), kOk) << aborted.message();
  EXPECT_EQ(agent->Append(first.cas_upload_start().upload_id(), 0, "x").code(), kNotFound);
  HostResponse second = agent->Start(other5);
  ASSERT_EQ(second.code(), kOk) << second.message();
  EXPECT_EQ(agent->Finish(second.cas_upload_start().upload_id(), true).code(), kOk);
  // A failed finish (wrong bytes) gives it back too.
  HostResponse bad = agent->Upload(d5, RandomString(five.size()), kPiece);
  EXPECT_EQ(bad.code(), kInvalidArgument) << bad.message();
  EXPECT_FALSE(*cas_->Contains(d5));
  HostResponse good = agent->Upload(d5, five, kPiece);
  ASSERT_EQ(good.code(), kOk) << good.message();
  // Stored: charged for good; 3 MiB of the quota is left.
  EXPECT_EQ(agent->Start(other5).code(), kResourceExhausted);
  EXPECT_EQ(agent->Start(cas::Digest::Of(RandomString(2 << 20))).code(), kOk);
}

TEST_F(HostCallsTest, TooManyOpenUploads) {
  StartVault(kFrame, 64 << 20);
  std::unique_ptr<Guest> agent = Spawn({Bare(Grant::CAS_WRITE)});
  ASSERT_NE(agent, nullptr);
  std::vector<uint64_t> ids;
  for (int i = 0; i < 4; ++i) {
    HostResponse r = agent->Start(cas::Digest::Of(RandomString(1000)));
    ASSERT_EQ(r.code(), kOk) << r.message();
    ids.push_back(r.cas_upload_start().upload_id());
  }
  HostResponse fifth = agent->Start(cas::Digest::Of(RandomString(1000)));
  EXPECT_EQ(fifth.code(), kResourceExhausted) << fifth.message();
  ASSERT_EQ(agent->Finish(ids[0], /*abort=*/true).code(), kOk);
  EXPECT_EQ(agent->Start(cas::Digest::Of(RandomString(1000))).code(), kOk);
}

TEST_F(HostCallsTest, AppendsMustComeInOrderAndWithinTheSize) {
  StartVault(kFrame, 64 << 20);
  std::unique_ptr<Guest> agent = Spawn({Bare(Grant::CAS_WRITE)});
  ASSERT_NE(agent, nullptr);
  const std::string data = RandomString(100000);
  const cas::Digest d = cas::Digest::Of(data);
  HostResponse started = agent->Start(d);
  ASSERT_EQ(started.code(), kOk);
  const uint64_t id = started.cas_upload_start().upload_id();
  EXPECT_EQ(agent->Append(id + 100, 0, "x").code(), kNotFound);
  ASSERT_EQ(agent->Append(id, 0, data.substr(0, 50000)).code(), kOk);
  EXPECT_EQ(agent->Append(id, 0, data.substr(0, 50000)).code(), kFailedPrecondition);  // replay
  EXPECT_EQ(agent->Append(id, 60000, data.substr(60000, 100)).code(), kFailedPrecondition);
  EXPECT_EQ(agent->Append(id, 50000, data.substr(50000) + "extra").code(), kInvalidArgument);
  EXPECT_EQ(agent->Finish(id).code(), kFailedPrecondition);  // 50000 of 100000: stays open
  HostResponse rest = agent->Append(id, 50000, data.substr(50000));
  ASSERT_EQ(rest.code(), kOk);
  EXPECT_EQ(rest.cas_upload_append().received(), data.size());
  HostResponse done = agent->Finish(id);
  ASSERT_EQ(done.code(), kOk) << done.message();
  EXPECT_EQ(agent->Finish(id).code(), kNotFound);  // finished: gone
  EXPECT_EQ(*cas_->ReadAll(d), data);
}

TEST_F(HostCallsTest, AFinishWithTheWrongDigestStoresNothing) {
  StartVault(kFrame, 64 << 20);
  std::unique_ptr<Guest> agent = Spawn({Bare(Grant::CAS_WRITE)});
  ASSERT_NE(agent, nullptr);
  for (size_t size : {size_t{70000}, size_t{(4 << 20) + 1}}) {  // inline and chunked
    const std::string data = RandomString(size);
    std::string other = data;
    other[size / 2] ^= 1;
    const cas::Digest claimed = cas::Digest::Of(data);
    HostResponse r = agent->Upload(claimed, other, kPiece);
    EXPECT_EQ(r.code(), kInvalidArgument) << r.message();
    EXPECT_TRUE(absl::StrContains(r.message(), "digest mismatch")) << r.message();
    EXPECT_FALSE(*cas_->Contains(claimed));
    EXPECT_FALSE(*cas_->Contains(cas::Digest::Of(other)));
    EXPECT_EQ(agent->CheckpointByDigest(claimed).code(), kPermissionDenied);
  }
}

TEST_F(HostCallsTest, APieceBiggerThanTheFrameEndsTheAgent) {
  StartVault(kFrame, 64 << 20);
  std::string id;
  std::unique_ptr<Guest> agent = Spawn({Bare(Grant::CAS_WRITE)}, &id);
  ASSERT_NE(agent, nullptr);
  const std::string data = RandomString(kFrame + 10);
  HostResponse started = agent->Start(cas::Digest::Of(data));
  ASSERT_EQ(started.code(), kOk);
  HostRequest r;
  r.set_call_id(99);
  r.mutable_cas_upload_append()->set_upload_id(started.cas_upload_start().upload_id());
  r.mutable_cas_upload_append()->set_data(data);
  vault::v1::GuestFrame g;
  *g.mutable_request() = r;
  agent->WriteRaw(g.SerializeAsString());  // the vault may close before it is all written
  EXPECT_EQ(WaitEnded(id), vault::v1::TERMINATED);
  absl::StatusOr<vault::v1::AgentStatus> st = runtime_->Get(id);
  ASSERT_TRUE(st.ok());
  EXPECT_TRUE(absl::StrContains(st->record().reason(), "channel")) << st->record().reason();
}

TEST_F(HostCallsTest, UploadsAreDroppedWhenTheAgentEnds) {
  StartVault(kFrame, 8 << 20);
  std::string id;
  std::unique_ptr<Guest> agent = Spawn({Bare(Grant::CAS_WRITE)}, &id);
  ASSERT_NE(agent, nullptr);
  const cas::Digest six = cas::Digest::Of(RandomString(6 << 20));
  HostResponse started = agent->Start(six);
  ASSERT_EQ(started.code(), kOk);
  ASSERT_EQ(agent->Append(started.cas_upload_start().upload_id(), 0, RandomString(1000)).code(),
            kOk);
  HostRequest exit;
  exit.mutable_exit()->set_code(0);
  ASSERT_EQ(agent->Call(exit).code(), kOk);
  EXPECT_EQ(WaitEnded(id), vault::v1::COMPLETED);
  // Its reservation went with it: another agent of the principal has the quota again.
  std::unique_ptr<Guest> next = Spawn({Bare(Grant::CAS_WRITE)});
  ASSERT_NE(next, nullptr);
  HostResponse again = next->Start(six);
  EXPECT_EQ(again.code(), kOk) << again.message();
}

TEST_F(HostCallsTest, StatesAboveTheChunkingThresholdFitInOneFrame) {
  // A frame of 8 MiB carries states above the CAS's 4 MiB chunking threshold: checkpoint and
  // cas_put store them with a streaming upload.
  StartVault(8 << 20, 64 << 20);
  std::unique_ptr<Guest> agent = Spawn({Bare(Grant::CAS_WRITE)});
  ASSERT_NE(agent, nullptr);
  const std::string state = RandomString(6 << 20);
  HostRequest cp;
  cp.mutable_checkpoint()->set_state(state);
  HostResponse r = agent->Call(cp);
  ASSERT_EQ(r.code(), kOk) << r.message();
  HostResponse back = agent->GetState(0, 0);
  ASSERT_EQ(back.code(), kOk) << back.message();
  EXPECT_TRUE(back.get_state().state() == state);
  HostRequest put;
  put.mutable_cas_put()->set_data(RandomString(5 << 20));
  EXPECT_EQ(agent->Call(put).code(), kOk);
}

// One hop at a time (regression): a second hop of a frozen agent (the operator's beside the
// agent's own) is refused, and its refusal leaves the first hop's freeze in place; before, the
// refused hop's thaw reopened the host-call gate in the middle of the first hop.
TEST_F(HostCallsTest, ASecondHopOfAFrozenAgentIsRefusedAndKeepsTheFreeze) {
  StartVault(kFrame, 64 << 20);
  std::string id;
  std::unique_ptr<Guest> agent = Spawn({Migrate("vault-b")}, &id);
  ASSERT_NE(agent, nullptr);
  const int unfrozen = agent->GetState(0, 16).code();
  MigrationPort* port = runtime_->migration_port();
  AgentRef ref = port->Find(id);
  ASSERT_NE(ref, nullptr);
  bool refused = true;
  absl::StatusOr<vault::v1::AgentRecord> frozen = port->Freeze(ref, "vault-b", &refused);
  ASSERT_TRUE(frozen.ok()) << frozen.status();
  EXPECT_FALSE(refused);
  EXPECT_EQ(frozen->id(), id);
  EXPECT_EQ(agent->GetState(0, 16).code(), static_cast<int>(absl::StatusCode::kUnavailable));

  absl::StatusOr<vault::v1::AgentRecord> second = port->Freeze(ref, "vault-b", &refused);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition) << second.status();
  EXPECT_TRUE(refused);
  EXPECT_EQ(second.status().message(),
            absl::StrCat("agent ", id, " is already migrating: a hop is under way"));
  EXPECT_EQ(agent->GetState(0, 16).code(), static_cast<int>(absl::StatusCode::kUnavailable));

  port->Unfreeze(ref);
  EXPECT_TRUE(port->CheckMayGo(ref, "vault-b").ok());
  EXPECT_EQ(agent->GetState(0, 16).code(), unfrozen);
}

}  // namespace
}  // namespace vault::agent
