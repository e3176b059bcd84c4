// cas/pins: operator pins, kept across a reopen, refused for what is not stored.
#include "cas/pins.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "cas/store_test_fixture.h"

namespace vault::cas {
namespace {

using ::absl::StatusCode;
using ::testing::HasSubstr;

class PinsTest : public StoreTest {
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
  std::vector<storage::ColumnFamilySpec> Families() override {
    std::vector<storage::ColumnFamilySpec> cfs = Store::ColumnFamilies();
    for (storage::ColumnFamilySpec& cf : Pins::ColumnFamilies()) cfs.push_back(cf);
    return cfs;
  }
  std::unique_ptr<Pins> pins_;
};

TEST_F(PinsTest, APinHoldsUntilItIsRemovedAndSurvivesAReopen) {
  const Digest d = Digest::Of("pinned");
  PutOk("pinned");
  EXPECT_FALSE(pins_->Holds(d, absl::Now()));
  ASSERT_EQ(pins_->Add({.digest = d, .reason = "release 1.2", .by = "local-admin"}),
            absl::OkStatus());
  EXPECT_TRUE(pins_->Holds(d, absl::Now()));
  EXPECT_TRUE(pins_->Holds(d, absl::Now() + absl::Hours(24 * 365 * 100)));
  pins_.reset();
  ASSERT_NO_FATAL_FAILURE(Reopen());
  ASSERT_NO_FATAL_FAILURE(OpenPins());
  absl::StatusOr<Pin> p = pins_->Get(d);
  ASSERT_EQ(p.status(), absl::OkStatus());
  EXPECT_EQ(p->reason, "release 1.2");
  EXPECT_EQ(p->by, "local-admin");
  EXPECT_EQ(p->until, absl::InfiniteFuture());
  EXPECT_LE(absl::Now() - p->pinned_at, absl::Minutes(1));
  absl::StatusOr<std::vector<Pin>> all = pins_->List();
  ASSERT_EQ(all.status(), absl::OkStatus());
  ASSERT_EQ(all->size(), 1u);
  EXPECT_EQ((*all)[0].digest, d);
  ASSERT_EQ(pins_->Remove(d), absl::OkStatus());
  EXPECT_FALSE(pins_->Holds(d, absl::Now()));
  absl::Status again = pins_->Remove(d);
  EXPECT_EQ(again.code(), StatusCode::kNotFound);
  EXPECT_THAT(std::string(again.message()), HasSubstr("is not pinned"));
}

TEST_F(PinsTest, APinWithAnEndStopsHoldingThen) {
  const Digest d = Digest::Of("for a while");
  PutOk("for a while");
  const absl::Time until = absl::Now() + absl::Hours(1);
  ASSERT_EQ(pins_->Add({.digest = d, .reason = "", .until = until}), absl::OkStatus());
  EXPECT_TRUE(pins_->Holds(d, absl::Now()));
  EXPECT_FALSE(pins_->Holds(d, until + absl::Milliseconds(1)));
  // Pinned again: the new end replaces the old one.
  ASSERT_EQ(pins_->Add({.digest = d, .reason = "longer"}), absl::OkStatus());
  EXPECT_TRUE(pins_->Holds(d, until + absl::Hours(1)));
  EXPECT_EQ(pins_->Get(d)->reason, "longer");
}

TEST_F(PinsTest, OnlyAStoredObjectIsPinnedAndBadPinsAreRefused) {
  const Digest absent = Digest::Of("never stored");
  absl::Status s = pins_->Add({.digest = absent, .reason = "x"});
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_THAT(std::string(s.message()), HasSubstr("is not stored here"));
  PutOk("here");
  const Digest here = Digest::Of("here");
  s = pins_->Add({.digest = here, .until = absl::Now() - absl::Seconds(1)});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("not in the future"));
  s = pins_->Add({.digest = here, .reason = std::string(1025, 'r')});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  absl::StatusOr<std::vector<Pin>> all = pins_->List();
  ASSERT_EQ(all.status(), absl::OkStatus());
  EXPECT_TRUE(all->empty());
}

}  // namespace
}  // namespace vault::cas
