// The fault suites of migration (design §7, issue 7 "Tests and figures"), with three real vaultd
// processes (a, b, c), mutual TLS on loopback and Python agents in their sandboxes.
//
// 1. Link cuts (LinkCutTest). a reaches b through a TCP proxy the test controls (b's member
//    address in a's vault.conf is the proxy's; TLS still names "b"). The link is cut at each
//    step of a hop: before the Offer, in the middle of the object stream, after the objects with
//    the Commit still held by the proxy (never committed: the source must fence it with Status
//    and resume the agent), and after the Commit with the receipt held by the proxy (committed:
//    the source must learn it with Status), each for less and for longer than the source's
//    inline resolve (3 s), and with the destination SIGKILLed at the cut (restarted at the heal).
//    Each scenario is repeated kRepeats times with a fresh agent.
//    Afterwards the agent runs in exactly one vault (its processes, and its tally lines whose
//    vaults never interleave), its state there is the one it handed over, and every vault's
//    audit log verifies.
// 2. Chaos (ChaosTest). Every link between members goes through a proxy. kChaosAgents agents hop
//    at random between a, b and c (`vaultctl migrate` from wherever `vaultctl agent where` says
//    they are) for kChaosDuration while vaultds are SIGKILLed and restarted (never all at once)
//    and links cut and healed at random. Then everything is healed and restarted, the hops in
//    flight settle, and every agent is RUNNING in exactly one vault (DEPARTED everywhere else),
//    none lost, none duplicated. The counts are recorded (RecordProperty) and printed.
//
// Replay a chaos run with VAULT_IT_SEED=<the seed it printed>.
#include <gmock/gmock.h>
#include <google/protobuf/text_format.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <array>
#include <atomic>
#include <future>
#include <memory>
#include <mutex>
#include <random>
#include <thread>

#include "integration-tests/proxied_fixture.h"
#include "integration-tests/tcp_proxy.h"
#include "vault/v1/config.pb.h"

namespace vault::integration {
namespace {

using ::testing::AnyOf;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;
using vault::v1::AgentStatus;

// How many times each link-cut scenario runs (each time with a fresh agent).
constexpr int kRepeats = 3;
// The link-cut scenarios whose cut outlasts the source's inline resolve run this many times.
constexpr int kLongRepeats = 2;
// How long the proxy holds back the bytes of one direction, so that a cut lands while it still
// holds the Commit (a -> b) or the receipt (b -> a).
constexpr absl::Duration kHold = absl::Milliseconds(800);
// A short cut (healed within the source's inline resolve, 3 s) and a long one (past it).
constexpr absl::Duration kShortCut = absl::Seconds(1);
constexpr absl::Duration kLongCut = absl::Seconds(4);
// After a heal, a's channel to b may still wait out its reconnect backoff (at most 1 s, plus
// jitter, in migration/transport.cc): a hop tried before then fails at the Offer.
constexpr absl::Duration kReconnect = absl::Milliseconds(1500);
// The chaos run: how long agents hop and vaults die, and how many agents hop.
constexpr absl::Duration kChaosDuration = absl::Seconds(60);
constexpr int kChaosAgents = 4;
// At most this many vaultds are down at once (of three: never all).
constexpr int kChaosMaxDown = 2;

// Counts like kCounterAgent, into a file of its own (/vault/pub/tally-<name>.txt), so several
// agents can share a vault. A host call refused because a hop is being prepared (UNAVAILABLE:
// the agent is being frozen) is tried again: either the hop takes the agent away (this process
// stays frozen, then ends) or it fails and the agent goes on here.
constexpr absl::string_view kTallyAgent = R"(
NAME = "$NAME"
a = vault_agent.Agent.connect()
def call(f, *args, **kw):
    for i in range(200):
        try:
            return f(*args, **kw)
        except vault_agent.HostError as e:
            if e.code != vault_agent.UNAVAILABLE or i == 199:
                raise
            time.sleep(0.05)
me = call(a.self_inspect)
st = call(a.get_state)
n = int(st) if st else 0
call(a.log, "start vault=%s hop=%d inc=%d n=%d" % (me["vault"], me["hop"], a.incarnation, n))
while True:
    n += 1
    call(a.checkpoint, str(n).encode())
    call(a.write_file, "/vault/pub/tally-%s.txt" % NAME, b"vault=%s n=%d t=%d pid=%d\n" % (
        me["vault"].encode(), n, int(time.time() * 1000), os.getpid()), append=True)
    deadline = time.time() + 0.2
    while time.time() < deadline:
        m = call(a.receive, timeout=0.1)
        if m is not None and m.type == "vault.checkpoint":
            call(a.checkpoint, str(n).encode())
)";

// The proxied federation (migration_fixture.h) with the tally agent.
class ProxiedMigrationTest : public ProxiedFederationTest {
 protected:
  // Writes the tally agent `name` and spawns it on a (as the owner, who every vault trusts) with
  // `state` as its count; returns once it has checkpointed twice.
  std::string SpawnTally(const std::string& name, uint64_t state, size_t padding_kib = 0) {
    std::string spec = WriteAgent(
        name, absl::StrReplaceAll(kTallyAgent, {{"$NAME", name}}),
        "(read (path \"/vault/pub\")) (write (path \"/vault/pub\")) (migrate (vaults a b c))",
        "(max-runtime 600) (max-migrations 1000)", padding_kib);
    std::string id = Spawn("a", spec, owner_key_, absl::StrCat(state));
    if (id.empty()) return "";
    WaitFor(
        "a", id,
        [](const AgentStatus& s) {
          return s.record().state() == vault::v1::RUNNING &&
                 s.record().counters().checkpoints() >= 2;
        },
        absl::Seconds(30), "running with 2 checkpoints");
    return id;
  }

  std::vector<CounterLine> TallyLines(const std::string& vault, const std::string& name) {
    return ParseCounter(
        ReadFile(absl::StrCat(V(vault).data_dir, "/files/pub/tally-", name, ".txt")).value_or(""));
  }

  // Every tally line of `name` on every vault, ordered by time.
  std::vector<CounterLine> AllTallyLines(const std::string& name) {
    std::vector<CounterLine> all;
    for (const std::string& v : kVaults) {
      std::vector<CounterLine> l = TallyLines(v, name);
      all.insert(all.end(), l.begin(), l.end());
    }
    std::stable_sort(all.begin(), all.end(),
                     [](const CounterLine& x, const CounterLine& y) { return x.t < y.t; });
    return all;
  }

  // The vaults of the agent's stays, in order (consecutive lines of one vault are one stay).
  static std::vector<std::string> Stays(const std::vector<CounterLine>& lines) {
    std::vector<std::string> stays;
    for (const CounterLine& l : lines) {
      if (stays.empty() || stays.back() != l.vault) stays.push_back(l.vault);
    }
    return stays;
  }

  // Whether `vault` holds the object (asked on its admin socket).
  bool Has(const std::string& vault, const vault::v1::Digest& d) {
    auto cas = CasStub(V(vault).socket);
    grpc::ClientContext ctx;
    SetDeadline(&ctx, absl::Seconds(5));
    vault::v1::StatRequest req;
    *req.mutable_digest() = d;
    vault::v1::StatResponse resp;
    return cas->Stat(&ctx, req, &resp).ok() && resp.present();
  }
};

// ---------------------------------------------------------------------------------------------
// 1. Link cuts.

class LinkCutTest : public ProxiedMigrationTest {
 protected:
  LinkCutTest() { links_ = {{"a", "b"}}; }

  void SetUp() override {
    ProxiedMigrationTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    ASSERT_NO_FATAL_FAILURE(TrustOwnerEverywhere());
  }

  TcpProxy& AtoB() { return Link("a", "b"); }

  // `vaultctl migrate id --to b`, run on a thread of its own.
  std::future<RunResult> MigrateAsync(const std::string& id) {
    std::vector<std::string> argv = {VaultctlPath(), "--vault", V("a").socket, "-o", "json",
                                     "migrate",      id,        "--to",        "b"};
    return std::async(std::launch::async, [argv] { return RunProgram(argv, absl::Seconds(60)); });
  }

  // Makes a's member channel to b connect now, with the link fast: the delays of CutMidCommit
  // apply to a connection that is up (a connection attempt gets 5 s, GRPC_ARG_MIN_RECONNECT_
  // BACKOFF_MS in migration/transport.cc). `agent where` of an agent nobody has asks every
  // member through that channel; NOT_FOUND means b answered.
  void WarmLink() {
    RunResult r;
    ASSERT_TRUE(Poll(
        [&] {
          r = Ctl("a", {"agent", "where", "a-0000000000000000"});
          return r.exit_code == kExitNotFound;
        },
        absl::Seconds(10)))
        << r;
  }

  // Waits until a has persisted the hop (MIGRATING) and returns that record.
  vault::v1::AgentRecord WaitMigrating(const std::string& id) {
    return WaitFor(
               "a", id,
               [](const AgentStatus& s) { return s.record().state() == vault::v1::MIGRATING; },
               absl::Seconds(15), "migrating")
        .record();
  }

  // Polls `pred` every few milliseconds; false after `timeout`.
  static bool Poll(const std::function<bool()>& pred, absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    while (!pred()) {
      if (absl::Now() > deadline) return false;
      absl::SleepFor(absl::Milliseconds(5));
    }
    return true;
  }

  // Waits until a's record of the hop is settled (no longer MIGRATING).
  AgentStatus WaitSettled(const std::string& id, absl::Duration timeout = absl::Seconds(20)) {
    return WaitFor(
        "a", id, [](const AgentStatus& s) { return s.record().state() != vault::v1::MIGRATING; },
        timeout, "settled (not migrating)");
  }

  // The hop failed and the agent resumed on a, the same process (never restarted), continuing
  // its count: b never had it, a audited the failure, the tally lines are all a's, one per
  // count, the count it handed over (`handed`; 0: not known) among them.
  void ExpectResumedOnA(const std::string& id, const std::string& name, uint64_t handed,
                        const std::string& why_prefix) {
    AgentStatus st = WaitRunning("a", id);
    EXPECT_EQ(st.record().hop(), 0u);
    EXPECT_EQ(st.record().incarnation(), 1u);
    EXPECT_FALSE(st.record().has_migration());
    EXPECT_THAT(st.record().reason(), StartsWith(why_prefix));
    std::vector<std::string> failed = Audit("a", "agent.migrate.failed", id);
    ASSERT_EQ(failed.size(), 1u);
    EXPECT_EQ(JsonField(failed[0], "priority"), "HIGH") << failed[0];
    EXPECT_EQ(JsonField(failed[0], "outcome"), "resumed here") << failed[0];
    EXPECT_EQ(Get("b", id).status().code(), absl::StatusCode::kNotFound);
    ExpectRunsOnlyOn(id, "a");
    // It counts on from where it was: a write refused while it was being frozen is tried again
    // once it is thawed, so every count has its line.
    const size_t before = TallyLines("a", name).size();
    ASSERT_TRUE(Poll([&] { return TallyLines("a", name).size() > before + 1; }, absl::Seconds(10)))
        << "agent " << id << " does not count on a";
    std::vector<CounterLine> lines = AllTallyLines(name);
    EXPECT_EQ(Stays(lines), std::vector<std::string>{"a"});
    bool saw_handed = false;
    for (size_t i = 1; i < lines.size(); ++i) {
      EXPECT_EQ(lines[i].n, lines[i - 1].n + 1) << "line " << i;
      saw_handed = saw_handed || lines[i].n == handed;
    }
    EXPECT_TRUE(saw_handed || handed == 0) << "no line with the handed-over count " << handed;
  }

  // The hop committed: a recorded the departure with b's receipt, b runs the agent (only b) from
  // exactly the state a handed over, and the tally moved from a to b once.
  // With `b_restarted` (b was SIGKILLed after it committed), the agent started again on b from
  // its last checkpoint there: a count it checkpointed but had not written yet is skipped, none
  // is written twice.
  void ExpectCommittedOnB(const std::string& id, const std::string& name,
                          const vault::v1::AgentRecord& migrating, uint64_t handed,
                          bool b_restarted = false) {
    AgentStatus src = WaitFor(
        "a", id, [](const AgentStatus& s) { return s.record().state() == vault::v1::DEPARTED; },
        absl::Seconds(20), "departed");
    const vault::v1::AgentRecord& s = src.record();
    EXPECT_EQ(s.reason(), "departed to b");
    EXPECT_EQ(s.hop(), 1u);
    EXPECT_EQ(s.migration().transfer_id(), migrating.migration().transfer_id());
    vault::v1::ReceiptPayload receipt = OpenReceipt(s.migration().receipt(), "b");
    EXPECT_EQ(receipt.transfer_id(), migrating.migration().transfer_id());
    EXPECT_EQ(DigestText(receipt.state()), DigestText(migrating.migration().state()));
    EXPECT_EQ(Audit("a", "agent.departed", id).size(), 1u);
    EXPECT_TRUE(Audit("a", "agent.migrate.failed", id, 1, absl::Milliseconds(200)).empty());
    AgentStatus dst = WaitRunning("b", id);
    EXPECT_EQ(dst.record().hop(), 1u);
    EXPECT_EQ(dst.record().arrived_from(), "a");
    // It arrived with the state a handed over (b audited it; it started from it), and has
    // counted on from there since.
    std::vector<std::string> in = Audit("b", "agent.migrate.in", id);
    ASSERT_EQ(in.size(), 1u);
    EXPECT_EQ(JsonField(in[0], "state"), DigestText(migrating.migration().state())) << in[0];
    EXPECT_EQ(JsonField(in[0], "transfer_id"), Hex(migrating.migration().transfer_id())) << in[0];
    if (!b_restarted) {
      WaitLog("b", id,
              absl::StrCat("start vault=b hop=1 inc=", dst.record().incarnation(), " n=", handed));
    }
    ExpectRunsOnlyOn(id, "b");
    ASSERT_TRUE(Poll([&] { return !TallyLines("b", name).empty(); }, absl::Seconds(10)))
        << "agent " << id << " does not count on b";
    std::vector<CounterLine> lines = AllTallyLines(name);
    EXPECT_EQ(Stays(lines), (std::vector<std::string>{"a", "b"}));
    for (size_t i = 1; i < lines.size(); ++i) {
      if (lines[i].vault == lines[i - 1].vault) {
        if (b_restarted && lines[i].vault == "b") {
          EXPECT_GT(lines[i].n, lines[i - 1].n) << "line " << i << ": a count written twice";
          EXPECT_LE(lines[i].n, lines[i - 1].n + 2) << "line " << i;
        } else {
          EXPECT_EQ(lines[i].n, lines[i - 1].n + 1) << "line " << i;
        }
      } else if (b_restarted) {
        EXPECT_GT(lines[i].n, handed) << "the first line on b continues the handed state";
        EXPECT_LE(lines[i].n, handed + 2) << "the first line on b continues the handed state";
        EXPECT_LE(lines[i - 1].n, handed) << "a counted past the state it handed over";
      } else {
        EXPECT_EQ(lines[i].n, handed + 1) << "the first line on b continues the handed state";
        EXPECT_LE(lines[i - 1].n, handed) << "a counted past the state it handed over";
      }
    }
  }

  // The state a hands over (its checkpoint, read from a's CAS).
  uint64_t HandedState(const vault::v1::AgentRecord& migrating) {
    uint64_t n = 0;
    std::string bytes = CasGet("a", migrating.migration().state());
    EXPECT_TRUE(absl::SimpleAtoi(bytes, &n)) << bytes;
    return n;
  }

  // A hop of a fresh agent (its count starts at `start`) with the Commit held by the proxy
  // (a -> b delayed: never committed) or the receipt (b -> a delayed: committed) when the link is
  // cut, and with kKillDestination b SIGKILLed at that moment too; healed (b restarted) after
  // `cut_for`. Checks what vaultctl says and where the agent ends up.
  enum class Lost { kCommit, kReceipt };
  enum class Fault { kCut, kKillDestination };
  void CutMidCommit(const std::string& name, uint64_t start, Lost lost, absl::Duration cut_for,
                    Fault fault = Fault::kCut);
};

TEST_F(LinkCutTest, CutBeforeTheOfferFailsTheHopAndTheAgentGoesOnAtTheSource) {
  for (int rep = 0; rep < kRepeats; ++rep) {
    SCOPED_TRACE(absl::StrCat("repetition ", rep));
    const std::string name = absl::StrCat("before-offer-", rep);
    std::string id = SpawnTally(name, 1000000 * (rep + 1));
    ASSERT_FALSE(id.empty());
    AtoB().Cut();
    RunResult r = Ctl("a", {"migrate", id, "--to", "b", "--checkpoint-wait", "300"});
    EXPECT_EQ(r.exit_code, kExitUnavailable) << r;
    EXPECT_THAT(r.err, StartsWith("vaultctl: migration to b refused: Offer to b: ")) << r;
    EXPECT_THAT(r.err, HasSubstr("[UNAVAILABLE]\n"));
    ASSERT_NO_FATAL_FAILURE(ExpectResumedOnA(id, name, 0, "migration to b refused: Offer to b: "));
    // Healed, the same agent goes.
    AtoB().Heal();
    absl::SleepFor(kReconnect);
    ExpectHop(id, "a", "b", 1, Ctl("a", {"-o", "json", "migrate", id, "--to", "b"}));
  }
  RecordProperty("proxy_resets", static_cast<int>(AtoB().resets()));
  ExpectAuditsVerify();
}

TEST_F(LinkCutTest, CutInTheMiddleOfTheObjectStreamFailsTheHopAndTheAgentGoesOnAtTheSource) {
  for (int rep = 0; rep < kRepeats; ++rep) {
    SCOPED_TRACE(absl::StrCat("repetition ", rep));
    const std::string name = absl::StrCat("mid-stream-", rep);
    // 3 MiB of code: streamed to b (Cas.Put, 1 MiB pieces); the link is cut after the first
    // 1.5 MiB that a sends from now on (the Offer is a few KiB).
    std::string id = SpawnTally(name, 1000000 * (rep + 1), 3 << 10);
    ASSERT_FALSE(id.empty());
    const uint64_t up_before = AtoB().forwarded(TcpProxy::kUp);
    AtoB().CutAfter(TcpProxy::kUp, 3 << 19);
    RunResult r = Ctl("a", {"migrate", id, "--to", "b", "--checkpoint-wait", "300"});
    EXPECT_TRUE(AtoB().cut());
    EXPECT_GE(AtoB().forwarded(TcpProxy::kUp) - up_before, uint64_t{3} << 19);
    EXPECT_EQ(r.exit_code, kExitUnavailable) << r;
    EXPECT_THAT(r.err, StartsWith("vaultctl: migration to b refused: ")) << r;
    EXPECT_THAT(r.err, AnyOf(HasSubstr("the upload stream broke"), HasSubstr("Put to b: "))) << r;
    ASSERT_NO_FATAL_FAILURE(ExpectResumedOnA(id, name, 0, "migration to b refused: "));
    EXPECT_EQ(Ctl("b", {"cas", "has", DigestText(codes_[name])}).exit_code, kExitNotFound);
    // Healed, the same agent goes (the whole code object this time).
    AtoB().Heal();
    absl::SleepFor(kReconnect);
    ExpectHop(id, "a", "b", 1, Ctl("a", {"-o", "json", "migrate", id, "--to", "b"}));
    EXPECT_EQ(Ctl("b", {"cas", "has", DigestText(codes_[name])}).exit_code, kExitOk);
  }
  ExpectAuditsVerify();
}

void LinkCutTest::CutMidCommit(const std::string& name, uint64_t start, Lost lost,
                               absl::Duration cut_for, Fault fault) {
  const bool kill = fault == Fault::kKillDestination;
  std::string id = SpawnTally(name, start);
  ASSERT_FALSE(id.empty());
  ASSERT_NO_FATAL_FAILURE(WarmLink());
  absl::StatusOr<AgentStatus> spawned = Get("a", id);
  ASSERT_TRUE(spawned.ok()) << spawned.status();
  const vault::v1::Digest code = spawned->record().spec().code_digest();
  const bool code_on_b = Has("b", code);
  AtoB().SetDelay(lost == Lost::kCommit ? TcpProxy::kUp : TcpProxy::kDown, kHold);
  std::future<RunResult> run = MigrateAsync(id);
  const vault::v1::AgentRecord migrating = WaitMigrating(id);
  ASSERT_EQ(migrating.state(), vault::v1::MIGRATING);
  const uint64_t handed = HandedState(migrating);
  if (lost == Lost::kCommit) {
    // The last step before the Commit is seen at b: the code arriving through the CAS, or, when
    // b had the code, the agent's process started (held) as b accepts the Offer. Then a sends
    // the Commit (carrying the state when b lacks it), which the proxy holds for kHold. Cut well
    // inside that.
    if (code_on_b) {
      ASSERT_FALSE(WaitForProcessesOn(id, "b").empty())
          << "b never accepted the Offer; the migrate: " << run.get();
    } else {
      ASSERT_TRUE(Poll([&] { return Has("b", code); }, absl::Seconds(20)))
          << "b never got the code; the migrate: " << run.get();
    }
    absl::SleepFor(kHold / 4);
    ASSERT_FALSE(Get("b", id).ok()) << "b committed before the cut: kHold is too short here";
  } else {
    // b committed (its record exists) and answered; the proxy holds the receipt for kHold.
    ASSERT_TRUE(Poll([&] { return Get("b", id).ok(); }, absl::Seconds(20)))
        << "b never committed; the migrate: " << run.get();
  }
  AtoB().Cut();
  if (kill) M("b").vaultd->Kill();  // our own child, by its pid
  const absl::Time cut_at = absl::Now();
  AtoB().SetDelay(TcpProxy::kUp, absl::ZeroDuration());
  AtoB().SetDelay(TcpProxy::kDown, absl::ZeroDuration());
  // While the link is down the outcome is unknown at a: the agent stays frozen there, MIGRATING.
  absl::SleepFor(std::min(cut_for, absl::Milliseconds(500)));
  absl::StatusOr<AgentStatus> during = Get("a", id);
  ASSERT_TRUE(during.ok()) << during.status();
  EXPECT_EQ(during->record().state(), vault::v1::MIGRATING) << during->record().DebugString();
  if (!kill) {
    EXPECT_EQ(Get("b", id).ok(), lost == Lost::kReceipt);
  }
  absl::SleepFor(cut_for - (absl::Now() - cut_at));
  if (cut_for > absl::Seconds(3)) {
    // Past the inline resolve: vaultctl has its answer (unknown yet), the vault keeps asking.
    ASSERT_EQ(run.wait_for(std::chrono::seconds(2)), std::future_status::ready);
  }
  if (kill) {
    ASSERT_NO_FATAL_FAILURE(Restart("b"));
  }
  AtoB().Heal();
  RunResult r = run.get();
  if (cut_for > absl::Seconds(3)) {
    EXPECT_EQ(r.exit_code, kExitUnavailable) << r;
    EXPECT_THAT(r.err, HasSubstr("the outcome of the migration to b is not known yet")) << r;
  } else if (lost == Lost::kReceipt) {
    EXPECT_EQ(r.exit_code, kExitOk) << r;  // Status answered COMMITTED with the receipt
    EXPECT_EQ(JsonField(r.out, "to_vault"), "b") << r.out;
  } else {
    EXPECT_NE(r.exit_code, kExitOk) << r;
    EXPECT_THAT(r.err, HasSubstr("migration to b did not commit (")) << r;
  }
  WaitSettled(id);
  if (lost == Lost::kReceipt) {
    ASSERT_NO_FATAL_FAILURE(ExpectCommittedOnB(id, name, migrating, handed, /*b_restarted=*/kill));
  } else {
    ASSERT_NO_FATAL_FAILURE(ExpectResumedOnA(id, name, handed, "migration to b did not commit ("));
    // The fence holds: the Commit that was lost can never land (replayed here as member a).
    auto as_a = vault::v1::Migration::NewStub(MemberChannel("a", "b"));
    absl::Status late = Commit(as_a.get(), PackageOf(migrating, "a"));
    EXPECT_EQ(late.code(), absl::StatusCode::kAlreadyExists) << late;
    EXPECT_EQ(Get("b", id).status().code(), absl::StatusCode::kNotFound);
    ExpectRunsOnlyOn(id, "a");
  }
}

TEST_F(LinkCutTest, CommitLostInACutIsFencedAndTheAgentResumesAtTheSource) {
  for (int rep = 0; rep < kRepeats; ++rep) {
    SCOPED_TRACE(absl::StrCat("repetition ", rep));
    ASSERT_NO_FATAL_FAILURE(CutMidCommit(absl::StrCat("commit-lost-", rep), 1000000 * (rep + 1),
                                         Lost::kCommit, kShortCut));
  }
  ExpectAuditsVerify();
}

TEST_F(LinkCutTest, ReceiptLostInACutIsLearnedWithStatusAndTheAgentRunsOnlyAtTheDestination) {
  for (int rep = 0; rep < kRepeats; ++rep) {
    SCOPED_TRACE(absl::StrCat("repetition ", rep));
    ASSERT_NO_FATAL_FAILURE(CutMidCommit(absl::StrCat("receipt-lost-", rep), 1000000 * (rep + 1),
                                         Lost::kReceipt, kShortCut));
  }
  ExpectAuditsVerify();
}

TEST_F(LinkCutTest, CutLongerThanTheInlineResolveIsSettledInTheBackgroundOnceHealed) {
  for (int rep = 0; rep < kLongRepeats; ++rep) {
    SCOPED_TRACE(absl::StrCat("repetition ", rep, ", commit lost"));
    ASSERT_NO_FATAL_FAILURE(CutMidCommit(absl::StrCat("long-commit-", rep), 1000000 * (rep + 1),
                                         Lost::kCommit, kLongCut));
  }
  for (int rep = 0; rep < kLongRepeats; ++rep) {
    SCOPED_TRACE(absl::StrCat("repetition ", rep, ", receipt lost"));
    ASSERT_NO_FATAL_FAILURE(CutMidCommit(absl::StrCat("long-receipt-", rep), 5000000 * (rep + 1),
                                         Lost::kReceipt, kLongCut));
  }
  ExpectAuditsVerify();
}

// The destination SIGKILLed while the Commit is on its way (never committed), and right after it
// committed with its receipt on the way back; restarted after kLongCut (past the source's inline
// resolve, so vaultctl answers "not known yet" and the source settles the hop in the
// background). Never committed: the source fences the hop with Status and the agent resumes at
// the source. Committed: the restarted destination runs the agent from its committed record, and
// the source learns the outcome with Status and records the departure.
TEST_F(LinkCutTest, DestinationKilledBeforeOrAfterItsCommitEndsInExactlyOnePlace) {
  for (int rep = 0; rep < kLongRepeats; ++rep) {
    SCOPED_TRACE(absl::StrCat("repetition ", rep, ", killed before the commit"));
    ASSERT_NO_FATAL_FAILURE(CutMidCommit(absl::StrCat("killed-before-", rep), 1000000 * (rep + 1),
                                         Lost::kCommit, kLongCut, Fault::kKillDestination));
  }
  for (int rep = 0; rep < kLongRepeats; ++rep) {
    SCOPED_TRACE(absl::StrCat("repetition ", rep, ", killed after the commit"));
    ASSERT_NO_FATAL_FAILURE(CutMidCommit(absl::StrCat("killed-after-", rep), 5000000 * (rep + 1),
                                         Lost::kReceipt, kLongCut, Fault::kKillDestination));
  }
  ExpectAuditsVerify();
}

// ---------------------------------------------------------------------------------------------
// 2. Chaos.

class ChaosTest : public ProxiedMigrationTest {
 protected:
  ChaosTest() {
    for (const std::string& from : kVaults) {
      for (const std::string& to : kVaults) {
        if (from != to) links_.insert({from, to});
      }
    }
  }

  // The counts of the run.
  struct Counts {
    std::atomic<int> attempted{0};    // `vaultctl migrate` runs
    std::atomic<int> succeeded{0};    // exit 0, a receipt
    std::atomic<int> failed{0};       // refused or not committed: resumed at the source
    std::atomic<int> unknown{0};      // the client could not tell (settled by the vaults)
    std::atomic<int> not_located{0};  // `agent where` failed or the agent was mid-hop
    std::atomic<int> source_down{0};  // the source's admin socket did not answer
    std::atomic<int> denied{0};       // PERMISSION_DENIED: the grant allows every hop
    std::mutex mu;
    std::vector<std::string> denials;  // each with the agent's status there, just after
  };

  // One agent's hopper: until `stop`, locate the agent (asking a random vault), and migrate it
  // from there to another vault at random.
  void Hop(const std::string& id, uint64_t seed, const std::atomic<bool>* stop, Counts* counts,
           std::map<std::string, std::string> sockets) {
    std::mt19937_64 rng(seed);
    while (!stop->load()) {
      const std::string ask = kVaults[rng() % kVaults.size()];
      RunResult where =
          RunProgram({VaultctlPath(), "--vault", sockets[ask], "-o", "json", "agent", "where", id},
                     absl::Seconds(20));
      std::optional<std::string> vault = JsonField(where.out, "vault");
      if (where.exit_code != kExitOk || !vault.has_value() ||
          JsonField(where.out, "state") != "running" || !sockets.contains(*vault)) {
        counts->not_located.fetch_add(1);
        absl::SleepFor(absl::Milliseconds(200));
        continue;
      }
      std::string to;
      do {
        to = kVaults[rng() % kVaults.size()];
      } while (to == *vault);
      counts->attempted.fetch_add(1);
      RunResult r = RunProgram({VaultctlPath(), "--vault", sockets[*vault], "-o", "json", "migrate",
                                id, "--to", to, "--checkpoint-wait", "300"},
                               absl::Seconds(60));
      if (r.exit_code == kExitOk) {
        counts->succeeded.fetch_add(1);
      } else if (absl::StrContains(r.err, "PERMISSION_DENIED")) {
        // Every agent holds "migrate a b c" and max-migrations 1000: never a reason to deny.
        counts->denied.fetch_add(1);
        RunResult st = RunProgram(
            {VaultctlPath(), "--vault", sockets[*vault], "-o", "json", "agent", "status", id},
            absl::Seconds(20));
        std::lock_guard<std::mutex> lock(counts->mu);
        counts->denials.push_back(absl::StrCat(*vault, " -> ", to, " at ",
                                               absl::FormatTime(absl::Now()), ": ", r.err,
                                               "  its status there just after: ", st.out));
      } else if (absl::StrContains(r.err, "refused") ||
                 absl::StrContains(r.err, "did not commit")) {
        counts->failed.fetch_add(1);
      } else if (absl::StrContains(r.err, sockets[*vault]) ||
                 absl::StrContains(r.err, "cannot reach") || absl::StrContains(r.err, "connect")) {
        counts->source_down.fetch_add(1);
      } else {
        counts->unknown.fetch_add(1);
        std::cerr << "chaos: migrate " << id << " " << *vault << " -> " << to << ": " << r.err;
      }
      absl::SleepFor(absl::Milliseconds(static_cast<int64_t>(rng() % 400)));
    }
  }
};

TEST_F(ChaosTest, AgentsHoppingWhileVaultsDieAndLinksBreakEndInExactlyOnePlace) {
  ASSERT_NO_FATAL_FAILURE(TrustOwnerEverywhere());
  const uint64_t seed = Seed();
  std::mt19937_64 rng(seed);
  std::vector<std::string> names, ids;
  for (int i = 0; i < kChaosAgents; ++i) {
    names.push_back(absl::StrCat("chaos-", i));
    ids.push_back(SpawnTally(names.back(), 1000000 * (i + 1)));
    ASSERT_FALSE(ids.back().empty());
  }
  std::map<std::string, std::string> sockets;
  for (const std::string& v : kVaults) sockets[v] = V(v).socket;

  Counts counts;
  std::atomic<bool> stop{false};
  std::vector<std::thread> hoppers;
  for (int i = 0; i < kChaosAgents; ++i) {
    hoppers.emplace_back([this, id = ids[i], s = rng(), &stop, &counts, sockets] {
      Hop(id, s, &stop, &counts, sockets);
    });
  }
  Havoc havoc;
  ASSERT_NO_FATAL_FAILURE(Wreak(rng, absl::Now() + kChaosDuration, kChaosMaxDown, &havoc));
  stop = true;
  for (std::thread& t : hoppers) t.join();
  // Heal everything, start every vault that is down, and let every hop in flight settle.
  ASSERT_NO_FATAL_FAILURE(HealAll());
  const int kills = havoc.kills, restarts = havoc.restarts, cuts = havoc.cuts, heals = havoc.heals;
  std::cerr << "chaos: " << counts.attempted << " hops attempted, " << counts.succeeded
            << " succeeded, " << counts.failed << " failed cleanly, " << counts.unknown
            << " unknown to the client, " << counts.source_down << " with the source down, "
            << counts.denied << " denied; " << kills << " vaultd kills, " << restarts
            << " restarts, " << cuts << " link cuts, " << heals << " heals; " << counts.not_located
            << " times not located\n";
  RecordProperty("hops_attempted", counts.attempted.load());
  RecordProperty("hops_succeeded", counts.succeeded.load());
  RecordProperty("hops_failed_cleanly", counts.failed.load());
  RecordProperty("hops_unknown_to_client", counts.unknown.load());
  RecordProperty("hops_source_down", counts.source_down.load());
  RecordProperty("vaultd_kills", kills);
  RecordProperty("hops_denied", counts.denied.load());
  EXPECT_EQ(counts.denied.load(), 0)
      << "hops refused for a grant the agent holds (migrate a b c, max-migrations 1000):\n"
      << absl::StrJoin(counts.denials, "\n");
  RecordProperty("link_cuts", cuts);

  int committed_hops = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::string& id = ids[i];
    SCOPED_TRACE(absl::StrCat("agent ", id, " (", names[i], ")"));
    // Settled: exactly one vault has it RUNNING, none MIGRATING.
    std::map<std::string, vault::v1::AgentState> states;
    const absl::Time deadline = absl::Now() + absl::Seconds(45);
    auto settled = [&] {
      states.clear();
      int running = 0, migrating = 0;
      for (const std::string& v : kVaults) {
        absl::StatusOr<AgentStatus> st = Get(v, id);
        if (!st.ok()) continue;
        states[v] = st->record().state();
        running += st->record().state() == vault::v1::RUNNING;
        migrating += st->record().state() == vault::v1::MIGRATING;
      }
      return running == 1 && migrating == 0;
    };
    while (!settled() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(100));
    std::string where;
    std::vector<std::string> described;
    for (const auto& [v, s] : states) {
      described.push_back(absl::StrCat(v, "=", vault::v1::AgentState_Name(s)));
      if (s == vault::v1::RUNNING) where = v;
    }
    EXPECT_TRUE(settled()) << "not in exactly one place: " << absl::StrJoin(described, " ");
    for (const auto& [v, s] : states) {
      if (v != where) {
        EXPECT_EQ(s, vault::v1::DEPARTED) << v << ": " << absl::StrJoin(described, " ");
      }
    }
    if (where.empty()) continue;
    AgentStatus st = WaitRunning(where, id);
    committed_hops += static_cast<int>(st.record().hop());
    ExpectRunsOnlyOn(id, where);
    // Every vault's `agent where` agrees.
    for (const std::string& v : kVaults) {
      // (A member channel that a cut left in reconnect backoff may answer UNAVAILABLE for up to
      // a second after the heal.)
      RunResult r;
      const absl::Time until = absl::Now() + absl::Seconds(10);
      do {
        r = Ctl(v, {"-o", "json", "agent", "where", id});
      } while (r.exit_code == kExitUnavailable && absl::Now() < until &&
               (absl::SleepFor(absl::Milliseconds(200)), true));
      EXPECT_EQ(r.exit_code, kExitOk) << v << ": " << r;
      EXPECT_EQ(JsonField(r.out, "vault"), where) << v << ": " << r.out;
      EXPECT_EQ(JsonField(r.out, "state"), "running") << v << ": " << r.out;
    }
    // Its tally never ran in two vaults at once: it changed vaults at most once per hop.
    std::vector<CounterLine> lines = AllTallyLines(names[i]);
    std::vector<std::string> stays = Stays(lines);
    EXPECT_LE(stays.size(), st.record().hop() + 1) << absl::StrJoin(stays, " ");
    if (!stays.empty()) {
      EXPECT_EQ(stays.back(), where);
    }
  }
  RecordProperty("hops_committed", committed_hops);
  std::cerr << "chaos: " << committed_hops << " hops committed in all (hop counts of the "
            << ids.size() << " agents)\n";
  ExpectAuditsVerify();
}

}  // namespace
}  // namespace vault::integration
