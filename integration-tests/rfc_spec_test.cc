// The RFC's specs on a real vault (docs/spec.md): its daemon example spawned as written, names and
// groups addressing messages, a purpose the vault fills in, and what the vault checks rather than
// trusts (a requested id, spawned-by, fuel where nothing counts it).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "integration-tests/agent_fixture.h"
#include "integration-tests/harness.h"

namespace vault::integration {
namespace {

using ::testing::HasSubstr;

constexpr char kDone[] = R"(
a.log("hello")
a.exit(0)
)";

class RfcSpecTest : public AgentTest {
 protected:
  // The RFC example `name`, copied byte for byte into the test's directory.
  std::string Example(const std::string& name) {
    absl::StatusOr<std::string> text = ReadFile(absl::StrCat(VAULT_IT_RFC_DIR, "/", name));
    EXPECT_TRUE(text.ok()) << text.status();
    std::string path = absl::StrCat(root(), "/", name);
    EXPECT_TRUE(WriteFile(path, text.value_or("")).ok());
    return path;
  }
  std::string PythonFile(const std::string& name, const std::string& body) {
    std::string path = absl::StrCat(root(), "/", name, ".py");
    EXPECT_TRUE(WriteFile(path, absl::StrCat(kPrelude, body)).ok());
    return path;
  }
};

TEST_F(RfcSpecTest, DaemonExampleSpawnsAsWritten) {
  StartVault("v");
  std::string user_principal;
  const std::string user = NewKey("user", &user_principal);
  // Its grants are above the full preset: the operator says which URLs and hosts.
  Trust(user, {R"((capabilities (read (url "https://arxiv.org/*")) (write (path "/vault"))
                   (network (hosts arxiv.org doi.org))))"});
  const std::string spec = Example("daemon.scm");
  const std::string code = PythonFile("daemon", kDone);

  RunResult unbound = Ctl({"agent", "spawn", spec, "--code", code, "--as", user});
  EXPECT_EQ(unbound.exit_code, kExitUsage) << unbound;
  EXPECT_THAT(unbound.err, HasSubstr(absl::StrCat("says (spawned-by user-principal): bind "
                                                  "user-principal to the spawning key, --bind "
                                                  "user-principal=",
                                                  user, " (or ed25519:<hex>)")));

  RunResult other = Ctl({"agent", "spawn", spec, "--code", code, "--bind",
                         "user-principal=" + admin_key_, "--as", user});
  EXPECT_EQ(other.exit_code, kExitUsage) << other;
  EXPECT_THAT(other.err, HasSubstr(absl::StrCat("but --as ", user, " is ", user_principal)));

  RunResult r = Ctl({"-o", "json", "agent", "spawn", spec, "--code", code, "--bind",
                     "user-principal=" + user, "--as", user});
  ASSERT_EQ(r.exit_code, kExitOk) << r;
  EXPECT_EQ(JsonField(r.out, "agent_id"), "agent-2026-001");
  EXPECT_THAT(r.err, HasSubstr("warning: " + spec +
                               ":14:3: (status running) ignored: an agent's status is the "
                               "vault's to set"));
  EXPECT_THAT(r.out, HasSubstr(R"("grants":["read https://arxiv.org:443/rss/*","write /vault/papers","network arxiv.org:*","network doi.org:*"])"));
  EXPECT_THAT(r.out, HasSubstr(R"("max_runtime_ms":86400000)"));
  WaitLog("agent-2026-001", "hello");

  // The id is the spec's, so a second spawn of the same spec is refused.
  RunResult again = Ctl({"agent", "spawn", spec, "--code", code, "--bind",
                         "user-principal=" + user, "--as", user});
  EXPECT_NE(again.exit_code, kExitOk) << again;
  EXPECT_THAT(again.err, HasSubstr("agent agent-2026-001 "));
}

TEST_F(RfcSpecTest, NoPurposeGetsADefaultAndAWarning) {
  StartVault("v");
  PythonFile("plain", kDone);
  const std::string spec = absl::StrCat(root(), "/plain.scm");
  ASSERT_TRUE(WriteFile(spec, "(spawn-agent (code-file \"plain.py\"))\n").ok());
  RunResult r = Ctl({"agent", "spawn", spec, "--as", admin_key_});
  ASSERT_EQ(r.exit_code, kExitOk) << r;
  const std::string id = Trim(r.out);
  EXPECT_THAT(r.err, HasSubstr("warning: " + spec + ":1:1: (spawn-agent ...) has no (purpose"));
  EXPECT_THAT(r.err, HasSubstr("warning: the spec has no purpose; recorded as \"(no purpose "
                               "given)\""));
  RunResult d = Ctl({"-o", "json", "agent", "describe", id});
  ASSERT_EQ(d.exit_code, kExitOk) << d;
  EXPECT_EQ(JsonField(d.out, "purpose"), "(no purpose given)");
}

TEST_F(RfcSpecTest, FuelOnAPosixAgentIsRefused) {
  StartVault("v");
  PythonFile("fuel", kDone);
  const std::string spec = absl::StrCat(root(), "/fuel.scm");
  ASSERT_TRUE(WriteFile(spec, "(agent (purpose \"p\") (code-file \"fuel.py\") "
                              "(constraints (fuel (computation 1000))))\n")
                  .ok());
  RunResult r = Ctl({"agent", "spawn", spec, "--as", admin_key_});
  EXPECT_EQ(r.exit_code, kExitUsage) << r;
  EXPECT_THAT(r.err, HasSubstr(spec + ": fuel (max-steps, max-allocation, (fuel ...)) is counted "
                                      "only by the interpreting sandboxes (scheme, wasm); a "
                                      "posix agent is bounded by max-cpu and max-memory "
                                      "instead"));
}

// The RFC's reactive pattern addresses agents by name: (receive (from supervisor-agent)),
// (send (to worker-agents)). A name is unique among a principal's live agents; a group is
// written (groups worker-agents) in each member's spec; names never reach another principal.
TEST_F(RfcSpecTest, NamesAndGroupsAddressMessages) {
  StartVault("v");
  PythonFile("worker", R"(
a.log("ready")
m = a.receive(timeout=20)
a.log("got %s %s %s" % (m.sender, m.type, m.data.decode()) if m else "got nothing")
a.exit(0)
)");
  const std::string worker_spec = absl::StrCat(root(), "/worker.scm");
  ASSERT_TRUE(WriteFile(worker_spec, R"((agent (purpose "w") (code-file "worker.py")
  (name worker-1) (groups worker-agents)
  (capabilities (receive (from supervisor-agent)))))")
                  .ok());
  const std::string worker = Spawn(worker_spec);
  WaitLog(worker, "ready");

  RunResult twin = Ctl({"agent", "spawn", worker_spec, "--as", admin_key_});
  EXPECT_NE(twin.exit_code, kExitOk) << twin;
  EXPECT_THAT(twin.err, HasSubstr(absl::StrCat("already has a live agent named \"worker-1\" (",
                                               worker, ")")));

  // Another principal's agent called supervisor-agent reaches nothing by name.
  const std::string stranger = NewKey("stranger");
  Trust(stranger, {"full"});
  PythonFile("impostor", R"(
t("send", lambda: a.send("worker-1", "task", b"evil"))
a.exit(0)
)");
  const std::string impostor_spec = absl::StrCat(root(), "/impostor.scm");
  ASSERT_TRUE(WriteFile(impostor_spec, R"((agent (purpose "i") (code-file "impostor.py")
  (name supervisor-agent) (capabilities (send (to "*")))))")
                  .ok());
  const std::string impostor = Spawn(impostor_spec, stranger);
  WaitLog(impostor, "send 5 no agent worker-1 that this agent may send to");

  PythonFile("supervisor", R"(
a.log("sent" if t("send", lambda: a.send("worker-1", "task", b"go")) is not None else "not sent")
a.exit(0)
)");
  const std::string supervisor_spec = absl::StrCat(root(), "/supervisor.scm");
  ASSERT_TRUE(WriteFile(supervisor_spec, R"((agent (purpose "s") (code-file "supervisor.py")
  (name supervisor-agent) (capabilities (send (to worker-agents)))))")
                  .ok());
  const std::string supervisor = Spawn(supervisor_spec);
  WaitLog(supervisor, "sent");
  WaitLog(worker, absl::StrCat("got ", supervisor, " task go"));
}

TEST_F(RfcSpecTest, InlineSchemeNeedsTheSchemeSandbox) {
  StartVault("v");
  RunResult r = Ctl({"agent", "spawn", Example("pattern1-periodic.scm"), "--as", admin_key_});
  EXPECT_NE(r.exit_code, kExitOk) << r;
  EXPECT_THAT(r.err, HasSubstr("scheme"));
}

}  // namespace
}  // namespace vault::integration
