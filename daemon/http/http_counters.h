#pragma once
// HttpCounters: what the HTTP front counts for /metrics -- requests answered, by endpoint and HTTP
// status, and two latency histograms by endpoint: time to first token and per-token latency (the
// gap between consecutive generated tokens). Bounded: the endpoints are the routes' fixed labels,
// the statuses the few the front sends, and a histogram is kLatencyBuckets counters, a sum and a
// count, so nothing grows with what clients send or how many requests they make.
//
// Threading: thread-safe (one mutex).

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

namespace niels::daemon::http {

// The histograms' upper bounds in seconds (Prometheus `le`), ascending; +Inf follows them.
inline constexpr std::array<double, 14> kLatencyBuckets = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                                          1,     2.5,  5,     10,   15,  20,   30};

// One histogram: per bucket the observations at most its bound and above the previous one (the
// last entry: above every bound), their sum and count. Cumulative counts are made when exposed.
struct LatencyHistogram {
  std::array<uint64_t, kLatencyBuckets.size() + 1> counts{};
  double sum = 0;
  uint64_t count = 0;

  // `times` observations of `seconds` each (negative values count as 0).
  void Observe(double seconds, uint64_t times = 1) {
    if (!(seconds > 0)) seconds = 0;
    size_t bucket = 0;
    while (bucket < kLatencyBuckets.size() && seconds > kLatencyBuckets[bucket]) ++bucket;
    counts[bucket] += times;
    sum += seconds * static_cast<double>(times);
    count += times;
  }
};

class HttpCounters {
 public:
  // `endpoint` must be one of the routes' static labels (routes.h).
  void Count(const char* endpoint, unsigned status) {
    std::lock_guard lock(mutex_);
    ++requests_[{endpoint, status}];
  }
  // Seconds from a generation's submission to its first token, as the front saw them.
  void ObserveFirstToken(const char* endpoint, double seconds) {
    std::lock_guard lock(mutex_);
    first_token_[endpoint].Observe(seconds);
  }
  // `times` gaps of `seconds` between consecutive generated tokens.
  void ObserveTokenGap(const char* endpoint, double seconds, uint64_t times = 1) {
    if (times == 0) return;
    std::lock_guard lock(mutex_);
    token_gap_[endpoint].Observe(seconds, times);
  }

  std::map<std::pair<std::string, unsigned>, uint64_t> requests() const {
    std::lock_guard lock(mutex_);
    return requests_;
  }
  std::map<std::string, LatencyHistogram> first_token() const {
    std::lock_guard lock(mutex_);
    return first_token_;
  }
  std::map<std::string, LatencyHistogram> token_gap() const {
    std::lock_guard lock(mutex_);
    return token_gap_;
  }

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, unsigned>, uint64_t> requests_;  // GUARDED_BY(mutex_)
  std::map<std::string, LatencyHistogram> first_token_;            // GUARDED_BY(mutex_)
  std::map<std::string, LatencyHistogram> token_gap_;              // GUARDED_BY(mutex_)
};

}  // namespace niels::daemon::http
