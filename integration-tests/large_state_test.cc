// An agent whose state is 64 MiB, far beyond one host-call frame (1 MiB), migrates between real
// vaultds (the three-vault federation of migration_fixture.h) and arrives byte-identical. The
// Python agent checkpoints it on a (the SDK puts it in pieces with cas_upload_* and checkpoints
// by digest), the operator moves it to b (the Migration service streams the object), where it
// reads the state back in pieces, changes a byte and moves itself to c with the migrate host call
// (put in pieces again, handed over by digest), where it reads it back once more. At each step
// the digest the agent computes itself (hashlib) is compared with the vault's records, and the
// object c holds is hashed by the test.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "integration-tests/migration_fixture.h"

namespace vault::integration {
namespace {

using vault::v1::AgentStatus;

constexpr uint64_t kStateBytes = uint64_t{64} << 20;

inline constexpr absl::string_view kLargeStateAgent = R"(
import hashlib
a = vault_agent.Agent.connect()
me = a.self_inspect()

def text(b):
    return "sha256:%s/%d" % (hashlib.sha256(b).hexdigest(), len(b))

if me["vault"] == "a":
    state = os.urandom(64 << 20)
    d = a.checkpoint(state)
    a.log("checkpointed %s computed %s" % (d, text(state)))
    del state
    while True:  # the operator moves it to b
        a.receive(timeout=0.2)
elif me["vault"] == "b":
    st = a.get_state()
    a.log("read on b %s" % text(st))
    st = b"b" + st[1:]
    a.log("hands over %s" % text(st))
    a.migrate("c", st)
    a.log("migrate c returned")
else:
    st = a.get_state()
    a.log("read on c %s" % text(st))
    a.exit(0, "done")
)";

class LargeStateTest : public MigrationTest {
 protected:
  // The first log line of the agent on `vault` that starts with `prefix`, waiting for it.
  std::string LogLine(const std::string& vault, const std::string& id, const std::string& prefix,
                      absl::Duration timeout = absl::Seconds(120)) {
    const absl::Time deadline = absl::Now() + timeout;
    std::vector<std::string> logs;
    while (absl::Now() < deadline) {
      logs = Logs(vault, id);
      for (const std::string& l : logs) {
        if (absl::StartsWith(l, prefix)) return l;
      }
      absl::SleepFor(absl::Milliseconds(100));
    }
    ADD_FAILURE() << "agent " << id << " on " << vault << " never logged \"" << prefix
                  << "...\"; its log:\n"
                  << absl::StrJoin(logs, "\n");
    return "";
  }
};

TEST_F(LargeStateTest, A64MiBStateMigratesByteIdentical) {
  std::string owner;
  const std::string key = NewKey("large", &owner);
  for (const char* v : {"a", "b", "c"}) {
    ASSERT_NO_FATAL_FAILURE(Trust(v, key, {"cas-write", "migrate:a,b,c"}));
  }
  std::string spec =
      WriteAgent("large", kLargeStateAgent, "(cas-write) (migrate (vaults b c))",
                 "(max-runtime 300) (max-migrations 2) (max-memory (* 512 1024 1024))");
  std::string id = Spawn("a", spec, key);
  ASSERT_FALSE(id.empty());

  // On a: checkpointed in pieces; the vault's record names the digest the agent computed.
  std::string line = LogLine("a", id, "checkpointed ");
  std::vector<std::string> words = absl::StrSplit(line, ' ');
  ASSERT_EQ(words.size(), 4u) << line;
  const std::string digest_a = words[1];
  EXPECT_EQ(words[3], digest_a) << line;
  EXPECT_TRUE(absl::EndsWith(digest_a, absl::StrCat("/", kStateBytes))) << digest_a;
  absl::StatusOr<AgentStatus> on_a = Get("a", id);
  ASSERT_TRUE(on_a.ok()) << on_a.status();
  EXPECT_EQ(DigestText(on_a->record().state_digest()), digest_a);

  // The operator moves it to b; it reads the 64 MiB back there, intact.
  RunResult r = Ctl("a", {"-o", "json", "migrate", id, "--to", "b", "--checkpoint-wait", "1"},
                    absl::Seconds(180));
  ASSERT_EQ(r.exit_code, kExitOk) << r;
  absl::StatusOr<AgentStatus> src = Get("a", id);
  ASSERT_TRUE(src.ok()) << src.status();
  EXPECT_EQ(src->record().state(), vault::v1::DEPARTED);
  EXPECT_EQ(DigestText(src->record().migration().state()), digest_a);
  EXPECT_EQ(LogLine("b", id, "read on b "), "read on b " + digest_a);

  // It changes a byte and moves itself to c (the SDK puts the state in pieces on b and hands it
  // over by digest); c reads back exactly what b computed.
  line = LogLine("b", id, "hands over ");
  const std::string digest_b = line.substr(std::string("hands over ").size());
  EXPECT_NE(digest_b, digest_a);
  EXPECT_EQ(LogLine("c", id, "read on c "), "read on c " + digest_b);
  AgentStatus on_c = WaitFor(
      "c", id, [](const AgentStatus& s) { return s.record().state() == vault::v1::COMPLETED; },
      absl::Seconds(120), "completed");
  EXPECT_EQ(on_c.record().hop(), 2u);
  EXPECT_EQ(on_c.record().arrived_from(), "b");
  EXPECT_EQ(DigestText(on_c.record().state_digest()), digest_b);
  absl::StatusOr<AgentStatus> on_b = Get("b", id);
  ASSERT_TRUE(on_b.ok()) << on_b.status();
  EXPECT_EQ(on_b->record().state(), vault::v1::DEPARTED);
  EXPECT_EQ(on_b->record().migration().requested_by(), "agent");
  EXPECT_EQ(DigestText(on_b->record().migration().state()), digest_b);
  for (const std::string& l : Logs("b", id)) EXPECT_NE(l, "migrate c returned");
  // The test's own oracle: the bytes c holds hash to the digest.
  const std::string held = CasGet("c", on_c.record().state_digest());
  EXPECT_EQ(held.size(), kStateBytes);
  EXPECT_EQ(DigestText(held), digest_b);
  EXPECT_EQ(held[0], 'b');
}

}  // namespace
}  // namespace vault::integration
