// The audit log with real vaultd processes: every state change is an entry; three vaults mirror
// each other's logs over mutual TLS; a vault whose log is rewritten after it was mirrored is
// caught as forked by the others; entries tampered with on disk are found by `audit verify`,
// which names the first bad sequence number; a SIGKILL loses no acknowledged entry and no
// sequence number is ever reused.
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "agent/runtime.h"
#include "audit/log_store.h"
#include "cas/store.h"
#include "integration-tests/harness.h"
#include "node/vault_node.h"
#include "storage/database.h"

namespace vault::integration {
namespace {

// Fast checkpoints and mirroring, so the tests do not wait.
absl::Status SpeedUpAudit(const VaultDir& v) {
  absl::StatusOr<std::string> conf = ReadFile(v.config);
  if (!conf.ok()) return conf.status();
  return WriteFile(v.config,
                   absl::StrCat(*conf,
                                "audit { checkpoint_interval_ms: 50 "
                                "mirror_interval_ms: 100 mirror_rpc_timeout_ms: 2000 }\n"));
}

struct Entry {
  uint64_t seq = 0;
  std::string action;
  std::string subject;
  std::string priority;
  std::string line;
};

class AuditTest : public VaultTest {
 protected:
  // `audit tail -n N -o json` of vault `socket` (its own log, or its mirror of `log`).
  std::vector<Entry> Tail(const std::string& socket, const std::string& log = "", int n = 100000) {
    std::vector<std::string> args = {"--vault", socket, "-o", "json",
                                     "audit",   "tail", "-n", absl::StrCat(n)};
    if (!log.empty()) args.insert(args.end(), {"--vault-log", log});
    RunResult r = Vaultctl(args);
    EXPECT_EQ(r.exit_code, kExitOk) << r;
    std::vector<Entry> out;
    for (absl::string_view line : absl::StrSplit(r.out, '\n', absl::SkipEmpty())) {
      Entry e;
      EXPECT_TRUE(absl::SimpleAtoi(JsonField(line, "sequence").value_or("x"), &e.seq)) << line;
      e.action = JsonField(line, "action").value_or("");
      e.subject = JsonField(line, "subject").value_or("");
      e.priority = JsonField(line, "priority").value_or("");
      e.line = std::string(line);
      out.push_back(e);
    }
    return out;
  }

  uint64_t CheckpointSize(const std::string& socket, const std::string& log = "",
                          bool issue = false) {
    std::vector<std::string> args = {"--vault", socket, "-o", "json", "audit", "checkpoint"};
    if (!log.empty()) args.insert(args.end(), {"--vault-log", log});
    if (issue) args.push_back("--issue");
    RunResult r = Vaultctl(args);
    uint64_t size = 0;
    if (r.exit_code != kExitOk || !absl::SimpleAtoi(JsonField(r.out, "size").value_or(""), &size)) {
      return 0;
    }
    return size;
  }

  // Waits until `pred` holds (polling), up to `timeout`.
  template <typename Pred>
  bool Eventually(Pred pred, absl::Duration timeout = absl::Seconds(20)) {
    absl::Time end = absl::Now() + timeout;
    while (absl::Now() < end) {
      if (pred()) return true;
      absl::SleepFor(absl::Milliseconds(100));
    }
    return pred();
  }

  void PutFiles(const std::string& socket, int n, const std::string& tag) {
    for (int i = 0; i < n; ++i) {
      std::string f = absl::StrCat(root(), "/", tag, "-", i);
      ASSERT_EQ(WriteFile(f, absl::StrCat(tag, " object ", i, "\n")), absl::OkStatus());
      RunResult r = Vaultctl({"--vault", socket, "cas", "put", f});
      ASSERT_EQ(r.exit_code, kExitOk) << r;
    }
  }
};

TEST_F(AuditTest, StateChangesAreEntriesOfAnIntactLog) {
  absl::StatusOr<Vaultd*> v = StartStandaloneVault("solo");
  ASSERT_TRUE(v.ok()) << v.status();
  const std::string sock = (*v)->socket();
  const std::string file = root() + "/one";
  ASSERT_EQ(WriteFile(file, "audited bytes\n"), absl::OkStatus());
  ASSERT_EQ(Vaultctl({"--vault", sock, "cas", "put", file}).exit_code, kExitOk);
  // Storing it again is no new state: no new entry.
  ASSERT_EQ(Vaultctl({"--vault", sock, "cas", "put", file}).exit_code, kExitOk);

  std::vector<Entry> entries = Tail(sock);
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_EQ(entries[0].seq, 0u);
  EXPECT_EQ(entries[0].action, "vault.start");
  EXPECT_EQ(entries[1].seq, 1u);
  EXPECT_EQ(entries[1].action, "cas.put");
  EXPECT_EQ(entries[1].subject, DigestText("audited bytes\n"));
  EXPECT_TRUE(absl::StrContains(entries[1].line, "\"actor\":\"local-admin\"")) << entries[1].line;

  // The checkpoint is a signed note; verify checks it all.
  EXPECT_EQ(CheckpointSize(sock, "", /*issue=*/true), 2u);
  RunResult cp = Vaultctl({"--vault", sock, "audit", "checkpoint"});
  ASSERT_EQ(cp.exit_code, kExitOk) << cp;
  EXPECT_TRUE(absl::StartsWith(cp.out, "vault.audit/solo\n2\n")) << cp.out;
  EXPECT_TRUE(absl::StrContains(cp.out, "\n\n\xe2\x80\x94 solo ")) << cp.out;
  RunResult key = Vaultctl({"--vault", sock, "audit", "verifier-key"});
  ASSERT_EQ(key.exit_code, kExitOk) << key;
  EXPECT_TRUE(absl::StartsWith(key.out, "solo+")) << key.out;
  RunResult verify = Vaultctl({"--vault", sock, "audit", "verify"});
  EXPECT_EQ(verify.exit_code, kExitOk) << verify;
  EXPECT_TRUE(absl::StartsWith(verify.out, "solo: ok: 2 entries")) << verify.out;
  RunResult inc = Vaultctl({"--vault", sock, "audit", "proof", "inclusion", "1"});
  EXPECT_EQ(inc.exit_code, kExitOk) << inc;
  EXPECT_TRUE(absl::StrContains(inc.out, "verified against signed checkpoint")) << inc.out;
  RunResult missing = Vaultctl({"--vault", sock, "audit", "show", "99"});
  EXPECT_EQ(missing.exit_code, kExitNotFound) << missing;
}

// Tampering is done on the stopped vault's database, through the same record layout vaultd
// uses; then vaultd runs again and `audit verify` must fail at the exact entry.
class AuditTamperTest : public AuditTest {
 protected:
  void SetUp() override {
    AuditTest::SetUp();
    absl::StatusOr<Vaultd*> v = StartStandaloneVault("t");
    ASSERT_TRUE(v.ok()) << v.status();
    vaultd_ = *v;
    PutFiles(vaultd_->socket(), 12, "t");  // entries 0 (start) .. 12
    ASSERT_EQ(CheckpointSize(vaultd_->socket(), "", true), 13u);
    ASSERT_EQ(vaultd_->Stop(), 0);
  }

  // Opens the stopped vault's database and runs `fn` on its log's records.
  void Tamper(const std::function<void(rocksdb::DB*, const audit::LogStore&)>& fn) {
    // Every column family vaultd has (RocksDB refuses to open a database without all of them).
    std::vector<storage::ColumnFamilySpec> cfs = node::VaultNode::ColumnFamilies();
    absl::StatusOr<std::unique_ptr<storage::Database>> db =
        storage::Database::Open({.path = vaultd_->vault().data_dir + "/db"}, cfs);
    ASSERT_TRUE(db.ok()) << db.status();
    audit::LogStore store(db->get(), "t");
    fn((*db)->db(), store);
  }

  RunResult VerifyAfterRestart() {
    EXPECT_EQ(vaultd_->Start(), absl::OkStatus());
    return Vaultctl({"--vault", vaultd_->socket(), "audit", "verify"});
  }

  static std::string Get(rocksdb::DB* db, rocksdb::ColumnFamilyHandle* cf, const std::string& k) {
    std::string v;
    EXPECT_TRUE(db->Get(rocksdb::ReadOptions(), cf, k, &v).ok()) << "missing record";
    return v;
  }

  Vaultd* vaultd_ = nullptr;
};

TEST_F(AuditTamperTest, FlippedByteIsNamed) {
  Tamper([](rocksdb::DB* db, const audit::LogStore& s) {
    std::string v = Get(db, s.entries_handle(), s.EntryKey(7));
    v[v.size() - 3] ^= 0x01;  // inside the entry's bytes (after the 32-byte leaf hash)
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), s.entries_handle(), s.EntryKey(7), v).ok());
  });
  RunResult r = VerifyAfterRestart();
  EXPECT_EQ(r.exit_code, 1) << r;
  EXPECT_TRUE(absl::StartsWith(r.out, "t: FAILED at sequence 7: ")) << r;
}

TEST_F(AuditTamperTest, DeletedEntryIsNamed) {
  Tamper([](rocksdb::DB* db, const audit::LogStore& s) {
    ASSERT_TRUE(db->Delete(rocksdb::WriteOptions(), s.entries_handle(), s.EntryKey(5)).ok());
  });
  RunResult r = VerifyAfterRestart();
  EXPECT_EQ(r.exit_code, 1) << r;
  EXPECT_TRUE(absl::StartsWith(r.out, "t: FAILED at sequence 5: entry 5 is missing")) << r;
}

TEST_F(AuditTamperTest, ReorderedEntriesAreNamed) {
  Tamper([](rocksdb::DB* db, const audit::LogStore& s) {
    std::string v9 = Get(db, s.entries_handle(), s.EntryKey(9));
    std::string v10 = Get(db, s.entries_handle(), s.EntryKey(10));
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), s.entries_handle(), s.EntryKey(9), v10).ok());
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), s.entries_handle(), s.EntryKey(10), v9).ok());
  });
  RunResult r = VerifyAfterRestart();
  EXPECT_EQ(r.exit_code, 1) << r;
  EXPECT_TRUE(absl::StartsWith(r.out, "t: FAILED at sequence 9: entry 9 holds sequence number 10"))
      << r;
}

TEST_F(AuditTest, KillLosesNoEntryAndReusesNoSequenceNumber) {
  absl::StatusOr<Vaultd*> v = StartStandaloneVault("k");
  ASSERT_TRUE(v.ok()) << v.status();
  PutFiles((*v)->socket(), 8, "k");  // each acknowledged put is a durable entry: 1..8
  (*v)->Kill();
  ASSERT_EQ((*v)->Start(), absl::OkStatus());
  PutFiles((*v)->socket(), 2, "k2");

  std::vector<Entry> entries = Tail((*v)->socket());
  ASSERT_EQ(entries.size(), 12u);  // start, 8 puts, start, 2 puts
  for (size_t i = 0; i < entries.size(); ++i) EXPECT_EQ(entries[i].seq, i);
  EXPECT_EQ(entries[0].action, "vault.start");
  for (int i = 1; i <= 8; ++i) {
    EXPECT_EQ(entries[i].action, "cas.put");
    EXPECT_EQ(entries[i].subject, DigestText(absl::StrCat("k object ", i - 1, "\n")));
  }
  EXPECT_EQ(entries[9].action, "vault.start");
  RunResult verify = Vaultctl({"--vault", (*v)->socket(), "audit", "verify"});
  EXPECT_EQ(verify.exit_code, kExitOk) << verify;
}

class AuditFederationTest : public AuditTest {
 protected:
  void SetUp() override {
    AuditTest::SetUp();
    std::string ca = CreateCa();
    ASSERT_FALSE(ca.empty());
    for (const char* name : {"a", "b", "c"}) {
      absl::StatusOr<VaultDir> v = InitVault(name, ca);
      ASSERT_TRUE(v.ok()) << v.status();
      vaults_.push_back(*v);
    }
    for (const VaultDir& x : vaults_) {
      for (const VaultDir& y : vaults_) {
        if (x.name != y.name) {
          ASSERT_EQ(AddMember(x, y), absl::OkStatus());
        }
      }
      ASSERT_EQ(SpeedUpAudit(x), absl::OkStatus());
    }
    for (const VaultDir& x : vaults_) {
      absl::StatusOr<Vaultd*> d = StartVaultd(x);
      ASSERT_TRUE(d.ok()) << d.status();
      daemons_.push_back(*d);
    }
  }

  std::vector<VaultDir> vaults_;
  std::vector<Vaultd*> daemons_;
};

TEST_F(AuditFederationTest, EveryVaultMirrorsItsPeersAndCatchesAFork) {
  Vaultd* a = daemons_[0];
  Vaultd* b = daemons_[1];
  Vaultd* c = daemons_[2];
  PutFiles(c->socket(), 6, "c");
  const uint64_t c_size = CheckpointSize(c->socket(), "", /*issue=*/true);
  ASSERT_GE(c_size, 7u);
  for (Vaultd* v : {a, b}) {
    ASSERT_TRUE(Eventually([&] { return CheckpointSize(v->socket(), "c") >= c_size; }))
        << v->vault().name << " never mirrored c's checkpoint of size " << c_size;
  }
  // The mirror holds c's entries byte for byte, and verifies.
  std::vector<Entry> own = Tail(c->socket(), "", static_cast<int>(c_size));
  std::vector<Entry> mirrored = Tail(a->socket(), "c", static_cast<int>(c_size));
  ASSERT_GE(mirrored.size(), c_size);
  for (size_t i = 0; i < c_size; ++i) EXPECT_EQ(mirrored[i].line, own[i].line);
  RunResult all = Vaultctl({"--vault", a->socket(), "audit", "verify", "--all"});
  EXPECT_EQ(all.exit_code, kExitOk) << all;
  EXPECT_TRUE(absl::StrContains(all.out, "\nc: ok: ")) << all.out;
  RunResult mirrors = Vaultctl({"--vault", a->socket(), "audit", "mirrors"});
  EXPECT_EQ(mirrors.exit_code, kExitOk) << mirrors;

  // c's log is rewritten: its data is wiped (same key, same name) and it starts over, signing a
  // different history.
  ASSERT_EQ(c->Stop(), 0);
  std::filesystem::remove_all(c->vault().data_dir);
  ASSERT_EQ(c->Start(), absl::OkStatus());
  ASSERT_EQ(CheckpointSize(c->socket(), "", true), 1u);

  for (Vaultd* v : {a, b}) {
    ASSERT_TRUE(Eventually([&] {
      return Vaultctl({"--vault", v->socket(), "audit", "mirrors"}).exit_code == kExitRefused;
    })) << v->vault().name
        << " did not detect c's fork";
    RunResult m = Vaultctl({"--vault", v->socket(), "audit", "mirrors"});
    EXPECT_TRUE(absl::StrContains(m.out, "c  FORKED")) << m.out;
    EXPECT_TRUE(absl::StrContains(m.out, "evidence 1:\nvault.audit/c\n")) << m.out;
    EXPECT_TRUE(absl::StrContains(m.out, "evidence 2:\nvault.audit/c\n1\n")) << m.out;
    RunResult verify = Vaultctl({"--vault", v->socket(), "audit", "verify", "--peer", "c"});
    EXPECT_EQ(verify.exit_code, 1) << verify;
    EXPECT_TRUE(absl::StartsWith(verify.out, "c: FAILED (FORKED)")) << verify.out;
    // A high-priority entry in the vault's own log.
    bool alarm = false;
    for (const Entry& e : Tail(v->socket())) {
      if (e.action == "audit.fork" && e.subject == "c" && e.priority == "HIGH") alarm = true;
    }
    EXPECT_TRUE(alarm) << "no audit.fork entry in " << v->vault().name << "'s log";
  }
  // The honest vaults still mirror each other.
  RunResult ab = Vaultctl({"--vault", a->socket(), "audit", "verify", "--peer", "b"});
  EXPECT_EQ(ab.exit_code, kExitOk) << ab;
}

}  // namespace
}  // namespace vault::integration
