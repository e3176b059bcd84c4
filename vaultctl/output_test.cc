#include "vaultctl/output.h"

#include "gtest/gtest.h"

namespace vault::vaultctl {
namespace {

TEST(ExitCode, DistinguishesUsageNotFoundRefusedUnavailable) {
  EXPECT_EQ(ExitCodeFor(absl::OkStatus()), 0);
  EXPECT_EQ(ExitCodeFor(absl::NotFoundError("x")), kExitNotFound);
  EXPECT_EQ(ExitCodeFor(absl::UnauthenticatedError("x")), kExitRefused);
  EXPECT_EQ(ExitCodeFor(absl::PermissionDeniedError("x")), kExitRefused);
  EXPECT_EQ(ExitCodeFor(absl::InvalidArgumentError("x")), kExitRefused);
  EXPECT_EQ(ExitCodeFor(absl::AlreadyExistsError("x")), kExitRefused);
  EXPECT_EQ(ExitCodeFor(absl::UnavailableError("x")), kExitUnavailable);
  EXPECT_EQ(ExitCodeFor(absl::DeadlineExceededError("x")), kExitUnavailable);
  EXPECT_EQ(ExitCodeFor(absl::DataLossError("x")), kExitFailure);
  EXPECT_EQ(ExitCodeFor(absl::InternalError("x")), kExitFailure);
}

TEST(Json, BuildsNestedObjectsAndArraysInOrder) {
  Json arr = Json::Array();
  arr.Push(Json::Object().Add("a", 1).Add("b", true));
  arr.Push("s");
  std::string out = Json::Object()
                        .Add("name", "vault-a")
                        .Add("n", uint64_t{18446744073709551615u})
                        .Add("neg", int64_t{-3})
                        .Add("list", arr)
                        .Add("empty", Json::Array())
                        .ToString();
  EXPECT_EQ(out,
            "{\"name\":\"vault-a\",\"n\":18446744073709551615,\"neg\":-3,"
            "\"list\":[{\"a\":1,\"b\":true},\"s\"],\"empty\":[]}");
}

TEST(Json, EscapesControlCharactersQuotesAndBackslashes) {
  EXPECT_EQ(Json::Quote(std::string("a\"b\\c\n\t\x01", 8)), "\"a\\\"b\\\\c\\n\\t\\u0001\"");
}

TEST(HumanBytes, PicksTheUnit) {
  EXPECT_EQ(HumanBytes(0), "0 B");
  EXPECT_EQ(HumanBytes(1023), "1023 B");
  EXPECT_EQ(HumanBytes(1536), "1.5 KiB");
  EXPECT_EQ(HumanBytes(uint64_t{3} << 30), "3.0 GiB");
}

}  // namespace
}  // namespace vault::vaultctl
