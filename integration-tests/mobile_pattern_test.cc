// The RFC's mobile pattern (pattern 4) end to end, as agent authors get it: the example agent of
// each SDK (sdk/python/examples/mobile.py, sdk/cpp/examples/mobile.cc, and the Scheme agent of
// sdk/scheme/examples/mobile.scm, which moves by replay), spawned with its own spec
// (mobile.scm beside it) on the home vault of a real two-vault federation (vault-a, vault-b:
// mutual TLS on loopback, each trusting the owner with a ceiling that keeps the spec's grants).
// The agent gathers the shopping list at home, migrates itself to vault-b, prices the list there,
// migrates home and exits with the report as its result. The test compares the report byte for
// byte and checks that the journey went home -> vault-b -> home: the agent completed at home
// after two hops, and vault-b recorded it departed home.
//
// Each vault also holds the other's kind of file (a price list at home, a shopping list on
// vault-b) with other contents, so an agent that gathered or priced in the wrong place brings
// home another report.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/grpc_status.h"
#include "integration-tests/harness.h"
#include "vault/v1/agent.grpc.pb.h"

namespace vault::integration {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;
using vault::v1::AgentStatus;

constexpr char kHome[] = "vault-a";
constexpr char kRemote[] = "vault-b";

// vault-a: the shopping list to take along.
constexpr absl::string_view kList = "apples 3\nbread 1\n\nplums 2\n";
// vault-b: the prices (cents) it is priced with.
constexpr absl::string_view kPrices = "apples 120\nbread 250\nmilk 99\n";
// What the agent must bring home.
constexpr absl::string_view kReport =
    "apples 3 x 120 = 360\n"
    "bread 1 x 250 = 250\n"
    "plums 2: no price at vault-b\n"
    "total 610 (priced at vault-b)\n";
// Decoys: a list on vault-b and prices at home.
constexpr absl::string_view kRemoteList = "milk 7\n";
constexpr absl::string_view kHomePrices = "apples 1\nbread 1\nplums 1\n";

class MobilePatternTest : public VaultTest {
 protected:
  void SetUp() override {
    VaultTest::SetUp();
    std::string ca = CreateCa();
    ASSERT_FALSE(ca.empty());
    for (const char* name : {kHome, kRemote}) {
      absl::StatusOr<VaultDir> v = InitVault(name, ca);
      ASSERT_TRUE(v.ok()) << v.status();
      vaults_[name] = *v;
    }
    ASSERT_EQ(AddMember(vaults_[kHome], vaults_[kRemote]), absl::OkStatus());
    ASSERT_EQ(AddMember(vaults_[kRemote], vaults_[kHome]), absl::OkStatus());
    ASSERT_NO_FATAL_FAILURE(PutFiles(kHome, kList, kHomePrices));
    ASSERT_NO_FATAL_FAILURE(PutFiles(kRemote, kRemoteList, kPrices));
    // Container agents' host ids reach the data folders through these (docs/containers.md).
    ASSERT_EQ(chmod(root().c_str(), 0711), 0);
    for (const char* name : {kHome, kRemote}) {
      ASSERT_EQ(chmod(vaults_[name].dir.c_str(), 0711), 0);
      absl::StatusOr<Vaultd*> d = StartVaultd(vaults_[name]);
      ASSERT_TRUE(d.ok()) << d.status();
      daemons_[name] = *d;
      agents_[name] = vault::v1::Agents::NewStub(UnixChannel(vaults_[name].socket));
    }
    RunResult status = Ctl(kHome, {"-o", "json", "status"});
    ASSERT_EQ(status.exit_code, kExitOk) << status;
    if (JsonField(status.out, "agents_enabled") != "true") {
      GTEST_SKIP() << "agents are disabled here: "
                   << JsonField(status.out, "agents_disabled_reason").value_or("?");
    }

    // The owner, trusted by both vaults with a ceiling that keeps every grant of the examples'
    // spec: the grants the agent holds on vault-b are what it comes home with.
    owner_key_ = root() + "/owner.key";
    RunResult key = Vaultctl({"key", "generate", "--out", owner_key_});
    ASSERT_EQ(key.exit_code, kExitOk) << key;
    for (const char* name : {kHome, kRemote}) {
      RunResult r = Ctl(name, {"policy", "trust", owner_key_, "--ceiling", "read:/vault/pub",
                               "cas-write", "migrate:vault-a,vault-b"});
      ASSERT_EQ(r.exit_code, kExitOk) << r;
    }
  }

  // /vault/pub/mobile/list.txt and prices.txt of a vault (its <data_dir>/files/pub).
  void PutFiles(const std::string& vault, absl::string_view list, absl::string_view prices) {
    const std::string dir = vaults_[vault].data_dir + "/files/pub/mobile";
    std::filesystem::create_directories(dir);
    ASSERT_TRUE(WriteFile(dir + "/list.txt", list).ok());
    ASSERT_TRUE(WriteFile(dir + "/prices.txt", prices).ok());
  }

  RunResult Ctl(const std::string& vault, std::vector<std::string> args) {
    args.insert(args.begin(), {"--vault", vaults_[vault].socket});
    return Vaultctl(args);
  }

  // Spawns on the home vault as the owner, with `state` as the initial state; "" on failure.
  std::string Spawn(const std::string& spec, const std::string& code, absl::string_view state) {
    const std::string state_file = root() + "/initial-state";
    EXPECT_TRUE(WriteFile(state_file, state).ok());
    std::vector<std::string> args = {"agent", "spawn", spec, "--as", owner_key_};
    args.insert(args.end(), {"--state", state_file});
    if (!code.empty()) args.insert(args.end(), {"--code", code});
    RunResult r = Ctl(kHome, args);
    EXPECT_EQ(r.exit_code, kExitOk) << r;
    std::string id(absl::StripAsciiWhitespace(r.out));
    EXPECT_THAT(id, StartsWith("a-")) << r;
    return r.exit_code == kExitOk ? id : "";
  }

  absl::StatusOr<AgentStatus> Get(const std::string& vault, const std::string& id) {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, absl::Seconds(10));
    vault::v1::GetAgentRequest req;
    req.set_id(id);
    AgentStatus out;
    grpc::Status s = agents_[vault]->Get(&ctx, req, &out);
    if (!s.ok()) {
      return common::FromGrpc(s);
    }
    return out;
  }

  std::vector<std::string> Logs(const std::string& vault, const std::string& id) {
    RunResult r = Ctl(vault, {"-o", "json", "agent", "logs", id});
    std::vector<std::string> out;
    for (absl::string_view line : absl::StrSplit(r.out, '\n', absl::SkipEmpty())) {
      if (std::optional<std::string> m = JsonField(line, "message")) out.push_back(*m);
    }
    return out;
  }

  // Polls the home vault until the agent has ended there (then returns its status), or records
  // a failure with both vaults' view of it.
  AgentStatus WaitEndedAtHome(const std::string& id) {
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    AgentStatus last;
    while (absl::Now() < deadline) {
      absl::StatusOr<AgentStatus> st = Get(kHome, id);
      if (st.ok()) {
        last = *st;
        vault::v1::AgentState s = last.record().state();
        if (s == vault::v1::COMPLETED || s == vault::v1::FAILED) return last;
      }
      absl::SleepFor(absl::Milliseconds(50));
    }
    absl::StatusOr<AgentStatus> remote = Get(kRemote, id);
    ADD_FAILURE() << "agent " << id << " did not end at home; home: " << last.DebugString()
                  << "\nhome log:\n"
                  << absl::StrJoin(Logs(kHome, id), "\n") << "\nremote: "
                  << (remote.ok() ? remote->DebugString() : remote.status().ToString())
                  << "\nremote log:\n"
                  << absl::StrJoin(Logs(kRemote, id), "\n");
    return last;
  }

  // The whole journey of an example agent: home -> vault-b -> home, with the priced report as
  // its result. `home_logs`: what it logged at home.
  void ExpectJourney(const std::string& id,
                     const std::vector<std::string>& home_logs = {
                         "phase gather on vault-a (hop 0)", "phase report on vault-a (hop 2)"}) {
    AgentStatus home = WaitEndedAtHome(id);
    const vault::v1::AgentRecord& r = home.record();
    ASSERT_EQ(r.state(), vault::v1::COMPLETED)
        << r.DebugString() << absl::StrJoin(Logs(kHome, id), "\n");
    EXPECT_EQ(r.exit_code(), 0);
    EXPECT_EQ(r.hop(), 2u);
    EXPECT_EQ(r.home_vault(), kHome);
    EXPECT_EQ(r.arrived_from(), kRemote);

    // The result it brought home, byte for byte (its digest computed here, with OpenSSL).
    EXPECT_EQ(DigestText(r.result()), DigestText(kReport));
    RunResult got = Ctl(kHome, {"cas", "get", DigestText(r.result())});
    ASSERT_EQ(got.exit_code, kExitOk) << got;
    EXPECT_EQ(got.out, std::string(kReport));

    // vault-b saw it arrive and leave for home; the state it handed home is what the agent
    // resumed from at home.
    absl::StatusOr<AgentStatus> remote = Get(kRemote, id);
    ASSERT_TRUE(remote.ok()) << remote.status();
    const vault::v1::AgentRecord& b = remote->record();
    EXPECT_EQ(b.state(), vault::v1::DEPARTED);
    EXPECT_EQ(b.reason(), "departed to vault-a");
    EXPECT_EQ(b.arrived_from(), kHome);
    EXPECT_EQ(b.migration().to_vault(), kHome);
    EXPECT_EQ(b.migration().requested_by(), "agent");
    EXPECT_EQ(DigestText(b.migration().state()), DigestText(r.state_digest()));

    // Each stay knew its phase (get_state) and where it was (self_inspect: vault, hop).
    EXPECT_EQ(Logs(kHome, id), home_logs);
    EXPECT_THAT(Logs(kRemote, id), ElementsAre("phase price on vault-b (hop 1)"));
  }

  std::map<std::string, VaultDir> vaults_;
  std::map<std::string, Vaultd*> daemons_;
  std::map<std::string, std::unique_ptr<vault::v1::Agents::Stub>> agents_;
  std::string owner_key_;
};

// A hop the grant does not allow (vault-c is no member, and not in the spec's migrate grant): the
// migrate call returns the denial, and the example ends at home with it.
TEST_F(MobilePatternTest, ExamplesEndAtHomeWhenTheHopIsDenied) {
  struct Case {
    std::string spec, code, state;
  };
  for (const Case& c :
       {Case{VAULT_IT_SDK_DIR "/python/examples/mobile.scm", "", R"({"remote": "vault-c"})"},
        Case{VAULT_IT_SDK_DIR "/cpp/examples/mobile.scm", VAULT_IT_MOBILE_CPP, "remote=vault-c"}}) {
    SCOPED_TRACE(c.spec);
    std::string id = Spawn(c.spec, c.code, c.state);
    ASSERT_FALSE(id.empty());
    AgentStatus home = WaitEndedAtHome(id);
    EXPECT_EQ(home.record().state(), vault::v1::FAILED) << home.DebugString();
    EXPECT_EQ(home.record().exit_code(), 1);
    EXPECT_EQ(home.record().hop(), 0u);
    EXPECT_EQ(home.record().counters().denials(), 1u);
    EXPECT_THAT(home.record().reason(), HasSubstr("phase gather on vault-a"));
    EXPECT_EQ(Get(kRemote, id).status().code(), absl::StatusCode::kNotFound);  // never there
  }
}

TEST_F(MobilePatternTest, PythonExampleBringsThePricedListHome) {
  // The spec as shipped; its code-file (mobile.py) is uploaded from beside it.
  std::string id =
      Spawn(VAULT_IT_SDK_DIR "/python/examples/mobile.scm", "", R"({"remote": "vault-b"})");
  ASSERT_FALSE(id.empty());
  ExpectJourney(id);
}

TEST_F(MobilePatternTest, CppExampleBringsThePricedListHome) {
  std::string id =
      Spawn(VAULT_IT_SDK_DIR "/cpp/examples/mobile.scm", VAULT_IT_MOBILE_CPP, "remote=vault-b");
  ASSERT_FALSE(id.empty());
  ExpectJourney(id);
}

// The C++ example as a container agent (docs/containers.md): the same program, as the root of the
// example image (sdk/cpp/make-image.sh), imported on the home vault only. Its code is the image's
// manifest; the hop brings vault-b the blobs it lacks, from which vault-b imports the image, and
// nothing of the image travels back home, which has it all.
TEST_F(MobilePatternTest, CppExampleAsAContainerAgentTakesItsImageAlong) {
  // As root with runc installed, the type must be there: a regression fails, never skips.
  if (geteuid() != 0 || access("/usr/sbin/runc", X_OK) != 0) {
    GTEST_SKIP() << "container agents need root and runc";
  }
  for (const char* name : {kHome, kRemote}) {
    RunResult status = Ctl(name, {"status"});
    ASSERT_THAT(status.out, HasSubstr("container: runc version"));
  }
  RunResult imported = Ctl(kHome, {"-o", "json", "image", "import",
                                   VAULT_IT_EXAMPLE_IMAGES "/vault-example-mobile.oci.tar"});
  ASSERT_EQ(imported.exit_code, kExitOk) << imported;
  const std::string image = JsonField(imported.out, "id").value_or("?");
  RunResult remote_images = Ctl(kRemote, {"-o", "json", "image", "ls"});
  ASSERT_EQ(remote_images.exit_code, kExitOk) << remote_images;
  EXPECT_THAT(remote_images.out, Not(HasSubstr(image)));
  // The example's spec, naming the image instead of code.
  absl::StatusOr<std::string> shipped = ReadFile(VAULT_IT_SDK_DIR "/cpp/examples/mobile.scm");
  ASSERT_TRUE(shipped.ok()) << shipped.status();
  std::string spec_text = *shipped;
  spec_text.insert(spec_text.rfind(')'), "\n       (image \"vault-example-mobile\")");
  const std::string spec = root() + "/mobile-container.scm";
  ASSERT_TRUE(WriteFile(spec, spec_text).ok());
  std::string id = Spawn(spec, "", "remote=vault-b");
  ASSERT_FALSE(id.empty());
  ExpectJourney(id);

  // vault-b imported the image from what the hop brought, and runs it as its own.
  remote_images = Ctl(kRemote, {"-o", "json", "image", "ls"});
  EXPECT_THAT(remote_images.out, HasSubstr(image));
  EXPECT_THAT(remote_images.out, HasSubstr(R"("source_format":"cas")"));
  // What crossed each link: home -> vault-b, the manifest, the config and the layer, with the
  // state; vault-b -> home, the state alone.
  auto hop_line = [&](const std::string& from, const std::string& to) {
    absl::StatusOr<std::string> log = ReadFile(daemons_[from]->log_path());
    EXPECT_TRUE(log.ok()) << log.status();
    for (absl::string_view line : absl::StrSplit(log.value_or(""), '\n')) {
      if (absl::StrContains(line, absl::StrCat("agent ", id, ": handed to ", to))) {
        return std::string(line);
      }
    }
    return std::string("no hop line");
  };
  EXPECT_THAT(hop_line(kHome, kRemote), HasSubstr(" and 4 objects "));
  EXPECT_THAT(hop_line(kRemote, kHome), HasSubstr(" and 1 objects "));
}

// The Scheme example: the RFC's pattern 4 code as written (sdk/scheme/examples/mobile.scm). The
// code after migrate-to runs on vault-b, and nothing before it runs there again: vault-b replays
// the agent's effect log (docs/replay.md), so the list is read once, at home, and the gather
// phase is logged once, at home.
TEST_F(MobilePatternTest, SchemeExampleBringsThePricedListHome) {
  std::string id = Spawn(VAULT_IT_SDK_DIR "/scheme/examples/mobile.scm", "", "vault-b");
  ASSERT_FALSE(id.empty());
  ExpectJourney(id, {"phase gather on vault-a (hop 0)"});
}

}  // namespace
}  // namespace vault::integration
