#include "agent/storage_quota.h"

#include <string>

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace vault::agent {
namespace {

TEST(StorageQuota, ChargesUpToTheQuotaAndRefusesPastItSayingWhy) {
  StorageQuota quota([](const std::string& p) -> uint64_t { return p == "a" ? 100 : 0; });
  quota.Add("a", 40);
  EXPECT_TRUE(quota.Charge("a", 60).ok());
  absl::Status over = quota.Charge("a", 1);
  EXPECT_EQ(over.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(over.message(),
            "principal a has written 100 of its 100 bytes here (its storage quota); this write "
            "needs 1");
  quota.Refund("a", 30);
  EXPECT_EQ(quota.Used("a"), 70u);
  EXPECT_TRUE(quota.Charge("a", 30).ok());
  // A charge that would overflow is refused, not wrapped.
  EXPECT_EQ(quota.Charge("a", UINT64_MAX).code(), absl::StatusCode::kResourceExhausted);
}

TEST(StorageQuota, NoQuotaMeansNoLimitAndRefundsNeverGoBelowZero) {
  StorageQuota quota([](const std::string&) -> uint64_t { return 0; });
  EXPECT_TRUE(quota.Charge("b", uint64_t{1} << 50).ok());
  quota.Refund("b", uint64_t{1} << 51);
  EXPECT_EQ(quota.Used("b"), 0u);
  EXPECT_EQ(quota.Used("nobody"), 0u);
}

}  // namespace
}  // namespace vault::agent
