// The CAS lifecycle under SIGKILL, against a reference model (design §12): rounds of random
// puts, pins, unpins, removals and collections (with compaction), with vaultd killed at a random
// moment while a collection runs. After every restart each object the model says must be there
// (pinned, or held by a running agent) reads back byte-exact, and no object reads back wrong;
// after a final collection nothing unheld remains and the pack files hold the live bytes within
// their overhead.
#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "integration-tests/agent_fixture.h"

namespace vault::integration {
namespace {

constexpr char kQuickGc[] =
    "cas { gc { keep_unheld_seconds: 1 keep_ended_agents_seconds: 1 compact_below_live_percent: "
    "90 } }";

struct ModelObject {
  std::string data;
  bool pinned = false;   // acknowledged pin, not unpinned since
  bool removed = false;  // acknowledged removal (and not stored again)
};

class CasGcCrashTest : public AgentTest {
 protected:
  // Puts the objects with one vaultctl call; every one is acknowledged when it exits 0.
  bool PutAll(const std::vector<std::string>& objects) {
    std::vector<std::string> args = {"cas", "put"};
    for (const std::string& o : objects) {
      const std::string path = absl::StrCat(root(), "/o", files_++);
      EXPECT_TRUE(WriteFile(path, o).ok());
      args.push_back(path);
    }
    RunResult r = Ctl(args);
    EXPECT_EQ(r.exit_code, kExitOk) << r;
    return r.exit_code == kExitOk;
  }
  // The object's bytes as the vault serves them (verified by vaultctl), or nullopt when it is
  // not stored. A failure of any other kind fails the test.
  std::optional<std::string> Get(const std::string& digest) {
    const std::string out = absl::StrCat(root(), "/got", files_++);
    RunResult r = Ctl({"cas", "get", digest, "--out", out});
    if (r.exit_code == kExitNotFound) return std::nullopt;
    EXPECT_EQ(r.exit_code, kExitOk) << r;
    absl::StatusOr<std::string> got = ReadFile(out);
    std::filesystem::remove(out);
    if (!got.ok()) return std::nullopt;
    return *got;
  }
  void CheckAgainstModel(const std::map<std::string, ModelObject>& model,
                         const std::string& held_by_agent, const std::string& agent_data,
                         const std::string& when) {
    for (const auto& [digest, o] : model) {
      std::optional<std::string> got = Get(digest);
      if (o.pinned) {
        ASSERT_TRUE(got.has_value()) << when << ": pinned object " << digest << " is gone";
      }
      if (o.removed) {
        EXPECT_FALSE(got.has_value()) << when << ": removed object " << digest << " is back";
      }
      if (got.has_value()) {
        ASSERT_TRUE(*got == o.data) << when << ": " << digest << " reads back wrong";
      }
    }
    std::optional<std::string> agent_object = Get(held_by_agent);
    ASSERT_TRUE(agent_object.has_value()) << when << ": the running agent's object is gone";
    EXPECT_EQ(*agent_object, agent_data);
  }
  int files_ = 0;
};

TEST_F(CasGcCrashTest, NothingHeldIsLostWhateverIsKilledWhen) {
  ASSERT_NO_FATAL_FAILURE(StartVault("gc", "", kQuickGc));
  if (IsSkipped()) return;
  std::mt19937_64 rng(Seed());
  // An agent that stores an object and runs for the whole test (resumed after each kill).
  const std::string agent_data = "the agent's own object, held while it runs";
  const std::string body = absl::StrCat(R"(
t("put", lambda: a.cas_put(b")",
                                        agent_data, R"("))
wait_for("/vault/pub/end", 600)
a.exit(0)
)");
  const std::string id =
      Spawn(Agent("holder", body, "(cas-write) (read \"/vault/pub\")", "(max-runtime 900)"));
  ASSERT_FALSE(id.empty());
  WaitLog(id, absl::StrCat("put 0 ", DigestText(agent_data)));

  std::map<std::string, ModelObject> model;
  for (int round = 0; round < 8; ++round) {
    // New objects: small ones (inline or packed) and a large one (chunked).
    std::vector<std::string> batch;
    const int n = 40 + static_cast<int>(rng() % 40);
    for (int i = 0; i < n; ++i) batch.push_back(RandomBytes(rng, 1 + rng() % 20000));
    batch.push_back(RandomBytes(rng, (5 << 20) + rng() % (3 << 20)));
    ASSERT_TRUE(PutAll(batch));
    for (const std::string& o : batch) {
      ModelObject& m = model[DigestText(o)];
      m.data = o;
      m.removed = false;
    }
    // Pins, unpins and removals on random objects the model says are stored.
    std::vector<std::string> digests;
    for (const auto& [d, o] : model) {
      if (!o.removed) digests.push_back(d);
    }
    for (int k = 0; k < 12; ++k) {
      const std::string& d = digests[rng() % digests.size()];
      ModelObject& o = model[d];
      switch (rng() % 3) {
        case 0: {
          RunResult r = Ctl({"cas", "pin", d});
          if (r.exit_code == kExitOk) o.pinned = true;
          // (An object a collection took before is not stored: NOT_FOUND, nothing pinned.)
          if (r.exit_code != kExitOk) {
            ASSERT_EQ(r.exit_code, kExitNotFound) << r;
          }
          break;
        }
        case 1: {
          RunResult r = Ctl({"cas", "unpin", d});
          if (r.exit_code == kExitOk) o.pinned = false;
          break;
        }
        default: {
          RunResult r = Ctl({"cas", "rm", d});
          if (o.pinned) {
            ASSERT_EQ(r.exit_code, kExitRefused) << r;
          } else {
            ASSERT_EQ(r.exit_code, kExitOk) << r;
            o.removed = true;
          }
        }
      }
    }
    // A collection, and a SIGKILL at a random moment of it (or of the compaction after it).
    absl::SleepFor(absl::Milliseconds(1100));  // past keep_unheld_seconds
    absl::StatusOr<std::unique_ptr<ChildProcess>> gc = ChildProcess::Spawn(
        {VaultctlPath(), "--vault", sock_, "cas", "gc"}, absl::StrCat(root(), "/gc.log"));
    ASSERT_TRUE(gc.ok()) << gc.status();
    absl::SleepFor(absl::Milliseconds(rng() % 2500));
    vaultd_->Kill();
    (*gc)->WaitExit(absl::Seconds(30));
    ASSERT_EQ(vaultd_->Start(), absl::OkStatus());
    ASSERT_NO_FATAL_FAILURE(CheckAgainstModel(model, DigestText(agent_data), agent_data,
                                              absl::StrCat("round ", round)));
    // What a collection may have taken (unpinned, unheld) is no longer the model's.
    for (auto& [d, o] : model) {
      if (!o.pinned && !o.removed && !Get(d).has_value()) o.removed = true;
    }
  }
  // The end: every pin goes but one, a last collection runs to its end.
  std::string kept;
  for (auto& [d, o] : model) {
    if (!o.pinned) continue;
    if (kept.empty()) {
      kept = d;
      continue;
    }
    ASSERT_EQ(Ctl({"cas", "unpin", d}).exit_code, kExitOk);
    o.pinned = false;
  }
  absl::SleepFor(absl::Milliseconds(1100));
  RunResult last = Ctl({"-o", "json", "cas", "gc"});
  ASSERT_EQ(last.exit_code, kExitOk) << last;
  ASSERT_NO_FATAL_FAILURE(CheckAgainstModel(model, DigestText(agent_data), agent_data, "the end"));
  // Left: the pinned object, and the agent's code and the object it stored.
  RunResult du = Ctl({"-o", "json", "cas", "du"});
  ASSERT_EQ(du.exit_code, kExitOk) << du;
  const uint64_t expect_objects = kept.empty() ? 2 : 3;
  EXPECT_EQ(JsonField(du.out, "objects"), absl::StrCat(expect_objects)) << du.out;
  EXPECT_EQ(JsonField(du.out, "pack_garbage_bytes"), "0") << du.out;
  uint64_t live = 0, packs = 0;
  ASSERT_TRUE(absl::SimpleAtoi(JsonField(du.out, "bytes").value_or(""), &live)) << du.out;
  for (const auto& e : std::filesystem::directory_iterator(vault_.data_dir + "/packs")) {
    packs += e.file_size();
  }
  // At most the live bytes, plus the 4 KiB alignment of each chunk of the one large object.
  EXPECT_LE(packs, live + (64 << 10)) << du.out;
  std::filesystem::create_directories(files_dir() + "/pub");
  ASSERT_TRUE(WriteFile(files_dir() + "/pub/end", "end").ok());
  EXPECT_EQ(JsonField(WaitEnded(id), "state"), "completed");
}

}  // namespace
}  // namespace vault::integration
