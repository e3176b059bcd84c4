// integration-tests: the three-vault federation the migration tests share (migration_test.cc,
// mobility_test.cc): vaults a, b and c, each a member of the others, mutual TLS on loopback;
// Python agents written by the tests; helpers to spawn, wait for states and log lines, read audit
// entries, find an agent's processes (by VAULT_AGENT_ID in their environment, by the vaultd they
// descend from), and speak the Migration service as a member.
#ifndef VAULT_INTEGRATION_TESTS_MIGRATION_FIXTURE_H_
#define VAULT_INTEGRATION_TESTS_MIGRATION_FIXTURE_H_

#include <dirent.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <signal.h>
#include <sys/types.h>

#include <algorithm>
#include <functional>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "capability/chain.h"
#include "capability/principal.h"
#include "capability/signing_domains.h"
#include "common/grpc_status.h"
#include "integration-tests/harness.h"
#include "vault/v1/agent.grpc.pb.h"
#include "vault/v1/cas.grpc.pb.h"
#include "vault/v1/migration.grpc.pb.h"

namespace vault::integration {

using ::testing::HasSubstr;
using ::testing::StartsWith;
using vault::v1::AgentStatus;

inline constexpr absl::string_view kPrelude = R"(#!/usr/bin/env python3
import os, sys, time
import vault_agent
)";

// Counts in its state: n = state or 0; every 0.2 s n += 1, checkpoint(n), then append
// "vault=<v> n=<n> t=<unix ms> pid=<pid>" to /vault/pub/counter.txt of the vault it runs on.
// Checkpoints at once when the vault asks (a vault.checkpoint message).
inline constexpr absl::string_view kCounterAgent = R"(
a = vault_agent.Agent.connect()
me = a.self_inspect()
st = a.get_state()
n = int(st) if st else 0
a.log("start vault=%s hop=%d inc=%d n=%d" % (me["vault"], me["hop"], a.incarnation, n))
while True:
    n += 1
    a.checkpoint(str(n).encode())
    a.write_file("/vault/pub/counter.txt", b"vault=%s n=%d t=%d pid=%d\n" % (
        me["vault"].encode(), n, int(time.time() * 1000), os.getpid()), append=True)
    deadline = time.time() + 0.2
    while time.time() < deadline:
        m = a.receive(timeout=0.1)
        if m is not None and m.type == "vault.checkpoint":
            a.checkpoint(str(n).encode())
)";

// Tries to write a file at each start and logs what it holds there; then waits for messages,
// checkpointing (and logging it) when asked.
inline constexpr absl::string_view kProbeAgent = R"(
a = vault_agent.Agent.connect()
me = a.self_inspect()
try:
    a.write_file("/vault/pub/probe", b"x")
    w = 0
except vault_agent.HostError as e:
    w = e.code
a.log("start vault=%s hop=%d write=%d grants=%s" % (me["vault"], me["hop"], w,
                                                     ";".join(me["grants"])))
while True:
    m = a.receive(timeout=0.2)
    if m is not None and m.type == "vault.checkpoint":
        a.log("asked to checkpoint")
        a.checkpoint(b"probe")
)";

// Moves itself to b with the migrate host call: first a hop its grant does not allow (c), then
// one to b before b trusts its principal; then, on the operator's "go", the real one. On b it
// logs what it got and completes.
inline constexpr absl::string_view kSelfMover = R"(
a = vault_agent.Agent.connect()
me = a.self_inspect()
st = a.get_state()
a.log("start vault=%s hop=%d state=%s" % (me["vault"], me["hop"], st.decode()))
if me["vault"] == "b":
    a.log("grants " + ";".join(me["grants"]))
    a.exit(0, "arrived with " + st.decode())
for target, data in (("c", b"to c"), ("b", b"too early")):
    try:
        a.migrate(target, data)
        a.log("migrate %s returned" % target)
    except vault_agent.Denied as e:
        a.log("migrate %s denied %d" % (target, e.code))
    except vault_agent.HostError as e:
        a.log("migrate %s failed %d %s" % (target, e.code, e.message))
a.log("waiting for go")
while True:
    m = a.receive(timeout=0.2)
    if m is not None and m.type == "go":
        break
a.migrate("b", b"handed over: " + st)
a.log("migrate b returned")
a.exit(3, "still on a")
)";

struct CounterLine {
  std::string vault;
  uint64_t n = 0;
  int64_t t = 0;
};

inline std::vector<CounterLine> ParseCounter(const std::string& text) {
  std::vector<CounterLine> out;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    CounterLine c;
    for (absl::string_view field : absl::StrSplit(line, ' ')) {
      if (absl::ConsumePrefix(&field, "vault=")) c.vault = std::string(field);
      if (absl::ConsumePrefix(&field, "n=")) (void)absl::SimpleAtoi(field, &c.n);
      if (absl::ConsumePrefix(&field, "t=")) (void)absl::SimpleAtoi(field, &c.t);
    }
    out.push_back(c);
  }
  return out;
}

// The parent pid and the state letter of a process, from /proc/<pid>/stat.
inline std::pair<pid_t, char> ProcStat(pid_t pid) {
  absl::StatusOr<std::string> stat = ReadFile(absl::StrCat("/proc/", pid, "/stat"));
  if (!stat.ok()) return {0, '?'};
  size_t close = stat->rfind(')');
  if (close == std::string::npos || close + 2 >= stat->size()) return {0, '?'};
  std::vector<absl::string_view> f =
      absl::StrSplit(absl::string_view(*stat).substr(close + 2), ' ');
  pid_t ppid = 0;
  if (f.size() < 2 || !absl::SimpleAtoi(f[1], &ppid)) return {0, '?'};
  return {ppid, f[0].empty() ? '?' : f[0][0]};
}

// Ed25519 verification with OpenSSL (an oracle independent of the code under test).
inline bool VerifyEd25519(const std::string& public_key_text, absl::string_view message,
                          absl::string_view signature) {
  absl::string_view hex = public_key_text;
  if (!absl::ConsumePrefix(&hex, "ed25519:")) return false;
  std::string raw = absl::HexStringToBytes(hex);
  if (raw.size() != 32 || signature.size() != 64) return false;
  EVP_PKEY* key = EVP_PKEY_new_raw_public_key(
      EVP_PKEY_ED25519, nullptr, reinterpret_cast<const unsigned char*>(raw.data()), raw.size());
  if (key == nullptr) return false;
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  bool ok = ctx != nullptr && EVP_DigestVerifyInit(ctx, nullptr, nullptr, nullptr, key) == 1 &&
            EVP_DigestVerify(
                ctx, reinterpret_cast<const unsigned char*>(signature.data()), signature.size(),
                reinterpret_cast<const unsigned char*>(message.data()), message.size()) == 1;
  EVP_MD_CTX_free(ctx);
  EVP_PKEY_free(key);
  return ok;
}

using common::FromGrpc;

class MigrationTest : public VaultTest {
 protected:
  struct Member {
    VaultDir dir;
    Vaultd* vaultd = nullptr;
    std::unique_ptr<vault::v1::Agents::Stub> agents;
  };

  void SetUp() override {
    VaultTest::SetUp();
    std::string ca = CreateCa();
    ASSERT_FALSE(ca.empty());
    for (const char* name : {"a", "b", "c"}) {
      absl::StatusOr<VaultDir> v = InitVault(name, ca);
      ASSERT_TRUE(v.ok()) << v.status();
      members_[name].dir = *v;
    }
    for (auto& [name, m] : members_) {
      for (auto& [peer_name, peer] : members_) {
        if (name != peer_name) {
          ASSERT_EQ(AddMember(m.dir, peer.dir), absl::OkStatus());
        }
      }
    }
    ASSERT_NO_FATAL_FAILURE(BeforeVaultdsStart());
    for (auto& [name, m] : members_) {
      absl::StatusOr<Vaultd*> d = StartVaultd(m.dir);
      ASSERT_TRUE(d.ok()) << d.status();
      m.vaultd = *d;
      m.agents = vault::v1::Agents::NewStub(UnixChannel(m.dir.socket));
    }
    RunResult status = Ctl("a", {"-o", "json", "status"});
    ASSERT_EQ(status.exit_code, kExitOk) << status;
    if (JsonField(status.out, "agents_enabled") != "true") {
      GTEST_SKIP() << "agents are disabled here: "
                   << JsonField(status.out, "agents_disabled_reason").value_or("?");
    }
  }

  // Called in SetUp once every vault is initialized and a member of the others, before any
  // vaultd starts: a subclass may edit the configs here (e.g. give a member the address of a
  // proxy the test controls).
  virtual void BeforeVaultdsStart() {}

  Member& M(const std::string& name) { return members_.at(name); }
  const VaultDir& V(const std::string& name) { return members_.at(name).dir; }
  std::string AdminKey(const std::string& name) { return V(name).dir + "/admin.key"; }

  RunResult Ctl(const std::string& vault, std::vector<std::string> args,
                absl::Duration timeout = absl::Seconds(60)) {
    args.insert(args.begin(), {"--vault", V(vault).socket});
    return Vaultctl(args, timeout);
  }

  // Restarts a vaultd that was killed; refreshes its Agents stub.
  void Restart(const std::string& vault) {
    absl::Status s = M(vault).vaultd->Start();
    ASSERT_TRUE(s.ok()) << s;
    M(vault).agents = vault::v1::Agents::NewStub(UnixChannel(V(vault).socket));
  }

  // `vaultctl key generate`; returns the key file and sets *principal.
  std::string NewKey(const std::string& name, std::string* principal) {
    std::string file = absl::StrCat(root(), "/", name, ".key");
    RunResult r = Vaultctl({"key", "generate", "--out", file});
    EXPECT_EQ(r.exit_code, kExitOk) << r;
    std::vector<std::string> parts =
        absl::StrSplit(absl::StripAsciiWhitespace(r.out), ' ', absl::SkipEmpty());
    *principal = parts.empty() ? "" : parts[0];
    return file;
  }

  void Trust(const std::string& vault, const std::string& key,
             const std::vector<std::string>& ceiling) {
    std::vector<std::string> args = {"policy", "trust", key, "--ceiling"};
    args.insert(args.end(), ceiling.begin(), ceiling.end());
    RunResult r = Ctl(vault, args);
    ASSERT_EQ(r.exit_code, kExitOk) << r;
  }

  // A principal "owner" that a, b and c trust with the same explicit ceiling (the "full" preset
  // names only the other members, so an agent under it could not come back home), and `extra`.
  void TrustOwnerEverywhere(const std::vector<std::string>& extra = {}) {
    owner_key_ = NewKey("owner", &owner_);
    std::vector<std::string> ceiling = kOwnerCeiling;
    ceiling.insert(ceiling.end(), extra.begin(), extra.end());
    for (const char* v : {"a", "b", "c"}) {
      ASSERT_NO_FATAL_FAILURE(Trust(v, owner_key_, ceiling));
    }
  }
  const std::vector<std::string> kOwnerCeiling = {"read:/vault", "write:/vault", "migrate:a,b,c"};

  // Writes <root>/<name>.py and <root>/<name>.scm; returns the spec.
  // `padding_kib` KiB of comment lines make a large code object.
  std::string WriteAgent(const std::string& name, absl::string_view body,
                         const std::string& capabilities, const std::string& constraints,
                         size_t padding_kib = 0) {
    std::string code = absl::StrCat(kPrelude, "# ", name, "\n", body);  // a code of its own
    for (size_t i = 0; i < padding_kib; ++i) absl::StrAppend(&code, std::string(1023, '#'), "\n");
    codes_[name] = code;
    EXPECT_TRUE(WriteFile(absl::StrCat(root(), "/", name, ".py"), code).ok());
    std::string spec = absl::StrCat(root(), "/", name, ".scm");
    EXPECT_TRUE(WriteFile(spec, absl::StrCat("(agent\n  (purpose \"", name, "\")\n  (code-file \"",
                                             name, ".py\")\n  (capabilities ", capabilities,
                                             ")\n  (constraints ", constraints, "))\n"))
                    .ok());
    return spec;
  }

  std::string Spawn(const std::string& vault, const std::string& spec, const std::string& key,
                    const std::optional<std::string>& state = std::nullopt) {
    std::vector<std::string> args = {"agent", "spawn", spec, "--as", key};
    if (state.has_value()) {
      std::string file = absl::StrCat(spec, ".state");
      EXPECT_TRUE(WriteFile(file, *state).ok());
      args.insert(args.end(), {"--state", file});
    }
    RunResult r = Ctl(vault, args);
    EXPECT_EQ(r.exit_code, kExitOk) << r;
    std::string id(absl::StripAsciiWhitespace(r.out));
    EXPECT_THAT(id, StartsWith("a-")) << r;
    return r.exit_code == kExitOk ? id : "";
  }

  // The counter agent, spawned on a by the owner with `capabilities` (default: files and a, b,
  // c) and max-migrations `max`; returns once it has checkpointed twice.
  std::string SpawnCounter(const std::string& name, int max,
                           const std::string& migrate = "(migrate (vaults a b c))",
                           size_t padding_kib = 0) {
    std::string spec = WriteAgent(
        name, kCounterAgent,
        absl::StrCat("(read (path \"/vault/pub\")) (write (path \"/vault/pub\")) ", migrate),
        absl::StrCat("(max-runtime 300) (max-migrations ", max, ")"), padding_kib);
    std::string id = Spawn("a", spec, owner_key_);
    if (id.empty()) return "";
    WaitFor(
        "a", id,
        [](const AgentStatus& s) {
          return s.record().state() == vault::v1::RUNNING &&
                 s.record().counters().checkpoints() >= 2;
        },
        absl::Seconds(20), "running with 2 checkpoints");
    return id;
  }

  absl::StatusOr<AgentStatus> Get(const std::string& vault, const std::string& id) {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, absl::Seconds(10));
    vault::v1::GetAgentRequest req;
    req.set_id(id);
    AgentStatus out;
    grpc::Status s = M(vault).agents->Get(&ctx, req, &out);
    if (!s.ok()) return FromGrpc(s);
    return out;
  }

  AgentStatus WaitFor(const std::string& vault, const std::string& id,
                      const std::function<bool(const AgentStatus&)>& pred, absl::Duration timeout,
                      const std::string& what) {
    absl::Time deadline = absl::Now() + timeout;
    AgentStatus last;
    std::string error;
    while (true) {
      absl::StatusOr<AgentStatus> st = Get(vault, id);
      if (st.ok()) {
        last = *st;
        if (pred(last)) return last;
      } else {
        error = st.status().ToString();
      }
      if (absl::Now() > deadline) break;
      absl::SleepFor(absl::Milliseconds(30));
    }
    ADD_FAILURE() << "agent " << id << " on " << vault << ": not " << what << " within "
                  << absl::FormatDuration(timeout) << "; last status: " << last.DebugString() << " "
                  << error << "\nits log there:\n"
                  << absl::StrJoin(Logs(vault, id), "\n");
    return last;
  }

  AgentStatus WaitRunning(const std::string& vault, const std::string& id) {
    return WaitFor(
        vault, id,
        [](const AgentStatus& s) {
          return s.record().state() == vault::v1::RUNNING && s.uptime_ms() > 0;
        },
        absl::Seconds(20), "running");
  }

  std::vector<std::string> Logs(const std::string& vault, const std::string& id) {
    RunResult r = Ctl(vault, {"-o", "json", "agent", "logs", id});
    std::vector<std::string> out;
    for (absl::string_view line : absl::StrSplit(r.out, '\n', absl::SkipEmpty())) {
      if (std::optional<std::string> m = JsonField(line, "message")) out.push_back(*m);
    }
    return out;
  }

  void WaitLog(const std::string& vault, const std::string& id, const std::string& line,
               absl::Duration timeout = absl::Seconds(20)) {
    absl::Time deadline = absl::Now() + timeout;
    std::vector<std::string> logs;
    while (absl::Now() < deadline) {
      logs = Logs(vault, id);
      if (std::find(logs.begin(), logs.end(), line) != logs.end()) return;
      absl::SleepFor(absl::Milliseconds(30));
    }
    ADD_FAILURE() << "agent " << id << " on " << vault << " never logged \"" << line
                  << "\"; its log:\n"
                  << absl::StrJoin(logs, "\n");
  }

  // Audit entries (JSON lines) of `vault` with this action and subject, polled until at least
  // `count` exist.
  std::vector<std::string> Audit(const std::string& vault, const std::string& action,
                                 const std::string& subject, size_t count = 1,
                                 absl::Duration timeout = absl::Seconds(5)) {
    absl::Time deadline = absl::Now() + timeout;
    std::vector<std::string> found;
    do {
      found.clear();
      RunResult r = Ctl(vault, {"-o", "json", "audit", "tail", "-n", "50000"});
      EXPECT_EQ(r.exit_code, kExitOk) << r;
      for (absl::string_view line : absl::StrSplit(r.out, '\n', absl::SkipEmpty())) {
        if (JsonField(line, "action") == action && JsonField(line, "subject") == subject) {
          found.emplace_back(line);
        }
      }
      if (found.size() >= count) break;
      absl::SleepFor(absl::Milliseconds(100));
    } while (absl::Now() < deadline);
    return found;
  }

  // vault name -> pids of the agent's processes (VAULT_AGENT_ID=<id> in their environment), by
  // the vaultd they descend from ("orphan" when none).
  std::map<std::string, std::set<pid_t>> Processes(const std::string& id) {
    std::map<pid_t, std::string> vaultds;
    for (auto& [name, m] : members_) {
      if (m.vaultd->Running()) vaultds[m.vaultd->pid()] = name;
    }
    std::map<std::string, std::set<pid_t>> out;
    const std::string needle = absl::StrCat("VAULT_AGENT_ID=", id);
    DIR* proc = opendir("/proc");
    if (proc == nullptr) return out;
    while (dirent* e = readdir(proc)) {
      pid_t pid;
      if (!absl::SimpleAtoi(e->d_name, &pid)) continue;
      absl::StatusOr<std::string> env = ReadFile(absl::StrCat("/proc/", pid, "/environ"));
      if (!env.ok()) continue;
      bool match = false;
      for (absl::string_view var : absl::StrSplit(*env, '\0')) match = match || var == needle;
      if (!match) continue;
      std::string where = "orphan";
      for (pid_t p = pid, hops = 0; p > 1 && hops < 64; ++hops) {
        p = ProcStat(p).first;
        if (auto it = vaultds.find(p); it != vaultds.end()) {
          where = it->second;
          break;
        }
      }
      out[where].insert(pid);
    }
    closedir(proc);
    return out;
  }

  static std::string Describe(const std::map<std::string, std::set<pid_t>>& procs) {
    std::vector<std::string> parts;
    for (const auto& [where, pids] : procs) {
      std::vector<std::string> p;
      for (pid_t pid : pids)
        p.push_back(absl::StrCat(pid, "(", std::string(1, ProcStat(pid).second), ")"));
      parts.push_back(absl::StrCat(where, ": ", absl::StrJoin(p, " ")));
    }
    return parts.empty() ? "no processes" : absl::StrJoin(parts, "; ");
  }

  // Polls until the agent's processes all descend from `vault`'s vaultd (and some do).
  void ExpectRunsOnlyOn(const std::string& id, const std::string& vault) {
    absl::Time deadline = absl::Now() + absl::Seconds(10);
    std::map<std::string, std::set<pid_t>> procs;
    while (true) {
      procs = Processes(id);
      if (procs.size() == 1 && procs.begin()->first == vault) return;
      if (absl::Now() > deadline) break;
      absl::SleepFor(absl::Milliseconds(30));
    }
    ADD_FAILURE() << "agent " << id << " should run only on " << vault << ": " << Describe(procs);
  }

  std::vector<CounterLine> CounterLines(const std::string& vault) {
    return ParseCounter(ReadFile(V(vault).data_dir + "/files/pub/counter.txt").value_or(""));
  }

  // Waits until `vault`'s counter file has a line of its own after `after` lines.
  std::vector<CounterLine> WaitCounter(const std::string& vault, size_t after) {
    absl::Time deadline = absl::Now() + absl::Seconds(15);
    std::vector<CounterLine> lines;
    while (absl::Now() < deadline) {
      lines = CounterLines(vault);
      if (lines.size() > after) return lines;
      absl::SleepFor(absl::Milliseconds(30));
    }
    ADD_FAILURE() << "no new counter line on " << vault;
    return lines;
  }

  std::string CasGet(const std::string& vault, const vault::v1::Digest& d) {
    RunResult r = Ctl(vault, {"cas", "get", DigestText(d)});
    EXPECT_EQ(r.exit_code, kExitOk) << r;
    return r.out;
  }

  // A channel to `to`'s federation listener with `as`'s member certificate.
  std::shared_ptr<grpc::Channel> MemberChannel(const std::string& as, const std::string& to) {
    const std::string tls = V(as).dir + "/tls/";
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = ReadFile(tls + "ca.crt").value_or("");
    ssl.pem_cert_chain = ReadFile(tls + "vault.crt").value_or("");
    ssl.pem_private_key = ReadFile(tls + "vault.key").value_or("");
    EXPECT_FALSE(ssl.pem_cert_chain.empty() || ssl.pem_private_key.empty());
    grpc::ChannelArguments args;
    args.SetSslTargetNameOverride(to);
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 50);
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 50);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 500);
    return grpc::CreateCustomChannel(V(to).address, grpc::SslCredentials(ssl), args);
  }

  // The package a source sends, rebuilt from its record of the hop (as PackageOf does).
  static vault::v1::MigrationPackage PackageOf(const vault::v1::AgentRecord& r,
                                               const std::string& source) {
    vault::v1::MigrationPackage p;
    p.set_agent_id(r.id());
    *p.mutable_spec() = r.spec();
    *p.mutable_chain() = r.migration().chain();
    *p.mutable_state() = r.migration().state();
    p.set_source_vault(source);
    p.set_home_vault(r.home_vault().empty() ? source : r.home_vault());
    *p.mutable_counters() = r.counters();
    p.set_principal(r.principal());
    p.set_paused(r.migration().resume_state() == vault::v1::PAUSED);
    return p;
  }

  // The package of a hop of `r` (an agent on `from` that never hopped) to `to` with
  // `transfer_id`, its MIGRATE link signed with `from`'s vault key as `from` would make it: a
  // genuine hop that `from` never started.
  vault::v1::MigrationPackage ForgedHop(const vault::v1::AgentRecord& r, const std::string& from,
                                        const std::string& to, const std::string& transfer_id) {
    absl::StatusOr<capability::PrivateKey> key =
        capability::PrivateKey::LoadFile(V(from).dir + "/vault.key");
    EXPECT_TRUE(key.ok()) << key.status();
    absl::StatusOr<vault::v1::LinkPayload> spawn =
        capability::ParseLinkPayload(r.chain().links().rbegin()->payload());
    EXPECT_TRUE(spawn.ok());
    if (!key.ok() || !spawn.ok()) return {};
    vault::v1::LinkPayload hop;
    hop.set_version(capability::kLinkVersion);
    hop.set_kind(vault::v1::LinkPayload::MIGRATE);
    hop.set_parent(capability::LinkHash(*r.chain().links().rbegin()));
    hop.set_issuer(key->public_key().raw());
    hop.set_audience(absl::HexStringToBytes(absl::StripPrefix(V(to).public_key, "ed25519:")));
    hop.set_agent_id(r.id());
    *hop.mutable_code() = spawn->code();
    *hop.mutable_grants() = r.grants();
    *hop.mutable_constraints() = r.constraints();
    hop.set_not_before_unix_ms(absl::ToUnixMillis(absl::Now()));
    hop.set_not_after_unix_ms(spawn->not_after_unix_ms());
    hop.set_hop(1);
    hop.set_transfer_id(transfer_id);
    *hop.mutable_state() = r.state_digest();
    absl::StatusOr<vault::v1::SignedLink> link = capability::SignLink(hop, *key);
    EXPECT_TRUE(link.ok()) << link.status();
    vault::v1::AgentRecord migrating = r;
    *migrating.mutable_migration()->mutable_chain() = r.chain();
    if (link.ok()) *migrating.mutable_migration()->mutable_chain()->add_links() = *link;
    *migrating.mutable_migration()->mutable_state() = r.state_digest();
    return PackageOf(migrating, from);
  }

  // For tests of processes started at an Offer: b gets the code of agent `name` through a first
  // agent's hop (then ended there), and a second agent of that code runs on a; returns its id
  // ("" on failure, with the failures reported).
  std::string SpawnWithCodeOnB(const std::string& name) {
    std::string first = SpawnCounter(name, /*max=*/3);
    if (first.empty()) return "";
    ExpectHop(first, "a", "b", 1, Ctl("a", {"-o", "json", "migrate", first, "--to", "b"}));
    RunResult ended = Ctl("b", {"agent", "terminate", first, "--as", owner_key_});
    EXPECT_EQ(ended.exit_code, kExitOk) << ended;
    return ended.exit_code == kExitOk ? SpawnCounter(name, /*max=*/3) : "";
  }

  // Waits (up to 10 s) until agent `id` has processes descending from `vault`'s vaultd; returns
  // their pids.
  std::set<pid_t> WaitForProcessesOn(const std::string& id, const std::string& vault) {
    absl::Time deadline = absl::Now() + absl::Seconds(10);
    std::map<std::string, std::set<pid_t>> procs = Processes(id);
    while (procs.count(vault) == 0 && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(20));
      procs = Processes(id);
    }
    return procs[vault];
  }

  // `vault`'s log lines "agent ID arrived from ...".
  std::vector<std::string> Arrivals(const std::string& vault, const std::string& id) {
    const std::string log = ReadFile(members_[vault].vaultd->log_path()).value_or("");
    std::vector<std::string> out;
    for (absl::string_view line : absl::StrSplit(log, '\n')) {
      if (absl::StrContains(line, absl::StrCat("agent ", id, " arrived from "))) {
        out.emplace_back(line);
      }
    }
    return out;
  }

  // `state`: bytes to carry in the Commit as the state (CommitRequest.state), or none.
  absl::Status Commit(vault::v1::Migration::Stub* stub, const vault::v1::MigrationPackage& p,
                      vault::v1::SignedReceipt* receipt = nullptr,
                      const std::string* state = nullptr) {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, absl::Seconds(10));
    vault::v1::CommitRequest req;
    *req.mutable_package() = p;
    if (state != nullptr) {
      req.set_state(*state);
      req.set_state_carried(true);
    }
    vault::v1::CommitResponse resp;
    absl::Status s = FromGrpc(stub->Commit(&ctx, req, &resp));
    if (s.ok() && receipt != nullptr) *receipt = resp.receipt();
    return s;
  }
  absl::StatusOr<std::vector<vault::v1::Digest>> Offer(vault::v1::Migration::Stub* stub,
                                                       const vault::v1::MigrationPackage& p) {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, absl::Seconds(10));
    vault::v1::OfferRequest req;
    *req.mutable_package() = p;
    vault::v1::OfferResponse resp;
    absl::Status s = FromGrpc(stub->Offer(&ctx, req, &resp));
    if (!s.ok()) return s;
    return std::vector<vault::v1::Digest>(resp.missing().begin(), resp.missing().end());
  }
  absl::StatusOr<vault::v1::TransferStatusResponse> Status(vault::v1::Migration::Stub* stub,
                                                           const std::string& transfer_id,
                                                           bool abort_if_unknown) {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, absl::Seconds(10));
    vault::v1::TransferStatusRequest req;
    req.set_transfer_id(transfer_id);
    req.set_abort_if_unknown(abort_if_unknown);
    vault::v1::TransferStatusResponse resp;
    absl::Status s = FromGrpc(stub->Status(&ctx, req, &resp));
    if (!s.ok()) return s;
    return resp;
  }

  // Opens a receipt with `signer`'s key (OpenSSL); records a failure when it does not verify.
  vault::v1::ReceiptPayload OpenReceipt(const std::string& serialized, const std::string& signer) {
    vault::v1::SignedReceipt receipt;
    EXPECT_TRUE(receipt.ParseFromString(serialized));
    EXPECT_TRUE(VerifyEd25519(V(signer).public_key,
                              absl::StrCat(capability::kReceiptDomain, receipt.payload()),
                              receipt.signature()))
        << "the receipt is not signed by " << signer;
    vault::v1::ReceiptPayload p;
    EXPECT_TRUE(p.ParseFromString(receipt.payload()));
    return p;
  }

  // The outcome of `vaultctl migrate` that succeeded from `from` to `to` as hop `hop`: the
  // source's record is DEPARTED with a receipt that `to` signed, the agent runs on `to` only,
  // from the state the MIGRATE link names, and `to` audited its arrival. Returns the
  // destination's status.
  AgentStatus ExpectHop(const std::string& id, const std::string& from, const std::string& to,
                        uint32_t hop, const RunResult& r) {
    EXPECT_EQ(r.exit_code, kExitOk) << r;
    EXPECT_EQ(JsonField(r.out, "agent_id"), id) << r.out;
    EXPECT_EQ(JsonField(r.out, "to_vault"), to) << r.out;
    EXPECT_EQ(JsonField(r.out, "hop"), absl::StrCat(hop)) << r.out;
    absl::StatusOr<AgentStatus> src = Get(from, id);
    EXPECT_TRUE(src.ok()) << src.status();
    if (!src.ok()) return {};
    const vault::v1::AgentRecord& s = src->record();
    EXPECT_EQ(s.state(), vault::v1::DEPARTED) << s.DebugString();
    EXPECT_EQ(s.reason(), "departed to " + to);
    EXPECT_EQ(s.hop(), hop);
    EXPECT_EQ(s.migration().to_vault(), to);
    EXPECT_EQ(s.migration().transfer_id().size(), 16u);
    EXPECT_EQ(JsonField(r.out, "receipt_sha256"), Hex(Sha256(s.migration().receipt())));
    vault::v1::ReceiptPayload receipt = OpenReceipt(s.migration().receipt(), to);
    EXPECT_EQ(receipt.transfer_id(), s.migration().transfer_id());
    EXPECT_EQ(receipt.agent_id(), id);
    EXPECT_EQ(receipt.from_vault(), from);
    EXPECT_EQ(receipt.to_vault(), to);
    EXPECT_EQ(receipt.hop(), hop);
    EXPECT_EQ(DigestText(receipt.state()), DigestText(s.migration().state()));
    // The MIGRATE link: signed by the source, to the destination, this hop and transfer.
    EXPECT_GE(s.migration().chain().links_size(), static_cast<int>(hop) + 1);
    absl::StatusOr<vault::v1::LinkPayload> link =
        capability::ParseLinkPayload(s.migration().chain().links().rbegin()->payload());
    EXPECT_TRUE(link.ok()) << link.status();
    if (link.ok()) {
      EXPECT_EQ(link->kind(), vault::v1::LinkPayload::MIGRATE);
      EXPECT_EQ(link->hop(), hop);
      EXPECT_EQ(link->transfer_id(), s.migration().transfer_id());
      EXPECT_EQ("ed25519:" + Hex(link->issuer()), V(from).public_key);
      EXPECT_EQ("ed25519:" + Hex(link->audience()), V(to).public_key);
    }
    AgentStatus dst = WaitRunning(to, id);
    const vault::v1::AgentRecord& d = dst.record();
    EXPECT_EQ(d.hop(), hop);
    EXPECT_EQ(d.arrived_from(), from);
    EXPECT_EQ(d.home_vault(), "a");
    // It arrived with the handed-over state (the arrival's audit entry below names it); its
    // record's state moves on with each checkpoint it makes there.
    if (d.counters().checkpoints() == s.counters().checkpoints()) {
      EXPECT_EQ(DigestText(d.state_digest()), DigestText(s.migration().state()));
    }
    std::vector<std::string> in = Audit(to, "agent.migrate.in", id);
    EXPECT_FALSE(in.empty()) << "no agent.migrate.in entry for " << id << " on " << to;
    bool found = false;
    for (const std::string& e : in) {
      if (JsonField(e, "transfer_id") != Hex(s.migration().transfer_id())) continue;
      found = true;
      EXPECT_EQ(JsonField(e, "actor"), from) << e;
      EXPECT_EQ(JsonField(e, "decision"), "ALLOWED") << e;
      EXPECT_EQ(JsonField(e, "from"), from) << e;
      EXPECT_EQ(JsonField(e, "hop"), absl::StrCat(hop)) << e;
      EXPECT_EQ(JsonField(e, "state"), DigestText(s.migration().state())) << e;
    }
    EXPECT_TRUE(found) << "no agent.migrate.in entry for this transfer on " << to;
    EXPECT_EQ(Audit(from, "agent.departed", id).size(), 1u);
    ExpectRunsOnlyOn(id, to);
    return dst;
  }

  std::map<std::string, Member> members_;
  std::string owner_key_, owner_;
  std::map<std::string, std::string> codes_;
};

}  // namespace vault::integration

#endif  // VAULT_INTEGRATION_TESTS_MIGRATION_FIXTURE_H_
