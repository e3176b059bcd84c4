// Federation traffic over TCP with mutual TLS: members get in; a vault of another CA fails the
// handshake; a vault of the same CA that is not a member is UNAUTHENTICATED; admin stays local.
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "integration-tests/harness.h"

namespace vault::integration {
namespace {

class FederationTest : public VaultTest {
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
    absl::StatusOr<Vaultd*> db = StartVaultd(b_);
    ASSERT_TRUE(db.ok()) << db.status();
    vaultd_b_ = *db;
    ASSERT_EQ(vaultd_b_->listen_address(), b_.address);
  }

  std::string ca_;
  VaultDir a_, b_;
  Vaultd* vaultd_b_ = nullptr;
};

TEST_F(FederationTest, MemberPutsAndGetsOverMutualTls) {
  const std::string file = root() + "/payload";
  const std::string data = "federated bytes\n";
  ASSERT_EQ(WriteFile(file, data), absl::OkStatus());
  const std::string digest = DigestText(data);

  RunResult put = Vaultctl({"--config", a_.config, "--vault", b_.address, "cas", "put", file});
  ASSERT_EQ(put.exit_code, kExitOk) << put;
  EXPECT_EQ(put.out, absl::StrCat(digest, "  ", file, "\n"));
  EXPECT_EQ(put.err, "");

  const std::string out = root() + "/back";
  RunResult get =
      Vaultctl({"--config", a_.config, "--vault", b_.address, "cas", "get", digest, "--out", out});
  ASSERT_EQ(get.exit_code, kExitOk) << get;
  EXPECT_EQ(ReadFile(out).value_or("<unreadable>"), data);

  // The object went to b, not to a.
  EXPECT_EQ(Vaultctl({"--vault", b_.socket, "cas", "has", digest}).exit_code, kExitOk);
  EXPECT_EQ(Vaultctl({"--vault", a_.socket, "cas", "has", digest}).exit_code, kExitNotFound);
}

TEST_F(FederationTest, VaultOfAnotherCaFailsTheHandshake) {
  absl::StatusOr<VaultDir> x = InitVault("x", /*ca_dir=*/"");  // a CA of its own
  ASSERT_TRUE(x.ok()) << x.status();
  RunResult r = Vaultctl({"--config", x->config, "--vault", b_.address, "--server-name", "b",
                          "--timeout", "5", "cas", "has", DigestText("")});
  EXPECT_EQ(r.exit_code, kExitUnavailable) << r;
  EXPECT_EQ(r.out, "");
  EXPECT_TRUE(absl::StartsWith(r.err, "vaultctl: ")) << r;
  EXPECT_TRUE(absl::EndsWith(r.err, "[UNAVAILABLE]\n")) << r;
  // b keeps serving its members.
  EXPECT_EQ(Vaultctl({"--config", a_.config, "--vault", b_.address, "cas", "ls"}).exit_code,
            kExitOk);
}

TEST_F(FederationTest, NonMemberOfTheFederationCaIsUnauthenticated) {
  absl::StatusOr<VaultDir> y = InitVault("y", ca_);
  ASSERT_TRUE(y.ok()) << y.status();
  ASSERT_EQ(AddMember(*y, b_), absl::OkStatus());  // y knows b; b does not list y
  RunResult r = Vaultctl({"--config", y->config, "--vault", b_.address, "cas", "ls"});
  EXPECT_EQ(r.exit_code, kExitRefused) << r;
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err,
            "vaultctl: TLS client is not a member of this federation (certificate names: y) "
            "[UNAUTHENTICATED]\n");

  // b's audit log witnesses the refusal: one entry per name per minute however often y tries.
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(Vaultctl({"--config", y->config, "--vault", b_.address, "cas", "ls"}).exit_code,
              kExitRefused);
  }
  auto refusals = [&] {
    RunResult tail = Vaultctl({"--vault", b_.socket, "-o", "json", "audit", "tail"});
    int n = 0;
    for (absl::string_view line : absl::StrSplit(tail.out, '\n', absl::SkipEmpty())) {
      if (JsonField(line, "action") == "federation.connect") {
        ++n;
        EXPECT_EQ(JsonField(line, "decision"), "DENIED") << line;
        EXPECT_EQ(JsonField(line, "subject"), "y") << line;
      }
    }
    return n;
  };
  for (int i = 0; i < 50 && refusals() == 0; ++i) absl::SleepFor(absl::Milliseconds(100));
  EXPECT_EQ(refusals(), 1);

  // Once b lists y and restarts, y gets in.
  ASSERT_EQ(AddMember(b_, *y), absl::OkStatus());
  ASSERT_EQ(vaultd_b_->Stop(), 0);
  absl::Status restarted = vaultd_b_->Start();
  ASSERT_TRUE(restarted.ok()) << restarted;
  r = Vaultctl({"--config", y->config, "--vault", b_.address, "cas", "ls"});
  EXPECT_EQ(r.exit_code, kExitOk) << r;
}

TEST_F(FederationTest, StatusIsServedOnlyOnTheAdminSocket) {
  RunResult r = Vaultctl({"--config", a_.config, "--vault", b_.address, "status"});
  EXPECT_EQ(r.exit_code, kExitRefused) << r;
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err,
            "vaultctl: status is served only on the vault's admin socket, not over TCP "
            "[FAILED_PRECONDITION]\n");

  r = Vaultctl({"--vault", b_.socket, "--output", "json", "status"});
  ASSERT_EQ(r.exit_code, kExitOk) << r;
  EXPECT_EQ(JsonField(r.out, "name"), "b") << r.out;
  EXPECT_EQ(JsonField(r.out, "listen_address"), b_.address) << r.out;
  EXPECT_EQ(JsonField(r.out, "public_key"), b_.public_key) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, absl::StrCat("{\"name\":\"a\",\"address\":\"", a_.address,
                                                    "\",\"public_key\":\"", a_.public_key, "\"}")))
      << r.out;
}

}  // namespace
}  // namespace vault::integration
