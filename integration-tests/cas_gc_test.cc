// The CAS lifecycle against a running vaultd (docs/operations.md "Reclaiming space"): pins,
// removals refused while something holds the object, collections and compaction, the audit
// entries they leave, what an agent holds while it lives and for cas.gc.keep_ended_agents_seconds
// after, and the storage its principal gets back, across a restart.
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "integration-tests/agent_fixture.h"

namespace vault::integration {
namespace {

constexpr char kQuickGc[] =
    "cas { gc { keep_unheld_seconds: 1 keep_ended_agents_seconds: 1 compact_below_live_percent: "
    "90 } }";

class CasGcTest : public AgentTest {
 protected:
  std::string PutFile(const std::string& name, const std::string& data) {
    const std::string path = absl::StrCat(root(), "/", name);
    EXPECT_TRUE(WriteFile(path, data).ok());
    RunResult r = Ctl({"cas", "put", path});
    EXPECT_EQ(r.exit_code, kExitOk) << r;
    return DigestText(data);
  }
  bool Has(const std::string& digest) { return Ctl({"cas", "has", digest}).exit_code == kExitOk; }
  std::string GcJson(std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"-o", "json", "cas", "gc"};
    args.insert(args.end(), extra.begin(), extra.end());
    RunResult r = Ctl(args);
    EXPECT_EQ(r.exit_code, kExitOk) << r;
    return r.out;
  }
  uint64_t PackBytes() {
    uint64_t total = 0;
    for (const auto& e : std::filesystem::directory_iterator(vault_.data_dir + "/packs")) {
      total += e.file_size();
    }
    return total;
  }
};

TEST_F(CasGcTest, AnOperatorPinsRemovesCollectsAndCompacts) {
  ASSERT_NO_FATAL_FAILURE(StartVault("gc", "", kQuickGc));
  if (IsSkipped()) return;
  const std::string pinned = PutFile("pinned", "keep this one");
  const std::string loose = PutFile("loose", std::string(300000, 'x'));
  std::mt19937_64 rng(Seed());
  const std::string large = PutFile("large", RandomBytes(rng, 9 << 20));
  RunResult pin = Ctl({"cas", "pin", pinned, "--reason", "release 1.2", "--until", "30d"});
  ASSERT_EQ(pin.exit_code, kExitOk) << pin;
  EXPECT_TRUE(absl::StartsWith(pin.out, absl::StrCat("pinned  ", pinned, " until "))) << pin.out;
  RunResult pins = Ctl({"-o", "json", "cas", "pins"});
  EXPECT_EQ(JsonField(pins.out, "reason"), "release 1.2") << pins.out;
  EXPECT_EQ(JsonField(pins.out, "by"), "local-admin") << pins.out;

  // A pinned object is kept, naming the pin and the fix; an unheld one goes at once, however
  // young; one not stored is said to be so.
  RunResult rm = Ctl({"cas", "rm", pinned, loose, DigestText("never stored")});
  EXPECT_EQ(rm.exit_code, kExitRefused) << rm;
  EXPECT_EQ(rm.out,
            absl::StrCat("removed  ", loose, "\nnot stored  ", DigestText("never stored"), "\n"));
  EXPECT_EQ(rm.err, absl::StrCat("vaultctl: kept: object ", pinned,
                                 " is held by pinned (release 1.2): it is removed once nothing "
                                 "holds it (vaultctl cas unpin ",
                                 pinned, ")\n"));
  EXPECT_FALSE(Has(loose));
  EXPECT_TRUE(Has(pinned));

  // A dry run lists what a collection would take, and takes nothing.
  absl::SleepFor(absl::Milliseconds(1500));  // past keep_unheld_seconds
  const uint64_t before = PackBytes();
  std::string dry = GcJson({"--dry-run", "--list", "10"});
  EXPECT_EQ(JsonField(dry, "removed"), "1") << dry;
  EXPECT_EQ(JsonField(dry, "held"), "1") << dry;
  EXPECT_THAT(dry, ::testing::HasSubstr(absl::StrCat("\"listed\":[\"", large, "\"]")));
  EXPECT_TRUE(Has(large));
  // The collection takes it, and compaction gives its space back.
  std::string run = GcJson();
  EXPECT_EQ(JsonField(run, "removed"), "1") << run;
  EXPECT_EQ(JsonField(run, "removed_bytes"), absl::StrCat(9 << 20)) << run;
  EXPECT_THAT(run, ::testing::HasSubstr("\"held_by\":{\"pin\":1}"));
  EXPECT_EQ(JsonField(run, "packs_rewritten"), "1") << run;
  EXPECT_FALSE(Has(large));
  EXPECT_TRUE(Has(pinned));
  EXPECT_LT(PackBytes() + (9 << 20), before + (64 << 10)) << before;
  RunResult du = Ctl({"-o", "json", "cas", "du"});
  EXPECT_EQ(JsonField(du.out, "objects"), "1") << du.out;
  EXPECT_EQ(JsonField(du.out, "pack_garbage_bytes"), "0") << du.out;

  // Unpinned, it goes too; a second unpin names the fix.
  ASSERT_EQ(Ctl({"cas", "unpin", pinned}).exit_code, kExitOk);
  RunResult again = Ctl({"cas", "unpin", pinned});
  EXPECT_EQ(again.exit_code, kExitNotFound) << again;
  EXPECT_EQ(again.err, absl::StrCat("vaultctl: object ", pinned, " is not pinned [NOT_FOUND]\n"));
  RunResult gone = Ctl({"cas", "rm", pinned});
  EXPECT_EQ(gone.exit_code, kExitOk) << gone;
  EXPECT_FALSE(Has(pinned));

  // Each step is in the audit log.
  WaitAudit("cas.pin", pinned, "ALLOWED", "local-admin");
  WaitAudit("cas.rm", pinned, "DENIED", "local-admin");
  WaitAudit("cas.rm", loose, "ALLOWED", "local-admin");
  WaitAudit("cas.gc", "operator", "ALLOWED", "local-admin");
  WaitAudit("cas.unpin", pinned, "ALLOWED", "local-admin");
  WaitAudit("cas.rm", pinned, "ALLOWED", "local-admin");
}

TEST_F(CasGcTest, WhatAnAgentStoredStaysWhileItLivesAndItsStorageComesBack) {
  // A principal may store 100 bytes; the agent's 80 count until they are collected.
  ASSERT_NO_FATAL_FAILURE(StartVault("gc", "  default_max_storage_bytes: 100", kQuickGc));
  if (IsSkipped()) return;
  const std::string body = R"(
st = json.loads(a.get_state())
t("put", lambda: a.cas_put(st["data"].encode()))
wait_for("/vault/pub/" + st["go"])
a.exit(0)
)";
  const std::string first(80, 'a'), second(80, 'b');
  std::string id = Spawn(Agent("storer", body, "(cas-write) (read \"/vault/pub\")"), "",
                         absl::StrCat("{\"data\": \"", first, "\", \"go\": \"go1\"}"));
  ASSERT_FALSE(id.empty());
  WaitLog(id, absl::StrCat("put 0 ", DigestText(first)));
  // Held by the agent: refused, named; a collection keeps it.
  RunResult rm = Ctl({"cas", "rm", DigestText(first)});
  EXPECT_EQ(rm.exit_code, kExitRefused) << rm;
  EXPECT_EQ(rm.err, absl::StrCat("vaultctl: kept: object ", DigestText(first), " is held by agent ",
                                 id, " (stored or given): it is removed once nothing holds it\n"));
  absl::SleepFor(absl::Milliseconds(1500));
  std::string run = GcJson();
  EXPECT_TRUE(Has(DigestText(first)));
  EXPECT_EQ(JsonField(run, "removed"), "0") << run;
  // Its code, state and what it stored: all the agent's.
  EXPECT_THAT(run, ::testing::HasSubstr("\"held_by\":{\"agent\":3}"));
  // Over its quota, a second agent of the same principal may not store 80 bytes more.
  std::string id2 = Spawn(Agent("storer2", body, "(cas-write) (read \"/vault/pub\")"), "",
                          absl::StrCat("{\"data\": \"", second, "\", \"go\": \"go2\"}"));
  ASSERT_FALSE(id2.empty());
  std::string refused;
  for (int i = 0; i < 200 && refused.empty(); ++i) {
    for (const std::string& line : Logs(id2)) {
      if (absl::StartsWith(line, "put ")) refused = line;
    }
    if (refused.empty()) absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_TRUE(absl::StartsWith(refused, "put 8 principal ed25519:")) << refused;
  EXPECT_TRUE(absl::EndsWith(
      refused, " has written 80 of its 100 bytes here (its storage quota); this write needs 80"))
      << refused;

  // It ends; once keep_ended_agents_seconds is past, its objects go and the bytes come back.
  std::filesystem::create_directories(files_dir() + "/pub");
  ASSERT_TRUE(WriteFile(files_dir() + "/pub/go1", "go").ok());
  ASSERT_TRUE(WriteFile(files_dir() + "/pub/go2", "go").ok());
  EXPECT_EQ(JsonField(WaitEnded(id), "state"), "completed");
  EXPECT_EQ(JsonField(WaitEnded(id2), "state"), "completed");
  absl::SleepFor(absl::Milliseconds(1500));
  run = GcJson();
  EXPECT_FALSE(Has(DigestText(first)));
  // Across a restart too: the refund is durable.
  ASSERT_EQ(vaultd_->Stop(), 0);
  ASSERT_EQ(vaultd_->Start(), absl::OkStatus());
  std::string id3 = Spawn(Agent("storer3", body, "(cas-write) (read \"/vault/pub\")"), "",
                          absl::StrCat("{\"data\": \"", second, "\", \"go\": \"go3\"}"));
  ASSERT_FALSE(id3.empty());
  WaitLog(id3, absl::StrCat("put 0 ", DigestText(second)));
  ASSERT_TRUE(WriteFile(files_dir() + "/pub/go3", "go").ok());
  EXPECT_EQ(JsonField(WaitEnded(id3), "state"), "completed");
}

}  // namespace
}  // namespace vault::integration
