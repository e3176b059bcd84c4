// Mobile agents across the federation (issue 7, "Location, journey and remote control"), with
// three real vaultd processes: the home vault learns where its agent went from the receipts its
// hops forward; `agent where` on any member finds it; `agent journey` lists its hops from the
// audit logs (the vault's own and its mirrors); `agent terminate` given to any member reaches the
// vault hosting the agent, checked there; a revocation given to one member reaches every member
// (also one that was down when it was given) and ends the agent where it runs; messages for a
// departed agent are refused with where it went.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "integration-tests/migration_fixture.h"

namespace vault::integration {
namespace {

using ::testing::HasSubstr;
using vault::v1::AgentStatus;

class MobilityTest : public MigrationTest {
 protected:
  // The counter agent, moved a -> b -> c by the operator.
  std::string SpawnAndTour() {
    std::string id = SpawnCounter("tourist", 5);
    if (id.empty()) return "";
    ExpectHop(id, "a", "b", 1,
              Ctl("a", {"-o", "json", "migrate", id, "--to", "b", "--checkpoint-wait", "1000"}));
    ExpectHop(id, "b", "c", 2,
              Ctl("b", {"-o", "json", "migrate", id, "--to", "c", "--checkpoint-wait", "1000"}));
    return id;
  }

  // Polls `vaultctl -o json agent where` on `vault` until `pred` holds for its output.
  RunResult WaitWhere(const std::string& vault, const std::string& id,
                      const std::function<bool(const RunResult&)>& pred,
                      absl::Duration timeout = absl::Seconds(15)) {
    absl::Time deadline = absl::Now() + timeout;
    RunResult r;
    do {
      r = Ctl(vault, {"-o", "json", "agent", "where", id});
      if (pred(r)) return r;
      absl::SleepFor(absl::Milliseconds(100));
    } while (absl::Now() < deadline);
    ADD_FAILURE() << "agent where " << id << " on " << vault << " never matched: " << r;
    return r;
  }
};

TEST_F(MobilityTest, WhereFindsTheAgentFromAnyMemberAndTheHomeLearnsItsLocation) {
  ASSERT_NO_FATAL_FAILURE(TrustOwnerEverywhere());
  const std::string id = SpawnAndTour();
  ASSERT_FALSE(id.empty());
  for (const char* asked : {"a", "b", "c"}) {
    RunResult r = WaitWhere(asked, id, [](const RunResult& r) { return r.exit_code == kExitOk; });
    EXPECT_EQ(JsonField(r.out, "vault"), "c") << asked << ": " << r;
    EXPECT_EQ(JsonField(r.out, "state"), "running") << r;
    EXPECT_EQ(JsonField(r.out, "hop"), "2") << r;
    EXPECT_EQ(JsonField(r.out, "home_vault"), "a") << r;
  }
  // The home vault learns of hop 2 from c's forwarded receipt: it then asks c directly instead
  // of walking a -> b -> c.
  RunResult home = WaitWhere(
      "a", id, [](const RunResult& r) { return absl::StrContains(r.out, R"("trail":["a","c"])"); });
  EXPECT_THAT(home.out, HasSubstr(R"("trail":["a","c"])"));
  // Text form.
  RunResult text = Ctl("b", {"agent", "where", id});
  ASSERT_EQ(text.exit_code, kExitOk) << text;
  EXPECT_THAT(text.out, HasSubstr(absl::StrCat(id, " is running on c (hop 2)")));
  // An id no member knows.
  RunResult unknown = Ctl("a", {"agent", "where", "a-00000000000000000000000000000000"});
  EXPECT_EQ(unknown.exit_code, kExitNotFound) << unknown;
  EXPECT_THAT(unknown.err, HasSubstr("no member knows agent")) << unknown;
}

TEST_F(MobilityTest, JourneyListsEveryHopWithItsReceiptFromTheMirroredLogs) {
  ASSERT_NO_FATAL_FAILURE(TrustOwnerEverywhere());
  const std::string id = SpawnAndTour();
  ASSERT_FALSE(id.empty());
  const std::string receipt1 = Hex(Sha256(Get("a", id)->record().migration().receipt()));
  const std::string receipt2 = Hex(Sha256(Get("b", id)->record().migration().receipt()));
  // a reads hop 1's arrival from its mirror of b's log and hop 2's from its mirror of c's:
  // polled until the mirrors have caught up.
  const std::string hop1 = absl::StrCat(R"({"hop":"1","from":"a","to":"b",)");
  const std::string hop2 = absl::StrCat(R"({"hop":"2","from":"b","to":"c",)");
  absl::Time deadline = absl::Now() + absl::Seconds(30);
  RunResult r;
  do {
    r = Ctl("a", {"-o", "json", "agent", "journey", id});
    if (r.exit_code == kExitOk && absl::StrContains(r.out, hop1) &&
        absl::StrContains(r.out, hop2) && absl::StrContains(r.out, receipt2)) {
      break;
    }
    absl::SleepFor(absl::Milliseconds(200));
  } while (absl::Now() < deadline);
  ASSERT_EQ(r.exit_code, kExitOk) << r;
  ASSERT_THAT(r.out, HasSubstr(hop1));
  ASSERT_THAT(r.out, HasSubstr(hop2));
  // Each hop carries the receipt hash its source recorded, and the grants in force there.
  const size_t h1 = r.out.find(hop1), h2 = r.out.find(hop2);
  const std::string first = r.out.substr(h1, h2 - h1), second = r.out.substr(h2, 600);
  EXPECT_THAT(first, HasSubstr(absl::StrCat(R"("receipt_sha256":")", receipt1, "\"")));
  EXPECT_THAT(second, HasSubstr(absl::StrCat(R"("receipt_sha256":")", receipt2, "\"")));
  EXPECT_THAT(first, HasSubstr("migrate a b c")) << first;
  EXPECT_THAT(r.out, HasSubstr(R"("logs_read":["a","b","c"])"));
  EXPECT_THAT(r.out, HasSubstr(R"("logs_missing":[])"));
  // The spawn, both departures and both arrivals are among the entries, each from its own log.
  EXPECT_THAT(r.out, HasSubstr(R"({"vault":"a",)"));
  for (const char* action : {"agent.spawn", "agent.departed", "agent.migrate.in"}) {
    EXPECT_THAT(r.out, HasSubstr(absl::StrCat(R"("action":")", action, "\""))) << action;
  }
  RunResult text = Ctl("a", {"agent", "journey", id});
  ASSERT_EQ(text.exit_code, kExitOk) << text;
  EXPECT_THAT(text.out, HasSubstr(absl::StrCat(id, ": 2 hops; logs read: a, b, c")));
}

TEST_F(MobilityTest, TerminateGivenToAnyMemberReachesTheHostAndIsCheckedThere) {
  ASSERT_NO_FATAL_FAILURE(TrustOwnerEverywhere());
  const std::string id = SpawnAndTour();
  ASSERT_FALSE(id.empty());
  // a's administrator is not c's: the request reaches c, which refuses it.
  RunResult admin = Ctl("a", {"agent", "terminate", id, "--as", AdminKey("a")});
  EXPECT_EQ(admin.exit_code, kExitRefused) << admin;
  EXPECT_THAT(admin.err, HasSubstr("may not control agent")) << admin;
  EXPECT_EQ(Get("c", id)->record().state(), vault::v1::RUNNING);
  // c audited the refusal, naming the signer.
  EXPECT_EQ(Audit("c", "agent.control", id).size(), 1u);
  // The spawning principal, asking b (where the agent no longer is): it ends on c.
  RunResult r = Ctl("b", {"-o", "json", "agent", "terminate", id, "--as", owner_key_, "--reason",
                          "done touring"});
  ASSERT_EQ(r.exit_code, kExitOk) << r;
  EXPECT_EQ(JsonField(r.out, "state"), "terminated") << r;
  EXPECT_EQ(JsonField(r.out, "vault"), "c") << r;
  AgentStatus end = WaitFor(
      "c", id, [](const AgentStatus& s) { return s.record().state() == vault::v1::TERMINATED; },
      absl::Seconds(10), "terminated");
  EXPECT_EQ(end.record().reason(), "terminated: done touring");
  EXPECT_TRUE(Processes(id).empty()) << Describe(Processes(id));
  // The records it left behind are unchanged.
  EXPECT_EQ(Get("a", id)->record().state(), vault::v1::DEPARTED);
  EXPECT_EQ(Get("b", id)->record().state(), vault::v1::DEPARTED);
}

TEST_F(MobilityTest, RevocationGossipsToEveryMemberAndEndsTheAgentWhereItRuns) {
  ASSERT_NO_FATAL_FAILURE(TrustOwnerEverywhere());
  const std::string id = SpawnCounter("revoked", 5);
  ASSERT_FALSE(id.empty());
  ExpectHop(id, "a", "b", 1,
            Ctl("a", {"-o", "json", "migrate", id, "--to", "b", "--checkpoint-wait", "1000"}));
  // c is down when the revocation is given to a.
  M("c").vaultd->Kill();  // SIGKILL
  RunResult r = Ctl("a", {"-o", "json", "cap", "revoke", "--agent-id", id, "--as", owner_key_,
                          "--reason", "compromised"});
  ASSERT_EQ(r.exit_code, kExitOk) << r;
  EXPECT_EQ(JsonField(r.out, "added"), "true") << r;
  // b learns it from a and ends the agent it hosts.
  AgentStatus end = WaitFor(
      "b", id, [](const AgentStatus& s) { return s.record().state() == vault::v1::TERMINATED; },
      absl::Seconds(15), "terminated by the gossiped revocation");
  EXPECT_THAT(end.record().reason(), HasSubstr("revoked")) << end.DebugString();
  std::vector<std::string> at_b = Audit("b", "capability.revoke", id);
  ASSERT_EQ(at_b.size(), 1u);
  EXPECT_EQ(JsonField(at_b[0], "gossiped_by"), "a") << at_b[0];
  EXPECT_TRUE(Processes(id).empty()) << Describe(Processes(id));
  // c, back up, gets it too (a keeps retrying; b passes on what was new to it).
  ASSERT_NO_FATAL_FAILURE(Restart("c"));
  std::vector<std::string> at_c = Audit("c", "capability.revoke", id, 1, absl::Seconds(20));
  ASSERT_GE(at_c.size(), 1u);
  EXPECT_EQ(JsonField(at_c[0], "new"), "yes") << at_c[0];
  // c holds it now: given again there, it is not new.
  RunResult again = Ctl("c", {"-o", "json", "cap", "revoke", "--agent-id", id, "--as", owner_key_,
                              "--reason", "compromised"});
  ASSERT_EQ(again.exit_code, kExitOk) << again;
  EXPECT_EQ(JsonField(again.out, "added"), "false") << again;
}

// Logs every message it gets with the vault it runs on, answers queries with that vault, and
// moves itself to the vault a "go" message names.
constexpr absl::string_view kReachable = R"(
a = vault_agent.Agent.connect()
me = a.self_inspect()
a.log("start vault=%s hop=%d" % (me["vault"], me["hop"]))
while True:
    m = a.receive(timeout=0.2)
    if m is None:
        continue
    if m.type == "vault.checkpoint":
        a.checkpoint(b"reachable")
    elif m.type == "vault.query":
        a.send(m.sender, "vault.answer", b"answer from " + me["vault"].encode(), reply_to=m.id)
    elif m.type == "go":
        a.migrate(m.data.decode(), b"reachable")
    else:
        a.log("got %s %s on %s from %s" % (m.type, m.data.decode(), me["vault"], m.sender))
)";

// An operator on a reaches an agent that moved away, with a request signed by its owner: send,
// query, status, and logs -f that follows it from vault to vault until it ends. Unsigned, a says
// where it went and what to add; a key that is neither the owner nor an administrator there is
// refused by the host and audited there.
TEST_F(MobilityTest, OperatorsReachAMovedAgentFromAnyMemberWithASignedRequest) {
  ASSERT_NO_FATAL_FAILURE(TrustOwnerEverywhere({"receive:*"}));
  std::string stranger_principal;
  const std::string stranger = NewKey("stranger", &stranger_principal);
  const std::string id =
      Spawn("a",
            WriteAgent("reachable", kReachable, "(receive (from *)) (migrate (vaults a b c))",
                       "(max-runtime 300) (max-migrations 5)"),
            owner_key_);
  ASSERT_FALSE(id.empty());
  WaitLog("a", id, "start vault=a hop=0");
  const std::string follow_log = root() + "/follow.log";
  absl::StatusOr<std::unique_ptr<ChildProcess>> follower = ChildProcess::Spawn(
      {VaultctlPath(), "--vault", V("a").socket, "agent", "logs", id, "-f", "--as", owner_key_},
      follow_log);
  ASSERT_TRUE(follower.ok()) << follower.status();
  // Unsigned, -f follows a's log and ends saying where the agent went.
  const std::string local_log = root() + "/follow-here.log";
  absl::StatusOr<std::unique_ptr<ChildProcess>> local_follower = ChildProcess::Spawn(
      {VaultctlPath(), "--vault", V("a").socket, "agent", "logs", id, "-f"}, local_log);
  ASSERT_TRUE(local_follower.ok()) << local_follower.status();
  ExpectHop(id, "a", "b", 1,
            Ctl("a", {"-o", "json", "migrate", id, "--to", "b", "--checkpoint-wait", "1000"}));
  WaitLog("b", id, "start vault=b hop=1");
  ASSERT_EQ((*local_follower)->WaitExit(absl::Seconds(10)), std::optional<int>(0));
  EXPECT_THAT(ReadFile(local_log).value_or(""),
              HasSubstr(absl::StrCat("start vault=a hop=0\nvaultctl: agent ", id,
                                     " departed to b (hop 1)\nvaultctl: follow it there with "
                                     "--as KEY")));
  const std::string hello = root() + "/hello";
  ASSERT_TRUE(WriteFile(hello, "hello").ok());

  // Unsigned, a refuses with where it went and the fix.
  RunResult unsigned_send = Ctl("a", {"agent", "send", id, "--type", "note", "--data", hello});
  EXPECT_EQ(unsigned_send.exit_code, kExitRefused) << unsigned_send;
  EXPECT_THAT(unsigned_send.err, HasSubstr(absl::StrCat("agent ", id,
                                                        " has departed to b (hop 1): reach it from "
                                                        "here with --as KEY")))
      << unsigned_send;
  RunResult unsigned_query = Ctl("a", {"agent", "query", id, "anyone?"});
  EXPECT_EQ(unsigned_query.exit_code, kExitRefused) << unsigned_query;
  EXPECT_THAT(unsigned_query.err, HasSubstr("has departed to b")) << unsigned_query;
  RunResult unsigned_status = Ctl("a", {"-o", "json", "agent", "status", id});
  EXPECT_EQ(unsigned_status.exit_code, kExitOk) << unsigned_status;
  EXPECT_EQ(JsonField(unsigned_status.out, "state"), "departed") << unsigned_status;
  EXPECT_EQ(JsonField(unsigned_status.out, "vault"), "a") << unsigned_status;
  EXPECT_THAT(unsigned_status.err, HasSubstr("departed to b; add --as KEY")) << unsigned_status;

  // Signed by the owner, from a: it reaches the agent on b.
  RunResult sent = Ctl("a", {"-o", "json", "agent", "send", id, "--type", "note", "--data", hello,
                             "--as", owner_key_});
  ASSERT_EQ(sent.exit_code, kExitOk) << sent;
  EXPECT_EQ(JsonField(sent.out, "vault"), "b") << sent;
  WaitLog("b", id, "got note hello on b from operator");
  RunResult asked = Ctl("a", {"agent", "query", id, "where?", "--as", owner_key_});
  ASSERT_EQ(asked.exit_code, kExitOk) << asked;
  EXPECT_EQ(asked.out, "answer from b");
  RunResult status = Ctl("a", {"-o", "json", "agent", "status", id, "--as", owner_key_});
  ASSERT_EQ(status.exit_code, kExitOk) << status;
  EXPECT_EQ(JsonField(status.out, "state"), "running") << status;
  EXPECT_EQ(JsonField(status.out, "vault"), "b") << status;
  EXPECT_EQ(JsonField(status.out, "hop"), "1") << status;

  // A stranger's signature: b refuses and audits it, whatever a forwards.
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"agent", "send", id, "--type", "note", "--data", hello, "--as", stranger},
           {"agent", "query", id, "where?", "--as", stranger},
           {"agent", "status", id, "--as", stranger},
           {"agent", "logs", id, "--as", stranger}}) {
    RunResult r = Ctl("a", args);
    EXPECT_EQ(r.exit_code, kExitRefused) << r;
    EXPECT_THAT(r.err, HasSubstr(absl::StrCat(stranger_principal, " may not control agent ", id,
                                              " (only its spawning principal or an "
                                              "administrator of b may)")))
        << r;
  }
  std::vector<std::string> denied = Audit("b", "agent.control", id, 4);
  ASSERT_EQ(denied.size(), 4u);
  const char* kActions[] = {"SEND", "QUERY", "STATUS", "LOGS"};
  for (size_t i = 0; i < denied.size(); ++i) {
    EXPECT_EQ(JsonField(denied[i], "actor"), stranger_principal) << denied[i];
    EXPECT_EQ(JsonField(denied[i], "decision"), "DENIED") << denied[i];
    EXPECT_THAT(denied[i], HasSubstr(absl::StrCat(R"("details":{"action":")", kActions[i], "\"}")))
        << denied[i];
  }

  // The agent moves itself on to c; a still reaches it, and then ends it.
  const std::string to_c = root() + "/to_c";
  ASSERT_TRUE(WriteFile(to_c, "c").ok());
  ASSERT_EQ(
      Ctl("a", {"agent", "send", id, "--type", "go", "--data", to_c, "--as", owner_key_}).exit_code,
      kExitOk);
  // A question racing that hop (given to b before, during or after it) is answered from c.
  RunResult raced = Ctl("a", {"agent", "query", id, "where?", "--as", owner_key_});
  ASSERT_EQ(raced.exit_code, kExitOk) << raced;
  EXPECT_EQ(raced.out, "answer from c");
  WaitLog("c", id, "start vault=c hop=2");
  RunResult again = Ctl("a", {"-o", "json", "agent", "send", id, "--type", "note", "--data", hello,
                              "--as", owner_key_});
  ASSERT_EQ(again.exit_code, kExitOk) << again;
  EXPECT_EQ(JsonField(again.out, "vault"), "c") << again;
  WaitLog("c", id, "got note hello on c from operator");
  RunResult ended = Ctl("a", {"agent", "terminate", id, "--as", owner_key_});
  ASSERT_EQ(ended.exit_code, kExitOk) << ended;
  EXPECT_EQ(ended.out, "terminated (on c)\n");

  // logs -f from a followed it a -> b -> c and stopped when it ended.
  std::optional<int> exit = (*follower)->WaitExit(absl::Seconds(30));
  ASSERT_EQ(exit, std::optional<int>(0)) << ReadFile(follow_log).value_or("");
  const std::string followed = ReadFile(follow_log).value_or("");
  std::vector<size_t> at;
  for (const std::string& expected : {
           std::string("start vault=a hop=0"),
           absl::StrCat("vaultctl: agent ", id, " departed to b (hop 1)"),
           std::string("@b] start vault=b hop=1"),
           std::string("@b] got note hello on b from operator"),
           absl::StrCat("vaultctl: agent ", id, " departed on b to c (hop 2)"),
           std::string("@c] start vault=c hop=2"),
           std::string("@c] got note hello on c from operator"),
           absl::StrCat("vaultctl: agent ", id, " ended on c (terminated)"),
       }) {
    size_t pos = followed.find(expected);
    ASSERT_NE(pos, std::string::npos) << "\"" << expected << "\" not in:\n" << followed;
    if (!at.empty()) {
      EXPECT_GT(pos, at.back()) << expected << " out of order in:\n" << followed;
    }
    at.push_back(pos);
  }
}

// Sleeps on a without reading its mailbox; on any other vault logs the notes it gets.
constexpr absl::string_view kLateReader = R"(
a = vault_agent.Agent.connect()
me = a.self_inspect()
a.log("start vault=%s hop=%d" % (me["vault"], me["hop"]))
while me["vault"] == "a":
    time.sleep(1)
while True:
    m = a.receive(timeout=0.2)
    if m is not None and m.type == "note":
        a.log("got %s on %s" % (m.data.decode(), me["vault"]))
)";

// Messages waiting in the mailbox go with the agent, in order, and the journey says how many
// crossed the hop that way.
TEST_F(MobilityTest, TheMailboxTravelsInTheHopAndTheJourneyCountsIt) {
  ASSERT_NO_FATAL_FAILURE(TrustOwnerEverywhere({"receive:*"}));
  const std::string id =
      Spawn("a",
            WriteAgent("late", kLateReader, "(receive (from *)) (migrate (vaults a b c))",
                       "(max-runtime 300) (max-migrations 5)"),
            owner_key_);
  ASSERT_FALSE(id.empty());
  WaitLog("a", id, "start vault=a hop=0");
  // It does not answer questions on a: a key may have 4 of them waiting at a vault, not 5.
  std::vector<std::unique_ptr<ChildProcess>> waiting;
  for (int i = 0; i < 4; ++i) {
    absl::StatusOr<std::unique_ptr<ChildProcess>> q =
        ChildProcess::Spawn({VaultctlPath(), "--vault", V("a").socket, "agent", "query", id,
                             "anyone?", "--timeout", "8", "--as", owner_key_},
                            absl::StrCat(root(), "/query", i, ".log"));
    ASSERT_TRUE(q.ok()) << q.status();
    waiting.push_back(*std::move(q));
  }
  absl::SleepFor(absl::Seconds(2));  // (all four are waiting at a)
  RunResult fifth =
      Ctl("a", {"agent", "query", id, "anyone?", "--timeout", "1", "--as", owner_key_});
  EXPECT_EQ(fifth.exit_code, kExitRefused) << fifth;
  EXPECT_THAT(fifth.err, HasSubstr("has 4 queries or log follows under way at a already")) << fifth;
  for (std::unique_ptr<ChildProcess>& q : waiting) {
    EXPECT_EQ(q->WaitExit(absl::Seconds(20)), std::optional<int>(kExitUnavailable));
  }
  for (const char* n : {"1", "2", "3"}) {
    const std::string file = absl::StrCat(root(), "/note", n);
    ASSERT_TRUE(WriteFile(file, n).ok());
    RunResult r = Ctl("a", {"agent", "send", id, "--type", "note", "--data", file});
    ASSERT_EQ(r.exit_code, kExitOk) << r;
  }
  ExpectHop(id, "a", "b", 1,
            Ctl("a", {"-o", "json", "migrate", id, "--to", "b", "--no-checkpoint"}));
  WaitLog("b", id, "got 3 on b");
  std::vector<std::string> logs = Logs("b", id);
  EXPECT_THAT(logs, ::testing::ElementsAre("start vault=b hop=1", "got 1 on b", "got 2 on b",
                                           "got 3 on b"));
  RunResult journey = Ctl("b", {"-o", "json", "agent", "journey", id});
  ASSERT_EQ(journey.exit_code, kExitOk) << journey;
  EXPECT_EQ(JsonField(journey.out, "messages_carried"), "3") << journey;
  EXPECT_EQ(JsonField(journey.out, "messages_forwarded"), "0") << journey;
  RunResult text = Ctl("b", {"agent", "journey", id});
  EXPECT_THAT(text.out, HasSubstr("3 carried, 0 forwarded")) << text;
}

// An agent knows where it is and where home is (self_inspect: vault, hop, home_vault).
TEST_F(MobilityTest, SelfInspectNamesTheHomeVaultAfterAHop) {
  ASSERT_NO_FATAL_FAILURE(TrustOwnerEverywhere());
  const std::string spec = WriteAgent("homebody", R"(
a = vault_agent.Agent.connect()
me = a.self_inspect()
a.log("vault=%s hop=%d home=%s" % (me["vault"], me["hop"], me["home_vault"]))
while True:
    m = a.receive(timeout=0.2)
    if m is not None and m.type == "vault.checkpoint":
        a.checkpoint(b"x")
)",
                                      "(migrate (vaults a b c))", "(max-runtime 300)");
  const std::string id = Spawn("a", spec, owner_key_);
  ASSERT_FALSE(id.empty());
  WaitLog("a", id, "vault=a hop=0 home=a");
  RunResult r = Ctl("a", {"-o", "json", "migrate", id, "--to", "b", "--checkpoint-wait", "1000"});
  ASSERT_EQ(r.exit_code, kExitOk) << r;
  WaitLog("b", id, "vault=b hop=1 home=a");
}

// A chain grows by a link a hop: more hops than the verifier's old limit of 64 links.
TEST_F(MobilityTest, AnAgentHopsMoreThanSixtyFourTimes) {
  ASSERT_NO_FATAL_FAILURE(TrustOwnerEverywhere());
  const std::string spec =
      WriteAgent("frequent", R"(
a = vault_agent.Agent.connect()
while True:
    m = a.receive(timeout=0.2)
    if m is not None and m.type == "vault.checkpoint":
        a.checkpoint(b"x")
)",
                 "(migrate (vaults a b c))", "(max-runtime 600) (max-migrations 100)");
  const std::string id = Spawn("a", spec, owner_key_);
  ASSERT_FALSE(id.empty());
  constexpr int kHops = 70;
  for (int hop = 1; hop <= kHops; ++hop) {
    const std::string from = hop % 2 == 1 ? "a" : "b", to = hop % 2 == 1 ? "b" : "a";
    RunResult r = Ctl(from, {"-o", "json", "migrate", id, "--to", to, "--checkpoint-wait", "1"});
    ASSERT_EQ(r.exit_code, kExitOk) << "hop " << hop << ": " << r;
    ASSERT_EQ(JsonField(r.out, "hop"), absl::StrCat(hop)) << r;
  }
  AgentStatus st = WaitRunning("a", id);
  EXPECT_EQ(st.record().hop(), static_cast<uint32_t>(kHops));
  EXPECT_EQ(st.record().chain().links_size(), kHops + 1);
}

}  // namespace
}  // namespace vault::integration
