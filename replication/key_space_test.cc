#include "replication/key_space.h"

#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "storage/keys.h"

namespace vault::replication {
namespace {

const absl::uint128 kTwo64 = absl::MakeUint128(1, 0);

cas::Digest DigestWithPrefix(uint64_t prefix, uint64_t size) {
  std::string sha = storage::BigEndian64(prefix) + std::string(24, '\x5a');
  absl::StatusOr<cas::Digest> d = cas::Digest::FromParts(sha, size);
  EXPECT_TRUE(d.ok()) << d.status();
  return *d;
}

TEST(KeySpace, WholeSpaceIsOpenOnBothEnds) {
  KeySpan all = KeySpan::All();
  EXPECT_EQ(all.start(), "");
  EXPECT_EQ(all.end(), "");
  EXPECT_EQ(all.width(), kTwo64);
}

TEST(KeySpace, SplitCoversTheSpanExactlyInNearlyEqualParts) {
  for (uint64_t parts : {1u, 2u, 3u, 7u, 256u, 4096u}) {
    std::vector<KeySpan> split = Split(KeySpan::All(), parts);
    ASSERT_EQ(split.size(), parts);
    EXPECT_EQ(split.front().lo(), 0);
    EXPECT_EQ(split.back().hi(), kTwo64);
    absl::uint128 min_w = kTwo64, max_w = 0;
    for (size_t i = 0; i < split.size(); ++i) {
      if (i > 0) {
        EXPECT_EQ(split[i].lo(), split[i - 1].hi()) << parts;
        EXPECT_EQ(split[i].start(), split[i - 1].end()) << parts;  // adjacent on the wire too
      }
      min_w = std::min(min_w, split[i].width());
      max_w = std::max(max_w, split[i].width());
    }
    EXPECT_LE(max_w - min_w, 1) << parts;
  }
  // Only the last part is open-ended; the first starts at "".
  std::vector<KeySpan> four = Split(KeySpan::All(), 4);
  EXPECT_EQ(four[0].start(), "");
  EXPECT_EQ(four[1].start(), storage::BigEndian64(uint64_t{1} << 62));
  EXPECT_EQ(four[3].end(), "");
}

TEST(KeySpace, SplitOfANarrowSpanStopsAtSinglePrefixes) {
  KeySpan narrow(100, 103);
  std::vector<KeySpan> split = Split(narrow, 10);
  ASSERT_EQ(split.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(split[i], KeySpan(100 + i, 101 + i));
    EXPECT_EQ(split[i].width(), 1);
  }
  EXPECT_EQ(Split(KeySpan(5, 6), 256).size(), 1u);
  EXPECT_EQ(Split(KeySpan(5, 6), 0).size(), 1u);
}

TEST(KeySpace, ContainsAgreesWithTheWireRangeOnKeys) {
  std::mt19937_64 rng(42);
  std::vector<KeySpan> parts = Split(KeySpan::All(), 37);
  for (int n = 0; n < 2000; ++n) {
    cas::Digest d = DigestWithPrefix(rng(), rng() % 100000);
    if (n == 0) d = DigestWithPrefix(0, 0);
    if (n == 1) d = DigestWithPrefix(~uint64_t{0}, ~uint64_t{0});
    if (n == 2) d = DigestWithPrefix(absl::Uint128Low64(parts[5].lo()), 0);  // on a boundary
    int holders = 0;
    for (const KeySpan& p : parts) {
      const std::string key = d.Key();
      const bool on_wire = key >= p.start() && (p.end().empty() || key < p.end());
      EXPECT_EQ(p.Contains(d), on_wire) << d.ToString();
      holders += p.Contains(d);
    }
    EXPECT_EQ(holders, 1) << d.ToString();
  }
}

TEST(KeySpace, FanoutAimsAtTheTargetWithinBounds) {
  EXPECT_EQ(Fanout(0, 64, 256), 2u);
  EXPECT_EQ(Fanout(65, 64, 256), 2u);
  EXPECT_EQ(Fanout(129, 64, 256), 3u);
  EXPECT_EQ(Fanout(6400, 64, 256), 100u);
  EXPECT_EQ(Fanout(1000000, 64, 256), 256u);
  EXPECT_EQ(Fanout(10, 0, 1), 2u);
}

TEST(KeySpace, DiffSortedFindsWhatEachSideLacks) {
  std::vector<cas::Digest> all;
  for (uint64_t p = 1; p <= 10; ++p) all.push_back(DigestWithPrefix(p * 1000, p));
  std::vector<cas::Digest> ours = {all[0], all[1], all[3], all[4], all[9]};
  std::vector<cas::Digest> theirs = {all[1], all[2], all[4], all[7], all[8]};
  ListDifference diff = DiffSorted(ours, theirs);
  EXPECT_EQ(diff.only_ours, (std::vector<cas::Digest>{all[0], all[3], all[9]}));
  EXPECT_EQ(diff.only_theirs, (std::vector<cas::Digest>{all[2], all[7], all[8]}));
  EXPECT_TRUE(DiffSorted(ours, ours).only_ours.empty());
  EXPECT_EQ(DiffSorted({}, theirs).only_theirs, theirs);
  // Same hash prefix, different sizes: ordered by size after the hash.
  cas::Digest small = DigestWithPrefix(7, 1), big = DigestWithPrefix(7, 2);
  diff = DiffSorted({small}, {small, big});
  EXPECT_TRUE(diff.only_ours.empty());
  EXPECT_EQ(diff.only_theirs, (std::vector<cas::Digest>{big}));
}

}  // namespace
}  // namespace vault::replication
