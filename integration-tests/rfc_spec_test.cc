// The RFC's specs on a real vault (docs/spec.md): its daemon example spawned as written, names and
// groups addressing messages, a purpose the vault fills in, and what the vault checks rather than
// trusts (a requested id, spawned-by, fuel where nothing counts it).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "integration-tests/agent_fixture.h"
#include "integration-tests/harness.h"

namespace vault::integration {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

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
  EXPECT_THAT(
      r.out,
      HasSubstr(
          R"("grants":["read https://arxiv.org:443/rss/*","write /vault/papers","network arxiv.org:*","network doi.org:*"])"));
  EXPECT_THAT(r.out, HasSubstr(R"("max_runtime_ms":86400000)"));
  WaitLog("agent-2026-001", "hello");

  // The id is the spec's, so a second spawn of the same spec is refused.
  RunResult again = Ctl(
      {"agent", "spawn", spec, "--code", code, "--bind", "user-principal=" + user, "--as", user});
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
  ASSERT_TRUE(WriteFile(spec,
                        "(agent (purpose \"p\") (code-file \"fuel.py\") "
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

// http_get: the vault fetches for the agent under url grants, from a loopback server
// (integration-tests/http_server.py) over HTTP and over HTTPS with a test CA the vault trusts.
class HttpGetTest : public RfcSpecTest {
 protected:
  void SetUp() override {
    RfcSpecTest::SetUp();
    dir_ = absl::StrCat(root(), "/http");
    ASSERT_EQ(mkdir(dir_.c_str(), 0700), 0);
    absl::StatusOr<std::unique_ptr<ChildProcess>> server = ChildProcess::Spawn(
        {"/usr/bin/python3", VAULT_IT_HTTP_SERVER, dir_}, absl::StrCat(dir_, "/server.log"));
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    absl::StatusOr<std::string> ports;
    while (!(ports = ReadFile(dir_ + "/ports")).ok() && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(20));
    }
    ASSERT_TRUE(ports.ok()) << "the HTTP server did not start: " << ports.status();
    std::vector<std::string> p = absl::StrSplit(Trim(*ports), ' ');
    ASSERT_EQ(p.size(), 2u);
    http_ = absl::StrCat("http://127.0.0.1:", p[0]);
    https_ = absl::StrCat("https://127.0.0.1:", p[1]);
  }
  void TearDown() override {
    if (server_ != nullptr) unlink((dir_ + "/ports").c_str());  // the server's cue to stop
    server_.reset();
    RfcSpecTest::TearDown();
  }
  std::string dir_, http_, https_;
  std::unique_ptr<ChildProcess> server_;
};

TEST_F(HttpGetTest, FetchesWhatTheGrantsCoverAndNothingElse) {
  StartVault("v", absl::StrCat("  http_ca_file: \"", dir_, "/ca.pem\"\n"));
  const std::string body = absl::StrCat(R"(
def get(name, url, **kw):
    t(name, lambda: a.http_get(url, **kw))
H = ")",
                                        http_, R"("
S = ")",
                                        https_, R"("
get("feed", H + "/rss/feed")
get("tls", S + "/rss/feed")
get("here", H + "/rss/here")
get("away", H + "/rss/away")
get("private", H + "/private")
get("loop", H + "/rss/loop")
get("big", H + "/rss/big", max_bytes=1000)
get("slow", H + "/rss/slow", timeout=0.5)
get("star", H + "/rss/*")
get("echo", H + "/echo", method="POST", body=b"hello", content_type="text/plain")
get("echo-get", H + "/echo")
a.log("done")
a.exit(0)
)");
  const std::string grants = absl::StrCat("(read (url \"", http_, "/rss/*\")) (read \"", https_,
                                          "/rss/*\") (write (url \"", http_, "/echo\"))");
  // URL grants are above every preset: the operator names them.
  const std::string key = NewKey("fetcher");
  Trust(key, {absl::StrCat("(capabilities ", grants, ")")});
  const std::string id = Spawn(Agent("fetcher", body, grants), key);
  WaitLog(id, "done", absl::Seconds(30));
  std::map<std::string, std::string> r = Results(id);
  auto canonical = [](const std::string& base, const std::string& path) {
    return absl::StrCat(base, path);
  };
  EXPECT_EQ(r["feed"],
            "0 HttpResponse(status=200, content_type='text/plain', body=b'papers', "
            "url='" +
                canonical(http_, "/rss/feed") + "')");
  EXPECT_EQ(r["tls"],
            "0 HttpResponse(status=200, content_type='text/plain', body=b'papers', "
            "url='" +
                canonical(https_, "/rss/feed") + "')");
  EXPECT_EQ(r["here"],
            "0 HttpResponse(status=200, content_type='text/plain', body=b'papers', "
            "url='" +
                canonical(http_, "/rss/feed") + "')");
  EXPECT_EQ(r["away"], absl::StrCat("7 denied: ", http_, "/rss/away redirects to ", http_,
                                    "/private, which no url grant of this agent covers"));
  EXPECT_EQ(r["private"],
            absl::StrCat("7 denied: http_get needs the grant \"read ", http_, "/private\""));
  EXPECT_EQ(r["loop"], absl::StrCat("9 http_get ", http_, "/rss/loop: more than 5 redirects"));
  EXPECT_EQ(r["big"],
            absl::StrCat("8 http_get ", http_, "/rss/big: the response is larger than 1000 bytes"));
  EXPECT_EQ(r["slow"], absl::StrCat("4 http_get ", http_, "/rss/slow: no answer within 500 ms"));
  EXPECT_EQ(r["star"], absl::StrCat("3 URL \"", http_, "/rss/*\" contains '*'"));
  EXPECT_EQ(r["echo"],
            "0 HttpResponse(status=200, content_type='text/plain', body=b'hello', "
            "url='" +
                canonical(http_, "/echo") + "')");
  EXPECT_EQ(r["echo-get"],
            absl::StrCat("7 denied: http_get needs the grant \"read ", http_, "/echo\""));
  // Audited with the URL and the body's SHA-256.
  std::string entry = WaitAudit("host.http_get", canonical(http_, "/rss/feed"), "ALLOWED", id);
  EXPECT_THAT(entry, HasSubstr(Hex(Sha256("papers"))));
  WaitAudit("host.http_get", canonical(http_, "/private"), "DENIED", id);
}

// Scheme agents (sandbox/scheme/): inline code runs in Guile inside the posix sandbox.
class SchemeAgentTest : public RfcSpecTest {
 protected:
  // Spawns `(spawn-agent (purpose NAME) (code 'CODE) REST)`; returns its id.
  std::string SpawnScheme(const std::string& name, const std::string& code,
                          const std::string& rest = "") {
    const std::string spec = absl::StrCat(root(), "/", name, ".scm");
    EXPECT_TRUE(WriteFile(spec, absl::StrCat("(spawn-agent (purpose \"", name, "\")\n  (code '",
                                             code, ")\n  ", rest, ")\n"))
                    .ok());
    return Spawn(spec);
  }
  // The agent's end: "<state> <reason>".
  std::string End(const std::string& id) {
    std::string status = WaitState(id, {"completed", "failed", "terminated"});
    return absl::StrCat(JsonField(status, "state").value_or("?"), " ",
                        JsonField(status, "reason").value_or("?"));
  }
};

TEST_F(SchemeAgentTest, InlineCodeRunsWithTheHostCalls) {
  StartVault("v");
  const std::string id = SpawnScheme("hello", R"((lambda ()
    (log "hello " (+ 1 2))
    (let ((d (cas-put "scheme was here")))
      (log "put " d)
      (log "got " (utf8->string (cas-get d))))
    (log "me " (assq-ref (self-inspect) 'purpose))))",
                                     "(capabilities (cas-write))");
  WaitLog(id, "hello 3");
  WaitLog(id, absl::StrCat("put ", DigestText("scheme was here")));
  WaitLog(id, "got scheme was here");
  WaitLog(id, "me hello");
  EXPECT_EQ(End(id), "completed exit(0)");
}

TEST_F(SchemeAgentTest, FuelRunsOutAndEndsTheAgent) {
  StartVault("v");
  const std::string id = SpawnScheme("spin", "(lambda () (let loop ((i 0)) (loop (+ i 1))))",
                                     "(constraints (max-steps 100000))");
  EXPECT_EQ(End(id), "failed fuel exhausted");
}

TEST_F(SchemeAgentTest, AllocationBombAndDeepRecursionAreContained) {
  StartVault("v");
  const std::string bomb = SpawnScheme(
      // A list the loop keeps looking at: nothing the compiler may drop, nothing the GC frees.
      "bomb",
      "(lambda () (let loop ((l '()) (n 0)) (if (< (length l) -1) l "
      "(loop (cons (make-vector 1000 n) l) (+ n 1)))))",
      "(constraints (max-memory (* 64 1024 1024)))");
  EXPECT_THAT(End(bomb), HasSubstr("memory")) << "the memory limit ends it";
  const std::string deep = SpawnScheme("deep", "(lambda () (let f ((n 0)) (+ 1 (f (+ n 1)))))");
  EXPECT_EQ(End(deep), "failed stack exhausted");
  // Under an allocation budget the same bomb ends on it, long before the memory limit; an agent
  // that allocates less runs to its end.
  const std::string budget = SpawnScheme(
      "budget",
      "(lambda () (let loop ((l '()) (n 0)) (if (< (length l) -1) l "
      "(loop (cons (make-vector 1000 n) l) (+ n 1)))))",
      "(constraints (max-memory (* 256 1024 1024)) (fuel (allocation (* 32 1024 1024))))");
  EXPECT_EQ(End(budget), "failed allocation limit");
  const std::string modest = SpawnScheme("modest", "(lambda () (log (make-string 1000 #\\a)))",
                                         "(constraints (max-allocation (* 32 1024 1024)))");
  EXPECT_EQ(End(modest), "completed exit(0)");
  // The vault is unaffected: a next agent runs.
  const std::string next = SpawnScheme("next", "(lambda () (log \"still here\"))");
  WaitLog(next, "still here");
}

// The bindings the RFC excludes are not there at all, and nothing names the fuel counter.
TEST_F(SchemeAgentTest, NoEvalNoFilesNoClockNoProcesses) {
  StartVault("v");
  const std::pair<std::string, std::string> cases[] = {
      {"(eval '(+ 1 2) (interaction-environment))", "Unbound variable: eval"},
      {"(primitive-eval '(+ 1 2))", "Unbound variable: primitive-eval"},
      {"(open-input-file \"/etc/passwd\")", "Unbound variable: open-input-file"},
      {"(system \"id\")", "Unbound variable: system"},
      {"(current-time)", "Unbound variable: current-time"},
      {"(get-internal-real-time)", "Unbound variable: get-internal-real-time"},
      {"(load \"/etc/passwd\")", "Unbound variable: load"},
      {"(module-ref (resolve-module '(vault fuel)) 'fuel)", "Unbound variable: module-ref"},
      {"((@@ (vault fuel) exhausted))", "Unbound variable: @@"},
      {"((@ (guile) primitive-eval) '(+ 1 2))", "Unbound variable: @"},
      {"(resolve-interface '(guile))", "Unbound variable: resolve-interface"},
      {"(the-environment)", "Unbound variable: the-environment"},
      // A macro cannot conjure a binding its module lacks: identifiers it makes have the
      // agent's module as their context, even when made from one that came from (guile).
      {"(define-syntax grab (lambda (x) (syntax-case x () ((_) (datum->syntax x "
       "'primitive-eval))))) ((grab) '(+ 1 2))",
       "Unbound variable: primitive-eval"},
      {"(define-syntax grab (lambda (x) (syntax-case x () ((_ k) (datum->syntax #'k "
       "'open-input-file))))) ((grab when) \"/etc/passwd\")",
       "Unbound variable: open-input-file"},
      // /etc/passwd through any port the language has.
      {"(call-with-input-file \"/etc/passwd\" (lambda (p) 1))",
       "Unbound variable: call-with-input-file"},
      {"(open-file \"/etc/passwd\" \"r\")", "Unbound variable: open-file"},
      {"(with-input-from-file \"/etc/passwd\" (lambda () 1))",
       "Unbound variable: with-input-from-file"},
      {"(dynamic-link \"libc.so.6\")", "Unbound variable: dynamic-link"},
      {"(load-extension \"libguile-3.0\" \"scm_init\")", "Unbound variable: load-extension"},
  };
  for (const auto& [code, why] : cases) {
    const std::string id = SpawnScheme("bad", absl::StrCat("(lambda () ", code, ")"));
    EXPECT_EQ(End(id), absl::StrCat("failed error: ", why)) << code;
  }
}

// Through the host: /etc/passwd is no path of the vault's tree, and a value larger than a frame is
// refused by the runner before it is sent. Each comes back as a host-error; the vault goes on.
TEST_F(SchemeAgentTest, HostileValuesToTheHostAreRefused) {
  StartVault("v");
  const std::string id = SpawnScheme("hostile", R"((lambda ()
    (define (try what thunk)
      (catch 'host-error thunk
        (lambda (key call code message) (log what ": " call " " code " " message))))
    (try "passwd" (lambda () (read-file "/etc/passwd")))
    (try "dotdot" (lambda () (read-file "/vault/../etc/passwd")))
    (try "huge log" (lambda () (log (make-string 3000000 #\a))))
    (try "huge send" (lambda () (agent-send "nobody" "t" (make-string 3000000 #\a))))
    (log "still running")))");
  WaitLog(id, "still running");
  std::vector<std::string> logs = Logs(id);
  ASSERT_EQ(logs.size(), 5u) << absl::StrJoin(logs, "\n");
  EXPECT_EQ(logs[0],
            "passwd: read-file 3 path \"/etc/passwd\" is not in the vault's tree (/vault/...)");
  EXPECT_THAT(logs[1], StartsWith("dotdot: read-file "));
  EXPECT_THAT(logs[2], StartsWith("huge log: log 3 vault-agent: a request of 30000"));
  EXPECT_THAT(logs[2], HasSubstr(" bytes exceeds the vault's frame limit of "));
  EXPECT_THAT(logs[3], StartsWith("huge send: agent-send 3 vault-agent: a request of 30000"));
  EXPECT_EQ(End(id), "completed exit(0)");
  const std::string next = SpawnScheme("next", "(lambda () (log \"still here\"))");
  WaitLog(next, "still here");
}

// A parent writes its child's code into the child's spec, shares an object with it, and tells it
// to go; the child reads the object it was shared.
TEST_F(SchemeAgentTest, SpawnsAChildAndSharesAnObjectWithIt) {
  StartVault("v");
  const std::string parent = SpawnScheme("parent", R"((lambda ()
    (let* ((d (cas-put "for the child"))
           (child (spawn-child
                   '(spawn-agent (purpose "child")
                      (code '(lambda ()
                               (agent-receive)
                               (log "child got " (utf8->string (cas-get (utf8->string (get-state)))))))
                      (capabilities (receive (from "*"))))
                   d)))
      (share d (list child))
      (agent-send child "go" "")
      (log "spawned " child))))",
                                         "(capabilities (cas-write) (spawn) (send (agent \"*\")) "
                                         "(receive (from \"*\")))");
  EXPECT_EQ(End(parent), "completed exit(0)");
  std::vector<std::string> logs = Logs(parent);
  ASSERT_EQ(logs.size(), 1u) << absl::StrJoin(logs, "\n");
  ASSERT_THAT(logs[0], StartsWith("spawned a-"));
  const std::string child = logs[0].substr(std::string("spawned ").size());
  WaitLog(child, "child got for the child");
  EXPECT_EQ(End(child), "completed exit(0)");
  RunResult described = Ctl({"-o", "json", "agent", "describe", child});
  EXPECT_EQ(JsonField(described.out, "sandbox"), "scheme") << described;
}

TEST_F(SchemeAgentTest, DenialsComeBackAsCatchableErrors) {
  StartVault("v");
  const std::string id = SpawnScheme("denied", R"((lambda ()
    (catch 'host-error
      (lambda () (read-file "/vault/secret"))
      (lambda (key call code message) (log "caught " call " " code)))))");
  WaitLog(id, "caught read-file 7");
  EXPECT_EQ(End(id), "completed exit(0)");
}

}  // namespace
}  // namespace vault::integration
