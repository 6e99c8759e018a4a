#include "daemon/model/tensor_statistics.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "daemon/kernels/simd_kernels.h"

namespace niels::daemon::model {
namespace {

using common::Status;

// The values in chunks: Read(begin, count) -> a span of `count` floats valid until the next call.
class TensorValues {
 public:
  explicit TensorValues(const Tensor& tensor)
      : tensor_(tensor), buffer_(static_cast<size_t>(std::min(tensor.numel(), kStatisticsChunk))) {}
  int64_t size() const { return tensor_.numel(); }
  std::span<const float> Read(int64_t begin, int64_t count) {
    // begin is a multiple of kStatisticsChunk, hence of the block; count is a whole number of
    // blocks (the last chunk is the rest of whole rows).
    const auto* base = static_cast<const unsigned char*>(tensor_.data);
    kernels::simd::ToFloat(base + kernels::RowBytes(tensor_.dtype, begin), tensor_.dtype, count, buffer_.data());
    return {buffer_.data(), static_cast<size_t>(count)};
  }

 private:
  const Tensor& tensor_;
  std::vector<float> buffer_;
};

class SpanValues {
 public:
  explicit SpanValues(std::span<const float> values) : values_(values) {}
  int64_t size() const { return static_cast<int64_t>(values_.size()); }
  std::span<const float> Read(int64_t begin, int64_t count) {
    return values_.subspan(static_cast<size_t>(begin), static_cast<size_t>(count));
  }

 private:
  std::span<const float> values_;
};

// Calls visit(span) for every chunk of values in order; CANCELLED when `cancelled` turns true.
template <typename Values, typename Visit>
Status ForEachChunk(Values& values, const StatisticsCancelled& cancelled, Visit&& visit) {
  const int64_t n = values.size();
  for (int64_t begin = 0; begin < n; begin += kStatisticsChunk) {
    if (cancelled && cancelled()) return Status::Cancelled("the request was cancelled");
    visit(values.Read(begin, std::min(kStatisticsChunk, n - begin)));
  }
  return Status::Ok();
}

// Calls visit(x) for every finite value, chunk by chunk; CANCELLED when `cancelled` turns true.
template <typename Values, typename Visit>
Status ForEachFinite(Values& values, const StatisticsCancelled& cancelled, Visit&& visit) {
  return ForEachChunk(values, cancelled, [&](std::span<const float> chunk) {
    for (const float x : chunk) {
      if (std::isfinite(x)) visit(x);
    }
  });
}

// The sums run in kLanes interleaved lanes within a chunk (value i in lane i % kLanes), added up
// in a fixed order at the chunk's end: independent additions pipeline, and the order of every sum
// depends on the values' positions only.
constexpr size_t kLanes = 4;

// Pass 1: counts, sums and extremes of the finite values.
struct Sums {
  int64_t count = 0, zeros = 0, near_zero = 0;
  double sum = 0, squares = 0, abs = 0;
  float min = std::numeric_limits<float>::infinity(), max = -std::numeric_limits<float>::infinity();

  void Add(std::span<const float> chunk) {
    std::array<double, kLanes> lane_sum{}, lane_squares{}, lane_abs{};
    for (size_t i = 0; i < chunk.size(); ++i) {
      const float x = chunk[i];
      const bool finite = std::isfinite(x);
      const double v = finite ? static_cast<double>(x) : 0.0;  // a non-finite value adds nothing
      const size_t lane = i % kLanes;
      lane_sum[lane] += v;
      lane_squares[lane] += v * v;
      lane_abs[lane] += std::fabs(v);
      count += finite;
      zeros += finite && x == 0.0f;
      near_zero += finite && std::fabs(v) < kNearZero;
      min = finite ? std::min(min, x) : min;
      max = finite ? std::max(max, x) : max;
    }
    sum += (lane_sum[0] + lane_sum[1]) + (lane_sum[2] + lane_sum[3]);
    squares += (lane_squares[0] + lane_squares[1]) + (lane_squares[2] + lane_squares[3]);
    abs += (lane_abs[0] + lane_abs[1]) + (lane_abs[2] + lane_abs[3]);
  }
};
static_assert(kLanes == 4, "Sums::Add adds up four lanes");

// Pass 2: the squared deviations of the finite values from `mean`.
double SquaredDeviations(std::span<const float> chunk, double mean) {
  std::array<double, kLanes> lane{};
  for (size_t i = 0; i < chunk.size(); ++i) {
    const float x = chunk[i];
    const double d = std::isfinite(x) ? static_cast<double>(x) - mean : 0.0;
    lane[i % kLanes] += d * d;
  }
  return (lane[0] + lane[1]) + (lane[2] + lane[3]);
}

// The float's bit pattern mapped so that unsigned order is the floats' order (-0 just below +0).
uint32_t OrderKey(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  return (bits & 0x80000000u) != 0 ? ~bits : bits | 0x80000000u;
}

float FromOrderKey(uint32_t key) {
  const uint32_t bits = (key & 0x80000000u) != 0 ? key & 0x7FFFFFFFu : ~key;
  float x;
  std::memcpy(&x, &bits, sizeof x);
  return x;
}

// numpy's _lerp: a + (b - a) t, computed from b's side when t >= 0.5.
double Lerp(double a, double b, double t) {
  const double diff = b - a;
  return t >= 0.5 ? b - diff * (1 - t) : a + diff * t;
}

// The histogram's bin edges as numpy.linspace(low, high, kHistogramBins + 1) computes them.
std::array<double, kHistogramBins + 1> BinEdges(double low, double high) {
  std::array<double, kHistogramBins + 1> edges;
  const double step = (high - low) / kHistogramBins;
  for (int i = 0; i <= kHistogramBins; ++i) edges[i] = static_cast<double>(i) * step + low;
  edges[kHistogramBins] = high;
  return edges;
}

// The bin of x as numpy.histogram finds it for equal bins: scaled, truncated, then corrected
// against the edges (the last bin closed).
int BinOf(double x, double low, double high, const std::array<double, kHistogramBins + 1>& edges) {
  int bin = static_cast<int>((x - low) / (high - low) * kHistogramBins);
  bin = std::clamp(bin, 0, kHistogramBins - 1);
  if (x < edges[bin]) --bin;
  if (bin < kHistogramBins - 1 && x >= edges[bin + 1]) ++bin;
  return std::clamp(bin, 0, kHistogramBins - 1);
}

// The values at 0-based ranks `ranks` of the sorted finite values (radix selection on OrderKey),
// given `high`, the counts of the keys' upper 16 bits; one more pass over the values.
template <typename Values>
common::StatusOr<std::vector<float>> ValuesAtRanks(Values& values, const std::vector<uint64_t>& high,
                                                   const std::vector<int64_t>& ranks,
                                                   const StatisticsCancelled& cancelled) {
  constexpr uint8_t kNone = 0xFF;
  std::vector<uint32_t> bucket(ranks.size());
  std::vector<int64_t> within(ranks.size());
  std::vector<uint8_t> slot_of(size_t{1} << 16, kNone);
  std::vector<uint32_t> slots;  // the distinct buckets sought
  for (size_t r = 0; r < ranks.size(); ++r) {
    int64_t before = 0;
    uint32_t b = 0;
    while (before + static_cast<int64_t>(high[b]) <= ranks[r]) before += static_cast<int64_t>(high[b++]);
    bucket[r] = b;
    within[r] = ranks[r] - before;
    if (slot_of[b] == kNone) {
      slot_of[b] = static_cast<uint8_t>(slots.size());
      slots.push_back(b);
    }
  }
  std::vector<std::vector<uint64_t>> low(slots.size(), std::vector<uint64_t>(size_t{1} << 16));
  NIELS_RETURN_IF_ERROR(ForEachFinite(values, cancelled, [&](float x) {
    const uint32_t key = OrderKey(x);
    const uint8_t slot = slot_of[key >> 16];
    if (slot != kNone) ++low[slot][key & 0xFFFFu];
  }));
  std::vector<float> out(ranks.size());
  for (size_t r = 0; r < ranks.size(); ++r) {
    const std::vector<uint64_t>& counts = low[slot_of[bucket[r]]];
    int64_t before = 0;
    uint32_t l = 0;
    while (before + static_cast<int64_t>(counts[l]) <= within[r]) before += static_cast<int64_t>(counts[l++]);
    out[r] = FromOrderKey(bucket[r] << 16 | l);
  }
  return out;
}

// The same as ValuesAtRanks for a few values: their order keys sorted.
template <typename Values>
common::StatusOr<std::vector<float>> SortedValuesAtRanks(Values& values, const std::vector<int64_t>& ranks) {
  std::vector<uint32_t> keys;
  keys.reserve(static_cast<size_t>(values.size()));
  (void)ForEachFinite(values, {}, [&](float x) { keys.push_back(OrderKey(x)); });
  std::sort(keys.begin(), keys.end());
  std::vector<float> out(ranks.size());
  for (size_t r = 0; r < ranks.size(); ++r) out[r] = FromOrderKey(keys[static_cast<size_t>(ranks[r])]);
  return out;
}

template <typename Values>
common::StatusOr<TensorStatistics> Compute(Values& values, bool full, const StatisticsCancelled& cancelled) {
  TensorStatistics s;
  s.full = full;
  s.nonfinite = values.size();
  // Pass 1: the sums, extremes and counts.
  Sums sums;
  NIELS_RETURN_IF_ERROR(ForEachChunk(values, cancelled, [&](std::span<const float> chunk) { sums.Add(chunk); }));
  s.count = sums.count;
  s.nonfinite -= s.count;
  if (s.count == 0) return s;
  const double n = static_cast<double>(s.count);
  const float min = sums.min, max = sums.max;
  s.mean = sums.sum / n;
  s.min = min;
  s.max = max;
  s.l2_norm = std::sqrt(sums.squares);
  // Pass 2: squared deviations from the mean (no cancellation, unlike E[x^2] - mean^2); for the full
  // statistics also the histogram and the upper halves of the order keys.
  double deviations = 0;
  // Up to kSortedSelection values, the percentiles come from the sorted order keys instead (the same
  // order statistics, without the radix selection's 5.6 MiB of counts).
  const bool sorted_selection = values.size() <= kSortedSelection;
  std::vector<uint64_t> high(full && !sorted_selection ? size_t{1} << 16 : 0);
  if (full) {
    s.histogram_low = min;
    s.histogram_high = max;
    if (s.histogram_low == s.histogram_high) {
      s.histogram_low -= 0.5;
      s.histogram_high += 0.5;
    }
  }
  const auto edges = BinEdges(s.histogram_low, s.histogram_high);
  // One value throughout: all in the middle bin (also where +-0.5 vanishes in a huge magnitude).
  const bool one_value = min == max;
  NIELS_RETURN_IF_ERROR(ForEachChunk(values, cancelled, [&](std::span<const float> chunk) {
    deviations += SquaredDeviations(chunk, s.mean);
    if (!full) return;
    for (const float x : chunk) {
      if (!std::isfinite(x)) continue;
      ++s.histogram[one_value ? kHistogramBins / 2 : BinOf(x, s.histogram_low, s.histogram_high, edges)];
      if (!sorted_selection) ++high[OrderKey(x) >> 16];
    }
  }));
  s.std = std::sqrt(deviations / n);
  if (!full) return s;
  s.abs_mean = sums.abs / n;
  s.l1_norm = sums.abs;
  s.zeros_percent = 100.0 * static_cast<double>(sums.zeros) / n;
  s.near_zero_percent = 100.0 * static_cast<double>(sums.near_zero) / n;
  // Pass 3: the two ranks around each percentile's position (q / 100) (n - 1).
  std::vector<int64_t> ranks;
  std::vector<double> gammas;
  for (const double q : kPercentiles) {
    const double position = static_cast<double>(s.count - 1) * (q / 100.0);
    const int64_t below = static_cast<int64_t>(std::floor(position));
    ranks.push_back(below);
    ranks.push_back(std::min(below + 1, s.count - 1));
    gammas.push_back(position - static_cast<double>(below));
  }
  common::StatusOr<std::vector<float>> at =
      sorted_selection ? SortedValuesAtRanks(values, ranks) : ValuesAtRanks(values, high, ranks, cancelled);
  if (!at.ok()) return at.status();
  for (size_t i = 0; i < kPercentiles.size(); ++i) {
    s.percentiles[i] = Lerp((*at)[2 * i], (*at)[2 * i + 1], gammas[i]);
  }
  s.median = s.percentiles[2];  // kPercentiles[2] is 50
  return s;
}

static_assert(kPercentiles[2] == 50);
static_assert(kStatisticsChunk % 256 == 0, "a chunk must be whole blocks of every block type");

}  // namespace

common::StatusOr<TensorStatistics> ComputeTensorStatistics(const Tensor& tensor, bool full,
                                                           const StatisticsCancelled& cancelled) {
  TensorValues values(tensor);
  return Compute(values, full, cancelled);
}

TensorStatistics ComputeStatistics(std::span<const float> values, bool full) {
  SpanValues source(values);
  return *Compute(source, full, {});
}

}  // namespace niels::daemon::model
