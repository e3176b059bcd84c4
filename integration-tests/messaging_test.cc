// Messages across vaults (issue 27, docs/messages.md), with three real vaultd processes over
// mutual TLS on loopback: a supervisor on a and a worker that hops a -> b -> c while they
// exchange numbered messages both ways; every message arrives once, in order, and says which
// vault signed it. Then the attacks a member can make with the Messages service (a forgery for
// an agent it does not host, another vault's name on its own signature, an altered payload, a
// replay, a sender the receiver's grants do not name), each refused with its own code and
// audited.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/sha256.h"
#include "integration-tests/migration_fixture.h"
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
  ASSERT_NO_FATAL_FAILURE(TrustOwnerEverywhere());
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
  ASSERT_NO_FATAL_FAILURE(TrustOwnerEverywhere());
  // A receiver on b that takes "num" from anyone, and one that takes messages from nobody.
  const std::string open_rx = Spawn(
      "b", WriteAgent("open", "a = vault_agent.Agent.connect()\nwhile True:\n    a.receive(timeout=1)\n",
                      "(receive (from *))", "(max-runtime 300)"),
      owner_key_);
  const std::string closed_rx = Spawn(
      "b", WriteAgent("closed", "a = vault_agent.Agent.connect()\nwhile True:\n    a.receive(timeout=1)\n",
                      "(receive (from nobody-here))", "(max-runtime 300)"),
      owner_key_);
  // The sender: an agent on a.
  const std::string sender = Spawn(
      "a", WriteAgent("sender", "a = vault_agent.Agent.connect()\nwhile True:\n    a.receive(timeout=1)\n",
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

}  // namespace
}  // namespace vault::integration
