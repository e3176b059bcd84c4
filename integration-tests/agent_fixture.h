// integration-tests/agent_fixture: a standalone vault running Python agents (sdk/python) that
// log one line per host call they try, "<name> <code> <detail>" (code 0: ok, else the
// google.rpc.Code the vault answered), read back with `vaultctl agent logs ID -o json`. Shared by
// the agent suites (agent_test.cc, rfc_spec_test.cc).
#ifndef VAULT_INTEGRATION_TESTS_AGENT_FIXTURE_H_
#define VAULT_INTEGRATION_TESTS_AGENT_FIXTURE_H_

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <map>
#include <optional>
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
#include "integration-tests/harness.h"

namespace vault::integration {

// Every agent's code starts with this: a connection, t(name, f) that runs one host call and logs
// "<name> <code> <result or message>", and wait_for(path) that polls a vault file (the test's
// "go" signal) for at most 20 s.
constexpr char kPrelude[] = R"(#!/usr/bin/env python3
import json, sys, time
import vault_agent
a = vault_agent.Agent.connect()
def t(name, f):
    try:
        r = f()
    except vault_agent.HostError as e:
        a.log("%s %d %s" % (name, e.code, e.message))
        return None
    a.log("%s 0 %s" % (name, r))
    return r
def wait_for(path, seconds=20):
    end = time.time() + seconds
    while time.time() < end:
        try:
            a.read_file(path)
            return True
        except vault_agent.HostError:
            time.sleep(0.05)
    return False
)";

// A loop that answers queries, heartbeats, and exits on "stop" (or after 25 s).
constexpr char kReactiveBody[] = R"(
a.log("ready")
end = time.time() + 25
while time.time() < end:
    a.heartbeat()
    m = a.receive(timeout=0.1)
    if m is None:
        continue
    if m.type == "vault.query":
        a.send(m.sender, "vault.answer", b"answer:" + m.data[::-1], reply_to=m.id)
    elif m.type == "stop":
        a.exit(0, "stopped by operator")
a.exit(1, "no stop came")
)";

// A receiver: waits for the test's go file, then logs every message in its mailbox
// ("recv <id> <sender> <type> <hex data>") and how many there were.
constexpr char kReceiverBody[] = R"(
a.log("ready")
wait_for("/vault/pub/go")
n = 0
while True:
    m = a.receive(timeout=0.3)
    if m is None:
        break
    n += 1
    a.log("recv %d %s %s %s" % (m.id, m.sender, m.type, m.data.hex()))
a.log("received %d" % n)
a.exit(0)
)";

inline std::string Trim(std::string s) { return std::string(absl::StripAsciiWhitespace(s)); }

class AgentTest : public VaultTest {
 protected:
  // Starts a standalone vault; `agents_lines` go into vault.conf's agents block first. Skips the
  // test when the vault runs without agents (a sandbox fence is missing).
  // `extra_config` is appended to vault.conf.
  void StartVault(const std::string& name, const std::string& agents_lines = "",
                  const std::string& extra_config = "") {
    absl::StatusOr<VaultDir> v = InitVault(name, /*ca_dir=*/"");
    ASSERT_TRUE(v.ok()) << v.status();
    if (!extra_config.empty()) {
      absl::StatusOr<std::string> conf = ReadFile(v->config);
      ASSERT_TRUE(conf.ok()) << conf.status();
      ASSERT_TRUE(WriteFile(v->config, absl::StrCat(*conf, extra_config, "\n")).ok());
    }
    if (searchable_) {
      // Container agents' host ids walk to the vault's data folder (docs/containers.md).
      ASSERT_EQ(chmod(root().c_str(), 0711), 0);
      ASSERT_EQ(chmod(v->dir.c_str(), 0711), 0);
    }
    if (!agents_lines.empty()) {
      absl::StatusOr<std::string> conf = ReadFile(v->config);
      ASSERT_TRUE(conf.ok()) << conf.status();
      // `vaultctl init` writes exactly one agents block (with the admin); a second block would
      // be a repeated singular field, so the lines go inside it.
      ASSERT_THAT(*conf, ::testing::HasSubstr("\nagents {\n"));
      std::string edited = absl::StrReplaceAll(
          *conf, {{"\nagents {\n", absl::StrCat("\nagents {\n", agents_lines)}});
      ASSERT_TRUE(WriteFile(v->config, edited).ok());
    }
    absl::StatusOr<Vaultd*> d = StartVaultd(*v, {"--listen", "127.0.0.1:0"});
    ASSERT_TRUE(d.ok()) << d.status();
    vaultd_ = *d;
    vault_ = *v;
    sock_ = (*d)->socket();
    admin_key_ = vault_.dir + "/admin.key";
    RunResult status = Vaultctl({"--vault", sock_, "-o", "json", "status"});
    ASSERT_EQ(status.exit_code, kExitOk) << status;
    if (JsonField(status.out, "agents_enabled") != "true") {
      GTEST_SKIP() << "agents are disabled here: "
                   << JsonField(status.out, "agents_disabled_reason").value_or("?");
    }
  }

  // StartVault makes the folders above the data folder searchable by others (o+x), as container
  // agents need.
  void MakeFoldersSearchable() { searchable_ = true; }

  RunResult Ctl(std::vector<std::string> args) {
    args.insert(args.begin(), {"--vault", sock_});
    return Vaultctl(args, absl::Seconds(30));
  }

  // Writes <root>/<name>.py (the prelude and `body`) and <root>/<name>.scm; returns the spec.
  std::string Agent(const std::string& name, const std::string& body,
                    const std::string& capabilities,
                    const std::string& constraints = "(max-runtime 30)") {
    std::string code = absl::StrCat(kPrelude, body);
    codes_[name] = code;
    EXPECT_TRUE(WriteFile(absl::StrCat(root(), "/", name, ".py"), code).ok());
    std::string spec = absl::StrCat(root(), "/", name, ".scm");
    EXPECT_TRUE(WriteFile(spec, absl::StrCat("(agent\n  (purpose \"", name, "\")\n  (code-file \"",
                                             name, ".py\")\n  (capabilities ", capabilities,
                                             ")\n  (constraints ", constraints, "))\n"))
                    .ok());
    return spec;
  }

  // Spawns `spec` as `key` (default: the vault's admin) with an initial state when given;
  // returns the agent id ("" after recording a failure).
  std::string Spawn(const std::string& spec, const std::string& key = "",
                    const std::optional<std::string>& state = std::nullopt) {
    std::vector<std::string> args = {"agent", "spawn", spec, "--as",
                                     key.empty() ? admin_key_ : key};
    if (state.has_value()) {
      std::string file = absl::StrCat(spec, ".state");
      EXPECT_TRUE(WriteFile(file, *state).ok());
      args.insert(args.end(), {"--state", file});
    }
    RunResult r = Ctl(args);
    EXPECT_EQ(r.exit_code, kExitOk) << r;
    std::string id = Trim(r.out);
    EXPECT_TRUE(absl::StartsWith(id, "a-")) << r;
    return r.exit_code == kExitOk ? id : "";
  }

  std::string StatusJson(const std::string& id) {
    RunResult r = Ctl({"-o", "json", "agent", "status", id});
    EXPECT_EQ(r.exit_code, kExitOk) << r;
    return r.out;
  }
  std::string State(const std::string& id) {
    return JsonField(StatusJson(id), "state").value_or("?");
  }

  // Polls `agent status` until the agent is in one of `states`; returns the last status JSON.
  std::string WaitState(const std::string& id, const std::set<std::string>& states,
                        absl::Duration timeout = absl::Seconds(20)) {
    absl::Time deadline = absl::Now() + timeout;
    std::string json;
    while (true) {
      json = StatusJson(id);
      if (states.contains(JsonField(json, "state").value_or(""))) return json;
      if (absl::Now() > deadline) break;
      absl::SleepFor(absl::Milliseconds(20));
    }
    ADD_FAILURE() << "agent " << id << " did not reach the expected state; last status: " << json
                  << "\nits log:\n"
                  << absl::StrJoin(Logs(id), "\n");
    return json;
  }
  std::string WaitEnded(const std::string& id) {
    return WaitState(id, {"completed", "failed", "terminated"});
  }

  // The agent's log messages, oldest first.
  std::vector<std::string> Logs(const std::string& id) {
    RunResult r = Ctl({"-o", "json", "agent", "logs", id});
    EXPECT_EQ(r.exit_code, kExitOk) << r;
    std::vector<std::string> out;
    for (absl::string_view line : absl::StrSplit(r.out, '\n', absl::SkipEmpty())) {
      if (std::optional<std::string> m = JsonField(line, "message")) out.push_back(*m);
    }
    return out;
  }
  // "<name> <rest>" log lines by name (the first line of each name).
  std::map<std::string, std::string> Results(const std::string& id) {
    std::map<std::string, std::string> out;
    for (const std::string& line : Logs(id)) {
      std::pair<std::string, std::string> kv = absl::StrSplit(line, absl::MaxSplits(' ', 1));
      out.emplace(kv.first, kv.second);
    }
    return out;
  }
  // Polls the agent's log until a line equals `line`.
  void WaitLog(const std::string& id, const std::string& line,
               absl::Duration timeout = absl::Seconds(20)) {
    absl::Time deadline = absl::Now() + timeout;
    std::vector<std::string> logs;
    while (absl::Now() < deadline) {
      logs = Logs(id);
      for (const std::string& l : logs) {
        if (l == line) return;
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
    ADD_FAILURE() << "agent " << id << " never logged \"" << line << "\"; its log:\n"
                  << absl::StrJoin(logs, "\n");
  }

  // `vaultctl key generate`; returns the key file and sets *principal.
  std::string NewKey(const std::string& name, std::string* principal = nullptr) {
    std::string file = absl::StrCat(root(), "/", name, ".key");
    RunResult r = Vaultctl({"key", "generate", "--out", file});
    EXPECT_EQ(r.exit_code, kExitOk) << r;
    if (principal != nullptr) {
      std::vector<std::string> parts = absl::StrSplit(Trim(r.out), ' ');
      *principal = parts.empty() ? "" : parts[0];
    }
    return file;
  }
  void Trust(const std::string& key, const std::vector<std::string>& ceiling) {
    std::vector<std::string> args = {"policy", "trust", key, "--ceiling"};
    args.insert(args.end(), ceiling.begin(), ceiling.end());
    RunResult r = Ctl(args);
    ASSERT_EQ(r.exit_code, kExitOk) << r;
  }

  // Polls the audit log (JSON, newest 2000 entries) for an entry with these fields; returns it.
  std::string WaitAudit(const std::string& action, const std::string& subject,
                        const std::string& decision, const std::string& actor,
                        absl::Duration timeout = absl::Seconds(10)) {
    absl::Time deadline = absl::Now() + timeout;
    RunResult r;
    while (true) {
      r = Ctl({"-o", "json", "audit", "tail", "-n", "2000"});
      EXPECT_EQ(r.exit_code, kExitOk) << r;
      for (absl::string_view line : absl::StrSplit(r.out, '\n', absl::SkipEmpty())) {
        if (JsonField(line, "action") == action && JsonField(line, "subject") == subject &&
            JsonField(line, "decision") == decision && JsonField(line, "actor") == actor) {
          return std::string(line);
        }
      }
      if (absl::Now() > deadline) break;
      absl::SleepFor(absl::Milliseconds(50));
    }
    ADD_FAILURE() << "no audit entry " << action << " " << subject << " " << decision << " by "
                  << actor << " in:\n"
                  << r.out;
    return "";
  }

  const std::string& code(const std::string& name) { return codes_[name]; }
  std::string files_dir() const { return vault_.data_dir + "/files"; }

  VaultDir vault_;
  std::string sock_;
  std::string admin_key_;
  bool searchable_ = false;
  Vaultd* vaultd_ = nullptr;
  std::map<std::string, std::string> codes_;
};

}  // namespace vault::integration

#endif  // VAULT_INTEGRATION_TESTS_AGENT_FIXTURE_H_
