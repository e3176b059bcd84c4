// Crash consistency: SIGKILL vaultd while it is taking writes, restart it, and check that every
// acknowledged object survived byte for byte and that the change feed has no gaps. Also an
// interrupted 40 MiB streaming upload that resumes after the crash.
#include <sys/mount.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <thread>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "integration-tests/harness.h"

namespace vault::integration {
namespace {

constexpr absl::Duration kCallTimeout = absl::Seconds(20);
constexpr size_t kMaxObject = 256 << 10;    // from 1 KiB objects go to pack files
constexpr size_t kBatchGetBytes = 3 << 20;  // below the vault's 4 MiB batch limit

// An object whose BatchPut returned OK, and the feed seq the vault gave it.
struct Acked {
  std::string data;
  uint64_t seq = 0;
};

// Puts random objects (1 B .. 256 KiB, 1-4 per BatchPut) over the admin socket until a call fails
// or Stop(); remembers every object whose BatchPut returned OK.
class Writer {
 public:
  Writer(std::string socket, uint64_t seed) : socket_(std::move(socket)), rng_(seed) {}
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;
  ~Writer() { Join(); }

  void Start() {
    thread_ = std::thread([this] { Run(); });
  }
  void Stop() { stop_.store(true); }
  void Join() {
    if (thread_.joinable()) thread_.join();
  }
  size_t acked_count() const { return acked_count_.load(); }
  // Waits until at least `n` objects are acknowledged or the writer stopped.
  bool WaitForAcked(size_t n, absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    while (absl::Now() < deadline) {
      if (acked_count() >= n) return true;
      if (done_.load()) return false;
      absl::SleepFor(absl::Milliseconds(1));
    }
    return false;
  }
  // After Join: the acknowledged objects, and an unexpected per-item error, if any.
  std::vector<Acked>& acked() { return acked_; }
  const std::string& item_error() const { return item_error_; }
  // After Join: why the last call failed.
  const std::string& call_error() const { return call_error_; }

 private:
  void Run() {
    std::unique_ptr<vault::v1::Cas::Stub> cas = CasStub(socket_);
    std::uniform_int_distribution<size_t> size(1, kMaxObject);
    std::uniform_int_distribution<int> count(1, 4);
    while (!stop_.load()) {
      vault::v1::BatchPutRequest req;
      std::vector<std::string> sent;
      for (int i = count(rng_); i > 0; --i) {
        sent.push_back(RandomBytes(rng_, size(rng_)));
        auto* item = req.add_items();
        *item->mutable_digest() = DigestProto(sent.back());
        item->set_data(sent.back());
      }
      vault::v1::BatchPutResponse resp;
      grpc::ClientContext ctx;
      SetDeadline(&ctx, kCallTimeout);
      grpc::Status s = cas->BatchPut(&ctx, req, &resp);
      if (!s.ok()) {  // the vault went away
        call_error_ = absl::StrCat("BatchPut: ", s.error_code(), " ", s.error_message());
        break;
      }
      if (resp.results_size() != req.items_size()) {
        item_error_ = absl::StrCat("BatchPut answered ", resp.results_size(), " results for ",
                                   req.items_size(), " items");
        break;
      }
      for (int i = 0; i < resp.results_size(); ++i) {
        const vault::v1::PutResult& r = resp.results(i);
        if (r.status().code() != 0) {
          item_error_ =
              absl::StrCat("item ", i, ": code ", r.status().code(), ": ", r.status().message());
          break;
        }
        acked_.push_back(Acked{std::move(sent[i]), r.seq()});
      }
      if (!item_error_.empty()) break;
      acked_count_.store(acked_.size());
    }
    done_.store(true);
  }

  const std::string socket_;
  std::mt19937_64 rng_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> done_{false};
  std::atomic<size_t> acked_count_{0};
  // Written by the writer thread only; read after Join.
  std::vector<Acked> acked_;
  std::string item_error_;
  std::string call_error_;
};

// Every object in `objects` is stored with exactly these bytes.
void ExpectAllPresentAt(const std::string& socket, const std::vector<Acked>& objects) {
  std::unique_ptr<vault::v1::Cas::Stub> cas = CasStub(socket);
  size_t i = 0, bad = 0;
  while (i < objects.size()) {
    vault::v1::BatchGetRequest req;
    std::vector<const std::string*> asked;
    for (size_t bytes = 0; i < objects.size() && bytes + objects[i].data.size() <= kBatchGetBytes;
         ++i) {
      bytes += objects[i].data.size();
      *req.add_digests() = DigestProto(objects[i].data);
      asked.push_back(&objects[i].data);
    }
    vault::v1::BatchGetResponse resp;
    grpc::ClientContext ctx;
    SetDeadline(&ctx, kCallTimeout);
    grpc::Status s = cas->BatchGet(&ctx, req, &resp);
    ASSERT_TRUE(s.ok()) << s.error_code() << " " << s.error_message();
    ASSERT_EQ(resp.items_size(), static_cast<int>(asked.size()));
    for (size_t k = 0; k < asked.size(); ++k) {
      const auto& item = resp.items(static_cast<int>(k));
      if (item.status().code() != 0 || item.data() != *asked[k]) {
        if (++bad <= 10) {
          ADD_FAILURE() << "acknowledged object " << DigestText(*asked[k])
                        << " lost or changed: code " << item.status().code() << " "
                        << item.status().message() << ", " << item.data().size() << " bytes";
        }
      }
    }
  }
  EXPECT_EQ(bad, 0u) << "of " << objects.size() << " acknowledged objects";
}

class CrashTest : public VaultTest {
 protected:
  void SetUp() override {
    VaultTest::SetUp();
    absl::StatusOr<Vaultd*> d = StartStandaloneVault("a");
    ASSERT_TRUE(d.ok()) << d.status();
    vaultd_ = *d;
    vault_ = vaultd_->vault();
  }

  void ExpectAllPresent(const std::vector<Acked>& objects) {
    ExpectAllPresentAt(vault_.socket, objects);
  }

  // The change feed is 1..N without gaps or duplicates and lists every object in `objects` at
  // the seq it was acknowledged with. Returns N.
  uint64_t CheckFeed(const std::vector<Acked>& objects) {
    std::unique_ptr<vault::v1::Cas::Stub> cas = CasStub(vault_.socket);
    grpc::ClientContext ctx;
    SetDeadline(&ctx, kCallTimeout);
    std::unique_ptr<grpc::ClientReader<vault::v1::FeedResponse>> reader =
        cas->Feed(&ctx, vault::v1::FeedRequest());
    vault::v1::FeedResponse resp;
    uint64_t n = 0;
    std::vector<std::string> digest_at = {""};  // by seq
    absl::flat_hash_set<std::string> digests;
    while (reader->Read(&resp)) {
      for (const vault::v1::FeedEntry& e : resp.entries()) {
        if (e.seq() != n + 1) {
          ADD_FAILURE() << "feed seq " << e.seq() << " follows " << n;
          return n;
        }
        n = e.seq();
        digest_at.push_back(DigestText(e.digest()));
        EXPECT_TRUE(digests.insert(DigestText(e.digest())).second)
            << "object listed twice in the feed: " << DigestText(e.digest());
      }
    }
    grpc::Status s = reader->Finish();
    EXPECT_TRUE(s.ok()) << s.error_message();
    size_t misplaced = 0;
    for (const Acked& o : objects) {
      if (o.seq < digest_at.size() && digest_at[o.seq] == DigestText(o.data)) continue;
      if (++misplaced <= 10) {
        ADD_FAILURE() << "acknowledged object " << DigestText(o.data) << " (seq " << o.seq
                      << ") is not at that seq in the feed";
      }
    }
    EXPECT_EQ(misplaced, 0u) << "of " << objects.size() << " acknowledged objects";
    EXPECT_GE(n, objects.size());
    return n;
  }

  VaultDir vault_;
  Vaultd* vaultd_ = nullptr;
};

TEST_F(CrashTest, AcknowledgedBatchPutsSurviveSigkill) {
  const uint64_t seed = Seed();
  std::mt19937_64 rng(seed);
  std::vector<Acked> acked;  // over every cycle
  for (int cycle = 0; cycle < 5; ++cycle) {
    SCOPED_TRACE(absl::StrCat("cycle ", cycle));
    Writer writer(vault_.socket, seed + 1 + static_cast<uint64_t>(cycle));
    writer.Start();
    // Kill at a random moment after at least 200 acknowledged objects, with writes in flight.
    const size_t kill_after = 200 + rng() % 200;
    if (!writer.WaitForAcked(kill_after, absl::Seconds(60))) {
      writer.Stop();
      writer.Join();
      FAIL() << "only " << writer.acked_count() << " objects acknowledged; " << writer.item_error()
             << writer.call_error();
    }
    absl::SleepFor(absl::Microseconds(rng() % 3000));
    vaultd_->Kill();
    writer.Join();
    EXPECT_EQ(writer.item_error(), "");
    ASSERT_GE(writer.acked().size(), kill_after);
    for (Acked& o : writer.acked()) acked.push_back(std::move(o));

    absl::Status restarted = vaultd_->Start();
    ASSERT_TRUE(restarted.ok()) << restarted;
    ExpectAllPresent(acked);
    const uint64_t n = CheckFeed(acked);
    // The store's totals agree with the feed.
    RunResult status = Vaultctl({"--vault", vault_.socket, "--output", "json", "status"});
    ASSERT_EQ(status.exit_code, kExitOk) << status;
    EXPECT_EQ(JsonField(status.out, "objects"), std::to_string(n)) << status.out;
    EXPECT_EQ(JsonField(status.out, "last_seq"), std::to_string(n)) << status.out;
    if (HasFailure()) return;
  }
}

TEST_F(CrashTest, InterruptedLargeUploadResumesAfterSigkill) {
  std::mt19937_64 rng(Seed());
  const std::string data = RandomBytes(rng, 40 << 20);
  const vault::v1::Digest digest = DigestProto(data);
  constexpr size_t kPiece = 1 << 20;
  constexpr size_t kSentBeforeKill = 24 << 20;

  auto stat = [&](vault::v1::Cas::Stub* cas) {
    vault::v1::StatRequest req;
    *req.mutable_digest() = digest;
    vault::v1::StatResponse resp;
    grpc::ClientContext ctx;
    SetDeadline(&ctx, kCallTimeout);
    grpc::Status s = cas->Stat(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp;
  };

  {
    std::unique_ptr<vault::v1::Cas::Stub> cas = CasStub(vault_.socket);
    grpc::ClientContext ctx;
    SetDeadline(&ctx, absl::Seconds(60));
    vault::v1::PutResponse resp;
    std::unique_ptr<grpc::ClientWriter<vault::v1::PutRequest>> writer = cas->Put(&ctx, &resp);
    vault::v1::PutRequest req;
    *req.mutable_digest() = digest;
    for (size_t at = 0; at < kSentBeforeKill; at += kPiece) {
      req.set_data(data.substr(at, kPiece));
      ASSERT_TRUE(writer->Write(req)) << "stream broke at " << at;
      req.Clear();
    }
    // Wait until part of the upload is durable, then crash mid-stream.
    std::unique_ptr<vault::v1::Cas::Stub> probe = CasStub(vault_.socket);
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    while (stat(probe.get()).upload_offset() == 0 && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(10));
    }
    vaultd_->Kill();
    grpc::Status s = writer->Finish();
    EXPECT_FALSE(s.ok());
  }

  absl::Status restarted = vaultd_->Start();
  ASSERT_TRUE(restarted.ok()) << restarted;
  std::unique_ptr<vault::v1::Cas::Stub> cas = CasStub(vault_.socket);
  vault::v1::StatResponse st = stat(cas.get());
  ASSERT_FALSE(st.present());
  const uint64_t offset = st.upload_offset();
  ASSERT_GT(offset, 0u) << "no durable progress survived the crash";
  ASSERT_LE(offset, kSentBeforeKill);

  auto put_from = [&](uint64_t from, vault::v1::PutResponse* resp) {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, absl::Seconds(60));
    std::unique_ptr<grpc::ClientWriter<vault::v1::PutRequest>> writer = cas->Put(&ctx, resp);
    vault::v1::PutRequest req;
    *req.mutable_digest() = digest;
    req.set_offset(from);
    for (size_t at = from; at < data.size(); at += kPiece) {
      req.set_data(data.substr(at, kPiece));
      if (!writer->Write(req)) break;
      req.Clear();
    }
    writer->WritesDone();
    return writer->Finish();
  };

  // Resuming anywhere but the durable offset is refused.
  vault::v1::PutResponse resp;
  grpc::Status s = put_from(offset + 1, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();

  s = put_from(offset, &resp);
  ASSERT_TRUE(s.ok()) << s.error_code() << " " << s.error_message();
  EXPECT_EQ(resp.result().status().code(), 0) << resp.result().status().message();
  EXPECT_EQ(resp.result().seq(), 1u);

  st = stat(cas.get());
  EXPECT_TRUE(st.present());
  EXPECT_EQ(st.layout(), vault::v1::StatResponse::CHUNKED);
  EXPECT_EQ(st.upload_offset(), 0u);

  grpc::ClientContext ctx;
  SetDeadline(&ctx, absl::Seconds(60));
  vault::v1::GetRequest get;
  *get.mutable_digest() = digest;
  std::unique_ptr<grpc::ClientReader<vault::v1::GetResponse>> reader = cas->Get(&ctx, get);
  std::string back;
  back.reserve(data.size());
  vault::v1::GetResponse piece;
  while (reader->Read(&piece)) {
    ASSERT_EQ(piece.offset(), back.size());
    back += piece.data();
  }
  s = reader->Finish();
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(back.size(), data.size());
  EXPECT_TRUE(back == data) << "resumed object differs from what was uploaded";
}

// The disk fills up under a vault taking puts (its data directory is a tmpfs of 160 MiB, and
// objects of 256 KiB-1 MiB go to pack files and RocksDB): once less than the store's reserve
// (64 MiB) is free, puts fail with RESOURCE_EXHAUSTED, nothing acknowledged is lost or damaged,
// reads go on, vaultd stops cleanly (the reserve keeps RocksDB, which aborts when its WAL meets
// a full disk, from ever meeting one), and once there is room again (the tmpfs grown, vaultd
// restarted) puts succeed. Needs root (mount); skipped without it.
class DiskFullTest : public VaultTest {
 protected:
  void TearDown() override {
    if (vaultd_ != nullptr) vaultd_->Stop();
    if (!mounted_.empty()) umount2(mounted_.c_str(), MNT_DETACH);
    VaultTest::TearDown();
  }
  std::string mounted_;
  Vaultd* vaultd_ = nullptr;
};

TEST_F(DiskFullTest, FullDiskRefusesPutsAndLosesNothingAcknowledged) {
  if (geteuid() != 0) GTEST_SKIP() << "mounting a tmpfs for the data directory needs root";
  absl::StatusOr<VaultDir> v = InitVault("a", /*ca_dir=*/"");
  ASSERT_TRUE(v.ok()) << v.status();
  const VaultDir vault = *v;
  std::error_code ec;
  std::filesystem::create_directories(vault.data_dir, ec);
  ASSERT_TRUE(std::filesystem::is_empty(vault.data_dir)) << "init put files in " << vault.data_dir;
  if (mount("tmpfs", vault.data_dir.c_str(), "tmpfs", MS_NOSUID | MS_NODEV,
            "size=160m,mode=0700") != 0) {
    GTEST_SKIP() << "cannot mount a tmpfs on " << vault.data_dir << ": " << std::strerror(errno);
  }
  mounted_ = vault.data_dir;
  absl::StatusOr<Vaultd*> d = StartVaultd(vault, {"--listen", "127.0.0.1:0"});
  ASSERT_TRUE(d.ok()) << d.status();
  vaultd_ = *d;

  std::mt19937_64 rng(Seed());
  std::unique_ptr<vault::v1::Cas::Stub> cas = CasStub(vault.socket);
  std::vector<Acked> acked;
  grpc::Status refused;
  std::uniform_int_distribution<size_t> size(256 << 10, 1 << 20);
  for (int i = 0; i < 400 && refused.ok(); ++i) {
    vault::v1::BatchPutRequest req;
    std::string data = RandomBytes(rng, size(rng));
    auto* item = req.add_items();
    *item->mutable_digest() = DigestProto(data);
    item->set_data(data);
    vault::v1::BatchPutResponse resp;
    grpc::ClientContext ctx;
    SetDeadline(&ctx, kCallTimeout);
    grpc::Status s = cas->BatchPut(&ctx, req, &resp);
    if (s.ok() && resp.results_size() == 1 && resp.results(0).status().code() != 0) {
      s = grpc::Status(static_cast<grpc::StatusCode>(resp.results(0).status().code()),
                       resp.results(0).status().message());
    }
    if (!s.ok()) {
      refused = s;
      break;
    }
    ASSERT_EQ(resp.results_size(), 1);
    acked.push_back(Acked{std::move(data), resp.results(0).seq()});
  }
  ASSERT_FALSE(refused.ok()) << "160 MiB took every put";
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << refused.error_message();
  EXPECT_NE(refused.error_message().find("disk almost full"), std::string::npos)
      << refused.error_message();
  EXPECT_GT(acked.size(), 10u);  // RocksDB preallocates its WAL (~70 MiB) in the 160
  ASSERT_TRUE(vaultd_->Running()) << "vaultd died of a full disk";
  // Reads go on, and every acknowledged object is intact.
  ExpectAllPresentAt(vault.socket, acked);

  // Room again: restart on a larger file system.
  ASSERT_EQ(vaultd_->Stop(), 0);
  ASSERT_EQ(mount("tmpfs", vault.data_dir.c_str(), "tmpfs", MS_REMOUNT | MS_NOSUID | MS_NODEV,
                  "size=400m,mode=0700"),
            0)
      << std::strerror(errno);
  absl::Status restarted = vaultd_->Start();
  ASSERT_TRUE(restarted.ok()) << restarted;
  ExpectAllPresentAt(vault.socket, acked);
  const std::string more = RandomBytes(rng, 1 << 20);
  vault::v1::BatchPutRequest req;
  auto* item = req.add_items();
  *item->mutable_digest() = DigestProto(more);
  item->set_data(more);
  vault::v1::BatchPutResponse resp;
  grpc::ClientContext ctx;
  SetDeadline(&ctx, kCallTimeout);
  grpc::Status s = cas->BatchPut(&ctx, req, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(resp.results_size(), 1);
  EXPECT_EQ(resp.results(0).status().code(), 0) << resp.results(0).status().message();
}

}  // namespace
}  // namespace vault::integration
