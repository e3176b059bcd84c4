// A federation of three vaults on three "hosts" of one machine: each vaultd runs in a network
// namespace of its own (deploy/netns/netns.sh: one private address per host, a bridge between
// them), listens on its namespace's address, and reaches the others over mutual TLS through the
// bridge; the test reaches each vault's admin socket by its path. Then vault c's cable is pulled
// (`netns.sh cut c`: its frames are dropped silently, as on a real network) and plugged back in
// (`netns.sh heal c`), and the test checks what the federation does meanwhile and afterwards:
//
//   linked: objects put on a are pushed to b (`cas replicate`) and followed by c (`follow`);
//           every vault's mirror of every other's audit log is in step (checkpoint sizes equal).
//   cut:    a migration of an agent from a to c fails cleanly (exit 5, the Offer could not reach
//           c) and the agent goes on at a, the same process, counting on, never at c; objects put
//           on a during the cut reach b but not c; a's and b's mirrors of c stop advancing
//           (UNREACHABLE, their size held) while c's own log grows; a and b mirror each other on.
//   healed: c's follower fetches what it missed, a push from b reaches c, every mirror catches up
//           (checkpoint sizes equal again), and the migration tried again commits: the agent runs
//           at c exactly once, from the state a handed over.
//
// Needs root and network namespaces (skipped otherwise, with the reason). The namespaces are
// removed in TearDown, whatever happened; only the vaultds the test started are killed, by pid.
#include <gmock/gmock.h>
#include <google/protobuf/text_format.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "integration-tests/migration_fixture.h"
#include "vault/v1/config.pb.h"

namespace vault::integration {
namespace {

using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

const std::string& NetnsScript() {
  static const std::string* path = new std::string(VAULT_IT_NETNS);
  return *path;
}
// netns.sh's exit code when this machine cannot make network namespaces (or we are not root).
constexpr int kNetnsUnsupported = 5;
// Each vaultd's federation port, on its own host's address.
constexpr int kPort = 7701;

// Counts in its state, as kCounterAgent does (lines in /vault/pub/counter.txt), and tries a host
// call again when it is refused because a hop is being prepared (UNAVAILABLE: the agent is being
// frozen): the hop that fails leaves it counting on where it is, every count with its line.
constexpr absl::string_view kHopper = R"(
a = vault_agent.Agent.connect()
def call(f, *args, **kw):
    for i in range(200):
        try:
            return f(*args, **kw)
        except vault_agent.HostError as e:
            if e.code != vault_agent.UNAVAILABLE or i == 199:
                raise
            time.sleep(0.05)
me = call(a.self_inspect)
st = call(a.get_state)
n = int(st) if st else 0
call(a.log, "start vault=%s hop=%d inc=%d n=%d" % (me["vault"], me["hop"], a.incarnation, n))
while True:
    n += 1
    call(a.checkpoint, str(n).encode())
    call(a.write_file, "/vault/pub/counter.txt", b"vault=%s n=%d t=%d pid=%d\n" % (
        me["vault"].encode(), n, int(time.time() * 1000), os.getpid()), append=True)
    deadline = time.time() + 0.2
    while time.time() < deadline:
        m = call(a.receive, timeout=0.1)
        if m is not None and m.type == "vault.checkpoint":
            call(a.checkpoint, str(n).encode())
)";

struct MirrorView {
  std::string state;
  uint64_t checkpoint_size = 0;
  std::string last_error;
};

class NetnsFederationTest : public MigrationTest {
 protected:
  void SetUp() override {
    VaultTest::SetUp();  // not MigrationTest's: its vaults listen on loopback
    if (geteuid() != 0) {
      GTEST_SKIP() << "needs root to make network namespaces (running as uid " << geteuid() << ")";
    }
    std::mt19937_64 rng(std::random_device{}());
    topology_ = absl::StrCat("vit", getpid(), "-", rng() % 1000000);
    RunResult up = Netns({"up", "--name", topology_, "--hosts", "a,b,c"});
    if (up.exit_code == kNetnsUnsupported) {
      GTEST_SKIP() << "network namespaces do not work here: " << up.err;
    }
    ASSERT_EQ(up.exit_code, kExitOk) << up;
    topology_up_ = true;
    for (absl::string_view line : absl::StrSplit(up.out, '\n', absl::SkipEmpty())) {
      std::vector<std::string> f = absl::StrSplit(line, ' ');
      ASSERT_EQ(f.size(), 2u) << up.out;
      addresses_[f[0]] = f[1];
    }
    ASSERT_EQ(addresses_.size(), 3u) << up.out;
    for (const char* name : {"a", "b", "c"}) {
      RunResult addr = Netns({"addr", "--name", topology_, name});
      ASSERT_EQ(addr.exit_code, kExitOk) << addr;
      ASSERT_EQ(addr.out, addresses_[name] + "\n");
    }

    std::string ca = CreateCa();
    ASSERT_FALSE(ca.empty());
    for (const char* name : {"a", "b", "c"}) {
      absl::StatusOr<VaultDir> v = InitOnHost(name, ca, absl::StrCat(addresses_[name], ":", kPort));
      ASSERT_TRUE(v.ok()) << v.status();
      members_[name].dir = *v;
    }
    for (auto& [name, m] : members_) {
      for (auto& [peer_name, peer] : members_) {
        if (name != peer_name) {
          ASSERT_EQ(AddMember(m.dir, peer.dir), absl::OkStatus());
        }
      }
      ASSERT_NO_FATAL_FAILURE(Configure(name));
    }
    for (auto& [name, m] : members_) {
      absl::StatusOr<Vaultd*> d =
          StartVaultdWithPrefix(m.dir, {NetnsScript(), "exec", "--name", topology_, name});
      ASSERT_TRUE(d.ok()) << d.status();
      m.vaultd = *d;
      m.agents = vault::v1::Agents::NewStub(UnixChannel(m.dir.socket));
      // It runs in its host's network namespace (the script's exec kept vaultd's pid) and listens
      // on that host's address.
      struct stat ns_of_vaultd, ns_of_host;
      ASSERT_EQ(stat(absl::StrCat("/proc/", (*d)->pid(), "/ns/net").c_str(), &ns_of_vaultd), 0);
      ASSERT_EQ(stat(absl::StrCat("/run/netns/vnet.", topology_, ".", name).c_str(), &ns_of_host),
                0);
      EXPECT_EQ(ns_of_vaultd.st_ino, ns_of_host.st_ino) << name;
      EXPECT_EQ(ns_of_vaultd.st_dev, ns_of_host.st_dev) << name;
      EXPECT_EQ((*d)->listen_address(), m.dir.address);
    }
    RunResult status = Ctl("a", {"-o", "json", "status"});
    ASSERT_EQ(status.exit_code, kExitOk) << status;
    if (JsonField(status.out, "agents_enabled") != "true") {
      GTEST_SKIP() << "agents are disabled here: "
                   << JsonField(status.out, "agents_disabled_reason").value_or("?");
    }
  }

  void TearDown() override {
    VaultTest::TearDown();  // kills the vaultds it started, by pid
    if (topology_up_) {
      RunResult down = Netns({"down", "--name", topology_});
      EXPECT_EQ(down.exit_code, kExitOk) << down;
      RunResult list = Netns({"list"});
      EXPECT_THAT(list.out, Not(HasSubstr(topology_))) << list;
    }
  }

  RunResult Netns(std::vector<std::string> args) {
    args.insert(args.begin(), NetnsScript());
    return RunProgram(args, absl::Seconds(60));
  }

  // `vaultctl init` for a vault whose listener is `listen` (its host's address).
  absl::StatusOr<VaultDir> InitOnHost(const std::string& name, const std::string& ca,
                                      const std::string& listen) {
    VaultDir v;
    v.name = name;
    v.dir = absl::StrCat(root(), "/", name);
    v.address = listen;
    RunResult r = Vaultctl(
        {"-o", "json", "init", "--name", name, "--dir", v.dir, "--listen", listen, "--ca", ca});
    if (r.exit_code != kExitOk) {
      return absl::InternalError(absl::StrCat("vaultctl init: ", ::testing::PrintToString(r)));
    }
    v.config = JsonField(r.out, "config").value_or("");
    v.socket = JsonField(r.out, "admin_socket").value_or("");
    v.public_key = JsonField(r.out, "public_key").value_or("");
    v.data_dir = v.dir + "/data";
    if (v.config != v.dir + "/vault.conf" || v.socket != v.data_dir + "/vault.sock") {
      return absl::InternalError(absl::StrCat("unexpected vaultctl init output: ", r.out));
    }
    return v;
  }

  // Mirrors polled often, with a short deadline per call (a cut shows within ~2 s); c follows
  // a's change feed.
  void Configure(const std::string& name) {
    absl::StatusOr<std::string> text = ReadFile(V(name).config);
    ASSERT_TRUE(text.ok()) << text.status();
    vault::v1::VaultConfig config;
    ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(*text, &config));
    config.mutable_audit()->set_mirror_interval_ms(200);
    config.mutable_audit()->set_mirror_rpc_timeout_ms(2000);
    if (name == "c") {
      vault::v1::FollowConfig* follow = config.add_follow();
      follow->set_peer("a");
      follow->set_interval_ms(200);
    }
    std::string out;
    ASSERT_TRUE(google::protobuf::TextFormat::PrintToString(config, &out));
    ASSERT_TRUE(WriteFile(V(name).config, out).ok());
  }

  // Stores `data` in `vault` with `vaultctl cas put`; returns its digest.
  std::string Put(const std::string& vault, const std::string& data) {
    const std::string file = absl::StrCat(root(), "/obj-", files_++);
    EXPECT_TRUE(WriteFile(file, data).ok());
    RunResult r = Ctl(vault, {"cas", "put", file});
    EXPECT_EQ(r.exit_code, kExitOk) << r;
    EXPECT_EQ(r.out, absl::StrCat(DigestText(data), "  ", file, "\n"));
    return DigestText(data);
  }

  // The object's bytes as `vault` serves them (vaultctl verifies them against the digest).
  std::string Bytes(const std::string& vault, const std::string& digest) {
    const std::string file = absl::StrCat(root(), "/got-", files_++);
    RunResult r = Ctl(vault, {"cas", "get", digest, "--out", file});
    if (r.exit_code != kExitOk) return absl::StrCat("<exit ", r.exit_code, ": ", r.err, ">");
    return ReadFile(file).value_or("<unreadable>");
  }

  // `vaultctl cas has` of every digest: 0 when all are stored, 3 when one is missing.
  int Has(const std::string& vault, const std::vector<std::string>& digests) {
    std::vector<std::string> args = {"cas", "has"};
    args.insert(args.end(), digests.begin(), digests.end());
    return Ctl(vault, args).exit_code;
  }

  // Every object is in `vault` with the bytes whose digest it is (waits for a follower).
  void ExpectStored(const std::string& vault, const std::vector<std::string>& data,
                    absl::Duration timeout) {
    std::vector<std::string> digests;
    for (const std::string& d : data) digests.push_back(DigestText(d));
    const absl::Time deadline = absl::Now() + timeout;
    while (Has(vault, digests) != kExitOk && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(100));
    }
    for (const std::string& d : data) {
      std::string got = Bytes(vault, DigestText(d));
      EXPECT_EQ(DigestText(got), DigestText(d)) << "on " << vault << ": " << got.substr(0, 200);
    }
  }

  // `vaultctl audit mirrors` of `vault`: peer -> its mirror.
  std::map<std::string, MirrorView> Mirrors(const std::string& vault) {
    RunResult r = Ctl(vault, {"-o", "json", "audit", "mirrors"});
    EXPECT_EQ(r.exit_code, kExitOk) << r;
    std::map<std::string, MirrorView> out;
    const std::string kStart = "{\"peer\":";
    for (size_t at = r.out.find(kStart); at != std::string::npos;) {
      const size_t next = r.out.find(kStart, at + 1);
      const std::string one = r.out.substr(at, next == std::string::npos ? next : next - at);
      at = next;
      std::optional<std::string> peer = JsonField(one, "peer");
      if (!peer.has_value()) continue;
      MirrorView m;
      m.state = JsonField(one, "state").value_or("");
      m.last_error = JsonField(one, "last_error").value_or("");
      EXPECT_TRUE(
          absl::SimpleAtoi(JsonField(one, "checkpoint_size").value_or(""), &m.checkpoint_size))
          << one;
      out[*peer] = m;
    }
    return out;
  }

  // The size of `vault`'s latest signed checkpoint of its own log.
  uint64_t CheckpointSize(const std::string& vault) {
    RunResult r = Ctl(vault, {"-o", "json", "audit", "checkpoint"});
    EXPECT_EQ(r.exit_code, kExitOk) << r;
    uint64_t size = 0;
    EXPECT_TRUE(absl::SimpleAtoi(JsonField(r.out, "size").value_or(""), &size)) << r.out;
    return size;
  }

  // Polls until each (vault, peer) pair's mirror is FOLLOWING with the peer's latest checkpoint
  // size (a log that grows is caught at a moment its mirror holds its newest checkpoint).
  void ExpectMirrorsInStep(const std::vector<std::pair<std::string, std::string>>& pairs,
                           absl::Duration timeout) {
    for (const auto& [vault, peer] : pairs) {
      const absl::Time deadline = absl::Now() + timeout;
      uint64_t want = 0;
      MirrorView m;
      while (true) {
        want = CheckpointSize(peer);
        m = Mirrors(vault)[peer];
        if (m.state == "FOLLOWING" && m.checkpoint_size == want) break;
        if (absl::Now() > deadline) break;
        absl::SleepFor(absl::Milliseconds(50));
      }
      EXPECT_EQ(m.state, "FOLLOWING") << vault << "'s mirror of " << peer << ": " << m.last_error;
      EXPECT_EQ(m.checkpoint_size, want) << vault << "'s mirror of " << peer;
    }
  }

  // The hopper, spawned on a by the owner; returns once it has checkpointed twice.
  std::string SpawnHopper() {
    std::string spec = WriteAgent(
        "hopper", kHopper,
        "(read (path \"/vault/pub\")) (write (path \"/vault/pub\")) (migrate (vaults a b c))",
        "(max-runtime 300) (max-migrations 5)");
    std::string id = Spawn("a", spec, owner_key_);
    if (id.empty()) return "";
    WaitFor(
        "a", id,
        [](const AgentStatus& s) {
          return s.record().state() == vault::v1::RUNNING &&
                 s.record().counters().checkpoints() >= 2;
        },
        absl::Seconds(30), "running with 2 checkpoints");
    return id;
  }

  // Every counter line of every vault, ordered by time.
  std::vector<CounterLine> AllCounterLines() {
    std::vector<CounterLine> all;
    for (const char* v : {"a", "b", "c"}) {
      std::vector<CounterLine> l = CounterLines(v);
      all.insert(all.end(), l.begin(), l.end());
    }
    std::stable_sort(all.begin(), all.end(),
                     [](const CounterLine& x, const CounterLine& y) { return x.t < y.t; });
    return all;
  }

  // The vaults of the agent's stays, in order.
  std::vector<std::string> Stays() {
    std::vector<std::string> stays;
    for (const CounterLine& l : AllCounterLines()) {
      if (stays.empty() || stays.back() != l.vault) stays.push_back(l.vault);
    }
    return stays;
  }

  std::string topology_;
  bool topology_up_ = false;
  std::map<std::string, std::string> addresses_;  // host -> its address
  int files_ = 0;
};

TEST_F(NetnsFederationTest, ACutVaultFallsBehindCleanlyAndCatchesUpWhenHealed) {
  ASSERT_NO_FATAL_FAILURE(TrustOwnerEverywhere());
  std::mt19937_64 rng(Seed());
  const std::vector<std::pair<std::string, std::string>> kAllPairs = {
      {"a", "b"}, {"a", "c"}, {"b", "a"}, {"b", "c"}, {"c", "a"}, {"c", "b"}};

  // --- Linked: objects pushed to b and followed by c; mirrors in step. ----------------------
  const std::vector<std::string> before = {RandomBytes(rng, 1000), RandomBytes(rng, 300000),
                                           RandomBytes(rng, 2 << 20)};
  std::vector<std::string> args = {"-o", "json", "cas", "replicate", "--to", "b"};
  for (const std::string& d : before) args.push_back(Put("a", d));
  RunResult push = Ctl("a", args);
  ASSERT_EQ(push.exit_code, kExitOk) << push;
  EXPECT_EQ(JsonField(push.out, "objects"), "3") << push.out;
  EXPECT_EQ(JsonField(push.out, "refused"), "0") << push.out;
  ExpectStored("b", before, absl::ZeroDuration());
  ExpectStored("c", before, absl::Seconds(30));
  const std::string id = SpawnHopper();
  ASSERT_FALSE(id.empty());
  ExpectMirrorsInStep(kAllPairs, absl::Seconds(30));

  // --- Cut: c's cable is pulled. -------------------------------------------------------------
  RunResult cut = Netns({"cut", "--name", topology_, "c"});
  ASSERT_EQ(cut.exit_code, kExitOk) << cut;
  RunResult status = Netns({"status", "--name", topology_});
  EXPECT_THAT(status.out, HasSubstr(absl::StrCat("\nc  ", addresses_["c"], "  link cut  ")))
      << status;
  EXPECT_THAT(status.out, HasSubstr(absl::StrCat("\na  ", addresses_["a"], "  link up  ")))
      << status;

  // A migration to c fails cleanly: the Offer cannot reach c (a's member channel to c never
  // connected, so the Offer waits for one connection attempt: 5 s, GRPC_ARG_MIN_RECONNECT_
  // BACKOFF_MS in migration/transport.cc, less than the Offer's deadline), and the agent goes on
  // at a.
  const absl::Time tried = absl::Now();
  RunResult refused = Ctl("a", {"migrate", id, "--to", "c", "--checkpoint-wait", "300"});
  const absl::Duration refused_after = absl::Now() - tried;
  std::cerr << "the migration to the cut vault failed after " << absl::FormatDuration(refused_after)
            << ": " << refused.err;
  RecordProperty("migration_refused_ms", absl::StrCat(absl::ToInt64Milliseconds(refused_after)));
  EXPECT_EQ(refused.exit_code, kExitUnavailable) << refused;
  EXPECT_THAT(refused.err, StartsWith("vaultctl: migration to c refused: Offer to c: failed to "
                                      "connect to all addresses; last error: "))
      << refused;
  EXPECT_THAT(refused.err, HasSubstr(absl::StrCat(" ipv4:", addresses_["c"], ":", kPort, ": ")))
      << refused;
  EXPECT_THAT(refused.err, EndsWith(" [UNAVAILABLE]\n")) << refused;
  EXPECT_EQ(refused.out, "");
  EXPECT_LT(refused_after, absl::Seconds(10)) << "the Offer waited for its deadline";
  {
    AgentStatus st = WaitRunning("a", id);
    EXPECT_EQ(st.record().hop(), 0u);
    EXPECT_EQ(st.record().incarnation(), 1u);  // the same process: thawed, never restarted
    EXPECT_FALSE(st.record().has_migration());
    EXPECT_THAT(st.record().reason(), StartsWith("migration to c refused: Offer to c: "));
    std::vector<std::string> failed = Audit("a", "agent.migrate.failed", id);
    ASSERT_EQ(failed.size(), 1u);
    EXPECT_EQ(JsonField(failed[0], "priority"), "HIGH") << failed[0];
    EXPECT_EQ(JsonField(failed[0], "outcome"), "resumed here") << failed[0];
    EXPECT_EQ(Get("c", id).status().code(), absl::StatusCode::kNotFound);
    EXPECT_EQ(Get("b", id).status().code(), absl::StatusCode::kNotFound);
    ExpectRunsOnlyOn(id, "a");
    const size_t lines = CounterLines("a").size();
    WaitCounter("a", lines + 1);  // it counts on
    EXPECT_EQ(Stays(), std::vector<std::string>{"a"});
    std::vector<CounterLine> all = AllCounterLines();
    for (size_t i = 1; i < all.size(); ++i) {
      EXPECT_EQ(all[i].n, all[i - 1].n + 1) << "counter line " << i << ": a count lost or twice";
    }
  }

  // a and b go on: what a stores is pushed to b; b stores an object of its own; c stores one
  // (its admin socket is a path: the cut does not reach it) and its log grows.
  const std::vector<std::string> during = {RandomBytes(rng, 5000), RandomBytes(rng, 1536 << 10)};
  args = {"-o", "json", "cas", "replicate", "--to", "b"};
  for (const std::string& d : during) args.push_back(Put("a", d));
  push = Ctl("a", args);
  EXPECT_EQ(push.exit_code, kExitOk) << push;
  EXPECT_EQ(JsonField(push.out, "objects"), "2") << push.out;
  ExpectStored("b", during, absl::ZeroDuration());
  const std::string on_b = RandomBytes(rng, 7000);
  Put("b", on_b);
  const std::string on_c = RandomBytes(rng, 3000);
  Put("c", on_c);

  // a's and b's mirrors of c stop: UNREACHABLE, their checkpoint held while c's log grows.
  std::map<std::string, MirrorView> of_c;
  const absl::Time deadline = absl::Now() + absl::Seconds(15);
  while (true) {
    of_c = {{"a", Mirrors("a")["c"]}, {"b", Mirrors("b")["c"]}};
    if ((of_c["a"].state == "UNREACHABLE" && of_c["b"].state == "UNREACHABLE") ||
        absl::Now() > deadline) {
      break;
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
  for (const char* v : {"a", "b"}) {
    EXPECT_EQ(of_c[v].state, "UNREACHABLE") << v << "'s mirror of c";
    EXPECT_NE(of_c[v].last_error, "") << v << "'s mirror of c";
  }
  const uint64_t held = std::max(of_c["a"].checkpoint_size, of_c["b"].checkpoint_size);
  uint64_t c_size = 0;
  for (int i = 0; i < 100 && (c_size = CheckpointSize("c")) <= held; ++i) {
    absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_GT(c_size, held) << "c's own log did not grow during the cut";
  absl::SleepFor(absl::Seconds(1));  // five mirror rounds
  for (const char* v : {"a", "b"}) {
    MirrorView now = Mirrors(v)["c"];
    EXPECT_EQ(now.state, "UNREACHABLE") << v << "'s mirror of c";
    EXPECT_EQ(now.checkpoint_size, of_c[v].checkpoint_size) << v << "'s mirror of c advanced";
  }
  for (const char* peer : {"a", "b"}) {
    EXPECT_EQ(Mirrors("c")[peer].state, "UNREACHABLE") << "c's mirror of " << peer;
  }
  ExpectMirrorsInStep({{"a", "b"}, {"b", "a"}}, absl::Seconds(15));
  // c's follower could not fetch what a stored (it has tried for seconds, every 200 ms).
  EXPECT_EQ(Has("c", {DigestText(during[0])}), kExitNotFound);
  EXPECT_EQ(Has("c", {DigestText(during[1])}), kExitNotFound);
  EXPECT_EQ(Has("c", {DigestText(on_b)}), kExitNotFound);

  // --- Healed. --------------------------------------------------------------------------------
  RunResult heal = Netns({"heal", "--name", topology_, "c"});
  ASSERT_EQ(heal.exit_code, kExitOk) << heal;
  const absl::Time healed = absl::Now();

  // Replication resumes: c's follower fetches what it missed; a push from b reaches c. (Within
  // seconds, usually. But when a's end of c's follower connection held unacknowledged bytes for
  // 20 s, a's kernel aborted it silently (gRPC servers set TCP_USER_TIMEOUT 20 s); c's end still
  // looks open, and c's follower waits for its Feed call's deadline or the channel's keepalive
  // (30 s each, replication/follower.cc, member_channels.cc): up to ~25 s after the heal here.)
  ExpectStored("c", during, absl::Seconds(40));
  std::cerr << "c had a's objects of the cut " << absl::FormatDuration(absl::Now() - healed)
            << " after the heal\n";
  RecordProperty("follower_caught_up_ms",
                 absl::StrCat(absl::ToInt64Milliseconds(absl::Now() - healed)));
  push = Ctl("b", {"-o", "json", "cas", "replicate", "--to", "c", DigestText(on_b)});
  EXPECT_EQ(push.exit_code, kExitOk) << push;
  EXPECT_EQ(JsonField(push.out, "objects"), "1") << push.out;
  ExpectStored("c", {on_b}, absl::ZeroDuration());

  // Every mirror catches up: a's and b's mirrors of c hold c's latest checkpoint again.
  ExpectMirrorsInStep(kAllPairs, absl::Seconds(40));
  for (const char* v : {"a", "b"}) {
    EXPECT_GE(Mirrors(v)["c"].checkpoint_size, c_size) << v << "'s mirror of c";
  }
  std::cerr << "mirrors in step " << absl::FormatDuration(absl::Now() - healed)
            << " after the heal\n";
  RecordProperty("mirrors_in_step_ms",
                 absl::StrCat(absl::ToInt64Milliseconds(absl::Now() - healed)));

  // The migration tried again commits. (First a's member channel to c reconnects: `agent where`
  // of an agent nobody has asks every member; NOT_FOUND means c answered.)
  RunResult where;
  for (const absl::Time until = absl::Now() + absl::Seconds(30); absl::Now() < until;) {
    where = Ctl("a", {"agent", "where", "a-0000000000000000"});
    if (where.exit_code == kExitNotFound) break;
    absl::SleepFor(absl::Milliseconds(200));
  }
  ASSERT_EQ(where.exit_code, kExitNotFound) << where;
  RunResult moved = Ctl("a", {"-o", "json", "migrate", id, "--to", "c"});
  AgentStatus at_c = ExpectHop(id, "a", "c", 1, moved);
  // Exactly once at c: from the state a handed over, and never on a again.
  absl::StatusOr<AgentStatus> departed = Get("a", id);
  ASSERT_TRUE(departed.ok()) << departed.status();
  uint64_t handed = 0;
  const std::string state = CasGet("a", departed->record().migration().state());
  ASSERT_TRUE(absl::SimpleAtoi(state, &handed)) << state;
  WaitLog("c", id,
          absl::StrCat("start vault=c hop=1 inc=", at_c.record().incarnation(), " n=", handed));
  WaitCounter("c", 1);
  EXPECT_EQ(Stays(), (std::vector<std::string>{"a", "c"}));
  std::vector<CounterLine> all = AllCounterLines();
  for (size_t i = 1; i < all.size(); ++i) {
    if (all[i].vault == all[i - 1].vault) {
      EXPECT_EQ(all[i].n, all[i - 1].n + 1) << "counter line " << i;
    } else {
      EXPECT_EQ(all[i].n, handed + 1) << "the first line on c continues the handed-over state";
      EXPECT_LE(all[i - 1].n, handed) << "a counted past the state it handed over";
    }
  }
  EXPECT_EQ(Get("b", id).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Audit("a", "agent.migrate.failed", id).size(), 1u);
  EXPECT_EQ(Audit("c", "agent.migrate.in", id).size(), 1u);

  for (const char* v : {"a", "b", "c"}) {
    RunResult verify = Ctl(v, {"audit", "verify", "--all"});
    EXPECT_EQ(verify.exit_code, kExitOk) << v << ": " << verify;
  }
}

}  // namespace
}  // namespace vault::integration
