// vaultctl cap: issue a root link, delegate (attenuate, and be refused when widening), show,
// verify — real vaultctl processes over chain files, keys made by `vaultctl init`.
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "integration-tests/harness.h"

namespace vault::integration {
namespace {

class CapCliTest : public VaultTest {
 protected:
  void SetUp() override {
    VaultTest::SetUp();
    for (const char* name : {"p", "q", "r"}) {
      absl::StatusOr<VaultDir> v = InitVault(name, "");
      ASSERT_TRUE(v.ok()) << v.status();
      v_.push_back(*v);
    }
    chain_ = root() + "/c1";
    RunResult issue =
        Vaultctl({"cap", "issue", "--key", Key(0), "--to", v_[1].public_key, "--grant",
                  "read:/vault/pub", "--grant", "network:*.example.com:443", "--constraints",
                  "max-memory=1073741824,max-migrations=3", "--out", chain_});
    ASSERT_EQ(issue.exit_code, kExitOk) << issue;
  }
  std::string Key(int i) const { return v_[i].dir + "/vault.key"; }

  std::vector<VaultDir> v_;
  std::string chain_;
};

TEST_F(CapCliTest, IssuedChainVerifiesAgainstItsRoot) {
  RunResult r =
      Vaultctl({"cap", "verify", chain_, "--trust", v_[0].public_key, "--as", v_[1].public_key});
  EXPECT_EQ(r.exit_code, kExitOk) << r;
  EXPECT_EQ(r.out,
            absl::StrCat("ok: 1 links from ", v_[0].public_key,
                         ", hop 0\ngrants:\n  read /vault/pub\n  network *.example.com:443\n"));
  RunResult show = Vaultctl({"-o", "json", "cap", "show", chain_});
  EXPECT_EQ(show.exit_code, kExitOk) << show;
  EXPECT_TRUE(absl::StrContains(show.out, "\"kind\":\"DELEGATE\"")) << show.out;
  EXPECT_TRUE(absl::StrContains(show.out,
                                "\"constraints\":\"(constraints (max-memory 1073741824) "
                                "(max-migrations 3))\""))
      << show.out;
}

TEST_F(CapCliTest, DelegationAttenuatesAndVerifies) {
  const std::string c2 = root() + "/c2";
  RunResult d = Vaultctl({"cap", "delegate", "--chain", chain_, "--key", Key(1), "--to",
                          v_[2].public_key, "--grant", "read:/vault/pub/reports", "--out", c2});
  ASSERT_EQ(d.exit_code, kExitOk) << d;
  RunResult r =
      Vaultctl({"cap", "verify", c2, "--trust", v_[0].public_key, "--as", v_[2].public_key});
  EXPECT_EQ(r.exit_code, kExitOk) << r;
  EXPECT_TRUE(absl::StrContains(r.out, "ok: 2 links")) << r.out;
  EXPECT_TRUE(absl::EndsWith(r.out, "grants:\n  read /vault/pub/reports\n")) << r.out;
}

TEST_F(CapCliTest, DelegateRefusesToWidenWithTheReason) {
  const std::string c2 = root() + "/c2";
  RunResult sibling = Vaultctl({"cap", "delegate", "--chain", chain_, "--key", Key(1), "--to",
                                v_[2].public_key, "--grant", "read:/vault/public", "--out", c2});
  EXPECT_EQ(sibling.exit_code, kExitRefused) << sibling;
  EXPECT_EQ(sibling.err,
            "vaultctl: grant read /vault/public is not within the parent's grants "
            "[PERMISSION_DENIED]\n");
  RunResult more =
      Vaultctl({"cap", "delegate", "--chain", chain_, "--key", Key(1), "--to", v_[2].public_key,
                "--constraints", "max-memory=2147483648", "--out", c2});
  EXPECT_EQ(more.exit_code, kExitRefused) << more;
  EXPECT_TRUE(absl::StrContains(more.err, "max_memory")) << more;
  // Nothing was written.
  EXPECT_FALSE(ReadFile(c2).ok());
}

TEST_F(CapCliTest, OnlyTheHolderMayDelegate) {
  RunResult r = Vaultctl({"cap", "delegate", "--chain", chain_, "--key", Key(2), "--to",
                          v_[2].public_key, "--out", root() + "/c2"});
  EXPECT_EQ(r.exit_code, kExitRefused) << r;
  EXPECT_EQ(r.err,
            "vaultctl: --key is not the holder of this chain (the last link's audience) "
            "[PERMISSION_DENIED]\n");
}

TEST_F(CapCliTest, VerifyNamesTheRuleAndTheLink) {
  RunResult untrusted =
      Vaultctl({"-o", "json", "cap", "verify", chain_, "--trust", v_[2].public_key});
  EXPECT_EQ(untrusted.exit_code, kExitRefused) << untrusted;
  EXPECT_EQ(JsonField(untrusted.out, "error"), "UNTRUSTED_ROOT") << untrusted.out;
  EXPECT_EQ(JsonField(untrusted.out, "link"), "0") << untrusted.out;
  RunResult wrong_audience = Vaultctl({"-o", "json", "cap", "verify", chain_, "--trust",
                                       v_[0].public_key, "--as", v_[2].public_key});
  EXPECT_EQ(wrong_audience.exit_code, kExitRefused) << wrong_audience;
  EXPECT_EQ(JsonField(wrong_audience.out, "error"), "WRONG_AUDIENCE") << wrong_audience.out;

  // A flipped byte anywhere in the file: refused, never accepted.
  absl::StatusOr<std::string> bytes = ReadFile(chain_);
  ASSERT_TRUE(bytes.ok());
  for (size_t i = 0; i < bytes->size(); i += 7) {
    std::string bad = *bytes;
    bad[i] ^= 0x01;
    ASSERT_EQ(WriteFile(chain_ + ".bad", bad), absl::OkStatus());
    RunResult r = Vaultctl({"cap", "verify", chain_ + ".bad", "--trust", v_[0].public_key});
    EXPECT_NE(r.exit_code, kExitOk) << "byte " << i << ": " << r;
  }
}

TEST_F(CapCliTest, KeysAndSexpressionGrantsAsTheIssueWritesThem) {
  const std::string key = root() + "/alice.key";
  RunResult gen = Vaultctl({"-o", "json", "key", "generate", "--out", key});
  ASSERT_EQ(gen.exit_code, kExitOk) << gen;
  const std::string alice = JsonField(gen.out, "principal").value_or("");
  ASSERT_TRUE(absl::StartsWith(alice, "ed25519:")) << gen.out;
  RunResult again = Vaultctl({"key", "generate", "--out", key});
  EXPECT_EQ(again.exit_code, kExitRefused) << again;  // never overwrites a key
  RunResult show = Vaultctl({"key", "show", key});
  EXPECT_EQ(show.exit_code, kExitOk) << show;
  EXPECT_EQ(show.out, absl::StrCat(alice, "\nshort id: ", alice.substr(8, 8), "\n"));

  // --grant and --constraints in the S-expression form; --to and --trust as key files.
  const std::string c = root() + "/alice-chain";
  RunResult issue = Vaultctl({"cap", "issue", "--key", key, "--to", Key(1), "--grant",
                              "(read (path \"/vault/papers/\"))", "--constraints",
                              "(max-migrations 3)", "--out", c});
  ASSERT_EQ(issue.exit_code, kExitOk) << issue;
  RunResult verify = Vaultctl({"cap", "verify", c, "--trust", key, "--as", Key(1)});
  EXPECT_EQ(verify.exit_code, kExitOk) << verify;
  EXPECT_TRUE(absl::EndsWith(verify.out, "grants:\n  read /vault/papers\n")) << verify.out;
  RunResult bad = Vaultctl({"cap", "issue", "--key", key, "--to", Key(1), "--grant",
                            "(read (path \"/vault/../etc\"))", "--out", c + "2"});
  EXPECT_EQ(bad.exit_code, kExitRefused) << bad;
  EXPECT_TRUE(absl::StartsWith(bad.err, "vaultctl: --grant:1:1: ")) << bad;
}

}  // namespace
}  // namespace vault::integration
