// Agents end to end: real vaultd processes running Python agents (sdk/python) in their sandboxes,
// driven by the real vaultctl. Each agent logs one line per host call it tries,
// "<name> <code> <detail>" (code 0: ok, else the google.rpc.Code the vault answered), and the
// test reads them back with `vaultctl agent logs ID -o json`. Every wait polls with a deadline.
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "integration-tests/agent_fixture.h"
#include "integration-tests/harness.h"

namespace vault::integration {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

// ---------------------------------------------------------------------------------------------
// 1. Host calls, allowed and denied.

TEST_F(AgentTest, LogStateCheckpointAndExitWithResult) {
  ASSERT_NO_FATAL_FAILURE(StartVault("st"));
  if (IsSkipped()) return;
  std::string spec = Agent("stateful", R"(
a.log("hello from " + a.agent_id)
t("state", lambda: a.get_state().decode())
t("checkpoint", lambda: a.checkpoint(b"checkpoint one"))
t("state2", lambda: a.get_state().decode())
d = t("put", lambda: a.cas_put(b"the result bytes"))
a.exit(0, "all done", result=d)
)",
                           "(cas-write)");
  std::string id = Spawn(spec, "", std::string("initial state 42"));
  ASSERT_FALSE(id.empty());
  std::string status = WaitEnded(id);
  EXPECT_EQ(JsonField(status, "state"), "completed") << status;
  EXPECT_EQ(JsonField(status, "reason"), "all done");
  EXPECT_EQ(JsonField(status, "exit_code"), "0");
  EXPECT_EQ(JsonField(status, "result"), DigestText("the result bytes"));
  EXPECT_EQ(JsonField(status, "state_digest"), DigestText("checkpoint one"));
  EXPECT_EQ(JsonField(status, "checkpoints"), "1");
  EXPECT_EQ(JsonField(status, "denials"), "0");
  std::vector<std::string> logs = Logs(id);
  EXPECT_EQ(logs, (std::vector<std::string>{
                      "hello from " + id,
                      "state 0 initial state 42",
                      "checkpoint 0 " + DigestText("checkpoint one"),
                      "state2 0 checkpoint one",
                      "put 0 " + DigestText("the result bytes"),
                  }));
  // The result is in the vault's CAS with exactly those bytes.
  RunResult get = Ctl({"cas", "get", DigestText("the result bytes")});
  EXPECT_EQ(get.exit_code, kExitOk) << get;
  EXPECT_EQ(get.out, "the result bytes");
  // Without an initial state, get-state says there is none.
  std::string spec2 = Agent("stateless", R"(
t("state", lambda: repr(a.get_state()))
a.exit(3, "failing on purpose")
)",
                            "(cas-write)");
  std::string id2 = Spawn(spec2);
  ASSERT_FALSE(id2.empty());
  std::string status2 = WaitEnded(id2);
  EXPECT_EQ(JsonField(status2, "state"), "failed") << status2;
  EXPECT_EQ(JsonField(status2, "reason"), "failing on purpose");
  EXPECT_EQ(JsonField(status2, "exit_code"), "3");
  EXPECT_EQ(Results(id2)["state"], "0 None");
}

// An agent that simply ends, without the exit call, is judged by its exit code (regression: the
// channel closing first made every such agent "terminated: channel closed").
TEST_F(AgentTest, AnAgentThatJustEndsIsJudgedByItsExitCode) {
  ASSERT_NO_FATAL_FAILURE(StartVault("ends"));
  if (IsSkipped()) return;
  std::string done = Spawn(Agent("returns", R"(
t("bad_result", lambda: a.exit(0, "x", result="sha256:" + "ab" * 32 + "/5"))
)",
                                 ""));
  ASSERT_FALSE(done.empty());
  std::string st = WaitEnded(done);
  EXPECT_EQ(JsonField(st, "state"), "completed") << st;
  EXPECT_EQ(JsonField(st, "reason"), "exited with code 0") << st;
  // A result the CAS does not hold is refused, and the agent goes on.
  EXPECT_EQ(Results(done)["bad_result"], "5 the result names an object that is not in the CAS");
  std::string fails = Spawn(Agent("sysexit", R"(
import sys
sys.exit(3)
)",
                                  ""));
  ASSERT_FALSE(fails.empty());
  st = WaitEnded(fails);
  EXPECT_EQ(JsonField(st, "state"), "failed") << st;
  EXPECT_EQ(JsonField(st, "reason"), "exited with code 3") << st;
  EXPECT_EQ(JsonField(st, "exit_code"), "3") << st;
}

TEST_F(AgentTest, CasPutNeedsCasWriteAndCasGetNeedsAGrant) {
  ASSERT_NO_FATAL_FAILURE(StartVault("cas"));
  if (IsSkipped()) return;
  // An object the operator stored: no agent wrote it.
  ASSERT_TRUE(WriteFile(root() + "/obj", "operator's object").ok());
  RunResult put = Ctl({"cas", "put", root() + "/obj"});
  ASSERT_EQ(put.exit_code, kExitOk) << put;
  const std::string obj = DigestText("operator's object");
  const std::string state = absl::StrCat("{\"obj\": \"", obj, "\"}");
  const std::string body = R"(
st = json.loads(a.get_state())
d = t("put", lambda: a.cas_put(b"agent's own"))
if d:
    t("get_own", lambda: a.cas_get(d).decode())
t("get_other", lambda: a.cas_get(st["obj"]).decode())
a.exit(0)
)";
  // cas-write only: it may read back what it wrote, not the operator's object.
  std::string writer = Spawn(Agent("writer", body, "(cas-write)"), "", state);
  // cas-read only: the reverse.
  std::string reader = Spawn(Agent("reader", body, "(cas-read)"), "", state);
  ASSERT_FALSE(writer.empty());
  ASSERT_FALSE(reader.empty());
  EXPECT_EQ(JsonField(WaitEnded(writer), "state"), "completed");
  EXPECT_EQ(JsonField(WaitEnded(reader), "state"), "completed");

  std::map<std::string, std::string> w = Results(writer);
  EXPECT_EQ(w["put"], "0 " + DigestText("agent's own"));
  EXPECT_EQ(w["get_own"], "0 agent's own");
  EXPECT_EQ(w["get_other"], absl::StrCat("7 denied: cas_get needs the grant \"read sha256:",
                                         Hex(Sha256("operator's object")), "\""));
  std::map<std::string, std::string> r = Results(reader);
  EXPECT_EQ(r["put"], "7 denied: cas_put needs the grant \"cas-write\"");
  EXPECT_EQ(r.count("get_own"), 0u);
  EXPECT_EQ(r["get_other"], "0 operator's object");
  WaitAudit("host.cas_get", obj, "DENIED", writer);
  WaitAudit("host.cas_put", "", "DENIED", reader);
  EXPECT_EQ(JsonField(StatusJson(writer), "denials"), "1");
  EXPECT_EQ(JsonField(StatusJson(reader), "denials"), "1");
}

TEST_F(AgentTest, FilesOnlyUnderGrantedPaths) {
  ASSERT_NO_FATAL_FAILURE(StartVault("files"));
  if (IsSkipped()) return;
  std::filesystem::create_directories(files_dir() + "/pub/sub");
  std::filesystem::create_directories(files_dir() + "/secret");
  ASSERT_TRUE(WriteFile(files_dir() + "/pub/in.txt", "input data").ok());
  ASSERT_TRUE(WriteFile(files_dir() + "/secret/s.txt", "top secret").ok());
  std::string spec = Agent("files", R"(
t("read", lambda: a.read_file("/vault/pub/in.txt").decode())
t("read_range", lambda: a.read_file("/vault/pub/in.txt", offset=6, limit=3).decode())
t("write", lambda: a.write_file("/vault/pub/out/r.txt", b"written"))
t("append", lambda: a.write_file("/vault/pub/out/r.txt", b"+more", append=True))
t("list", lambda: json.dumps(a.list("/vault/pub"), sort_keys=True, separators=(",", ":")))
t("read_secret", lambda: a.read_file("/vault/secret/s.txt").decode())
t("list_secret", lambda: a.list("/vault/secret"))
t("write_outside", lambda: a.write_file("/vault/pub/x.txt", b"no"))
t("write_secret", lambda: a.write_file("/vault/secret/s.txt", b"overwritten"))
t("read_missing", lambda: a.read_file("/vault/pub/none.txt"))
a.exit(0)
)",
                           "(read (path \"/vault/pub\")) (write (path \"/vault/pub/out\"))");
  std::string id = Spawn(spec);
  ASSERT_FALSE(id.empty());
  std::string status = WaitEnded(id);
  EXPECT_EQ(JsonField(status, "state"), "completed") << status;
  std::map<std::string, std::string> r = Results(id);
  EXPECT_EQ(r["read"], "0 input data");
  EXPECT_EQ(r["read_range"], "0 dat");
  EXPECT_EQ(r["write"], "0 7");
  EXPECT_EQ(r["append"], "0 12");
  EXPECT_EQ(r["list"],
            "0 [{\"directory\":false,\"name\":\"in.txt\",\"size\":10},"
            "{\"directory\":true,\"name\":\"out\",\"size\":0},"
            "{\"directory\":true,\"name\":\"sub\",\"size\":0}]");
  EXPECT_EQ(r["read_secret"], "7 denied: read_file needs the grant \"read /vault/secret/s.txt\"");
  EXPECT_EQ(r["list_secret"], "7 denied: list needs the grant \"read /vault/secret\"");
  EXPECT_EQ(r["write_outside"], "7 denied: write_file needs the grant \"write /vault/pub/x.txt\"");
  EXPECT_EQ(r["write_secret"],
            "7 denied: write_file needs the grant \"write /vault/secret/s.txt\"");
  EXPECT_THAT(r["read_missing"], ::testing::StartsWith("5 "));
  // On disk: what it wrote where it may, nothing elsewhere.
  EXPECT_EQ(ReadFile(files_dir() + "/pub/out/r.txt").value_or("?"), "written+more");
  EXPECT_FALSE(std::filesystem::exists(files_dir() + "/pub/x.txt"));
  EXPECT_EQ(ReadFile(files_dir() + "/secret/s.txt").value_or("?"), "top secret");
  // Each denial is audited and counted.
  std::string entry = WaitAudit("host.read_file", "/vault/secret/s.txt", "DENIED", id);
  EXPECT_THAT(entry, HasSubstr("\"grant\":\"read /vault/secret/s.txt\""));
  WaitAudit("host.list", "/vault/secret", "DENIED", id);
  WaitAudit("host.write_file", "/vault/pub/x.txt", "DENIED", id);
  WaitAudit("host.read_file", "/vault/pub/in.txt", "ALLOWED", id);
  EXPECT_EQ(JsonField(StatusJson(id), "denials"), "4");
  RunResult tail = Ctl({"audit", "tail", "-n", "200"});
  EXPECT_THAT(tail.out, HasSubstr("host.read_file  denied  " + id + "  /vault/secret/s.txt"));
}

TEST_F(AgentTest, NetConnectOnlyToTheGrantedHostAndPort) {
  ASSERT_NO_FATAL_FAILURE(StartVault("net"));
  if (IsSkipped()) return;
  // The test's listener on loopback.
  int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(listener, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(listen(listener, 4), 0);
  socklen_t len = sizeof addr;
  ASSERT_EQ(getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const int port = ntohs(addr.sin_port);
  absl::StatusOr<int> other = FreeLoopbackPort();
  ASSERT_TRUE(other.ok());
  ASSERT_NE(*other, port);
  // The admin's ceiling (the "full" preset) has no network: a principal trusted for this port.
  std::string principal;
  std::string key = NewKey("net", &principal);
  ASSERT_NO_FATAL_FAILURE(Trust(key, {absl::StrCat("network:127.0.0.1:", port)}));

  std::mt19937_64 rng(Seed());
  const std::string payload = RandomBytes(rng, 3000) + std::string("\0end", 4);
  std::string spec = Agent("net", R"(
st = json.loads(a.get_state())
try:
    s = a.net_connect("127.0.0.1", st["port"])
    a.log("connect 0 %s:%d" % s.getpeername())
    s.sendall(bytes.fromhex(st["payload"]))
    s.close()
except vault_agent.HostError as e:
    a.log("connect %d %s" % (e.code, e.message))
t("connect_other", lambda: a.net_connect("127.0.0.1", st["other"]))
t("connect_name", lambda: a.net_connect("localhost", st["port"]))
a.exit(0)
)",
                           absl::StrCat("(network (host \"127.0.0.1\") (port ", port, "))"));
  std::string id = Spawn(spec, key,
                         absl::StrCat("{\"port\": ", port, ", \"other\": ", *other,
                                      ", \"payload\": \"", Hex(payload), "\"}"));
  ASSERT_FALSE(id.empty());

  // The bytes the agent sent through the passed socket arrive exactly.
  pollfd p{listener, POLLIN, 0};
  ASSERT_EQ(poll(&p, 1, 20000), 1) << "no connection came";
  int conn = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
  ASSERT_GE(conn, 0);
  std::string received;
  absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (absl::Now() < deadline) {
    pollfd c{conn, POLLIN, 0};
    if (poll(&c, 1, 1000) != 1) continue;
    char buf[4096];
    ssize_t n = read(conn, buf, sizeof buf);
    if (n <= 0) break;
    received.append(buf, static_cast<size_t>(n));
  }
  close(conn);
  EXPECT_EQ(received.size(), payload.size());
  EXPECT_TRUE(received == payload) << "the bytes differ";

  std::string status = WaitEnded(id);
  EXPECT_EQ(JsonField(status, "state"), "completed") << status;
  std::map<std::string, std::string> r = Results(id);
  EXPECT_EQ(r["connect"], absl::StrCat("0 127.0.0.1:", port));
  EXPECT_EQ(
      r["connect_other"],
      absl::StrCat("7 denied: net_connect needs the grant \"network 127.0.0.1:", *other, "\""));
  EXPECT_EQ(r["connect_name"],
            absl::StrCat("7 denied: net_connect needs the grant \"network localhost:", port, "\""));
  WaitAudit("host.net_connect", absl::StrCat("127.0.0.1:", port), "ALLOWED", id);
  WaitAudit("host.net_connect", absl::StrCat("127.0.0.1:", *other), "DENIED", id);
  // Nothing else reached the listener.
  pollfd again{listener, POLLIN, 0};
  EXPECT_EQ(poll(&again, 1, 0), 0);
  close(listener);
}

TEST_F(AgentTest, SelfInspectListsExactlyItsGrants) {
  ASSERT_NO_FATAL_FAILURE(StartVault("inspect"));
  if (IsSkipped()) return;
  std::string principal;
  std::string key = NewKey("p", &principal);
  ASSERT_NO_FATAL_FAILURE(Trust(key, {"read-write"}));
  std::string spec = Agent("inspect", R"(
i = a.self_inspect()
a.log("grants " + json.dumps(sorted(i["grants"])))
for f in ("agent_id", "vault", "principal", "parent", "purpose", "hop", "incarnation"):
    a.log("%s %s" % (f, i[f]))
a.log("constraints " + json.dumps(i["constraints"], sort_keys=True))
a.exit(0)
)",
                           "(read (path \"/vault/pub\")) (write (path \"/vault/pub/out\")) "
                           "(cas-write) (send (agent \"*\")) (receive (from \"*\"))",
                           "(max-runtime 30) (max-memory (* 200 1024 1024))");
  std::string id = Spawn(spec, key);
  ASSERT_FALSE(id.empty());
  std::string status = WaitEnded(id);
  EXPECT_EQ(JsonField(status, "state"), "completed") << status;
  std::map<std::string, std::string> r = Results(id);
  EXPECT_EQ(r["grants"],
            "[\"cas-write\", \"read /vault/pub\", \"receive *\", \"send *\", "
            "\"write /vault/pub/out\"]");
  EXPECT_EQ(r["agent_id"], id);
  EXPECT_EQ(r["vault"], "inspect");
  EXPECT_EQ(r["principal"], principal);
  EXPECT_EQ(r["parent"], "");
  EXPECT_EQ(r["purpose"], "inspect");
  EXPECT_EQ(r["hop"], "0");
  EXPECT_EQ(r["incarnation"], "1");
  EXPECT_EQ(r["constraints"], "{\"max_memory_bytes\": 209715200, \"max_runtime_ms\": 30000}");
  EXPECT_THAT(status, HasSubstr("\"principal\":\"" + principal + "\""));
}

// ---------------------------------------------------------------------------------------------
// 2. Paths that leave the tree.

TEST_F(AgentTest, PathEscapesAreRefused) {
  ASSERT_NO_FATAL_FAILURE(StartVault("paths"));
  if (IsSkipped()) return;
  std::filesystem::create_directories(files_dir() + "/pub");
  std::filesystem::create_directories(root() + "/outside");
  ASSERT_TRUE(WriteFile(files_dir() + "/pub/ok.txt", "fine").ok());
  // Links planted in the vault's files directory by someone with host access.
  std::filesystem::create_symlink("/etc", files_dir() + "/pub/link");
  std::filesystem::create_symlink(root() + "/outside", files_dir() + "/pub/wlink");
  std::string spec = Agent("paths", R"(
t("ok", lambda: a.read_file("/vault/pub/ok.txt").decode())
t("dotdot", lambda: a.read_file("/vault/pub/../x"))
t("dslash", lambda: a.read_file("/vault//x"))
t("dot", lambda: a.read_file("/vault/pub/./ok.txt"))
t("trailing", lambda: a.read_file("/vault/pub/"))
t("vaultx", lambda: a.read_file("/vaultx"))
t("link", lambda: a.read_file("/vault/pub/link/passwd"))
t("link_self", lambda: a.read_file("/vault/pub/link"))
t("link_list", lambda: a.list("/vault/pub/link"))
t("wlink", lambda: a.write_file("/vault/pub/wlink/planted", b"escaped"))
t("wlink_append", lambda: a.write_file("/vault/pub/wlink", b"escaped", append=True))
t("list", lambda: json.dumps([e["name"] for e in a.list("/vault/pub")]))
a.exit(0)
)",
                           "(read (path \"/vault/pub\")) (write (path \"/vault/pub\"))");
  std::string id = Spawn(spec);
  ASSERT_FALSE(id.empty());
  std::string status = WaitEnded(id);
  EXPECT_EQ(JsonField(status, "state"), "completed") << status;
  std::map<std::string, std::string> r = Results(id);
  EXPECT_EQ(r["ok"], "0 fine");
  EXPECT_EQ(r["dotdot"],
            "3 grant read /vault/pub/../x: path \"/vault/pub/../x\" has a \"..\" segment");
  EXPECT_EQ(r["dslash"], "3 grant read /vault//x: path \"/vault//x\" has an empty segment");
  EXPECT_THAT(r["dot"], ::testing::StartsWith("3 "));
  EXPECT_THAT(r["trailing"], ::testing::StartsWith("3 "));
  // "/vaultx" is not in the vault's tree: a malformed call (3), not a denial (regression: 7).
  EXPECT_EQ(r["vaultx"], "3 path \"/vaultx\" is not in the vault's tree (/vault/...)");
  // Symlinks are never followed, whatever they point to.
  EXPECT_EQ(r["link"],
            "7 /vault/pub/link/passwd: a symbolic link is on the path, and links are not followed");
  EXPECT_THAT(r["link_self"], ::testing::StartsWith("7 "));
  EXPECT_THAT(r["link_list"], ::testing::StartsWith("7 "));
  EXPECT_THAT(r["wlink"], ::testing::StartsWith("7 "));
  EXPECT_THAT(r["wlink_append"], ::testing::StartsWith("7 "));
  EXPECT_EQ(r["list"], "0 [\"ok.txt\"]");  // links are left out of listings
  for (const std::string& line : Logs(id)) EXPECT_THAT(line, Not(HasSubstr("root:")));
  EXPECT_TRUE(std::filesystem::is_empty(root() + "/outside"));
  WaitAudit("host.read_file", "/vault/pub/link/passwd", "DENIED", id);
}

// ---------------------------------------------------------------------------------------------
// 3. A child never gets more than its parent.

TEST_F(AgentTest, ChildGrantsAreNarrowedToTheParents) {
  ASSERT_NO_FATAL_FAILURE(StartVault("child"));
  if (IsSkipped()) return;
  // One program for parent and child: a child (it has a parent) reports and exits.
  const std::string body = R"(
i = a.self_inspect()
if i["parent"]:
    a.log("child_grants " + json.dumps(i["grants"]))
    a.exit(0, "child done")
st = json.loads(a.get_state())
def spawn(grants):
    r = a.spawn_child({"purpose": "child", "code": st["code"], "grants": grants})
    return json.dumps(r, sort_keys=True, separators=(",", ":"))
t("wide", lambda: spawn(["read:/vault", "write:/vault"]))
t("within", lambda: spawn(["read:/vault/pub/sub"]))
a.exit(0, "parent done")
)";
  std::string spec = Agent("parent", body, "(read (path \"/vault/pub\")) (spawn)");
  const std::string state = absl::StrCat("{\"code\": \"", DigestText(code("parent")), "\"}");
  std::string parent = Spawn(spec, "", state);
  ASSERT_FALSE(parent.empty());
  EXPECT_EQ(JsonField(WaitEnded(parent), "state"), "completed");
  std::map<std::string, std::string> r = Results(parent);
  ASSERT_THAT(r["wide"], ::testing::StartsWith("0 ")) << r["wide"];
  ASSERT_THAT(r["within"], ::testing::StartsWith("0 ")) << r["within"];
  std::string wide = JsonField(r["wide"], "agent_id").value_or("");
  std::string within = JsonField(r["within"], "agent_id").value_or("");
  EXPECT_THAT(r["wide"], HasSubstr("\"grants\":[\"read /vault/pub\"]"));
  EXPECT_EQ(JsonField(r["wide"], "narrowed"), "true");
  EXPECT_THAT(r["within"], HasSubstr("\"grants\":[\"read /vault/pub/sub\"]"));
  EXPECT_EQ(JsonField(r["within"], "narrowed"), "false");

  // The children's records and their own view agree.
  std::string ws = WaitEnded(wide);
  EXPECT_EQ(JsonField(ws, "state"), "completed") << ws;
  EXPECT_EQ(JsonField(ws, "parent"), parent);
  EXPECT_THAT(ws, HasSubstr("\"grants\":[\"read /vault/pub\"]"));
  EXPECT_EQ(Results(wide)["child_grants"], "[\"read /vault/pub\"]");
  std::string is = WaitEnded(within);
  EXPECT_EQ(JsonField(is, "parent"), parent);
  EXPECT_EQ(Results(within)["child_grants"], "[\"read /vault/pub/sub\"]");

  // The narrowing is audited (and only for the child that asked for more).
  std::string entry = WaitAudit("agent.spawn.narrowed", wide, "ALLOWED", parent);
  EXPECT_EQ(JsonField(entry, "priority"), "HIGH");
  RunResult tail = Ctl({"-o", "json", "audit", "tail", "-n", "2000"});
  EXPECT_THAT(tail.out,
              Not(HasSubstr("\"action\":\"agent.spawn.narrowed\",\"subject\":\"" + within + "\"")));

  // Without spawn: refused.
  std::string nospawn = Spawn(Agent("nospawn", body, "(read (path \"/vault/pub\"))"), "",
                              absl::StrCat("{\"code\": \"", DigestText(code("nospawn")), "\"}"));
  ASSERT_FALSE(nospawn.empty());
  EXPECT_EQ(JsonField(WaitEnded(nospawn), "state"), "completed");
  std::map<std::string, std::string> n = Results(nospawn);
  EXPECT_EQ(n["wide"], "7 denied: spawn_child needs the grant \"spawn\"");
  EXPECT_EQ(n["within"], "7 denied: spawn_child needs the grant \"spawn\"");
  WaitAudit("host.spawn_child", "", "DENIED", nospawn);
}

// ---------------------------------------------------------------------------------------------
// 4. Messages between agents.

TEST_F(AgentTest, MessagesBetweenAgents) {
  ASSERT_NO_FATAL_FAILURE(StartVault("msg", "  mailbox_capacity: 2\n"));
  if (IsSkipped()) return;
  std::string other_key = NewKey("other");
  ASSERT_NO_FATAL_FAILURE(Trust(other_key, {"read-write"}));
  std::filesystem::create_directories(files_dir() + "/pub");
  // Receivers wait for the test's go file before they drain their mailboxes.
  const std::string receiver = kReceiverBody;
  std::string b =
      Spawn(Agent("b", receiver, "(read (path \"/vault/pub\")) (receive (from \"*\"))"));
  std::string c = Spawn(Agent("c", receiver, "(read (path \"/vault/pub\"))"));
  std::string d =
      Spawn(Agent("d", receiver, "(read (path \"/vault/pub\")) (receive (from \"*\"))"), other_key);
  ASSERT_FALSE(b.empty());
  ASSERT_FALSE(c.empty());
  ASSERT_FALSE(d.empty());
  WaitLog(b, "ready");
  WaitLog(c, "ready");
  WaitLog(d, "ready");

  std::string s =
      Spawn(Agent("s", R"(
st = json.loads(a.get_state())
t("send0", lambda: a.send(st["b"], "greeting", b"m0\x00\xff"))
t("send1", lambda: a.send(st["b"], "greeting", b"m1"))
t("send2", lambda: a.send(st["b"], "greeting", b"m2"))
t("nogrant", lambda: a.send(st["c"], "greeting", b"x"))
t("other", lambda: a.send(st["d"], "greeting", b"x"))
t("missing", lambda: a.send("a-0123456789abcdef", "greeting", b"x"))
t("reserved", lambda: a.send(st["b"], "vault.query", b"x"))
a.exit(0)
)",
                  "(send (agent \"*\"))"),
            "", absl::StrCat("{\"b\": \"", b, "\", \"c\": \"", c, "\", \"d\": \"", d, "\"}"));
  ASSERT_FALSE(s.empty());
  EXPECT_EQ(JsonField(WaitEnded(s), "state"), "completed");
  std::map<std::string, std::string> r = Results(s);
  ASSERT_THAT(r["send0"], ::testing::StartsWith("0 ")) << r["send0"];
  ASSERT_THAT(r["send1"], ::testing::StartsWith("0 ")) << r["send1"];
  const std::string id0 = r["send0"].substr(2), id1 = r["send1"].substr(2);
  EXPECT_NE(id0, id1);
  // The mailbox holds agents.mailbox_capacity (2) messages.
  EXPECT_EQ(r["send2"], "8 the mailbox of agent " + b + " is full (2 messages): try again later");
  EXPECT_EQ(r["nogrant"], "7 denied: agent " + c + " does not accept \"greeting\" messages from " +
                              s + " (it has no receive grant for it)");
  // Another principal's agent is as if it did not exist.
  EXPECT_EQ(r["other"], "5 no agent " + d + " that this agent may send to");
  EXPECT_EQ(r["missing"], "5 no agent a-0123456789abcdef that this agent may send to");
  EXPECT_EQ(r["reserved"], "3 message type \"vault.query\" is reserved for the vault");
  EXPECT_EQ(JsonField(StatusJson(b), "mailbox_depth"), "2");

  ASSERT_TRUE(WriteFile(files_dir() + "/pub/go", "go").ok());
  for (const std::string& id : {b, c, d}) EXPECT_EQ(JsonField(WaitEnded(id), "state"), "completed");
  // The exact bytes, from the sender's id as the vault saw it.
  std::vector<std::string> got = Logs(b);
  EXPECT_EQ(got,
            (std::vector<std::string>{
                "ready",
                absl::StrCat("recv ", id0, " ", s, " greeting ", Hex(std::string("m0\0\xff", 4))),
                absl::StrCat("recv ", id1, " ", s, " greeting ", Hex("m1")),
                "received 2",
            }));
  EXPECT_EQ(Logs(c), (std::vector<std::string>{"ready", "received 0"}));
  EXPECT_EQ(Logs(d), (std::vector<std::string>{"ready", "received 0"}));
  std::string ss = StatusJson(s);
  EXPECT_EQ(JsonField(ss, "messages_sent"), "2");
  EXPECT_EQ(JsonField(ss, "denials"), "1");
  WaitAudit("host.send", c, "DENIED", s);
}

// A send grant that lists message types allows those and refuses the others, before anything
// reaches the receiver.
TEST_F(AgentTest, SendGrantLimitsMessageTypes) {
  ASSERT_NO_FATAL_FAILURE(StartVault("sendtypes"));
  if (IsSkipped()) return;
  std::filesystem::create_directories(files_dir() + "/pub");
  std::string b =
      Spawn(Agent("b", kReceiverBody, "(read (path \"/vault/pub\")) (receive (from \"*\"))"));
  ASSERT_FALSE(b.empty());
  WaitLog(b, "ready");
  std::string s = Spawn(Agent("s", R"(
st = json.loads(a.get_state())
t("grants", lambda: json.dumps(a.self_inspect()["grants"]))
t("ping", lambda: a.send(st["b"], "ping", b"p"))
t("stop", lambda: a.send(st["b"], "stop", b"s"))
a.exit(0)
)",
                              absl::StrCat("(send (agent \"", b, "\") (types ping))")),
                        "", absl::StrCat("{\"b\": \"", b, "\"}"));
  ASSERT_FALSE(s.empty());
  EXPECT_EQ(JsonField(WaitEnded(s), "state"), "completed");
  std::map<std::string, std::string> r = Results(s);
  EXPECT_EQ(r["grants"], absl::StrCat("0 [\"send ", b, " types=ping\"]"));
  ASSERT_THAT(r["ping"], ::testing::StartsWith("0 ")) << r["ping"];
  const std::string ping_id = r["ping"].substr(2);
  // 7: PERMISSION_DENIED, naming the type that was refused.
  EXPECT_EQ(r["stop"], absl::StrCat("7 denied: send needs the grant \"send ", b, " types=stop\""));

  ASSERT_TRUE(WriteFile(files_dir() + "/pub/go", "go").ok());
  EXPECT_EQ(JsonField(WaitEnded(b), "state"), "completed");
  EXPECT_EQ(Logs(b), (std::vector<std::string>{
                         "ready",
                         absl::StrCat("recv ", ping_id, " ", s, " ping ", Hex("p")),
                         "received 1",
                     }));
  std::string ss = StatusJson(s);
  EXPECT_EQ(JsonField(ss, "messages_sent"), "1");
  EXPECT_EQ(JsonField(ss, "denials"), "1");
  std::string denied = WaitAudit("host.send", b, "DENIED", s);
  EXPECT_THAT(denied, HasSubstr(absl::StrCat("send ", b, " types=stop")));
}

// A receive grant that lists message types accepts those from an allowed sender and refuses the
// others, even when the sender may send anything.
TEST_F(AgentTest, ReceiveGrantLimitsMessageTypes) {
  ASSERT_NO_FATAL_FAILURE(StartVault("recvtypes"));
  if (IsSkipped()) return;
  std::filesystem::create_directories(files_dir() + "/pub");
  std::string b = Spawn(Agent("b", kReceiverBody,
                              "(read (path \"/vault/pub\")) (receive (from \"*\") (types ping))"));
  ASSERT_FALSE(b.empty());
  WaitLog(b, "ready");
  std::string s = Spawn(Agent("s", R"(
st = json.loads(a.get_state())
t("ping", lambda: a.send(st["b"], "ping", b"p"))
t("stop", lambda: a.send(st["b"], "stop", b"s"))
a.exit(0)
)",
                              "(send (agent \"*\"))"),
                        "", absl::StrCat("{\"b\": \"", b, "\"}"));
  ASSERT_FALSE(s.empty());
  EXPECT_EQ(JsonField(WaitEnded(s), "state"), "completed");
  std::map<std::string, std::string> r = Results(s);
  ASSERT_THAT(r["ping"], ::testing::StartsWith("0 ")) << r["ping"];
  const std::string ping_id = r["ping"].substr(2);
  EXPECT_EQ(r["stop"],
            absl::StrCat("7 denied: agent ", b, " does not accept \"stop\" messages from ", s,
                         " (it has no receive grant for it)"));

  ASSERT_TRUE(WriteFile(files_dir() + "/pub/go", "go").ok());
  EXPECT_EQ(JsonField(WaitEnded(b), "state"), "completed");
  EXPECT_EQ(Logs(b), (std::vector<std::string>{
                         "ready",
                         absl::StrCat("recv ", ping_id, " ", s, " ping ", Hex("p")),
                         "received 1",
                     }));
  EXPECT_EQ(JsonField(StatusJson(s), "messages_sent"), "1");
  WaitAudit("host.send", b, "DENIED", s);
}

// ---------------------------------------------------------------------------------------------
// 5. The operator talks to an agent.

TEST_F(AgentTest, OperatorQueryAndStop) {
  ASSERT_NO_FATAL_FAILURE(StartVault("query"));
  if (IsSkipped()) return;
  std::string id = Spawn(Agent("reactive", kReactiveBody, "(receive (from \"*\"))"));
  ASSERT_FALSE(id.empty());
  WaitLog(id, "ready");
  RunResult q = Ctl({"agent", "query", id, "how many?"});
  EXPECT_EQ(q.exit_code, kExitOk) << q;
  EXPECT_EQ(q.out, "answer:?ynam woh");
  RunResult j = Ctl({"-o", "json", "agent", "query", id, "abc"});
  EXPECT_EQ(j.exit_code, kExitOk) << j;
  EXPECT_EQ(Trim(j.out), "{\"type\":\"vault.answer\",\"answer\":\"answer:cba\"}");
  EXPECT_EQ(State(id), "running");
  // Its two answers are messages it sent, as the two queries were messages it received.
  const std::string counted = StatusJson(id);
  EXPECT_EQ(JsonField(counted, "messages_sent"), "2") << counted;
  EXPECT_EQ(JsonField(counted, "messages_received"), "2") << counted;

  RunResult stop = Ctl({"agent", "send", id, "--type", "stop"});
  EXPECT_EQ(stop.exit_code, kExitOk) << stop;
  std::string status = WaitEnded(id);
  EXPECT_EQ(JsonField(status, "state"), "completed") << status;
  EXPECT_EQ(JsonField(status, "reason"), "stopped by operator");
  EXPECT_EQ(JsonField(status, "exit_code"), "0");
  // An ended agent answers no more queries.
  RunResult late = Ctl({"agent", "query", id, "still there?"});
  EXPECT_NE(late.exit_code, kExitOk) << late;
  EXPECT_THAT(late.err, HasSubstr("has ended"));
}

// Code the kernel cannot execute (a Python script without its "#!" line) is refused at spawn with
// what makes it executable.
TEST_F(AgentTest, CodeWithoutAnInterpreterLineIsRefusedWithTheFix) {
  ASSERT_NO_FATAL_FAILURE(StartVault("noexec"));
  if (IsSkipped()) return;
  ASSERT_TRUE(WriteFile(root() + "/plain.py", "print('no interpreter line')\n").ok());
  const std::string spec = root() + "/plain.scm";
  ASSERT_TRUE(WriteFile(spec, "(agent (purpose \"plain\") (code-file \"plain.py\"))\n").ok());
  RunResult r = Ctl({"agent", "spawn", spec, "--as", admin_key_});
  EXPECT_NE(r.exit_code, kExitOk) << r;
  EXPECT_THAT(r.err, HasSubstr("Exec format error: it is neither a program for this machine nor "
                               "a script whose first line names its interpreter (a Python agent "
                               "starts with \"#!/usr/bin/env python3\""))
      << r;
}

// An idle agent's empty receives are counted, not written one entry each: the receive that gets
// a message carries how many came before it, and the agent's end how many came after.
TEST_F(AgentTest, EmptyReceivesAreCountedNotAuditedOneByOne) {
  ASSERT_NO_FATAL_FAILURE(StartVault("idle"));
  if (IsSkipped()) return;
  std::string id = Spawn(Agent("idle", R"(
for _ in range(20):
    a.receive(timeout=0)
for _ in range(3):
    a.receive(timeout=0.05)
a.log("polled")
m = a.receive(timeout=30)
a.log("got " + m.type)
for _ in range(5):
    a.receive(timeout=0)
a.exit(0)
)",
                               "(receive (from \"*\"))"));
  ASSERT_FALSE(id.empty());
  WaitLog(id, "polled");
  RunResult sent = Ctl({"agent", "send", id, "--type", "wake"});
  ASSERT_EQ(sent.exit_code, kExitOk) << sent;
  EXPECT_EQ(JsonField(WaitEnded(id), "state"), "completed");
  std::string got = WaitAudit("host.receive", "operator", "ALLOWED", id);
  EXPECT_EQ(JsonField(got, "empty_receives"), "23") << got;
  RunResult tail = Ctl({"-o", "json", "audit", "tail", "-n", "2000"});
  ASSERT_EQ(tail.exit_code, kExitOk) << tail;
  int receives = 0;
  std::string ended;
  for (absl::string_view line : absl::StrSplit(tail.out, '\n', absl::SkipEmpty())) {
    if (JsonField(line, "action") == "host.receive" && JsonField(line, "actor") == id) ++receives;
    if (JsonField(line, "action") == "agent.completed" && JsonField(line, "subject") == id) {
      ended = std::string(line);
    }
  }
  EXPECT_EQ(receives, 1) << tail.out;  // 29 receives, one with a message
  EXPECT_EQ(JsonField(ended, "empty_receives"), "5") << ended;
}

// ---------------------------------------------------------------------------------------------
// 6. pause / resume / terminate need the spawning principal or an administrator.

TEST_F(AgentTest, ControlNeedsAuthority) {
  ASSERT_NO_FATAL_FAILURE(StartVault("control"));
  if (IsSkipped()) return;
  std::string owner = NewKey("owner");
  ASSERT_NO_FATAL_FAILURE(Trust(owner, {"read-write"}));
  std::string stranger_id;
  std::string stranger = NewKey("stranger", &stranger_id);  // not trusted at all
  std::string peer = NewKey("peer");  // trusted, but another principal and no admin
  ASSERT_NO_FATAL_FAILURE(Trust(peer, {"read-write"}));
  std::string id = Spawn(Agent("controlled", kReactiveBody, "(receive (from \"*\"))"), owner);
  ASSERT_FALSE(id.empty());
  WaitLog(id, "ready");

  auto refused = [&](const std::string& action, const std::string& key, const std::string& state) {
    RunResult r = Ctl({"agent", action, id, "--as", key, "--reason", "not mine"});
    EXPECT_EQ(r.exit_code, kExitRefused) << action << " " << r;
    EXPECT_THAT(r.err, HasSubstr("may not control agent " + id +
                                 " (only its spawning principal or an administrator of control "
                                 "may)"))
        << r;
    EXPECT_EQ(State(id), state) << "after a refused " << action;
  };
  for (const std::string& key : {stranger, peer}) {
    refused("pause", key, "running");
    refused("terminate", key, "running");
  }
  // The administrator.
  RunResult pause = Ctl({"agent", "pause", id, "--as", admin_key_, "--reason", "inspection"});
  EXPECT_EQ(pause.exit_code, kExitOk) << pause;
  EXPECT_EQ(pause.out, "paused\n");
  std::string paused = StatusJson(id);
  EXPECT_EQ(JsonField(paused, "state"), "paused");
  EXPECT_EQ(JsonField(paused, "reason"), "inspection");
  refused("resume", stranger, "paused");
  refused("resume", peer, "paused");
  RunResult resume = Ctl({"agent", "resume", id, "--as", admin_key_});
  EXPECT_EQ(resume.exit_code, kExitOk) << resume;
  EXPECT_EQ(resume.out, "running\n");
  EXPECT_EQ(State(id), "running");
  // The spawning principal may too.
  RunResult own_pause = Ctl({"agent", "pause", id, "--as", owner});
  EXPECT_EQ(own_pause.exit_code, kExitOk) << own_pause;
  EXPECT_EQ(State(id), "paused");
  RunResult own_resume = Ctl({"agent", "resume", id, "--as", owner});
  EXPECT_EQ(own_resume.exit_code, kExitOk) << own_resume;
  EXPECT_EQ(State(id), "running");
  // The agent still works after being thawed.
  RunResult q = Ctl({"agent", "query", id, "ok?"});
  EXPECT_EQ(q.out, "answer:?ko") << q;

  RunResult term = Ctl({"agent", "terminate", id, "--as", admin_key_, "--reason", "test over"});
  EXPECT_EQ(term.exit_code, kExitOk) << term;
  EXPECT_EQ(term.out, "terminated\n");
  std::string status = StatusJson(id);
  EXPECT_EQ(JsonField(status, "state"), "terminated");
  // The recorded reason is the --reason text, prefixed by the vault.
  EXPECT_EQ(JsonField(status, "reason"), "terminated: test over");
  WaitAudit("agent.control", id, "DENIED", stranger_id);
}

}  // namespace
}  // namespace vault::integration
