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
#include "integration-tests/harness.h"
#include "vault/v1/agent.grpc.pb.h"
#include "vault/v1/cas.grpc.pb.h"
#include "vault/v1/migration.grpc.pb.h"

namespace vault::integration {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;
using vault::v1::AgentStatus;

constexpr absl::string_view kPrelude = R"(#!/usr/bin/env python3
import os, sys, time
import vault_agent
)";

// Counts in its state: n = state or 0; every 0.2 s n += 1, checkpoint(n), then append
// "vault=<v> n=<n> t=<unix ms> pid=<pid>" to /vault/pub/counter.txt of the vault it runs on.
// Checkpoints at once when the vault asks (a vault.checkpoint message).
constexpr absl::string_view kCounterAgent = R"(
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
constexpr absl::string_view kProbeAgent = R"(
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
constexpr absl::string_view kSelfMover = R"(
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

std::vector<CounterLine> ParseCounter(const std::string& text) {
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
std::pair<pid_t, char> ProcStat(pid_t pid) {
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
bool VerifyEd25519(const std::string& public_key_text, absl::string_view message,
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

absl::Status FromGrpc(const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

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
  // names only the other members, so an agent under it could not come back home).
  void TrustOwnerEverywhere() {
    owner_key_ = NewKey("owner", &owner_);
    for (const char* v : {"a", "b", "c"}) {
      ASSERT_NO_FATAL_FAILURE(Trust(v, owner_key_, kOwnerCeiling));
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
    return p;
  }

  absl::Status Commit(vault::v1::Migration::Stub* stub, const vault::v1::MigrationPackage& p,
                      vault::v1::SignedReceipt* receipt = nullptr) {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, absl::Seconds(10));
    vault::v1::CommitRequest req;
    *req.mutable_package() = p;
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
    EXPECT_TRUE(VerifyEd25519(
        V(signer).public_key,
        absl::StrCat(absl::string_view("vault.migration.receipt.v1\0", 27), receipt.payload()),
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
    EXPECT_EQ(DigestText(d.state_digest()), DigestText(s.migration().state()));
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
    RunResult r = Ctl(from, {"-o", "json", "migrate", id, "--to", to});
    EXPECT_EQ(JsonField(r.out, "checkpointed"), "true") << r.out;
    EXPECT_THAT(r.out, HasSubstr("\"grants\":[\"read /vault/pub\",\"write /vault/pub\","
                                 "\"migrate a b c\"]"));
    AgentStatus dst = ExpectHop(id, from, to, hop, r);
    // The state it resumed from is the counter it had checkpointed; its first line there
    // continues from it.
    uint64_t state = 0;
    EXPECT_TRUE(absl::SimpleAtoi(CasGet(to, dst.record().state_digest()), &state));
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
  // It held only "migrate b"; b's "full" ceiling names the other members (a, c), so nothing of it
  // is left on b.
  EXPECT_EQ(b.record().grants_size(), 0);
  EXPECT_EQ(Logs("b", id), (std::vector<std::string>{
                               "start vault=b hop=1 state=handed over: seed-42", "grants "}));
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

  // A genuine package with that transfer id (a second agent on a, a MIGRATE link signed with a's
  // vault key, as a would make it) is refused; with a fresh transfer id b would take it.
  std::string other = SpawnCounter("other", /*max=*/3);
  ASSERT_FALSE(other.empty());
  absl::StatusOr<AgentStatus> o = Get("a", other);
  ASSERT_TRUE(o.ok());
  absl::StatusOr<capability::PrivateKey> a_key =
      capability::PrivateKey::LoadFile(V("a").dir + "/vault.key");
  ASSERT_TRUE(a_key.ok()) << a_key.status();
  auto package_for = [&](const std::string& transfer_id) {
    const vault::v1::AgentRecord& r = o->record();
    absl::StatusOr<vault::v1::LinkPayload> spawn =
        capability::ParseLinkPayload(r.chain().links().rbegin()->payload());
    EXPECT_TRUE(spawn.ok());
    vault::v1::LinkPayload hop;
    hop.set_version(capability::kLinkVersion);
    hop.set_kind(vault::v1::LinkPayload::MIGRATE);
    hop.set_parent(capability::LinkHash(*r.chain().links().rbegin()));
    hop.set_issuer(a_key->public_key().raw());
    hop.set_audience(absl::HexStringToBytes(absl::StripPrefix(V("b").public_key, "ed25519:")));
    hop.set_agent_id(r.id());
    *hop.mutable_code() = spawn->code();
    *hop.mutable_grants() = r.grants();
    *hop.mutable_constraints() = r.constraints();
    hop.set_not_before_unix_ms(absl::ToUnixMillis(absl::Now()));
    hop.set_not_after_unix_ms(spawn->not_after_unix_ms());
    hop.set_hop(1);
    hop.set_transfer_id(transfer_id);
    *hop.mutable_state() = r.state_digest();
    absl::StatusOr<vault::v1::SignedLink> link = capability::SignLink(hop, *a_key);
    EXPECT_TRUE(link.ok()) << link.status();
    vault::v1::AgentRecord migrating = r;
    *migrating.mutable_migration()->mutable_chain() = r.chain();
    *migrating.mutable_migration()->mutable_chain()->add_links() = *link;
    *migrating.mutable_migration()->mutable_state() = r.state_digest();
    return PackageOf(migrating, "a");
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
  // And the next try goes through.
  ExpectHop(id, "a", "b", 1, Ctl("a", {"-o", "json", "migrate", id, "--to", "b"}));
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

  // KNOWN BUG (reported, not asserted): with the cgroup v1 freezer, the frozen sandbox of a
  // MIGRATING agent outlives a SIGKILLed vaultd. Its parent-death SIGKILL stays pending while the
  // cgroup is frozen, and nothing thaws it (not the restarted vaultd either), so its processes
  // and cgroup leak. They can never run again: a thaw delivers the pending kill. Asserted here:
  // every leftover is frozen. Then the test thaws their cgroup, which ends them.
  void ReportLeftovers(const std::string& id) {
    std::map<std::string, std::set<pid_t>> procs = Processes(id);
    auto it = procs.find("orphan");
    if (it == procs.end()) return;
    std::cerr << "KNOWN BUG: processes of agent " << id
              << " outlive the SIGKILLed source vaultd, frozen: " << Describe(procs) << "\n";
    RecordProperty("frozen_leftovers", Describe(procs));
    std::set<std::string> cgroups;
    for (pid_t pid : it->second) {
      std::string folder = FreezerFolder(pid);
      if (folder.empty()) continue;  // gone meanwhile
      absl::StatusOr<std::string> state = ReadFile(folder + "/freezer.state");
      EXPECT_EQ(absl::StripAsciiWhitespace(state.value_or("?")), "FROZEN")
          << "a leftover process of agent " << id << " is not frozen: pid " << pid << " in "
          << folder;
      cgroups.insert(folder);
    }
    for (const std::string& folder : cgroups) {
      EXPECT_TRUE(WriteFile(folder + "/freezer.state", "THAWED").ok()) << folder;
    }
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
  ReportLeftovers(id);

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
  ReportLeftovers(id);
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
  auto as_a = vault::v1::Migration::NewStub(channel);
  absl::StatusOr<std::vector<vault::v1::Digest>> missing = Offer(as_a.get(), PackageOf(r, "a"));
  ASSERT_TRUE(missing.ok()) << missing.status();
  EXPECT_TRUE(missing->empty());
  vault::v1::SignedReceipt receipt;
  absl::Status committed = Commit(as_a.get(), PackageOf(r, "a"), &receipt);
  ASSERT_TRUE(committed.ok()) << committed;
  AgentStatus b = WaitRunning("b", id);
  EXPECT_EQ(b.record().hop(), 1u);
  EXPECT_EQ(DigestText(b.record().state_digest()), DigestText(r.migration().state()));

  // a restarts, asks b, and records the departure with b's receipt; it never starts the agent.
  ASSERT_NO_FATAL_FAILURE(Restart("a"));
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
