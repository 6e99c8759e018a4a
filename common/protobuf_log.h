#pragma once
// Routes libprotobuf's own log messages into nielsd's logger (common/log.h) instead of its default
// stderr writer. Parsing a hostile Request makes libprotobuf log an error of its own (for instance
// "String field ... contains invalid UTF-8 data" for every such string), on top of the warning the
// connection logs for the refused frame, so a client could flood the log with them: these go
// through a LogRateLimit, at warning level. Fatal messages (libprotobuf aborts after them) are
// logged as errors, unlimited.
//
// Process-wide and thread-safe; call once at start-up (nielsd's main).

namespace niels::common {

void RouteProtobufLogs();

}  // namespace niels::common
