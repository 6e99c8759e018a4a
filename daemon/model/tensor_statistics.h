#pragma once
// Statistics of one tensor's values (proto/PROTOCOL.md, "Weight statistics", defines each one): the
// values as the model serves them -- a block type dequantized, a 16-bit type widened, after any
// --dtype conversion at load. Every sum is accumulated in double.
//
// Compact: count, mean, std (ddof 0), min, max, l2 norm. Full adds median, abs mean, zero and
// near-zero percentages, l1 norm, the percentiles kPercentiles (linear interpolation between the two
// nearest ranks, numpy's default) and a histogram of kHistogramBins equal bins between min and max
// (numpy.histogram's bins: the last one closed). NaN and infinities are counted in `nonfinite` and
// left out of every other statistic.
//
// Cost and memory: the values are read in chunks of kStatisticsChunk elements, each widened or
// dequantized into one float buffer, so a tensor of any size is never copied whole. Sums run in 4
// interleaved lanes per chunk, added up in a fixed order: a result depends on the values and their
// order only, bitwise. Compact reads
// the tensor twice (sums, then squared deviations from the mean). Full reads it three times: the
// percentiles are exact order statistics found by a radix selection over the floats' bit patterns
// (a histogram of the upper 16 bits, then of the lower 16 bits within the buckets holding the
// ranks), which holds 65536 counts plus 65536 per distinct bucket sought (at most 2 per
// percentile): about 5.6 MiB, whatever the tensor's size. Time is linear in the elements. Up to
// kSortedSelection values the third pass sorts the values' order keys instead.
//
// Pure functions; any thread (the tensor must stay valid while they run).

#include <array>
#include <cstdint>
#include <functional>
#include <span>

#include "common/status.h"
#include "daemon/model/weights.h"

namespace niels::daemon::model {

inline constexpr int kHistogramBins = 20;
// A value x is near zero when |x| < kNearZero (so a zero is near zero too).
inline constexpr double kNearZero = 1e-6;
// The percentiles of the full statistics, in this order.
inline constexpr std::array<double, 5> kPercentiles = {5, 25, 50, 75, 95};
// Elements widened or dequantized at a time (a multiple of every block type's block).
inline constexpr int64_t kStatisticsChunk = 64 * 1024;
// Up to this many values the percentiles are found by sorting the values' order keys (the same exact
// order statistics; a copy of 4 bytes per value instead of the radix selection's counts): an
// activation vector's statistics cost O(n log n) and no 5.6 MiB.
inline constexpr int64_t kSortedSelection = 16 * 1024;

struct TensorStatistics {
  bool full = false;       // whether the full statistics below are set
  int64_t count = 0;       // finite values (the statistics are over these)
  int64_t nonfinite = 0;   // NaN and infinite values, left out
  // Compact. All 0 when count is 0.
  double mean = 0, std = 0, min = 0, max = 0, l2_norm = 0;
  // Full (only when `full`).
  double median = 0, abs_mean = 0, l1_norm = 0;
  double zeros_percent = 0;      // 100 x (values == 0) / count
  double near_zero_percent = 0;  // 100 x (|values| < kNearZero) / count
  std::array<double, kPercentiles.size()> percentiles{};
  // kHistogramBins bins of equal width from histogram_low to histogram_high: min and max, or
  // min - 0.5 and max + 0.5 when they are equal (as numpy.histogram widens an empty range); then
  // every value is in the middle bin, kHistogramBins / 2 (also when +-0.5 vanishes beside a huge
  // value, where numpy fails).
  double histogram_low = 0, histogram_high = 0;
  std::array<int64_t, kHistogramBins> histogram{};
};

// Polled between chunks: true stops the computation (CANCELLED). Empty: never.
using StatisticsCancelled = std::function<bool()>;

// The statistics of every element of `tensor` (any dtype, any rank), or CANCELLED when `cancelled`
// became true. REQUIRES: tensor.defined().
common::StatusOr<TensorStatistics> ComputeTensorStatistics(const Tensor& tensor, bool full,
                                                           const StatisticsCancelled& cancelled = {});

// The same over plain floats (tests, tools).
TensorStatistics ComputeStatistics(std::span<const float> values, bool full);

}  // namespace niels::daemon::model
