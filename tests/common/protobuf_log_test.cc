#include "common/protobuf_log.h"

#include <gtest/gtest.h>

#include <string>

#include "common/log.h"
#include "niels/v1/nielsd.pb.h"

namespace niels::common {
namespace {

// The bytes of a Request whose chat.user_text is not UTF-8 (proto3 refuses to parse it, and
// libprotobuf logs an error of its own each time).
std::string RequestWithInvalidUtf8() {
  niels::v1::Request request;
  request.set_request_id(1);
  request.mutable_chat()->set_user_text("AAAA");
  std::string bytes = request.SerializeAsString();
  bytes.replace(bytes.find("AAAA"), 4, "\xff\xfe\xfd\xfc");
  return bytes;
}

TEST(ProtobufLogTest, HostileStringsLogThroughTheRateLimitedLogger) {
  const LogLevel saved = GetLogLevel();
  SetLogLevel(LogLevel::kInfo);
  RouteProtobufLogs();
  const std::string bytes = RequestWithInvalidUtf8();
  testing::internal::CaptureStderr();
  for (int i = 0; i < 50; ++i) {
    niels::v1::Request parsed;
    EXPECT_FALSE(parsed.ParseFromString(bytes));
  }
  const std::string out = testing::internal::GetCapturedStderr();
  SetLogLevel(saved);
  size_t lines = 0;
  for (size_t at = 0; (at = out.find('\n', at)) != std::string::npos; ++at) ++lines;
  EXPECT_GE(lines, 1u);
  EXPECT_LE(lines, 10u) << out;  // one burst of the limit, not one line per hostile request
  EXPECT_EQ(out.rfind("<4>libprotobuf: ", 0), 0u) << out;  // our format, not libprotobuf's own
  EXPECT_NE(out.find("UTF-8"), std::string::npos) << out;
}

}  // namespace
}  // namespace niels::common
