// The store's part of the CAS lifecycle (design §12): removals that leave recently stored or
// confirmed objects alone, the writes atomic with a removal, and the sweep of chunks that
// nothing names, which must never take a chunk an upload or a reader still needs.
#include <gmock/gmock.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "cas/store_test_fixture.h"

namespace vault::cas {
namespace {

using ::absl::StatusCode;

class SweepTest : public StoreTest {
 protected:
  std::vector<ChunkInfo> ChunksOf(const Digest& d) {
    std::vector<ChunkInfo> out;
    absl::StatusOr<std::unique_ptr<ObjectReader>> reader = store_->OpenReader(d);
    EXPECT_EQ(reader.status(), absl::OkStatus());
    if (!reader.ok()) return out;
    for (const auto& [sha256, size] : (*reader)->chunks()) out.push_back({sha256, size});
    return out;
  }
  size_t MissingChunks(const std::vector<ChunkInfo>& chunks) {
    absl::StatusOr<std::vector<ChunkInfo>> missing = store_->FindMissingChunks(chunks);
    EXPECT_EQ(missing.status(), absl::OkStatus());
    return missing.ok() ? missing->size() : 0;
  }
  ChunkSweep SweepOk(bool dry_run) {
    absl::StatusOr<ChunkSweep> sweep = store_->SweepChunks(dry_run);
    EXPECT_EQ(sweep.status(), absl::OkStatus());
    return sweep.ok() ? *sweep : ChunkSweep{};
  }
  void RemoveOk(const Digest& d) {
    absl::StatusOr<RemoveOutcome> out = store_->Remove(d);
    ASSERT_EQ(out.status(), absl::OkStatus());
    ASSERT_TRUE(out->removed);
  }
};

TEST_F(SweepTest, AConditionalRemoveKeepsWhatWasStoredSince) {
  const PutOutcome put = PutOk("young object");
  const Digest d = Digest::Of("young object");
  absl::StatusOr<RemoveOutcome> kept =
      store_->Remove(d, {.untouched_before = absl::Now() - absl::Hours(1)});
  ASSERT_EQ(kept.status(), absl::OkStatus());
  EXPECT_FALSE(kept->removed);
  EXPECT_TRUE(kept->kept_recent);
  EXPECT_EQ(ReadAllOk(d), "young object");
  EXPECT_EQ(store_->totals().objects, 1u);
  absl::StatusOr<RemoveOutcome> gone =
      store_->Remove(d, {.untouched_before = absl::Now() + absl::Seconds(1)});
  ASSERT_EQ(gone.status(), absl::OkStatus());
  EXPECT_TRUE(gone->removed);
  EXPECT_FALSE(gone->kept_recent);
  EXPECT_EQ(gone->seq, put.seq);
  EXPECT_EQ(store_->totals().objects, 0u);
}

TEST_F(SweepTest, APutOfAStoredObjectConfirmsItAgainstACollectionThatBeganBefore) {
  options_.confirm_after = absl::Milliseconds(20);
  ASSERT_NO_FATAL_FAILURE(Reopen());
  PutOk("confirmed again");
  PutOk("not confirmed");
  absl::SleepFor(absl::Milliseconds(60));
  const absl::Time collection_began = absl::Now();
  absl::SleepFor(absl::Milliseconds(5));
  // The put answers already_present and rewrites the record's confirmed time.
  const PutOutcome again = PutOk("confirmed again");
  EXPECT_TRUE(again.already_present);
  absl::StatusOr<ObjectInfo> info = store_->Stat(Digest::Of("confirmed again"));
  ASSERT_EQ(info.status(), absl::OkStatus());
  EXPECT_GE(info->confirmed_unix_ms, absl::ToUnixMillis(collection_began));
  EXPECT_LT(info->stored_unix_ms, absl::ToUnixMillis(collection_began));
  EXPECT_EQ(info->touched_unix_ms(), info->confirmed_unix_ms);
  // A second put soon after writes nothing more: the confirmed time stays.
  PutOk("confirmed again");
  absl::StatusOr<ObjectInfo> same = store_->Stat(Digest::Of("confirmed again"));
  ASSERT_EQ(same.status(), absl::OkStatus());
  EXPECT_EQ(same->confirmed_unix_ms, info->confirmed_unix_ms);
  ASSERT_NO_FATAL_FAILURE(Reopen());  // the confirmation is durable
  for (const char* o : {"confirmed again", "not confirmed"}) {
    absl::StatusOr<RemoveOutcome> out =
        store_->Remove(Digest::Of(o), {.untouched_before = collection_began});
    ASSERT_EQ(out.status(), absl::OkStatus());
    EXPECT_EQ(out->removed, std::string(o) == "not confirmed") << o;
  }
  EXPECT_EQ(ReadAllOk(Digest::Of("confirmed again")), "confirmed again");
  EXPECT_EQ(store_->ReadAll(Digest::Of("not confirmed")).status().code(), StatusCode::kNotFound);
}

TEST_F(SweepTest, TheWritesOfARemovalAreMadeOnlyWithIt) {
  PutOk("with a refund");
  const Digest d = Digest::Of("with a refund");
  int calls = 0;
  auto also = [&](const Digest& removed, rocksdb::WriteBatch* batch) -> absl::Status {
    EXPECT_EQ(removed, d);
    ++calls;
    batch->Put(db_->Handle("cas_uploads"), "marker", "refund");
    return absl::OkStatus();
  };
  // Kept: not called.
  ASSERT_EQ(
      store_->Remove(d, {.untouched_before = absl::Now() - absl::Hours(1), .also = also}).status(),
      absl::OkStatus());
  EXPECT_EQ(calls, 0);
  // Its error fails the removal alone, and the object stays.
  absl::StatusOr<RemoveOutcome> refused =
      store_->Remove(d, {.also = [](const Digest&, rocksdb::WriteBatch*) {
                       return absl::DataLossError("refund unreadable");
                     }});
  EXPECT_EQ(refused.status(), absl::DataLossError("refund unreadable"));
  EXPECT_EQ(ReadAllOk(d), "with a refund");
  // Removed: called once, its write made with the removal.
  absl::StatusOr<RemoveOutcome> out = store_->Remove(d, {.also = also});
  ASSERT_EQ(out.status(), absl::OkStatus());
  EXPECT_TRUE(out->removed);
  EXPECT_EQ(calls, 1);
  std::string marker;
  ASSERT_TRUE(
      db_->db()->Get(rocksdb::ReadOptions(), db_->Handle("cas_uploads"), "marker", &marker).ok());
  EXPECT_EQ(marker, "refund");
  // Not stored: not called.
  ASSERT_EQ(store_->Remove(d, {.also = also}).status(), absl::OkStatus());
  EXPECT_EQ(calls, 1);
}

TEST_F(SweepTest, ForEachObjectPageListsEveryObjectInKeyOrderWithItsTimes) {
  std::vector<std::string> keys;
  for (int i = 0; i < 7; ++i) {
    PutOk(absl::StrCat("object ", i));
    keys.push_back(Digest::Of(absl::StrCat("object ", i)).Key());
  }
  std::sort(keys.begin(), keys.end());
  std::vector<size_t> pages;
  std::vector<std::string> got;
  ASSERT_EQ(store_->ForEachObjectPage(4,
                                      [&](std::vector<ObjectInfo>& page) {
                                        pages.push_back(page.size());
                                        for (const ObjectInfo& info : page) {
                                          got.push_back(info.digest.Key());
                                          EXPECT_GT(info.stored_unix_ms, 0);
                                          EXPECT_EQ(info.confirmed_unix_ms, 0);
                                        }
                                        return absl::OkStatus();
                                      }),
            absl::OkStatus());
  EXPECT_EQ(pages, (std::vector<size_t>{4, 3}));
  EXPECT_EQ(got, keys);
  // The page's error ends the walk.
  int calls = 0;
  EXPECT_EQ(store_->ForEachObjectPage(2,
                                      [&](std::vector<ObjectInfo>&) {
                                        ++calls;
                                        return absl::CancelledError("stopping");
                                      }),
            absl::CancelledError("stopping"));
  EXPECT_EQ(calls, 1);
}

TEST_F(SweepTest, ASweepTakesTheChunksOfRemovedObjectsAndNothingElse) {
  const std::string gone = RandomBytes(kThreshold * 3, 21);
  const std::string kept = RandomBytes(kThreshold * 2 + 777, 22);
  ASSERT_EQ(UploadWhole(gone).status(), absl::OkStatus());
  ASSERT_EQ(UploadWhole(kept).status(), absl::OkStatus());
  const std::vector<ChunkInfo> gone_chunks = ChunksOf(Digest::Of(gone));
  const std::vector<ChunkInfo> kept_chunks = ChunksOf(Digest::Of(kept));
  ASSERT_GT(gone_chunks.size(), 2u);
  uint64_t gone_bytes = 0;
  for (const ChunkInfo& c : gone_chunks) gone_bytes += c.size;
  // With every object stored, nothing is unreferenced.
  ChunkSweep none = SweepOk(/*dry_run=*/false);
  EXPECT_EQ(none.chunks, gone_chunks.size() + kept_chunks.size());
  EXPECT_EQ(none.unreferenced, 0u);
  ASSERT_NO_FATAL_FAILURE(RemoveOk(Digest::Of(gone)));
  // A dry run counts and removes nothing.
  ChunkSweep dry = SweepOk(/*dry_run=*/true);
  EXPECT_EQ(dry.unreferenced, gone_chunks.size());
  EXPECT_EQ(dry.bytes, gone_bytes);
  EXPECT_EQ(dry.removed, 0u);
  EXPECT_EQ(MissingChunks(gone_chunks), 0u);
  ChunkSweep real = SweepOk(/*dry_run=*/false);
  EXPECT_EQ(real.removed, gone_chunks.size());
  EXPECT_EQ(MissingChunks(gone_chunks), gone_chunks.size());
  EXPECT_EQ(MissingChunks(kept_chunks), 0u);
  EXPECT_TRUE(SameBytes(ReadAllOk(Digest::Of(kept)), kept));
  // Stored again, the object gets its chunks back.
  ASSERT_EQ(UploadWhole(gone).status(), absl::OkStatus());
  EXPECT_TRUE(SameBytes(ReadAllOk(Digest::Of(gone)), gone));
  ASSERT_NO_FATAL_FAILURE(Reopen());
  EXPECT_EQ(SweepOk(false).unreferenced, 0u);
  EXPECT_TRUE(SameBytes(ReadAllOk(Digest::Of(gone)), gone));
}

TEST_F(SweepTest, ASweepKeepsTheChunksOfAnUploadDurableOrNot) {
  const std::string data = RandomBytes(kThreshold * 4, 23);
  const Digest d = Digest::Of(data);
  // The first half durable (in the upload's chunk list).
  absl::StatusOr<std::unique_ptr<Upload>> up = store_->StartUpload(d, 0);
  ASSERT_EQ(up.status(), absl::OkStatus());
  ASSERT_EQ(AppendInPieces(up->get(), data, 0, data.size() / 2, {65536}), absl::OkStatus());
  EXPECT_EQ(SweepOk(false).removed, 0u);
  ASSERT_EQ(AppendInPieces(up->get(), data, data.size() / 2, data.size(), {65536}),
            absl::OkStatus());
  ASSERT_EQ((*up)->Finish().status(), absl::OkStatus());
  const std::vector<ChunkInfo> chunks = ChunksOf(d);
  // Removed, its chunks are garbage; an upload of the same bytes then takes them as they are
  // (stored chunks are not written again), in no durable record while pack_sync_bytes is not
  // reached.
  ASSERT_NO_FATAL_FAILURE(RemoveOk(d));
  up->reset();
  options_.pack_sync_bytes = uint64_t{1} << 30;
  ASSERT_NO_FATAL_FAILURE(Reopen());
  up = store_->StartUpload(d, 0);
  ASSERT_EQ(up.status(), absl::OkStatus());
  ASSERT_EQ(AppendInPieces(up->get(), data, 0, data.size() - 1000, {65536}), absl::OkStatus());
  // Only the chunks not yet cut (the chunker holds the last bytes back) may go: taken again,
  // they are stored again.
  ChunkSweep sweep = SweepOk(false);
  EXPECT_EQ(sweep.unreferenced, chunks.size());
  EXPECT_LE(sweep.removed, 2u);
  EXPECT_EQ(MissingChunks(std::vector<ChunkInfo>(chunks.begin(), chunks.end() - 2)), 0u);
  ASSERT_EQ(AppendInPieces(up->get(), data, data.size() - 1000, data.size(), {65536}),
            absl::OkStatus());
  absl::StatusOr<PutOutcome> out = (*up)->Finish();
  ASSERT_EQ(out.status(), absl::OkStatus());
  EXPECT_TRUE(SameBytes(ReadAllOk(d), data));
  // An upload that stopped short keeps its durable part, and the sweep its chunks, for a resume.
  ASSERT_NO_FATAL_FAILURE(RemoveOk(d));
  up = store_->StartUpload(d, 0);
  ASSERT_EQ(up.status(), absl::OkStatus());
  ASSERT_EQ(AppendInPieces(up->get(), data, 0, data.size() / 2, {65536}), absl::OkStatus());
  EXPECT_EQ((*up)->Finish().status().code(), StatusCode::kFailedPrecondition);
  up->reset();
  const ChunkSweep after_stop = SweepOk(false);
  EXPECT_GT(after_stop.removed, 0u);  // those of the second half
  EXPECT_LT(after_stop.removed, chunks.size());
  absl::StatusOr<uint64_t> offset = store_->UploadOffset(d);
  ASSERT_EQ(offset.status(), absl::OkStatus());
  ASSERT_GT(*offset, 0u);
  up = store_->StartUpload(d, *offset);
  ASSERT_EQ(up.status(), absl::OkStatus());
  ASSERT_EQ(AppendInPieces(up->get(), data, *offset, data.size(), {65536}), absl::OkStatus());
  ASSERT_EQ((*up)->Finish().status(), absl::OkStatus());
  EXPECT_TRUE(SameBytes(ReadAllOk(d), data));
}

TEST_F(SweepTest, ChunksAnUploadWritesWhileASweepRunsAreKept) {
  const std::string data = RandomBytes(kThreshold * 4, 25);
  const Digest d = Digest::Of(data);
  ASSERT_EQ(UploadWhole(data).status(), absl::OkStatus());
  const std::vector<ChunkInfo> chunks = ChunksOf(d);
  ASSERT_NO_FATAL_FAILURE(RemoveOk(d));
  // Stored again: the upload takes the stored (unreferenced) chunks as they are. A few are
  // taken before the sweep begins and written (recorded in the upload's chunk list) while it
  // runs, after it read the records.
  options_.pack_sync_bytes = kThreshold;
  ASSERT_NO_FATAL_FAILURE(Reopen());
  absl::StatusOr<std::unique_ptr<Upload>> up = store_->StartUpload(d, 0);
  ASSERT_EQ(up.status(), absl::OkStatus());
  ASSERT_EQ(AppendInPieces(up->get(), data, 0, kThreshold / 2, {65536}), absl::OkStatus());
  bool appended = false;
  absl::StatusOr<ChunkSweep> sweep = store_->SweepChunks(false, [&]() -> absl::Status {
    if (!appended) {
      appended = true;
      EXPECT_EQ(AppendInPieces(up->get(), data, kThreshold / 2, kThreshold * 2, {65536}),
                absl::OkStatus());
    }
    return absl::OkStatus();
  });
  ASSERT_EQ(sweep.status(), absl::OkStatus());
  ASSERT_TRUE(appended);
  ASSERT_EQ(AppendInPieces(up->get(), data, kThreshold * 2, data.size(), {65536}),
            absl::OkStatus());
  ASSERT_EQ((*up)->Finish().status(), absl::OkStatus());
  EXPECT_TRUE(SameBytes(ReadAllOk(d), data));
  EXPECT_EQ(MissingChunks(chunks), 0u);
}

TEST_F(SweepTest, AnUploadOfAStoredObjectConfirmsIt) {
  const std::string data = RandomBytes(kThreshold * 2, 26);
  const Digest d = Digest::Of(data);
  ASSERT_EQ(UploadWhole(data).status(), absl::OkStatus());
  absl::SleepFor(absl::Milliseconds(20));
  const absl::Time began = absl::Now();
  absl::SleepFor(absl::Milliseconds(5));
  absl::StatusOr<PutOutcome> again = UploadWhole(data);
  ASSERT_EQ(again.status(), absl::OkStatus());
  EXPECT_TRUE(again->already_present);
  absl::StatusOr<RemoveOutcome> out = store_->Remove(d, {.untouched_before = began});
  ASSERT_EQ(out.status(), absl::OkStatus());
  EXPECT_TRUE(out->kept_recent);
  EXPECT_TRUE(SameBytes(ReadAllOk(d), data));
}

TEST_F(SweepTest, AReaderOpenedBeforeItsObjectWasRemovedReadsItToTheEnd) {
  const std::string data = RandomBytes(kThreshold * 3, 24);
  const Digest d = Digest::Of(data);
  ASSERT_EQ(UploadWhole(data).status(), absl::OkStatus());
  const std::vector<ChunkInfo> chunks = ChunksOf(d);
  absl::StatusOr<std::unique_ptr<ObjectReader>> reader = store_->OpenReader(d);
  ASSERT_EQ(reader.status(), absl::OkStatus());
  ASSERT_NO_FATAL_FAILURE(RemoveOk(d));
  ChunkSweep while_open = SweepOk(false);
  EXPECT_EQ(while_open.unreferenced, chunks.size());
  EXPECT_EQ(while_open.removed, 0u);
  std::string back;
  ASSERT_EQ((*reader)->Read(0, 0, 1 << 20,
                            [&](uint64_t, absl::string_view piece) {
                              back.append(piece.data(), piece.size());
                              return absl::OkStatus();
                            }),
            absl::OkStatus());
  EXPECT_TRUE(SameBytes(back, data));
  reader->reset();
  EXPECT_EQ(SweepOk(false).removed, chunks.size());
  EXPECT_EQ(MissingChunks(chunks), chunks.size());
  // A reader opened now finds the object gone.
  EXPECT_EQ(store_->OpenReader(d).status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace vault::cas
