#include "common/protobuf_log.h"

#include <string>

#include <google/protobuf/stubs/logging.h>

#include "common/log.h"

namespace niels::common {
namespace {

void Handler(google::protobuf::LogLevel level, const char* filename, int line, const std::string& message) {
  static LogRateLimit limit("libprotobuf");
  switch (level) {
    case google::protobuf::LOGLEVEL_FATAL:
      LogError("libprotobuf {}:{}: {}", filename, line, message);
      return;
    case google::protobuf::LOGLEVEL_INFO:
      LogDebug("libprotobuf: {}", message);
      return;
    default:
      LogWarnLimited(limit, "libprotobuf: {}", message);
      return;
  }
}

}  // namespace

void RouteProtobufLogs() { google::protobuf::SetLogHandler(&Handler); }

}  // namespace niels::common
