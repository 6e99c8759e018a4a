#include "daemon/grammar/schema_integer.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "fmt/format.h"

namespace niels::daemon::grammar {
namespace {

constexpr int64_t kLimit = 9'999'999'999'999'999;  // 16 digits

std::string DigitClass(char lo, char hi) {
  return lo == hi ? fmt::format("[{}]", lo) : fmt::format("[{}-{}]", lo, hi);
}

// Numbers of exactly lo.size() == hi.size() digits between lo and hi (strings, lo <= hi).
std::string SameLength(const std::string& lo, const std::string& hi) {
  if (lo.empty()) return "\"\"";
  if (lo.find_first_not_of('0') == std::string::npos && hi.find_first_not_of('9') == std::string::npos) {
    return fmt::format("[0-9]{{{}}}", lo.size());  // every digit string: keeps the output linear
  }
  if (lo[0] == hi[0]) {
    return DigitClass(lo[0], lo[0]) + " (" + SameLength(lo.substr(1), hi.substr(1)) + ")";
  }
  const size_t rest = lo.size() - 1;
  const std::string nines(rest, '9'), zeros(rest, '0');
  std::vector<std::string> alternatives;
  alternatives.push_back(DigitClass(lo[0], lo[0]) + " (" + SameLength(lo.substr(1), nines) + ")");
  if (lo[0] + 1 <= hi[0] - 1) {
    alternatives.push_back(DigitClass(static_cast<char>(lo[0] + 1), static_cast<char>(hi[0] - 1)) +
                           (rest > 0 ? fmt::format(" [0-9]{{{}}}", rest) : ""));
  }
  alternatives.push_back(DigitClass(hi[0], hi[0]) + " (" + SameLength(zeros, hi.substr(1)) + ")");
  std::string out;
  for (size_t i = 0; i < alternatives.size(); ++i) out += (i ? " | " : "") + alternatives[i];
  return out;
}

// "(" + body + ")", built in place: GCC 12 reports a false -Wrestrict for "(" + std::string&&.
std::string Parenthesized(const std::string& body) {
  std::string out;
  out.reserve(body.size() + 2);
  out += '(';
  out += body;
  out += ')';
  return out;
}

// Non-negative integers in [lo, hi], as alternatives grouped by digit count.
std::string NonNegative(int64_t lo, int64_t hi) {
  std::vector<std::string> alternatives;
  std::string lo_s = std::to_string(lo);
  const std::string hi_s = std::to_string(hi);
  while (lo_s.size() < hi_s.size()) {
    alternatives.push_back(Parenthesized(SameLength(lo_s, std::string(lo_s.size(), '9'))));
    lo_s = std::string(lo_s.size() + 1, '0');  // the smallest number with one more digit
    lo_s[0] = '1';
  }
  alternatives.push_back(Parenthesized(SameLength(lo_s, hi_s)));
  std::string out;
  for (size_t i = 0; i < alternatives.size(); ++i) out += (i ? " | " : "") + alternatives[i];
  return out;
}

}  // namespace

common::StatusOr<std::string> IntegerRangeGbnf(const IntegerBounds& bounds) {
  const double min_d = std::max(bounds.min, -static_cast<double>(kLimit));
  const double max_d = std::min(bounds.max, static_cast<double>(kLimit));
  if (!(min_d <= max_d)) {
    return common::Status::InvalidArgument("the integer range is empty (minimum above maximum)");
  }
  const auto lo = static_cast<int64_t>(min_d), hi = static_cast<int64_t>(max_d);
  std::vector<std::string> parts;
  if (lo < 0) {
    const int64_t neg_lo = hi < 0 ? -hi : 1;  // magnitudes of the negative part
    parts.push_back("\"-\" (" + NonNegative(neg_lo, -lo) + ")");
  }
  if (hi >= 0) parts.push_back(NonNegative(std::max<int64_t>(lo, 0), hi));
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? " | " : "") + parts[i];
  return out;
}

}  // namespace niels::daemon::grammar
