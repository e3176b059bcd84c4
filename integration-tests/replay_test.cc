// Scheme agents move and restart by replay (docs/replay.md), on a real three-vault federation
// (vault-a, vault-b, vault-c: mutual TLS on loopback, each trusting the owner). The RFC's pattern
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
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/grpc_status.h"
#include "integration-tests/harness.h"
#include "vault/v1/agent.grpc.pb.h"
#include "vault/v1/hostcall.pb.h"

namespace vault::integration {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;
using vault::v1::AgentStatus;

constexpr char kA[] = "vault-a";
constexpr char kB[] = "vault-b";
constexpr char kC[] = "vault-c";

// A Scheme spec of inline code `code` (its lambda last), the owner's usual grants.
std::string Spec(const std::string& code, const std::string& constraints,
                 const std::string& id = "") {
  return absl::StrCat("(spawn-agent\n", id.empty() ? "" : absl::StrCat("  (id \"", id, "\")\n"),
                      "  (purpose \"replay test\")\n  (code '", code,
                      ")\n  (capabilities (read \"/vault/pub/replay/\") (cas-write)\n"
                      "    (migrate (vaults (vault-a vault-b vault-c))))\n  (constraints ",
                      constraints, "))\n");
}

class ReplayTest : public VaultTest {
 protected:
  void SetUp() override {
    VaultTest::SetUp();
    std::string ca = CreateCa();
    ASSERT_FALSE(ca.empty());
    for (const char* name : {kA, kB, kC}) {
      absl::StatusOr<VaultDir> v = InitVault(name, ca);
      ASSERT_TRUE(v.ok()) << v.status();
      vaults_[name] = *v;
      const std::string dir = v->data_dir + "/files/pub/replay";
      std::filesystem::create_directories(dir);
      ASSERT_TRUE(WriteFile(dir + "/where.txt", absl::StrCat("file of ", name)).ok());
    }
    for (const char* from : {kA, kB, kC}) {
      for (const char* to : {kA, kB, kC}) {
        if (std::string(from) != to) {
          ASSERT_EQ(AddMember(vaults_[from], vaults_[to]), absl::OkStatus());
        }
      }
    }
    for (const char* name : {kA, kB, kC}) {
      absl::StatusOr<Vaultd*> d = StartVaultd(vaults_[name]);
      ASSERT_TRUE(d.ok()) << d.status();
      vaultd_[name] = *d;
      agents_[name] = vault::v1::Agents::NewStub(UnixChannel(vaults_[name].socket));
    }
    RunResult status = Ctl(kA, {"-o", "json", "status"});
    ASSERT_EQ(status.exit_code, kExitOk) << status;
    if (JsonField(status.out, "agents_enabled") != "true") {
      GTEST_SKIP() << "agents are disabled here: "
                   << JsonField(status.out, "agents_disabled_reason").value_or("?");
    }
    owner_key_ = root() + "/owner.key";
    RunResult key = Vaultctl({"key", "generate", "--out", owner_key_});
    ASSERT_EQ(key.exit_code, kExitOk) << key;
    for (const char* name : {kA, kB, kC}) {
      RunResult r = Ctl(name, {"policy", "trust", owner_key_, "--ceiling", "read:/vault/pub",
                               "cas-write", "migrate:vault-a,vault-b,vault-c"});
      ASSERT_EQ(r.exit_code, kExitOk) << r;
    }
  }

  RunResult Ctl(const std::string& vault, std::vector<std::string> args) {
    args.insert(args.begin(), {"--vault", vaults_[vault].socket});
    return Vaultctl(args, absl::Seconds(30));
  }

  // Spawns `spec` on `vault` as the owner, with `state` as its initial state when given.
  RunResult SpawnResult(const std::string& vault, const std::string& spec,
                        const std::optional<std::string>& state = std::nullopt) {
    const std::string file = absl::StrCat(root(), "/spec-", ++specs_, ".scm");
    EXPECT_TRUE(WriteFile(file, spec).ok());
    std::vector<std::string> args = {"agent", "spawn", file, "--as", owner_key_};
    if (state.has_value()) {
      EXPECT_TRUE(WriteFile(file + ".state", *state).ok());
      args.insert(args.end(), {"--state", file + ".state"});
    }
    return Ctl(vault, args);
  }
  std::string Spawn(const std::string& vault, const std::string& spec,
                    const std::optional<std::string>& state = std::nullopt) {
    RunResult r = SpawnResult(vault, spec, state);
    EXPECT_EQ(r.exit_code, kExitOk) << r;
    std::string id(absl::StripAsciiWhitespace(r.out));
    EXPECT_THAT(id, StartsWith("a-")) << r;
    return r.exit_code == kExitOk ? id : "";
  }

  absl::StatusOr<AgentStatus> Get(const std::string& vault, const std::string& id) {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, absl::Seconds(10));
    vault::v1::GetAgentRequest req;
    req.set_id(id);
    AgentStatus out;
    grpc::Status s = agents_[vault]->Get(&ctx, req, &out);
    if (!s.ok()) return common::FromGrpc(s);
    return out;
  }

  std::vector<std::string> Logs(const std::string& vault, const std::string& id) {
    RunResult r = Ctl(vault, {"-o", "json", "agent", "logs", id});
    std::vector<std::string> out;
    for (absl::string_view line : absl::StrSplit(r.out, '\n', absl::SkipEmpty())) {
      if (std::optional<std::string> m = JsonField(line, "message")) out.push_back(*m);
    }
    return out;
  }

  // Polls `vault` until the agent is in `state` there; records a failure with every vault's
  // view of it otherwise.
  vault::v1::AgentRecord WaitFor(const std::string& vault, const std::string& id,
                                 vault::v1::AgentState state,
                                 absl::Duration timeout = absl::Seconds(60)) {
    const absl::Time deadline = absl::Now() + timeout;
    vault::v1::AgentRecord last;
    while (absl::Now() < deadline) {
      absl::StatusOr<AgentStatus> st = Get(vault, id);
      if (st.ok()) {
        last = st->record();
        if (last.state() == state) return last;
      }
      absl::SleepFor(absl::Milliseconds(50));
    }
    std::string views;
    for (const char* v : {kA, kB, kC}) {
      absl::StatusOr<AgentStatus> st = Get(v, id);
      absl::StrAppend(&views, "\n", v, ": ",
                      st.ok() ? st->record().ShortDebugString() : st.status().ToString(), "\n  ",
                      absl::StrJoin(Logs(v, id), "\n  "));
    }
    ADD_FAILURE() << "agent " << id << " did not reach " << vault::v1::AgentState_Name(state)
                  << " on " << vault << views;
    return last;
  }

  std::string CasGet(const std::string& vault, const std::string& digest) {
    RunResult r = Ctl(vault, {"cas", "get", digest});
    EXPECT_EQ(r.exit_code, kExitOk) << r;
    return r.out;
  }

  std::map<std::string, VaultDir> vaults_;
  std::map<std::string, Vaultd*> vaultd_;
  std::map<std::string, std::unique_ptr<vault::v1::Agents::Stub>> agents_;
  std::string owner_key_;
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
  std::string id = Spawn(kA, Spec(kTour, "(max-migrations 3) (max-runtime 60)"), "vault-b vault-c");
  ASSERT_FALSE(id.empty());
  vault::v1::AgentRecord home = WaitFor(kA, id, vault::v1::COMPLETED);
  EXPECT_EQ(home.hop(), 3u);
  EXPECT_EQ(home.arrived_from(), kC);
  EXPECT_EQ(CasGet(kA, DigestText(home.result())), "file of vault-b\nfile of vault-c");
  EXPECT_THAT(Logs(kA, id),
              ElementsAre("start at vault-a: file of vault-a",
                          "home at vault-a having seen file of vault-b, file of vault-c"));
  EXPECT_THAT(Logs(kB, id), ElementsAre("at vault-b: file of vault-b"));
  EXPECT_THAT(Logs(kC, id), ElementsAre("at vault-c: file of vault-c"));
  for (const char* v : {kB, kC}) {
    absl::StatusOr<AgentStatus> st = Get(v, id);
    ASSERT_TRUE(st.ok()) << st.status();
    EXPECT_EQ(st->record().state(), vault::v1::DEPARTED) << v;
  }
}

TEST_F(ReplayTest, MaxMigrationsRefusesTheHopPastIt) {
  std::string id = Spawn(kA, Spec(kTour, "(max-migrations 2) (max-runtime 60)"), "vault-b vault-c");
  ASSERT_FALSE(id.empty());
  // The third hop (home from vault-c) is refused there: migrate-home raises, and the agent, which
  // does not catch it, fails on vault-c.
  vault::v1::AgentRecord c = WaitFor(kC, id, vault::v1::FAILED);
  EXPECT_EQ(c.hop(), 2u);
  EXPECT_THAT(c.reason(), HasSubstr(absl::StrCat("denied: agent ", id,
                                                 " has made 2 of its 2 migrations "
                                                 "(max-migrations)")));
  EXPECT_THAT(Logs(kC, id), ElementsAre("at vault-c: file of vault-c"));
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
  WaitFor(kA, id, vault::v1::RUNNING);
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
  WaitFor(kB, id, vault::v1::RUNNING);
  send(kB, "item", "three");
  send(kB, "stop", "x");
  vault::v1::AgentRecord b = WaitFor(kB, id, vault::v1::COMPLETED);
  EXPECT_EQ(CasGet(kB, DigestText(b.result())), "one,two,three");
  EXPECT_THAT(Logs(kA, id), ElementsAre("waiting on vault-a"));
  EXPECT_THAT(Logs(kB, id), ElementsAre("stopped on vault-b after one,two,three"));
}

// An operator's hop that the destination refuses (vault-c no longer trusts the owner): the agent,
// frozen meanwhile, goes on where it was, with what it had received.
TEST_F(ReplayTest, AHopTheDestinationRefusesLeavesTheAgentWhereItWas) {
  std::string id = Spawn(kA, Spec(kCollector, "(max-runtime 60)"));
  ASSERT_FALSE(id.empty());
  WaitFor(kA, id, vault::v1::RUNNING);
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
  vault::v1::AgentRecord a = WaitFor(kA, id, vault::v1::COMPLETED);
  EXPECT_EQ(a.hop(), 0u);
  EXPECT_EQ(CasGet(kA, DigestText(a.result())), "one,two");
  EXPECT_THAT(Logs(kA, id), ElementsAre("waiting on vault-a", "stopped on vault-a after one,two"));
}

// Its own hop refused (vault-z is no member), the agent goes on here; an operator's hop then
// moves it, and at the destination its refused migrate is answered as refused (from its log),
// not as made.
TEST_F(ReplayTest, ARefusedMigrateStaysRefusedAfterAnOperatorHop) {
  const std::string code = R"((let ()
      (define (here) (cdr (assq 'vault (self-inspect))))
      (lambda ()
        (catch 'host-error
          (lambda () (migrate-to "vault-z"))
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
  WaitFor(kB, id, vault::v1::RUNNING);
  const std::string file = root() + "/go";
  ASSERT_TRUE(WriteFile(file, "go").ok());
  RunResult sent = Ctl(kB, {"agent", "send", id, "--type", "go", "--data", file});
  ASSERT_EQ(sent.exit_code, kExitOk) << sent;
  vault::v1::AgentRecord b = WaitFor(kB, id, vault::v1::COMPLETED);
  EXPECT_EQ(b.hop(), 1u);
  EXPECT_THAT(Logs(kA, id), ElementsAre("refused on vault-a"));
  EXPECT_THAT(Logs(kB, id), ElementsAre("went on at vault-b"));
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
  vaultd_[kA]->Kill();
  ASSERT_TRUE(WriteFile(vaults_[kA].data_dir + "/files/pub/replay/where.txt", "changed").ok());
  ASSERT_TRUE(vaultd_[kA]->Start().ok());
  agents_[kA] = vault::v1::Agents::NewStub(UnixChannel(vaults_[kA].socket));
  WaitFor(kA, id, vault::v1::RUNNING);
  const std::string file = root() + "/go";
  ASSERT_TRUE(WriteFile(file, "go").ok());
  RunResult sent =
      Vaultctl({"--vault", vaults_[kA].socket, "agent", "send", id, "--type", "go", "--data", file},
               absl::Seconds(30));
  ASSERT_EQ(sent.exit_code, kExitOk) << sent;
  vault::v1::AgentRecord a = WaitFor(kA, id, vault::v1::COMPLETED);
  EXPECT_EQ(CasGet(kA, DigestText(a.result())), "file of vault-a");
  EXPECT_EQ(a.counters().restarts(), 1u);
  EXPECT_THAT(Logs(kA, id),
              ElementsAre("read file of vault-a", "resumed with file of vault-a; now changed"));
}

// A log is checked whole before a replay starts. The agent's log is taken from vault-a after its
// checkpoint and spawned, under the same id, on vault-b: as it is, vault-b resumes the agent from
// it (answered from the log: vault-a's file); with a result changed, vault-b refuses it.
class ReplayLogTest : public ReplayTest {
 protected:
  static constexpr char kCode[] = R"((let ()
      (define (where) (utf8->string (read-file "/vault/pub/replay/where.txt")))
      (lambda ()
        (let ((seen (where)))
          (checkpoint "x")
          (log "seen: " seen)
          seen))))";

  // The log of agent `id` (run on vault-a to its end): the state it checkpointed.
  std::string LogOf(const std::string& id) {
    vault::v1::AgentRecord a = WaitFor(kA, id, vault::v1::COMPLETED);
    return CasGet(kA, DigestText(a.state_digest()));
  }
};

TEST_F(ReplayLogTest, AnotherMemberResumesTheAgentFromItsLog) {
  std::string id = Spawn(kA, Spec(kCode, "(max-runtime 60)", "a-replay-1"));
  ASSERT_EQ(id, "a-replay-1");
  std::string log = LogOf(id);
  ASSERT_THAT(log, StartsWith("vault-effect-log/1\n"));
  ASSERT_EQ(Spawn(kB, Spec(kCode, "(max-runtime 60)", id), log), id);
  vault::v1::AgentRecord b = WaitFor(kB, id, vault::v1::COMPLETED);
  EXPECT_EQ(CasGet(kB, DigestText(b.result())), "file of vault-a");
  EXPECT_THAT(Logs(kB, id), ElementsAre("seen: file of vault-a"));
}

TEST_F(ReplayLogTest, AChangedResultIsRefused) {
  std::string id = Spawn(kA, Spec(kCode, "(max-runtime 60)", "a-replay-2"));
  ASSERT_EQ(id, "a-replay-2");
  std::string object = LogOf(id);
  const size_t header = std::string("vault-effect-log/1\n").size();
  vault::v1::EffectLog log;
  ASSERT_TRUE(log.ParseFromString(object.substr(header)));
  // Effect 0 is the read: its answer now says vault-c.
  ASSERT_GE(log.nodes_size(), 1);
  ASSERT_EQ(log.nodes(0).op(), "read_file");
  vault::v1::HostResponse r;
  ASSERT_TRUE(r.ParseFromString(log.nodes(0).response()));
  r.mutable_read_file()->set_data("file of vault-c");
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

// Code whose path depends on what a replay cannot reproduce (here, the address of a procedure,
// which each process places elsewhere) diverges from its log, and the vault ends it at the first
// call that differs rather than answer it from a history it did not make.
TEST_F(ReplayLogTest, AReplayThatDivergesIsEnded) {
  const std::string code = R"((lambda ()
      (log (object->string (lambda () 1)))
      (checkpoint "x")
      (agent-receive timeout: 100)
      "done"))";
  std::string id = Spawn(kA, Spec(code, "(max-runtime 60)", "a-replay-4"));
  ASSERT_EQ(id, "a-replay-4");
  std::string log = LogOf(id);
  ASSERT_EQ(Spawn(kB, Spec(code, "(max-runtime 60)", id), log), id);
  vault::v1::AgentRecord b = WaitFor(kB, id, vault::v1::TERMINATED);
  EXPECT_THAT(b.reason(), StartsWith("replay diverged at effect 0 of 1: the code made another log "
                                     "call than its log has (request "));
  EXPECT_EQ(b.counters().log_lines(), 0u);
}

}  // namespace
}  // namespace vault::integration
