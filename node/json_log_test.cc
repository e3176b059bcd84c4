#include "node/json_log.h"

#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/log_fields.h"
#include "gtest/gtest.h"
#include "spdlog/sinks/ostream_sink.h"
#include "spdlog/spdlog.h"

namespace vault::node {
namespace {

// The default logger writes JSON lines into `out` for the test's lifetime.
class JsonLogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    previous_ = spdlog::default_logger();
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out_);
    auto logger = std::make_shared<spdlog::logger>("json_log_test", sink);
    logger->set_formatter(NewJsonLogFormatter("vault-a"));
    logger->set_level(spdlog::level::trace);
    spdlog::set_default_logger(logger);
  }
  void TearDown() override { spdlog::set_default_logger(previous_); }

  // The lines written, each checked for its time member, which is then cut off: what follows
  // "time" is compared exactly.
  std::vector<std::string> Lines() {
    std::vector<std::string> out;
    // {"time":"2026-11-22T13:25:39.746123Z", with every d a digit.
    constexpr absl::string_view kHead = "{\"time\":\"";
    constexpr absl::string_view kTime = "dddd-dd-ddTdd:dd:dd.ddddddZ\",";
    for (absl::string_view line : absl::StrSplit(out_.str(), '\n', absl::SkipEmpty())) {
      bool ok = absl::StartsWith(line, kHead) && line.size() >= kHead.size() + kTime.size();
      for (size_t i = 0; ok && i < kTime.size(); ++i) {
        char c = line[kHead.size() + i];
        ok = kTime[i] == 'd' ? absl::ascii_isdigit(static_cast<unsigned char>(c)) : c == kTime[i];
      }
      EXPECT_TRUE(ok) << line;
      out.emplace_back(ok ? line.substr(kHead.size() + kTime.size()) : line);
    }
    return out;
  }

  std::ostringstream out_;
  std::shared_ptr<spdlog::logger> previous_;
};

TEST_F(JsonLogTest, AgentLinesCarryTheAgentField) {
  common::LogAgent(spdlog::level::warn, "a-0123456789abcdef", "agent {}: kill: {}",
                   "a-0123456789abcdef", "no such process");
  spdlog::info("resumed {} of {} agents", 1, 2);
  common::LogWith(spdlog::level::err, {.agent = "a-01", .transfer = "7f00aa"},
                  "agent {}: commit failed", "a-01");
  std::vector<std::string> lines = Lines();
  ASSERT_EQ(lines.size(), 3u) << out_.str();
  EXPECT_EQ(
      lines[0],
      R"("level":"warn","vault":"vault-a","message":"agent a-0123456789abcdef: kill: no such )"
      R"(process","agent":"a-0123456789abcdef"})");
  // The fields were of that line only.
  EXPECT_EQ(lines[1], R"("level":"info","vault":"vault-a","message":"resumed 1 of 2 agents"})");
  EXPECT_EQ(lines[2], R"("level":"error","vault":"vault-a","message":"agent a-01: commit failed",)"
                      R"("agent":"a-01","transfer":"7f00aa"})");
}

TEST_F(JsonLogTest, EveryLevelHasItsName) {
  spdlog::trace("t");
  spdlog::debug("d");
  spdlog::info("i");
  spdlog::warn("w");
  spdlog::error("e");
  spdlog::critical("c");
  std::vector<std::string> lines = Lines();
  ASSERT_EQ(lines.size(), 6u);
  const char* names[] = {"trace", "debug", "info", "warn", "error", "critical"};
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(lines[i].substr(0, lines[i].find(',')), absl::StrCat("\"level\":\"", names[i], "\""));
  }
}

TEST_F(JsonLogTest, AMessageWithNewlinesStaysOnOneLine) {
  spdlog::error("first\nsecond \"quoted\"\r\n");
  std::vector<std::string> lines = Lines();
  ASSERT_EQ(lines.size(), 1u) << out_.str();
  EXPECT_EQ(lines[0],
            R"("level":"error","vault":"vault-a","message":"first\nsecond \"quoted\"\r\n"})");
}

TEST_F(JsonLogTest, LinesBelowTheLevelAreNotFormatted) {
  spdlog::default_logger()->set_level(spdlog::level::warn);
  common::LogAgent(spdlog::level::info, "a-01", "agent {} spawned", "a-01");
  EXPECT_EQ(out_.str(), "");
}

TEST(ScopedLogFields, NestAndRestore) {
  EXPECT_EQ(common::CurrentLogFields(), nullptr);
  common::LogFields outer{.agent = "a-1"};
  {
    common::ScopedLogFields a(outer);
    ASSERT_NE(common::CurrentLogFields(), nullptr);
    EXPECT_EQ(common::CurrentLogFields()->agent, "a-1");
    common::LogFields inner{.transfer = "ff"};
    {
      common::ScopedLogFields b(inner);
      EXPECT_EQ(common::CurrentLogFields()->agent, "");
      EXPECT_EQ(common::CurrentLogFields()->transfer, "ff");
    }
    EXPECT_EQ(common::CurrentLogFields()->agent, "a-1");
  }
  EXPECT_EQ(common::CurrentLogFields(), nullptr);
}

}  // namespace
}  // namespace vault::node
