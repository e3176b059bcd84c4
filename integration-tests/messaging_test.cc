// Messages across vaults (issue 27, docs/messages.md), with three real vaultd processes over
// mutual TLS on loopback:
//  - a supervisor on a and a worker that hops a -> b -> c while they exchange numbered messages
//    both ways: every message arrives once, in order, and says which vault signed it;
//  - the attacks a member can make with the Messages service (a forgery for an agent it does not
//    host, another vault's name on its own signature, an altered payload, a replay, a sender the
//    receiver's grants do not name), each refused with its own code and audited;
//  - chaos: senders on every vault and receivers that the operator moves at random, while
//    vaultds are SIGKILLed and restarted and links between members are cut and healed (every
//    link through a proxy). Afterwards each receiver's state holds, per sender, a strictly
//    increasing list that contains every message its sender was told was accepted, and every
//    audit log verifies. Replay a run with VAULT_IT_SEED=<the seed it printed>.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "common/sha256.h"
#include "integration-tests/proxied_fixture.h"
#include "vault/v1/message.grpc.pb.h"

namespace vault::integration {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// Acknowledges every "num" message to its sender, keeping what it got in its state; hops to b
// after the 10th and to c after the 20th; after the 30th logs them all and waits.
constexpr absl::string_view kWorker = R"(
import json
a = vault_agent.Agent.connect()
me = a.self_inspect()
st = a.get_state()
s = json.loads(st) if st else {"got": []}
a.log("start vault=%s hop=%d got=%d" % (me["vault"], me["hop"], len(s["got"])))
while True:
    m = a.receive(timeout=0.2)
    if m is None:
        continue
    if m.type == "vault.checkpoint":
        a.checkpoint(json.dumps(s).encode())
        continue
    if m.type != "num":
        continue
    s["got"].append(int(m.data))
    a.send(m.sender, "ack", m.data)
    n = len(s["got"])
    if n == 10 and me["vault"] == "a":
        a.migrate("b", json.dumps(s).encode())
    if n == 20 and me["vault"] == "b":
        a.migrate("c", json.dumps(s).encode())
    if n == 30:
        a.log("done got=" + ",".join(str(x) for x in s["got"]))
)";

// Sends "num" 1..30 to the worker (its id is its state), one every 50 ms wherever the worker
// is, and logs each acknowledgement with the vault that signed it.
constexpr absl::string_view kSupervisor = R"(
a = vault_agent.Agent.connect()
worker = a.get_state().decode()
acks = []
sent = 0
while len(acks) < 30:
    if sent < 30:
        sent += 1
        a.send(worker, "num", str(sent).encode())
    m = a.receive(timeout=0.05)
    while m is not None:
        if m.type == "ack":
            acks.append(m.data.decode() + "@" + m.from_vault)
            if len(m.signature) != 64 or m.seq == 0 or not m.from_principal:
                a.log("unsigned ack " + m.data.decode())
        m = a.receive(timeout=0)
a.log("done acks=" + ",".join(acks))
while True:
    a.receive(timeout=1)
)";

class MessagingTest : public MigrationTest {
 protected:
  // The worker on a, then the supervisor with the worker's id as its state.
  std::pair<std::string, std::string> SpawnPair() {
    const std::string worker =
        Spawn("a",
              WriteAgent("worker", kWorker,
                         "(send (agent *)) (receive (from *)) (migrate (vaults a b c))",
                         "(max-runtime 300) (max-migrations 5)"),
              owner_key_);
    if (worker.empty()) return {};
    WaitLog("a", worker, "start vault=a hop=0 got=0");
    const std::string supervisor =
        Spawn("a",
              WriteAgent("supervisor", kSupervisor, "(send (agent *)) (receive (from *))",
                         "(max-runtime 300)"),
              owner_key_, worker);
    return {worker, supervisor};
  }

  capability::PrivateKey VaultKey(const std::string& vault) {
    absl::StatusOr<capability::PrivateKey> key =
        capability::PrivateKey::LoadFile(V(vault).dir + "/vault.key");
    EXPECT_TRUE(key.ok()) << key.status();
    return *std::move(key);
  }

  // A message from agent `from` (its record on `vault` gives its chain and principal) to `to`,
  // as `signer` signs it claiming `sending_vault`.
  vault::v1::SignedMessage Forge(const vault::v1::AgentRecord& from, const std::string& to,
                                 uint64_t seq, const std::string& sending_vault,
                                 const capability::PrivateKey& signer,
                                 const std::string& data = "forged") {
    vault::v1::MessageRecord r;
    r.set_version(1);
    r.set_from(from.id());
    r.set_to(to);
    r.set_type("num");
    r.set_payload_sha256(common::Sha256::Hash(data));
    r.set_payload_size(data.size());
    r.set_seq(seq);
    r.set_sending_vault(sending_vault);
    r.set_sent_unix_ms(absl::ToUnixMillis(absl::Now()));
    r.set_from_principal(from.principal());
    const std::string chain = from.chain().SerializeAsString();
    r.set_chain_sha256(common::Sha256::Hash(chain));
    vault::v1::SignedMessage m;
    r.SerializeToString(m.mutable_record());
    absl::StatusOr<std::string> sig =
        signer.Sign(absl::StrCat(capability::kMessageDomain, m.record()));
    EXPECT_TRUE(sig.ok());
    m.set_signature(sig.value_or(""));
    m.set_data(data);
    m.set_chain(chain);
    return m;
  }

  absl::Status Deliver(const std::string& as, const std::string& to,
                       const vault::v1::SignedMessage& m) {
    auto stub = vault::v1::Messages::NewStub(MemberChannel(as, to));
    grpc::ClientContext ctx;
    SetDeadline(&ctx, absl::Seconds(10));
    vault::v1::DeliverRequest req;
    *req.mutable_message() = m;
    vault::v1::DeliverResponse resp;
    return FromGrpc(stub->Deliver(&ctx, req, &resp));
  }
};

TEST_F(MessagingTest, WorkersHopAndEveryMessageArrivesOnceInOrderSignedWhereItWasSent) {
  ASSERT_NO_FATAL_FAILURE(TrustOwnerEverywhere({"send:*", "receive:*"}));
  auto [worker, supervisor] = SpawnPair();
  ASSERT_FALSE(supervisor.empty());
  std::string expected_got, expected_acks;
  for (int n = 1; n <= 30; ++n) {
    absl::StrAppend(&expected_got, n == 1 ? "" : ",", n);
    absl::StrAppend(&expected_acks, n == 1 ? "" : ",", n, "@", n <= 10 ? "a" : n <= 20 ? "b" : "c");
  }
  WaitLog("c", worker, absl::StrCat("done got=", expected_got), absl::Seconds(60));
  WaitLog("a", supervisor, absl::StrCat("done acks=", expected_acks), absl::Seconds(30));
  for (const std::string& line : Logs("a", supervisor)) {
    EXPECT_THAT(line, Not(HasSubstr("unsigned"))) << line;
  }
  // The worker's record went a -> b -> c; acknowledgements from b and c were checked by a
  // against b's and c's keys and the worker's chain (audited as delivered there).
  absl::StatusOr<AgentStatus> on_c = Get("c", worker);
  ASSERT_TRUE(on_c.ok()) << on_c.status();
  EXPECT_EQ(on_c->record().hop(), 2u);
  EXPECT_EQ(Audit("a", "message.delivered", supervisor, 20).size(), 20u);
}

TEST_F(MessagingTest, MembersCannotForgeAlterReplayOrReachAnAgentThatDoesNotTakeTheSender) {
  ASSERT_NO_FATAL_FAILURE(TrustOwnerEverywhere({"send:*", "receive:*"}));
  // A receiver on b that takes "num" from anyone, and one that takes messages from nobody.
  const std::string open_rx = Spawn(
      "b",
      WriteAgent("open", "a = vault_agent.Agent.connect()\nwhile True:\n    a.receive(timeout=1)\n",
                 "(receive (from *))", "(max-runtime 300)"),
      owner_key_);
  const std::string closed_rx =
      Spawn("b",
            WriteAgent("closed",
                       "a = vault_agent.Agent.connect()\nwhile True:\n    a.receive(timeout=1)\n",
                       "(receive (from nobody-here))", "(max-runtime 300)"),
            owner_key_);
  // The sender: an agent on a.
  const std::string sender =
      Spawn("a",
            WriteAgent("sender",
                       "a = vault_agent.Agent.connect()\nwhile True:\n    a.receive(timeout=1)\n",
                       "(send (agent *))", "(max-runtime 300)"),
            owner_key_);
  ASSERT_FALSE(open_rx.empty() || closed_rx.empty() || sender.empty());
  absl::StatusOr<AgentStatus> s = Get("a", sender);
  ASSERT_TRUE(s.ok()) << s.status();
  const vault::v1::AgentRecord& from = s->record();
  const capability::PrivateKey key_a = VaultKey("a"), key_c = VaultKey("c");

  // c speaks for an agent that runs on a (its chain ends at a).
  absl::Status forged = Deliver("c", "b", Forge(from, open_rx, 1, "c", key_c));
  EXPECT_EQ(forged.code(), absl::StatusCode::kUnauthenticated) << forged;
  EXPECT_THAT(forged.message(), HasSubstr(absl::StrCat("does not place agent ", sender, " on c")));
  // c signs, naming a as the sending vault.
  absl::Status claimed = Deliver("c", "b", Forge(from, open_rx, 1, "a", key_c));
  EXPECT_EQ(claimed.code(), absl::StatusCode::kUnauthenticated) << claimed;
  EXPECT_THAT(claimed.message(), HasSubstr("signature does not verify against a's key"));
  // A genuine message (as a signs it), its payload altered on the way.
  vault::v1::SignedMessage genuine = Forge(from, open_rx, 7, "a", key_a, "genuine");
  vault::v1::SignedMessage altered = genuine;
  altered.set_data("genuinE");
  absl::Status changed = Deliver("c", "b", altered);
  EXPECT_EQ(changed.code(), absl::StatusCode::kUnauthenticated) << changed;
  EXPECT_THAT(changed.message(), HasSubstr("payload is not the one a signed"));
  // The genuine one is delivered once; handed over again (by another member) it is a replay.
  absl::Status first = Deliver("c", "b", genuine);
  EXPECT_TRUE(first.ok()) << first;
  absl::Status replayed = Deliver("a", "b", genuine);
  EXPECT_EQ(replayed.code(), absl::StatusCode::kAlreadyExists) << replayed;
  EXPECT_THAT(replayed.message(), HasSubstr("was accepted before"));
  // Nor does an older sequence number of that sender get in.
  absl::Status older = Deliver("a", "b", Forge(from, open_rx, 6, "a", key_a, "older"));
  EXPECT_EQ(older.code(), absl::StatusCode::kAlreadyExists) << older;
  // A receiver whose receive grants do not name the sender.
  absl::Status unnamed = Deliver("a", "b", Forge(from, closed_rx, 1, "a", key_a));
  EXPECT_EQ(unnamed.code(), absl::StatusCode::kPermissionDenied) << unnamed;
  EXPECT_THAT(unnamed.message(), HasSubstr("has no receive grant for it"));

  // Each is in b's audit log.
  EXPECT_EQ(Audit("b", "message.refused", open_rx, 3).size(), 3u);
  EXPECT_EQ(Audit("b", "message.duplicate", open_rx, 2).size(), 2u);
  EXPECT_EQ(Audit("b", "message.refused", closed_rx).size(), 1u);
  EXPECT_EQ(Audit("b", "message.delivered", open_rx).size(), 1u);
}

// ---------------------------------------------------------------------------------------------
// Chaos.

constexpr absl::Duration kChaosDuration = absl::Seconds(40);
constexpr int kChaosReceivers = 2;
constexpr int kChaosMaxDown = 2;  // of three vaultds, never all

// Host calls that meet a vault being frozen or stopped are tried again.
constexpr absl::string_view kRetry = R"(
def call(f, *args, **kw):
    for i in range(600):
        try:
            return f(*args, **kw)
        except vault_agent.HostError as e:
            if e.code not in (vault_agent.UNAVAILABLE, 8) or i == 599:
                raise
            time.sleep(0.05)
)";

// Numbers its messages 1, 2, ..., sending message n to receiver n % len(RECEIVERS). Its state
// (JSON): the last number it took, checkpointed before the send so that no number is sent twice,
// and the numbers whose send was accepted, checkpointed after it (a kill in between leaves one
// accepted message out of the list, never one in that was not accepted).
constexpr absl::string_view kChaosSender = R"(
import json
NAME = "$NAME"
RECEIVERS = "$RECEIVERS".split(",")
a = vault_agent.Agent.connect()
st = call(a.get_state)
s = json.loads(st) if st else {"n": 0, "acc": []}
while True:
    s["n"] += 1
    n = s["n"]
    call(a.checkpoint, json.dumps(s).encode())
    call(a.send, RECEIVERS[n % len(RECEIVERS)], "num", ("%s %d" % (NAME, n)).encode())
    s["acc"].append(n)
    call(a.checkpoint, json.dumps(s).encode())
    time.sleep(0.05)
)";

// Keeps, per sender, the numbers it received, checkpointing after each message.
constexpr absl::string_view kChaosReceiver = R"(
import json
a = vault_agent.Agent.connect()
st = call(a.get_state)
s = json.loads(st) if st else {}
while True:
    m = call(a.receive, timeout=0.2)
    if m is None:
        continue
    if m.type == "num":
        name, n = m.data.decode().split()
        s.setdefault(name, []).append(int(n))
    call(a.checkpoint, json.dumps(s).encode())
)";

class MessagingChaosTest : public ProxiedFederationTest {
 protected:
  MessagingChaosTest() {
    for (const std::string& from : kVaults) {
      for (const std::string& to : kVaults) {
        if (from != to) links_.insert({from, to});
      }
    }
  }

  // The agent's state on `vault` (its last checkpoint) when its record there is in `state`.
  std::optional<std::string> StateOn(const std::string& vault, const std::string& id,
                                     vault::v1::AgentState state) {
    absl::StatusOr<AgentStatus> st = Get(vault, id);
    if (!st.ok() || st->record().state() != state || !st->record().has_state()) {
      return std::nullopt;
    }
    return CasGet(vault, st->record().state_digest());
  }

  // The lists of a JSON object of lists of numbers: {"s-0": [1, 4], "acc": [2]} (n is left out).
  static std::map<std::string, std::vector<int64_t>> Lists(const std::string& json) {
    std::map<std::string, std::vector<int64_t>> out;
    for (absl::string_view part : absl::StrSplit(json, ']', absl::SkipEmpty())) {
      const size_t open = part.find('[');
      if (open == absl::string_view::npos) continue;
      const size_t q2 = part.rfind('"', open), q1 = part.rfind('"', q2 - 1);
      if (q1 == absl::string_view::npos || q2 == absl::string_view::npos || q2 == 0) continue;
      std::vector<int64_t>& list = out[std::string(part.substr(q1 + 1, q2 - q1 - 1))];
      for (absl::string_view num :
           absl::StrSplit(part.substr(open + 1), ',', absl::SkipWhitespace())) {
        int64_t n;
        if (absl::SimpleAtoi(absl::StripAsciiWhitespace(num), &n)) list.push_back(n);
      }
    }
    return out;
  }

  // The receiver's state where it runs now (empty until it runs somewhere).
  std::map<std::string, std::vector<int64_t>> ReceivedBy(const std::string& id) {
    for (const std::string& v : kVaults) {
      if (std::optional<std::string> json = StateOn(v, id, vault::v1::RUNNING)) return Lists(*json);
    }
    return {};
  }

  // Every audit entry about messages that did not get through, on every vault.
  std::string Refusals() {
    std::string out;
    for (const std::string& v : kVaults) {
      RunResult r = Ctl(v, {"-o", "json", "audit", "tail", "-n", "100000"});
      for (absl::string_view line : absl::StrSplit(r.out, '\n', absl::SkipEmpty())) {
        if (absl::StrContains(line, "message.undeliverable") ||
            absl::StrContains(line, "message.refused")) {
          absl::StrAppend(&out, v, ": ", line, "\n");
        }
      }
    }
    return out;
  }
};

TEST_F(MessagingChaosTest, EveryAcceptedMessageReachesItsMovingReceiverOnceInOrder) {
  ASSERT_NO_FATAL_FAILURE(TrustOwnerEverywhere({"send:*", "receive:*"}));
  const uint64_t seed = Seed();
  std::mt19937_64 rng(seed);
  const std::string prelude = absl::StrCat(kRetry);
  std::vector<std::string> receivers;
  for (int i = 0; i < kChaosReceivers; ++i) {
    receivers.push_back(
        Spawn("a",
              WriteAgent(absl::StrCat("r-", i), absl::StrCat(prelude, kChaosReceiver),
                         "(receive (from *)) (migrate (vaults a b c))",
                         "(max-runtime 600) (max-migrations 1000)"),
              owner_key_));
    ASSERT_FALSE(receivers.back().empty());
  }
  // One sender on each vault.
  std::map<std::string, std::string> senders;  // name -> id
  std::map<std::string, std::string> sender_vault;
  for (size_t i = 0; i < kVaults.size(); ++i) {
    const std::string name = absl::StrCat("s-", i);
    const std::string body =
        absl::StrReplaceAll(absl::StrCat(prelude, kChaosSender),
                            {{"$NAME", name}, {"$RECEIVERS", absl::StrJoin(receivers, ",")}});
    senders[name] = Spawn(
        kVaults[i], WriteAgent(name, body, "(send (agent *))", "(max-runtime 600)"), owner_key_);
    sender_vault[name] = kVaults[i];
    ASSERT_FALSE(senders[name].empty());
  }
  std::map<std::string, std::string> sockets;
  for (const std::string& v : kVaults) sockets[v] = V(v).socket;

  // The operator moves each receiver at random while the vaults die and links break.
  std::atomic<bool> stop{false};
  std::atomic<int> hops{0}, hop_attempts{0};
  std::vector<std::thread> movers;
  for (const std::string& id : receivers) {
    movers.emplace_back([&, id, s = rng()] {
      std::mt19937_64 r(s);
      while (!stop.load()) {
        const std::string ask = kVaults[r() % kVaults.size()];
        RunResult where = RunProgram(
            {VaultctlPath(), "--vault", sockets[ask], "-o", "json", "agent", "where", id},
            absl::Seconds(20));
        std::optional<std::string> at = JsonField(where.out, "vault");
        if (where.exit_code != kExitOk || !at.has_value() || !sockets.contains(*at) ||
            JsonField(where.out, "state") != "running") {
          absl::SleepFor(absl::Milliseconds(200));
          continue;
        }
        std::string to;
        do {
          to = kVaults[r() % kVaults.size()];
        } while (to == *at);
        hop_attempts.fetch_add(1);
        RunResult m = RunProgram({VaultctlPath(), "--vault", sockets[*at], "migrate", id, "--to",
                                  to, "--checkpoint-wait", "300"},
                                 absl::Seconds(60));
        if (m.exit_code == kExitOk) hops.fetch_add(1);
        absl::SleepFor(absl::Milliseconds(static_cast<int64_t>(r() % 800)));
      }
    });
  }
  Havoc havoc;
  ASSERT_NO_FATAL_FAILURE(Wreak(rng, absl::Now() + kChaosDuration, kChaosMaxDown, &havoc));
  stop = true;
  for (std::thread& t : movers) t.join();
  ASSERT_NO_FATAL_FAILURE(HealAll());
  const int kills = havoc.kills, restarts = havoc.restarts, cuts = havoc.cuts, heals = havoc.heals;
  // The senders stop; what they were told was accepted is in their states.
  std::map<std::string, std::map<std::string, std::set<int64_t>>> accepted;  // rx -> sender -> n
  size_t accepted_count = 0;
  for (const auto& [name, id] : senders) {
    RunResult r = Ctl(sender_vault[name], {"agent", "terminate", id, "--as", owner_key_});
    EXPECT_EQ(r.exit_code, kExitOk) << r;
    std::optional<std::string> json = StateOn(sender_vault[name], id, vault::v1::TERMINATED);
    ASSERT_TRUE(json.has_value()) << name;
    std::map<std::string, std::vector<int64_t>> lists = Lists(*json);
    for (int64_t n : lists["acc"]) {
      accepted[receivers[static_cast<size_t>(n) % receivers.size()]][name].insert(n);
      ++accepted_count;
    }
  }
  // Every receiver gets there: its state holds every accepted message, each once, in order.
  size_t received_count = 0;
  for (const std::string& rx : receivers) {
    SCOPED_TRACE(absl::StrCat("receiver ", rx));
    std::map<std::string, std::vector<int64_t>> got;
    auto complete = [&] {
      got = ReceivedBy(rx);
      for (const auto& [name, want] : accepted[rx]) {
        std::set<int64_t> have(got[name].begin(), got[name].end());
        for (int64_t n : want) {
          if (!have.contains(n)) return false;
        }
      }
      return true;
    };
    const absl::Time deadline = absl::Now() + absl::Seconds(90);
    while (!complete() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(250));
    EXPECT_TRUE(complete()) << Refusals();
    for (const auto& [name, list] : got) {
      received_count += list.size();
      for (size_t i = 1; i < list.size(); ++i) {
        EXPECT_LT(list[i - 1], list[i]) << "from " << name << ": " << absl::StrJoin(list, ",");
      }
      for (int64_t n : accepted[rx][name]) {
        EXPECT_TRUE(std::find(list.begin(), list.end(), n) != list.end())
            << "accepted message " << n << " of " << name << " never arrived";
      }
    }
  }
  std::cerr << "messaging chaos (seed " << seed << "): " << accepted_count
            << " messages accepted (in the senders' states), " << received_count << " received; "
            << hops.load() << " of " << hop_attempts.load() << " receiver hops committed; " << kills
            << " vaultd kills, " << restarts << " restarts, " << cuts << " link cuts, " << heals
            << " heals\n";
  RecordProperty("messages_accepted", static_cast<int>(accepted_count));
  RecordProperty("messages_received", static_cast<int>(received_count));
  RecordProperty("receiver_hops", hops.load());
  RecordProperty("vaultd_kills", kills);
  RecordProperty("link_cuts", cuts);
  EXPECT_GT(accepted_count, 100u);
  ExpectAuditsVerify();
}

}  // namespace
}  // namespace vault::integration
