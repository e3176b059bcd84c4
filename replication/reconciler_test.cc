// The Reconciler against a real Cas service (in process) over a second real store: it finds
// exactly the objects each side lacks, in few round trips, and copies them both ways.
#include "replication/reconciler.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "audit/log.h"
#include "capability/principal.h"
#include "common/executor.h"
#include "common/testing/temp_dir.h"
#include "gtest/gtest.h"
#include "node/auditor.h"
#include "node/cas_service.h"
#include "storage/database.h"

namespace vault::replication {
namespace {

// A store in a directory of its own.
struct Vault {
  explicit Vault(const std::string& name) : tmp(name) {
    std::vector<storage::ColumnFamilySpec> cfs = cas::Store::ColumnFamilies();
    for (storage::ColumnFamilySpec& cf : audit::LogStore::ColumnFamilies()) cfs.push_back(cf);
    db = *storage::Database::Open(
        {.path = tmp.path() + "/db", .sync_writes = false, .block_cache_mb = 8}, cfs);
    store = *cas::Store::Open(db.get(), cas::StoreOptions{});
  }
  std::vector<cas::Digest> All() const {
    absl::StatusOr<cas::RangeSummary> s = store->RangeFingerprint("", "", UINT64_MAX);
    EXPECT_TRUE(s.ok()) << s.status();
    return s->digests;
  }
  common::testing::TempDir tmp;
  std::unique_ptr<storage::Database> db;
  std::unique_ptr<cas::Store> store;
};

class ReconcilerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    key_ = std::make_unique<capability::PrivateKey>(*capability::PrivateKey::Generate());
    log_ = *audit::AuditLog::Open(peer_.db.get(), key_.get(),
                                  {.vault_name = "peer", .background_checkpoints = false});
    auditor_ = std::make_unique<node::Auditor>(log_.get(), vault::v1::VaultConfig(),
                                               key_->public_key().ToText());
    executor_ = std::make_unique<common::Executor>(/*threads=*/2, /*max_queue=*/256);
    service_ = std::make_unique<node::CasService>(peer_.store.get(), executor_.get(),
                                                  node::CasLimits{}, auditor_.get());
    grpc::ServerBuilder builder;
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    channel_ = server_->InProcessChannel(grpc::ChannelArguments());
  }
  void TearDown() override {
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
    server_->Wait();
    executor_->Shutdown();
  }

  // `n` distinct objects of 1..200 bytes.
  std::vector<std::string> Objects(size_t n) {
    std::vector<std::string> out;
    for (size_t i = 0; i < n; ++i) {
      std::string o = absl::StrCat("object ", next_++, " ");
      o.resize(o.size() + rng_() % 180, static_cast<char>('a' + rng_() % 26));
      out.push_back(std::move(o));
    }
    return out;
  }
  static void PutAll(cas::Store* store, const std::vector<std::string>& objects) {
    std::vector<cas::PutItem> items;
    for (const std::string& o : objects) {
      if (o.size() < store->options().chunking_threshold) {
        items.push_back({cas::Digest::Of(o), o});
        continue;
      }
      absl::StatusOr<std::unique_ptr<cas::Upload>> up = store->StartUpload(cas::Digest::Of(o), 0);
      ASSERT_TRUE(up.ok()) << up.status();
      ASSERT_EQ((*up)->Append(o), absl::OkStatus());
      ASSERT_TRUE((*up)->Finish().ok());
    }
    for (const auto& r : store->PutMany(items)) ASSERT_TRUE(r.ok()) << r.status();
  }
  static std::vector<cas::Digest> Sorted(const std::vector<std::string>& objects) {
    std::vector<cas::Digest> out;
    for (const std::string& o : objects) out.push_back(cas::Digest::Of(o));
    std::sort(out.begin(), out.end(),
              [](const cas::Digest& a, const cas::Digest& b) { return a.Key() < b.Key(); });
    return out;
  }
  static std::vector<cas::Digest> SortedDigests(std::vector<cas::Digest> v) {
    std::sort(v.begin(), v.end(),
              [](const cas::Digest& a, const cas::Digest& b) { return a.Key() < b.Key(); });
    return v;
  }

  Vault local_{"reconcile_local"};
  Vault peer_{"reconcile_peer"};
  std::unique_ptr<capability::PrivateKey> key_;
  std::unique_ptr<audit::AuditLog> log_;
  std::unique_ptr<node::Auditor> auditor_;
  std::unique_ptr<common::Executor> executor_;
  std::unique_ptr<node::CasService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::mt19937_64 rng_{7};
  int next_ = 0;
};

TEST_F(ReconcilerTest, EqualStoresCostOneRoundTrip) {
  std::vector<std::string> shared = Objects(3000);
  PutAll(local_.store.get(), shared);
  PutAll(peer_.store.get(), shared);
  Reconciler r(local_.store.get(), channel_, "peer", ReconcileOptions{});
  absl::StatusOr<ReconcileStats> stats = r.Compare();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->round_trips, 1u);
  EXPECT_EQ(stats->ranges_compared, 1u);
  EXPECT_TRUE(stats->missing_here.empty());
  EXPECT_TRUE(stats->missing_there.empty());
}

TEST_F(ReconcilerTest, EmptyStoresAgree) {
  Reconciler r(local_.store.get(), channel_, "peer", ReconcileOptions{});
  absl::StatusOr<ReconcileStats> stats = r.Run(nullptr);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->round_trips, 1u);
  EXPECT_TRUE(stats->missing_here.empty() && stats->missing_there.empty());
}

TEST_F(ReconcilerTest, FindsExactlyWhatEachSideLacks) {
  std::vector<std::string> shared = Objects(20000), only_local = Objects(7), only_peer = Objects(5);
  PutAll(local_.store.get(), shared);
  PutAll(peer_.store.get(), shared);
  PutAll(local_.store.get(), only_local);
  PutAll(peer_.store.get(), only_peer);
  Reconciler r(local_.store.get(), channel_, "peer", ReconcileOptions{.dry_run = true});
  absl::StatusOr<ReconcileStats> stats = r.Run(nullptr);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(SortedDigests(stats->missing_there), Sorted(only_local));
  EXPECT_EQ(SortedDigests(stats->missing_here), Sorted(only_peer));
  // 12 differences among 20,000: a handful of calls, a few hundred ranges, not a listing.
  EXPECT_LE(stats->round_trips, 5u);
  EXPECT_LE(stats->ranges_compared, 1 + 256 + 12 * 16u);
  EXPECT_LT(stats->wire_bytes, 20000u * 40 / 10);
  // Dry run: nothing copied.
  EXPECT_EQ(local_.All().size(), 20007u);
  EXPECT_EQ(peer_.All().size(), 20005u);
}

TEST_F(ReconcilerTest, CopiesBothWaysUntilTheStoresAreEqual) {
  std::vector<std::string> shared = Objects(2000), only_local = Objects(300),
                           only_peer = Objects(200);
  // Large objects on each side too (streamed, chunked).
  std::string big_local(5 << 20, 'x'), big_peer(6 << 20, 'y');
  for (size_t i = 0; i < big_local.size(); i += 4096) big_local[i] = static_cast<char>(rng_());
  for (size_t i = 0; i < big_peer.size(); i += 4096) big_peer[i] = static_cast<char>(rng_());
  only_local.push_back(big_local);
  only_peer.push_back(big_peer);
  PutAll(local_.store.get(), shared);
  PutAll(peer_.store.get(), shared);
  PutAll(local_.store.get(), only_local);
  PutAll(peer_.store.get(), only_peer);

  Reconciler r(local_.store.get(), channel_, "peer", ReconcileOptions{});
  absl::StatusOr<ReconcileStats> stats = r.Run(nullptr);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->missing_there.size(), only_local.size());
  EXPECT_EQ(stats->missing_here.size(), only_peer.size());
  EXPECT_EQ(stats->pushed.objects, only_local.size());
  EXPECT_EQ(stats->pulled_objects, only_peer.size());
  EXPECT_EQ(stats->pull_refused, 0u);
  EXPECT_EQ(local_.All(), peer_.All());
  EXPECT_EQ(local_.All().size(), shared.size() + only_local.size() + only_peer.size());
  absl::StatusOr<std::string> back = local_.store->ReadAll(cas::Digest::Of(big_peer));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(*back == big_peer);

  Reconciler again(local_.store.get(), channel_, "peer", ReconcileOptions{});
  stats = again.Run(nullptr);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->round_trips, 1u);
  EXPECT_TRUE(stats->missing_here.empty() && stats->missing_there.empty());
}

TEST_F(ReconcilerTest, OneSidedModesCopyOnlyThatWay) {
  std::vector<std::string> only_local = Objects(50), only_peer = Objects(40);
  PutAll(local_.store.get(), only_local);
  PutAll(peer_.store.get(), only_peer);
  Reconciler pull(local_.store.get(), channel_, "peer",
                  ReconcileOptions{.pull = true, .push = false});
  absl::StatusOr<ReconcileStats> stats = pull.Run(nullptr);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->pulled_objects, 40u);
  EXPECT_EQ(stats->pushed.objects, 0u);
  EXPECT_EQ(local_.All().size(), 90u);
  EXPECT_EQ(peer_.All().size(), 40u);
}

// With a size selection (as a follow's), only the differing objects within it are reported and
// copied, both ways; the bounds are inclusive; the rest are counted as not selected.
TEST_F(ReconcilerTest, SelectionCopiesOnlyObjectsWithinTheSizeRange) {
  std::vector<std::string> only_local = Objects(80), only_peer = Objects(70);
  // Objects at the bounds and just outside them, on each side.
  for (size_t size : {49, 50, 120, 121}) {
    only_local.push_back(absl::StrCat("local edge ", size, " "));
    only_local.back().resize(size, 'l');
    only_peer.push_back(absl::StrCat("peer edge ", size, " "));
    only_peer.back().resize(size, 'p');
  }
  const std::vector<std::string> shared = Objects(500);
  PutAll(local_.store.get(), shared);
  PutAll(peer_.store.get(), shared);
  PutAll(local_.store.get(), only_local);
  PutAll(peer_.store.get(), only_peer);
  auto selected = [](const std::vector<std::string>& objects) {
    std::vector<std::string> out;
    for (const std::string& o : objects) {
      if (o.size() >= 50 && o.size() <= 120) out.push_back(o);
    }
    return out;
  };
  const std::vector<std::string> local_selected = selected(only_local),
                                 peer_selected = selected(only_peer);
  ASSERT_GT(local_selected.size(), 2u);
  ASSERT_LT(local_selected.size(), only_local.size() - 2);
  ASSERT_GT(peer_selected.size(), 2u);
  ASSERT_LT(peer_selected.size(), only_peer.size() - 2);

  Reconciler dry(local_.store.get(), channel_, "peer",
                 ReconcileOptions{.dry_run = true, .min_bytes = 50, .max_bytes = 120});
  absl::StatusOr<ReconcileStats> stats = dry.Run(nullptr);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(SortedDigests(stats->missing_there), Sorted(local_selected));
  EXPECT_EQ(SortedDigests(stats->missing_here), Sorted(peer_selected));
  EXPECT_EQ(stats->not_selected,
            only_local.size() + only_peer.size() - local_selected.size() - peer_selected.size());

  Reconciler r(local_.store.get(), channel_, "peer",
               ReconcileOptions{.min_bytes = 50, .max_bytes = 120});
  stats = r.Run(nullptr);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->pushed.objects, local_selected.size());
  EXPECT_EQ(stats->pulled_objects, peer_selected.size());
  std::vector<std::string> want_local = shared, want_peer = shared;
  want_local.insert(want_local.end(), only_local.begin(), only_local.end());
  want_local.insert(want_local.end(), peer_selected.begin(), peer_selected.end());
  want_peer.insert(want_peer.end(), only_peer.begin(), only_peer.end());
  want_peer.insert(want_peer.end(), local_selected.begin(), local_selected.end());
  EXPECT_EQ(local_.All(), Sorted(want_local));
  EXPECT_EQ(peer_.All(), Sorted(want_peer));

  // A lower bound alone (max_bytes 0: no upper bound) takes the rest above it.
  Reconciler above(local_.store.get(), channel_, "peer",
                   ReconcileOptions{.dry_run = true, .min_bytes = 121});
  stats = above.Run(nullptr);
  ASSERT_TRUE(stats.ok()) << stats.status();
  for (const cas::Digest& d : stats->missing_here) EXPECT_GE(d.size(), 121u);
  for (const cas::Digest& d : stats->missing_there) EXPECT_GE(d.size(), 121u);
  EXPECT_FALSE(stats->missing_here.empty());
  EXPECT_FALSE(stats->missing_there.empty());

  // An empty range is refused before anything is compared.
  Reconciler bad(local_.store.get(), channel_, "peer",
                 ReconcileOptions{.min_bytes = 121, .max_bytes = 120});
  stats = bad.Run(nullptr);
  EXPECT_EQ(stats.status().code(), absl::StatusCode::kInvalidArgument) << stats.status();
}

}  // namespace
}  // namespace vault::replication
