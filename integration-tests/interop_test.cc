// Cross-implementation check of the audit log's formats: a vault's signed checkpoint and its
// RFC 9162 proofs, as printed by vaultctl, are verified by an independent implementation — Go's
// golang.org/x/mod/sumdb/note (C2SP signed notes) and golang.org/x/mod/sumdb/tlog (RFC 6962
// Merkle trees, CheckRecord / CheckTree) — in interop/verify_checkpoint.go, which shares no code
// with the vault. And it must refuse what was tampered with: a changed note body, another
// vault's key, an altered proof hash.
//
// Needs Debian's golang-go and golang-golang-x-mod-dev (deploy/install-deps.sh); skipped when
// they are absent. The verifier is built offline in GOPATH mode, with a Go build cache inside
// the test's temporary directory.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "integration-tests/harness.h"
#include "vault/v1/audit.grpc.pb.h"

#ifndef VAULT_IT_INTEROP_GO
#error "VAULT_IT_INTEROP_GO (the path of verify_checkpoint.go) must be defined"
#endif

namespace vault::integration {
namespace {

constexpr char kGoPath[] = "/usr/share/gocode";
constexpr char kXMod[] = "/usr/share/gocode/src/golang.org/x/mod/sumdb";

// `go` on PATH (or Debian's /usr/bin/go); "" when absent.
std::string FindGo() {
  std::vector<std::string> dirs;
  if (const char* path = std::getenv("PATH"); path != nullptr) {
    dirs = absl::StrSplit(path, ':', absl::SkipEmpty());
  }
  dirs.push_back("/usr/bin");
  for (const std::string& d : dirs) {
    std::string go = d + "/go";
    if (!d.empty() && d[0] == '/' && access(go.c_str(), X_OK) == 0) return go;
  }
  return "";
}

// Replaces the base64 character at `pos` of `s` by another one of the alphabet. Used on the first
// character of a 32-byte hash's base64, which carries the top bits of its first byte (never
// padding bits), so the text still decodes to 32 bytes, but different ones.
void AlterBase64At(std::string& s, size_t pos) {
  ASSERT_LT(pos, s.size());
  ASSERT_TRUE(absl::ascii_isalnum(static_cast<unsigned char>(s[pos])) || s[pos] == '+' ||
              s[pos] == '/')
      << "not a base64 character at " << pos << " of " << s;
  s[pos] = s[pos] == 'A' ? 'B' : 'A';
}

class InteropTest : public VaultTest {
 protected:
  void SetUp() override {
    VaultTest::SetUp();
    go_ = FindGo();
    if (go_.empty() || !std::filesystem::is_directory(std::string(kXMod) + "/note") ||
        !std::filesystem::is_directory(std::string(kXMod) + "/tlog")) {
      GTEST_SKIP() << "Go or golang.org/x/mod (Debian golang-golang-x-mod-dev) not installed; "
                      "deploy/install-deps.sh installs them";
    }
    // Offline, GOPATH mode, no user configuration; a build cache of the test's own.
    verifier_ = root() + "/verify_checkpoint";
    RunResult build = RunProgram(
        {"/usr/bin/env", "GO111MODULE=off", absl::StrCat("GOPATH=", kGoPath),
         absl::StrCat("GOCACHE=", root(), "/gocache"), "GOFLAGS=", "GOENV=off", "GOPROXY=off",
         "GOTOOLCHAIN=local", go_, "build", "-o", verifier_, VAULT_IT_INTEROP_GO},
        absl::Seconds(120));
    ASSERT_EQ(build.exit_code, 0) << "go build " << VAULT_IT_INTEROP_GO << ": " << build;
  }

  // Runs the Go verifier with `args`.
  RunResult Verify(std::vector<std::string> args) {
    args.insert(args.begin(), verifier_);
    return RunProgram(args, absl::Seconds(30));
  }

  // Writes `data` to <root>/<name>; returns the path.
  std::string Save(const std::string& name, absl::string_view data) {
    std::string path = root() + "/" + name;
    EXPECT_EQ(WriteFile(path, data), absl::OkStatus());
    return path;
  }

  // `vaultctl --vault socket args...`, which must succeed; its stdout.
  std::string Ctl(const std::string& socket, std::vector<std::string> args) {
    args.insert(args.begin(), {"--vault", socket});
    RunResult r = Vaultctl(args);
    EXPECT_EQ(r.exit_code, kExitOk) << absl::StrJoin(args, " ") << ": " << r;
    return r.out;
  }

  void PutFiles(const std::string& socket, int n) {
    for (int i = 0; i < n; ++i) {
      std::string f = Save(absl::StrCat("file-", i), absl::StrCat("interop object ", i, "\n"));
      Ctl(socket, {"cas", "put", f});
    }
  }

  // The raw bytes of entries [from, to) of the vault's own log, over gRPC (vaultctl prints no
  // raw bytes).
  std::vector<std::string> Entries(const std::string& socket, uint64_t from, uint64_t to) {
    std::unique_ptr<vault::v1::Audit::Stub> audit = vault::v1::Audit::NewStub(UnixChannel(socket));
    grpc::ClientContext ctx;
    SetDeadline(&ctx, absl::Seconds(30));
    vault::v1::GetEntriesRequest req;
    req.set_from(from);
    req.set_to(to);
    std::unique_ptr<grpc::ClientReader<vault::v1::GetEntriesResponse>> reader =
        audit->GetEntries(&ctx, req);
    std::vector<std::string> out;
    vault::v1::GetEntriesResponse page;
    while (reader->Read(&page)) {
      EXPECT_EQ(page.first(), from + out.size());
      for (const std::string& e : page.entries()) out.push_back(e);
    }
    grpc::Status st = reader->Finish();
    EXPECT_TRUE(st.ok()) << st.error_code() << ": " << st.error_message();
    EXPECT_EQ(out.size(), to - from);
    return out;
  }

  std::string go_;
  std::string verifier_;
};

TEST_F(InteropTest, GoVerifiesCheckpointAndProofs) {
  absl::StatusOr<Vaultd*> v = StartStandaloneVault("interop");
  ASSERT_TRUE(v.ok()) << v.status();
  const std::string sock = (*v)->socket();
  PutFiles(sock, 10);  // entries 0 (vault.start) .. 10 (cas.put)
  ASSERT_FALSE(HasFailure());

  const std::string note = Ctl(sock, {"audit", "checkpoint", "--issue"});
  ASSERT_TRUE(absl::StartsWith(note, "vault.audit/interop\n11\n")) << note;
  const std::string vkey(absl::StripAsciiWhitespace(Ctl(sock, {"audit", "verifier-key"})));
  ASSERT_TRUE(absl::StartsWith(vkey, "interop+")) << vkey;
  // The key in it is the vault's own Ed25519 key (Go checks the key ID against name and key).
  ASSERT_TRUE(absl::StartsWith((*v)->vault().public_key, "ed25519:")) << (*v)->vault().public_key;
  EXPECT_TRUE(absl::EndsWith(
      vkey, "+" + absl::Base64Escape(absl::StrCat(
                      "\x01", absl::HexStringToBytes((*v)->vault().public_key.substr(8))))))
      << vkey << " vs " << (*v)->vault().public_key;
  const std::string inclusion = Ctl(sock, {"-o", "json", "audit", "proof", "inclusion", "3"});
  const std::string consistency =
      Ctl(sock, {"-o", "json", "audit", "proof", "consistency", "2", "0"});
  ASSERT_EQ(JsonField(inclusion, "size"), "11") << inclusion;
  ASSERT_EQ(JsonField(consistency, "size2"), "11") << consistency;
  std::vector<std::string> entry = Entries(sock, 3, 4);
  ASSERT_EQ(entry.size(), 1u);

  const std::string note_file = Save("checkpoint.note", note);
  const std::string inc_file = Save("inclusion.json", inclusion);
  const std::string entry_file = Save("entry-3.bin", entry[0]);
  const std::string con_file = Save("consistency.json", consistency);

  RunResult ok = Verify({"-vkey", vkey, "-checkpoint", note_file, "-origin", "vault.audit/interop",
                         "-inclusion", inc_file, "-entry", entry_file, "-consistency", con_file});
  ASSERT_EQ(ok.exit_code, 0) << ok;
  EXPECT_TRUE(absl::StrContains(ok.out, "ok: note signed by interop+")) << ok;
  EXPECT_TRUE(absl::StrContains(ok.out, "verified text:\nvault.audit/interop\n11\n")) << ok;
  EXPECT_TRUE(absl::StrContains(ok.out, "ok: checkpoint origin \"vault.audit/interop\" size 11 "))
      << ok;
  EXPECT_TRUE(absl::StrContains(ok.out, "ok: inclusion of entry 3 ")) << ok;
  EXPECT_TRUE(absl::StrContains(ok.out, "in checkpoint of size 11 ")) << ok;
  EXPECT_TRUE(absl::StrContains(ok.out, "ok: consistency of size 2 ")) << ok;
  EXPECT_TRUE(absl::StrContains(ok.out, "with checkpoint of size 11 ")) << ok;

  // One byte of the note's body changed (the root's first base64 character): the signature no
  // longer verifies.
  {
    std::string bad = note;
    size_t root_line = bad.find("\n11\n");
    ASSERT_NE(root_line, std::string::npos);
    AlterBase64At(bad, root_line + 4);
    RunResult r = Verify({"-vkey", vkey, "-checkpoint", Save("tampered.note", bad)});
    EXPECT_EQ(r.exit_code, 1) << r;
    EXPECT_TRUE(absl::StrContains(r.err, "FAIL: note.Open: invalid signature for key interop+"))
        << r;
    EXPECT_FALSE(absl::StrContains(r.out, "ok: note signed")) << r;
  }

  // Another vault's verifier key: not a signer of this note.
  {
    absl::StatusOr<Vaultd*> other = StartStandaloneVault("other");
    ASSERT_TRUE(other.ok()) << other.status();
    const std::string other_key(
        absl::StripAsciiWhitespace(Ctl((*other)->socket(), {"audit", "verifier-key"})));
    ASSERT_TRUE(absl::StartsWith(other_key, "other+")) << other_key;
    RunResult r = Verify({"-vkey", other_key, "-checkpoint", note_file});
    EXPECT_EQ(r.exit_code, 1) << r;
    EXPECT_TRUE(absl::StrContains(r.err, "FAIL: note.Open: note has no verifiable signatures"))
        << r;
    EXPECT_FALSE(absl::StrContains(r.out, "ok: note signed")) << r;
  }

  // An inclusion proof with one hash altered.
  {
    std::string bad = inclusion;
    size_t hashes = bad.find("\"hashes\":[\"");
    ASSERT_NE(hashes, std::string::npos) << bad;
    AlterBase64At(bad, hashes + std::string("\"hashes\":[\"").size());
    RunResult r = Verify({"-vkey", vkey, "-checkpoint", note_file, "-inclusion",
                          Save("tampered-inclusion.json", bad), "-entry", entry_file});
    EXPECT_EQ(r.exit_code, 1) << r;
    EXPECT_TRUE(absl::StrContains(r.err, "FAIL: tlog.CheckRecord(entry 3, size 11): ")) << r;
    EXPECT_FALSE(absl::StrContains(r.out, "ok: inclusion")) << r;
  }

  // Another entry's bytes for entry 3's proof.
  {
    std::vector<std::string> entry4 = Entries(sock, 4, 5);
    ASSERT_EQ(entry4.size(), 1u);
    RunResult r = Verify({"-vkey", vkey, "-checkpoint", note_file, "-inclusion", inc_file, "-entry",
                          Save("entry-4.bin", entry4[0])});
    EXPECT_EQ(r.exit_code, 1) << r;
    EXPECT_TRUE(absl::StrContains(r.err, "FAIL: served leaf_hash ")) << r;
  }

  // A consistency proof with one hash altered.
  {
    std::string bad = consistency;
    size_t hashes = bad.find("\"hashes\":[\"");
    ASSERT_NE(hashes, std::string::npos) << bad;
    AlterBase64At(bad, hashes + std::string("\"hashes\":[\"").size());
    RunResult r = Verify({"-vkey", vkey, "-checkpoint", note_file, "-consistency",
                          Save("tampered-consistency.json", bad)});
    EXPECT_EQ(r.exit_code, 1) << r;
    EXPECT_TRUE(absl::StrContains(r.err, "FAIL: tlog.CheckTree(size 2 -> 11): ")) << r;
    EXPECT_FALSE(absl::StrContains(r.out, "ok: consistency")) << r;
  }
}

// Every inclusion proof (each leaf) and every consistency proof (each older size, including
// powers of two and the tree itself) of a 13-entry log: the edge cases of the RFC 9162 proof
// shapes, checked by the Go implementation.
TEST_F(InteropTest, GoVerifiesEveryProofOfASmallLog) {
  absl::StatusOr<Vaultd*> v = StartStandaloneVault("every");
  ASSERT_TRUE(v.ok()) << v.status();
  const std::string sock = (*v)->socket();
  PutFiles(sock, 12);  // entries 0 .. 12
  ASSERT_FALSE(HasFailure());
  constexpr uint64_t kSize = 13;
  const std::string note = Ctl(sock, {"audit", "checkpoint", "--issue"});
  ASSERT_TRUE(absl::StartsWith(note, absl::StrCat("vault.audit/every\n", kSize, "\n"))) << note;
  const std::string note_file = Save("checkpoint.note", note);
  const std::string vkey(absl::StripAsciiWhitespace(Ctl(sock, {"audit", "verifier-key"})));
  std::vector<std::string> entries = Entries(sock, 0, kSize);
  ASSERT_EQ(entries.size(), kSize);

  for (uint64_t i = 0; i < kSize; ++i) {
    const std::string size1 = absl::StrCat(i + 1);
    std::vector<std::string> args = {
        "-vkey",
        vkey,
        "-checkpoint",
        note_file,
        "-inclusion",
        Save(absl::StrCat("inclusion-", i, ".json"),
             Ctl(sock, {"-o", "json", "audit", "proof", "inclusion", absl::StrCat(i)})),
        "-entry",
        Save(absl::StrCat("entry-", i, ".bin"), entries[i]),
        "-consistency",
        Save(absl::StrCat("consistency-", size1, ".json"),
             Ctl(sock,
                 {"-o", "json", "audit", "proof", "consistency", size1, absl::StrCat(kSize)}))};
    RunResult r = Verify(args);
    EXPECT_EQ(r.exit_code, 0) << "entry " << i << ", size1 " << size1 << ": " << r;
    EXPECT_TRUE(absl::StrContains(r.out, absl::StrCat("ok: inclusion of entry ", i, " "))) << r;
    EXPECT_TRUE(absl::StrContains(r.out, absl::StrCat("ok: consistency of size ", size1, " ")))
        << r;
  }
}

}  // namespace
}  // namespace vault::integration
