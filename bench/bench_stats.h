#pragma once
// Small helpers the socket-driven benchmarks share: milliseconds of a duration and quantiles.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <vector>

namespace niels::bench {

inline double Ms(std::chrono::steady_clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// The q-quantile (0..1) of `values` by the nearest-rank method. REQUIRES: non-empty.
inline double Quantile(std::vector<double> values, double q) {
  std::sort(values.begin(), values.end());
  const size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(values.size())));
  return values[std::min(values.size() - 1, rank == 0 ? 0 : rank - 1)];
}

}  // namespace niels::bench
