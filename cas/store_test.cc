#include "cas/store_test_fixture.h"

namespace vault::cas {
namespace {

// ---- Open -------------------------------------------------------------------------------------

TEST_F(StoreTest, OpenRefusesBadChunkingOptions) {
  StoreOptions bad = options_;
  bad.chunk_avg_bytes = 100000;
  EXPECT_EQ(Store::Open(db_.get(), bad).status().code(), StatusCode::kInvalidArgument);
  bad = options_;
  bad.chunking_threshold = 4 * kAvg - 1;  // below the largest chunk
  EXPECT_EQ(Store::Open(db_.get(), bad).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(StoreTest, FreshStoreIsEmpty) {
  EXPECT_EQ(store_->last_seq(), 0u);
  EXPECT_EQ(FeedSeqs(), std::vector<uint64_t>{});
  EXPECT_EQ(store_->totals().objects, 0u);
  EXPECT_EQ(store_->totals().bytes, 0u);
}

// ---- Put ---------------------------------------------------------------------------------------

TEST_F(StoreTest, PutThenReadAllReturnsExactBytes) {
  const std::vector<std::string> objects = {"", "a", std::string("\0\xff\0binary\n", 10),
                                            RandomBytes(65536, 1), RandomBytes(kThreshold - 1, 2)};
  uint64_t seq = 0;
  for (const std::string& data : objects) {
    PutOutcome out = PutOk(data);
    EXPECT_EQ(out.seq, ++seq);
    EXPECT_FALSE(out.already_present);
  }
  for (const std::string& data : objects) {
    absl::StatusOr<std::string> back = store_->ReadAll(Digest::Of(data));
    ASSERT_EQ(back.status(), absl::OkStatus());
    EXPECT_TRUE(SameBytes(*back, data));
  }
  EXPECT_EQ(store_->last_seq(), objects.size());
}

TEST_F(StoreTest, PutWithWrongHashIsRefusedAndNothingStored) {
  const Digest claimed = Digest::Of("hellp");
  absl::StatusOr<PutOutcome> out = store_->Put(claimed, "hello");
  EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument) << out.status();
  absl::StatusOr<std::vector<Digest>> missing = store_->FindMissing({claimed, Digest::Of("hello")});
  ASSERT_EQ(missing.status(), absl::OkStatus());
  EXPECT_EQ(*missing, (std::vector<Digest>{claimed, Digest::Of("hello")}));
  EXPECT_EQ(store_->last_seq(), 0u);
  EXPECT_EQ(FeedSeqs(), std::vector<uint64_t>{});
  EXPECT_EQ(store_->Contains(claimed).value_or(true), false);
  EXPECT_EQ(store_->totals().objects, 0u);
  EXPECT_EQ(CountRows("cas_data"), 0u);
  // The next valid object still gets sequence number 1.
  EXPECT_EQ(PutOk("hello").seq, 1u);
}

TEST_F(StoreTest, PutWithWrongSizeIsRefused) {
  absl::StatusOr<Digest> longer = Digest::FromParts(Sha256::Hash("hello"), 6);
  ASSERT_EQ(longer.status(), absl::OkStatus());
  EXPECT_EQ(store_->Put(*longer, "hello").status().code(), StatusCode::kInvalidArgument);
  absl::StatusOr<Digest> shorter = Digest::FromParts(Sha256::Hash("hello"), 4);
  ASSERT_EQ(shorter.status(), absl::OkStatus());
  EXPECT_EQ(store_->Put(*shorter, "hello").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->last_seq(), 0u);
  EXPECT_EQ(store_->Contains(Digest::Of("hello")).value_or(true), false);
}

TEST_F(StoreTest, PutAtChunkingThresholdMustStream) {
  const std::string data = RandomBytes(kThreshold, 3);
  EXPECT_EQ(store_->Put(Digest::Of(data), data).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->last_seq(), 0u);
}

TEST_F(StoreTest, DuplicatePutIsAlreadyPresentWithOriginalSeq) {
  EXPECT_EQ(PutOk("first").seq, 1u);
  EXPECT_EQ(PutOk("second").seq, 2u);
  PutOutcome again = PutOk("first");
  EXPECT_EQ(again.seq, 1u);
  EXPECT_TRUE(again.already_present);
  EXPECT_EQ(store_->last_seq(), 2u);
  EXPECT_EQ(FeedSeqs(), (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(store_->totals().objects, 2u);
  EXPECT_EQ(store_->totals().bytes, 11u);
}

TEST_F(StoreTest, PutManyDeduplicatesWithinOneBatch) {
  const std::string a = "alpha", b = "bravo", c = "charlie";
  const std::vector<PutItem> items = {{Digest::Of(a), a}, {Digest::Of(b), b},
                                      {Digest::Of(a), a}, {Digest::Of("x"), "y"},  // wrong hash
                                      {Digest::Of(c), c}, {Digest::Of(b), b}};
  std::vector<absl::StatusOr<PutOutcome>> out = store_->PutMany(items);
  ASSERT_EQ(out.size(), items.size());
  for (size_t i : {0, 1, 2, 4, 5}) ASSERT_EQ(out[i].status(), absl::OkStatus()) << i;
  EXPECT_EQ(out[0]->seq, 1u);
  EXPECT_FALSE(out[0]->already_present);
  EXPECT_EQ(out[1]->seq, 2u);
  EXPECT_FALSE(out[1]->already_present);
  EXPECT_EQ(out[2]->seq, 1u);
  EXPECT_TRUE(out[2]->already_present);
  EXPECT_EQ(out[3].status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(out[4]->seq, 3u);
  EXPECT_FALSE(out[4]->already_present);
  EXPECT_EQ(out[5]->seq, 2u);
  EXPECT_TRUE(out[5]->already_present);
  EXPECT_EQ(FeedSeqs(), (std::vector<uint64_t>{1, 2, 3}));
  EXPECT_EQ(store_->totals().objects, 3u);
  EXPECT_EQ(store_->totals().bytes, a.size() + b.size() + c.size());
}

TEST_F(StoreTest, PutManyAllInvalidWritesNothing) {
  std::vector<absl::StatusOr<PutOutcome>> out =
      store_->PutMany({PutItem{Digest::Of("x"), "y"}, PutItem{Digest::Of("zz"), "z"}});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(out[1].status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(store_->PutMany({}).empty());
  EXPECT_EQ(store_->last_seq(), 0u);
}

TEST_F(StoreTest, TotalsCountDistinctObjectsAndBytes) {
  PutOk("1234");
  PutOk("1234");
  PutOk("123456789");
  ASSERT_EQ(UploadWhole(RandomBytes(kThreshold + 1, 4)).status(), absl::OkStatus());
  EXPECT_EQ(store_->totals().objects, 3u);
  EXPECT_EQ(store_->totals().bytes, 4u + 9u + kThreshold + 1);
}

TEST_F(StoreTest, MaxObjectBytesEnforced) {
  options_.max_object_bytes = 1000;
  ASSERT_NO_FATAL_FAILURE(Reopen());
  const std::string at_limit = RandomBytes(1000, 5);
  const std::string over = RandomBytes(1001, 6);
  EXPECT_EQ(PutOk(at_limit).seq, 1u);
  EXPECT_EQ(store_->Put(Digest::Of(over), over).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->StartUpload(Digest::Of(over), 0).status().code(), StatusCode::kInvalidArgument);
  std::vector<absl::StatusOr<PutOutcome>> many =
      store_->PutMany({PutItem{Digest::Of(over), over}, PutItem{Digest::Of("ok"), "ok"}});
  EXPECT_EQ(many[0].status().code(), StatusCode::kInvalidArgument);
  ASSERT_EQ(many[1].status(), absl::OkStatus());
  EXPECT_EQ(many[1]->seq, 2u);
  EXPECT_EQ(store_->last_seq(), 2u);
}

// ---- Feed
// ----------------------------------------------------------------------------------------

TEST_F(StoreTest, FeedHasContiguousSeqsAndPages) {
  std::vector<Digest> digests;
  const int64_t before = absl::ToUnixMillis(absl::Now());
  for (int i = 0; i < 10; ++i) {
    std::string data = absl::StrCat("object ", i);
    digests.push_back(Digest::Of(data));
    EXPECT_EQ(PutOk(data).seq, static_cast<uint64_t>(i + 1));
  }
  const int64_t after = absl::ToUnixMillis(absl::Now());

  absl::StatusOr<std::vector<FeedItem>> all = store_->ReadFeed(0, 0);
  ASSERT_EQ(all.status(), absl::OkStatus());
  ASSERT_EQ(all->size(), 10u);
  for (size_t i = 0; i < 10; ++i) {
    EXPECT_EQ((*all)[i].seq, i + 1);
    EXPECT_EQ((*all)[i].digest, digests[i]);
    EXPECT_GE((*all)[i].stored_unix_ms, before);
    EXPECT_LE((*all)[i].stored_unix_ms, after);
    absl::StatusOr<ObjectInfo> info = store_->Stat(digests[i]);
    ASSERT_EQ(info.status(), absl::OkStatus());
    EXPECT_EQ(info->stored_unix_ms, (*all)[i].stored_unix_ms);
  }

  std::vector<uint64_t> paged;
  uint64_t cursor = 0;
  int pages = 0;
  while (true) {
    absl::StatusOr<std::vector<FeedItem>> page = store_->ReadFeed(cursor, 3);
    ASSERT_EQ(page.status(), absl::OkStatus());
    if (page->empty()) break;
    EXPECT_LE(page->size(), 3u);
    ++pages;
    for (const FeedItem& item : *page) paged.push_back(item.seq);
    cursor = page->back().seq;
  }
  EXPECT_EQ(pages, 4);
  EXPECT_EQ(paged, Range(1, 10));

  absl::StatusOr<std::vector<FeedItem>> tail = store_->ReadFeed(7, 100);
  ASSERT_EQ(tail.status(), absl::OkStatus());
  ASSERT_EQ(tail->size(), 3u);
  EXPECT_EQ((*tail)[0].seq, 8u);
  EXPECT_EQ((*tail)[0].digest, digests[7]);
  EXPECT_EQ(store_->ReadFeed(10, 0)->size(), 0u);
  EXPECT_EQ(store_->ReadFeed(1000, 0)->size(), 0u);
  EXPECT_EQ(store_->ReadFeed(0, 1)->size(), 1u);
}

// Regression: after_seq + 1 overflowed to 0 and the whole feed came back.
TEST_F(StoreTest, ReadFeedAfterMaxSeqIsEmpty) {
  PutOk("a");
  PutOk("b");
  absl::StatusOr<std::vector<FeedItem>> feed = store_->ReadFeed(UINT64_MAX, 0);
  ASSERT_EQ(feed.status(), absl::OkStatus());
  EXPECT_EQ(feed->size(), 0u);
}

TEST_F(StoreTest, ConcurrentPutsGetEachSeqExactlyOnce) {
  constexpr int kThreads = 8;
  constexpr int kPerThread = 200;
  std::vector<std::vector<std::pair<Digest, PutOutcome>>> results(kThreads);
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        std::string data = absl::StrCat("thread ", t, " object ", i);
        absl::StatusOr<PutOutcome> out = store_->Put(Digest::Of(data), data);
        if (!out.ok() || out->already_present) {
          errors.fetch_add(1);
          continue;
        }
        results[t].emplace_back(Digest::Of(data), *out);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  ASSERT_EQ(errors.load(), 0);

  constexpr uint64_t kTotal = kThreads * kPerThread;
  absl::flat_hash_map<uint64_t, Digest> by_seq;
  for (const auto& per_thread : results) {
    uint64_t previous = 0;
    for (const auto& [digest, out] : per_thread) {
      EXPECT_TRUE(by_seq.emplace(out.seq, digest).second) << "seq " << out.seq << " given twice";
      EXPECT_GT(out.seq, previous) << "one thread's puts must get increasing seqs";
      previous = out.seq;
    }
  }
  EXPECT_EQ(by_seq.size(), kTotal);

  absl::StatusOr<std::vector<FeedItem>> feed = store_->ReadFeed(0, 0);
  ASSERT_EQ(feed.status(), absl::OkStatus());
  ASSERT_EQ(feed->size(), kTotal);
  absl::flat_hash_set<Digest> feed_digests;
  for (size_t i = 0; i < feed->size(); ++i) {
    const FeedItem& item = (*feed)[i];
    EXPECT_EQ(item.seq, i + 1);
    EXPECT_TRUE(feed_digests.insert(item.digest).second);
    auto it = by_seq.find(item.seq);
    ASSERT_NE(it, by_seq.end());
    EXPECT_EQ(item.digest, it->second);
  }
  EXPECT_EQ(store_->last_seq(), kTotal);
  EXPECT_EQ(store_->totals().objects, kTotal);
  for (const auto& [seq, digest] : by_seq) {
    absl::StatusOr<ObjectInfo> info = store_->Stat(digest);
    ASSERT_EQ(info.status(), absl::OkStatus());
    EXPECT_EQ(info->seq, seq);
  }
}

TEST_F(StoreTest, ConcurrentPutsOfTheSameObjectsStoreEachOnce) {
  constexpr int kThreads = 8;
  constexpr int kObjects = 50;
  std::vector<std::vector<PutOutcome>> outs(kThreads, std::vector<PutOutcome>(kObjects));
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kObjects; ++i) {
        std::string data = absl::StrCat("shared ", i);
        absl::StatusOr<PutOutcome> out = store_->Put(Digest::Of(data), data);
        if (out.ok()) outs[t][i] = *out;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < kObjects; ++i) {
    int stored = 0;
    for (int t = 0; t < kThreads; ++t) {
      EXPECT_NE(outs[t][i].seq, 0u);
      EXPECT_EQ(outs[t][i].seq, outs[0][i].seq) << "object " << i;
      if (!outs[t][i].already_present) ++stored;
    }
    EXPECT_EQ(stored, 1) << "object " << i;
  }
  EXPECT_EQ(FeedSeqs(), Range(1, kObjects));
  EXPECT_EQ(store_->totals().objects, static_cast<uint64_t>(kObjects));
}

// ---- FindMissing, Stat, Contains ---------------------------------------------------------------

TEST_F(StoreTest, FindMissingKeepsInputOrderWithoutDuplicates) {
  const Digest a = Digest::Of("a"), b = Digest::Of("b"), c = Digest::Of("c"), d = Digest::Of("d"),
               e = Digest::Of("e");
  PutOk("b");
  PutOk("d");
  absl::StatusOr<std::vector<Digest>> missing = store_->FindMissing({e, a, b, c, a, d, e, c});
  ASSERT_EQ(missing.status(), absl::OkStatus());
  EXPECT_EQ(*missing, (std::vector<Digest>{e, a, c}));
  absl::StatusOr<std::vector<Digest>> none = store_->FindMissing({b, d, b});
  ASSERT_EQ(none.status(), absl::OkStatus());
  EXPECT_TRUE(none->empty());
  absl::StatusOr<std::vector<Digest>> empty = store_->FindMissing({});
  ASSERT_EQ(empty.status(), absl::OkStatus());
  EXPECT_TRUE(empty->empty());
  // Same hash, other size: a different object.
  absl::StatusOr<Digest> b_other_size = Digest::FromParts(b.sha256(), 2);
  ASSERT_EQ(b_other_size.status(), absl::OkStatus());
  EXPECT_EQ(*store_->FindMissing({*b_other_size}), std::vector<Digest>{*b_other_size});
}

TEST_F(StoreTest, StatReportsFields) {
  PutOk("zero");
  const int64_t before = absl::ToUnixMillis(absl::Now());
  PutOk("object");
  const int64_t after = absl::ToUnixMillis(absl::Now());
  absl::StatusOr<ObjectInfo> info = store_->Stat(Digest::Of("object"));
  ASSERT_EQ(info.status(), absl::OkStatus());
  EXPECT_EQ(info->digest, Digest::Of("object"));
  EXPECT_EQ(info->seq, 2u);
  EXPECT_FALSE(info->chunked);
  EXPECT_EQ(info->chunk_count, 0u);
  EXPECT_GE(info->stored_unix_ms, before);
  EXPECT_LE(info->stored_unix_ms, after);
  EXPECT_EQ(store_->Contains(Digest::Of("object")).value_or(false), true);

  absl::StatusOr<ObjectInfo> missing = store_->Stat(Digest::Of("nothing"));
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  absl::StatusOr<bool> contains = store_->Contains(Digest::Of("nothing"));
  ASSERT_EQ(contains.status(), absl::OkStatus());
  EXPECT_FALSE(*contains);
}

// ---- Persistence -------------------------------------------------------------------------------

TEST_F(StoreTest, ReopenKeepsObjectsSeqAndTotals) {
  std::vector<std::string> objects;
  for (int i = 0; i < 5; ++i) objects.push_back(absl::StrCat("persistent object ", i));
  for (const std::string& o : objects) PutOk(o);
  const std::string large = RandomBytes(600000, 26);
  absl::StatusOr<PutOutcome> out = UploadWhole(large);
  ASSERT_EQ(out.status(), absl::OkStatus());
  EXPECT_EQ(out->seq, 6u);
  uint64_t bytes = large.size();
  for (const std::string& o : objects) bytes += o.size();
  EXPECT_EQ(store_->totals().objects, 6u);
  EXPECT_EQ(store_->totals().bytes, bytes);

  ASSERT_NO_FATAL_FAILURE(Reopen());
  EXPECT_EQ(store_->last_seq(), 6u);
  EXPECT_EQ(store_->totals().objects, 6u);
  EXPECT_EQ(store_->totals().bytes, bytes);
  for (size_t i = 0; i < objects.size(); ++i) {
    EXPECT_EQ(ReadAllOk(Digest::Of(objects[i])), objects[i]);
    EXPECT_EQ(store_->Stat(Digest::Of(objects[i]))->seq, i + 1);
  }
  EXPECT_TRUE(SameBytes(ReadAllOk(Digest::Of(large)), large));
  EXPECT_TRUE(store_->Stat(Digest::Of(large))->chunked);
  EXPECT_EQ(PutOk(objects[0]).seq, 1u);  // still present
  EXPECT_EQ(PutOk("after reopen").seq, 7u);
  EXPECT_EQ(FeedSeqs(), Range(1, 7));
  EXPECT_EQ(store_->totals().objects, 7u);
  EXPECT_EQ(store_->totals().bytes, bytes + 12);
}

// ---- Waiting for the feed
// ------------------------------------------------------------------------

using WaitResult = Store::WaitResult;

TEST_F(StoreTest, WaiterIsWokenByTheNextPutOnly) {
  PutOk("zero");
  std::atomic<int> woken{0};
  EXPECT_EQ(store_->AddWaiter(/*key=*/7, /*after_seq=*/1, nullptr, [&] { woken.fetch_add(1); }),
            WaitResult::kRegistered);
  EXPECT_EQ(woken.load(), 0);
  PutOk("zero");  // already present: no new seq, no wake-up
  EXPECT_EQ(woken.load(), 0);
  PutOk("one");
  EXPECT_EQ(woken.load(), 1);
  PutOk("two");  // a waiter fires once
  EXPECT_EQ(woken.load(), 1);
  EXPECT_FALSE(store_->RemoveWaiter(7));
}

TEST_F(StoreTest, WaiterForAnOlderSeqIsReadyAndNeverCalled) {
  PutOk("one");
  int woken = 0;
  EXPECT_EQ(store_->AddWaiter(1, /*after_seq=*/0, nullptr, [&] { ++woken; }), WaitResult::kReady);
  PutOk("two");
  EXPECT_EQ(woken, 0);
  EXPECT_FALSE(store_->RemoveWaiter(1));
}

TEST_F(StoreTest, CancelledWaiterIsNotRegistered) {
  std::atomic<bool> cancelled{true};
  int woken = 0;
  EXPECT_EQ(store_->AddWaiter(1, 0, &cancelled, [&] { ++woken; }), WaitResult::kCancelled);
  PutOk("one");
  EXPECT_EQ(woken, 0);
  EXPECT_FALSE(store_->RemoveWaiter(1));
}

TEST_F(StoreTest, RemovedWaiterNeverFires) {
  std::atomic<int> woken{0};
  EXPECT_EQ(store_->AddWaiter(1, 0, nullptr, [&] { woken.fetch_add(1); }), WaitResult::kRegistered);
  EXPECT_TRUE(store_->RemoveWaiter(1));
  EXPECT_FALSE(store_->RemoveWaiter(1));
  PutOk("one");
  EXPECT_EQ(woken.load(), 0);
}

TEST_F(StoreTest, WaiterIsWokenByAPutFromAnotherThread) {
  absl::Notification woken;
  EXPECT_EQ(store_->AddWaiter(1, 0, nullptr, [&] { woken.Notify(); }), WaitResult::kRegistered);
  std::thread writer([&] { PutOk("wake up"); });
  EXPECT_TRUE(woken.WaitForNotificationWithTimeout(absl::Seconds(30)));
  writer.join();
}

TEST_F(StoreTest, CloseWakesEveryWaiterAndLaterOnesAreReady) {
  int woken = 0;
  for (uintptr_t key = 1; key <= 3; ++key) {
    EXPECT_EQ(store_->AddWaiter(key, 0, nullptr, [&] { ++woken; }), WaitResult::kRegistered);
  }
  EXPECT_FALSE(store_->closed());
  store_->Close();
  EXPECT_TRUE(store_->closed());
  EXPECT_EQ(woken, 3);
  EXPECT_EQ(store_->AddWaiter(4, 0, nullptr, [&] { ++woken; }), WaitResult::kReady);
  EXPECT_EQ(woken, 3);
}

// Regression (review): one damaged object record failed every writer of its commit group.
TEST_F(StoreTest, ADamagedRecordFailsOnlyItsOwnItem) {
  PutOk("damaged later");
  const Digest damaged = Digest::Of("damaged later");
  ASSERT_NO_FATAL_FAILURE(Overwrite("cas_meta", damaged.Key(), "\xff\xff\xff"));
  const std::string fine = "an unrelated object";
  std::vector<absl::StatusOr<PutOutcome>> out =
      store_->PutMany({PutItem{damaged, "damaged later"}, PutItem{Digest::Of(fine), fine}});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].status().code(), StatusCode::kDataLoss);
  ASSERT_EQ(out[1].status(), absl::OkStatus());
  EXPECT_EQ(out[1]->seq, 2u);
  EXPECT_TRUE(SameBytes(ReadAllOk(Digest::Of(fine)), fine));
}

}  // namespace
}  // namespace vault::cas
