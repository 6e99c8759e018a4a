#pragma once
// A tiny logger for nielsd and niels-chat: one line per message on stderr, prefixed with the
// syslog priority ("<3>" error, "<4>" warning, "<6>" info, "<7>" debug) so that journald keeps the
// level (sd-daemon(3)). A message containing newlines gets the prefix on every line.
//
// Thread-safe: each message is written with a single write(2) under a mutex, so lines from
// different threads never interleave. The level is a process-wide atomic (default info);
// messages below it are skipped before formatting.

#include <string>
#include <string_view>
#include <utility>

#include <fmt/format.h>

#include "common/status.h"

namespace niels::common {

// Values are the syslog priorities.
enum class LogLevel { kError = 3, kWarn = 4, kInfo = 6, kDebug = 7 };

void SetLogLevel(LogLevel level);
LogLevel GetLogLevel();
bool LogEnabled(LogLevel level);

// "error", "warn" (or "warning"), "info", "debug" -> level; anything else INVALID_ARGUMENT.
StatusOr<LogLevel> ParseLogLevel(std::string_view name);

// The exact bytes written for `message`: "<p>" + line + "\n" for every line of the message.
std::string FormatLogLine(LogLevel level, std::string_view message);

// Writes FormatLogLine(level, message) to stderr if `level` is enabled.
void Log(LogLevel level, std::string_view message);

template <typename... Args>
void LogError(fmt::format_string<Args...> format, Args&&... args) {
  if (LogEnabled(LogLevel::kError)) Log(LogLevel::kError, fmt::format(format, std::forward<Args>(args)...));
}
template <typename... Args>
void LogWarn(fmt::format_string<Args...> format, Args&&... args) {
  if (LogEnabled(LogLevel::kWarn)) Log(LogLevel::kWarn, fmt::format(format, std::forward<Args>(args)...));
}
template <typename... Args>
void LogInfo(fmt::format_string<Args...> format, Args&&... args) {
  if (LogEnabled(LogLevel::kInfo)) Log(LogLevel::kInfo, fmt::format(format, std::forward<Args>(args)...));
}
template <typename... Args>
void LogDebug(fmt::format_string<Args...> format, Args&&... args) {
  if (LogEnabled(LogLevel::kDebug)) Log(LogLevel::kDebug, fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace niels::common
