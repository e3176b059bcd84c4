// Agent migration end to end (design §7): three real vaultd processes (a, b, c) in one
// federation, mutual TLS on loopback, Python agents in their sandboxes. Covers operator and
// agent-initiated hops, the checks at the source (migrate grant, max-migrations) and at the
// destination (trust policy, attenuation), replays against the Migration service itself (the test
// acts as member a over mutual TLS), and crashes: a destination that is down, a source SIGKILLed
// while a hop is in flight (before and after the destination committed, made deterministic by
// SIGSTOPping the destination), and a source SIGKILLed right after a hop.
//
// "Runs in exactly one vault" is checked two ways: the processes whose environment holds
// VAULT_AGENT_ID=<id> all descend from one vaultd, and the counter agent's lines (written to each
// vault's own files, stamped with the time) form one unbroken sequence whose vaults never
// interleave.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "capability/grant.h"
#include "integration-tests/migration_fixture.h"

namespace vault::integration {
namespace {

using ::testing::HasSubstr;
using ::testing::Optional;
using ::testing::StartsWith;
using vault::v1::AgentStatus;

// ---------------------------------------------------------------------------------------------
// a. Operator migration a -> b -> c -> a with its state.

TEST_F(MigrationTest, OperatorMovesAgentAroundTheFederationWithItsState) {
  ASSERT_NO_FATAL_FAILURE(TrustOwnerEverywhere());
  std::string id = SpawnCounter("tour", /*max=*/3);
  ASSERT_FALSE(id.empty());
  ExpectRunsOnlyOn(id, "a");

  const std::vector<std::pair<std::string, std::string>> route = {
      {"a", "b"}, {"b", "c"}, {"c", "a"}};
  size_t a_lines_before_return = 0;
  for (uint32_t hop = 1; hop <= route.size(); ++hop) {
    const auto& [from, to] = route[hop - 1];
    SCOPED_TRACE(absl::StrCat("hop ", hop, ": ", from, " -> ", to));
    if (to == "a") a_lines_before_return = CounterLines("a").size();
    // The second hop goes without asking the agent: with the last state it checkpointed.
    const bool ask = hop != 2;
    std::vector<std::string> args = {"-o", "json", "migrate", id, "--to", to};
    if (!ask) args.push_back("--no-checkpoint");
    RunResult r = Ctl(from, args);
    EXPECT_EQ(JsonField(r.out, "checkpointed"), ask ? "true" : "false") << r.out;
    EXPECT_THAT(r.out, HasSubstr("\"grants\":[\"read /vault/pub\",\"write /vault/pub\","
                                 "\"migrate a b c\"]"));
    AgentStatus dst = ExpectHop(id, from, to, hop, r);
    // The state it resumed from is the counter it had checkpointed; its first line there
    // continues from it.
    // (The handed-over state, as the source recorded it: by now the agent may have checkpointed
    // again on `to`, moving its record's state on.)
    absl::StatusOr<AgentStatus> src = Get(from, id);
    ASSERT_TRUE(src.ok()) << src.status();
    uint64_t state = 0;
    EXPECT_TRUE(absl::SimpleAtoi(CasGet(to, src->record().migration().state()), &state));
    std::vector<CounterLine> lines = WaitCounter(to, to == "a" ? a_lines_before_return : 0);
    const CounterLine& first = lines[to == "a" ? a_lines_before_return : 0];
    EXPECT_EQ(first.vault, to);
    EXPECT_EQ(first.n, state + 1);
    WaitLog(to, id,
            absl::StrCat("start vault=", to, " hop=", hop, " inc=", dst.record().incarnation(),
                         " n=", state));
  }
  absl::StatusOr<AgentStatus> home = Get("a", id);
  ASSERT_TRUE(home.ok()) << home.status();
  EXPECT_EQ(home->record().incarnation(), 2u);  // the same record, a second process

  // max-migrations 3 reached: the source refuses, and nothing changes.
  RunResult again = Ctl("a", {"migrate", id, "--to", "b"});
  EXPECT_EQ(again.exit_code, kExitRefused) << again;
  EXPECT_EQ(again.err, absl::StrCat("vaultctl: denied: agent ", id,
                                    " has made 3 of its 3 migrations (max-migrations) "
                                    "[PERMISSION_DENIED]\n"));
  absl::StatusOr<AgentStatus> b = Get("b", id);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->record().state(), vault::v1::DEPARTED);
  EXPECT_EQ(b->record().hop(), 2u);  // a departed record counts the hop it left with
  AgentStatus still = WaitRunning("a", id);
  EXPECT_EQ(still.record().hop(), 3u);
  ExpectRunsOnlyOn(id, "a");

  // One unbroken count across the four stays: by time, n only grows (by 1 within a stay, by 1 or
  // 2 across a hop: the last checkpoint may be one line ahead), and the vaults never interleave.
  absl::SleepFor(absl::Milliseconds(500));
  std::vector<CounterLine> all;
  for (const char* v : {"a", "b", "c"}) {
    std::vector<CounterLine> l = CounterLines(v);
    all.insert(all.end(), l.begin(), l.end());
  }
  std::stable_sort(all.begin(), all.end(),
                   [](const CounterLine& x, const CounterLine& y) { return x.t < y.t; });
  std::vector<std::string> stays;
  for (size_t i = 0; i < all.size(); ++i) {
    if (stays.empty() || stays.back() != all[i].vault) stays.push_back(all[i].vault);
    if (i == 0) {
      EXPECT_EQ(all[i].n, 1u);
      continue;
    }
    if (all[i].vault == all[i - 1].vault) {
      EXPECT_EQ(all[i].n, all[i - 1].n + 1) << "line " << i << " on " << all[i].vault;
    } else {
      EXPECT_GE(all[i].n, all[i - 1].n + 1) << "line " << i;
      EXPECT_LE(all[i].n, all[i - 1].n + 2) << "line " << i;
    }
  }
  EXPECT_EQ(stays, (std::vector<std::string>{"a", "b", "c", "a"}));
}

// ---------------------------------------------------------------------------------------------
// b. The migrate host call.

TEST_F(MigrationTest, AgentMovesItselfWithTheMigrateHostCall) {
  // Spawned by a's administrator; b trusts that principal only later.
  std::string spec = WriteAgent("mover", kSelfMover, "(migrate (vaults b))", "(max-runtime 120)");
  std::string id = Spawn("a", spec, AdminKey("a"), std::string("seed-42"));
  ASSERT_FALSE(id.empty());
  WaitLog("a", id, "waiting for go");
  std::vector<std::string> logs = Logs("a", id);
  ASSERT_GE(logs.size(), 3u);
  EXPECT_EQ(logs[0], "start vault=a hop=0 state=seed-42");
  // Not in its grant: a denial (the proxy's), and the agent goes on.
  EXPECT_EQ(logs[1], "migrate c denied 7");
  // b does not trust the principal: the hop fails, the agent is told (ABORTED) and goes on here.
  EXPECT_THAT(logs[2], StartsWith("migrate b failed 10 migration to b refused: Offer to b: "
                                  "the chain is refused ("));
  AgentStatus a = WaitRunning("a", id);
  EXPECT_EQ(a.record().hop(), 0u);
  EXPECT_FALSE(a.record().has_migration());
  EXPECT_EQ(a.record().counters().denials(), 1u);
  std::vector<std::string> failed = Audit("a", "agent.migrate.failed", id);
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_EQ(JsonField(failed[0], "priority"), "HIGH") << failed[0];
  EXPECT_THAT(JsonField(failed[0], "motivation").value_or(""),
              StartsWith("migration to b refused"));
  std::vector<std::string> denied = Audit("a", "host.migrate", "c");
  ASSERT_EQ(denied.size(), 1u);
  EXPECT_EQ(JsonField(denied[0], "decision"), "DENIED") << denied[0];
  std::vector<std::string> refused = Audit("b", "agent.migrate.refused", id);
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_EQ(JsonField(refused[0], "actor"), "a") << refused[0];
  EXPECT_EQ(JsonField(refused[0], "phase"), "offer") << refused[0];
  EXPECT_EQ(Get("b", id).status().code(), absl::StatusCode::kNotFound);

  // Now b trusts a's administrator, and the agent goes.
  ASSERT_NO_FATAL_FAILURE(Trust("b", AdminKey("a"), {"full"}));
  const std::string go = root() + "/go";
  ASSERT_TRUE(WriteFile(go, "").ok());
  RunResult sent = Ctl("a", {"agent", "send", id, "--type", "go", "--data", go});
  ASSERT_EQ(sent.exit_code, kExitOk) << sent;
  AgentStatus b = WaitFor(
      "b", id, [](const AgentStatus& s) { return s.record().state() == vault::v1::COMPLETED; },
      absl::Seconds(20), "completed");
  EXPECT_EQ(b.record().reason(), "arrived with handed over: seed-42");
  EXPECT_EQ(b.record().exit_code(), 0);
  EXPECT_EQ(b.record().hop(), 1u);
  EXPECT_EQ(b.record().arrived_from(), "a");
  EXPECT_EQ(DigestText(b.record().state_digest()), DigestText("handed over: seed-42"));
  // It held only "migrate b"; b's "full" ceiling names every member (b too), so it keeps it.
  ASSERT_EQ(b.record().grants_size(), 1);
  EXPECT_EQ(capability::GrantToString(b.record().grants(0)), "migrate b");
  EXPECT_EQ(Logs("b", id),
            (std::vector<std::string>{"start vault=b hop=1 state=handed over: seed-42",
                                      "grants migrate b"}));
  absl::StatusOr<AgentStatus> src = Get("a", id);
  ASSERT_TRUE(src.ok()) << src.status();
  EXPECT_EQ(src->record().state(), vault::v1::DEPARTED);
  EXPECT_EQ(src->record().reason(), "departed to b");
  EXPECT_EQ(src->record().migration().requested_by(), "agent");
  EXPECT_EQ(DigestText(src->record().migration().state()), DigestText("handed over: seed-42"));
  vault::v1::ReceiptPayload receipt = OpenReceipt(src->record().migration().receipt(), "b");
  EXPECT_EQ(receipt.hop(), 1u);
  // The call never returned on a.
  for (const std::string& l : Logs("a", id)) EXPECT_NE(l, "migrate b returned");
  std::vector<std::string> migrating = Audit("a", "agent.migrating", id, 2);
  ASSERT_EQ(migrating.size(), 2u);  // the refused hop and this one
  EXPECT_EQ(JsonField(migrating[1], "requested_by"), "agent") << migrating[1];
  EXPECT_EQ(Audit("b", "agent.migrate.in", id).size(), 1u);
  EXPECT_TRUE(Processes(id).empty()) << Describe(Processes(id));
}

// ---------------------------------------------------------------------------------------------
// c. Refusals.

TEST_F(MigrationTest, SourceRefusesWhatTheGrantDoesNotName) {
  ASSERT_NO_FATAL_FAILURE(TrustOwnerEverywhere());
  std::string spec =
      WriteAgent("narrow", kProbeAgent,
                 "(read (path \"/vault/pub\")) (write (path \"/vault/pub\")) (migrate (vaults b))",
                 "(max-runtime 120) (max-migrations 3)");
  std::string id = Spawn("a", spec, owner_key_);
  ASSERT_FALSE(id.empty());
  const std::string started =
      "start vault=a hop=0 write=0 grants=read /vault/pub;write /vault/pub;migrate b";
  WaitLog("a", id, started);
  // Each is refused at once, before the agent is asked to checkpoint.
  absl::Time t0 = absl::Now();
  RunResult r = Ctl("a", {"migrate", id, "--to", "c"});
  EXPECT_EQ(r.exit_code, kExitRefused) << r;
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, absl::StrCat("vaultctl: denied: agent ", id,
                                " has no migrate grant naming c [PERMISSION_DENIED]\n"));
  r = Ctl("a", {"migrate", id, "--to", "nowhere"});
  EXPECT_EQ(r.exit_code, kExitNotFound) << r;
  EXPECT_EQ(r.err, "vaultctl: no federation member named \"nowhere\" [NOT_FOUND]\n");
  r = Ctl("a", {"migrate", id, "--to", "a"});
  EXPECT_EQ(r.exit_code, kExitRefused) << r;
  EXPECT_EQ(r.err, "vaultctl: the agent is already on a [INVALID_ARGUMENT]\n");
  r = Ctl("a", {"migrate", "a-0000000000000000", "--to", "b"});
  EXPECT_EQ(r.exit_code, kExitNotFound) << r;
  EXPECT_LT(absl::Now() - t0, absl::Seconds(2));  // no 2 s checkpoint wait among them

  AgentStatus st = WaitRunning("a", id);
  EXPECT_EQ(st.record().hop(), 0u);
  EXPECT_FALSE(st.record().has_migration());
  EXPECT_EQ(st.record().counters().checkpoints(), 0u);
  EXPECT_TRUE(Audit("a", "agent.migrating", id, 1, absl::Milliseconds(300)).empty());
  EXPECT_EQ(Get("c", id).status().code(), absl::StatusCode::kNotFound);
  ExpectRunsOnlyOn(id, "a");
  EXPECT_EQ(Logs("a", id), std::vector<std::string>{started});
}

TEST_F(MigrationTest, UntrustingDestinationRefusesAndTheAgentResumesAtTheSource) {
  owner_key_ = NewKey("owner", &owner_);
  ASSERT_NO_FATAL_FAILURE(Trust("a", owner_key_, kOwnerCeiling));
  ASSERT_NO_FATAL_FAILURE(Trust("b", owner_key_, kOwnerCeiling));  // c does not trust it
  std::string id = SpawnCounter("untrusted", /*max=*/3);
  ASSERT_FALSE(id.empty());
  RunResult r = Ctl("a", {"migrate", id, "--to", "c"});
  EXPECT_EQ(r.exit_code, kExitRefused) << r;
  EXPECT_EQ(r.out, "");
  EXPECT_THAT(r.err, StartsWith("vaultctl: migration to c refused: Offer to c: the chain is "
                                "refused ("));
  EXPECT_THAT(r.err, HasSubstr("[PERMISSION_DENIED]\n"));

  AgentStatus st = WaitRunning("a", id);
  EXPECT_EQ(st.record().hop(), 0u);
  EXPECT_FALSE(st.record().has_migration());
  EXPECT_THAT(st.record().reason(), StartsWith("migration to c refused: "));
  std::vector<std::string> failed = Audit("a", "agent.migrate.failed", id);
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_EQ(JsonField(failed[0], "priority"), "HIGH") << failed[0];
  EXPECT_EQ(JsonField(failed[0], "motivation"), st.record().reason()) << failed[0];
  EXPECT_EQ(JsonField(failed[0], "outcome"), "resumed here") << failed[0];
  std::vector<std::string> refused = Audit("c", "agent.migrate.refused", id);
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_EQ(JsonField(refused[0], "decision"), "DENIED") << refused[0];
  EXPECT_EQ(Get("c", id).status().code(), absl::StatusCode::kNotFound);
  // Thawed: it goes on counting here, as the same process.
  ExpectRunsOnlyOn(id, "a");
  const uint64_t before = st.record().counters().checkpoints();
  WaitFor(
      "a", id,
      [before](const AgentStatus& s) { return s.record().counters().checkpoints() >= before + 3; },
      absl::Seconds(10), "checkpointing again");
  EXPECT_EQ(st.record().incarnation(), 1u);
  // And a trusting destination still takes it.
  ExpectHop(id, "a", "b", 1, Ctl("a", {"-o", "json", "migrate", id, "--to", "b"}));
}

TEST_F(MigrationTest, NarrowerPolicyOnTheWayStaysNarrowed) {
  owner_key_ = NewKey("owner", &owner_);
  ASSERT_NO_FATAL_FAILURE(Trust("a", owner_key_, kOwnerCeiling));
  ASSERT_NO_FATAL_FAILURE(Trust("b", owner_key_, {"read:/vault", "migrate:a,b,c"}));  // no write
  ASSERT_NO_FATAL_FAILURE(Trust("c", owner_key_, kOwnerCeiling));
  std::string spec = WriteAgent(
      "probe", kProbeAgent,
      "(read (path \"/vault/pub\")) (write (path \"/vault/pub\")) (migrate (vaults a b c))",
      "(max-runtime 120) (max-migrations 3)");
  std::string id = Spawn("a", spec, owner_key_);
  ASSERT_FALSE(id.empty());
  WaitLog("a", id,
          "start vault=a hop=0 write=0 grants=read /vault/pub;write /vault/pub;migrate a b c");

  RunResult r = Ctl("a", {"-o", "json", "migrate", id, "--to", "b", "--checkpoint-wait", "500"});
  EXPECT_THAT(r.out, HasSubstr("\"grants\":[\"read /vault/pub\",\"migrate a b c\"]"));
  // What b's ceiling took away is said where the operator sees it.
  EXPECT_THAT(r.out, HasSubstr("\"narrowed_away\":[\"write /vault/pub\"]"));
  EXPECT_EQ(JsonField(r.out, "checkpointed"), "true") << r.out;
  AgentStatus b = ExpectHop(id, "a", "b", 1, r);
  EXPECT_EQ(Logs("a", id).back(), "asked to checkpoint");
  std::vector<std::string> grants;
  for (const vault::v1::Grant& g : b.record().grants()) grants.push_back(g.DebugString());
  EXPECT_EQ(b.record().grants_size(), 2) << absl::StrJoin(grants, "\n");
  WaitLog("b", id, "start vault=b hop=1 write=7 grants=read /vault/pub;migrate a b c");
  std::vector<std::string> in_b = Audit("b", "agent.migrate.in", id);
  ASSERT_EQ(in_b.size(), 1u);
  EXPECT_EQ(JsonField(in_b[0], "narrowed"), "yes") << in_b[0];
  EXPECT_EQ(JsonField(in_b[0], "grants"), "read /vault/pub; migrate a b c") << in_b[0];

  // On to c, which would allow writing: the MIGRATE link b signed carries b's narrowed grants.
  r = Ctl("b", {"-o", "json", "migrate", id, "--to", "c", "--checkpoint-wait", "500"});
  EXPECT_THAT(r.out, HasSubstr("\"grants\":[\"read /vault/pub\",\"migrate a b c\"]"));
  EXPECT_THAT(r.out, HasSubstr("\"narrowed_away\":[]"));
  AgentStatus c = ExpectHop(id, "b", "c", 2, r);
  EXPECT_EQ(c.record().grants_size(), 2);
  for (const vault::v1::Grant& g : c.record().grants()) {
    EXPECT_NE(g.kind(), vault::v1::Grant::WRITE) << g.DebugString();
  }
  absl::StatusOr<AgentStatus> left_b = Get("b", id);
  ASSERT_TRUE(left_b.ok());
  absl::StatusOr<vault::v1::LinkPayload> link = capability::ParseLinkPayload(
      left_b->record().migration().chain().links().rbegin()->payload());
  ASSERT_TRUE(link.ok()) << link.status();
  EXPECT_EQ(link->grants_size(), 2);
  for (const vault::v1::Grant& g : link->grants()) EXPECT_NE(g.kind(), vault::v1::Grant::WRITE);
  WaitLog("c", id, "start vault=c hop=2 write=7 grants=read /vault/pub;migrate a b c");
  std::vector<std::string> in_c = Audit("c", "agent.migrate.in", id);
  ASSERT_EQ(in_c.size(), 1u);
  EXPECT_EQ(JsonField(in_c[0], "narrowed"), "no") << in_c[0];
  // Its write attempts on b and c were denials there.
  EXPECT_EQ(Audit("b", "host.write_file", "/vault/pub/probe").size(), 1u);
  EXPECT_EQ(Audit("c", "host.write_file", "/vault/pub/probe").size(), 1u);
  EXPECT_FALSE(ReadFile(V("c").data_dir + "/files/pub/probe").ok());
}

TEST_F(MigrationTest, DestinationQuotaRefusesAtCommitAndTheAgentResumes) {
  owner_key_ = NewKey("owner", &owner_);
  ASSERT_NO_FATAL_FAILURE(Trust("a", owner_key_, kOwnerCeiling));
  RunResult t = Ctl("b", {"policy", "trust", owner_key_, "--max-agents", "1", "--ceiling",
                          "read:/vault", "write:/vault", "migrate:a,b,c"});
  ASSERT_EQ(t.exit_code, kExitOk) << t;
  std::string first = SpawnCounter("first", /*max=*/3);
  std::string second = SpawnCounter("second", /*max=*/3);
  ASSERT_FALSE(first.empty() || second.empty());
  ExpectHop(first, "a", "b", 1, Ctl("a", {"-o", "json", "migrate", first, "--to", "b"}));
  // b's Offer accepts the second (the chain is fine), its Commit refuses it (the quota).
  RunResult r = Ctl("a", {"migrate", second, "--to", "b"});
  EXPECT_EQ(r.exit_code, kExitRefused) << r;
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, absl::StrCat("vaultctl: migration to b refused: Commit to b: principal ", owner_,
                                " already runs 1 agents here (its quota) "
                                "[RESOURCE_EXHAUSTED]\n"));
  AgentStatus st = WaitRunning("a", second);
  EXPECT_EQ(st.record().hop(), 0u);
  EXPECT_FALSE(st.record().has_migration());
  EXPECT_EQ(st.record().incarnation(), 1u);
  std::vector<std::string> failed = Audit("a", "agent.migrate.failed", second);
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_EQ(JsonField(failed[0], "motivation"), st.record().reason()) << failed[0];
  EXPECT_EQ(Get("b", second).status().code(), absl::StatusCode::kNotFound);
  ExpectRunsOnlyOn(second, "a");
  ExpectRunsOnlyOn(first, "b");
  const uint64_t before = st.record().counters().checkpoints();
  WaitFor(
      "a", second,
      [before](const AgentStatus& s) { return s.record().counters().checkpoints() >= before + 3; },
      absl::Seconds(10), "checkpointing again");
}

// ---------------------------------------------------------------------------------------------
// d. Replays against the Migration service, as member a over mutual TLS.

TEST_F(MigrationTest, DestinationRefusesReplaysAndFencedTransfers) {
  ASSERT_NO_FATAL_FAILURE(TrustOwnerEverywhere());
  std::string id = SpawnCounter("replayed", /*max=*/3);
  ASSERT_FALSE(id.empty());
  AgentStatus on_b =
      ExpectHop(id, "a", "b", 1, Ctl("a", {"-o", "json", "migrate", id, "--to", "b"}));
  absl::StatusOr<AgentStatus> departed = Get("a", id);
  ASSERT_TRUE(departed.ok());
  const vault::v1::MigrationPackage package = PackageOf(departed->record(), "a");
  const std::string transfer = departed->record().migration().transfer_id();

  auto as_a = vault::v1::Migration::NewStub(MemberChannel("a", "b"));
  // The committed transfer again: refused, whether offered or committed.
  absl::Status replay = Commit(as_a.get(), package);
  EXPECT_EQ(replay.code(), absl::StatusCode::kAlreadyExists) << replay;
  EXPECT_EQ(replay.message(), absl::StrCat("transfer ", Hex(transfer),
                                           " was already committed here (a replay?); ask Status"));
  absl::StatusOr<std::vector<vault::v1::Digest>> offered = Offer(as_a.get(), package);
  EXPECT_EQ(offered.status().code(), absl::StatusCode::kPermissionDenied) << offered.status();
  // Another member cannot speak for a.
  auto as_c = vault::v1::Migration::NewStub(MemberChannel("c", "b"));
  absl::Status foreign = Commit(as_c.get(), package);
  EXPECT_EQ(foreign.code(), absl::StatusCode::kPermissionDenied) << foreign;
  EXPECT_EQ(foreign.message(), "member c commits an agent from a");
  // Status tells the truth about it, with the receipt a holds.
  absl::StatusOr<vault::v1::TransferStatusResponse> st = Status(as_a.get(), transfer, true);
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->outcome(), vault::v1::TransferStatusResponse::COMMITTED);
  EXPECT_EQ(st->receipt().SerializeAsString(), departed->record().migration().receipt());
  // Still one agent on b: the same process, never started again.
  absl::StatusOr<AgentStatus> b = Get("b", id);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->record().state(), vault::v1::RUNNING);
  EXPECT_EQ(b->record().incarnation(), on_b.record().incarnation());
  EXPECT_EQ(Audit("b", "agent.migrate.in", id).size(), 1u);
  ExpectRunsOnlyOn(id, "b");

  // Where it is, as each vault knows it.
  for (const auto& [asker, at, state, to] :
       std::vector<std::tuple<std::string, std::string, vault::v1::AgentState, std::string>>{
           {"a", "b", vault::v1::RUNNING, ""}, {"b", "a", vault::v1::DEPARTED, "b"}}) {
    auto stub = vault::v1::Migration::NewStub(MemberChannel(asker, at));
    grpc::ClientContext ctx;
    SetDeadline(&ctx, absl::Seconds(10));
    vault::v1::WhereRequest req;
    req.set_agent_id(id);
    vault::v1::WhereResponse where;
    ASSERT_TRUE(stub->Where(&ctx, req, &where).ok());
    EXPECT_EQ(where.state(), state) << at;
    EXPECT_EQ(where.departed_to(), to) << at;
    EXPECT_EQ(where.hop(), 1u) << at;
  }

  // A transfer b never saw: Status with abort_if_unknown fences it off for good.
  std::string unknown(16, '\x5a');
  st = Status(as_a.get(), unknown, /*abort_if_unknown=*/true);
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->outcome(), vault::v1::TransferStatusResponse::UNKNOWN);
  EXPECT_FALSE(st->has_receipt());
  st = Status(as_a.get(), unknown, /*abort_if_unknown=*/false);
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->outcome(), vault::v1::TransferStatusResponse::ABORTED);
  // Another member's fences are its own: c does not see a's, and its own (set with the same id)
  // does not replace a's, which would let a's Commit land after a resumed the agent.
  st = Status(as_c.get(), unknown, /*abort_if_unknown=*/false);
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->outcome(), vault::v1::TransferStatusResponse::UNKNOWN);
  st = Status(as_c.get(), unknown, /*abort_if_unknown=*/true);
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->outcome(), vault::v1::TransferStatusResponse::UNKNOWN);
  st = Status(as_c.get(), unknown, /*abort_if_unknown=*/false);
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->outcome(), vault::v1::TransferStatusResponse::ABORTED);
  st = Status(as_a.get(), std::string(15, '\x5a'), /*abort_if_unknown=*/true);
  EXPECT_EQ(st.status().code(), absl::StatusCode::kInvalidArgument) << st.status();

  // A genuine package with that transfer id (a second agent on a, a MIGRATE link signed with a's
  // vault key, as a would make it) is refused; with a fresh transfer id b would take it.
  std::string other = SpawnCounter("other", /*max=*/3);
  ASSERT_FALSE(other.empty());
  absl::StatusOr<AgentStatus> o = Get("a", other);
  ASSERT_TRUE(o.ok());
  auto package_for = [&](const std::string& transfer_id) {
    return ForgedHop(o->record(), "a", "b", transfer_id);
  };
  absl::Status fenced = Commit(as_a.get(), package_for(unknown));
  EXPECT_EQ(fenced.code(), absl::StatusCode::kAlreadyExists) << fenced;
  EXPECT_EQ(fenced.message(), absl::StrCat("transfer ", Hex(unknown),
                                           " was already aborted here (a replay?); ask Status"));
  offered = Offer(as_a.get(), package_for(unknown));
  EXPECT_EQ(offered.status().code(), absl::StatusCode::kPermissionDenied) << offered.status();
  offered = Offer(as_a.get(), package_for(std::string(16, '\x6b')));
  ASSERT_TRUE(offered.ok()) << offered.status();  // valid: only the fence stopped it
  ASSERT_FALSE(offered->empty());                 // b lacks at least its code
  EXPECT_EQ(DigestText((*offered)[0]), DigestText(o->record().spec().code_digest()));
  EXPECT_EQ(Get("b", other).status().code(), absl::StatusCode::kNotFound);
  ExpectRunsOnlyOn(other, "a");
}

// A state carried in the Commit (small states are) is stored only when its bytes are the
// package's: a member that sends other bytes, of the same size or not, is refused, audited, and
// nothing is stored or committed.
TEST_F(MigrationTest, ACommitCarryingBytesThatAreNotTheStateIsRefused) {
  ASSERT_NO_FATAL_FAILURE(TrustOwnerEverywhere());
  std::string id = SpawnCounter("carried", /*max=*/3);
  ASSERT_FALSE(id.empty());
  absl::StatusOr<AgentStatus> on_a = Get("a", id);
  ASSERT_TRUE(on_a.ok()) << on_a.status();
  const std::string state = CasGet("a", on_a->record().state_digest());
  ASSERT_EQ(state.size(), on_a->record().state_digest().size());

  auto as_a = vault::v1::Migration::NewStub(MemberChannel("a", "b"));
  const std::string transfer(16, '\x72');
  const vault::v1::MigrationPackage package = ForgedHop(on_a->record(), "a", "b", transfer);
  ASSERT_TRUE(Offer(as_a.get(), package).ok());
  std::string flipped = state;
  flipped[0] = static_cast<char>(flipped[0] ^ 1);
  for (const std::string& bytes : {flipped, state + "x"}) {
    absl::Status s = Commit(as_a.get(), package, nullptr, &bytes);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(s.message(), HasSubstr("the state carried in the Commit: "));
    EXPECT_THAT(s.message(),
                HasSubstr(bytes.size() == state.size() ? "digest mismatch" : "size mismatch"));
    EXPECT_EQ(Ctl("b", {"cas", "has", DigestText(bytes)}).exit_code, kExitNotFound);
  }
  // Above 1 MiB a state is never carried: refused before anything is read into the CAS.
  const std::string too_big((1 << 20) + 1, 'x');
  absl::Status big = Commit(as_a.get(), package, nullptr, &too_big);
  EXPECT_EQ(big.code(), absl::StatusCode::kInvalidArgument) << big;
  EXPECT_THAT(big.message(), HasSubstr("a Commit carries states of at most 1048576 bytes"));
  EXPECT_EQ(Audit("b", "agent.migrate.refused", id, 2).size(), 2u);
  EXPECT_EQ(Get("b", id).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(Audit("b", "agent.migrate.in", id, 0, absl::Milliseconds(1)).empty());
  ExpectRunsOnlyOn(id, "a");
}

// The source carries a state without checking it (the destination hashes every byte). A state
// damaged on the source's disk is refused by the destination, and the source then reports the
// damage as its own; the agent resumes at the source, and the destination stores nothing.
TEST_F(MigrationTest, AStateDamagedAtTheSourceIsRefusedAndReportedAsTheSourcesDamage) {
  ASSERT_NO_FATAL_FAILURE(TrustOwnerEverywhere());
  std::mt19937_64 rng(20261123);
  std::string state(16 << 10, '\0');  // above pack_min_bytes: in a pack file
  for (char& c : state) c = static_cast<char>(rng());
  const std::string spec =
      WriteAgent("damaged", kProbeAgent, "(write (path \"/vault/pub\")) (migrate (vaults a b c))",
                 "(max-runtime 300) (max-migrations 3)");
  const std::string id = Spawn("a", spec, owner_key_, state);
  ASSERT_FALSE(id.empty());
  WaitRunning("a", id);
  // One flipped byte in a's pack files, the way a failing disk would.
  int flipped = 0;
  for (const auto& entry : std::filesystem::directory_iterator(V("a").data_dir + "/packs")) {
    absl::StatusOr<std::string> pack = ReadFile(entry.path().string());
    ASSERT_TRUE(pack.ok()) << pack.status();
    for (size_t at = pack->find(state); at != std::string::npos; at = pack->find(state, at + 1)) {
      std::fstream f(entry.path(), std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(static_cast<std::streamoff>(at + 5000));
      f.put(static_cast<char>(state[5000] ^ 0x08));
      ASSERT_TRUE(f.good());
      ++flipped;
    }
  }
  ASSERT_EQ(flipped, 1);

  RunResult r = Ctl("a", {"migrate", id, "--to", "b", "--no-checkpoint"});
  EXPECT_EQ(r.exit_code, kExitFailure) << r;
  EXPECT_EQ(r.err, absl::StrCat("vaultctl: migration to b refused: the agent's state is damaged on "
                                "this vault: stored bytes of ",
                                DigestText(state),
                                " do not match their digest (corrupt storage) [DATA_LOSS]\n"));
  AgentStatus st = WaitRunning("a", id);
  EXPECT_EQ(st.record().hop(), 0u);
  EXPECT_FALSE(st.record().has_migration());
  std::vector<std::string> refused = Audit("b", "agent.migrate.refused", id);
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_THAT(JsonField(refused[0], "motivation"),
              Optional(StartsWith("the state carried in the Commit: digest mismatch")))
      << refused[0];
  EXPECT_EQ(Ctl("b", {"cas", "has", DigestText(state)}).exit_code, kExitNotFound);
  EXPECT_EQ(Get("b", id).status().code(), absl::StatusCode::kNotFound);
  ExpectRunsOnlyOn(id, "a");
}

// An arriving agent's sandbox starts when its Offer is accepted and the code is already there;
// it gets no Welcome (so no host call, no state, no authority) until the Commit adopts it. An
// Offer that is never committed leaves nothing running: the fence ends the process, and a member
// offering many agents holds at most 4 processes.
TEST_F(MigrationTest, AnOfferNeverCommittedLeavesNoProcess) {
  ASSERT_NO_FATAL_FAILURE(TrustOwnerEverywhere());
  // (the first agent is ended on b: b's counter file only grows if the held process runs)
  std::string id = SpawnWithCodeOnB("twin");
  ASSERT_FALSE(id.empty());
  absl::StatusOr<AgentStatus> on_a = Get("a", id);
  ASSERT_TRUE(on_a.ok()) << on_a.status();
  const size_t b_lines = CounterLines("b").size();

  auto as_a = vault::v1::Migration::NewStub(MemberChannel("a", "b"));
  const std::string transfer(16, '\x71');
  const vault::v1::MigrationPackage package = ForgedHop(on_a->record(), "a", "b", transfer);
  absl::StatusOr<std::vector<vault::v1::Digest>> offered = Offer(as_a.get(), package);
  ASSERT_TRUE(offered.ok()) << offered.status();
  for (const vault::v1::Digest& d : *offered) {  // b has the code (the state, maybe not)
    EXPECT_NE(DigestText(d), DigestText(on_a->record().spec().code_digest()));
  }
  // Its process is up on b (beside the original on a), held: b has no record of the agent and
  // the agent has done nothing there.
  ASSERT_FALSE(WaitForProcessesOn(id, "b").empty()) << Describe(Processes(id));
  absl::SleepFor(absl::Seconds(1));  // time for a counter line, were it welcomed
  EXPECT_EQ(Get("b", id).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(CounterLines("b").size(), b_lines);
  EXPECT_TRUE(Audit("b", "agent.migrate.in", id, 0, absl::Milliseconds(1)).empty());

  // a never commits; its Status fences the transfer, which ends the held process.
  absl::StatusOr<vault::v1::TransferStatusResponse> st = Status(as_a.get(), transfer, true);
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->outcome(), vault::v1::TransferStatusResponse::UNKNOWN);
  ExpectRunsOnlyOn(id, "a");
  absl::Status fenced = Commit(as_a.get(), package);
  EXPECT_EQ(fenced.code(), absl::StatusCode::kAlreadyExists) << fenced;

  // Twelve Offers of the same agent under fresh transfer ids: at most 4 held processes for one
  // member's Offers.
  std::vector<std::string> transfers;
  for (int i = 0; i < 12; ++i) {
    transfers.push_back(std::string(15, '\x72') + static_cast<char>('a' + i));
    absl::StatusOr<std::vector<vault::v1::Digest>> o =
        Offer(as_a.get(), ForgedHop(on_a->record(), "a", "b", transfers.back()));
    ASSERT_TRUE(o.ok()) << o.status();
  }
  // One sandbox per held process: count the processes whose parent is not one of them.
  auto sandboxes_on_b = [&] {
    std::map<std::string, std::set<pid_t>> procs = Processes(id);
    size_t n = 0;
    for (pid_t pid : procs["b"]) n += procs["b"].count(ProcStat(pid).first) == 0 ? 1 : 0;
    return n;
  };
  absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (sandboxes_on_b() < 4 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(20));
  absl::SleepFor(absl::Milliseconds(500));  // a fifth would be up by now
  const size_t agents = sandboxes_on_b();
  EXPECT_EQ(agents, 4u) << Describe(Processes(id));
  for (const std::string& t : transfers) {
    absl::StatusOr<vault::v1::TransferStatusResponse> s = Status(as_a.get(), t, true);
    ASSERT_TRUE(s.ok()) << s.status();
  }
  ExpectRunsOnlyOn(id, "a");
  // The agent itself never noticed: still running on a, and it still moves; b adopts the
  // process that its real Offer started.
  ExpectHop(id, "a", "b", 1, Ctl("a", {"-o", "json", "migrate", id, "--to", "b"}));
  ExpectRunsOnlyOn(id, "b");
  const std::vector<std::string> arrivals = Arrivals("b", id);
  ASSERT_EQ(arrivals.size(), 1u);
  EXPECT_THAT(arrivals[0], HasSubstr(", its process started at the offer)"));
}

// A held process dies with its vaultd, stopped (SIGTERM) or killed (SIGKILL), and is not started
// again with it: there is no agent of that id on b, only a process an Offer started.
TEST_F(MigrationTest, HeldProcessesEndWithTheirVaultd) {
  ASSERT_NO_FATAL_FAILURE(TrustOwnerEverywhere());
  std::string id = SpawnWithCodeOnB("stopped");
  ASSERT_FALSE(id.empty());
  absl::StatusOr<AgentStatus> on_a = Get("a", id);
  ASSERT_TRUE(on_a.ok()) << on_a.status();
  for (bool sigkill : {false, true}) {
    SCOPED_TRACE(sigkill ? "SIGKILL" : "SIGTERM");
    auto as_a = vault::v1::Migration::NewStub(MemberChannel("a", "b"));
    const std::string transfer(16, sigkill ? '\x74' : '\x75');
    absl::StatusOr<std::vector<vault::v1::Digest>> offered =
        Offer(as_a.get(), ForgedHop(on_a->record(), "a", "b", transfer));
    ASSERT_TRUE(offered.ok()) << offered.status();
    ASSERT_FALSE(WaitForProcessesOn(id, "b").empty()) << Describe(Processes(id));
    if (sigkill) {
      M("b").vaultd->Kill();
    } else {
      EXPECT_EQ(M("b").vaultd->Stop(), std::optional<int>(0));
    }
    // Nothing of it is left (an orphan would show as such), and the agent still runs on a.
    ExpectRunsOnlyOn(id, "a");
    ASSERT_NO_FATAL_FAILURE(Restart("b"));
    absl::SleepFor(absl::Milliseconds(500));  // time for a start, were it resumed
    EXPECT_EQ(Processes(id).count("b"), 0u) << Describe(Processes(id));
    EXPECT_EQ(Get("b", id).status().code(), absl::StatusCode::kNotFound);
  }
}

// A process started at the Offer is adopted only for exactly what is committed: when b's ceiling
// narrows the agent's limits between its Offer and its Commit, the held process (started with
// the old limits) is ended and a fresh one runs with the new ones.
TEST_F(MigrationTest, LimitsNarrowedAfterTheOfferStartAFreshProcess) {
  ASSERT_NO_FATAL_FAILURE(TrustOwnerEverywhere());
  // The agent's hop is made here as a would make it (so it is ended on a first: it runs on b
  // alone afterwards).
  std::string id = SpawnWithCodeOnB("narrowed");
  ASSERT_FALSE(id.empty());
  absl::StatusOr<AgentStatus> on_a = Get("a", id);
  ASSERT_TRUE(on_a.ok()) << on_a.status();
  RunResult ended = Ctl("a", {"agent", "terminate", id, "--as", owner_key_});
  ASSERT_EQ(ended.exit_code, kExitOk) << ended;
  absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!Processes(id).empty() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(20));
  ASSERT_TRUE(Processes(id).empty()) << Describe(Processes(id));

  auto as_a = vault::v1::Migration::NewStub(MemberChannel("a", "b"));
  const vault::v1::MigrationPackage package =
      ForgedHop(on_a->record(), "a", "b", std::string(16, '\x73'));
  absl::StatusOr<std::vector<vault::v1::Digest>> offered = Offer(as_a.get(), package);
  ASSERT_TRUE(offered.ok()) << offered.status();
  const std::set<pid_t> held = WaitForProcessesOn(id, "b");
  ASSERT_FALSE(held.empty()) << "no process started at the Offer";
  // b narrows what the owner's agents may use (128 MiB of memory), then the Commit comes.
  std::vector<std::string> trust = {"policy", "trust", owner_key_, "--ceiling"};
  trust.insert(trust.end(), kOwnerCeiling.begin(), kOwnerCeiling.end());
  trust.insert(trust.end(), {"--constraints", "max-memory=134217728"});
  RunResult narrowed = Ctl("b", trust);
  ASSERT_EQ(narrowed.exit_code, kExitOk) << narrowed;
  ASSERT_TRUE(Commit(as_a.get(), package).ok());

  absl::StatusOr<AgentStatus> on_b = Get("b", id);
  ASSERT_TRUE(on_b.ok()) << on_b.status();
  EXPECT_EQ(on_b->record().constraints().max_memory_bytes(), 134217728u);
  // Runs on b only, in processes other than the held ones, which are gone.
  ExpectRunsOnlyOn(id, "b");
  deadline = absl::Now() + absl::Seconds(10);
  std::set<pid_t> now;
  while (absl::Now() < deadline) {
    now = Processes(id)["b"];
    bool any_held = false;
    for (pid_t pid : held) any_held = any_held || now.count(pid) != 0;
    if (!any_held && !now.empty()) break;
    absl::SleepFor(absl::Milliseconds(20));
  }
  for (pid_t pid : held) EXPECT_EQ(now.count(pid), 0u) << "held process " << pid << " still runs";
  EXPECT_FALSE(now.empty());
  const std::vector<std::string> arrivals = Arrivals("b", id);
  ASSERT_EQ(arrivals.size(), 1u);
  EXPECT_THAT(arrivals[0], Not(HasSubstr("its process started at the offer"))) << arrivals[0];
  // The fresh process is the agent: it works (a new counter line on b).
  const size_t lines = CounterLines("b").size();
  WaitCounter("b", lines);
}

// ---------------------------------------------------------------------------------------------
// e. Faults.

TEST_F(MigrationTest, DestinationDownFailsTheHopAndTheAgentStays) {
  ASSERT_NO_FATAL_FAILURE(TrustOwnerEverywhere());
  std::string id = SpawnCounter("stays", /*max=*/3);
  ASSERT_FALSE(id.empty());
  M("b").vaultd->Kill();
  RunResult r = Ctl("a", {"migrate", id, "--to", "b"});
  EXPECT_EQ(r.exit_code, kExitUnavailable) << r;
  EXPECT_THAT(r.err, StartsWith("vaultctl: migration to b refused: Offer to b: "));
  EXPECT_THAT(r.err, HasSubstr("[UNAVAILABLE]\n"));
  AgentStatus st = WaitRunning("a", id);
  EXPECT_EQ(st.record().hop(), 0u);
  EXPECT_EQ(st.record().incarnation(), 1u);
  EXPECT_FALSE(st.record().has_migration());
  EXPECT_EQ(Audit("a", "agent.migrate.failed", id).size(), 1u);
  ExpectRunsOnlyOn(id, "a");

  // b comes back knowing nothing of it; a goes on as before.
  ASSERT_NO_FATAL_FAILURE(Restart("b"));
  absl::SleepFor(absl::Milliseconds(500));
  EXPECT_EQ(Get("b", id).status().code(), absl::StatusCode::kNotFound);
  st = WaitRunning("a", id);
  EXPECT_EQ(st.record().incarnation(), 1u);
  EXPECT_FALSE(st.record().has_migration());
  ExpectRunsOnlyOn(id, "a");
  // And the next try goes through (once a's channel to b is out of its reconnect backoff: a
  // try before then is refused at the Offer, as above, and changes nothing).
  RunResult again;
  const absl::Time until = absl::Now() + absl::Seconds(10);
  do {
    again = Ctl("a", {"-o", "json", "migrate", id, "--to", "b"});
  } while (again.exit_code == kExitUnavailable && absl::Now() < until &&
           (absl::SleepFor(absl::Milliseconds(200)), true));
  ExpectHop(id, "a", "b", 1, again);
}

TEST_F(MigrationTest, SourceKilledAfterAHopKeepsItDeparted) {
  ASSERT_NO_FATAL_FAILURE(TrustOwnerEverywhere());
  // A 5 MiB code object: chunked in a's CAS, streamed to b (Cas.Put) rather than batched.
  std::string id = SpawnCounter("gone", /*max=*/3, "(migrate (vaults a b c))", 5 << 10);
  ASSERT_FALSE(id.empty());
  ASSERT_GT(codes_["gone"].size(), size_t{5} << 20);
  EXPECT_EQ(Ctl("b", {"cas", "has", DigestText(codes_["gone"])}).exit_code, kExitNotFound);
  AgentStatus b = ExpectHop(id, "a", "b", 1, Ctl("a", {"-o", "json", "migrate", id, "--to", "b"}));
  EXPECT_EQ(Ctl("b", {"cas", "has", DigestText(codes_["gone"])}).exit_code, kExitOk);
  M("a").vaultd->Kill();
  ASSERT_NO_FATAL_FAILURE(Restart("a"));
  absl::SleepFor(absl::Milliseconds(500));
  absl::StatusOr<AgentStatus> a = Get("a", id);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->record().state(), vault::v1::DEPARTED);
  EXPECT_EQ(a->record().reason(), "departed to b");
  EXPECT_TRUE(Audit("a", "agent.resume", id, 1, absl::Milliseconds(300)).empty());
  AgentStatus again = WaitRunning("b", id);
  EXPECT_EQ(again.record().incarnation(), b.record().incarnation());
  ExpectRunsOnlyOn(id, "b");
}

// A source SIGKILLed while its hop is in flight. b is SIGSTOPped first, so a's Offer hangs and a
// is certainly MIGRATING (persisted, agent frozen) when it is killed. The test then stands in for
// the lost rest of the hop as member a (mutual TLS), and a, restarted, settles the hop with
// Status.
class InFlightTest : public MigrationTest {
 protected:
  // Starts `vaultctl migrate` to b with b stopped, waits for a's record to say MIGRATING, reads
  // the state it hands over (into *state), SIGKILLs a and returns the record. b is running again
  // on return.
  vault::v1::AgentRecord KillSourceMidHop(const std::string& id, std::string* state) {
    const pid_t b = M("b").vaultd->pid();
    kill(b, SIGSTOP);  // our own child
    absl::StatusOr<std::unique_ptr<ChildProcess>> ctl =
        ChildProcess::Spawn({VaultctlPath(), "--vault", V("a").socket, "migrate", id, "--to", "b"},
                            root() + "/migrate.log");
    EXPECT_TRUE(ctl.ok()) << ctl.status();
    AgentStatus st = WaitFor(
        "a", id, [](const AgentStatus& s) { return s.record().state() == vault::v1::MIGRATING; },
        absl::Seconds(15), "migrating");
    *state = CasGet("a", st.record().migration().state());
    M("a").vaultd->Kill();
    kill(b, SIGCONT);
    if (ctl.ok()) {
      std::optional<int> code = (*ctl)->WaitExit(absl::Seconds(15));
      EXPECT_EQ(code, kExitUnavailable) << ReadFile(root() + "/migrate.log").value_or("");
    }
    return st.record();
  }

  // With the cgroup v1 freezer, the frozen sandbox of a MIGRATING agent outlives a SIGKILLed
  // vaultd: its parent-death SIGKILL stays pending while the cgroup is frozen. Asserted before
  // the restart: every leftover is frozen (it cannot act). ExpectLeftoversGone, after the
  // restart: the restarted vaultd thawed and killed them (CgroupManager::RemoveStale).
  void ExpectLeftoversFrozen(const std::string& id) {
    std::map<std::string, std::set<pid_t>> procs = Processes(id);
    auto it = procs.find("orphan");
    if (it == procs.end()) return;
    RecordProperty("frozen_leftovers", Describe(procs));
    for (pid_t pid : it->second) {
      std::string folder = FreezerFolder(pid);
      if (folder.empty()) continue;  // gone meanwhile
      absl::StatusOr<std::string> state = ReadFile(folder + "/freezer.state");
      EXPECT_EQ(absl::StripAsciiWhitespace(state.value_or("?")), "FROZEN")
          << "a leftover process of agent " << id << " is not frozen: pid " << pid << " in "
          << folder;
    }
  }
  void ExpectLeftoversGone(const std::string& id) {
    absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (Processes(id).contains("orphan") && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(20));
    }
    EXPECT_FALSE(Processes(id).contains("orphan")) << Describe(Processes(id));
  }

  // The cgroup v1 freezer folder of `pid` ("" when it has none or is gone).
  static std::string FreezerFolder(pid_t pid) {
    std::string mount;
    for (absl::string_view line :
         absl::StrSplit(ReadFile("/proc/mounts").value_or(""), '\n', absl::SkipEmpty())) {
      std::vector<absl::string_view> f = absl::StrSplit(line, ' ');
      if (f.size() < 4 || f[2] != "cgroup") continue;
      for (absl::string_view opt : absl::StrSplit(f[3], ',')) {
        if (opt == "freezer") mount = std::string(f[1]);
      }
    }
    if (mount.empty()) return "";
    for (absl::string_view line :
         absl::StrSplit(ReadFile(absl::StrCat("/proc/", pid, "/cgroup")).value_or(""), '\n')) {
      std::vector<absl::string_view> f = absl::StrSplit(line, absl::MaxSplits(':', 2));
      if (f.size() != 3) continue;
      for (absl::string_view c : absl::StrSplit(f[1], ',')) {
        if (c == "freezer") return absl::StrCat(mount, f[2]);
      }
    }
    return "";
  }
};

TEST_F(InFlightTest, SourceKilledBeforeCommitResumesItAtTheSource) {
  ASSERT_NO_FATAL_FAILURE(TrustOwnerEverywhere());
  std::string id = SpawnCounter("inflight", /*max=*/3);
  ASSERT_FALSE(id.empty());
  std::string state_bytes;
  vault::v1::AgentRecord r = KillSourceMidHop(id, &state_bytes);
  ASSERT_EQ(r.state(), vault::v1::MIGRATING);
  EXPECT_EQ(r.migration().to_vault(), "b");
  EXPECT_EQ(r.migration().requested_by(), "operator");
  const std::string transfer = r.migration().transfer_id();
  ASSERT_EQ(transfer.size(), 16u);
  ExpectLeftoversFrozen(id);

  // Nothing committed at b; Status fences the transfer, and the Commit a may still have sent
  // (here: the test's, with a's own package) is refused.
  auto as_a = vault::v1::Migration::NewStub(MemberChannel("a", "b"));
  absl::StatusOr<vault::v1::TransferStatusResponse> st = Status(as_a.get(), transfer, true);
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->outcome(), vault::v1::TransferStatusResponse::UNKNOWN);
  absl::Status late = Commit(as_a.get(), PackageOf(r, "a"));
  EXPECT_EQ(late.code(), absl::StatusCode::kAlreadyExists) << late;
  EXPECT_THAT(std::string(late.message()), HasSubstr("was already aborted here"));
  EXPECT_EQ(Get("b", id).status().code(), absl::StatusCode::kNotFound);

  // a restarts, asks b, learns the hop never committed, and runs the agent again from the state
  // it was to hand over.
  const size_t lines_before = CounterLines("a").size();
  ASSERT_NO_FATAL_FAILURE(Restart("a"));
  ExpectLeftoversGone(id);
  AgentStatus back = WaitRunning("a", id);
  EXPECT_EQ(back.record().hop(), 0u);
  EXPECT_EQ(back.record().incarnation(), 2u);
  EXPECT_FALSE(back.record().has_migration());
  EXPECT_EQ(back.record().reason(), "migration to b did not commit (aborted)");
  std::vector<std::string> failed = Audit("a", "agent.migrate.failed", id);
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_EQ(JsonField(failed[0], "motivation"), "migration to b did not commit (aborted)");
  uint64_t state = 0;
  ASSERT_TRUE(absl::SimpleAtoi(state_bytes, &state)) << state_bytes;
  std::vector<CounterLine> lines = WaitCounter("a", lines_before);
  EXPECT_EQ(lines[lines_before].n, state + 1);
  ExpectRunsOnlyOn(id, "a");
  EXPECT_EQ(Get("b", id).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(InFlightTest, SourceKilledAfterCommitLearnsItDeparted) {
  ASSERT_NO_FATAL_FAILURE(TrustOwnerEverywhere());
  std::string id = SpawnCounter("committed", /*max=*/3);
  ASSERT_FALSE(id.empty());
  // What the lost Commit needs: the code and the state, read from a while it is alive.
  absl::StatusOr<AgentStatus> before = Get("a", id);
  ASSERT_TRUE(before.ok());
  const vault::v1::Digest code = before->record().spec().code_digest();
  std::string state_bytes;
  vault::v1::AgentRecord r = KillSourceMidHop(id, &state_bytes);
  ASSERT_EQ(r.state(), vault::v1::MIGRATING);
  const std::string transfer = r.migration().transfer_id();
  ExpectLeftoversFrozen(id);
  const std::string code_bytes = codes_["committed"];
  ASSERT_EQ(DigestText(code), DigestText(code_bytes));
  ASSERT_EQ(DigestText(state_bytes), DigestText(r.migration().state()));

  // The rest of the hop, as a would have done it: objects, Offer, Commit; the receipt is lost.
  std::shared_ptr<grpc::Channel> channel = MemberChannel("a", "b");
  auto cas = vault::v1::Cas::NewStub(channel);
  {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, absl::Seconds(10));
    vault::v1::BatchPutRequest req;
    for (const std::string* data : std::vector<const std::string*>{&code_bytes, &state_bytes}) {
      vault::v1::BatchPutRequest::Item* item = req.add_items();
      *item->mutable_digest() = DigestProto(*data);
      item->set_data(*data);
    }
    vault::v1::BatchPutResponse resp;
    ASSERT_TRUE(cas->BatchPut(&ctx, req, &resp).ok());
  }
  // Member c read the transfer id (it is in a's audit log, which c mirrors) and tries to fence
  // the hop off at b: its fence binds only itself.
  auto as_c = vault::v1::Migration::NewStub(MemberChannel("c", "b"));
  absl::StatusOr<vault::v1::TransferStatusResponse> fenced = Status(as_c.get(), transfer, true);
  ASSERT_TRUE(fenced.ok()) << fenced.status();
  EXPECT_EQ(fenced->outcome(), vault::v1::TransferStatusResponse::UNKNOWN);
  auto as_a = vault::v1::Migration::NewStub(channel);
  absl::StatusOr<std::vector<vault::v1::Digest>> missing = Offer(as_a.get(), PackageOf(r, "a"));
  ASSERT_TRUE(missing.ok()) << missing.status();
  EXPECT_TRUE(missing->empty());
  vault::v1::SignedReceipt receipt;
  absl::Status committed = Commit(as_a.get(), PackageOf(r, "a"), &receipt);
  ASSERT_TRUE(committed.ok()) << committed;
  // The committed transfer answers its source only.
  absl::StatusOr<vault::v1::TransferStatusResponse> peek = Status(as_c.get(), transfer, false);
  EXPECT_EQ(peek.status().code(), absl::StatusCode::kPermissionDenied) << peek.status();
  AgentStatus b = WaitRunning("b", id);
  EXPECT_EQ(b.record().hop(), 1u);
  EXPECT_EQ(DigestText(b.record().state_digest()), DigestText(r.migration().state()));

  // a restarts, asks b, and records the departure with b's receipt; it never starts the agent.
  ASSERT_NO_FATAL_FAILURE(Restart("a"));
  ExpectLeftoversGone(id);
  AgentStatus a = WaitFor(
      "a", id, [](const AgentStatus& s) { return s.record().state() == vault::v1::DEPARTED; },
      absl::Seconds(15), "departed");
  EXPECT_EQ(a.record().reason(), "departed to b");
  EXPECT_EQ(a.record().hop(), 1u);
  EXPECT_EQ(a.record().migration().receipt(), receipt.SerializeAsString());
  EXPECT_EQ(a.record().incarnation(), 1u);
  EXPECT_EQ(Audit("a", "agent.departed", id).size(), 1u);
  EXPECT_TRUE(Audit("a", "agent.migrate.failed", id, 1, absl::Milliseconds(300)).empty());
  ExpectRunsOnlyOn(id, "b");
  absl::StatusOr<vault::v1::TransferStatusResponse> st = Status(as_a.get(), transfer, true);
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->outcome(), vault::v1::TransferStatusResponse::COMMITTED);
}

}  // namespace
}  // namespace vault::integration
