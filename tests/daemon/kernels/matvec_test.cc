// The SIMD kernels (simd_kernels.h) and MatVec (matvec.h) under every implementation this CPU can
// run (AVX-512, AVX2, portable; the others are skipped), with f32, f16 and bf16 weights, against
// plain loops summed in double over the same (widened) weight values.

#include "daemon/kernels/matvec.h"
#include "daemon/kernels/simd_kernels.h"
#include "tests/daemon/kernels/forced_isa_test.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include "daemon/kernels/dtype.h"

namespace niels::daemon::kernels {
namespace {
namespace matvec_test {  // this file's own names: the suite compiles as one unity unit

using simd::Isa;

std::vector<float> RandomVector(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

// A weight matrix stored in `dtype` (values rounded on the way), with its exact float values.
struct StoredWeights {
  std::vector<uint8_t> bytes;
  std::vector<float> values;  // what the stored elements are, widened exactly
  Dtype dtype;
  Matrix matrix() const { return {bytes.data(), dtype}; }
};

StoredWeights Store(const std::vector<float>& w, Dtype dtype) {
  StoredWeights s{std::vector<uint8_t>(w.size() * DtypeSize(dtype)), std::vector<float>(w.size()), dtype};
  for (size_t i = 0; i < w.size(); ++i) {
    if (dtype == Dtype::kF32) {
      std::memcpy(s.bytes.data() + 4 * i, &w[i], 4);
    } else {
      const uint16_t h = dtype == Dtype::kF16 ? FloatToHalf(w[i]) : FloatToBFloat16(w[i]);
      std::memcpy(s.bytes.data() + 2 * i, &h, 2);
    }
    s.values[i] = ElementToFloat(s.bytes.data(), dtype, static_cast<int64_t>(i));
  }
  return s;
}

// The plain definition, summed in double: y[r, o] = bias[o] + sum_i w[o, i] * x[r, i].
std::vector<double> NaiveMatVec(const std::vector<float>& w, int64_t out, int64_t in, const float* bias,
                                const std::vector<float>& x, int64_t rows) {
  std::vector<double> y(rows * out);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t o = 0; o < out; ++o) {
      double sum = bias != nullptr ? bias[o] : 0.0;
      for (int64_t i = 0; i < in; ++i) sum += static_cast<double>(w[o * in + i]) * x[r * in + i];
      y[r * out + o] = sum;
    }
  }
  return y;
}

struct Shape {
  int64_t out;
  int64_t in;
  int64_t rows;
  bool bias;
};

// Every implementation with every weight dtype (forced_isa_test.h).
class SimdKernelsTest : public ForcedIsaTest<std::tuple<Isa, Dtype>> {
 protected:
  Dtype dtype() const { return std::get<1>(GetParam()); }
};

// Relative to the size of the terms: float32 sums of `in` products of N(0, 1) numbers.
void ExpectMatchesNaive(const Shape& s, Dtype dtype, WorkerPool& pool) {
  const StoredWeights w = Store(RandomVector(s.out * s.in, 1), dtype);
  const auto x = RandomVector(s.rows * s.in, 2);
  const auto bias = RandomVector(s.out, 3);
  const float* b = s.bias ? bias.data() : nullptr;
  std::vector<float> y(s.rows * s.out, std::nanf(""));
  MatVec(w.matrix(), s.out, s.in, b, x.data(), s.rows, y.data(), pool);
  const auto expected = NaiveMatVec(w.values, s.out, s.in, b, x, s.rows);
  const double tolerance = 1e-5 * std::sqrt(static_cast<double>(s.in)) * 4;
  for (size_t k = 0; k < y.size(); ++k) {
    ASSERT_NEAR(y[k], expected[k], tolerance)
        << "out " << s.out << " in " << s.in << " rows " << s.rows << " bias " << s.bias << " threads "
        << pool.threads() << " at row " << k / s.out << " col " << k % s.out;
  }
}

TEST_P(SimdKernelsTest, MatVecMatchesNaiveLoopsForEveryShapeAndThreadCount) {
  // Sizes around the kernels' blocks (8 or 16 columns, 4 weight rows, 3 or 6 rows of x) and above
  // the parallel threshold, with tails of every length, rows of x from 1 to a prefill's 70 (several
  // L2 chunks of rows for in = 1001), with and without bias.
  const std::vector<Shape> shapes = {
      {1, 1, 1, false},      {3, 5, 2, true},      {4, 8, 1, true},       {7, 9, 3, false},
      {13, 17, 8, true},     {384, 384, 1, false}, {1152, 384, 1, true},  {384, 1152, 4, true},
      {1001, 389, 5, false}, {1003, 390, 8, true}, {257, 131, 7, true},   {2000, 384, 2, false},
      {13, 17, 9, true},     {257, 131, 10, false}, {384, 1152, 11, true}, {1003, 390, 16, true},
      {40, 64, 13, false},   {97, 1001, 70, true},  {64, 40, 23, true},
  };
  for (int threads : {1, 2, 3}) {
    WorkerPool pool(threads);
    for (const Shape& shape : shapes) ExpectMatchesNaive(shape, dtype(), pool);
  }
}

// Batch invariance: every row of y is bitwise the same (==) whether x has 1 row (the decode loop),
// 2, 8, 9, 11 or 16, or 17, 23 or 100 rows (the K-blocked prefill loop: tiles of every shape,
// more than one chunk of rows, column slices with and without a tail, more than one group of
// weight rows), wherever the row sits among them, and on 1 or 3 threads.
void ExpectRowsIndependentOfTheBatch(Dtype dtype, int64_t out, int64_t in) {
  const StoredWeights w = Store(RandomVector(out * in, 8), dtype);
  const auto bias = RandomVector(out, 9);
  constexpr int64_t kRows = 100;
  const auto x = RandomVector(kRows * in, 10);
  WorkerPool one(1), three(3);
  std::vector<std::vector<float>> alone(kRows, std::vector<float>(out));
  for (int64_t r = 0; r < kRows; ++r) {
    MatVec(w.matrix(), out, in, bias.data(), x.data() + r * in, 1, alone[r].data(), one);
  }
  for (int64_t rows : {2, 8, 9, 11, 16, 17, 23, 100}) {
    for (int64_t first : {int64_t{0}, kRows - rows}) {
      for (WorkerPool* pool : {&one, &three}) {
        std::vector<float> y(rows * out);
        MatVec(w.matrix(), out, in, bias.data(), x.data() + first * in, rows, y.data(), *pool);
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t o = 0; o < out; ++o) {
            ASSERT_EQ(y[r * out + o], alone[first + r][o])
                << "out " << out << " in " << in << ": row " << first + r << " col " << o << " in a batch of "
                << rows << " on " << pool->threads() << " threads";
          }
        }
      }
    }
  }
}

TEST_P(SimdKernelsTest, EachRowIsBitwiseIndependentOfTheOtherRows) {
  ExpectRowsIndependentOfTheBatch(dtype(), 389, 1001);  // odd sizes: weight-row tail and column tail
  ExpectRowsIndependentOfTheBatch(dtype(), 70, 1536);   // three whole column slices, 2 rows past the tiles
}

// A 16-bit matrix gives exactly the products of the f32 matrix of the same values: widening is
// exact and the sums run the same chain.
TEST_P(SimdKernelsTest, SixteenBitWeightsGiveTheSameBitsAsTheirF32Values) {
  const int64_t out = 77, in = 390, rows = 13;
  const StoredWeights w = Store(RandomVector(out * in, 11), dtype());
  const StoredWeights wide = Store(w.values, Dtype::kF32);
  const auto x = RandomVector(rows * in, 12);
  WorkerPool pool(2);
  std::vector<float> narrow_y(rows * out), wide_y(rows * out);
  MatVec(w.matrix(), out, in, nullptr, x.data(), rows, narrow_y.data(), pool);
  MatVec(wide.matrix(), out, in, nullptr, x.data(), rows, wide_y.data(), pool);
  EXPECT_EQ(narrow_y, wide_y);
}

TEST_P(SimdKernelsTest, WritesOnlyItsOutputRows) {
  WorkerPool pool(2);
  const int64_t out = 1001, in = 389, rows = 3;
  const StoredWeights w = Store(RandomVector(out * in, 4), dtype());
  const auto x = RandomVector(rows * in, 5);
  std::vector<float> y(rows * out + 16, -7.0f);  // 16 guard values after the output
  MatVec(w.matrix(), out, in, nullptr, x.data(), rows, y.data(), pool);
  for (int64_t k = rows * out; k < static_cast<int64_t>(y.size()); ++k) EXPECT_EQ(y[k], -7.0f) << k;
}

// The bulk conversions give exactly dtype.h's scalar conversions, for every kind of value: normal,
// subnormal, beyond f16's range, halfway cases, infinities and NaN.
TEST_P(SimdKernelsTest, ConversionsMatchTheScalarOnesBitForBit) {
  std::mt19937 rng(13);
  std::vector<float> values;
  for (int i = 0; i < 4000; ++i) {
    uint32_t bits = rng();
    float v;
    std::memcpy(&v, &bits, 4);
    values.push_back(v);
  }
  for (float v : {0.0f, -0.0f, 1.0f, 65504.0f, 65519.99f, 65520.0f, 1e9f, -1e9f, 5.96e-8f, 2.98e-8f, 2.99e-8f,
                  6.1e-5f, 1.0f + 1.0f / 2048, std::numeric_limits<float>::infinity(),
                  -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
                  std::numeric_limits<float>::denorm_min()}) {
    values.push_back(v);
  }
  values.resize(values.size() + 5, 0.5f);  // a tail shorter than a vector
  const int64_t n = static_cast<int64_t>(values.size());
  if (dtype() == Dtype::kF32) {
    std::vector<float> copy(n), back(n);
    simd::FromFloat(values.data(), n, Dtype::kF32, copy.data());
    simd::ToFloat(copy.data(), Dtype::kF32, n, back.data());
    EXPECT_EQ(std::memcmp(back.data(), values.data(), n * 4), 0);
    return;
  }
  std::vector<uint16_t> narrow(n);
  simd::FromFloat(values.data(), n, dtype(), narrow.data());
  std::vector<float> widened(n);
  simd::ToFloat(narrow.data(), dtype(), n, widened.data());
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t expected = dtype() == Dtype::kF16 ? FloatToHalf(values[i]) : FloatToBFloat16(values[i]);
    ASSERT_EQ(narrow[i], expected) << "value " << values[i] << " at " << i;
    const float back = dtype() == Dtype::kF16 ? HalfToFloat(narrow[i]) : BFloat16ToFloat(narrow[i]);
    ASSERT_EQ(std::memcmp(&widened[i], &back, 4), 0) << "value " << values[i] << " at " << i;
  }
}

// The element-wise functions, which involve no weights: once per implementation.
class SimdMathTest : public ForcedIsaTest<Isa> {};

TEST_P(SimdMathTest, ExpSoftmaxAndSiluMatchLibm) {
  std::vector<float> x;
  for (float v = -110.0f; v <= 90.0f; v += 0.0137f) x.push_back(v);
  for (float v : {0.0f, -0.0f, 1e-30f, 88.72f, 88.73f, -103.9f, -104.0f, std::numeric_limits<float>::infinity(),
                  -std::numeric_limits<float>::infinity()}) {
    x.push_back(v);
  }
  std::vector<float> e(x.size());
  simd::Exp(x.data(), static_cast<int64_t>(x.size()), e.data());
  for (size_t i = 0; i < x.size(); ++i) {
    const double expected = std::exp(static_cast<double>(x[i]));
    if (expected > std::numeric_limits<float>::max()) {
      ASSERT_TRUE(std::isinf(e[i])) << x[i];
    } else if (expected >= std::numeric_limits<float>::min()) {
      ASSERT_NEAR(e[i] / expected, 1.0, 3e-7) << "exp(" << x[i] << ")";
    } else {
      ASSERT_NEAR(e[i], expected, 2 * std::numeric_limits<float>::denorm_min()) << "exp(" << x[i] << ")";
    }
  }
  float nan = std::numeric_limits<float>::quiet_NaN();
  simd::Exp(&nan, 1, &nan);
  EXPECT_TRUE(std::isnan(nan));

  for (int64_t m : {1, 5, 16, 17, 300}) {
    std::vector<float> s = RandomVector(m, 14);
    const std::vector<float> raw = s;
    simd::Softmax(s.data(), m, 0.125f);
    double max = raw[0], total = 0.0;
    for (float v : raw) max = std::max<double>(max, v);
    for (float v : raw) total += std::exp(0.125 * (v - max));
    for (int64_t j = 0; j < m; ++j) ASSERT_NEAR(s[j], std::exp(0.125 * (raw[j] - max)) / total, 1e-6) << m;
  }

  const int64_t n = 37;
  std::vector<float> g = RandomVector(n, 15), a = RandomVector(n, 16);
  const std::vector<float> a0 = a;
  for (float& v : g) v *= 8.0f;
  simd::SiluMul(g.data(), a.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    const double expected = a0[i] * (g[i] / (1.0 + std::exp(-static_cast<double>(g[i]))));
    ASSERT_NEAR(a[i], expected, 1e-6 * std::max(1.0, std::fabs(expected))) << i;
  }
}

INSTANTIATE_TEST_SUITE_P(EveryIsaAndDtype, SimdKernelsTest,
                         ::testing::Combine(::testing::Values(Isa::kAvx512, Isa::kAvx2, Isa::kPortable),
                                            ::testing::Values(Dtype::kF32, Dtype::kF16, Dtype::kBF16)),
                         [](const ::testing::TestParamInfo<std::tuple<Isa, Dtype>>& info) {
                           return IsaName(std::get<0>(info.param)) + "_" +
                                  std::string(DtypeName(std::get<1>(info.param)));
                         });

INSTANTIATE_TEST_SUITE_P(EveryIsa, SimdMathTest, ::testing::Values(Isa::kAvx512, Isa::kAvx2, Isa::kPortable),
                         [](const ::testing::TestParamInfo<Isa>& info) { return IsaName(info.param); });

TEST(SimdKernelsTest, PicksTheBestImplementationThisCpuRuns) {
  EXPECT_STREQ(MatVecKernelName(), simd::Name());
#if defined(__x86_64__)
  __builtin_cpu_init();
  // F16C from CPUID leaf 1 (ECX bit 29): clang's __builtin_cpu_supports does not know the name.
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & (1u << 29)) != 0;
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512dq") && f16c) {
    EXPECT_EQ(simd::Detected(), Isa::kAvx512);
  } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c) {
    EXPECT_EQ(simd::Detected(), Isa::kAvx2);
  }
#endif
}

}  // namespace matvec_test
}  // namespace
}  // namespace niels::daemon::kernels
