#include "daemon/kernels/matvec.h"
#include "daemon/kernels/simd_kernels.h"

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace niels::daemon::kernels {
namespace {

std::vector<float> RandomVector(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
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

// Relative to the size of the terms: float32 sums of `in` products of N(0, 1) numbers.
void ExpectMatchesNaive(const Shape& s, WorkerPool& pool) {
  const auto w = RandomVector(s.out * s.in, 1);
  const auto x = RandomVector(s.rows * s.in, 2);
  const auto bias = RandomVector(s.out, 3);
  const float* b = s.bias ? bias.data() : nullptr;
  std::vector<float> y(s.rows * s.out, std::nanf(""));
  MatVec(w.data(), s.out, s.in, b, x.data(), s.rows, y.data(), pool);
  const auto expected = NaiveMatVec(w, s.out, s.in, b, x, s.rows);
  const double tolerance = 1e-5 * std::sqrt(static_cast<double>(s.in)) * 4;
  for (size_t k = 0; k < y.size(); ++k) {
    ASSERT_NEAR(y[k], expected[k], tolerance)
        << "out " << s.out << " in " << s.in << " rows " << s.rows << " bias " << s.bias << " threads "
        << pool.threads() << " at row " << k / s.out << " col " << k % s.out;
  }
}

// Runs the test body with the kernels picked for this CPU and again with the portable ones, which
// a machine with AVX2 would otherwise never execute.
class SimdKernelsTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    simd::ForcePortableForTesting(GetParam());
    if (GetParam()) {
      ASSERT_STREQ(simd::Name(), "portable");
    }
  }
  void TearDown() override { simd::ForcePortableForTesting(false); }
};

TEST_P(SimdKernelsTest, MatVecMatchesNaiveLoopsForEveryShapeAndThreadCount) {
  // Sizes around the kernel's blocks (8 columns, 4 rows) and above the parallel threshold, with
  // tails of every length, 1..8 rows of x (row by row) and 9..16 (the GEMM-shaped tile, with 0..2
  // remainder rows), with and without bias.
  const std::vector<Shape> shapes = {
      {1, 1, 1, false},      {3, 5, 2, true},      {4, 8, 1, true},      {7, 9, 3, false},
      {13, 17, 8, true},     {384, 384, 1, false}, {1152, 384, 1, true}, {384, 1152, 4, true},
      {1001, 389, 5, false}, {1003, 390, 8, true}, {257, 131, 7, true},  {16000 / 8, 384, 2, false},
      {13, 17, 9, true},     {257, 131, 10, false}, {384, 1152, 11, true}, {1003, 390, 16, true},
  };
  for (int threads : {1, 2, 3}) {
    WorkerPool pool(threads);
    for (const Shape& shape : shapes) ExpectMatchesNaive(shape, pool);
  }
}

// Batch invariance: every row of y is bitwise the same (==) whether x has 1, 2, 8, 9, 11 or 16
// rows, wherever the row sits among them, and on 1 or 3 threads.
TEST_P(SimdKernelsTest, EachRowIsBitwiseIndependentOfTheOtherRows) {
  const int64_t out = 389, in = 1001;  // odd sizes: weight-row tail and column tail
  const auto w = RandomVector(out * in, 8);
  const auto bias = RandomVector(out, 9);
  constexpr int64_t kRows = 16;
  const auto x = RandomVector(kRows * in, 10);
  WorkerPool one(1), three(3);
  std::vector<std::vector<float>> alone(kRows, std::vector<float>(out));
  for (int64_t r = 0; r < kRows; ++r) MatVec(w.data(), out, in, bias.data(), x.data() + r * in, 1, alone[r].data(), one);
  for (int64_t rows : {2, 8, 9, 11, 16}) {
    for (int64_t first : {int64_t{0}, kRows - rows}) {
      for (WorkerPool* pool : {&one, &three}) {
        std::vector<float> y(rows * out);
        MatVec(w.data(), out, in, bias.data(), x.data() + first * in, rows, y.data(), *pool);
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t o = 0; o < out; ++o) {
            ASSERT_EQ(y[r * out + o], alone[first + r][o])
                << "row " << first + r << " col " << o << " in a batch of " << rows << " on " << pool->threads()
                << " threads";
          }
        }
      }
    }
  }
}

TEST(MatVecTest, WritesOnlyItsOutputRows) {
  WorkerPool pool(2);
  const int64_t out = 1001, in = 389, rows = 3;
  const auto w = RandomVector(out * in, 4);
  const auto x = RandomVector(rows * in, 5);
  std::vector<float> y(rows * out + 16, -7.0f);  // 16 guard values after the output
  MatVec(w.data(), out, in, nullptr, x.data(), rows, y.data(), pool);
  for (int64_t k = rows * out; k < static_cast<int64_t>(y.size()); ++k) EXPECT_EQ(y[k], -7.0f) << k;
}

TEST_P(SimdKernelsTest, WeightedSumRowsMatchesNaiveLoops) {
  // Row lengths around the 64-column register block and the 8-lane tail; 1..300 rows.
  for (int64_t n : {1, 7, 8, 20, 64, 72, 130}) {
    for (int64_t m : {1, 5, 300}) {
      const auto rows = RandomVector(m * n, 6);
      const auto p = RandomVector(m, 7);
      std::vector<float> out(n + 8, -7.0f);  // 8 guard values after the output
      simd::WeightedSumRows(p.data(), rows.data(), m, n, out.data());
      for (int64_t i = 0; i < n; ++i) {
        double expected = 0.0;
        for (int64_t j = 0; j < m; ++j) expected += static_cast<double>(p[j]) * rows[j * n + i];
        ASSERT_NEAR(out[i], expected, 1e-5 * std::sqrt(static_cast<double>(m)) * 4) << "n " << n << " m " << m;
      }
      for (int64_t i = n; i < n + 8; ++i) ASSERT_EQ(out[i], -7.0f) << "wrote past the output, n " << n;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(PickedAndPortable, SimdKernelsTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return std::string(info.param ? "Portable" : "PickedForThisCpu");
                         });

TEST(MatVecTest, NamesAKernel) {
  const std::string name = MatVecKernelName();
  EXPECT_TRUE(name == "avx2+fma" || name == "portable") << name;
}

}  // namespace
}  // namespace niels::daemon::kernels
