// Shared fixture of the audit log tests (log_test.cc, verify_test.cc, mirror_test.cc): a real
// Database in a fresh directory, a signing key, an AuditLog over them, raw access to the records
// for tamper tests, and an independent (naive, recursive) RFC 6962 reference implementation to
// check roots and proofs against.
#ifndef VAULT_AUDIT_LOG_TEST_FIXTURE_H_
#define VAULT_AUDIT_LOG_TEST_FIXTURE_H_

#include <openssl/evp.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "audit/log.h"
#include "audit/log_store.h"
#include "audit/merkle.h"
#include "audit/note.h"
#include "capability/principal.h"
#include "common/testing/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rocksdb/db.h"
#include "rocksdb/write_batch.h"
#include "storage/database.h"
#include "vault/v1/audit.pb.h"

namespace vault::audit {
namespace {

using ::absl::StatusCode;
using ::testing::HasSubstr;
using ::vault::v1::AuditEntry;
using ::vault::v1::StoredCheckpoint;

inline absl::StatusOr<std::unique_ptr<storage::Database>> OpenAuditDatabase(
    const std::string& path) {
  return storage::Database::Open({.path = path, .sync_writes = false, .block_cache_mb = 8},
                                 LogStore::ColumnFamilies());
}

// An entry as a caller fills it (Append fills sequence, time, vault and prev_hash). The action
// is a string field of known ASCII content, so tests can find it in the entry bytes.
inline AuditEntry MakeEntry(uint64_t i, absl::string_view tag = "") {
  AuditEntry e;
  e.set_actor("local-admin");
  e.set_action(absl::StrCat("test.action.", i));
  e.set_subject(absl::StrCat(tag, "subject-", i));
  e.set_decision(AuditEntry::ALLOWED);
  e.set_motivation("testing");
  return e;
}

inline std::vector<AuditEntry> MakeEntries(uint64_t first, uint64_t n, absl::string_view tag = "") {
  std::vector<AuditEntry> out;
  out.reserve(n);
  for (uint64_t i = 0; i < n; ++i) out.push_back(MakeEntry(first + i, tag));
  return out;
}

// ---- Reference RFC 6962 (independent of merkle.cc) ---------------------------------------------

inline Hash RefSha256(absl::string_view data) {
  Hash out{};
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), out.data(), &len, EVP_sha256(), nullptr);
  return out;
}
inline Hash RefLeafHash(absl::string_view leaf) {
  return RefSha256(absl::StrCat(std::string(1, '\0'), leaf));
}
inline Hash RefNodeHash(const Hash& l, const Hash& r) {
  return RefSha256(absl::StrCat(std::string(1, '\1'), AsBytes(l), AsBytes(r)));
}
inline uint64_t LargestPowerOfTwoBelow(uint64_t n) {
  uint64_t k = 1;
  while (k * 2 < n) k *= 2;
  return k;
}

// MTH over leaf hashes, memoized by range.
class ReferenceTree {
 public:
  explicit ReferenceTree(std::vector<Hash> leaves) : leaves_(std::move(leaves)) {}

  size_t size() const { return leaves_.size(); }
  const Hash& leaf(uint64_t i) const { return leaves_[i]; }

  Hash Root(uint64_t begin, uint64_t end) {
    if (begin == end) return RefSha256("");
    if (end - begin == 1) return leaves_[begin];
    auto it = memo_.find({begin, end});
    if (it != memo_.end()) return it->second;
    const uint64_t k = LargestPowerOfTwoBelow(end - begin);
    Hash h = RefNodeHash(Root(begin, begin + k), Root(begin + k, end));
    memo_.emplace(std::make_pair(begin, end), h);
    return h;
  }
  Hash Root(uint64_t size) { return Root(0, size); }

  // RFC 6962 §2.1.1 PATH(m, D[begin:end]).
  std::vector<Hash> Path(uint64_t m, uint64_t begin, uint64_t end) {
    if (end - begin <= 1) return {};
    const uint64_t k = LargestPowerOfTwoBelow(end - begin);
    std::vector<Hash> p;
    if (m < k) {
      p = Path(m, begin, begin + k);
      p.push_back(Root(begin + k, end));
    } else {
      p = Path(m - k, begin + k, end);
      p.push_back(Root(begin, begin + k));
    }
    return p;
  }
  // RFC 6962 §2.1.2 PROOF(m, D[n]).
  std::vector<Hash> Consistency(uint64_t m, uint64_t n) { return SubProof(m, 0, n, true); }

 private:
  std::vector<Hash> SubProof(uint64_t m, uint64_t begin, uint64_t end, bool whole) {
    const uint64_t n = end - begin;
    if (m == n) {
      if (whole) return {};
      return {Root(begin, end)};
    }
    const uint64_t k = LargestPowerOfTwoBelow(n);
    std::vector<Hash> p;
    if (m <= k) {
      p = SubProof(m, begin, begin + k, whole);
      p.push_back(Root(begin + k, end));
    } else {
      p = SubProof(m - k, begin + k, end, false);
      p.push_back(Root(begin, begin + k));
    }
    return p;
  }

  std::vector<Hash> leaves_;
  std::map<std::pair<uint64_t, uint64_t>, Hash> memo_;
};

// ---- Raw record access (for tamper tests) ------------------------------------------------------

inline std::string GetRaw(const storage::Database* db, rocksdb::ColumnFamilyHandle* cf,
                          const std::string& key) {
  std::string value;
  rocksdb::Status s = db->db()->Get(rocksdb::ReadOptions(), cf, key, &value);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return value;
}
inline void PutRaw(const storage::Database* db, rocksdb::ColumnFamilyHandle* cf,
                   const std::string& key, absl::string_view value) {
  rocksdb::Status s = db->db()->Put(rocksdb::WriteOptions(), cf, key, storage::ToSlice(value));
  EXPECT_TRUE(s.ok()) << s.ToString();
}
inline void DeleteRaw(const storage::Database* db, rocksdb::ColumnFamilyHandle* cf,
                      const std::string& key) {
  rocksdb::Status s = db->db()->Delete(rocksdb::WriteOptions(), cf, key);
  EXPECT_TRUE(s.ok()) << s.ToString();
}

// Every stored leaf hash of `store`, in order, up to its head.
inline std::vector<Hash> StoredLeaves(const LogStore& store) {
  std::vector<Hash> out;
  absl::Status s =
      store.ScanEntries(0, [&](uint64_t seq, absl::string_view leaf, absl::string_view) {
        EXPECT_EQ(seq, out.size());
        EXPECT_EQ(leaf.size(), kHashSize);
        Hash h{};
        std::copy_n(leaf.data(), std::min(leaf.size(), kHashSize), h.begin());
        out.push_back(h);
        return true;
      });
  EXPECT_EQ(s, absl::OkStatus());
  return out;
}

// ---- Fixture -----------------------------------------------------------------------------------

class AuditLogTest : public ::testing::Test {
 protected:
  static constexpr char kVault[] = "vault-a";

  void SetUp() override {
    absl::StatusOr<capability::PrivateKey> key = capability::PrivateKey::Generate();
    ASSERT_EQ(key.status(), absl::OkStatus());
    key_.emplace(std::move(*key));
    absl::StatusOr<NoteVerifier> v = NoteVerifier::FromKey(kVault, key_->public_key());
    ASSERT_EQ(v.status(), absl::OkStatus());
    verifier_.emplace(std::move(*v));
    ASSERT_NO_FATAL_FAILURE(OpenDb());
  }
  void TearDown() override {
    log_.reset();
    db_.reset();
  }

  static AuditLogOptions QuietOptions() {
    return {.vault_name = kVault, .background_checkpoints = false};
  }

  void OpenDb() {
    absl::StatusOr<std::unique_ptr<storage::Database>> db = OpenAuditDatabase(tmp_.Path("db"));
    ASSERT_EQ(db.status(), absl::OkStatus());
    db_ = std::move(*db);
  }
  void OpenLog(AuditLogOptions options = QuietOptions()) {
    absl::StatusOr<std::unique_ptr<AuditLog>> log = AuditLog::Open(db_.get(), &*key_, options);
    ASSERT_EQ(log.status(), absl::OkStatus());
    log_ = std::move(*log);
  }
  // Destroys the log (which signs a final checkpoint) and the database, and opens both again.
  void Reopen(AuditLogOptions options = QuietOptions()) {
    log_.reset();
    db_.reset();
    ASSERT_NO_FATAL_FAILURE(OpenDb());
    ASSERT_NO_FATAL_FAILURE(OpenLog(std::move(options)));
  }

  uint64_t AppendOk(AuditEntry e) {
    absl::StatusOr<uint64_t> seq = log_->Append(std::move(e));
    EXPECT_EQ(seq.status(), absl::OkStatus());
    return seq.value_or(~uint64_t{0});
  }
  // Appends entries [first, first + n) in one write.
  uint64_t AppendManyOk(uint64_t first, uint64_t n, absl::string_view tag = "") {
    std::vector<AuditEntry> entries = MakeEntries(first, n, tag);
    absl::StatusOr<uint64_t> seq = log_->AppendMany(absl::MakeSpan(entries));
    EXPECT_EQ(seq.status(), absl::OkStatus());
    return seq.value_or(~uint64_t{0});
  }

  LogStore Store() const { return LogStore(db_.get(), kVault); }

  // Entry `seq` as stored: its bytes and the entry they parse to.
  std::string EntryBytesOk(uint64_t seq) const {
    LogStore store = Store();
    absl::StatusOr<std::string> bytes = store.ReadEntry(seq);
    EXPECT_EQ(bytes.status(), absl::OkStatus()) << seq;
    return bytes.value_or("");
  }
  AuditEntry EntryOk(uint64_t seq) const {
    AuditEntry e;
    EXPECT_TRUE(e.ParseFromString(EntryBytesOk(seq))) << seq;
    return e;
  }
  Hash RootAtOk(uint64_t size) const {
    LogStore store = Store();
    absl::StatusOr<Hash> root = RootAt(size, store.Reader());
    EXPECT_EQ(root.status(), absl::OkStatus()) << size;
    return root.value_or(Hash{});
  }
  std::optional<StoredCheckpoint> StoredCheckpointOk() const {
    LogStore store = Store();
    absl::StatusOr<std::optional<StoredCheckpoint>> cp = store.ReadCheckpoint();
    EXPECT_EQ(cp.status(), absl::OkStatus());
    return cp.ok() ? *cp : std::nullopt;
  }

  common::testing::TempDir tmp_{"audit_log_test"};
  std::optional<capability::PrivateKey> key_;  // outlives log_
  std::optional<NoteVerifier> verifier_;
  std::unique_ptr<storage::Database> db_;
  std::unique_ptr<AuditLog> log_;
};

}  // namespace
}  // namespace vault::audit

#endif  // VAULT_AUDIT_LOG_TEST_FIXTURE_H_
