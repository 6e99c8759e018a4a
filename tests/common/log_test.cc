#include "common/log.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

namespace niels::common {
namespace {

TEST(LogTest, FormatPrefixesEveryLineWithSyslogPriority) {
  EXPECT_EQ(FormatLogLine(LogLevel::kError, "boom"), "<3>boom\n");
  EXPECT_EQ(FormatLogLine(LogLevel::kWarn, "w"), "<4>w\n");
  EXPECT_EQ(FormatLogLine(LogLevel::kInfo, "a\nb"), "<6>a\n<6>b\n");
  EXPECT_EQ(FormatLogLine(LogLevel::kDebug, "trailing\n"), "<7>trailing\n");
  EXPECT_EQ(FormatLogLine(LogLevel::kInfo, ""), "<6>\n");
}

TEST(LogTest, ParseLogLevel) {
  EXPECT_EQ(*ParseLogLevel("error"), LogLevel::kError);
  EXPECT_EQ(*ParseLogLevel("warn"), LogLevel::kWarn);
  EXPECT_EQ(*ParseLogLevel("warning"), LogLevel::kWarn);
  EXPECT_EQ(*ParseLogLevel("info"), LogLevel::kInfo);
  EXPECT_EQ(*ParseLogLevel("debug"), LogLevel::kDebug);
  EXPECT_EQ(ParseLogLevel("loud").status().code(), StatusCode::kInvalidArgument);
}

TEST(LogTest, LevelFiltersAndWritesToStderr) {
  const LogLevel saved = GetLogLevel();
  SetLogLevel(LogLevel::kWarn);
  testing::internal::CaptureStderr();
  LogError("e{}", 1);
  LogWarn("w{}", 2);
  LogInfo("i{}", 3);
  LogDebug("d{}", 4);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "<3>e1\n<4>w2\n");
  SetLogLevel(LogLevel::kDebug);
  testing::internal::CaptureStderr();
  LogDebug("x={} y={}", "a", 2.5);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "<7>x=a y=2.5\n");
  SetLogLevel(saved);
}

TEST(LogTest, ConcurrentLinesDoNotInterleave) {
  const LogLevel saved = GetLogLevel();
  SetLogLevel(LogLevel::kInfo);
  testing::internal::CaptureStderr();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t] {
      for (int i = 0; i < 200; ++i) LogInfo("{}", std::string(100, static_cast<char>('a' + t)));
    });
  }
  for (auto& th : threads) th.join();
  const std::string out = testing::internal::GetCapturedStderr();
  SetLogLevel(saved);
  size_t lines = 0, start = 0;
  while (start < out.size()) {
    const size_t end = out.find('\n', start);
    ASSERT_NE(end, std::string::npos);
    const std::string line = out.substr(start, end - start);
    ASSERT_EQ(line.size(), 103u);
    ASSERT_EQ(line.substr(0, 3), "<6>");
    ASSERT_EQ(line.find_first_not_of(line[3], 3), std::string::npos) << line;
    ++lines;
    start = end + 1;
  }
  EXPECT_EQ(lines, 800u);
}

TEST(LogRateLimitTest, LetsABurstThroughPerIntervalAndSummarisesTheRest) {
  const LogLevel saved = GetLogLevel();
  SetLogLevel(LogLevel::kInfo);
  LogRateLimit::Clock::time_point now{};
  LogRateLimit limit("refusals", 3, std::chrono::seconds(10), [&] { return now; });
  testing::internal::CaptureStderr();
  for (int i = 0; i < 10; ++i) LogWarnLimited(limit, "refused {}", i);
  now += std::chrono::seconds(4);
  LogWarnLimited(limit, "refused {}", 10);  // same interval: suppressed
  now += std::chrono::seconds(7);
  LogWarnLimited(limit, "refused {}", 11);  // a new interval: the summary, then the message
  LogWarnLimited(limit, "refused {}", 12);
  const std::string out = testing::internal::GetCapturedStderr();
  SetLogLevel(saved);
  EXPECT_EQ(out,
            "<4>refused 0\n<4>refused 1\n<4>refused 2\n"
            "<4>refusals: suppressed 8 similar messages in the last 11 s\n"
            "<4>refused 11\n<4>refused 12\n");
  EXPECT_EQ(limit.suppressed_total(), 8u);
}

TEST(LogRateLimitTest, MessagesBelowTheLevelDoNotCount) {
  const LogLevel saved = GetLogLevel();
  SetLogLevel(LogLevel::kError);
  LogRateLimit limit("x", 1);
  testing::internal::CaptureStderr();
  for (int i = 0; i < 5; ++i) LogWarnLimited(limit, "w");
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
  EXPECT_EQ(limit.suppressed_total(), 0u);
  SetLogLevel(saved);
}

}  // namespace
}  // namespace niels::common
