// Observability end to end: a real vaultd serves Prometheus metrics over HTTP on loopback
// (metrics_listen / --metrics-listen) and writes JSON log lines (--log-format json); real work
// through vaultctl (cas put, cas stat, an agent spawn) moves the metrics by exact amounts.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "integration-tests/harness.h"

namespace vault::integration {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// GET `path` from `address` (127.0.0.1:port) over a real TCP connection, HTTP/1.0. The whole
// answer, or "" when nothing answers.
std::string HttpGet(const std::string& address, const std::string& path) {
  const size_t colon = address.rfind(':');
  int port = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(address.substr(colon + 1), &port)) return "";
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return "";
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, address.substr(0, colon).c_str(), &sa.sin_addr);
  std::string answer;
  if (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0) {
    const std::string request = absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: vault\r\n\r\n");
    if (write(fd, request.data(), request.size()) == static_cast<ssize_t>(request.size())) {
      char buf[8192];
      for (;;) {
        ssize_t n = read(fd, buf, sizeof buf);
        if (n <= 0) break;
        answer.append(buf, static_cast<size_t>(n));
      }
    }
  }
  close(fd);
  return answer;
}

// The samples of a scrape: series (name and labels, as written) -> value.
using Samples = std::map<std::string, double>;

Samples Parse(const std::string& answer) {
  Samples out;
  const size_t body = answer.find("\r\n\r\n");
  if (body == std::string::npos) return out;
  for (absl::string_view line : absl::StrSplit(answer.substr(body + 4), '\n', absl::SkipEmpty())) {
    if (absl::StartsWith(line, "#")) continue;
    const size_t space = line.rfind(' ');
    double value = 0;
    if (space == absl::string_view::npos || !absl::SimpleAtod(line.substr(space + 1), &value)) {
      continue;
    }
    out[std::string(line.substr(0, space))] = value;
  }
  return out;
}

// The value of `series`, 0 when absent (a counter nothing has touched yet).
double Value(const Samples& s, const std::string& series) {
  auto it = s.find(series);
  return it == s.end() ? 0 : it->second;
}

constexpr char kBatchPutOk[] =
    R"(vault_grpc_server_handled_total{code="OK",listener="admin",method="/vault.v1.Cas/BatchPut"})";
constexpr char kBatchPutStarted[] =
    R"(vault_grpc_server_started_total{listener="admin",method="/vault.v1.Cas/BatchPut"})";
constexpr char kStatOk[] =
    R"(vault_grpc_server_handled_total{code="OK",listener="admin",method="/vault.v1.Cas/Stat"})";
constexpr char kGetNotFound[] =
    R"(vault_grpc_server_handled_total{code="NOT_FOUND",listener="admin",method="/vault.v1.Cas/Get"})";

class MetricsTest : public VaultTest {
 protected:
  // A standalone vault serving metrics on a port the kernel picks, logging JSON.
  void StartVault() {
    absl::StatusOr<VaultDir> v = InitVault("metrics", /*ca_dir=*/"");
    ASSERT_TRUE(v.ok()) << v.status();
    vault_ = *v;
    absl::StatusOr<Vaultd*> d = StartVaultd(vault_, {"--listen", "127.0.0.1:0", "--metrics-listen",
                                                     "127.0.0.1:0", "--log-format", "json"});
    ASSERT_TRUE(d.ok()) << d.status();
    vaultd_ = *d;
    absl::StatusOr<std::string> ready = ReadFile(vault_.data_dir + "/vaultd.ready");
    ASSERT_TRUE(ready.ok()) << ready.status();
    std::optional<std::string> address = JsonField(*ready, "metrics_address");
    ASSERT_TRUE(address.has_value()) << *ready;
    ASSERT_THAT(*address, StartsWith("127.0.0.1:"));
    ASSERT_NE(*address, "127.0.0.1:0");
    address_ = *address;
  }

  Samples Scrape() {
    std::string answer = HttpGet(address_, "/metrics");
    EXPECT_THAT(answer, StartsWith("HTTP/1.1 200 OK\r\n")) << answer.substr(0, 200);
    return Parse(answer);
  }

  // Scrapes until `series` has `value` (asynchronous audit entries trail the calls).
  Samples ScrapeUntil(const std::string& series, double value,
                      absl::Duration timeout = absl::Seconds(30)) {
    const absl::Time deadline = absl::Now() + timeout;
    Samples s = Scrape();
    while (Value(s, series) != value && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(100));
      s = Scrape();
    }
    EXPECT_EQ(Value(s, series), value) << series;
    return s;
  }

  VaultDir vault_;
  Vaultd* vaultd_ = nullptr;
  std::string address_;
};

TEST_F(MetricsTest, CountsCasWorkExactly) {
  ASSERT_NO_FATAL_FAILURE(StartVault());
  Samples before = Scrape();
  EXPECT_EQ(Value(before, "vault_cas_objects"), 0);
  EXPECT_EQ(Value(before, "vault_cas_bytes"), 0);
  EXPECT_EQ(Value(before, R"(vault_audit_events_total{action="vault.start",decision="allowed"})"),
            1);
  EXPECT_EQ(Value(before, R"(vault_agents{state="running"})"), 0);

  // One `cas put` of one small file is one BatchPut call and one cas.put audit entry.
  constexpr int kFiles = 5;
  uint64_t bytes = 0;
  for (int i = 0; i < kFiles; ++i) {
    const std::string path = absl::StrCat(root(), "/file-", i);
    const std::string data = absl::StrCat("object number ", i, std::string(i * 100, 'x'));
    bytes += data.size();
    ASSERT_TRUE(WriteFile(path, data).ok());
    RunResult put = Vaultctl({"--vault", vaultd_->socket(), "cas", "put", path});
    ASSERT_EQ(put.exit_code, kExitOk) << put;
  }
  // An absent object: Stat answers OK (present: false), Get fails NOT_FOUND.
  RunResult stat = Vaultctl({"--vault", vaultd_->socket(), "cas", "stat", DigestText("absent")});
  EXPECT_EQ(stat.exit_code, kExitNotFound) << stat;
  RunResult get = Vaultctl(
      {"--vault", vaultd_->socket(), "cas", "get", DigestText("absent"), "--out", root() + "/out"});
  EXPECT_EQ(get.exit_code, kExitNotFound) << get;

  Samples after = Scrape();
  EXPECT_EQ(Value(after, kBatchPutOk) - Value(before, kBatchPutOk), kFiles);
  EXPECT_EQ(Value(after, kBatchPutStarted) - Value(before, kBatchPutStarted), kFiles);
  EXPECT_EQ(Value(after, kStatOk) - Value(before, kStatOk), 1);
  EXPECT_EQ(Value(after, kGetNotFound) - Value(before, kGetNotFound), 1);
  EXPECT_EQ(Value(after, "vault_cas_objects"), kFiles);
  EXPECT_EQ(Value(after, "vault_cas_bytes"), static_cast<double>(bytes));
  EXPECT_EQ(Value(after, R"(vault_audit_events_total{action="cas.put",decision="allowed"})"),
            kFiles);
  EXPECT_EQ(Value(after, "vault_audit_log_entries") - Value(before, "vault_audit_log_entries"),
            kFiles);
  EXPECT_EQ(
      Value(
          after,
          R"(vault_grpc_server_handling_seconds_count{listener="admin",method="/vault.v1.Cas/BatchPut"})"),
      Value(after, kBatchPutOk));

  // Stopped: nothing listens any more.
  std::optional<int> code = vaultd_->Stop();
  ASSERT_TRUE(code.has_value());
  EXPECT_EQ(*code, 0);
  EXPECT_EQ(HttpGet(address_, "/metrics"), "");
}

TEST_F(MetricsTest, CountsAnAgentsSpawnCallsAndDenialsAndLogsItsLinesAsJson) {
  ASSERT_NO_FATAL_FAILURE(StartVault());
  RunResult status = Vaultctl({"--vault", vaultd_->socket(), "-o", "json", "status"});
  ASSERT_EQ(status.exit_code, kExitOk) << status;
  if (!absl::StrContains(status.out, "\"agents_enabled\":true")) {
    GTEST_SKIP() << "agents are disabled on this machine: " << status.out;
  }
  // One denied host call (no grant covers the file), one log call, then exit(0).
  const std::string code_path = root() + "/metrics_agent.py";
  ASSERT_TRUE(WriteFile(code_path,
                        "#!/usr/bin/env python3\n"
                        "import vault_agent\n"
                        "agent = vault_agent.Agent.connect()\n"
                        "try:\n"
                        "    agent.read_file('/vault/secret')\n"
                        "except vault_agent.HostError as e:\n"
                        "    agent.log(f'denied as expected: {e}')\n"
                        "agent.exit(0, message='done')\n")
                  .ok());
  const std::string spec_path = root() + "/metrics_agent.scm";
  ASSERT_TRUE(WriteFile(spec_path,
                        "(agent (purpose \"metrics\") (instructions \"none\") "
                        "(code-file \"metrics_agent.py\") (constraints (max-runtime 60)))\n")
                  .ok());
  RunResult spawned = Vaultctl({"--vault", vaultd_->socket(), "agent", "spawn", spec_path, "--as",
                                vault_.dir + "/admin.key"});
  ASSERT_EQ(spawned.exit_code, kExitOk) << spawned;
  const std::string id(absl::StripAsciiWhitespace(spawned.out));
  ASSERT_THAT(id, StartsWith("a-"));

  Samples s = ScrapeUntil(R"(vault_agents{state="completed"})", 1);
  // The exit call's entry is durable before the end; the others trail it on the audit queue.
  s = ScrapeUntil(R"(vault_agent_host_calls_total{call="log"})", 1);
  EXPECT_EQ(Value(s, R"(vault_agents{state="running"})"), 0);
  EXPECT_EQ(Value(s, R"(vault_agent_spawns_total{decision="allowed"})"), 1);
  EXPECT_EQ(Value(s, R"(vault_agent_spawns_total{decision="denied"})"), 0);
  EXPECT_EQ(Value(s, R"(vault_sandbox_spawns_total{outcome="ok"})"), 1);
  EXPECT_EQ(Value(s, R"(vault_sandbox_spawns_total{outcome="error"})"), 0);
  EXPECT_EQ(Value(s, R"(vault_agent_host_calls_total{call="read_file"})"), 1);
  EXPECT_EQ(Value(s, R"(vault_agent_host_call_denials_total{call="read_file"})"), 1);
  EXPECT_EQ(Value(s, R"(vault_agent_host_call_denials_total{call="log"})"), 0);
  EXPECT_EQ(Value(s, R"(vault_agent_host_calls_total{call="exit"})"), 1);
  EXPECT_EQ(Value(s, R"(vault_migrations_total{outcome="departed"})"), 0);
  EXPECT_EQ(
      Value(
          s,
          R"(vault_grpc_server_handled_total{code="OK",listener="admin",method="/vault.v1.Agents/Spawn"})"),
      1);

  // The log: every line one JSON object; the agent's lines carry its id as a field.
  std::optional<int> code = vaultd_->Stop();
  ASSERT_TRUE(code.has_value());
  EXPECT_EQ(*code, 0);
  absl::StatusOr<std::string> log = ReadFile(vaultd_->log_path());
  ASSERT_TRUE(log.ok()) << log.status();
  const std::string agent_field = absl::StrCat("\"agent\":\"", id, "\"");
  int spawned_lines = 0, completed_lines = 0, lines = 0;
  for (absl::string_view line : absl::StrSplit(*log, '\n', absl::SkipEmpty())) {
    if (absl::StartsWith(line, "=== ")) continue;  // the harness's header: the command line
    // The sanitizers build's runtime writes its own notes to stderr (the sandbox's clone() moves
    // to another stack): "==PID==WARNING: ASan ...", "False positive error reports may follow",
    // "For details see ...". They are not vaultd's log lines (a real report fails elsewhere).
    if (absl::StartsWith(line, "==") || line == "False positive error reports may follow" ||
        absl::StartsWith(line, "For details see https://github.com/google/sanitizers")) {
      continue;
    }
    ++lines;
    EXPECT_THAT(std::string(line), StartsWith("{\"time\":\"")) << line;
    EXPECT_TRUE(absl::EndsWith(line, "}")) << line;
    EXPECT_THAT(std::string(line), HasSubstr("\"vault\":\"metrics\"")) << line;
    if (!absl::StrContains(line, agent_field)) continue;
    if (absl::StrContains(line, absl::StrCat("\"message\":\"agent ", id, " spawned by "))) {
      ++spawned_lines;
      EXPECT_THAT(std::string(line), HasSubstr("\"level\":\"info\"")) << line;
    }
    if (absl::StrContains(line,
                          absl::StrCat("\"message\":\"agent ", id, ": running -> completed"))) {
      ++completed_lines;
    }
  }
  EXPECT_GT(lines, 2);
  EXPECT_EQ(spawned_lines, 1) << *log;
  EXPECT_EQ(completed_lines, 1) << *log;
}

// Wasm sandboxes started ahead (agents.wasm_warm_pool, default 2): the first wasm agent starts
// cold and the pool fills in its limits; the next takes a warm sandbox and runs exactly as a
// cold one (its arguments, environment, output and module are its own); one with other limits
// starts cold and the pool takes its shape.
TEST_F(MetricsTest, WasmAgentsStartWarmOnceThePoolHasTheirLimits) {
  ASSERT_NO_FATAL_FAILURE(StartVault());
  RunResult status = Vaultctl({"--vault", vaultd_->socket(), "-o", "json", "status"});
  ASSERT_EQ(status.exit_code, kExitOk) << status;
  if (!absl::StrContains(status.out, "\"agents_enabled\":true")) {
    GTEST_SKIP() << "agents are disabled on this machine: " << status.out;
  }
  const std::string module = absl::StrCat(VAULT_IT_WASM_DIR, "/vault_wasm_plain.wasm");
  // Spawns plain.wasm with `rest` of its spec (args, env, constraints); returns the id.
  auto spawn = [&](const std::string& label, const std::string& rest) {
    const std::string spec = absl::StrCat(root(), "/", label, ".scm");
    EXPECT_TRUE(WriteFile(spec, absl::StrCat("(spawn-agent (purpose \"warm\") (sandbox wasm) "
                                             "(code-file \"",
                                             module, "\") ", rest, ")\n"))
                    .ok());
    RunResult spawned = Vaultctl(
        {"--vault", vaultd_->socket(), "agent", "spawn", spec, "--as", vault_.dir + "/admin.key"});
    EXPECT_EQ(spawned.exit_code, kExitOk) << spawned;
    return std::string(absl::StripAsciiWhitespace(spawned.out));
  };
  auto run = [&](const std::string& label, const std::string& constraints) {
    const std::string id = spawn(label, absl::StrCat("(args \"4000\") (env \"LABEL=", label,
                                                     "\") (constraints ", constraints, ")"));
    RunResult logs;
    for (const absl::Time deadline = absl::Now() + absl::Seconds(60); absl::Now() < deadline;
         absl::SleepFor(absl::Milliseconds(50))) {
      logs = Vaultctl({"--vault", vaultd_->socket(), "agent", "logs", id});
      if (absl::StrContains(logs.out, " answer ")) break;
    }
    return logs.out;
  };
  // What plain.c prints for 4000 steps, wherever it runs.
  auto expected = [](const std::string& label) {
    return std::vector<std::string>{absl::StrCat(label, ": 2 args, 4000 steps"),
                                    absl::StrCat(label, " answer ")};
  };
  auto check = [](const std::string& logs, const std::vector<std::string>& want) {
    EXPECT_THAT(logs, HasSubstr(want[0])) << logs;
    EXPECT_THAT(logs, HasSubstr(want[1])) << logs;
  };
  const std::string cold_logs = run("first", "(max-runtime 60)");
  check(cold_logs, expected("first"));
  Samples s = ScrapeUntil("vault_wasm_warm_sandboxes", 2);
  EXPECT_EQ(Value(s, R"(vault_wasm_starts_total{start="cold"})"), 1);
  EXPECT_EQ(Value(s, R"(vault_wasm_starts_total{start="warm"})"), 0);

  const std::string warm_logs = run("second", "(max-runtime 60)");
  check(warm_logs, expected("second"));
  // The same computation: the same answer line but for its label.
  const size_t a = cold_logs.find(" answer "), b = warm_logs.find(" answer ");
  ASSERT_NE(a, std::string::npos);
  ASSERT_NE(b, std::string::npos);
  EXPECT_EQ(cold_logs.substr(a, 25), warm_logs.substr(b, 25));
  s = ScrapeUntil(R"(vault_wasm_starts_total{start="warm"})", 1);
  EXPECT_EQ(Value(s, R"(vault_wasm_starts_total{start="cold"})"), 1);

  // Other limits: cold, and the pool is refilled in them.
  check(run("third", "(max-runtime 60) (max-memory 134217728)"), expected("third"));
  s = ScrapeUntil(R"(vault_wasm_starts_total{start="cold"})", 2);
  EXPECT_EQ(Value(s, R"(vault_wasm_starts_total{start="warm"})"), 1);
  ScrapeUntil("vault_wasm_warm_sandboxes", 2);
  check(run("fourth", "(max-runtime 60) (max-memory 134217728)"), expected("fourth"));
  ScrapeUntil(R"(vault_wasm_starts_total{start="warm"})", 2);

  // The limits the runner takes from its environment hold in a warm sandbox too: fuel.
  auto fuel_run = [&](const std::string& label) {
    const std::string id =
        spawn(label, "(args \"100000000\") (constraints (max-runtime 60) (max-steps 200000))");
    RunResult st;
    for (const absl::Time deadline = absl::Now() + absl::Seconds(60); absl::Now() < deadline;
         absl::SleepFor(absl::Milliseconds(50))) {
      st = Vaultctl({"--vault", vaultd_->socket(), "-o", "json", "agent", "status", id});
      if (absl::StrContains(st.out, "\"state\":\"failed\"")) break;
    }
    EXPECT_THAT(st.out, HasSubstr("fuel exhausted (200000 instructions)")) << st;
  };
  fuel_run("fuel-cold");
  s = ScrapeUntil(R"(vault_wasm_starts_total{start="cold"})", 3);
  ScrapeUntil("vault_wasm_warm_sandboxes", 2);
  fuel_run("fuel-warm");
  ScrapeUntil(R"(vault_wasm_starts_total{start="warm"})", 3);
}

TEST_F(MetricsTest, ReportsReplicationAndMirrorLagPerMember) {
  // Two members over mutual TLS; b follows a's change feed and mirrors a's audit log.
  const std::string ca = CreateCa();
  ASSERT_FALSE(ca.empty());
  absl::StatusOr<VaultDir> a = InitVault("a", ca);
  ASSERT_TRUE(a.ok()) << a.status();
  absl::StatusOr<VaultDir> b = InitVault("b", ca);
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_EQ(AddMember(*a, *b), absl::OkStatus());
  ASSERT_EQ(AddMember(*b, *a), absl::OkStatus());
  absl::StatusOr<std::string> conf = ReadFile(b->config);
  ASSERT_TRUE(conf.ok()) << conf.status();
  ASSERT_TRUE(
      WriteFile(b->config, *conf + "follow {\n  peer: \"a\"\n  interval_ms: 200\n}\n").ok());
  absl::StatusOr<Vaultd*> da = StartVaultd(*a, {"--metrics-listen", "127.0.0.1:0"});
  ASSERT_TRUE(da.ok()) << da.status();
  absl::StatusOr<Vaultd*> db = StartVaultd(*b, {"--metrics-listen", "127.0.0.1:0"});
  ASSERT_TRUE(db.ok()) << db.status();
  auto metrics_address = [](const VaultDir& v) {
    return JsonField(ReadFile(v.data_dir + "/vaultd.ready").value_or(""), "metrics_address")
        .value_or("");
  };
  const std::string address_a = metrics_address(*a);

  constexpr int kObjects = 3;
  for (int i = 0; i < kObjects; ++i) {
    const std::string path = absl::StrCat(root(), "/a-", i);
    ASSERT_TRUE(WriteFile(path, absl::StrCat("replicated ", i)).ok());
    RunResult put = Vaultctl({"--vault", a->socket, "cas", "put", path});
    ASSERT_EQ(put.exit_code, kExitOk) << put;
  }
  address_ = metrics_address(*b);
  Samples s = ScrapeUntil(R"(vault_replication_follow_cursor{peer="a"})", kObjects);
  EXPECT_EQ(Value(s, R"(vault_replication_follow_peer_seq{peer="a"})"), kObjects);
  EXPECT_EQ(Value(s, R"(vault_replication_follow_lag_entries{peer="a"})"), 0);
  EXPECT_EQ(Value(s, "vault_cas_objects"), kObjects);
  s = ScrapeUntil(R"(vault_audit_mirror_state{peer="a",state="following"})", 1);
  EXPECT_EQ(Value(s, R"(vault_audit_mirror_state{peer="a",state="forked"})"), 0);
  EXPECT_GT(Value(s, R"(vault_audit_mirror_last_success_timestamp_seconds{peer="a"})"), 0);

  // b read a's feed over a's federation listener: a counts those calls under it.
  address_ = address_a;
  Samples at_a = Scrape();
  EXPECT_GE(
      Value(
          at_a,
          R"(vault_grpc_server_handled_total{code="OK",listener="federation",method="/vault.v1.Cas/Feed"})"),
      1);
  EXPECT_EQ(Value(at_a, "vault_cas_objects"), kObjects);
  // a follows nobody: no follow series at all.
  EXPECT_EQ(at_a.count(R"(vault_replication_follow_cursor{peer="b"})"), 0u);
}

TEST_F(MetricsTest, AMetricsAddressInUseStopsVaultdWithTheReason) {
  absl::StatusOr<VaultDir> v = InitVault("busy", /*ca_dir=*/"");
  ASSERT_TRUE(v.ok()) << v.status();
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
  ASSERT_EQ(listen(fd, 1), 0);
  socklen_t len = sizeof sa;
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len), 0);
  const std::string address = absl::StrCat("127.0.0.1:", ntohs(sa.sin_port));
  absl::StatusOr<Vaultd*> d =
      StartVaultd(*v, {"--listen", "127.0.0.1:0", "--metrics-listen", address});
  close(fd);
  ASSERT_FALSE(d.ok());
  EXPECT_THAT(std::string(d.status().message()),
              HasSubstr(absl::StrCat("cannot serve metrics on ", address)));
}

TEST_F(MetricsTest, AMetricsAddressThatIsNotNumericIsAConfigError) {
  absl::StatusOr<VaultDir> v = InitVault("badconf", /*ca_dir=*/"");
  ASSERT_TRUE(v.ok()) << v.status();
  RunResult r = RunProgram(
      {VaultdPath(), "--config", v->config, "--metrics-listen", "localhost:9701", "--check-config"},
      absl::Seconds(30));
  EXPECT_EQ(r.exit_code, kExitConfig) << r;
  EXPECT_THAT(r.err, HasSubstr("field metrics_listen: \"localhost:9701\" does not start with a "
                               "numeric address"));
  RunResult json =
      RunProgram({VaultdPath(), "--config", v->config, "--log-format", "yaml", "--check-config"},
                 absl::Seconds(30));
  EXPECT_EQ(json.exit_code, kExitConfig) << json;
  EXPECT_THAT(json.err, HasSubstr("field log_format: \"yaml\" is not one of text, json"));
}

}  // namespace
}  // namespace vault::integration
