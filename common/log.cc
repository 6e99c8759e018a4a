#include "common/log.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <mutex>

namespace niels::common {
namespace {

std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};

std::mutex& WriteMutex() {
  static std::mutex mutex;  // trivially destructible on glibc; a function-local static
  return mutex;
}

void WriteAll(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // nowhere to report a failing stderr
    bytes.remove_prefix(static_cast<size_t>(n));
  }
}

}  // namespace

void SetLogLevel(LogLevel level) { g_level.store(static_cast<int>(level), std::memory_order_relaxed); }

LogLevel GetLogLevel() { return static_cast<LogLevel>(g_level.load(std::memory_order_relaxed)); }

bool LogEnabled(LogLevel level) {
  return static_cast<int>(level) <= g_level.load(std::memory_order_relaxed);
}

StatusOr<LogLevel> ParseLogLevel(std::string_view name) {
  if (name == "error") return LogLevel::kError;
  if (name == "warn" || name == "warning") return LogLevel::kWarn;
  if (name == "info") return LogLevel::kInfo;
  if (name == "debug") return LogLevel::kDebug;
  return Status::InvalidArgument("unknown log level '" + std::string(name) +
                                 "' (expected error, warn, info or debug)");
}

std::string FormatLogLine(LogLevel level, std::string_view message) {
  // Priorities are single digits (3..7).
  const char prefix[] = {'<', static_cast<char>('0' + static_cast<int>(level)), '>', '\0'};
  if (!message.empty() && message.back() == '\n') message.remove_suffix(1);
  std::string out;
  out.reserve(message.size() + 4);
  size_t start = 0;
  while (true) {
    const size_t end = message.find('\n', start);
    out += prefix;
    out += message.substr(start, end == std::string_view::npos ? end : end - start);
    out += '\n';
    if (end == std::string_view::npos) break;
    start = end + 1;
  }
  return out;
}

void Log(LogLevel level, std::string_view message) {
  if (!LogEnabled(level)) return;
  const std::string line = FormatLogLine(level, message);
  std::lock_guard<std::mutex> lock(WriteMutex());
  WriteAll(STDERR_FILENO, line);
}

LogRateLimit::LogRateLimit(std::string what, size_t burst, std::chrono::milliseconds interval,
                           std::function<Clock::time_point()> now)
    : what_(std::move(what)), burst_(burst), interval_(interval), now_(std::move(now)), window_start_(now_()) {}

bool LogRateLimit::Allow(LogLevel level) {
  std::lock_guard lock(mutex_);
  const Clock::time_point now = now_();
  if (now - window_start_ >= interval_) {
    if (suppressed_ > 0) {
      const double seconds = std::chrono::duration<double>(now - window_start_).count();
      Log(level, fmt::format("{}: suppressed {} similar message{} in the last {:.0f} s", what_, suppressed_,
                             suppressed_ == 1 ? "" : "s", seconds));
      suppressed_ = 0;
    }
    window_start_ = now;
    in_window_ = 0;
  }
  if (in_window_ < burst_) {
    ++in_window_;
    return true;
  }
  ++suppressed_;
  ++suppressed_total_;
  return false;
}

size_t LogRateLimit::suppressed_total() const {
  std::lock_guard lock(mutex_);
  return suppressed_total_;
}

}  // namespace niels::common
