#include "common/random.h"

#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace vault::common {
namespace {

TEST(RandomBytes, GivesTheSizeAskedAndDoesNotRepeat) {
  absl::flat_hash_set<std::string> seen;
  for (int i = 0; i < 1000; ++i) {
    absl::StatusOr<std::string> r = RandomBytes(16);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->size(), 16u);
    EXPECT_TRUE(seen.insert(*r).second);
  }
  absl::StatusOr<std::string> empty = RandomBytes(0);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(*empty, "");
}

TEST(RandomBytes, RefusesAbsurdSizes) {
  EXPECT_EQ(RandomBytes(size_t{1} << 40).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(RandomHex, IsLowercaseHexOfTwiceTheLength) {
  absl::StatusOr<std::string> h = RandomHex(8);
  ASSERT_TRUE(h.ok());
  ASSERT_EQ(h->size(), 16u);
  EXPECT_EQ(h->find_first_not_of("0123456789abcdef"), std::string::npos);
}

}  // namespace
}  // namespace vault::common
