// Scheme agents move and restart by replay (docs/replay.md), on a real three-vault federation
// (a, b, c: mutual TLS on loopback, each trusting the owner). The RFC's pattern
// 4 across the three vaults, max-migrations enforced on the hop past it; an operator's hop that
// resumes the agent where it was; a restart after SIGKILL that resumes it from its last
// checkpoint; and the refusals: a log with a result changed, a log signed by no member, and code
// that does not take the path its log recorded.
//
// Every vault holds /vault/pub/replay/where.txt naming itself, so an agent that read it again
// after a hop (instead of being answered from its log) would say so.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/grpc_status.h"
#include "integration-tests/harness.h"
#include "integration-tests/migration_fixture.h"
#include "vault/v1/agent.grpc.pb.h"
#include "vault/v1/hostcall.pb.h"

namespace vault::integration {
namespace {

using ::testing::ElementsAre;
using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::StartsWith;
using vault::v1::AgentStatus;

constexpr char kA[] = "a";
constexpr char kB[] = "b";
constexpr char kC[] = "c";

// A Scheme spec of inline code `code` (its lambda last), the owner's usual grants.
std::string Spec(const std::string& code, const std::string& constraints,
                 const std::string& id = "") {
  return absl::StrCat("(spawn-agent\n", id.empty() ? "" : absl::StrCat("  (id \"", id, "\")\n"),
                      "  (purpose \"replay test\")\n  (code '", code,
                      ")\n  (capabilities (read \"/vault/pub/replay/\") (cas-write)\n"
                      "    (migrate (vaults (a b c))))\n  (constraints ",
                      constraints, "))\n");
}

class ReplayTest : public MigrationTest {
 protected:
  // Each vault's file names it; the owner is trusted everywhere with what the agents use.
  void BeforeVaultdsStart() override {
    for (const char* name : {kA, kB, kC}) {
      const std::string dir = V(name).data_dir + "/files/pub/replay";
      std::filesystem::create_directories(dir);
      ASSERT_TRUE(WriteFile(dir + "/where.txt", absl::StrCat("file of ", name)).ok());
    }
  }
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(MigrationTest::SetUp());
    if (IsSkipped()) return;
    owner_key_ = NewKey("owner", &owner_);
    for (const char* name : {kA, kB, kC}) {
      ASSERT_NO_FATAL_FAILURE(
          Trust(name, owner_key_, {"read:/vault/pub", "cas-write", "migrate:a,b,c"}));
    }
  }

  // Spawns `spec` (text) on `vault` as the owner, with `state` as its initial state when given.
  RunResult SpawnResult(const std::string& vault, const std::string& spec,
                        const std::optional<std::string>& state = std::nullopt) {
    const std::string file = WriteSpec(spec);
    std::vector<std::string> args = {"agent", "spawn", file, "--as", owner_key_};
    if (state.has_value()) {
      EXPECT_TRUE(WriteFile(file + ".state", *state).ok());
      args.insert(args.end(), {"--state", file + ".state"});
    }
    return Ctl(vault, args);
  }
  std::string Spawn(const std::string& vault, const std::string& spec,
                    const std::optional<std::string>& state = std::nullopt) {
    return MigrationTest::Spawn(vault, WriteSpec(spec), owner_key_, state);
  }
  std::string WriteSpec(const std::string& spec) {
    const std::string file = absl::StrCat(root(), "/spec-", ++specs_, ".scm");
    EXPECT_TRUE(WriteFile(file, spec).ok());
    return file;
  }

  // Waits until the agent is in `state` on `vault`.
  vault::v1::AgentRecord WaitState(const std::string& vault, const std::string& id,
                                   vault::v1::AgentState state) {
    return WaitFor(
               vault, id, [state](const AgentStatus& s) { return s.record().state() == state; },
               absl::Seconds(60), vault::v1::AgentState_Name(state))
        .record();
  }

  std::string CasGet(const std::string& vault, const std::string& digest) {
    RunResult r = Ctl(vault, {"cas", "get", digest});
    EXPECT_EQ(r.exit_code, kExitOk) << r;
    return r.out;
  }

  int specs_ = 0;
};

// Pattern 4's shape on a route from the initial state: at each vault the agent logs where it is
// and what that vault's file says; then home. Each line is logged once, on the vault where it was
// true: nothing before a hop is done again after it.
constexpr char kTour[] = R"((let ()
      (define route (string-split (utf8->string (get-state)) #\space))
      (define (here) (cdr (assq 'vault (self-inspect))))
      (define (where) (utf8->string (read-file "/vault/pub/replay/where.txt")))
      (define seen '())
      (define (visit v)
        (migrate-to v)
        (set! seen (cons (where) seen))
        (log "at " (here) ": " (car seen)))
      (lambda ()
        (log "start at " (here) ": " (where))
        (for-each visit route)
        (migrate-home)
        (log "home at " (here) " having seen " (string-join (reverse seen) ", "))
        (string-join (reverse seen) "\n"))))";

TEST_F(ReplayTest, PatternFourVisitsThreeVaultsAndComesHome) {
  std::string id = Spawn(kA, Spec(kTour, "(max-migrations 3) (max-runtime 60)"), "b c");
  ASSERT_FALSE(id.empty());
  vault::v1::AgentRecord home = WaitState(kA, id, vault::v1::COMPLETED);
  EXPECT_EQ(home.hop(), 3u);
  EXPECT_EQ(home.arrived_from(), kC);
  EXPECT_EQ(CasGet(kA, DigestText(home.result())), "file of b\nfile of c");
  EXPECT_THAT(Logs(kA, id),
              ElementsAre("start at a: file of a", "home at a having seen file of b, file of c"));
  EXPECT_THAT(Logs(kB, id), ElementsAre("at b: file of b"));
  EXPECT_THAT(Logs(kC, id), ElementsAre("at c: file of c"));
  for (const char* v : {kB, kC}) {
    absl::StatusOr<AgentStatus> st = Get(v, id);
    ASSERT_TRUE(st.ok()) << st.status();
    EXPECT_EQ(st->record().state(), vault::v1::DEPARTED) << v;
  }
}

TEST_F(ReplayTest, MaxMigrationsRefusesTheHopPastIt) {
  std::string id = Spawn(kA, Spec(kTour, "(max-migrations 2) (max-runtime 60)"), "b c");
  ASSERT_FALSE(id.empty());
  // The third hop (home from c) is refused there: migrate-home raises, and the agent, which
  // does not catch it, fails on c.
  vault::v1::AgentRecord c = WaitState(kC, id, vault::v1::FAILED);
  EXPECT_EQ(c.hop(), 2u);
  EXPECT_THAT(c.reason(), HasSubstr(absl::StrCat("denied: agent ", id,
                                                 " has made 2 of its 2 migrations "
                                                 "(max-migrations)")));
  EXPECT_THAT(Logs(kC, id), ElementsAre("at c: file of c"));
  absl::StatusOr<AgentStatus> a = Get(kA, id);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->record().state(), vault::v1::DEPARTED);
}

// An agent that collects the data of the messages it is sent until a "stop".
constexpr char kCollector[] = R"((let ()
      (define (here) (cdr (assq 'vault (self-inspect))))
      (lambda ()
        (log "waiting on " (here))
        (let loop ((got '()))
          (let ((m (agent-receive timeout: 30000)))
            (cond ((not m) "no stop came")
                  ((equal? (cdr (assq 'type m)) "stop")
                   (log "stopped on " (here) " after " (string-join (reverse got) ","))
                   (string-join (reverse got) ","))
                  (else (loop (cons (utf8->string (cdr (assq 'data m))) got)))))))))";

// An operator's hop of an agent waiting for messages: it resumes at the destination where it
// was, with what it had received (answered from its log), and goes on there.
TEST_F(ReplayTest, AnOperatorHopResumesTheAgentWhereItWas) {
  std::string id = Spawn(kA, Spec(kCollector, "(max-runtime 60)"));
  ASSERT_FALSE(id.empty());
  WaitState(kA, id, vault::v1::RUNNING);
  auto send = [&](const std::string& vault, const std::string& type, const std::string& data) {
    const std::string file = absl::StrCat(root(), "/msg-", data);
    ASSERT_TRUE(WriteFile(file, data).ok());
    RunResult r = Ctl(vault, {"agent", "send", id, "--type", type, "--data", file});
    ASSERT_EQ(r.exit_code, kExitOk) << r;
  };
  send(kA, "item", "one");
  send(kA, "item", "two");
  // Both received before the hop (the log has them).
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (absl::Now() < deadline) {
    absl::StatusOr<AgentStatus> st = Get(kA, id);
    if (st.ok() && st->record().counters().host_calls() >= 5) break;
    absl::SleepFor(absl::Milliseconds(20));
  }
  RunResult moved = Ctl(kA, {"migrate", id, "--to", kB});
  ASSERT_EQ(moved.exit_code, kExitOk) << moved;
  WaitState(kB, id, vault::v1::RUNNING);
  send(kB, "item", "three");
  send(kB, "stop", "x");
  vault::v1::AgentRecord b = WaitState(kB, id, vault::v1::COMPLETED);
  EXPECT_EQ(CasGet(kB, DigestText(b.result())), "one,two,three");
  EXPECT_THAT(Logs(kA, id), ElementsAre("waiting on a"));
  EXPECT_THAT(Logs(kB, id), ElementsAre("stopped on b after one,two,three"));
}

// An operator's hop that the destination refuses (c no longer trusts the owner): the agent,
// frozen meanwhile, goes on where it was, with what it had received.
TEST_F(ReplayTest, AHopTheDestinationRefusesLeavesTheAgentWhereItWas) {
  std::string id = Spawn(kA, Spec(kCollector, "(max-runtime 60)"));
  ASSERT_FALSE(id.empty());
  WaitState(kA, id, vault::v1::RUNNING);
  auto send = [&](const std::string& type, const std::string& data) {
    const std::string file = absl::StrCat(root(), "/msg-", data);
    ASSERT_TRUE(WriteFile(file, data).ok());
    RunResult r = Ctl(kA, {"agent", "send", id, "--type", type, "--data", file});
    ASSERT_EQ(r.exit_code, kExitOk) << r;
  };
  send("item", "one");
  RunResult untrust = Ctl(kC, {"policy", "untrust", owner_key_});
  ASSERT_EQ(untrust.exit_code, kExitOk) << untrust;
  RunResult moved = Ctl(kA, {"migrate", id, "--to", kC});
  EXPECT_NE(moved.exit_code, kExitOk) << moved;
  send("item", "two");
  send("stop", "x");
  vault::v1::AgentRecord a = WaitState(kA, id, vault::v1::COMPLETED);
  EXPECT_EQ(a.hop(), 0u);
  EXPECT_EQ(CasGet(kA, DigestText(a.result())), "one,two");
  EXPECT_THAT(Logs(kA, id), ElementsAre("waiting on a", "stopped on a after one,two"));
}

// Its own hop refused (z is no member), the agent goes on here; an operator's hop then
// moves it, and at the destination its refused migrate is answered as refused (from its log),
// not as made.
TEST_F(ReplayTest, ARefusedMigrateStaysRefusedAfterAnOperatorHop) {
  const std::string code = R"((let ()
      (define (here) (cdr (assq 'vault (self-inspect))))
      (lambda ()
        (catch 'host-error
          (lambda () (migrate-to "z"))
          (lambda (key call code message) (log "refused on " (here))))
        (agent-receive timeout: 30000)
        (log "went on at " (here))
        "done")))";
  std::string id = Spawn(kA, Spec(code, "(max-runtime 60)"));
  ASSERT_FALSE(id.empty());
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (absl::Now() < deadline) {
    absl::StatusOr<AgentStatus> st = Get(kA, id);
    if (st.ok() && st->record().counters().log_lines() == 1) break;
    absl::SleepFor(absl::Milliseconds(20));
  }
  RunResult moved = Ctl(kA, {"migrate", id, "--to", kB});
  ASSERT_EQ(moved.exit_code, kExitOk) << moved;
  WaitState(kB, id, vault::v1::RUNNING);
  const std::string file = root() + "/go";
  ASSERT_TRUE(WriteFile(file, "go").ok());
  RunResult sent = Ctl(kB, {"agent", "send", id, "--type", "go", "--data", file});
  ASSERT_EQ(sent.exit_code, kExitOk) << sent;
  vault::v1::AgentRecord b = WaitState(kB, id, vault::v1::COMPLETED);
  EXPECT_EQ(b.hop(), 1u);
  EXPECT_THAT(Logs(kA, id), ElementsAre("refused on a"));
  EXPECT_THAT(Logs(kB, id), ElementsAre("went on at b"));
}

// An agent that checkpointed resumes after its vault is killed (SIGKILL) and started again: its
// calls up to the checkpoint are answered from its log (the file it read is not read again: the
// test changes it meanwhile), the rest run live.
TEST_F(ReplayTest, ARestartResumesFromTheLastCheckpoint) {
  const std::string code = R"((let ()
      (define (where) (utf8->string (read-file "/vault/pub/replay/where.txt")))
      (lambda ()
        (let ((before (where)))
          (log "read " before)
          (checkpoint "after the read")
          (let wait ()
            (if (not (agent-receive timeout: 60000)) (wait)))
          (log "resumed with " before "; now " (where))
          before))))";
  std::string id = Spawn(kA, Spec(code, "(max-runtime 120)"));
  ASSERT_FALSE(id.empty());
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (absl::Now() < deadline) {
    absl::StatusOr<AgentStatus> st = Get(kA, id);
    if (st.ok() && st->record().counters().checkpoints() == 1) break;
    absl::SleepFor(absl::Milliseconds(20));
  }
  M(kA).vaultd->Kill();
  ASSERT_TRUE(WriteFile(V(kA).data_dir + "/files/pub/replay/where.txt", "changed").ok());
  ASSERT_NO_FATAL_FAILURE(Restart(kA));
  WaitState(kA, id, vault::v1::RUNNING);
  const std::string file = root() + "/go";
  ASSERT_TRUE(WriteFile(file, "go").ok());
  RunResult sent = Ctl(kA, {"agent", "send", id, "--type", "go", "--data", file});
  ASSERT_EQ(sent.exit_code, kExitOk) << sent;
  vault::v1::AgentRecord a = WaitState(kA, id, vault::v1::COMPLETED);
  EXPECT_EQ(CasGet(kA, DigestText(a.result())), "file of a");
  EXPECT_EQ(a.counters().restarts(), 1u);
  EXPECT_THAT(Logs(kA, id), ElementsAre("read file of a", "resumed with file of a; now changed"));
}

// A log is checked whole before a replay starts. The agent's log is taken from a after its
// checkpoint and spawned, under the same id, on b: as it is, b resumes the agent from
// it (answered from the log: a's file); with a result changed, b refuses it.
class ReplayLogTest : public ReplayTest {
 protected:
  static constexpr char kCode[] = R"((let ()
      (define (where) (utf8->string (read-file "/vault/pub/replay/where.txt")))
      (lambda ()
        (let ((seen (where)))
          (checkpoint "x")
          (log "seen: " seen)
          seen))))";

  // The log of agent `id` (run on a to its end): the state it checkpointed.
  std::string LogOf(const std::string& id) {
    vault::v1::AgentRecord a = WaitState(kA, id, vault::v1::COMPLETED);
    return CasGet(kA, DigestText(a.state_digest()));
  }
};

TEST_F(ReplayLogTest, AnotherMemberResumesTheAgentFromItsLog) {
  std::string id = Spawn(kA, Spec(kCode, "(max-runtime 60)", "a-replay-1"));
  ASSERT_EQ(id, "a-replay-1");
  std::string log = LogOf(id);
  ASSERT_THAT(log, StartsWith("vault-effect-log/1\n"));
  ASSERT_EQ(Spawn(kB, Spec(kCode, "(max-runtime 60)", id), log), id);
  vault::v1::AgentRecord b = WaitState(kB, id, vault::v1::COMPLETED);
  EXPECT_EQ(CasGet(kB, DigestText(b.result())), "file of a");
  EXPECT_THAT(Logs(kB, id), ElementsAre("seen: file of a"));
}

TEST_F(ReplayLogTest, AChangedResultIsRefused) {
  std::string id = Spawn(kA, Spec(kCode, "(max-runtime 60)", "a-replay-2"));
  ASSERT_EQ(id, "a-replay-2");
  std::string object = LogOf(id);
  const size_t header = std::string("vault-effect-log/1\n").size();
  vault::v1::EffectLog log;
  ASSERT_TRUE(log.ParseFromString(object.substr(header)));
  // Effect 0 is the read: its answer now says c.
  ASSERT_GE(log.nodes_size(), 1);
  ASSERT_EQ(log.nodes(0).op(), "read_file");
  vault::v1::HostResponse r;
  ASSERT_TRUE(r.ParseFromString(log.nodes(0).response()));
  r.mutable_read_file()->set_data("file of c");
  log.mutable_nodes(0)->set_response(r.SerializeAsString());
  RunResult refused = SpawnResult(kB, Spec(kCode, "(max-runtime 60)", id),
                                  absl::StrCat(object.substr(0, header), log.SerializeAsString()));
  EXPECT_NE(refused.exit_code, kExitOk) << refused;
  EXPECT_THAT(refused.err, HasSubstr("refused its effect log: effect log: effect 0 (read_file)'s "
                                     "result does not match its digest (it was changed)"));
  // With its digest changed too, the chain no longer ends at the signed head.
  log.mutable_nodes(0)->set_response_sha256(Sha256(log.nodes(0).response()));
  refused = SpawnResult(kC, Spec(kCode, "(max-runtime 60)", id),
                        absl::StrCat(object.substr(0, header), log.SerializeAsString()));
  EXPECT_NE(refused.exit_code, kExitOk) << refused;
  EXPECT_THAT(refused.err, HasSubstr("refused its effect log: effect log: its head "));
  EXPECT_THAT(refused.err, HasSubstr(" is not its chain's ("));
  EXPECT_THAT(refused.err, HasSubstr("): a result was changed"));
}

TEST_F(ReplayLogTest, ALogIsOfItsCodeOnly) {
  std::string id = Spawn(kA, Spec(kCode, "(max-runtime 60)", "a-replay-3"));
  ASSERT_EQ(id, "a-replay-3");
  std::string log = LogOf(id);
  // Other code under the same id: refused before it runs.
  RunResult refused = SpawnResult(
      kB, Spec(R"((lambda () (cas-put "something else") "done"))", "(max-runtime 60)", id), log);
  EXPECT_NE(refused.exit_code, kExitOk) << refused;
  EXPECT_THAT(refused.err, HasSubstr("refused its effect log: effect log: it is of the code "));
}

// Code whose path depends on what a replay cannot reproduce diverges from its log, and the vault
// ends it at the first call that differs rather than answer it from a history it did not make.
// Here b's frames are 4 MiB where a's are 1 MiB: a put of 1.5 MB went to a as an upload in pieces,
// and goes to b as one cas_put.
class DivergingReplayTest : public ReplayLogTest {
 protected:
  void BeforeVaultdsStart() override {
    ReplayLogTest::BeforeVaultdsStart();
    absl::StatusOr<std::string> conf = ReadFile(V(kB).config);
    ASSERT_TRUE(conf.ok()) << conf.status();
    ASSERT_THAT(*conf, HasSubstr("\nagents {\n"));
    ASSERT_TRUE(WriteFile(V(kB).config, absl::StrReplaceAll(
                                            *conf, {{"\nagents {\n",
                                                     "\nagents {\n  max_frame_bytes: 4194304\n"}}))
                    .ok());
  }
};

TEST_F(DivergingReplayTest, AReplayThatDivergesIsEnded) {
  const std::string code = R"((lambda ()
      (cas-put (make-string 1500000 #\a))
      (checkpoint "x")
      (agent-receive timeout: 100)
      "done"))";
  std::string id = Spawn(kA, Spec(code, "(max-runtime 60)", "a-replay-4"));
  ASSERT_EQ(id, "a-replay-4");
  std::string log = LogOf(id);
  ASSERT_EQ(Spawn(kB, Spec(code, "(max-runtime 60)", id), log), id);
  vault::v1::AgentRecord b = WaitState(kB, id, vault::v1::TERMINATED);
  EXPECT_THAT(b.reason(), StartsWith("replay diverged at effect 0 of "));
  EXPECT_THAT(b.reason(), EndsWith(": the code made a cas_put call where its log has "
                                   "cas_upload_start"));
  EXPECT_EQ(b.counters().checkpoints(), 0u);
}

}  // namespace
}  // namespace vault::integration
