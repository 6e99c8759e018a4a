// MatVec and DotRows with block-quantized weights (q8_0, q4_0, q4_k, q5_k, q6_k, q5_0) under every
// implementation this CPU runs (AVX-512 VNNI, AVX2, portable):
//   - the activation quantization every implementation writes is QuantizeActivationRow's, bytewise;
//   - y against two references summed in double over the dequantized weights (DequantizeBlocks):
//     with the quantized activations (d_x * q: only float rounding may differ, 1e-5 of the sum of
//     |terms|), and with x itself (the activations' rounding bound: half a step, amax / 254, per
//     value, times the weights);
//   - batch invariance: each row bitwise the same alone, in batches of 1..100, on 1 or 3 threads,
//     in any o range (==);
//   - odd shapes: in = 32 k (k odd) and 256 k, out not a multiple of the tile, rows 1..70.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "daemon/kernels/dtype.h"
#include "daemon/kernels/matvec.h"
#include "daemon/kernels/quant_activations.h"
#include "daemon/kernels/quant_blocks.h"
#include "daemon/kernels/simd_kernels.h"
#include "tests/daemon/kernels/forced_isa_test.h"

namespace niels::daemon::kernels {
namespace {
namespace matvec_quant_test {  // this file's own names: the suite compiles as one unity unit

using simd::Isa;

constexpr Dtype kBlockTypes[] = {Dtype::kQ8_0, Dtype::kQ4_0, Dtype::kQ4_K, Dtype::kQ5_K, Dtype::kQ6_K, Dtype::kQ5_0};

std::vector<float> RandomVector(int64_t n, uint32_t seed, float sigma = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, sigma);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = normal(rng);
  return v;
}

// A [out, in] weight matrix of a block type with its dequantized values, and for q4_k / q5_k the
// magnitudes d * sc * q + dmin * m of each value's two terms (the float error scales with them).
struct QuantWeights {
  std::vector<unsigned char> bytes;
  std::vector<float> values, magnitudes;
  Dtype dtype;
  Matrix matrix() const { return {bytes.data(), dtype}; }
};

QuantWeights MakeWeights(Dtype dtype, int64_t out, int64_t in, uint32_t seed) {
  QuantWeights w{std::vector<unsigned char>(static_cast<size_t>(out * RowBytes(dtype, in))), {}, {}, dtype};
  const auto floats = RandomVector(out * in, seed);
  QuantizeBlocks(dtype, floats.data(), out * in, w.bytes.data());
  const int64_t blocks = out * in / DtypeBlockElements(dtype);
  w.values.resize(static_cast<size_t>(out * in));
  DequantizeBlocks(dtype, w.bytes.data(), blocks, w.values.data());
  w.magnitudes = w.values;
  if (dtype == Dtype::kQ4_K || dtype == Dtype::kQ5_K) {
    std::vector<unsigned char> flipped = w.bytes;  // dmin negated: d * sc * q + dmin * m (d, dmin >= 0)
    for (int64_t b = 0; b < blocks; ++b) flipped[b * DtypeBlockBytes(dtype) + 3] ^= 0x80;
    DequantizeBlocks(dtype, flipped.data(), blocks, w.magnitudes.data());
  }
  for (float& m : w.magnitudes) m = std::fabs(m);
  return w;
}

class QuantMatVecTest : public ForcedIsaTest<std::tuple<Isa, Dtype>> {
 protected:
  Dtype dtype() const { return std::get<1>(GetParam()); }
};

// Values of every kind: normal rows, rows with outliers, blocks of zeros, tiny blocks (scale 0), a
// block holding the largest floats, and in the last row an infinity (its blocks give NaN).
std::vector<float> ActivationInputs(int64_t rows, int64_t in) {
  auto x = RandomVector(rows * in, 5);
  for (int64_t i = 0; i < in; i += 37) x[1 * in + i] *= 50.0f;
  for (int64_t i = 0; i < std::min<int64_t>(in, 64); ++i) x[2 * in + i] = 0.0f;
  for (int64_t i = 0; i < std::min<int64_t>(in, 64); ++i) x[3 * in + i] *= 1e-32f;
  for (int64_t i = 0; i < std::min<int64_t>(in, 32); ++i) x[4 * in + i] = i % 2 ? 3e38f : -3.4e38f;
  x[5 * in + 3] = 0.5f;  // ties: 0.5 * id lands on halves in a block of small integers
  for (int64_t i = 0; i < std::min<int64_t>(in, 32); ++i) x[5 * in + i] = static_cast<float>(i % 5) - 2.0f;
  x[(rows - 1) * in + 7] = std::numeric_limits<float>::infinity();
  return x;
}

TEST_P(QuantMatVecTest, ActivationQuantizationIsTheScalarDefinitionBytewise) {
  for (int64_t in : {DtypeBlockElements(dtype()), 3 * DtypeBlockElements(dtype()), int64_t{1024}}) {
    const int64_t rows = 7;
    const auto x = ActivationInputs(rows, in);
    const ActivationLayout layout = ActivationLayoutFor(dtype(), in);
    std::vector<unsigned char> simd_rows(static_cast<size_t>(rows * layout.row_bytes), 0xcd);
    simd::QuantizeActivations(dtype(), x.data(), in, rows, in, simd_rows.data());
    std::vector<unsigned char> scalar(static_cast<size_t>(layout.row_bytes));
    for (int64_t r = 0; r < rows; ++r) {
      QuantizeActivationRow(layout, x.data() + r * in, scalar.data());
      ASSERT_EQ(std::memcmp(simd_rows.data() + r * layout.row_bytes, scalar.data(), scalar.size()), 0)
          << "in " << in << " row " << r;
    }
    // The definition itself: levels within +-127, the scale amax / 127, NaN for the infinite block.
    const ActivationRow last = ActivationRowAt(layout, scalar.data());
    EXPECT_TRUE(std::isnan(last.d[0])) << "the block with an infinity";
  }
}

// The two references for one (row r, output o) and the bounds the kernels must meet.
struct Expected {
  double with_quantized_x, with_x;
  double float_tolerance, rounding_bound;
};

Expected Reference(const QuantWeights& w, int64_t in, int64_t o, const float* x, const unsigned char* xq_row,
                   const ActivationLayout& layout, const float* bias) {
  const ActivationRow xq = ActivationRowAt(layout, xq_row);
  Expected e{bias != nullptr ? bias[o] : 0.0, bias != nullptr ? bias[o] : 0.0, 0.0, 0.0};
  const int64_t block = layout.block;
  for (int64_t b = 0; b < in / block; ++b) {
    const double dx = block == 32 ? xq.d[8 * b] : xq.d[b];
    double amax = 0, weight_sum = 0;
    for (int64_t i = b * block; i < (b + 1) * block; ++i) {
      const double wi = w.values[o * in + i];
      const double xi = dx * xq.q[i];
      e.with_quantized_x += wi * xi;
      e.with_x += wi * x[i];
      e.float_tolerance += w.magnitudes[o * in + i] * std::fabs(xi);
      amax = std::max(amax, std::fabs(static_cast<double>(x[i])));
      weight_sum += std::fabs(wi);
    }
    e.rounding_bound += amax / 127 * 0.50002 * weight_sum;
  }
  e.float_tolerance = 1e-5 * e.float_tolerance + 1e-30;
  e.rounding_bound += e.float_tolerance;
  return e;
}

TEST_P(QuantMatVecTest, MatchesTheDequantizedReferenceForOddShapes) {
  const int64_t k = DtypeBlockElements(dtype());
  struct Shape {
    int64_t out, in, rows;
    bool bias;
  };
  const std::vector<Shape> shapes = {{1, k, 1, false},      {3, k, 2, true},       {7, 3 * k, 3, false},
                                     {13, 5 * k, 8, true},   {389, 3 * k, 1, true}, {130, 4 * k, 13, false},
                                     {97, 2 * k, 70, true},  {1003, k, 5, false}};
  for (int threads : {1, 3}) {
    WorkerPool pool(threads);
    for (const Shape& s : shapes) {
      const QuantWeights w = MakeWeights(dtype(), s.out, s.in, 7);
      const auto x = RandomVector(s.rows * s.in, 8);
      const auto bias = RandomVector(s.out, 9);
      const float* b = s.bias ? bias.data() : nullptr;
      std::vector<float> y(s.rows * s.out, std::nanf(""));
      MatVec(w.matrix(), s.out, s.in, b, x.data(), s.rows, y.data(), pool);
      const ActivationLayout layout = ActivationLayoutFor(dtype(), s.in);
      std::vector<unsigned char> xq(static_cast<size_t>(layout.row_bytes));
      for (int64_t r = 0; r < s.rows; ++r) {
        QuantizeActivationRow(layout, x.data() + r * s.in, xq.data());
        for (int64_t o = 0; o < s.out; ++o) {
          const Expected e = Reference(w, s.in, o, x.data() + r * s.in, xq.data(), layout, b);
          const double got = y[r * s.out + o];
          ASSERT_NEAR(got, e.with_quantized_x, e.float_tolerance)
              << "out " << s.out << " in " << s.in << " rows " << s.rows << " threads " << threads << " at " << r << ","
              << o;
          ASSERT_NEAR(got, e.with_x, e.rounding_bound) << "out " << s.out << " in " << s.in << " at " << r << "," << o;
        }
      }
    }
  }
}

// The largest levels everywhere: weights at their top levels and scales (every bit set where levels
// live), activations all +-127 -- the integer sums at their bounds stay exact (the float sums of
// such large, cancelling terms keep the tolerance relative to the sum of |terms|).
TEST_P(QuantMatVecTest, ExtremeLevelsStayExact) {
  const int64_t in = 4 * DtypeBlockElements(dtype()), out = 8, rows = 4;
  const int64_t bytes = DtypeBlockBytes(dtype());
  QuantWeights w{std::vector<unsigned char>(static_cast<size_t>(out * RowBytes(dtype(), in)), 0xff), {}, {}, dtype()};
  const int64_t blocks = out * in / DtypeBlockElements(dtype());
  for (int64_t b = 0; b < blocks; ++b) {  // the f16 scales: 1 (and dmin 0 for q4_k / q5_k); q8_0 levels -128
    unsigned char* p = w.bytes.data() + b * bytes;
    if (dtype() == Dtype::kQ6_K) {
      p[208] = 0x00, p[209] = 0x3c;
      for (int g = 0; g < 16; ++g) p[192 + g] = b % 2 ? 0x80 : 0x7f;  // scales -128 / 127
      if (b % 3 == 0) std::memset(p, 0, 192);                           // levels -32
    } else {
      p[0] = 0x00, p[1] = 0x3c;
      if (dtype() == Dtype::kQ4_K || dtype() == Dtype::kQ5_K) p[2] = 0x00, p[3] = b % 2 ? 0x3c : 0x00;
      if (dtype() == Dtype::kQ8_0) std::memset(p + 2, b % 2 ? 0x80 : 0x7f, 32);
    }
  }
  w.values.resize(static_cast<size_t>(out * in));
  DequantizeBlocks(dtype(), w.bytes.data(), blocks, w.values.data());
  w.magnitudes = w.values;
  for (float& m : w.magnitudes) m = std::fabs(m) + 128.0f;  // + 2 * dmin * m: the terms of q4_k / q5_k
  std::vector<float> x(static_cast<size_t>(rows * in));
  for (int64_t i = 0; i < rows * in; ++i) x[i] = (i / in) % 2 ? -1.0f : (i % 3 ? 1.0f : -1.0f);
  WorkerPool pool(1);
  std::vector<float> y(rows * out);
  MatVec(w.matrix(), out, in, nullptr, x.data(), rows, y.data(), pool);
  const ActivationLayout layout = ActivationLayoutFor(dtype(), in);
  std::vector<unsigned char> xq(static_cast<size_t>(layout.row_bytes));
  for (int64_t r = 0; r < rows; ++r) {
    QuantizeActivationRow(layout, x.data() + r * in, xq.data());
    for (int64_t o = 0; o < out; ++o) {
      const Expected e = Reference(w, in, o, x.data() + r * in, xq.data(), layout, nullptr);
      ASSERT_NEAR(y[r * out + o], e.with_quantized_x, e.float_tolerance) << r << "," << o;
    }
  }
}

// Batch invariance: every row of y is bitwise the same whether x has 1, 2, 3, 6, 7, 13, 64 or 100
// rows, wherever it sits among them, on 1 or 3 threads, through MatVec, and through DotRows over
// any range of output rows.
TEST_P(QuantMatVecTest, EachRowIsBitwiseIndependentOfTheOtherRows) {
  const int64_t k = DtypeBlockElements(dtype());
  const int64_t out = 389, in = k == 32 ? 32 * 33 : 256 * 5;  // odd: a weight-row tail and (32) a block tail
  const QuantWeights w = MakeWeights(dtype(), out, in, 10);
  const auto bias = RandomVector(out, 11);
  constexpr int64_t kRows = 100;
  const auto x = RandomVector(kRows * in, 12);
  WorkerPool one(1), three(3);
  std::vector<std::vector<float>> alone(kRows, std::vector<float>(out));
  for (int64_t r = 0; r < kRows; ++r) MatVec(w.matrix(), out, in, bias.data(), x.data() + r * in, 1, alone[r].data(), one);
  for (int64_t rows : {2, 3, 6, 7, 13, 64, 100}) {
    for (int64_t first : {int64_t{0}, kRows - rows}) {
      for (WorkerPool* pool : {&one, &three}) {
        std::vector<float> y(rows * out);
        MatVec(w.matrix(), out, in, bias.data(), x.data() + first * in, rows, y.data(), *pool);
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
  // DotRows (which quantizes x itself) over ranges that split the 4-row tiles differently.
  const int64_t rows = 9;
  std::vector<float> y(rows * out, std::nanf(""));
  for (int64_t o = 0; o < out;) {
    const int64_t end = std::min(out, o + 1 + (o * 7) % 11);
    simd::DotRows(w.matrix(), in, x.data(), in, rows, bias.data(), y.data(), out, o, end, out);
    o = end;
  }
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t o = 0; o < out; ++o) ASSERT_EQ(y[r * out + o], alone[r][o]) << "DotRows row " << r << " col " << o;
  }
}

TEST_P(QuantMatVecTest, WritesOnlyItsOutputRowsAndEmbedsRows) {
  const int64_t out = 77, in = 2 * DtypeBlockElements(dtype()), rows = 3;
  const QuantWeights w = MakeWeights(dtype(), out, in, 13);
  const auto x = RandomVector(rows * in, 14);
  WorkerPool pool(2);
  std::vector<float> y(rows * out + 16, -7.0f);
  MatVec(w.matrix(), out, in, nullptr, x.data(), rows, y.data(), pool);
  for (int64_t k = rows * out; k < static_cast<int64_t>(y.size()); ++k) EXPECT_EQ(y[k], -7.0f) << k;
  std::vector<float> row(in);
  simd::ToFloat(w.matrix().Row(5, in), dtype(), in, row.data());
  for (int64_t i = 0; i < in; ++i) ASSERT_EQ(row[i], w.values[5 * in + i]) << i;
}

INSTANTIATE_TEST_SUITE_P(EveryIsaAndBlockType, QuantMatVecTest,
                         ::testing::Combine(::testing::Values(Isa::kAvx512, Isa::kAvx2, Isa::kPortable),
                                            ::testing::ValuesIn(kBlockTypes)),
                         [](const ::testing::TestParamInfo<std::tuple<Isa, Dtype>>& info) {
                           return IsaName(std::get<0>(info.param)) + "_" +
                                  std::string(DtypeName(std::get<1>(info.param)));
                         });

}  // namespace matvec_quant_test
}  // namespace
}  // namespace niels::daemon::kernels
