// Replication between real vaultds over mutual TLS (docs/replication.md): push of small and large
// objects, chunks the receiver has are not sent again, lying uploads are refused, a receiver
// SIGKILLed again and again during a large push ends up with every object intact, a link that
// flips bytes never gets a corrupt object stored, and a follower refuses a peer that lies.
#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <map>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/grpc_status.h"
#include "google/protobuf/text_format.h"
#include "integration-tests/harness.h"
#include "integration-tests/tcp_proxy.h"
#include "node/vault_node.h"
#include "rocksdb/write_batch.h"
#include "storage/database.h"
#include "vault/v1/config.pb.h"

namespace vault::integration {
namespace {

// How many times the receiver is SIGKILLed during one large push (issue 8 asks for 20).
constexpr int kReceiverKills = 20;

uint64_t Field(const std::string& json, absl::string_view key) {
  uint64_t v = 0;
  std::optional<std::string> f = JsonField(json, key);
  if (!f.has_value() || !absl::SimpleAtoi(*f, &v)) {
    ADD_FAILURE() << "no numeric field " << key << " in " << json;
  }
  return v;
}

class ReplicationTest : public VaultTest {
 protected:
  void SetUp() override {
    VaultTest::SetUp();
    ca_ = CreateCa();
    ASSERT_FALSE(ca_.empty());
    absl::StatusOr<VaultDir> a = InitVault("a", ca_);
    ASSERT_TRUE(a.ok()) << a.status();
    absl::StatusOr<VaultDir> b = InitVault("b", ca_);
    ASSERT_TRUE(b.ok()) << b.status();
    a_ = *a;
    b_ = *b;
    ASSERT_EQ(AddMember(a_, b_), absl::OkStatus());
    ASSERT_EQ(AddMember(b_, a_), absl::OkStatus());
    absl::StatusOr<Vaultd*> da = StartVaultd(a_);
    ASSERT_TRUE(da.ok()) << da.status();
    vaultd_a_ = *da;
    absl::StatusOr<Vaultd*> db = StartVaultd(b_);
    ASSERT_TRUE(db.ok()) << db.status();
    vaultd_b_ = *db;
    rng_.seed(Seed());
  }

  // Stores `data` in `vault` through vaultctl; returns its digest text.
  std::string Put(const VaultDir& vault, const std::string& data) {
    const std::string file = absl::StrCat(root(), "/obj-", files_++);
    EXPECT_EQ(WriteFile(file, data), absl::OkStatus());
    RunResult r = Vaultctl({"--vault", vault.socket, "cas", "put", file});
    EXPECT_EQ(r.exit_code, kExitOk) << r;
    EXPECT_EQ(r.out, absl::StrCat(DigestText(data), "  ", file, "\n"));
    return DigestText(data);
  }

  // The object's bytes as `vault` serves them (verified by vaultctl), or "<missing>".
  std::string Get(const VaultDir& vault, const std::string& digest) {
    const std::string out = absl::StrCat(root(), "/got-", files_++);
    RunResult r = Vaultctl({"--vault", vault.socket, "cas", "get", digest, "--out", out});
    if (r.exit_code != kExitOk) return absl::StrCat("<missing: ", r.exit_code, ">");
    return ReadFile(out).value_or("<unreadable>");
  }

  RunResult Replicate(std::vector<std::string> selection) {
    std::vector<std::string> args = {"--vault", a_.socket,   "-o",   "json",
                                     "cas",     "replicate", "--to", "b"};
    args.insert(args.end(), selection.begin(), selection.end());
    return Vaultctl(args, absl::Seconds(240));
  }

  // Audit entries of `vault` whose action is `action`, as JSON lines.
  std::vector<std::string> AuditEntries(const VaultDir& vault, absl::string_view action) {
    RunResult tail =
        Vaultctl({"--vault", vault.socket, "-o", "json", "audit", "tail", "-n", "1000"});
    EXPECT_EQ(tail.exit_code, kExitOk) << tail;
    std::vector<std::string> out;
    for (absl::string_view line : absl::StrSplit(tail.out, '\n', absl::SkipEmpty())) {
      if (JsonField(line, "action") == action) out.emplace_back(line);
    }
    return out;
  }

  // Stores every object of `objects` in `vault` with one `cas put DIR`.
  void PutMany(const VaultDir& vault, const std::vector<std::string>& objects) {
    const std::string dir = absl::StrCat(root(), "/many-", files_++);
    ASSERT_EQ(mkdir(dir.c_str(), 0700), 0);
    for (size_t i = 0; i < objects.size(); ++i) {
      ASSERT_EQ(WriteFile(absl::StrCat(dir, "/", i), objects[i]), absl::OkStatus());
    }
    RunResult r = Vaultctl({"--vault", vault.socket, "cas", "put", dir}, absl::Seconds(240));
    ASSERT_EQ(r.exit_code, kExitOk) << r;
  }

  // The digests `vault` stores, from `cas ls`, sorted.
  std::vector<std::string> Listing(const VaultDir& vault) {
    RunResult r = Vaultctl({"--vault", vault.socket, "cas", "ls"});
    EXPECT_EQ(r.exit_code, kExitOk) << r;
    std::vector<std::string> out;
    for (absl::string_view line : absl::StrSplit(r.out, '\n', absl::SkipEmpty())) {
      std::vector<std::string> cols = absl::StrSplit(line, "  ");
      EXPECT_EQ(cols.size(), 3u) << line;
      if (cols.size() == 3) out.push_back(cols[1]);
    }
    std::sort(out.begin(), out.end());
    return out;
  }

  // The strings of a JSON array field of a flat summary ("key":["a","b"]).
  static std::vector<std::string> JsonStrings(const std::string& json, const std::string& key) {
    std::vector<std::string> out;
    size_t at = json.find(absl::StrCat("\"", key, "\":["));
    if (at == std::string::npos) {
      ADD_FAILURE() << "no array " << key << " in " << json;
      return out;
    }
    at += key.size() + 4;
    const size_t end = json.find(']', at);
    for (absl::string_view item :
         absl::StrSplit(absl::string_view(json).substr(at, end - at), ',', absl::SkipEmpty())) {
      out.emplace_back(absl::StripPrefix(absl::StripSuffix(item, "\""), "\""));
    }
    std::sort(out.begin(), out.end());
    return out;
  }

  // A Cas stub to `to` (named `to_name`) over mutual TLS, acting as member `as` (its certificate).
  static std::unique_ptr<vault::v1::Cas::Stub> CasOf(const VaultDir& to, const std::string& to_name,
                                                     const VaultDir& as) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_cert_chain = ReadFile(as.dir + "/tls/vault.crt").value_or("");
    ssl.pem_private_key = ReadFile(as.dir + "/tls/vault.key").value_or("");
    ssl.pem_root_certs = ReadFile(as.dir + "/tls/ca.crt").value_or("");
    grpc::ChannelArguments args;
    args.SetSslTargetNameOverride(to_name);
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    return vault::v1::Cas::NewStub(
        grpc::CreateCustomChannel(to.address, grpc::SslCredentials(ssl), args));
  }
  std::unique_ptr<vault::v1::Cas::Stub> CasOfBAsMemberA() { return CasOf(b_, "b", a_); }

  // `data`'s manifest as the vault behind `stub` stores it.
  static absl::StatusOr<vault::v1::GetManifestResponse> ManifestOf(vault::v1::Cas::Stub* stub,
                                                                   const std::string& data) {
    vault::v1::GetManifestRequest req;
    *req.mutable_digest() = DigestProto(data);
    vault::v1::GetManifestResponse manifest;
    grpc::ClientContext ctx;
    SetDeadline(&ctx, absl::Seconds(10));
    grpc::Status s = stub->GetManifest(&ctx, req, &manifest);
    if (!s.ok()) return common::FromGrpc(s);
    return manifest;
  }
  // The second chunk of chunked `data` on the vault behind `stub`: its hash and bytes.
  static void SecondChunk(vault::v1::Cas::Stub* stub, const std::string& data, std::string* hash,
                          std::string* bytes) {
    absl::StatusOr<vault::v1::GetManifestResponse> manifest = ManifestOf(stub, data);
    ASSERT_TRUE(manifest.ok()) << manifest.status();
    ASSERT_GE(manifest->chunks_size(), 3);
    *hash = manifest->chunks(1).sha256();
    *bytes = data.substr(manifest->chunks(0).size(), manifest->chunks(1).size());
  }

  // Rewrites the address of `member` in `vault`'s vault.conf (read at vaultd's next start).
  void SetMemberAddress(const VaultDir& vault, const std::string& member,
                        const std::string& address) {
    absl::StatusOr<std::string> text = ReadFile(vault.config);
    ASSERT_TRUE(text.ok()) << text.status();
    vault::v1::VaultConfig config;
    ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(*text, &config));
    int changed = 0;
    for (vault::v1::Member& m : *config.mutable_members()) {
      if (m.name() != member) continue;
      m.set_address(address);
      ++changed;
    }
    ASSERT_EQ(changed, 1) << *text;
    std::string out;
    ASSERT_TRUE(google::protobuf::TextFormat::PrintToString(config, &out));
    ASSERT_EQ(WriteFile(vault.config, out), absl::OkStatus());
  }

  // Every object `vault` lists is one of `known` (digest text -> bytes) and reads back as exactly
  // those bytes (vaultctl verifies them against the digest too). Returns the digests listed.
  std::vector<std::string> ExpectOnlyIntactObjects(
      const VaultDir& vault, const std::map<std::string, std::string>& known) {
    std::vector<std::string> listed = Listing(vault);
    for (const std::string& d : listed) {
      auto it = known.find(d);
      if (it == known.end()) {
        ADD_FAILURE() << vault.name << " stores " << d << ", which was never put anywhere";
        continue;
      }
      EXPECT_TRUE(Get(vault, d) == it->second) << vault.name << " serves other bytes for " << d;
    }
    return listed;
  }

  std::string ca_;
  VaultDir a_, b_;
  Vaultd* vaultd_a_ = nullptr;
  Vaultd* vaultd_b_ = nullptr;
  std::mt19937_64 rng_;
  int files_ = 0;
};

TEST_F(ReplicationTest, PushesSmallAndLargeObjects) {
  // Inline objects (BatchPut), one streamed inline object (>= 1 MiB) and two chunked ones.
  std::vector<std::string> data = {RandomBytes(rng_, 4096),    RandomBytes(rng_, 1),
                                   RandomBytes(rng_, 100000),  RandomBytes(rng_, 2 << 20),
                                   RandomBytes(rng_, 6 << 20), RandomBytes(rng_, (9 << 20) + 17)};
  data.push_back("");  // the empty object
  uint64_t total = 0;
  std::vector<std::string> digests;
  for (const std::string& d : data) {
    digests.push_back(Put(a_, d));
    total += d.size();
  }

  RunResult r = Replicate({"--all"});
  ASSERT_EQ(r.exit_code, kExitOk) << r;
  EXPECT_EQ(Field(r.out, "objects"), data.size()) << r.out;
  EXPECT_EQ(Field(r.out, "bytes"), total) << r.out;
  EXPECT_EQ(Field(r.out, "skipped"), 0u) << r.out;
  EXPECT_EQ(Field(r.out, "refused"), 0u) << r.out;
  EXPECT_EQ(Field(r.out, "sent_bytes"), total) << r.out;
  EXPECT_EQ(Field(r.out, "last_seq"), data.size()) << r.out;
  EXPECT_EQ(r.err, "");
  for (size_t i = 0; i < data.size(); ++i) {
    EXPECT_EQ(Get(b_, digests[i]), data[i]) << "object " << i;
  }

  // Again: the peer has everything; nothing is sent.
  r = Replicate({"--all"});
  ASSERT_EQ(r.exit_code, kExitOk) << r;
  EXPECT_EQ(Field(r.out, "objects"), 0u) << r.out;
  EXPECT_EQ(Field(r.out, "skipped"), data.size()) << r.out;
  EXPECT_EQ(Field(r.out, "sent_bytes"), 0u) << r.out;

  // By digest and by cursor: only what is named.
  const std::string extra1 = RandomBytes(rng_, 5000), extra2 = RandomBytes(rng_, 7000);
  const std::string d1 = Put(a_, extra1);
  const std::string d2 = Put(a_, extra2);
  r = Replicate({d1});
  ASSERT_EQ(r.exit_code, kExitOk) << r;
  EXPECT_EQ(Field(r.out, "objects"), 1u) << r.out;
  EXPECT_EQ(Vaultctl({"--vault", b_.socket, "cas", "has", d2}).exit_code, kExitNotFound);
  r = Replicate({"--since", absl::StrCat(data.size())});
  ASSERT_EQ(r.exit_code, kExitOk) << r;
  EXPECT_EQ(Field(r.out, "objects"), 1u) << r.out;
  EXPECT_EQ(Field(r.out, "skipped"), 1u) << r.out;
  EXPECT_EQ(Get(b_, d2), extra2);

  // An object a does not have: NOT_FOUND, nothing sent.
  r = Replicate({DigestText("not stored anywhere")});
  EXPECT_EQ(r.exit_code, kExitNotFound) << r;
  EXPECT_EQ(r.out, "");
  // A peer that is not a member.
  r = Vaultctl({"--vault", a_.socket, "cas", "replicate", "--to", "nobody", "--all"});
  EXPECT_EQ(r.exit_code, kExitNotFound) << r;
  EXPECT_EQ(r.err, "vaultctl: no federation member named \"nobody\" [NOT_FOUND]\n");
  // No selection, or two.
  EXPECT_EQ(Vaultctl({"--vault", a_.socket, "cas", "replicate", "--to", "b"}).exit_code,
            kExitUsage);
  EXPECT_EQ(
      Vaultctl({"--vault", a_.socket, "cas", "replicate", "--to", "b", "--all", d1}).exit_code,
      kExitUsage);

  // a's audit log: every push started and finished; b's: the objects stored, by member a.
  std::vector<std::string> pushes = AuditEntries(a_, "replication.push");
  ASSERT_EQ(pushes.size(), 10u);  // 5 pushes x (started, finished)
  EXPECT_EQ(JsonField(pushes[0], "subject"), "b");
  EXPECT_EQ(JsonField(pushes[0], "decision"), "ALLOWED");
  EXPECT_TRUE(absl::StrContains(pushes[0], "started")) << pushes[0];
  EXPECT_TRUE(absl::StrContains(pushes[1], "finished")) << pushes[1];
  EXPECT_EQ(JsonField(pushes[9], "decision"), "DENIED") << pushes[9];  // the NOT_FOUND one
  EXPECT_EQ(JsonField(pushes[8], "decision"), "ALLOWED") << pushes[8];
  std::vector<std::string> stored = AuditEntries(b_, "cas.put");
  ASSERT_FALSE(stored.empty());
  for (const std::string& e : stored) EXPECT_EQ(JsonField(e, "actor"), a_.public_key) << e;
}

TEST_F(ReplicationTest, ChunksThePeerHasAreNotSentAgain) {
  const std::string base = RandomBytes(rng_, 12 << 20);
  const std::string d_base = Put(a_, base);
  RunResult r = Replicate({d_base});
  ASSERT_EQ(r.exit_code, kExitOk) << r;
  EXPECT_EQ(Field(r.out, "chunks_skipped"), 0u) << r.out;
  EXPECT_EQ(Field(r.out, "sent_bytes"), base.size()) << r.out;

  // The same bytes with 64 KiB more at the end: every chunk but the last ones is shared.
  const std::string grown = base + RandomBytes(rng_, 64 << 10);
  const std::string d_grown = Put(a_, grown);
  r = Replicate({d_grown});
  ASSERT_EQ(r.exit_code, kExitOk) << r;
  EXPECT_EQ(Field(r.out, "objects"), 1u) << r.out;
  const uint64_t skipped = Field(r.out, "chunk_bytes_skipped");
  const uint64_t sent = Field(r.out, "sent_bytes");
  EXPECT_EQ(skipped + sent, grown.size()) << r.out;
  EXPECT_GT(skipped, base.size() - (4 << 20)) << r.out;  // all but the tail's chunk or two
  EXPECT_GE(Field(r.out, "chunks_skipped"), 10u) << r.out;
  EXPECT_EQ(Get(b_, d_grown), grown);
  EXPECT_EQ(Get(b_, d_base), base);
}

TEST_F(ReplicationTest, LyingUploadsAreRefusedAndAudited) {
  auto stub = CasOfBAsMemberA();
  // A Put that names chunks b has, plus bytes, whose content does not hash to the claimed digest.
  const std::string real = RandomBytes(rng_, 8 << 20);
  const std::string d_real = Put(b_, real);
  absl::StatusOr<vault::v1::GetManifestResponse> got = ManifestOf(stub.get(), real);
  ASSERT_TRUE(got.ok()) << got.status();
  const vault::v1::GetManifestResponse& manifest = *got;
  ASSERT_GE(manifest.chunks_size(), 3);
  // Claim: a digest of other content of the same size; send the real chunks by name.
  std::string claimed_content = real;
  claimed_content[claimed_content.size() / 2] ^= 1;
  vault::v1::PutResponse resp;
  grpc::ClientContext ctx;
  SetDeadline(&ctx, absl::Seconds(30));
  auto writer = stub->Put(&ctx, &resp);
  for (int i = 0; i < manifest.chunks_size(); ++i) {
    vault::v1::PutRequest m;
    if (i == 0) *m.mutable_digest() = DigestProto(claimed_content);
    *m.mutable_chunk() = manifest.chunks(i);
    ASSERT_TRUE(writer->Write(m));
  }
  writer->WritesDone();
  grpc::Status s = writer->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_TRUE(absl::StartsWith(
      s.error_message(), absl::StrCat("digest mismatch: claimed ", DigestText(claimed_content),
                                      ", content hashes to ", d_real)))
      << s.error_message();
  EXPECT_EQ(Vaultctl({"--vault", b_.socket, "cas", "has", DigestText(claimed_content)}).exit_code,
            kExitNotFound);

  // A chunk b does not have: FAILED_PRECONDITION, nothing stored.
  {
    grpc::ClientContext ctx2;
    SetDeadline(&ctx2, absl::Seconds(30));
    vault::v1::PutResponse resp2;
    auto w = stub->Put(&ctx2, &resp2);
    vault::v1::PutRequest m;
    const std::string other = RandomBytes(rng_, 5 << 20);
    *m.mutable_digest() = DigestProto(other);
    m.mutable_chunk()->set_sha256(Sha256(other));
    m.mutable_chunk()->set_size(static_cast<uint32_t>(other.size()));
    EXPECT_TRUE(w->Write(m));
    w->WritesDone();
    grpc::Status s2 = w->Finish();
    EXPECT_EQ(s2.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s2.error_message();
    EXPECT_EQ(Vaultctl({"--vault", b_.socket, "cas", "has", DigestText(other)}).exit_code,
              kExitNotFound);
  }

  // b's audit log names member a as the sender of the refused object.
  std::vector<std::string> puts = AuditEntries(b_, "cas.put");
  int denied = 0;
  for (const std::string& e : puts) {
    if (JsonField(e, "decision") != "DENIED") continue;
    ++denied;
    EXPECT_EQ(JsonField(e, "actor"), a_.public_key) << e;
    EXPECT_EQ(JsonField(e, "subject"), DigestText(claimed_content)) << e;
  }
  EXPECT_EQ(denied, 1);
}

TEST_F(ReplicationTest, ReceiverKilledMidStreamCompletesWithEveryObjectIntact) {
  // Large objects, so that a push spans many kills.
  std::vector<std::string> data;
  std::vector<std::string> digests;
  for (int i = 0; i < 8; ++i) {
    data.push_back(RandomBytes(rng_, (24 << 20) + i));
    digests.push_back(Put(a_, data.back()));
  }
  std::unique_ptr<ChildProcess> push;
  int interrupted = 0;
  int pushes = 0;
  std::uniform_int_distribution<int> delay_ms(50, 300);
  for (int kill = 0; kill < kReceiverKills; ++kill) {
    if (push == nullptr || !push->Running()) {
      if (push != nullptr) {
        std::optional<int> code = push->WaitExit(absl::Seconds(1));
        EXPECT_EQ(code, kExitOk) << "push " << pushes;
      }
      absl::StatusOr<std::unique_ptr<ChildProcess>> child =
          ChildProcess::Spawn({VaultctlPath(), "--vault", a_.socket, "-o", "json", "cas",
                               "replicate", "--to", "b", "--all"},
                              absl::StrCat(root(), "/push-", pushes++, ".log"));
      ASSERT_TRUE(child.ok()) << child.status();
      push = *std::move(child);
    }
    absl::SleepFor(absl::Milliseconds(delay_ms(rng_)));
    if (push->Running()) ++interrupted;
    vaultd_b_->Kill();
    absl::Status restarted = vaultd_b_->Start();
    ASSERT_TRUE(restarted.ok()) << restarted;
  }
  // The push in progress carries on once b is back (transient failures are retried).
  ASSERT_NE(push, nullptr);
  std::optional<int> code = push->WaitExit(absl::Seconds(180));
  EXPECT_EQ(code, kExitOk)
      << ReadFile(absl::StrCat(root(), "/push-", pushes - 1, ".log")).value_or("");
  EXPECT_GE(interrupted, kReceiverKills / 2) << "too few kills hit a push in progress";

  RunResult r = Replicate({"--all"});
  ASSERT_EQ(r.exit_code, kExitOk) << r;
  EXPECT_EQ(Field(r.out, "objects"), 0u) << r.out;
  EXPECT_EQ(Field(r.out, "skipped"), data.size()) << r.out;
  for (size_t i = 0; i < data.size(); ++i) {
    EXPECT_EQ(Get(b_, digests[i]) == data[i], true) << "object " << i;
  }
  std::cout << "receiver kills: " << kReceiverKills << ", during a push: " << interrupted
            << ", pushes started: " << pushes << "\n";
}

// b follows a (config `follow`): it copies the selected objects of a's feed, keeps its cursor
// across restarts of either side, and passes over what the selection leaves out.
TEST_F(ReplicationTest, FollowerCopiesThePeersFeedAcrossRestarts) {
  std::vector<std::string> data = {RandomBytes(rng_, 4096), RandomBytes(rng_, 300000),
                                   RandomBytes(rng_, 2 << 20), RandomBytes(rng_, 6 << 20)};
  std::vector<std::string> digests;
  for (const std::string& d : data) digests.push_back(Put(a_, d));
  const std::string too_big = RandomBytes(rng_, (7 << 20) + 1);  // past the selection
  const std::string d_too_big = Put(a_, too_big);

  ASSERT_EQ(vaultd_b_->Stop(), 0);
  {
    std::ofstream conf(b_.config, std::ios::app);
    conf << "follow {\n  peer: \"a\"\n  selection { max_bytes: 7340032 }\n"
            "  interval_ms: 200\n}\n";
  }
  ASSERT_EQ(vaultd_b_->Start(), absl::OkStatus());

  auto wait_for = [&](const std::vector<std::string>& want) {
    std::vector<std::string> args = {"--vault", b_.socket, "cas", "has"};
    args.insert(args.end(), want.begin(), want.end());
    for (int i = 0; i < 300; ++i) {
      if (Vaultctl(args).exit_code == kExitOk) return true;
      absl::SleepFor(absl::Milliseconds(100));
    }
    return false;
  };
  ASSERT_TRUE(wait_for(digests));
  for (size_t i = 0; i < data.size(); ++i) EXPECT_EQ(Get(b_, digests[i]), data[i]);
  EXPECT_EQ(Vaultctl({"--vault", b_.socket, "cas", "has", d_too_big}).exit_code, kExitNotFound);

  // b stops; a gets more; b comes back and resumes from its cursor.
  ASSERT_EQ(vaultd_b_->Stop(), 0);
  const std::string more1 = RandomBytes(rng_, 5 << 20), more2 = RandomBytes(rng_, 1000);
  digests.push_back(Put(a_, more1));
  digests.push_back(Put(a_, more2));
  data.push_back(more1);
  data.push_back(more2);
  ASSERT_EQ(vaultd_b_->Start(), absl::OkStatus());
  ASSERT_TRUE(wait_for(digests));

  // a is killed and restarted; b follows on.
  vaultd_a_->Kill();
  absl::SleepFor(absl::Milliseconds(500));  // b's rounds meet a closed port meanwhile
  ASSERT_EQ(vaultd_a_->Start(), absl::OkStatus());
  const std::string more3 = RandomBytes(rng_, (6 << 20) + 12345);  // within the selection
  digests.push_back(Put(a_, more3));
  data.push_back(more3);
  ASSERT_TRUE(wait_for(digests));
  for (size_t i = 0; i < data.size(); ++i) EXPECT_EQ(Get(b_, digests[i]) == data[i], true) << i;
  EXPECT_EQ(Vaultctl({"--vault", b_.socket, "cas", "has", d_too_big}).exit_code, kExitNotFound);

  // Each object was stored once, and b holds nothing else.
  uint64_t stored = 0;
  for (const std::string& e : AuditEntries(b_, "replication.follow")) {
    if (absl::StrContains(e, "\"stage\":\"stored\"")) {
      std::optional<std::string> n = JsonField(e, "objects");
      uint64_t v = 0;
      ASSERT_TRUE(n.has_value() && absl::SimpleAtoi(*n, &v)) << e;
      stored += v;
    }
  }
  EXPECT_EQ(stored, data.size());
  RunResult st = Vaultctl({"--vault", b_.socket, "-o", "json", "status"});
  EXPECT_EQ(JsonField(st.out, "objects"), absl::StrCat(data.size())) << st.out;
}

// Deletion is local to a vault (design §12): a follower skips what its peer removed after its
// feed listed it, and follows on past it.
TEST_F(ReplicationTest, FollowerSkipsWhatThePeerRemoved) {
  const std::string small = RandomBytes(rng_, 5000), large = RandomBytes(rng_, 6 << 20);
  const std::string kept = RandomBytes(rng_, 7000);
  const std::string d_small = Put(a_, small), d_large = Put(a_, large), d_kept = Put(a_, kept);
  RunResult rm = Vaultctl({"--vault", a_.socket, "cas", "rm", d_small, d_large});
  ASSERT_EQ(rm.exit_code, kExitOk) << rm;
  EXPECT_EQ(rm.out, absl::StrCat("removed  ", d_small, "\nremoved  ", d_large, "\n"));
  ASSERT_EQ(vaultd_b_->Stop(), 0);
  {
    std::ofstream conf(b_.config, std::ios::app);
    conf << "follow {\n  peer: \"a\"\n  interval_ms: 200\n}\n";
  }
  ASSERT_EQ(vaultd_b_->Start(), absl::OkStatus());
  const std::string later = RandomBytes(rng_, 3000);
  const std::string d_later = Put(a_, later);
  bool copied = false;
  for (int i = 0; i < 300 && !copied; ++i) {
    copied = Vaultctl({"--vault", b_.socket, "cas", "has", d_kept, d_later}).exit_code == kExitOk;
    if (!copied) absl::SleepFor(absl::Milliseconds(100));
  }
  ASSERT_TRUE(copied);
  EXPECT_EQ(Get(b_, d_later), later);
  EXPECT_EQ(Vaultctl({"--vault", b_.socket, "cas", "has", d_small}).exit_code, kExitNotFound);
  EXPECT_EQ(Vaultctl({"--vault", b_.socket, "cas", "has", d_large}).exit_code, kExitNotFound);
  // Its cursor passed them, up to the feed's last entry (4); without the skip it would stay
  // before the first removed one.
  uint64_t cursor = 0;
  for (int i = 0; i < 100 && cursor < 4; ++i) {
    for (const std::string& e : AuditEntries(b_, "replication.follow")) {
      std::optional<std::string> c = JsonField(e, "peer_cursor");
      uint64_t v = 0;
      if (c.has_value() && absl::SimpleAtoi(*c, &v)) cursor = std::max(cursor, v);
    }
    if (cursor < 4) absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_EQ(cursor, 4u);
}

TEST_F(ReplicationTest, ReconcileMakesOverlappingVaultsEqual) {
  // Many shared objects, some only on a and some only on b (a large one on each side too).
  std::vector<std::string> shared, only_a, only_b;
  for (int i = 0; i < 3000; ++i) shared.push_back(RandomBytes(rng_, 1 + rng_() % 2000));
  for (int i = 0; i < 30; ++i) only_a.push_back(RandomBytes(rng_, 1 + rng_() % 5000));
  for (int i = 0; i < 20; ++i) only_b.push_back(RandomBytes(rng_, 1 + rng_() % 5000));
  only_a.push_back(RandomBytes(rng_, 6 << 20));
  only_b.push_back(RandomBytes(rng_, (5 << 20) + 3));
  PutMany(a_, shared);
  PutMany(b_, shared);
  PutMany(a_, only_a);
  PutMany(b_, only_b);
  auto digests = [](const std::vector<std::string>& objects) {
    std::vector<std::string> out;
    for (const std::string& o : objects) out.push_back(DigestText(o));
    std::sort(out.begin(), out.end());
    return out;
  };
  std::vector<std::string> want = digests(shared);
  for (const std::vector<std::string>* side : {&only_a, &only_b}) {
    for (const std::string& o : *side) want.push_back(DigestText(o));
  }
  std::sort(want.begin(), want.end());

  // A dry run names exactly what differs and copies nothing.
  RunResult r = Vaultctl({"--vault", a_.socket, "-o", "json", "cas", "reconcile", "b", "--dry-run"},
                         absl::Seconds(120));
  ASSERT_EQ(r.exit_code, kExitOk) << r;
  EXPECT_EQ(JsonStrings(r.out, "missing_here_digests"), digests(only_b)) << r.out;
  EXPECT_EQ(JsonStrings(r.out, "missing_there_digests"), digests(only_a)) << r.out;
  EXPECT_EQ(Field(r.out, "missing_here"), only_b.size());
  EXPECT_EQ(Field(r.out, "missing_there"), only_a.size());
  EXPECT_EQ(Field(r.out, "copied"), 0u);
  EXPECT_EQ(Listing(a_).size(), shared.size() + only_a.size());

  // The text form lists them too.
  r = Vaultctl({"--vault", a_.socket, "cas", "reconcile", "b", "--dry-run"}, absl::Seconds(120));
  ASSERT_EQ(r.exit_code, kExitOk) << r;
  EXPECT_TRUE(absl::StrContains(r.out, absl::StrCat("  ", DigestText(only_b[0]), "\n"))) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "dry run: nothing copied")) << r.out;

  r = Vaultctl({"--vault", a_.socket, "-o", "json", "cas", "reconcile", "b"}, absl::Seconds(240));
  ASSERT_EQ(r.exit_code, kExitOk) << r;
  EXPECT_EQ(Field(r.out, "pushed"), only_a.size()) << r.out;
  EXPECT_EQ(Field(r.out, "pulled"), only_b.size()) << r.out;
  EXPECT_EQ(Field(r.out, "copied"), only_a.size() + only_b.size()) << r.out;
  EXPECT_EQ(Field(r.out, "refused"), 0u) << r.out;
  // 52 differences among 3,052 (dense): a few calls, and less than a listing of everything.
  EXPECT_LE(Field(r.out, "round_trips"), 6u) << r.out;
  EXPECT_LT(Field(r.out, "compare_wire_bytes"), 3052u * 41) << r.out;

  EXPECT_EQ(Listing(a_), want);
  EXPECT_EQ(Listing(b_), want);
  EXPECT_EQ(Get(a_, DigestText(only_b.back())), only_b.back());
  EXPECT_EQ(Get(b_, DigestText(only_a.front())), only_a.front());

  // Again, from b: nothing differs, and one call of a few hundred bytes says so.
  r = Vaultctl({"--vault", b_.socket, "-o", "json", "cas", "reconcile", "a"}, absl::Seconds(120));
  ASSERT_EQ(r.exit_code, kExitOk) << r;
  EXPECT_EQ(Field(r.out, "missing_here"), 0u) << r.out;
  EXPECT_EQ(Field(r.out, "missing_there"), 0u) << r.out;
  EXPECT_EQ(Field(r.out, "round_trips"), 1u) << r.out;
  EXPECT_EQ(Field(r.out, "ranges_compared"), 1u) << r.out;
  EXPECT_LT(Field(r.out, "compare_wire_bytes"), 200u) << r.out;

  // Audited on the reconciling vault: started and finished, with what differed.
  std::vector<std::string> entries = AuditEntries(a_, "replication.reconcile");
  ASSERT_EQ(entries.size(), 6u);  // three runs (two dry)
  EXPECT_EQ(JsonField(entries[4], "stage"), "started");
  EXPECT_EQ(JsonField(entries[5], "stage"), "finished");
  EXPECT_EQ(JsonField(entries[5], "missing_here"), absl::StrCat(only_b.size())) << entries[5];
  EXPECT_EQ(JsonField(entries[5], "missing_there"), absl::StrCat(only_a.size())) << entries[5];
  EXPECT_EQ(JsonField(entries[5], "decision"), "ALLOWED") << entries[5];

  // Usage errors.
  EXPECT_EQ(Vaultctl({"--vault", a_.socket, "cas", "reconcile", "b", "--push", "--pull"}).exit_code,
            kExitUsage);
  EXPECT_EQ(Vaultctl({"--vault", a_.socket, "cas", "reconcile", "nobody"}).exit_code,
            kExitNotFound);
}

// a pushes to b through a proxy that flips one byte in every MiB a sends. Mutual TLS turns each
// flipped byte into a record that fails its MAC check: b drops the connection before the altered
// bytes reach its store, so no object arrives corrupt and none is even refused (none gets that
// far); the push sees cut calls and retries them. Once the link heals, the push completes with
// every object intact.
TEST_F(ReplicationTest, PushOverALinkThatFlipsBytesStoresNothingCorrupt) {
  constexpr uint64_t kFlipEvery = 1 << 20;
  constexpr uint64_t kFlips = 12;              // flips the push meets before the link heals
  std::map<std::string, std::string> objects;  // digest text -> bytes
  // Small objects: one BatchPut of more than 2 MiB, so it always spans a flip while the link
  // corrupts (any 2 MiB of the stream hold a whole run of 1 MiB, and so a flipped byte).
  std::vector<std::string> small;
  uint64_t small_bytes = 0;
  while (small_bytes < (5u << 19)) {
    small.push_back(RandomBytes(rng_, (16 << 10) + rng_() % (32 << 10)));
    small_bytes += small.back().size();
  }
  ASSERT_LT(small_bytes, 3u << 20);  // one batch
  PutMany(a_, small);
  for (const std::string& o : small) objects[DigestText(o)] = o;
  for (size_t size : {size_t{3} << 20, (size_t{6} << 20) + 5, size_t{10} << 20}) {
    std::string o = RandomBytes(rng_, size);
    const std::string d = Put(a_, o);
    objects[d] = std::move(o);
  }

  absl::StatusOr<std::unique_ptr<TcpProxy>> proxy = TcpProxy::Start(b_.address);
  ASSERT_TRUE(proxy.ok()) << proxy.status();
  TcpProxy& link = **proxy;
  ASSERT_EQ(vaultd_a_->Stop(), 0);
  ASSERT_NO_FATAL_FAILURE(SetMemberAddress(a_, "b", link.address()));
  ASSERT_EQ(vaultd_a_->Start(), absl::OkStatus());
  link.Corrupt(TcpProxy::kUp, kFlipEvery, rng_());

  const std::string log = root() + "/push.log";
  absl::StatusOr<std::unique_ptr<ChildProcess>> push =
      ChildProcess::Spawn({VaultctlPath(), "--vault", a_.socket, "-o", "json", "cas", "replicate",
                           "--to", "b", "--all"},
                          log);
  ASSERT_TRUE(push.ok()) << push.status();
  for (int i = 0; i < 300 && link.flipped(TcpProxy::kUp) < kFlips; ++i) {
    absl::SleepFor(absl::Milliseconds(100));
  }
  ASSERT_GE(link.flipped(TcpProxy::kUp), kFlips) << ReadFile(log).value_or("");
  // While the link corrupts: whatever b stores is intact, and the push cannot be done (the
  // small objects' batch never gets through whole).
  ASSERT_NO_FATAL_FAILURE(ExpectOnlyIntactObjects(b_, objects));
  EXPECT_TRUE((*push)->Running()) << ReadFile(log).value_or("");
  EXPECT_EQ(Vaultctl({"--vault", b_.socket, "cas", "has", DigestText(small[0])}).exit_code,
            kExitNotFound);
  // A flipped byte costs the connection (a few flips may land in one that is already doomed).
  EXPECT_GE(link.accepted(), 2u);

  link.Heal();
  const uint64_t flipped = link.flipped(TcpProxy::kUp);
  std::optional<int> code = (*push)->WaitExit(absl::Seconds(180));
  const std::string out = ReadFile(log).value_or("");
  ASSERT_EQ(code, kExitOk) << out;
  EXPECT_GT(Field(out, "retries"), 0u) << out;
  EXPECT_EQ(Field(out, "refused"), 0u) << out;
  EXPECT_EQ(Field(out, "objects") + Field(out, "skipped"), objects.size()) << out;
  EXPECT_EQ(link.flipped(TcpProxy::kUp), flipped);

  std::vector<std::string> listed = ExpectOnlyIntactObjects(b_, objects);
  EXPECT_EQ(listed.size(), objects.size());
  // b's store was never handed altered bytes: every cas.put it audited was allowed.
  std::vector<std::string> puts = AuditEntries(b_, "cas.put");
  EXPECT_FALSE(puts.empty());
  for (const std::string& e : puts) EXPECT_EQ(JsonField(e, "decision"), "ALLOWED") << e;
  std::cout << "flipped " << flipped << " bytes; connections " << link.accepted() << "; " << out;
}

// A member that lies: a gRPC server with a member's certificate (a's), standing in for a, whose
// feed names objects and which serves, for some of them, bytes that do not hash to the digest.
class LyingCas final : public vault::v1::Cas::Service {
 public:
  struct Object {
    std::string truth;
    std::optional<std::string> lie;  // served instead of the truth while lying
  };
  explicit LyingCas(std::vector<Object> feed) : feed_(std::move(feed)) {}

  void set_lying(bool lying) { lying_.store(lying); }
  // The after_seq of every Feed call so far.
  std::vector<uint64_t> feed_calls() const {
    absl::MutexLock lock(&mu_);
    return feed_calls_;
  }

  grpc::Status Feed(grpc::ServerContext*, const vault::v1::FeedRequest* req,
                    grpc::ServerWriter<vault::v1::FeedResponse>* writer) override {
    {
      absl::MutexLock lock(&mu_);
      feed_calls_.push_back(req->after_seq());
    }
    vault::v1::FeedResponse page;
    page.set_last_seq(feed_.size());
    for (uint64_t seq = req->after_seq() + 1; seq <= feed_.size(); ++seq) {
      if (req->limit() != 0 && page.entries_size() >= static_cast<int>(req->limit())) break;
      vault::v1::FeedEntry* e = page.add_entries();
      e->set_seq(seq);
      *e->mutable_digest() = DigestProto(feed_[seq - 1].truth);
    }
    writer->Write(page);
    return grpc::Status::OK;
  }

  grpc::Status BatchGet(grpc::ServerContext*, const vault::v1::BatchGetRequest* req,
                        vault::v1::BatchGetResponse* resp) override {
    for (const vault::v1::Digest& d : req->digests()) {
      vault::v1::BatchGetResponse::Item* item = resp->add_items();
      *item->mutable_digest() = d;
      const std::string* data = Find(d);
      if (data == nullptr) {
        item->mutable_status()->set_code(grpc::StatusCode::NOT_FOUND);
        continue;
      }
      item->set_data(*data);
    }
    return grpc::Status::OK;
  }

  grpc::Status Get(grpc::ServerContext*, const vault::v1::GetRequest* req,
                   grpc::ServerWriter<vault::v1::GetResponse>* writer) override {
    const std::string* data = Find(req->digest());
    if (data == nullptr) return grpc::Status(grpc::StatusCode::NOT_FOUND, "not stored");
    const uint64_t end = req->limit() == 0
                             ? data->size()
                             : std::min<uint64_t>(data->size(), req->offset() + req->limit());
    for (uint64_t at = req->offset(); at < end; at += 256 << 10) {
      vault::v1::GetResponse piece;
      piece.set_offset(at);
      piece.set_data(data->substr(at, std::min<uint64_t>(256 << 10, end - at)));
      if (!writer->Write(piece)) break;
    }
    return grpc::Status::OK;
  }

 private:
  // What is served for `d` now (nullptr: not in the feed).
  const std::string* Find(const vault::v1::Digest& d) const {
    for (const Object& o : feed_) {
      if (DigestText(o.truth) != DigestText(d)) continue;
      return lying_.load() && o.lie.has_value() ? &*o.lie : &o.truth;
    }
    return nullptr;
  }

  const std::vector<Object> feed_;
  std::atomic<bool> lying_{true};
  mutable absl::Mutex mu_;
  std::vector<uint64_t> feed_calls_ ABSL_GUARDED_BY(mu_);
};

// b follows "a", which lies: for three objects of its feed it serves bytes that are not the
// object's (one flipped byte of a small object; another object's bytes; one flipped byte of a
// large, streamed one). b refuses each (audited once, naming the peer), stores only the honest
// objects, and its cursor stays before the first refused entry, so it asks again every round;
// when the peer serves the right bytes, b stores them and its cursor passes the whole feed.
TEST_F(ReplicationTest, FollowerRefusesAPeerThatLies) {
  const std::string h1 = RandomBytes(rng_, 4096), l1 = RandomBytes(rng_, 4096);
  const std::string h2 = RandomBytes(rng_, 3000), l2 = RandomBytes(rng_, 5000);
  const std::string l3 = RandomBytes(rng_, 3 << 20), h3 = RandomBytes(rng_, 2000);
  std::string l1_lie = l1, l3_lie = l3;
  l1_lie[100] ^= 0x04;
  l3_lie[l3.size() / 2 + 7] ^= 0x80;
  const std::string l2_lie = RandomBytes(rng_, 777);  // another object's bytes
  LyingCas liar({{h1, std::nullopt},
                 {l1, l1_lie},
                 {h2, std::nullopt},
                 {l2, l2_lie},
                 {l3, l3_lie},
                 {h3, std::nullopt}});
  grpc::SslServerCredentialsOptions tls(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  tls.pem_root_certs = ReadFile(a_.dir + "/tls/ca.crt").value_or("");
  tls.pem_key_cert_pairs.push_back({ReadFile(a_.dir + "/tls/vault.key").value_or(""),
                                    ReadFile(a_.dir + "/tls/vault.crt").value_or("")});
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::SslServerCredentials(tls), &port);
  builder.RegisterService(&liar);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  ASSERT_GT(port, 0);

  // The liar takes a's place in b's config; b follows it.
  ASSERT_EQ(vaultd_a_->Stop(), 0);
  ASSERT_EQ(vaultd_b_->Stop(), 0);
  ASSERT_NO_FATAL_FAILURE(SetMemberAddress(b_, "a", absl::StrCat("127.0.0.1:", port)));
  {
    std::ofstream conf(b_.config, std::ios::app);
    conf << "follow {\n  peer: \"a\"\n  interval_ms: 200\n}\n";
  }
  ASSERT_EQ(vaultd_b_->Start(), absl::OkStatus());

  std::map<std::string, std::string> truth;
  for (const std::string* o : {&h1, &l1, &h2, &l2, &l3, &h3}) truth[DigestText(*o)] = *o;
  auto rounds_after = [&](uint64_t seq) {
    std::vector<uint64_t> calls = liar.feed_calls();
    return std::count(calls.begin(), calls.end(), seq);
  };
  auto has = [&](const std::vector<std::string>& objects) {
    std::vector<std::string> args = {"--vault", b_.socket, "cas", "has"};
    for (const std::string& o : objects) args.push_back(DigestText(o));
    return Vaultctl(args).exit_code == kExitOk;
  };
  for (int i = 0; i < 300 && !(has({h1, h2, h3}) && rounds_after(1) >= 3); ++i) {
    absl::SleepFor(absl::Milliseconds(100));
  }
  ASSERT_TRUE(has({h1, h2, h3}));
  ASSERT_GE(rounds_after(1), 3);

  // Only the honest objects are stored, intact; none of the lies is, under any digest.
  std::vector<std::string> honest = {DigestText(h1), DigestText(h2), DigestText(h3)};
  std::sort(honest.begin(), honest.end());
  EXPECT_EQ(ExpectOnlyIntactObjects(b_, truth), honest);
  for (const std::string* o : {&l1, &l2, &l3}) {
    EXPECT_EQ(Vaultctl({"--vault", b_.socket, "cas", "has", DigestText(*o)}).exit_code,
              kExitNotFound);
  }
  // The cursor passed h1 (seq 1) and stays before l1 (seq 2), though h2 and h3 are stored: every
  // round after the first reads the feed after 1.
  std::vector<uint64_t> calls = liar.feed_calls();
  ASSERT_FALSE(calls.empty());
  EXPECT_EQ(calls[0], 0u);
  for (size_t i = 1; i < calls.size(); ++i) EXPECT_EQ(calls[i], 1u) << "Feed call " << i;

  // Audited: each lie refused once (not once per round), naming the peer.
  auto refusals = [&] {
    std::map<std::string, std::string> out;  // subject -> entry
    for (const std::string& e : AuditEntries(b_, "replication.follow")) {
      if (JsonField(e, "stage") != "refused") continue;
      EXPECT_EQ(out.count(JsonField(e, "subject").value_or("")), 0u) << "audited twice: " << e;
      out[JsonField(e, "subject").value_or("")] = e;
    }
    return out;
  };
  std::map<std::string, std::string> refused = refusals();
  ASSERT_EQ(refused.size(), 3u);
  for (const std::string* o : {&l1, &l2, &l3}) {
    const std::string& e = refused[DigestText(*o)];
    EXPECT_EQ(JsonField(e, "decision"), "DENIED") << e;
    EXPECT_EQ(JsonField(e, "peer"), "a") << e;
    EXPECT_EQ(JsonField(e, "code"), "INVALID_ARGUMENT") << e;
    EXPECT_EQ(JsonField(e, "actor"), b_.public_key) << e;
  }
  EXPECT_TRUE(absl::StrContains(refused[DigestText(l1)],
                                absl::StrCat("digest mismatch: claimed ", DigestText(l1),
                                             ", content hashes to ", DigestText(l1_lie))))
      << refused[DigestText(l1)];
  EXPECT_TRUE(absl::StrContains(refused[DigestText(l3)],
                                absl::StrCat("digest mismatch: claimed ", DigestText(l3),
                                             ", content hashes to ", DigestText(l3_lie))))
      << refused[DigestText(l3)];

  // The peer serves the right bytes: b stores them, and its cursor passes the whole feed.
  liar.set_lying(false);
  for (int i = 0; i < 300 && !(has({l1, l2, l3}) && rounds_after(6) >= 1); ++i) {
    absl::SleepFor(absl::Milliseconds(100));
  }
  ASSERT_TRUE(has({l1, l2, l3}));
  ASSERT_GE(rounds_after(6), 1);
  EXPECT_EQ(ExpectOnlyIntactObjects(b_, truth).size(), truth.size());
  EXPECT_EQ(refusals().size(), 3u);
  uint64_t stored = 0;
  for (const std::string& e : AuditEntries(b_, "replication.follow")) {
    if (JsonField(e, "stage") == "stored") stored += Field(e, "objects");
  }
  EXPECT_EQ(stored, truth.size());

  // The cursor was persisted: after a restart b reads the feed after 6.
  ASSERT_EQ(vaultd_b_->Stop(), 0);
  const size_t before = liar.feed_calls().size();
  ASSERT_EQ(vaultd_b_->Start(), absl::OkStatus());
  for (int i = 0; i < 100 && liar.feed_calls().size() <= before; ++i) {
    absl::SleepFor(absl::Milliseconds(100));
  }
  calls = liar.feed_calls();
  ASSERT_GT(calls.size(), before);
  EXPECT_EQ(calls[before], 6u);
  server->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
}

// `cas reconcile --min-bytes/--max-bytes`: only the differing objects within the sizes (bounds
// inclusive) are listed and copied, both ways.
TEST_F(ReplicationTest, ReconcileWithASizeSelectionCopiesOnlyThoseSizes) {
  std::vector<std::string> only_a, only_b;
  for (size_t size : {999, 1000, 3000, 5000, 5001, 20000}) {
    only_a.push_back(RandomBytes(rng_, size));
    only_b.push_back(RandomBytes(rng_, size));
  }
  const std::vector<std::string> shared = {RandomBytes(rng_, 100), RandomBytes(rng_, 4000)};
  PutMany(a_, shared);
  PutMany(b_, shared);
  PutMany(a_, only_a);
  PutMany(b_, only_b);
  auto digests = [](const std::vector<std::string>& objects, bool selected_only) {
    std::vector<std::string> out;
    for (const std::string& o : objects) {
      if (!selected_only || (o.size() >= 1000 && o.size() <= 5000)) out.push_back(DigestText(o));
    }
    std::sort(out.begin(), out.end());
    return out;
  };

  RunResult r = Vaultctl({"--vault", a_.socket, "-o", "json", "cas", "reconcile", "b",
                          "--min-bytes", "1000", "--max-bytes", "5000"},
                         absl::Seconds(120));
  ASSERT_EQ(r.exit_code, kExitOk) << r;
  EXPECT_EQ(JsonStrings(r.out, "missing_here_digests"), digests(only_b, true)) << r.out;
  EXPECT_EQ(JsonStrings(r.out, "missing_there_digests"), digests(only_a, true)) << r.out;
  EXPECT_EQ(Field(r.out, "pushed"), 3u) << r.out;
  EXPECT_EQ(Field(r.out, "pulled"), 3u) << r.out;
  EXPECT_EQ(Field(r.out, "missing_here_bytes"), 1000u + 3000 + 5000) << r.out;

  std::vector<std::string> want_a = digests(shared, false), want_b = digests(shared, false);
  for (const std::string& d : digests(only_a, false)) want_a.push_back(d);
  for (const std::string& d : digests(only_b, true)) want_a.push_back(d);
  for (const std::string& d : digests(only_b, false)) want_b.push_back(d);
  for (const std::string& d : digests(only_a, true)) want_b.push_back(d);
  std::sort(want_a.begin(), want_a.end());
  std::sort(want_b.begin(), want_b.end());
  EXPECT_EQ(Listing(a_), want_a);
  EXPECT_EQ(Listing(b_), want_b);
  EXPECT_EQ(Get(a_, DigestText(only_b[3])), only_b[3]);  // 5000 bytes: the upper bound

  // The rest, without a selection: what is left differs, outside 1000..5000 only.
  r = Vaultctl({"--vault", a_.socket, "-o", "json", "cas", "reconcile", "b", "--dry-run"},
               absl::Seconds(120));
  ASSERT_EQ(r.exit_code, kExitOk) << r;
  EXPECT_EQ(Field(r.out, "missing_here"), 3u) << r.out;
  EXPECT_EQ(Field(r.out, "missing_there"), 3u) << r.out;

  // An empty range is a usage error; nothing is asked of the vault.
  r = Vaultctl(
      {"--vault", a_.socket, "cas", "reconcile", "b", "--min-bytes", "10", "--max-bytes", "9"});
  EXPECT_EQ(r.exit_code, kExitUsage) << r;
  EXPECT_EQ(r.err, "vaultctl: --min-bytes is above --max-bytes [INVALID_ARGUMENT]\n");
}

// The key of a stored object's record and bytes in the CAS column families: sha256 || size
// (big-endian).
std::string DataKey(absl::string_view data) {
  std::string key = DigestProto(data).sha256() + std::string(8, '\0');
  for (int i = 0; i < 8; ++i) key[32 + i] = static_cast<char>(data.size() >> (8 * (7 - i)));
  return key;
}

// Overwrites stored bytes of a stopped vault's database (the way a failing disk would): the
// value of `key` in column family `cf`, with `bytes`.
absl::Status Corrupt(const VaultDir& vault, const std::string& cf, const std::string& key,
                     const std::string& bytes) {
  absl::StatusOr<std::unique_ptr<storage::Database>> db = storage::Database::Open(
      {.path = vault.data_dir + "/db", .block_cache_mb = 8}, node::VaultNode::ColumnFamilies());
  if (!db.ok()) return db.status();
  rocksdb::WriteBatch batch;
  batch.Put((*db)->Handle(cf), key, bytes);
  return (*db)->Write(&batch);
}

// The sender passes objects on without hashing them (the receiver hashes every byte). A chunk of
// a large object and a small object (sent in a batch) damaged on the sender's disk therefore
// reach the receiver, which refuses them; the sender then checks its own copy and reports the
// damage as its own (DATA_LOSS), not as the receiver's refusal. Nothing corrupt is stored, and
// the other objects go through.
TEST_F(ReplicationTest, DamageOnTheSenderIsReportedAsItsOwnAndNothingCorruptIsStored) {
  const std::string large = RandomBytes(rng_, 6 << 20), small = RandomBytes(rng_, 3000);
  const std::string damaged_small = RandomBytes(rng_, 3001);
  const std::string d_large = Put(a_, large), d_small = Put(a_, small);
  const std::string d_damaged_small = Put(a_, damaged_small);
  std::string chunk_hash, chunk_bytes;  // the large object's second chunk
  ASSERT_NO_FATAL_FAILURE(SecondChunk(CasOf(a_, "a", b_).get(), large, &chunk_hash, &chunk_bytes));
  ASSERT_EQ(vaultd_a_->Stop(), 0);
  chunk_bytes[chunk_bytes.size() / 3] ^= 0x04;
  ASSERT_EQ(Corrupt(a_, "cas_chunks", chunk_hash, chunk_bytes), absl::OkStatus());
  std::string bad_small = damaged_small;
  bad_small[100] ^= 0x10;
  ASSERT_EQ(Corrupt(a_, "cas_data", DataKey(damaged_small), bad_small), absl::OkStatus());
  ASSERT_EQ(vaultd_a_->Start(), absl::OkStatus());

  RunResult r = Replicate({"--all"});
  EXPECT_EQ(r.exit_code, kExitRefused) << r;
  EXPECT_EQ(Field(r.out, "objects"), 1u) << r.out;
  EXPECT_EQ(Field(r.out, "refused"), 2u) << r.out;
  for (const auto& [digest, what] : {std::pair{d_large, absl::StrCat("a chunk of ", d_large)},
                                     std::pair{d_damaged_small, d_damaged_small}}) {
    const std::string refusal = absl::StrCat(
        "{\"digest\":\"", digest, "\",\"code\":\"DATA_LOSS\",\"message\":\"stored bytes of ", what,
        " do not match their digest (corrupt storage)\"}");
    EXPECT_NE(r.out.find(refusal), std::string::npos) << refusal << "\n" << r.out;
    EXPECT_EQ(Vaultctl({"--vault", b_.socket, "cas", "has", digest}).exit_code, kExitNotFound);
  }
  EXPECT_EQ(Get(b_, d_small), small);
}

TEST_F(ReplicationTest, ScrubFindsDamagedObjectsAndRepairsThemFromAPeer) {
  // The same objects on both vaults: an inline one and a chunked one.
  const std::string small = RandomBytes(rng_, 3000), large = RandomBytes(rng_, 6 << 20);
  const std::string d_small = Put(a_, small), d_large = Put(a_, large);
  ASSERT_EQ(Put(b_, small), d_small);
  ASSERT_EQ(Put(b_, large), d_large);
  std::string chunk_hash, chunk_bytes;  // the large object's second chunk
  ASSERT_NO_FATAL_FAILURE(SecondChunk(CasOfBAsMemberA().get(), large, &chunk_hash, &chunk_bytes));

  // b's disk goes bad under both: one flipped byte in each.
  ASSERT_EQ(vaultd_b_->Stop(), 0);
  std::string bad_small = small, bad_chunk = chunk_bytes;
  bad_small[1234] ^= 0x20;
  bad_chunk[bad_chunk.size() / 2] ^= 0x01;
  ASSERT_EQ(Corrupt(b_, "cas_data", DataKey(small), bad_small), absl::OkStatus());
  ASSERT_EQ(Corrupt(b_, "cas_chunks", chunk_hash, bad_chunk), absl::OkStatus());
  ASSERT_EQ(vaultd_b_->Start(), absl::OkStatus());
  EXPECT_TRUE(absl::StartsWith(Get(b_, d_small), "<missing")) << "the damage is not visible";
  EXPECT_TRUE(absl::StartsWith(Get(b_, d_large), "<missing")) << "the damage is not visible";

  // With a scrub configured, b finds both and repairs them from a.
  ASSERT_EQ(vaultd_b_->Stop(), 0);
  {
    std::ofstream conf(b_.config, std::ios::app);
    conf << "scrub {\n  bytes_per_second: 67108864\n  interval_ms: 200\n}\n";
  }
  ASSERT_EQ(vaultd_b_->Start(), absl::OkStatus());
  std::vector<std::string> findings;
  for (int i = 0; i < 300 && findings.size() < 2; ++i) {
    absl::SleepFor(absl::Milliseconds(100));
    findings = AuditEntries(b_, "cas.scrub");
  }
  ASSERT_EQ(findings.size(), 2u);
  std::map<std::string, std::string> by_subject;
  for (const std::string& e : findings) by_subject[JsonField(e, "subject").value_or("")] = e;
  for (const std::string& d : {d_small, d_large}) {
    ASSERT_EQ(by_subject.count(d), 1u) << d;
    const std::string& e = by_subject[d];
    EXPECT_EQ(JsonField(e, "decision"), "ALLOWED") << e;
    EXPECT_EQ(JsonField(e, "repaired"), "true") << e;
    EXPECT_EQ(JsonField(e, "from"), "a") << e;
    EXPECT_EQ(JsonField(e, "code"), "DATA_LOSS") << e;
    EXPECT_FALSE(JsonField(e, "problem").value_or("").empty()) << e;
  }
  EXPECT_EQ(Get(b_, d_small), small);
  EXPECT_TRUE(Get(b_, d_large) == large);

  // Later passes find nothing more; after a restart too.
  ASSERT_EQ(vaultd_b_->Stop(), 0);
  ASSERT_EQ(vaultd_b_->Start(), absl::OkStatus());
  absl::SleepFor(absl::Seconds(1));
  EXPECT_EQ(AuditEntries(b_, "cas.scrub").size(), 2u);
}

}  // namespace
}  // namespace vault::integration
