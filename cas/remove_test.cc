// Store::Remove (design §12): an object's record, bytes entry and totals go in one write ordered
// with puts; its feed entry, chunks and pack bytes stay for collection.
#include <gmock/gmock.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cas/store_test_fixture.h"

namespace vault::cas {
namespace {

using ::absl::StatusCode;

class RemoveTest : public StoreTest {};

TEST_F(RemoveTest, RemoveTakesTheObjectAndItsShareOfTheTotals) {
  PutOk("kept");
  const PutOutcome gone = PutOk("removed object");
  ASSERT_EQ(store_->totals().objects, 2u);
  absl::StatusOr<RemoveOutcome> out = store_->Remove(Digest::Of("removed object"));
  ASSERT_EQ(out.status(), absl::OkStatus());
  EXPECT_TRUE(out->removed);
  EXPECT_EQ(out->seq, gone.seq);
  EXPECT_EQ(store_->Contains(Digest::Of("removed object")).value_or(true), false);
  EXPECT_EQ(store_->ReadAll(Digest::Of("removed object")).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store_->Stat(Digest::Of("removed object")).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store_->totals().objects, 1u);
  EXPECT_EQ(store_->totals().bytes, 4u);
  EXPECT_EQ(ReadAllOk(Digest::Of("kept")), "kept");
  // Its feed entry stays; a second Remove finds nothing.
  EXPECT_EQ(FeedSeqs(), (std::vector<uint64_t>{1, 2}));
  absl::StatusOr<RemoveOutcome> again = store_->Remove(Digest::Of("removed object"));
  ASSERT_EQ(again.status(), absl::OkStatus());
  EXPECT_FALSE(again->removed);
  EXPECT_EQ(store_->totals().objects, 1u);
  // Stored again, it is a new object with a new number.
  const PutOutcome back = PutOk("removed object");
  EXPECT_FALSE(back.already_present);
  EXPECT_EQ(back.seq, 3u);
  EXPECT_EQ(ReadAllOk(Digest::Of("removed object")), "removed object");
  EXPECT_EQ(store_->totals().objects, 2u);
  EXPECT_EQ(store_->totals().bytes, 4u + 14u);
}

TEST_F(RemoveTest, RemoveOfAPackedAndAChunkedObjectSurvivesAReopen) {
  const std::string packed = RandomBytes(64 << 10, 7);  // above pack_min_bytes: in a pack
  const std::string large = RandomBytes(kThreshold + 12345, 8);
  PutOk(packed);
  ASSERT_EQ(UploadWhole(large).status(), absl::OkStatus());
  PutOk("small");
  std::vector<ChunkInfo> chunks;
  {
    absl::StatusOr<std::unique_ptr<ObjectReader>> reader = store_->OpenReader(Digest::Of(large));
    ASSERT_EQ(reader.status(), absl::OkStatus());
    for (const auto& [sha256, size] : (*reader)->chunks()) chunks.push_back({sha256, size});
  }
  ASSERT_GT(chunks.size(), 1u);
  for (const std::string* o : {&packed, &large}) {
    absl::StatusOr<RemoveOutcome> out = store_->Remove(Digest::Of(*o));
    ASSERT_EQ(out.status(), absl::OkStatus());
    EXPECT_TRUE(out->removed);
  }
  ASSERT_NO_FATAL_FAILURE(Reopen());
  EXPECT_EQ(store_->ReadAll(Digest::Of(packed)).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store_->ReadAll(Digest::Of(large)).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store_->totals().objects, 1u);
  EXPECT_EQ(store_->totals().bytes, 5u);
  EXPECT_EQ(store_->last_seq(), 3u);
  // The chunks stayed (garbage until collected), so the object stored again reuses them.
  absl::StatusOr<std::vector<ChunkInfo>> chunks_missing = store_->FindMissingChunks(chunks);
  ASSERT_EQ(chunks_missing.status(), absl::OkStatus());
  EXPECT_TRUE(chunks_missing->empty());
  ASSERT_EQ(UploadWhole(large).status(), absl::OkStatus());
  EXPECT_TRUE(SameBytes(ReadAllOk(Digest::Of(large)), large));
  PutOk(packed);
  EXPECT_TRUE(SameBytes(ReadAllOk(Digest::Of(packed)), packed));
  EXPECT_EQ(store_->totals().objects, 3u);
  EXPECT_EQ(store_->totals().bytes, packed.size() + large.size() + 5u);
}

TEST_F(RemoveTest, RemoveAndPutInOneGroupApplyInOrder) {
  // Many threads put and remove the same few objects. Whatever the interleaving, every answer
  // is consistent with one order: a put that answers OK leaves the object readable until a
  // later remove; and the totals always equal what is stored.
  const std::vector<std::string> objects = {"one", "two", "three"};
  std::atomic<bool> bad{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 300; ++i) {
        const std::string& o = objects[(t + i) % objects.size()];
        if ((i + t) % 2 == 0) {
          if (!store_->Put(Digest::Of(o), o).ok()) bad = true;
        } else {
          if (!store_->Remove(Digest::Of(o)).ok()) bad = true;
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  ASSERT_FALSE(bad);
  uint64_t objects_stored = 0, bytes_stored = 0;
  for (const std::string& o : objects) {
    if (store_->Contains(Digest::Of(o)).value_or(false)) {
      ++objects_stored;
      bytes_stored += o.size();
      EXPECT_EQ(ReadAllOk(Digest::Of(o)), o);
    }
  }
  EXPECT_EQ(store_->totals().objects, objects_stored);
  EXPECT_EQ(store_->totals().bytes, bytes_stored);
  ASSERT_NO_FATAL_FAILURE(Reopen());
  EXPECT_EQ(store_->totals().objects, objects_stored);
  EXPECT_EQ(store_->totals().bytes, bytes_stored);
  // Put after the last remove: stored.
  for (const std::string& o : objects) {
    ASSERT_EQ(store_->Put(Digest::Of(o), o).status(), absl::OkStatus());
    EXPECT_EQ(ReadAllOk(Digest::Of(o)), o);
  }
  EXPECT_EQ(store_->totals().objects, 3u);
}

TEST_F(RemoveTest, APutAndARemoveOfTheSameObjectInOneBatchFollowEachOther) {
  // Through the group commit directly: PutMany's items land in one group, and a Remove from
  // another thread may join it; the totals follow each op in turn.
  PutOk("x1");
  std::thread remover(
      [&] { EXPECT_EQ(store_->Remove(Digest::Of("x1")).status(), absl::OkStatus()); });
  std::vector<absl::StatusOr<PutOutcome>> out =
      store_->PutMany({PutItem{Digest::Of("x1"), "x1"}, PutItem{Digest::Of("x2"), "x2"}});
  remover.join();
  for (const auto& r : out) ASSERT_EQ(r.status(), absl::OkStatus());
  const bool x1 = store_->Contains(Digest::Of("x1")).value_or(false);
  EXPECT_EQ(store_->totals().objects, x1 ? 2u : 1u);
  EXPECT_EQ(store_->totals().bytes, x1 ? 4u : 2u);
}

TEST_F(RemoveTest, RemoveRefusesAMalformedDigest) {
  // Larger than the vault's limit: no such object can be stored, and the answer says why.
  absl::StatusOr<Digest> huge =
      Digest::FromParts(std::string(32, 'a'), store_->options().max_object_bytes + 1);
  ASSERT_EQ(huge.status(), absl::OkStatus());
  absl::Status s = store_->Remove(*huge).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("is larger than the vault's limit"));
}

}  // namespace
}  // namespace vault::cas
