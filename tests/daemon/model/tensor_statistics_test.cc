// model::ComputeTensorStatistics against a naive reference (a sorted copy in long double, numpy's
// definitions written out) on ordinary and hostile inputs: one element, all values equal, huge
// magnitudes, signed zeros, values around the near-zero threshold, non-finite values; and on tensors
// of every stored dtype (chunk boundaries included) against the statistics of their floats.
#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "daemon/kernels/simd_kernels.h"
#include "daemon/model/tensor_statistics.h"

namespace niels::daemon::model {
namespace {
namespace tensor_statistics_test {  // this file's own names: the suite compiles as one unity unit

using Real = long double;

struct Reference {
  int64_t count = 0, nonfinite = 0;
  Real mean = 0, std = 0, min = 0, max = 0, l2 = 0, l1 = 0, abs_mean = 0, zeros = 0, near_zero = 0;
  std::array<Real, 5> percentiles{};
  Real low = 0, high = 0;
  std::array<int64_t, kHistogramBins> histogram{};
};

// numpy: np.percentile(x, q) (linear), np.histogram(x, bins=20, range=(min, max)), std with ddof 0.
Reference Naive(const std::vector<float>& values) {
  Reference r;
  std::vector<Real> x;
  for (float v : values) {
    if (std::isfinite(v)) {
      x.push_back(v);
    } else {
      ++r.nonfinite;
    }
  }
  r.count = static_cast<int64_t>(x.size());
  if (x.empty()) return r;
  std::sort(x.begin(), x.end());
  const Real n = static_cast<Real>(x.size());
  for (Real v : x) {
    r.mean += v;
    r.l2 += v * v;
    r.l1 += std::fabs(v);
    r.zeros += v == 0;
    r.near_zero += std::fabs(v) < 1e-6L;
  }
  r.mean /= n;
  for (Real v : x) r.std += (v - r.mean) * (v - r.mean);
  r.std = std::sqrt(r.std / n);
  r.l2 = std::sqrt(r.l2);
  r.abs_mean = r.l1 / n;
  r.zeros = 100 * r.zeros / n;
  r.near_zero = 100 * r.near_zero / n;
  r.min = x.front();
  r.max = x.back();
  const Real qs[5] = {5, 25, 50, 75, 95};
  for (int i = 0; i < 5; ++i) {
    const Real position = qs[i] / 100 * (n - 1);
    const size_t below = static_cast<size_t>(std::floor(position));
    const size_t above = std::min(below + 1, x.size() - 1);
    r.percentiles[i] = x[below] + (x[above] - x[below]) * (position - static_cast<Real>(below));
  }
  r.low = r.min;
  r.high = r.max;
  if (r.low == r.high) {  // in double, as numpy widens
    r.low = static_cast<double>(r.low) - 0.5;
    r.high = static_cast<double>(r.high) + 0.5;
  }
  for (Real v : x) {
    if (r.min == r.max) {  // the middle bin
      ++r.histogram[kHistogramBins / 2];
      continue;
    }
    const int bin = static_cast<int>(std::floor((v - r.low) / (r.high - r.low) * kHistogramBins));
    ++r.histogram[std::clamp(bin, 0, kHistogramBins - 1)];
  }
  return r;
}

// |a - b| within `relative` of `scale` (the values' magnitude).
void ExpectNear(double got, Real want, Real scale, const char* what) {
  const Real tolerance = 1e-12L * std::max<Real>(scale, std::numeric_limits<float>::min());
  EXPECT_LE(std::fabs(static_cast<Real>(got) - want), tolerance) << what << ": got " << got << ", want "
                                                                  << static_cast<double>(want);
}

void ExpectMatchesNaive(const std::vector<float>& values) {
  const Reference want = Naive(values);
  const TensorStatistics got = ComputeStatistics(values, /*full=*/true);
  ASSERT_TRUE(got.full);
  EXPECT_EQ(got.count, want.count);
  EXPECT_EQ(got.nonfinite, want.nonfinite);
  if (want.count == 0) return;
  const Real scale = std::max(std::fabs(want.min), std::fabs(want.max));
  ExpectNear(got.mean, want.mean, scale, "mean");
  ExpectNear(got.std, want.std, scale, "std");
  ExpectNear(got.min, want.min, scale, "min");
  ExpectNear(got.max, want.max, scale, "max");
  ExpectNear(got.l2_norm, want.l2, scale * std::sqrt(static_cast<Real>(want.count)), "l2_norm");
  ExpectNear(got.l1_norm, want.l1, scale * static_cast<Real>(want.count), "l1_norm");
  ExpectNear(got.abs_mean, want.abs_mean, scale, "abs_mean");
  EXPECT_DOUBLE_EQ(got.zeros_percent, static_cast<double>(want.zeros));
  EXPECT_DOUBLE_EQ(got.near_zero_percent, static_cast<double>(want.near_zero));
  for (int i = 0; i < 5; ++i) ExpectNear(got.percentiles[i], want.percentiles[i], scale, "percentile");
  EXPECT_EQ(got.median, got.percentiles[2]);
  EXPECT_DOUBLE_EQ(got.histogram_low, static_cast<double>(want.low));
  EXPECT_DOUBLE_EQ(got.histogram_high, static_cast<double>(want.high));
  EXPECT_EQ(got.histogram, want.histogram);
  int64_t binned = 0;
  for (int64_t c : got.histogram) binned += c;
  EXPECT_EQ(binned, want.count);
  // Compact is the same numbers, less the rest.
  const TensorStatistics compact = ComputeStatistics(values, /*full=*/false);
  EXPECT_FALSE(compact.full);
  EXPECT_EQ(compact.mean, got.mean);
  EXPECT_EQ(compact.std, got.std);
  EXPECT_EQ(compact.min, got.min);
  EXPECT_EQ(compact.max, got.max);
  EXPECT_EQ(compact.l2_norm, got.l2_norm);
}

std::vector<float> Normal(size_t n, double mean, double std, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal(mean, std);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(normal(rng));
  return v;
}

TEST(TensorStatisticsTest, OneElement) {
  ExpectMatchesNaive({0.25f});
  ExpectMatchesNaive({-3e38f});
  ExpectMatchesNaive({0.0f});
  const TensorStatistics s = ComputeStatistics(std::vector<float>{0.25f}, true);
  EXPECT_EQ(s.std, 0.0);
  EXPECT_EQ(s.median, 0.25);
  EXPECT_EQ(s.percentiles[0], 0.25);
  EXPECT_EQ(s.histogram[10], 1);  // min == max: [0.25 - 0.5, 0.25 + 0.5], the value in the middle bin
}

TEST(TensorStatisticsTest, AllValuesEqualHaveNoSpreadEvenWhenHuge) {
  ExpectMatchesNaive(std::vector<float>(1000, 0.3f));
  const std::vector<float> huge(70000, 1e30f);  // more than one chunk
  ExpectMatchesNaive(huge);
  const TensorStatistics s = ComputeStatistics(huge, true);
  EXPECT_EQ(s.std, 0.0);  // E[x^2] - mean^2 would give noise of order 1e22 here
  EXPECT_EQ(s.mean, static_cast<double>(1e30f));
  EXPECT_EQ(s.percentiles[0], s.percentiles[4]);
}

TEST(TensorStatisticsTest, LargeMagnitudesNearFloatMaxStayFinite) {
  std::vector<float> v = {3.4e38f, -3.4e38f, 1e38f, -2e38f, 3.0e38f, 0.0f, 1.0f};
  ExpectMatchesNaive(v);
  const TensorStatistics s = ComputeStatistics(v, true);
  EXPECT_TRUE(std::isfinite(s.l2_norm));
  EXPECT_TRUE(std::isfinite(s.std));
}

TEST(TensorStatisticsTest, SignedZerosTinyValuesAndTheNearZeroThreshold) {
  ExpectMatchesNaive({-0.0f, 0.0f, 1e-7f, -1e-7f, 9.9e-7f, 1e-6f, -1e-6f, 2e-6f, 1e-45f, -1e-45f, 0.5f});
  const TensorStatistics s =
      ComputeStatistics(std::vector<float>{-0.0f, 0.0f, 1e-7f, 2e-6f, 1.0f}, true);
  EXPECT_DOUBLE_EQ(s.zeros_percent, 40.0);
  EXPECT_DOUBLE_EQ(s.near_zero_percent, 60.0);
}

TEST(TensorStatisticsTest, NonFiniteValuesAreCountedAndLeftOut) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  ExpectMatchesNaive({1.0f, nan, 2.0f, inf, -inf, 3.0f});
  const TensorStatistics s = ComputeStatistics(std::vector<float>{1.0f, nan, 2.0f, inf, 3.0f}, true);
  EXPECT_EQ(s.count, 3);
  EXPECT_EQ(s.nonfinite, 2);
  EXPECT_EQ(s.mean, 2.0);
  EXPECT_EQ(s.median, 2.0);
  const TensorStatistics none = ComputeStatistics(std::vector<float>{nan, inf}, true);
  EXPECT_EQ(none.count, 0);
  EXPECT_EQ(none.mean, 0.0);
}

TEST(TensorStatisticsTest, RandomValuesOfManyShapesAndOffsets) {
  uint32_t seed = 1;
  for (size_t n : {2u, 3u, 7u, 20u, 21u, 1000u, 65536u, 65537u, 200001u}) {
    ExpectMatchesNaive(Normal(n, 0.0, 0.02, seed++));
    ExpectMatchesNaive(Normal(n, 1.0, 0.1, seed++));   // a norm's weights: mean far from 0
    ExpectMatchesNaive(Normal(n, -5e3, 1e-3, seed++));  // offset much larger than the spread
  }
  // Many repeated values (a quantized tensor has few distinct levels).
  std::vector<float> levels(100000);
  for (size_t i = 0; i < levels.size(); ++i) levels[i] = static_cast<float>(static_cast<int>(i * 7919 % 17) - 8) * 0.125f;
  ExpectMatchesNaive(levels);
}

// A tensor stored in `dtype` holding `values` (rounded or quantized as the kernels do).
struct Stored {
  std::vector<unsigned char> bytes;
  Tensor tensor;
};

Stored Store(const std::vector<float>& values, int64_t rows, int64_t cols, Dtype dtype) {
  Stored s;
  s.bytes.resize(static_cast<size_t>(kernels::RowBytes(dtype, cols) * rows));
  kernels::simd::FromFloat(values.data(), rows * cols, dtype, s.bytes.data());
  s.tensor = Tensor{s.bytes.data(), dtype, {rows, cols}};
  return s;
}

TEST(TensorStatisticsTest, EveryDtypeIsTheStatisticsOfItsValuesAsServed) {
  // 300 x 256: more than one chunk of 65536, rows that are whole blocks of every block type.
  const int64_t rows = 300, cols = 256;
  const std::vector<float> values = Normal(static_cast<size_t>(rows * cols), 0.01, 0.05, 42);
  for (Dtype dtype : {Dtype::kF32, Dtype::kF16, Dtype::kBF16, Dtype::kQ8_0, Dtype::kQ4_0, Dtype::kQ4_K,
                      Dtype::kQ5_K, Dtype::kQ6_K, Dtype::kQ5_0}) {
    SCOPED_TRACE(std::string(kernels::DtypeName(dtype)));
    const Stored stored = Store(values, rows, cols, dtype);
    const std::vector<float> served = stored.tensor.ToFloats();  // widened or dequantized, whole
    common::StatusOr<TensorStatistics> got = ComputeTensorStatistics(stored.tensor, true);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    const TensorStatistics want = ComputeStatistics(served, true);
    EXPECT_EQ(got->count, rows * cols);
    EXPECT_EQ(got->mean, want.mean);
    EXPECT_EQ(got->std, want.std);
    EXPECT_EQ(got->min, want.min);
    EXPECT_EQ(got->max, want.max);
    EXPECT_EQ(got->l2_norm, want.l2_norm);
    EXPECT_EQ(got->percentiles, want.percentiles);
    EXPECT_EQ(got->histogram, want.histogram);
    ExpectMatchesNaive(served);
  }
}

TEST(TensorStatisticsTest, ACancelStopsBetweenChunks) {
  const std::vector<float> values = Normal(200000, 0, 1, 7);
  const Tensor tensor{values.data(), Dtype::kF32, {200000}};
  int polls = 0;
  common::StatusOr<TensorStatistics> got = ComputeTensorStatistics(tensor, true, [&] { return ++polls > 2; });
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), common::StatusCode::kCancelled);
  EXPECT_EQ(polls, 3);
  EXPECT_TRUE(ComputeTensorStatistics(tensor, true, [] { return false; }).ok());
}

}  // namespace tensor_statistics_test
}  // namespace
}  // namespace niels::daemon::model
