#include "common/json.h"

#include <string>

#include "gtest/gtest.h"

namespace vault::common {
namespace {

std::string Json(absl::string_view text) { return JsonQuote(text); }

TEST(AppendJsonString, EscapesQuotesBackslashesAndControlCharacters) {
  EXPECT_EQ(Json(""), R"("")");
  EXPECT_EQ(Json("a\"b\\c"), R"("a\"b\\c")");
  EXPECT_EQ(Json("\t\n\r"), R"("\t\n\r")");
  EXPECT_EQ(Json(std::string("\x01\x1f\x00z", 4)), R"("\u0001\u001f\u0000z")");
  EXPECT_EQ(Json("\x7f/"), "\"\x7f/\"");
}

TEST(AppendJsonString, KeepsUtf8AndReplacesWhatIsNotUtf8) {
  // é (2 bytes), € (3), 𝄞 (4) pass as they are.
  EXPECT_EQ(Json("\xC3\xA9 \xE2\x82\xAC \xF0\x9D\x84\x9E"),
            "\"\xC3\xA9 \xE2\x82\xAC \xF0\x9D\x84\x9E\"");
  const std::string kReplacement = "\xEF\xBF\xBD";
  // A lone continuation byte, a truncated sequence, an overlong '/', a surrogate, past U+10FFFF.
  EXPECT_EQ(Json("\x80"), "\"" + kReplacement + "\"");
  EXPECT_EQ(Json("\xE2\x82"), "\"" + kReplacement + kReplacement + "\"");
  EXPECT_EQ(Json("\xC0\xAF"), "\"" + kReplacement + kReplacement + "\"");
  EXPECT_EQ(Json("\xED\xA0\x80"), "\"" + kReplacement + kReplacement + kReplacement + "\"");
  EXPECT_EQ(Json("\xF4\x90\x80\x80"),
            "\"" + kReplacement + kReplacement + kReplacement + kReplacement + "\"");
  EXPECT_EQ(Json("ok\xFFok"), "\"ok" + kReplacement + "ok\"");
}

TEST(AppendJsonString, AppendsAfterWhatIsThere) {
  std::string out = "{\"k\":";
  AppendJsonString("v\n", &out);
  EXPECT_EQ(out, R"({"k":"v\n")");
}

}  // namespace
}  // namespace vault::common
