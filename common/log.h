#pragma once
// A tiny logger for nielsd and niels-chat: one line per message on stderr, prefixed with the
// syslog priority ("<3>" error, "<4>" warning, "<6>" info, "<7>" debug) so that journald keeps the
// level (sd-daemon(3)). A message containing newlines gets the prefix on every line.
//
// Thread-safe: each message is written with a single write(2) under a mutex, so lines from
// different threads never interleave. The level is a process-wide atomic (default info);
// messages below it are skipped before formatting.

#include <chrono>
#include <cstddef>
#include <functional>
#include <mutex>
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

// LogRateLimit bounds how often one kind of message is logged, so that a flood (of hostile
// connections, say) cannot fill the log: at most `burst` messages per `interval`. Messages past
// that are counted and dropped; the first message let through in a later interval is preceded by
// one line "<what>: suppressed N similar messages in the last S s" at the same level. (A stretch of
// suppressed messages that no later message follows is never summarised.)
//
// Thread-safe. Usually a function-local static at the call site, one per kind of message.
class LogRateLimit {
 public:
  using Clock = std::chrono::steady_clock;

  explicit LogRateLimit(std::string what, size_t burst = 10,
                        std::chrono::milliseconds interval = std::chrono::seconds(10),
                        std::function<Clock::time_point()> now = Clock::now);
  LogRateLimit(const LogRateLimit&) = delete;
  LogRateLimit& operator=(const LogRateLimit&) = delete;

  // Whether a message at `level` may be logged now (if so, first logs the summary of what was
  // suppressed before, if anything was).
  bool Allow(LogLevel level);
  // Messages suppressed in all so far.
  size_t suppressed_total() const;

 private:
  const std::string what_;
  const size_t burst_;
  const std::chrono::milliseconds interval_;
  const std::function<Clock::time_point()> now_;
  mutable std::mutex mutex_;
  Clock::time_point window_start_;  // GUARDED_BY(mutex_)
  size_t in_window_ = 0;            // GUARDED_BY(mutex_): messages let through in this window
  size_t suppressed_ = 0;           // GUARDED_BY(mutex_): since the last summary
  size_t suppressed_total_ = 0;     // GUARDED_BY(mutex_)
};

// LogWarn through a rate limit.
template <typename... Args>
void LogWarnLimited(LogRateLimit& limit, fmt::format_string<Args...> format, Args&&... args) {
  if (LogEnabled(LogLevel::kWarn) && limit.Allow(LogLevel::kWarn)) {
    Log(LogLevel::kWarn, fmt::format(format, std::forward<Args>(args)...));
  }
}

}  // namespace niels::common
