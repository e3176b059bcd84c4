// cas/collector: what is held stays, what nothing holds goes once older than the grace period,
// an operator's removal is refused while something holds the object, and a source that cannot
// list its roots stops the run before anything is removed.
#include "cas/collector.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "cas/store_test_fixture.h"

namespace vault::cas {
namespace {

using ::absl::StatusCode;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

class CollectorTest : public StoreTest {
 protected:
  void SetUp() override {
    StoreTest::SetUp();
    OpenPins();
  }
  void OpenPins() {
    absl::StatusOr<std::unique_ptr<Pins>> p = Pins::Open(db_.get(), store_.get());
    ASSERT_EQ(p.status(), absl::OkStatus());
    pins_ = std::move(*p);
  }
  void ReopenAll() {
    pins_.reset();
    ASSERT_NO_FATAL_FAILURE(Reopen());
    ASSERT_NO_FATAL_FAILURE(OpenPins());
  }
  std::vector<storage::ColumnFamilySpec> Families() override {
    std::vector<storage::ColumnFamilySpec> cfs = Store::ColumnFamilies();
    for (storage::ColumnFamilySpec& cf : Pins::ColumnFamilies()) cfs.push_back(cf);
    return cfs;
  }
  // A source that holds `held` and tracks `tracked`, and runs `during` while listed.
  RootSource Source(std::string name, std::vector<std::string> held,
                    std::vector<std::string> tracked = {}, std::function<void()> during = {}) {
    return {.name = std::move(name), .list = [=](RootSink& sink) {
              if (during) during();
              for (const std::string& h : held) sink.Hold(Digest::Of(h), "agent a-1 (" + h + ")");
              for (const std::string& t : tracked) sink.Track(Digest::Of(t));
              return absl::OkStatus();
            }};
  }
  bool Stored(absl::string_view data) { return store_->Contains(Digest::Of(data)).value_or(true); }
  std::unique_ptr<Pins> pins_;
};

TEST_F(CollectorTest, WhatNothingHoldsGoesOnceOlderThanTheGrace) {
  for (const char* o : {"pinned", "held", "tracked", "old"}) PutOk(o);
  ASSERT_EQ(pins_->Add({.digest = Digest::Of("pinned"), .reason = "release"}), absl::OkStatus());
  absl::SleepFor(absl::Milliseconds(300));
  PutOk("young");
  std::vector<std::string> refunded;
  std::vector<Digest> told;
  Collector gc(
      store_.get(), pins_.get(), {Source("agent", {"held"}, {"tracked", "held"})},
      {.also =
           [&](const Digest& d, rocksdb::WriteBatch*) {
             refunded.push_back(d.ToString());
             return absl::OkStatus();
           },
       .removed =
           [&](const std::vector<Digest>& d) { told.insert(told.end(), d.begin(), d.end()); }});
  absl::StatusOr<CollectReport> r = gc.Run({.grace = absl::Milliseconds(150)});
  ASSERT_EQ(r.status(), absl::OkStatus());
  EXPECT_EQ(r->objects, 5u);
  EXPECT_EQ(r->held, 2u);
  EXPECT_EQ(r->held_bytes, 6u + 4u);
  EXPECT_EQ(r->held_by, (std::map<std::string, uint64_t>{{"agent", 1}, {"pin", 1}}));
  EXPECT_EQ(r->young, 1u);
  EXPECT_EQ(r->removed, 2u);
  EXPECT_EQ(r->removed_bytes, 7u + 3u);
  EXPECT_EQ(r->kept_recent, 0u);
  EXPECT_TRUE(Stored("pinned"));
  EXPECT_TRUE(Stored("held"));
  EXPECT_TRUE(Stored("young"));
  EXPECT_FALSE(Stored("tracked"));
  EXPECT_FALSE(Stored("old"));
  // The removal's writes were asked for the tracked object alone.
  EXPECT_THAT(refunded, ElementsAre(Digest::Of("tracked").ToString()));
  EXPECT_THAT(told, ElementsAre(Digest::Of("tracked")));
  EXPECT_EQ(store_->totals().objects, 3u);
}

TEST_F(CollectorTest, ADryRunRemovesNothingAndListsWhatWouldGo) {
  PutOk("a");
  PutOk("b");
  PutOk("c");
  absl::SleepFor(absl::Milliseconds(50));
  Collector gc(store_.get(), pins_.get(), {Source("agent", {"b"})});
  absl::StatusOr<CollectReport> r =
      gc.Run({.dry_run = true, .grace = absl::Milliseconds(10), .list_limit = 1});
  ASSERT_EQ(r.status(), absl::OkStatus());
  EXPECT_TRUE(r->dry_run);
  EXPECT_EQ(r->removed, 2u);
  EXPECT_EQ(r->removed_bytes, 2u);
  ASSERT_EQ(r->listed.size(), 1u);
  EXPECT_TRUE(r->listed[0] == Digest::Of("a") || r->listed[0] == Digest::Of("c"));
  EXPECT_TRUE(Stored("a") && Stored("b") && Stored("c"));
}

TEST_F(CollectorTest, ARootThatAppearsDuringTheRunKeepsItsObject) {
  options_.confirm_after = absl::Milliseconds(10);
  ASSERT_NO_FATAL_FAILURE(ReopenAll());
  PutOk("put again");
  PutOk("pinned during");
  PutOk("left alone");
  absl::SleepFor(absl::Milliseconds(100));
  // While the roots are read (after the run noted its start), a client puts one object again
  // and an operator pins another: both are confirmed after the start.
  Collector gc(store_.get(), pins_.get(), {Source("agent", {}, {}, [&] {
                 PutOk("put again");
                 ASSERT_EQ(pins_->Add({.digest = Digest::Of("pinned during")}), absl::OkStatus());
               })});
  absl::StatusOr<CollectReport> r = gc.Run({.grace = absl::Milliseconds(50)});
  ASSERT_EQ(r.status(), absl::OkStatus());
  EXPECT_EQ(r->removed, 1u);
  EXPECT_EQ(r->kept_recent + r->young, 2u);
  EXPECT_TRUE(Stored("put again"));
  EXPECT_TRUE(Stored("pinned during"));
  EXPECT_FALSE(Stored("left alone"));
}

TEST_F(CollectorTest, ASourceThatFailsStopsTheRunBeforeAnyRemoval) {
  PutOk("unheld");
  absl::SleepFor(absl::Milliseconds(30));
  Collector gc(store_.get(), pins_.get(),
               {{.name = "image", .list = [](RootSink&) {
                   return absl::UnavailableError("images column family unreadable");
                 }}});
  absl::StatusOr<CollectReport> r = gc.Run({.grace = absl::Milliseconds(1)});
  EXPECT_EQ(r.status(), absl::UnavailableError("reading the roots of image failed, nothing was "
                                               "removed: images column family unreadable"));
  EXPECT_TRUE(Stored("unheld"));
  EXPECT_EQ(gc.RemoveUnheld(Digest::Of("unheld")).status().code(), StatusCode::kUnavailable);
  EXPECT_TRUE(Stored("unheld"));
}

TEST_F(CollectorTest, AnOperatorsRemovalIsRefusedWhileHeldAndIgnoresTheGrace) {
  PutOk("pinned");
  PutOk("held");
  PutOk("just stored");
  ASSERT_EQ(pins_->Add({.digest = Digest::Of("pinned"), .reason = "release 1.2"}),
            absl::OkStatus());
  Collector gc(store_.get(), pins_.get(), {Source("agent", {"held"})});
  absl::StatusOr<RemoveOutcome> pinned = gc.RemoveUnheld(Digest::Of("pinned"));
  EXPECT_EQ(pinned.status(),
            absl::FailedPreconditionError(absl::StrCat(
                "object ", Digest::Of("pinned").ToString(),
                " is held by pinned (release 1.2): it is removed once nothing holds it (vaultctl "
                "cas unpin ",
                Digest::Of("pinned").ToString(), ")")));
  absl::StatusOr<RemoveOutcome> held = gc.RemoveUnheld(Digest::Of("held"));
  EXPECT_EQ(held.status(),
            absl::FailedPreconditionError(
                absl::StrCat("object ", Digest::Of("held").ToString(),
                             " is held by agent a-1 (held): it is removed once nothing holds it")));
  absl::StatusOr<std::string> holder = gc.HolderOf(Digest::Of("held"));
  ASSERT_EQ(holder.status(), absl::OkStatus());
  EXPECT_EQ(*holder, "agent a-1 (held)");
  // Stored a moment ago and held by nothing: gone at once. (The cutoff is the removal's start,
  // in milliseconds: an object stored in that very millisecond would be kept.)
  absl::SleepFor(absl::Milliseconds(2));
  absl::StatusOr<RemoveOutcome> out = gc.RemoveUnheld(Digest::Of("just stored"));
  ASSERT_EQ(out.status(), absl::OkStatus());
  EXPECT_TRUE(out->removed);
  EXPECT_FALSE(Stored("just stored"));
  absl::StatusOr<RemoveOutcome> again = gc.RemoveUnheld(Digest::Of("just stored"));
  ASSERT_EQ(again.status(), absl::OkStatus());
  EXPECT_FALSE(again->removed);
  // Unpinned, the object goes.
  ASSERT_EQ(pins_->Remove(Digest::Of("pinned")), absl::OkStatus());
  ASSERT_EQ(gc.RemoveUnheld(Digest::Of("pinned")).status(), absl::OkStatus());
  EXPECT_FALSE(Stored("pinned"));
}

TEST_F(CollectorTest, ARunSweepsTheChunksOfWhatItRemoved) {
  const std::string large = RandomBytes(kThreshold * 3, 31);
  ASSERT_EQ(UploadWhole(large).status(), absl::OkStatus());
  absl::SleepFor(absl::Milliseconds(30));
  Collector gc(store_.get(), pins_.get(), {});
  absl::StatusOr<CollectReport> r = gc.Run({.grace = absl::Milliseconds(10)});
  ASSERT_EQ(r.status(), absl::OkStatus());
  EXPECT_EQ(r->removed, 1u);
  EXPECT_EQ(r->removed_bytes, large.size());
  EXPECT_GT(r->chunks.removed, 2u);
  EXPECT_EQ(r->chunks.removed, r->chunks.unreferenced);
  EXPECT_EQ(r->chunks.bytes, large.size());
  absl::StatusOr<ChunkSweep> after = store_->SweepChunks(true);
  ASSERT_EQ(after.status(), absl::OkStatus());
  EXPECT_EQ(after->chunks, 0u);
}

}  // namespace
}  // namespace vault::cas
