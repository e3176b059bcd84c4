// Tests of Mirror (audit/mirror.h): a peer's AuditLog "vault-b" in one database, this vault's
// Mirror of it in another, and PeerLog implementations over the peer's log (honest, lying,
// failing).
#include "audit/mirror.h"

#include <algorithm>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "audit/log_test_fixture.h"
#include "audit/verify.h"

namespace vault::audit {
namespace {

using ::vault::v1::MirrorStatus;

constexpr char kPeer[] = "vault-b";

// PeerLog over an AuditLog, as the peer's Audit service serves it: the latest checkpoint (tests
// issue checkpoints explicitly), pages of at most `page` entries, proofs from the store.
class AuditLogPeer : public PeerLog {
 public:
  explicit AuditLogPeer(const std::unique_ptr<AuditLog>* log, size_t page = 100)
      : log_(log), page_(page) {}

  absl::StatusOr<std::string> Checkpoint() override {
    ++checkpoint_calls;
    std::optional<StoredCheckpoint> cp = (*log_)->LatestCheckpoint();
    if (!cp.has_value()) return absl::NotFoundError("no checkpoint yet");
    return cp->note();
  }
  absl::StatusOr<std::vector<std::string>> Entries(uint64_t from, uint64_t to) override {
    ++entries_calls;
    requested.emplace_back(from, to);
    return (*log_)->store().ReadEntries(from, to, page_, 1 << 20);
  }
  absl::StatusOr<std::vector<Hash>> Consistency(uint64_t size1, uint64_t size2) override {
    ++consistency_calls;
    absl::StatusOr<ProofPlan> plan = ConsistencyProofPlan(size1, size2);
    if (!plan.ok()) return plan.status();
    return BuildProof(*plan, (*log_)->store().Reader());
  }

  int calls() const { return checkpoint_calls + entries_calls + consistency_calls; }

  int checkpoint_calls = 0;
  int entries_calls = 0;
  int consistency_calls = 0;
  std::vector<std::pair<uint64_t, uint64_t>> requested;

 private:
  const std::unique_ptr<AuditLog>* const log_;
  const size_t page_;
};

// Forwards to another PeerLog, optionally replacing its checkpoint, flipping a byte of one entry
// or failing every call.
class TamperingPeer : public PeerLog {
 public:
  explicit TamperingPeer(PeerLog* inner) : inner_(inner) {}

  absl::StatusOr<std::string> Checkpoint() override {
    if (!fail.ok()) return fail;
    if (checkpoint.has_value()) return *checkpoint;
    return inner_->Checkpoint();
  }
  absl::StatusOr<std::vector<std::string>> Entries(uint64_t from, uint64_t to) override {
    if (!fail.ok()) return fail;
    absl::StatusOr<std::vector<std::string>> page = inner_->Entries(from, to);
    if (page.ok() && flip.has_value() && *flip >= from && *flip < from + page->size()) {
      std::string& e = (*page)[*flip - from];
      const size_t at = e.find("test.action.");
      e[at] ^= 0x20;  // still a valid entry, but not the one the peer signed
    }
    return page;
  }
  absl::StatusOr<std::vector<Hash>> Consistency(uint64_t size1, uint64_t size2) override {
    if (!fail.ok()) return fail;
    return inner_->Consistency(size1, size2);
  }

  std::optional<std::string> checkpoint;
  std::optional<uint64_t> flip;
  absl::Status fail;

 private:
  PeerLog* const inner_;
};

// A signed log of arbitrary entries, held in memory (to make a peer sign a log that breaks the
// entry rules, which AuditLog never does).
class MemoryPeer : public PeerLog {
 public:
  MemoryPeer(const capability::PrivateKey* key, std::vector<std::string> entries)
      : key_(key), entries_(std::move(entries)) {
    for (const std::string& e : entries_) {
      frontier_.Append(RefLeafHash(e), [&](NodeId id, const Hash& h) {
        nodes_[{id.level, id.index}] = h;
      });
    }
  }

  absl::StatusOr<std::string> Checkpoint() override {
    return SignNote(
        FormatCheckpoint(
            {.origin = LogOrigin(kPeer), .size = frontier_.size(), .root = frontier_.Root()}),
        kPeer, *key_);
  }
  absl::StatusOr<std::vector<std::string>> Entries(uint64_t from, uint64_t to) override {
    if (from >= entries_.size()) return absl::OutOfRangeError("beyond the log");
    to = std::min<uint64_t>({to, entries_.size(), from + 100});
    return std::vector<std::string>(entries_.begin() + from, entries_.begin() + to);
  }
  absl::StatusOr<std::vector<Hash>> Consistency(uint64_t size1, uint64_t size2) override {
    absl::StatusOr<ProofPlan> plan = ConsistencyProofPlan(size1, size2);
    if (!plan.ok()) return plan.status();
    return BuildProof(*plan,
                      [this](absl::Span<const NodeId> ids) -> absl::StatusOr<std::vector<Hash>> {
                        std::vector<Hash> out;
                        for (const NodeId& id : ids) {
                          auto it = nodes_.find({id.level, id.index});
                          if (it == nodes_.end()) return absl::DataLossError("no such node");
                          out.push_back(it->second);
                        }
                        return out;
                      });
  }

 private:
  const capability::PrivateKey* const key_;
  const std::vector<std::string> entries_;
  Frontier frontier_;
  std::map<std::pair<uint8_t, uint64_t>, Hash> nodes_;
};

// Entries as AuditLog writes them for vault-b, built by hand.
std::vector<std::string> HandMadeEntries(uint64_t n,
                                         const std::function<void(AuditEntry&)>& edit_5) {
  std::vector<std::string> out;
  Hash prev{};
  for (uint64_t i = 0; i < n; ++i) {
    AuditEntry e = MakeEntry(i);
    e.set_sequence(i);
    e.set_time_unix_micros(1700000000000000 + static_cast<int64_t>(i));
    e.set_vault(kPeer);
    e.set_prev_hash(std::string(AsBytes(prev)));
    if (i == 5) edit_5(e);
    out.push_back(e.SerializeAsString());
    prev = RefLeafHash(out.back());
  }
  return out;
}

class MirrorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<capability::PrivateKey> key = capability::PrivateKey::Generate();
    ASSERT_EQ(key.status(), absl::OkStatus());
    peer_key_.emplace(std::move(*key));
    absl::StatusOr<NoteVerifier> v = NoteVerifier::FromKey(kPeer, peer_key_->public_key());
    ASSERT_EQ(v.status(), absl::OkStatus());
    verifier_.emplace(std::move(*v));
    ASSERT_NO_FATAL_FAILURE(OpenPeer());
    absl::StatusOr<std::unique_ptr<storage::Database>> db =
        OpenAuditDatabase(mirror_dir_.Path("db"));
    ASSERT_EQ(db.status(), absl::OkStatus());
    mirror_db_ = std::move(*db);
    ASSERT_NO_FATAL_FAILURE(OpenMirror());
  }
  void TearDown() override {
    mirror_.reset();
    mirror_db_.reset();
    peer_log_.reset();
    peer_db_.reset();
  }

  void OpenPeer() {
    absl::StatusOr<std::unique_ptr<storage::Database>> db = OpenAuditDatabase(peer_dir_.Path("db"));
    ASSERT_EQ(db.status(), absl::OkStatus());
    peer_db_ = std::move(*db);
    absl::StatusOr<std::unique_ptr<AuditLog>> log = AuditLog::Open(
        peer_db_.get(), &*peer_key_, {.vault_name = kPeer, .background_checkpoints = false});
    ASSERT_EQ(log.status(), absl::OkStatus());
    peer_log_ = std::move(*log);
  }
  // The peer loses its database and starts a fresh log with the same key and name.
  void WipePeer() {
    peer_log_.reset();
    peer_db_.reset();
    std::filesystem::remove_all(peer_dir_.Path("db"));
    ASSERT_NO_FATAL_FAILURE(OpenPeer());
  }
  void OpenMirror() {
    alarms_.clear();
    mirror_ = std::make_unique<Mirror>(mirror_db_.get(), kPeer, *verifier_,
                                       [this](const MirrorStatus& s) { alarms_.push_back(s); });
    ASSERT_EQ(mirror_->Load(), absl::OkStatus());
  }

  // Appends n entries to the peer (first sequence number `first`) and signs a checkpoint.
  std::string PeerAppendAndSign(uint64_t first, uint64_t n, absl::string_view tag = "") {
    std::vector<AuditEntry> es = MakeEntries(first, n, tag);
    absl::StatusOr<uint64_t> seq = peer_log_->AppendMany(absl::MakeSpan(es));
    EXPECT_EQ(seq.status(), absl::OkStatus());
    EXPECT_EQ(seq.value_or(0), first);
    absl::StatusOr<StoredCheckpoint> cp = peer_log_->IssueCheckpoint();
    EXPECT_EQ(cp.status(), absl::OkStatus());
    EXPECT_EQ(cp.ok() ? cp->size() : 0, first + n);
    return cp.ok() ? cp->note() : "";
  }

  // The mirror's stored copy equals the peer's log, entry by entry.
  void ExpectMirrorHoldsPeerEntries(uint64_t n) {
    absl::StatusOr<std::vector<std::string>> mine =
        mirror_->store().ReadEntries(0, n, n + 1, size_t{1} << 30);
    ASSERT_EQ(mine.status(), absl::OkStatus());
    absl::StatusOr<std::vector<std::string>> theirs =
        peer_log_->store().ReadEntries(0, n, n + 1, size_t{1} << 30);
    ASSERT_EQ(theirs.status(), absl::OkStatus());
    EXPECT_EQ(*mine, *theirs);
    absl::StatusOr<vault::v1::LogHead> head = mirror_->store().ReadHead();
    ASSERT_EQ(head.status(), absl::OkStatus());
    EXPECT_EQ(head->size(), n);
  }

  void ExpectForked(const std::string& held_note, const std::string& new_note) {
    MirrorStatus s = mirror_->status();
    EXPECT_EQ(s.state(), MirrorStatus::FORKED);
    ASSERT_EQ(s.evidence_size(), 2);
    EXPECT_EQ(s.evidence(0), held_note);
    EXPECT_EQ(s.evidence(1), new_note);
    for (const std::string& note : s.evidence()) {
      EXPECT_EQ(OpenNote(note, *verifier_).status(), absl::OkStatus());
    }
    EXPECT_GT(s.detected_unix_ms(), 0);
    EXPECT_THAT(s.last_error(), HasSubstr("fork"));
    ASSERT_EQ(alarms_.size(), 1u);
    EXPECT_EQ(alarms_[0].state(), MirrorStatus::FORKED);
    EXPECT_EQ(alarms_[0].evidence_size(), 2);
  }

  // After a fork or an invalid log: Sync refuses without calling the peer, also after a restart.
  void ExpectNoLongerFollowed(MirrorStatus::State state) {
    AuditLogPeer counting(&peer_log_);
    EXPECT_EQ(mirror_->Sync(counting).code(), StatusCode::kFailedPrecondition);
    EXPECT_EQ(mirror_->Sync(counting).code(), StatusCode::kFailedPrecondition);
    EXPECT_EQ(counting.calls(), 0);
    EXPECT_EQ(mirror_->status().state(), state);
    const size_t alarms = alarms_.size();
    EXPECT_EQ(alarms, 1u);
    ASSERT_NO_FATAL_FAILURE(OpenMirror());  // a restart
    EXPECT_EQ(mirror_->status().state(), state);
    EXPECT_EQ(mirror_->Sync(counting).code(), StatusCode::kFailedPrecondition);
    EXPECT_EQ(counting.calls(), 0);
    EXPECT_TRUE(alarms_.empty());
  }

  common::testing::TempDir peer_dir_{"audit_mirror_peer"};
  common::testing::TempDir mirror_dir_{"audit_mirror"};
  std::optional<capability::PrivateKey> peer_key_;
  std::optional<NoteVerifier> verifier_;
  std::unique_ptr<storage::Database> peer_db_;
  std::unique_ptr<AuditLog> peer_log_;
  std::unique_ptr<storage::Database> mirror_db_;
  std::unique_ptr<Mirror> mirror_;
  std::vector<MirrorStatus> alarms_;
};

// ---- Following ---------------------------------------------------------------------------------

TEST_F(MirrorTest, FreshMirror) {
  MirrorStatus s = mirror_->status();
  EXPECT_EQ(s.peer(), kPeer);
  EXPECT_EQ(s.state(), MirrorStatus::FOLLOWING);
  EXPECT_EQ(s.entries(), 0u);
  EXPECT_EQ(mirror_->peer(), kPeer);
  EXPECT_EQ(mirror_->store().log(), kPeer);
}

TEST_F(MirrorTest, CatchesUpInPagesVerifiesAdvancesAndResumes) {
  const std::string note = PeerAppendAndSign(0, 1000);
  AuditLogPeer peer(&peer_log_, /*page=*/100);
  ASSERT_EQ(mirror_->Sync(peer), absl::OkStatus());
  MirrorStatus s = mirror_->status();
  EXPECT_EQ(s.state(), MirrorStatus::FOLLOWING);
  EXPECT_EQ(s.entries(), 1000u);
  EXPECT_EQ(s.checkpoint_size(), 1000u);
  EXPECT_EQ(s.checkpoint_note(), note);
  EXPECT_EQ(s.last_error(), "");
  EXPECT_GT(s.last_success_unix_ms(), 0);
  EXPECT_EQ(peer.entries_calls, 10);  // pages of 100
  ASSERT_EQ(peer.requested.size(), 10u);
  for (size_t i = 0; i < 10; ++i) EXPECT_EQ(peer.requested[i].first, i * 100);
  EXPECT_TRUE(alarms_.empty());
  ASSERT_NO_FATAL_FAILURE(ExpectMirrorHoldsPeerEntries(1000));

  VerifyReport r = VerifyStoredLog(mirror_->store(), kPeer, *verifier_);
  EXPECT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.entries_checked, 1000u);
  EXPECT_EQ(r.checkpoint_size, 1000u);
  // The mirror's tree is the peer's.
  absl::StatusOr<Hash> mine = RootAt(1000, mirror_->store().Reader());
  ASSERT_EQ(mine.status(), absl::OkStatus());
  absl::StatusOr<Hash> theirs = RootAt(1000, peer_log_->store().Reader());
  ASSERT_EQ(theirs.status(), absl::OkStatus());
  EXPECT_EQ(*mine, *theirs);

  // In step: another round fetches nothing.
  peer.requested.clear();
  ASSERT_EQ(mirror_->Sync(peer), absl::OkStatus());
  EXPECT_TRUE(peer.requested.empty());
  EXPECT_EQ(mirror_->status().entries(), 1000u);

  // More entries, a new checkpoint: the next round advances (consistency-checked).
  const int consistency_before = peer.consistency_calls;
  const std::string note2 = PeerAppendAndSign(1000, 250);
  ASSERT_EQ(mirror_->Sync(peer), absl::OkStatus());
  EXPECT_GT(peer.consistency_calls, consistency_before);
  s = mirror_->status();
  EXPECT_EQ(s.state(), MirrorStatus::FOLLOWING);
  EXPECT_EQ(s.entries(), 1250u);
  EXPECT_EQ(s.checkpoint_size(), 1250u);
  EXPECT_EQ(s.checkpoint_note(), note2);
  ASSERT_NO_FATAL_FAILURE(ExpectMirrorHoldsPeerEntries(1250));
  r = VerifyStoredLog(mirror_->store(), kPeer, *verifier_);
  EXPECT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.entries_checked, 1250u);

  // Entries appended but not yet signed are not fetched.
  std::vector<AuditEntry> unsigned_entries = MakeEntries(1250, 5);
  ASSERT_EQ(peer_log_->AppendMany(absl::MakeSpan(unsigned_entries)).status(), absl::OkStatus());
  ASSERT_EQ(mirror_->Sync(peer), absl::OkStatus());
  EXPECT_EQ(mirror_->status().entries(), 1250u);

  // A restart resumes where it was.
  ASSERT_NO_FATAL_FAILURE(OpenMirror());
  s = mirror_->status();
  EXPECT_EQ(s.state(), MirrorStatus::FOLLOWING);
  EXPECT_EQ(s.entries(), 1250u);
  EXPECT_EQ(s.checkpoint_size(), 1250u);
  EXPECT_EQ(s.checkpoint_note(), note2);
  PeerAppendAndSign(1255, 45);
  peer.requested.clear();
  ASSERT_EQ(mirror_->Sync(peer), absl::OkStatus());
  ASSERT_FALSE(peer.requested.empty());
  EXPECT_EQ(peer.requested.front().first, 1250u);  // not from 0
  EXPECT_EQ(mirror_->status().entries(), 1300u);
  ASSERT_NO_FATAL_FAILURE(ExpectMirrorHoldsPeerEntries(1300));
  r = VerifyStoredLog(mirror_->store(), kPeer, *verifier_);
  EXPECT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.entries_checked, 1300u);
  EXPECT_TRUE(alarms_.empty());
}

TEST_F(MirrorTest, EmptyPeerLog) {
  ASSERT_EQ(peer_log_->IssueCheckpoint().status(), absl::OkStatus());
  AuditLogPeer peer(&peer_log_);
  ASSERT_EQ(mirror_->Sync(peer), absl::OkStatus());
  EXPECT_EQ(mirror_->status().state(), MirrorStatus::FOLLOWING);
  EXPECT_EQ(mirror_->status().entries(), 0u);
  EXPECT_EQ(peer.entries_calls, 0);
  // Then entries.
  PeerAppendAndSign(0, 10);
  ASSERT_EQ(mirror_->Sync(peer), absl::OkStatus());
  EXPECT_EQ(mirror_->status().entries(), 10u);
  ASSERT_NO_FATAL_FAILURE(ExpectMirrorHoldsPeerEntries(10));
}

TEST_F(MirrorTest, MaxEntriesCapsOneRound) {
  PeerAppendAndSign(0, 1000);
  AuditLogPeer peer(&peer_log_, /*page=*/100);
  ASSERT_EQ(mirror_->Sync(peer, /*max_entries=*/250), absl::OkStatus());
  MirrorStatus s = mirror_->status();
  EXPECT_EQ(s.state(), MirrorStatus::FOLLOWING);
  EXPECT_EQ(s.entries(), 250u);
  EXPECT_EQ(s.checkpoint_size(), 1000u);
  // Pages of 100, 100, then the 50 that are left of the budget.
  ASSERT_EQ(peer.requested.size(), 3u);
  EXPECT_EQ(peer.requested[0], std::make_pair(uint64_t{0}, uint64_t{250}));
  EXPECT_EQ(peer.requested[1], std::make_pair(uint64_t{100}, uint64_t{250}));
  EXPECT_EQ(peer.requested[2], std::make_pair(uint64_t{200}, uint64_t{250}));
  ASSERT_NO_FATAL_FAILURE(ExpectMirrorHoldsPeerEntries(250));

  ASSERT_EQ(mirror_->Sync(peer, /*max_entries=*/700), absl::OkStatus());
  EXPECT_EQ(mirror_->status().entries(), 950u);
  ASSERT_EQ(mirror_->Sync(peer, /*max_entries=*/700), absl::OkStatus());
  EXPECT_EQ(mirror_->status().entries(), 1000u);
  ASSERT_NO_FATAL_FAILURE(ExpectMirrorHoldsPeerEntries(1000));
  VerifyReport r = VerifyStoredLog(mirror_->store(), kPeer, *verifier_);
  EXPECT_TRUE(r.ok) << r.error;
}

// A mirror that is catching up legitimately holds a checkpoint larger than its entries
// (StoredCheckpoint in audit.proto). Verified as a mirror it is healthy and marked catching up;
// the same records verified as an own log are short.
TEST_F(MirrorTest, MirrorCatchingUpVerifies) {
  PeerAppendAndSign(0, 1000);
  AuditLogPeer peer(&peer_log_, /*page=*/100);
  ASSERT_EQ(mirror_->Sync(peer, /*max_entries=*/250), absl::OkStatus());
  ASSERT_EQ(mirror_->status().entries(), 250u);
  VerifyReport r = VerifyStoredLog(mirror_->store(), kPeer, *verifier_, /*is_mirror=*/true);
  EXPECT_TRUE(r.ok) << "first_bad " << r.first_bad.value_or(~uint64_t{0}) << ": " << r.error;
  EXPECT_TRUE(r.catching_up);
  EXPECT_EQ(r.entries_checked, 250u);
  VerifyReport own = VerifyStoredLog(mirror_->store(), kPeer, *verifier_);
  EXPECT_FALSE(own.ok);
  EXPECT_EQ(own.first_bad, 250u);
}

TEST_F(MirrorTest, OlderCheckpointConsistentWithTheHeldOneIsNotAFork) {
  const std::string old_note = PeerAppendAndSign(0, 300);
  const std::string new_note = PeerAppendAndSign(300, 700);
  AuditLogPeer honest(&peer_log_);
  TamperingPeer stale(&honest);

  // Held: 1000 with only 200 entries fetched. A stale 300 (not yet held) is checked with a
  // consistency proof from the peer.
  ASSERT_EQ(mirror_->Sync(honest, /*max_entries=*/200), absl::OkStatus());
  EXPECT_EQ(mirror_->status().entries(), 200u);
  stale.checkpoint = old_note;
  const int proofs = honest.consistency_calls;
  ASSERT_EQ(mirror_->Sync(stale), absl::OkStatus());
  EXPECT_GT(honest.consistency_calls, proofs);
  MirrorStatus s = mirror_->status();
  EXPECT_EQ(s.state(), MirrorStatus::FOLLOWING);
  EXPECT_EQ(s.checkpoint_size(), 1000u);  // the held checkpoint is kept
  EXPECT_EQ(s.checkpoint_note(), new_note);
  EXPECT_EQ(s.entries(), 1000u);  // and the round still catches up to it

  // Held entries cover 300 now: checked against the mirror's own tree.
  ASSERT_EQ(mirror_->Sync(stale), absl::OkStatus());
  EXPECT_EQ(mirror_->status().state(), MirrorStatus::FOLLOWING);
  EXPECT_TRUE(alarms_.empty());
}

// ---- Forks -------------------------------------------------------------------------------------

class MirrorForkTest : public MirrorTest, public ::testing::WithParamInterface<uint64_t> {};

// The peer's log is rewritten after its checkpoint of 1000 was mirrored: it loses its database
// and starts over with the same key, signing a different history of GetParam() entries.
TEST_P(MirrorForkTest, RewrittenPeerLogIsAFork) {
  const std::string held = PeerAppendAndSign(0, 1000);
  {
    AuditLogPeer peer(&peer_log_);
    ASSERT_EQ(mirror_->Sync(peer), absl::OkStatus());
    ASSERT_EQ(mirror_->status().entries(), 1000u);
  }
  ASSERT_NO_FATAL_FAILURE(WipePeer());
  const std::string forked = PeerAppendAndSign(0, GetParam(), "other-history-");
  ASSERT_NE(forked, held);

  AuditLogPeer peer(&peer_log_);
  absl::Status s = mirror_->Sync(peer);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(s.message(), HasSubstr("forked"));
  ASSERT_NO_FATAL_FAILURE(ExpectForked(held, forked));
  EXPECT_EQ(peer.entries_calls, 0);  // nothing of the forked history is fetched
  MirrorStatus st = mirror_->status();
  EXPECT_EQ(st.entries(), 1000u);
  EXPECT_EQ(st.checkpoint_size(), 1000u);
  EXPECT_EQ(st.checkpoint_note(), held);
  // The mirror's copy is untouched and still verifies.
  VerifyReport r = VerifyStoredLog(mirror_->store(), kPeer, *verifier_);
  EXPECT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.entries_checked, 1000u);
  ASSERT_NO_FATAL_FAILURE(ExpectNoLongerFollowed(MirrorStatus::FORKED));
  // The evidence survives the restart.
  st = mirror_->status();
  ASSERT_EQ(st.evidence_size(), 2);
  EXPECT_EQ(st.evidence(0), held);
  EXPECT_EQ(st.evidence(1), forked);
}

INSTANTIATE_TEST_SUITE_P(NewSize, MirrorForkTest, ::testing::Values(1500, 1000, 500, 1),
                         [](const ::testing::TestParamInfo<uint64_t>& info) {
                           return info.param > 1000    ? "Larger"
                                  : info.param == 1000 ? "Equal"
                                  : info.param > 1     ? "Smaller"
                                                       : "One";
                         });

TEST_F(MirrorTest, ForkOfACheckpointNotYetCaughtUpTo) {
  // Held: a checkpoint of 1000 with 200 entries fetched; the rewritten peer's checkpoint is
  // larger: the consistency proof it serves cannot verify against the held root.
  const std::string held = PeerAppendAndSign(0, 1000);
  {
    AuditLogPeer peer(&peer_log_);
    ASSERT_EQ(mirror_->Sync(peer, /*max_entries=*/200), absl::OkStatus());
  }
  ASSERT_NO_FATAL_FAILURE(WipePeer());
  const std::string forked = PeerAppendAndSign(0, 1200, "other-history-");
  AuditLogPeer peer(&peer_log_);
  EXPECT_EQ(mirror_->Sync(peer).code(), StatusCode::kFailedPrecondition);
  ASSERT_NO_FATAL_FAILURE(ExpectForked(held, forked));
  EXPECT_EQ(mirror_->status().entries(), 200u);
}

// ---- A peer that misbehaves without signing anything wrong --------------------------------------

TEST_F(MirrorTest, EntriesNotMatchingTheSignedCheckpointAreNotStored) {
  const std::string note = PeerAppendAndSign(0, 1000);
  AuditLogPeer honest(&peer_log_, /*page=*/100);
  TamperingPeer lying(&honest);
  lying.flip = 42;  // in the first page
  absl::Status s = mirror_->Sync(lying);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s;
  MirrorStatus st = mirror_->status();
  EXPECT_EQ(st.state(), MirrorStatus::UNREACHABLE);  // retried later, not an alarm
  EXPECT_EQ(st.entries(), 0u);
  EXPECT_THAT(st.last_error(), HasSubstr("not in its signed log"));
  EXPECT_EQ(st.evidence_size(), 0);
  EXPECT_TRUE(alarms_.empty());
  absl::StatusOr<vault::v1::LogHead> head = mirror_->store().ReadHead();
  ASSERT_EQ(head.status(), absl::OkStatus());
  EXPECT_EQ(head->size(), 0u);
  EXPECT_EQ(mirror_->store().ReadEntry(0).status().code(), StatusCode::kNotFound);

  // The honest peer: the mirror recovers.
  ASSERT_EQ(mirror_->Sync(honest), absl::OkStatus());
  st = mirror_->status();
  EXPECT_EQ(st.state(), MirrorStatus::FOLLOWING);
  EXPECT_EQ(st.entries(), 1000u);
  EXPECT_EQ(st.last_error(), "");
  EXPECT_EQ(st.checkpoint_note(), note);
  ASSERT_NO_FATAL_FAILURE(ExpectMirrorHoldsPeerEntries(1000));
}

TEST_F(MirrorTest, FlippedEntryInTheLastPageIsCheckedAgainstTheRoot) {
  PeerAppendAndSign(0, 250);
  AuditLogPeer honest(&peer_log_, /*page=*/100);
  TamperingPeer lying(&honest);
  lying.flip = 249;  // the last page ends at the checkpoint: compared with its root
  absl::Status s = mirror_->Sync(lying);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s;
  EXPECT_THAT(s.message(), HasSubstr("do not hash to its signed checkpoint"));
  EXPECT_EQ(mirror_->status().state(), MirrorStatus::UNREACHABLE);
  // The two pages before it were proven and are kept.
  absl::StatusOr<vault::v1::LogHead> head = mirror_->store().ReadHead();
  ASSERT_EQ(head.status(), absl::OkStatus());
  EXPECT_EQ(head->size(), 200u);
  ASSERT_EQ(mirror_->Sync(honest), absl::OkStatus());
  EXPECT_EQ(mirror_->status().entries(), 250u);
  ASSERT_NO_FATAL_FAILURE(ExpectMirrorHoldsPeerEntries(250));
}

// Regression (audit/mirror.cc, Sync/RecordError): when a round stores some pages and then fails on
// a later one, status().entries still reports the count from the last successful round (0 here)
// although 200 verified entries are held (MirrorStatus.entries: "entries held (verified)"); only
// the next successful round or a restart (Load) corrects it.
TEST_F(MirrorTest, StatusCountsEntriesStoredBeforeAFailedPage) {
  PeerAppendAndSign(0, 250);
  AuditLogPeer honest(&peer_log_, /*page=*/100);
  TamperingPeer lying(&honest);
  lying.flip = 249;
  EXPECT_EQ(mirror_->Sync(lying).code(), StatusCode::kDataLoss);
  absl::StatusOr<vault::v1::LogHead> head = mirror_->store().ReadHead();
  ASSERT_EQ(head.status(), absl::OkStatus());
  ASSERT_EQ(head->size(), 200u);
  EXPECT_EQ(mirror_->status().entries(), 200u);
}

TEST_F(MirrorTest, CheckpointSignedByAnotherKeyIsRefusedNotAFork) {
  PeerAppendAndSign(0, 10);
  AuditLogPeer honest(&peer_log_);
  ASSERT_EQ(mirror_->Sync(honest), absl::OkStatus());

  absl::StatusOr<capability::PrivateKey> other = capability::PrivateKey::Generate();
  ASSERT_EQ(other.status(), absl::OkStatus());
  // Another key under the same name, for a different tree of the same size.
  absl::StatusOr<std::string> note =
      SignNote(FormatCheckpoint({.origin = LogOrigin(kPeer), .size = 10, .root = RefSha256("x")}),
               kPeer, *other);
  ASSERT_EQ(note.status(), absl::OkStatus());
  TamperingPeer impostor(&honest);
  impostor.checkpoint = *note;
  absl::Status s = mirror_->Sync(impostor);
  // note.h: NOT_FOUND when no signature line names this verifier (name and key ID).
  EXPECT_EQ(s.code(), StatusCode::kNotFound) << s;
  MirrorStatus st = mirror_->status();
  EXPECT_EQ(st.state(), MirrorStatus::UNREACHABLE);
  EXPECT_FALSE(st.last_error().empty());
  EXPECT_EQ(st.evidence_size(), 0);
  EXPECT_TRUE(alarms_.empty());

  // A signature line of the right key that does not verify: UNAUTHENTICATED.
  std::string forged = std::string(honest.Checkpoint().value_or(""));
  const size_t body_end = forged.find("\n\n");
  ASSERT_NE(body_end, std::string::npos);
  forged[body_end - 3] = forged[body_end - 3] == 'A' ? 'B' : 'A';  // a root character
  impostor.checkpoint = forged;
  s = mirror_->Sync(impostor);
  EXPECT_EQ(s.code(), StatusCode::kUnauthenticated) << s;
  EXPECT_EQ(mirror_->status().state(), MirrorStatus::UNREACHABLE);
  EXPECT_TRUE(alarms_.empty());

  // Still following the honest peer.
  ASSERT_EQ(mirror_->Sync(honest), absl::OkStatus());
  EXPECT_EQ(mirror_->status().state(), MirrorStatus::FOLLOWING);
  EXPECT_EQ(mirror_->status().entries(), 10u);
}

TEST_F(MirrorTest, CheckpointOfAnotherLogIsRefused) {
  absl::StatusOr<std::string> note =
      SignNote(FormatCheckpoint({.origin = LogOrigin("vault-c"), .size = 0, .root = RefSha256("")}),
               kPeer, *peer_key_);
  ASSERT_EQ(note.status(), absl::OkStatus());
  AuditLogPeer honest(&peer_log_);
  TamperingPeer wrong(&honest);
  wrong.checkpoint = *note;
  EXPECT_EQ(mirror_->Sync(wrong).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(mirror_->status().state(), MirrorStatus::UNREACHABLE);
  EXPECT_TRUE(alarms_.empty());
}

TEST_F(MirrorTest, UnavailablePeer) {
  PeerAppendAndSign(0, 10);
  AuditLogPeer honest(&peer_log_);
  TamperingPeer down(&honest);
  down.fail = absl::UnavailableError("connection refused");
  absl::Status s = mirror_->Sync(down);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  MirrorStatus st = mirror_->status();
  EXPECT_EQ(st.state(), MirrorStatus::UNREACHABLE);
  EXPECT_THAT(st.last_error(), HasSubstr("connection refused"));
  EXPECT_EQ(st.entries(), 0u);
  EXPECT_TRUE(alarms_.empty());

  // Back up.
  ASSERT_EQ(mirror_->Sync(honest), absl::OkStatus());
  st = mirror_->status();
  EXPECT_EQ(st.state(), MirrorStatus::FOLLOWING);
  EXPECT_EQ(st.last_error(), "");
  EXPECT_EQ(st.entries(), 10u);

  // Down in the middle of a round (after the checkpoint): entries already stored are kept.
  PeerAppendAndSign(10, 10);
  class DownAfterCheckpoint : public TamperingPeer {
   public:
    using TamperingPeer::TamperingPeer;
    absl::StatusOr<std::vector<std::string>> Entries(uint64_t, uint64_t) override {
      return absl::DeadlineExceededError("deadline");
    }
  } flaky(&honest);
  EXPECT_EQ(mirror_->Sync(flaky).code(), StatusCode::kDeadlineExceeded);
  st = mirror_->status();
  EXPECT_EQ(st.state(), MirrorStatus::UNREACHABLE);
  EXPECT_EQ(st.last_error(), "deadline");
  EXPECT_EQ(st.entries(), 10u);
}

// ---- A peer that signs a log breaking the entry rules ------------------------------------------

struct InvalidCase {
  const char* name;
  std::function<void(AuditEntry&)> edit;
  const char* why;
};

class MirrorInvalidTest : public MirrorTest, public ::testing::WithParamInterface<InvalidCase> {};

TEST_P(MirrorInvalidTest, SignedLogBreakingTheRulesIsInvalid) {
  MemoryPeer peer(&*peer_key_, HandMadeEntries(30, GetParam().edit));
  absl::Status s = mirror_->Sync(peer);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s;
  MirrorStatus st = mirror_->status();
  EXPECT_EQ(st.state(), MirrorStatus::INVALID);
  EXPECT_EQ(st.first_bad_sequence(), 5u);
  EXPECT_THAT(st.last_error(), HasSubstr(absl::StrCat("entry 5 ", GetParam().why)));
  ASSERT_EQ(st.evidence_size(), 1);
  EXPECT_EQ(OpenNote(st.evidence(0), *verifier_).status(), absl::OkStatus());
  EXPECT_EQ(st.entries(), 0u);  // the page holding entry 5 is not stored
  absl::StatusOr<vault::v1::LogHead> head = mirror_->store().ReadHead();
  ASSERT_EQ(head.status(), absl::OkStatus());
  EXPECT_EQ(head->size(), 0u);
  ASSERT_EQ(alarms_.size(), 1u);
  EXPECT_EQ(alarms_[0].state(), MirrorStatus::INVALID);
  ASSERT_NO_FATAL_FAILURE(ExpectNoLongerFollowed(MirrorStatus::INVALID));
}

INSTANTIATE_TEST_SUITE_P(
    Rules, MirrorInvalidTest,
    ::testing::Values(InvalidCase{"WrongVault", [](AuditEntry& e) { e.set_vault("vault-c"); },
                                  "names vault \"vault-c\""},
                      InvalidCase{"WrongSequence", [](AuditEntry& e) { e.set_sequence(6); },
                                  "holds sequence number 6"},
                      InvalidCase{"BrokenChain",
                                  [](AuditEntry& e) { e.set_prev_hash(std::string(32, 'x')); },
                                  "breaks the hash chain"}),
    [](const ::testing::TestParamInfo<InvalidCase>& info) { return info.param.name; });

TEST_F(MirrorTest, HandMadeLogFollowingTheRulesIsMirrored) {
  MemoryPeer peer(&*peer_key_, HandMadeEntries(30, [](AuditEntry&) {}));
  ASSERT_EQ(mirror_->Sync(peer), absl::OkStatus());
  EXPECT_EQ(mirror_->status().state(), MirrorStatus::FOLLOWING);
  EXPECT_EQ(mirror_->status().entries(), 30u);
  VerifyReport r = VerifyStoredLog(mirror_->store(), kPeer, *verifier_);
  EXPECT_TRUE(r.ok) << r.error;
}

}  // namespace
}  // namespace vault::audit
