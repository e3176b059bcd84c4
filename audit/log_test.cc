// Tests of AuditLog (audit/log.h) and LogStore (audit/log_store.h): appends, sequence numbers,
// the hash chain, concurrency, restart, checkpoints and proofs served from the store.
#include <algorithm>
#include <atomic>
#include <random>
#include <thread>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "audit/log_test_fixture.h"
#include "audit/verify.h"
#include "storage/keys.h"

namespace vault::audit {
namespace {

// ---- Append ------------------------------------------------------------------------------------

TEST_F(AuditLogTest, FreshLogIsEmpty) {
  ASSERT_NO_FATAL_FAILURE(OpenLog());
  EXPECT_EQ(log_->size(), 0u);
  EXPECT_EQ(log_->LatestCheckpoint(), std::nullopt);
  EXPECT_EQ(log_->origin(), "vault.audit/vault-a");
  EXPECT_EQ(LogOrigin("vault-a"), "vault.audit/vault-a");
  EXPECT_EQ(log_->vault_name(), "vault-a");
  EXPECT_EQ(log_->verifier().ToString(), verifier_->ToString());
  absl::StatusOr<vault::v1::LogHead> head = log_->store().ReadHead();
  ASSERT_EQ(head.status(), absl::OkStatus());
  EXPECT_EQ(head->size(), 0u);
  EXPECT_EQ(log_->store().ReadEntry(0).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(RootAtOk(0), RefSha256(""));
}

TEST_F(AuditLogTest, AppendAssignsConsecutiveSequenceNumbersAndFillsEntries) {
  ASSERT_NO_FATAL_FAILURE(OpenLog());
  const int64_t before = absl::ToUnixMicros(absl::Now());
  for (uint64_t i = 0; i < 5; ++i) {
    AuditEntry e = MakeEntry(i);
    // Whatever the caller puts in the fields Append owns is replaced.
    e.set_sequence(1000 + i);
    e.set_vault("someone-else");
    e.set_prev_hash("garbage");
    e.set_time_unix_micros(1);
    EXPECT_EQ(AppendOk(std::move(e)), i);
    EXPECT_EQ(log_->size(), i + 1);
  }
  const int64_t after = absl::ToUnixMicros(absl::Now());

  Hash prev{};  // 32 zero bytes before entry 0
  for (uint64_t i = 0; i < 5; ++i) {
    const std::string bytes = EntryBytesOk(i);
    AuditEntry got;
    ASSERT_TRUE(got.ParseFromString(bytes)) << i;
    EXPECT_EQ(got.sequence(), i);
    EXPECT_EQ(got.vault(), "vault-a");
    EXPECT_GE(got.time_unix_micros(), before);
    EXPECT_LE(got.time_unix_micros(), after);
    EXPECT_EQ(got.prev_hash(), AsBytes(prev)) << i;
    EXPECT_EQ(got.prev_hash().size(), 32u);
    // The caller's fields, unchanged.
    AuditEntry want = MakeEntry(i);
    EXPECT_EQ(got.actor(), want.actor());
    EXPECT_EQ(got.action(), want.action());
    EXPECT_EQ(got.subject(), want.subject());
    EXPECT_EQ(got.decision(), AuditEntry::ALLOWED);
    EXPECT_EQ(got.motivation(), "testing");
    // The stored record is leaf hash || bytes, and the leaf hash is SHA-256(0x00 || bytes).
    const std::string raw =
        GetRaw(db_.get(), log_->store().entries_handle(), log_->store().EntryKey(i));
    EXPECT_EQ(raw, absl::StrCat(AsBytes(RefLeafHash(bytes)), bytes));
    prev = RefLeafHash(bytes);
  }
  EXPECT_EQ(std::string(32, '\0'), EntryOk(0).prev_hash());

  absl::StatusOr<vault::v1::LogHead> head = log_->store().ReadHead();
  ASSERT_EQ(head.status(), absl::OkStatus());
  EXPECT_EQ(head->size(), 5u);
  EXPECT_EQ(head->last_leaf_hash(), AsBytes(prev));
  EXPECT_EQ(log_->store().ReadEntry(5).status().code(), StatusCode::kNotFound);
}

TEST_F(AuditLogTest, EntryBytesAreTheStoredLeafAndParseBack) {
  ASSERT_NO_FATAL_FAILURE(OpenLog());
  AuditEntry e = MakeEntry(0);
  e.set_priority(AuditEntry::HIGH);
  e.set_decision(AuditEntry::DENIED);
  AuditEntry::Detail* d = e.add_details();
  d->set_key("k");
  d->set_value(std::string("v\0v", 3));
  ASSERT_EQ(AppendOk(e), 0u);
  AuditEntry got = EntryOk(0);
  EXPECT_EQ(got.priority(), AuditEntry::HIGH);
  EXPECT_EQ(got.decision(), AuditEntry::DENIED);
  ASSERT_EQ(got.details_size(), 1);
  EXPECT_EQ(got.details(0).key(), "k");
  EXPECT_EQ(got.details(0).value(), std::string("v\0v", 3));
  // The root of a one-entry log is that entry's leaf hash.
  EXPECT_EQ(RootAtOk(1), RefLeafHash(EntryBytesOk(0)));
}

TEST_F(AuditLogTest, AppendManyIsConsecutiveAndChained) {
  ASSERT_NO_FATAL_FAILURE(OpenLog());
  EXPECT_EQ(AppendOk(MakeEntry(0)), 0u);
  EXPECT_EQ(AppendManyOk(1, 7), 1u);
  EXPECT_EQ(log_->size(), 8u);
  EXPECT_EQ(AppendOk(MakeEntry(8)), 8u);
  EXPECT_EQ(AppendManyOk(9, 3), 9u);
  EXPECT_EQ(log_->size(), 12u);

  std::vector<AuditEntry> none;
  EXPECT_EQ(log_->AppendMany(absl::MakeSpan(none)).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(log_->size(), 12u);

  Hash prev{};
  for (uint64_t i = 0; i < 12; ++i) {
    AuditEntry got = EntryOk(i);
    EXPECT_EQ(got.sequence(), i);
    EXPECT_EQ(got.action(), absl::StrCat("test.action.", i));
    EXPECT_EQ(got.prev_hash(), AsBytes(prev)) << i;
    prev = RefLeafHash(EntryBytesOk(i));
  }
  VerifyReport r = VerifyStoredLog(log_->store(), "vault-a", log_->verifier());
  EXPECT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.entries_checked, 12u);
}

TEST_F(AuditLogTest, AppendWithWritesTheEntryAndTheOtherRecordsTogether) {
  ASSERT_NO_FATAL_FAILURE(OpenLog());
  EXPECT_EQ(AppendOk(MakeEntry(0)), 0u);
  rocksdb::ColumnFamilyHandle* other = db_->db()->DefaultColumnFamily();
  absl::StatusOr<uint64_t> seq = log_->AppendWith(MakeEntry(1), [&](rocksdb::WriteBatch* batch) {
    batch->Put(other, "migration/t1", "committed");
  });
  ASSERT_EQ(seq.status(), absl::OkStatus());
  EXPECT_EQ(*seq, 1u);
  EXPECT_EQ(GetRaw(db_.get(), other, "migration/t1"), "committed");
  EXPECT_EQ(EntryOk(1).action(), "test.action.1");
  // A failed append writes neither.
  log_->Close();
  absl::StatusOr<uint64_t> closed = log_->AppendWith(
      MakeEntry(2), [&](rocksdb::WriteBatch* batch) { batch->Put(other, "migration/t2", "x"); });
  EXPECT_EQ(closed.status().code(), StatusCode::kFailedPrecondition);
  std::string value;
  EXPECT_TRUE(db_->db()->Get(rocksdb::ReadOptions(), other, "migration/t2", &value).IsNotFound());
}

// ---- Concurrency -------------------------------------------------------------------------------

TEST_F(AuditLogTest, ConcurrentAppendsGetAPermutationOfSequenceNumbers) {
  constexpr int kThreads = 8;
  constexpr int kPerThread = 500;
  ASSERT_NO_FATAL_FAILURE(OpenLog());
  std::vector<std::vector<uint64_t>> got(kThreads);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        absl::StatusOr<uint64_t> seq =
            log_->Append(MakeEntry(static_cast<uint64_t>(t * kPerThread + i), "concurrent-"));
        if (!seq.ok()) {
          failures.fetch_add(1);
          continue;
        }
        got[t].push_back(*seq);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);

  std::vector<uint64_t> all;
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(got[t].size(), static_cast<size_t>(kPerThread));
    // Each thread's own appends are ordered.
    EXPECT_TRUE(std::is_sorted(got[t].begin(), got[t].end())) << t;
    all.insert(all.end(), got[t].begin(), got[t].end());
  }
  std::sort(all.begin(), all.end());
  std::vector<uint64_t> want(kThreads * kPerThread);
  for (size_t i = 0; i < want.size(); ++i) want[i] = i;
  EXPECT_EQ(all, want);
  EXPECT_EQ(log_->size(), static_cast<uint64_t>(kThreads * kPerThread));

  // Each entry holds the sequence number its caller was given.
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kPerThread; i += 97) {
      EXPECT_EQ(EntryOk(got[t][i]).action(), absl::StrCat("test.action.", t * kPerThread + i));
    }
  }
  VerifyReport r = VerifyStoredLog(log_->store(), "vault-a", log_->verifier());
  EXPECT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.entries_checked, static_cast<uint64_t>(kThreads * kPerThread));
  EXPECT_EQ(r.first_bad, std::nullopt);
}

// ---- Restart -----------------------------------------------------------------------------------

TEST_F(AuditLogTest, RestartKeepsSizeRootAndNeverReusesSequenceNumbers) {
  constexpr uint64_t kN = 77;
  ASSERT_NO_FATAL_FAILURE(OpenLog());
  EXPECT_EQ(AppendManyOk(0, 50), 0u);
  for (uint64_t i = 50; i < kN; ++i) EXPECT_EQ(AppendOk(MakeEntry(i)), i);
  const Hash root_before = RootAtOk(kN);
  const std::string last_before = EntryBytesOk(kN - 1);

  ASSERT_NO_FATAL_FAILURE(Reopen());
  EXPECT_EQ(log_->size(), kN);
  EXPECT_EQ(RootAtOk(kN), root_before);
  // The final checkpoint signed at close is loaded with the log.
  ASSERT_TRUE(log_->LatestCheckpoint().has_value());
  EXPECT_EQ(log_->LatestCheckpoint()->size(), kN);
  EXPECT_EQ(log_->LatestCheckpoint()->root(), AsBytes(root_before));

  EXPECT_EQ(AppendOk(MakeEntry(kN)), kN);
  EXPECT_EQ(log_->size(), kN + 1);
  // The chain continues across the restart.
  EXPECT_EQ(EntryOk(kN).prev_hash(), AsBytes(RefLeafHash(last_before)));
  EXPECT_EQ(EntryOk(kN - 1).action(), absl::StrCat("test.action.", kN - 1));
  EXPECT_EQ(RootAtOk(kN), root_before);  // the old tree is unchanged

  // A second restart, this time right after a single append.
  ASSERT_NO_FATAL_FAILURE(Reopen());
  EXPECT_EQ(log_->size(), kN + 1);
  EXPECT_EQ(AppendManyOk(kN + 1, 3), kN + 1);
  VerifyReport r = VerifyStoredLog(log_->store(), "vault-a", log_->verifier());
  EXPECT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.entries_checked, kN + 4);

  // And the tree rebuilt from scratch matches what the store serves.
  ReferenceTree ref(StoredLeaves(log_->store()));
  ASSERT_EQ(ref.size(), kN + 4);
  EXPECT_EQ(RootAtOk(kN + 4), ref.Root(kN + 4));
  EXPECT_EQ(RootAtOk(kN), ref.Root(kN));
}

TEST_F(AuditLogTest, ReopenEmptyLog) {
  ASSERT_NO_FATAL_FAILURE(OpenLog());
  ASSERT_NO_FATAL_FAILURE(Reopen());
  EXPECT_EQ(log_->size(), 0u);
  EXPECT_EQ(AppendOk(MakeEntry(0)), 0u);
  EXPECT_EQ(EntryOk(0).prev_hash(), std::string(32, '\0'));
}

// Regression (audit/log.cc, AuditLog::Open + ~AuditLog): when Open fails after constructing the log
// object (unreadable head, missing frontier node, checkpoint larger than the head, ...), the
// early `return` destroys the half-built log; ~AuditLog calls Close, which calls IssueCheckpoint
// on the still-empty tree_ and *signs and stores a checkpoint of size 0*, overwriting the log's
// real stored checkpoint. A failed Open must not write anything.
TEST_F(AuditLogTest, FailedOpenDoesNotOverwriteTheStoredCheckpoint) {
  ASSERT_NO_FATAL_FAILURE(OpenLog());
  EXPECT_EQ(AppendManyOk(0, 10), 0u);
  log_.reset();  // signs a final checkpoint of 10 entries
  std::optional<StoredCheckpoint> before = StoredCheckpointOk();
  ASSERT_TRUE(before.has_value());
  ASSERT_EQ(before->size(), 10u);

  // The frontier of 10 leaves is nodes (3,0) and (1,4); lose (3,0).
  LogStore store = Store();
  DeleteRaw(db_.get(), store.nodes_handle(), store.NodeKey({.level = 3, .index = 0}));
  EXPECT_EQ(AuditLog::Open(db_.get(), &*key_, QuietOptions()).status().code(),
            StatusCode::kDataLoss);

  std::optional<StoredCheckpoint> after = StoredCheckpointOk();
  ASSERT_TRUE(after.has_value());
  EXPECT_EQ(after->size(), 10u) << "a failed Open replaced the stored checkpoint";
  EXPECT_EQ(after->note(), before->note());
}

// Same bug, other symptom: the DATA_LOSS Open reports for a head behind the signed checkpoint
// "heals" itself, because the failed Open overwrote the checkpoint with one of size 0.
TEST_F(AuditLogTest, OpenRefusesAHeadBehindItsCheckpointEveryTime) {
  ASSERT_NO_FATAL_FAILURE(OpenLog());
  EXPECT_EQ(AppendManyOk(0, 10), 0u);
  ASSERT_EQ(log_->IssueCheckpoint().status(), absl::OkStatus());
  const std::string leaf4 = std::string(AsBytes(RefLeafHash(EntryBytesOk(4))));
  log_.reset();

  LogStore store = Store();
  vault::v1::LogHead head;
  head.set_size(5);
  head.set_last_leaf_hash(leaf4);
  rocksdb::WriteBatch batch;
  store.SetHead(&batch, head);
  ASSERT_EQ(db_->Write(&batch), absl::OkStatus());

  absl::StatusOr<std::unique_ptr<AuditLog>> first =
      AuditLog::Open(db_.get(), &*key_, QuietOptions());
  EXPECT_EQ(first.status().code(), StatusCode::kDataLoss);
  EXPECT_THAT(first.status().message(), HasSubstr("holds 5 entries but its checkpoint signed 10"));
  absl::StatusOr<std::unique_ptr<AuditLog>> second =
      AuditLog::Open(db_.get(), &*key_, QuietOptions());
  EXPECT_EQ(second.status().code(), StatusCode::kDataLoss)
      << "the first failed Open overwrote the checkpoint";
}

// ---- Checkpoints -------------------------------------------------------------------------------

TEST_F(AuditLogTest, IssueCheckpointSignsTheCurrentTree) {
  ASSERT_NO_FATAL_FAILURE(OpenLog());
  EXPECT_EQ(AppendManyOk(0, 13), 0u);
  absl::StatusOr<StoredCheckpoint> cp = log_->IssueCheckpoint();
  ASSERT_EQ(cp.status(), absl::OkStatus());
  EXPECT_EQ(cp->size(), 13u);
  EXPECT_EQ(cp->root(), AsBytes(RootAtOk(13)));
  EXPECT_GT(cp->issued_unix_ms(), 0);

  absl::StatusOr<std::string> body = OpenNote(cp->note(), log_->verifier());
  ASSERT_EQ(body.status(), absl::OkStatus());
  // The verifier a peer would build from the public key accepts it too.
  EXPECT_EQ(OpenNote(cp->note(), *verifier_).status(), absl::OkStatus());
  absl::StatusOr<Checkpoint> parsed = ParseCheckpoint(*body);
  ASSERT_EQ(parsed.status(), absl::OkStatus());
  EXPECT_EQ(parsed->origin, LogOrigin("vault-a"));
  EXPECT_EQ(parsed->size, 13u);
  EXPECT_EQ(parsed->root, RootAtOk(13));
  ReferenceTree ref(StoredLeaves(log_->store()));
  EXPECT_EQ(parsed->root, ref.Root(13));
  EXPECT_EQ(*body, absl::StrCat("vault.audit/vault-a\n13\n", HashToBase64(ref.Root(13)), "\n"));

  // Stored, and what LatestCheckpoint returns.
  ASSERT_TRUE(log_->LatestCheckpoint().has_value());
  EXPECT_EQ(log_->LatestCheckpoint()->note(), cp->note());
  std::optional<StoredCheckpoint> stored = StoredCheckpointOk();
  ASSERT_TRUE(stored.has_value());
  EXPECT_EQ(stored->note(), cp->note());
  EXPECT_EQ(stored->size(), 13u);

  // Another key does not open it.
  absl::StatusOr<capability::PrivateKey> other = capability::PrivateKey::Generate();
  ASSERT_EQ(other.status(), absl::OkStatus());
  absl::StatusOr<NoteVerifier> other_v = NoteVerifier::FromKey("vault-a", other->public_key());
  ASSERT_EQ(other_v.status(), absl::OkStatus());
  EXPECT_EQ(OpenNote(cp->note(), *other_v).status().code(), StatusCode::kNotFound);
}

TEST_F(AuditLogTest, IssueCheckpointTwiceWithoutAppendsReturnsTheSameNote) {
  ASSERT_NO_FATAL_FAILURE(OpenLog());
  EXPECT_EQ(AppendManyOk(0, 3), 0u);
  absl::StatusOr<StoredCheckpoint> a = log_->IssueCheckpoint();
  ASSERT_EQ(a.status(), absl::OkStatus());
  absl::StatusOr<StoredCheckpoint> b = log_->IssueCheckpoint();
  ASSERT_EQ(b.status(), absl::OkStatus());
  EXPECT_EQ(a->note(), b->note());
  EXPECT_EQ(a->issued_unix_ms(), b->issued_unix_ms());

  // After an append: a new checkpoint, consistent with the old one.
  EXPECT_EQ(AppendOk(MakeEntry(3)), 3u);
  absl::StatusOr<StoredCheckpoint> c = log_->IssueCheckpoint();
  ASSERT_EQ(c.status(), absl::OkStatus());
  EXPECT_NE(c->note(), a->note());
  EXPECT_EQ(c->size(), 4u);
  absl::StatusOr<ProofPlan> plan = ConsistencyProofPlan(3, 4);
  ASSERT_EQ(plan.status(), absl::OkStatus());
  absl::StatusOr<std::vector<Hash>> proof = BuildProof(*plan, log_->store().Reader());
  ASSERT_EQ(proof.status(), absl::OkStatus());
  absl::StatusOr<Hash> root3 = HashFromBytes(a->root());
  absl::StatusOr<Hash> root4 = HashFromBytes(c->root());
  ASSERT_TRUE(root3.ok() && root4.ok());
  EXPECT_EQ(VerifyConsistency(3, 4, *proof, *root3, *root4), absl::OkStatus());
}

TEST_F(AuditLogTest, CheckpointOfTheEmptyLog) {
  ASSERT_NO_FATAL_FAILURE(OpenLog());
  absl::StatusOr<StoredCheckpoint> cp = log_->IssueCheckpoint();
  ASSERT_EQ(cp.status(), absl::OkStatus());
  EXPECT_EQ(cp->size(), 0u);
  EXPECT_EQ(cp->root(), AsBytes(RefSha256("")));
  absl::StatusOr<std::string> body = OpenNote(cp->note(), *verifier_);
  ASSERT_EQ(body.status(), absl::OkStatus());
  EXPECT_EQ(*body, absl::StrCat("vault.audit/vault-a\n0\n", HashToBase64(RefSha256("")), "\n"));
}

TEST_F(AuditLogTest, BackgroundCheckpointsCatchUp) {
  ASSERT_NO_FATAL_FAILURE(OpenLog({.vault_name = kVault,
                                   .checkpoint_every_entries = 10,
                                   .checkpoint_interval = absl::Milliseconds(50),
                                   .background_checkpoints = true}));
  for (uint64_t i = 0; i < 25; ++i) ASSERT_EQ(AppendOk(MakeEntry(i)), i);
  const absl::Time deadline = absl::Now() + absl::Seconds(1);
  uint64_t signed_size = 0;
  while (absl::Now() < deadline) {
    std::optional<StoredCheckpoint> cp = log_->LatestCheckpoint();
    signed_size = cp.has_value() ? cp->size() : 0;
    if (signed_size == 25) break;
    absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_EQ(signed_size, 25u);
  std::optional<StoredCheckpoint> cp = log_->LatestCheckpoint();
  ASSERT_TRUE(cp.has_value());
  EXPECT_EQ(cp->root(), AsBytes(RootAtOk(25)));
  absl::StatusOr<std::string> body = OpenNote(cp->note(), *verifier_);
  ASSERT_EQ(body.status(), absl::OkStatus());
  absl::StatusOr<Checkpoint> parsed = ParseCheckpoint(*body);
  ASSERT_EQ(parsed.status(), absl::OkStatus());
  EXPECT_EQ(parsed->size, 25u);
  // Stored too.
  std::optional<StoredCheckpoint> stored = StoredCheckpointOk();
  ASSERT_TRUE(stored.has_value());
  EXPECT_EQ(stored->size(), 25u);
}

TEST_F(AuditLogTest, BackgroundCheckpointAfterEveryNEntriesWithoutWaitingForTheInterval) {
  // A long interval: only the entry count can trigger a checkpoint within the test.
  ASSERT_NO_FATAL_FAILURE(OpenLog({.vault_name = kVault,
                                   .checkpoint_every_entries = 10,
                                   .checkpoint_interval = absl::Seconds(60),
                                   .background_checkpoints = true}));
  EXPECT_EQ(AppendManyOk(0, 12), 0u);
  const absl::Time deadline = absl::Now() + absl::Seconds(2);
  uint64_t signed_size = 0;
  while (absl::Now() < deadline) {
    std::optional<StoredCheckpoint> cp = log_->LatestCheckpoint();
    signed_size = cp.has_value() ? cp->size() : 0;
    if (signed_size != 0) break;
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(signed_size, 12u);
}

TEST_F(AuditLogTest, CloseSignsAFinalCheckpointThenRefusesAppends) {
  ASSERT_NO_FATAL_FAILURE(OpenLog());
  EXPECT_EQ(AppendManyOk(0, 6), 0u);
  log_->Close();
  ASSERT_TRUE(log_->LatestCheckpoint().has_value());
  EXPECT_EQ(log_->LatestCheckpoint()->size(), 6u);
  std::optional<StoredCheckpoint> stored = StoredCheckpointOk();
  ASSERT_TRUE(stored.has_value());
  EXPECT_EQ(stored->size(), 6u);

  EXPECT_EQ(log_->Append(MakeEntry(6)).status().code(), StatusCode::kFailedPrecondition);
  std::vector<AuditEntry> more = MakeEntries(6, 2);
  EXPECT_EQ(log_->AppendMany(absl::MakeSpan(more)).status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(log_->size(), 6u);
  log_->Close();  // idempotent
  EXPECT_EQ(log_->size(), 6u);
  LogStore store = Store();
  EXPECT_EQ(store.ReadEntry(6).status().code(), StatusCode::kNotFound);
  absl::StatusOr<vault::v1::LogHead> head = store.ReadHead();
  ASSERT_EQ(head.status(), absl::OkStatus());
  EXPECT_EQ(head->size(), 6u);
}

TEST_F(AuditLogTest, CloseWithBackgroundCheckpointsStopsPromptly) {
  ASSERT_NO_FATAL_FAILURE(OpenLog({.vault_name = kVault,
                                   .checkpoint_every_entries = 1000,
                                   .checkpoint_interval = absl::Seconds(60),
                                   .background_checkpoints = true}));
  EXPECT_EQ(AppendManyOk(0, 3), 0u);
  const absl::Time start = absl::Now();
  log_->Close();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  ASSERT_TRUE(log_->LatestCheckpoint().has_value());
  EXPECT_EQ(log_->LatestCheckpoint()->size(), 3u);
  EXPECT_EQ(log_->Append(MakeEntry(3)).status().code(), StatusCode::kFailedPrecondition);
}

// ---- Proofs served from the store --------------------------------------------------------------

class AuditLogProofTest : public AuditLogTest {
 protected:
  static constexpr uint64_t kSize = 300;
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(AuditLogTest::SetUp());
    ASSERT_NO_FATAL_FAILURE(OpenLog());
    ASSERT_EQ(AppendManyOk(0, 100), 0u);
    for (uint64_t i = 100; i < 110; ++i) ASSERT_EQ(AppendOk(MakeEntry(i)), i);
    ASSERT_EQ(AppendManyOk(110, kSize - 110), 110u);
    ASSERT_EQ(log_->size(), kSize);
    ref_.emplace(StoredLeaves(log_->store()));
    ASSERT_EQ(ref_->size(), kSize);
    for (uint64_t i = 0; i < kSize; i += 37) {
      ASSERT_EQ(ref_->leaf(i), RefLeafHash(EntryBytesOk(i)));
    }
  }

  std::vector<std::pair<uint64_t, uint64_t>> Pairs(uint64_t exhaustive_up_to, int random,
                                                   bool allow_equal) {
    std::vector<std::pair<uint64_t, uint64_t>> out;
    for (uint64_t n = 1; n <= exhaustive_up_to; ++n) {
      for (uint64_t i = 0; i < n + (allow_equal ? 1 : 0); ++i) out.emplace_back(i, n);
    }
    std::mt19937_64 rng(42);
    for (int k = 0; k < random; ++k) {
      const uint64_t n = 1 + rng() % kSize;
      out.emplace_back(rng() % (n + (allow_equal ? 1 : 0)), n);
    }
    // The edges.
    out.emplace_back(0, kSize);
    out.emplace_back(kSize - 1, kSize);
    out.emplace_back(255, 256);
    out.emplace_back(256, 257);
    return out;
  }

  std::optional<ReferenceTree> ref_;
};

TEST_F(AuditLogProofTest, RootsMatchTheReference) {
  for (uint64_t n = 0; n <= kSize; ++n) {
    ASSERT_EQ(RootAtOk(n), ref_->Root(n)) << n;
  }
}

TEST_F(AuditLogProofTest, InclusionProofsVerify) {
  const NodeReader reader = log_->store().Reader();
  int checked = 0;
  for (auto [i, n] : Pairs(64, 300, /*allow_equal=*/false)) {
    absl::StatusOr<ProofPlan> plan = InclusionProofPlan(i, n);
    ASSERT_EQ(plan.status(), absl::OkStatus()) << i << " " << n;
    absl::StatusOr<std::vector<Hash>> proof = BuildProof(*plan, reader);
    ASSERT_EQ(proof.status(), absl::OkStatus()) << i << " " << n;
    // Exactly the RFC 6962 audit path.
    ASSERT_EQ(*proof, ref_->Path(i, 0, n)) << i << " " << n;
    const Hash root = RootAtOk(n);
    ASSERT_EQ(VerifyInclusion(i, n, RefLeafHash(EntryBytesOk(i)), *proof, root), absl::OkStatus())
        << i << " " << n;
    // Not for a neighbouring leaf (when the two leaves differ).
    if (n > 1) {
      const uint64_t j = i + 1 < n ? i + 1 : i - 1;
      EXPECT_EQ(VerifyInclusion(i, n, ref_->leaf(j), *proof, root).code(),
                StatusCode::kUnauthenticated)
          << i << " " << n;
    }
    ++checked;
  }
  EXPECT_GT(checked, 2000);
  EXPECT_EQ(InclusionProofPlan(kSize, kSize).status().code(), StatusCode::kInvalidArgument);
  // A proof in a tree larger than what is stored cannot be built.
  absl::StatusOr<ProofPlan> beyond = InclusionProofPlan(0, kSize + 1);
  ASSERT_EQ(beyond.status(), absl::OkStatus());
  EXPECT_EQ(BuildProof(*beyond, reader).status().code(), StatusCode::kDataLoss);
}

TEST_F(AuditLogProofTest, ConsistencyProofsVerify) {
  const NodeReader reader = log_->store().Reader();
  int checked = 0;
  for (auto [m, n] : Pairs(40, 300, /*allow_equal=*/true)) {
    if (m == 0) continue;  // size1 == 0 is not a consistency proof
    absl::StatusOr<ProofPlan> plan = ConsistencyProofPlan(m, n);
    ASSERT_EQ(plan.status(), absl::OkStatus()) << m << " " << n;
    absl::StatusOr<std::vector<Hash>> proof = BuildProof(*plan, reader);
    ASSERT_EQ(proof.status(), absl::OkStatus()) << m << " " << n;
    ASSERT_EQ(*proof, ref_->Consistency(m, n)) << m << " " << n;
    ASSERT_EQ(VerifyConsistency(m, n, *proof, RootAtOk(m), RootAtOk(n)), absl::OkStatus())
        << m << " " << n;
    if (m < n) {
      // Not between the roots of two different trees.
      EXPECT_EQ(VerifyConsistency(m, n, *proof, ref_->Root(m - 1), RootAtOk(n)).code(),
                StatusCode::kUnauthenticated)
          << m << " " << n;
    }
    ++checked;
  }
  EXPECT_GT(checked, 1000);
  EXPECT_EQ(ConsistencyProofPlan(0, 5).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ConsistencyProofPlan(6, 5).status().code(), StatusCode::kInvalidArgument);
}

// ---- LogStore reads ----------------------------------------------------------------------------

TEST_F(AuditLogTest, ReadEntriesPagesByCountAndBytes) {
  ASSERT_NO_FATAL_FAILURE(OpenLog());
  EXPECT_EQ(AppendManyOk(0, 20), 0u);
  const LogStore& store = log_->store();
  std::vector<std::string> want;
  for (uint64_t i = 0; i < 20; ++i) want.push_back(EntryBytesOk(i));

  absl::StatusOr<std::vector<std::string>> all = store.ReadEntries(0, 20, 100, 1 << 20);
  ASSERT_EQ(all.status(), absl::OkStatus());
  EXPECT_EQ(*all, want);

  absl::StatusOr<std::vector<std::string>> page = store.ReadEntries(3, 20, 5, 1 << 20);
  ASSERT_EQ(page.status(), absl::OkStatus());
  EXPECT_EQ(*page, std::vector<std::string>(want.begin() + 3, want.begin() + 8));

  page = store.ReadEntries(18, 20, 100, 1 << 20);
  ASSERT_EQ(page.status(), absl::OkStatus());
  EXPECT_EQ(*page, std::vector<std::string>(want.begin() + 18, want.end()));

  // At least one entry even when it alone exceeds the byte budget; then what fits.
  page = store.ReadEntries(4, 20, 100, 1);
  ASSERT_EQ(page.status(), absl::OkStatus());
  EXPECT_EQ(*page, std::vector<std::string>{want[4]});
  page = store.ReadEntries(4, 20, 100, want[4].size() + want[5].size());
  ASSERT_EQ(page.status(), absl::OkStatus());
  EXPECT_EQ(*page, std::vector<std::string>(want.begin() + 4, want.begin() + 6));

  page = store.ReadEntries(7, 7, 100, 1 << 20);
  ASSERT_EQ(page.status(), absl::OkStatus());
  EXPECT_TRUE(page->empty());

  // Beyond the end, and across a gap.
  EXPECT_EQ(store.ReadEntries(15, 25, 100, 1 << 20).status().code(), StatusCode::kDataLoss);
  DeleteRaw(db_.get(), store.entries_handle(), store.EntryKey(10));
  EXPECT_EQ(store.ReadEntries(8, 12, 100, 1 << 20).status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(store.ReadEntries(10, 12, 100, 1 << 20).status().code(), StatusCode::kDataLoss);
}

TEST_F(AuditLogTest, LogsOfDifferentVaultsDoNotMix) {
  ASSERT_NO_FATAL_FAILURE(OpenLog());
  // "vault-a" and "vault-ab" share a prefix; "vault-" is a prefix of both.
  absl::StatusOr<std::unique_ptr<AuditLog>> other = AuditLog::Open(
      db_.get(), &*key_, {.vault_name = "vault-ab", .background_checkpoints = false});
  ASSERT_EQ(other.status(), absl::OkStatus());
  absl::StatusOr<std::unique_ptr<AuditLog>> shorter =
      AuditLog::Open(db_.get(), &*key_, {.vault_name = "vault-", .background_checkpoints = false});
  ASSERT_EQ(shorter.status(), absl::OkStatus());
  EXPECT_EQ(AppendManyOk(0, 5), 0u);
  std::vector<AuditEntry> es = MakeEntries(0, 7, "ab-");
  ASSERT_EQ((*other)->AppendMany(absl::MakeSpan(es)).status(), absl::OkStatus());
  std::vector<AuditEntry> es2 = MakeEntries(0, 3, "short-");
  ASSERT_EQ((*shorter)->AppendMany(absl::MakeSpan(es2)).status(), absl::OkStatus());

  EXPECT_EQ(StoredLeaves(log_->store()).size(), 5u);
  EXPECT_EQ(StoredLeaves((*other)->store()).size(), 7u);
  EXPECT_EQ(StoredLeaves((*shorter)->store()).size(), 3u);
  VerifyReport a = VerifyStoredLog(log_->store(), "vault-a", log_->verifier());
  EXPECT_TRUE(a.ok) << a.error;
  EXPECT_EQ(a.entries_checked, 5u);
  VerifyReport ab = VerifyStoredLog((*other)->store(), "vault-ab", (*other)->verifier());
  EXPECT_TRUE(ab.ok) << ab.error;
  EXPECT_EQ(ab.entries_checked, 7u);
  VerifyReport s = VerifyStoredLog((*shorter)->store(), "vault-", (*shorter)->verifier());
  EXPECT_TRUE(s.ok) << s.error;
  EXPECT_EQ(s.entries_checked, 3u);
  EXPECT_EQ(EntryOk(4).subject(), "subject-4");
}

// Regression (audit/log_store.cc, LogStore::ReadEntries): a malformed entry record (value shorter
// than the 32-byte leaf hash) is returned as if its raw value were the entry's bytes, while
// ReadEntry reports DATA_LOSS for the same record. ScanEntries hands such records over with an
// empty leaf hash view precisely so callers can tell; ReadEntries ignores it (line ~108) and serves
// the garbage to peers (GetEntries).
TEST_F(AuditLogTest, ReadEntriesReportsAMalformedRecord) {
  ASSERT_NO_FATAL_FAILURE(OpenLog());
  EXPECT_EQ(AppendManyOk(0, 4), 0u);
  const LogStore& store = log_->store();
  PutRaw(db_.get(), store.entries_handle(), store.EntryKey(2), "short");
  EXPECT_EQ(store.ReadEntry(2).status().code(), StatusCode::kDataLoss);
  absl::StatusOr<std::vector<std::string>> page = store.ReadEntries(0, 4, 100, 1 << 20);
  EXPECT_EQ(page.status().code(), StatusCode::kDataLoss)
      << "returned " << (page.ok() ? page->size() : 0) << " entries, entry 2 = \""
      << (page.ok() && page->size() > 2 ? (*page)[2] : "") << "\"";
}

}  // namespace
}  // namespace vault::audit
