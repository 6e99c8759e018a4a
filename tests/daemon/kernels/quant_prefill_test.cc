// The prefill path of the block-type products (many activation rows: AMX-INT8 tiles for every type
// where the CPU has them and the kernel grants them, the VNNI / portable register tiles and AVX2 panels
// elsewhere) against the decode path (one activation row) and against references, under the
// implementation this CPU picks, with AMX on and (where it was on) off, then the others it runs:
//   - every row bitwise the same alone (decode) and in batches of 2..64 rows (odd counts, and counts
//     that leave rows and output columns over from the 16 x 32 tiles), over any range of outputs;
//   - q8_0 / q4_0 / q5_0 under AVX-512 (VNNI or AMX), AVX2 and portable bitwise equal to a naive
//     scalar evaluation of the documented chain (simd_quant_avx512.cc, simd_quant_portable.cc):
//     exact integer block sums, then acc = fma(float(s), d_w * d_x, acc) (AVX-512, AVX2) or acc +
//     float(s) * (d_w * d_x) (portable) block by block, + bias; q4_k / q5_k / q6_k under AVX-512
//     and AVX2 likewise to their chain (exact A and M per 256-block, then three float operations;
//     q6_k: A only, two);
//   - every type within 1e-5 of the sum of |terms| of a double-precision sum over the dequantized
//     weights times the quantized activations.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "daemon/kernels/dtype.h"
#include "daemon/kernels/quant_activations.h"
#include "daemon/kernels/quant_blocks.h"
#include "daemon/kernels/simd_kernels.h"

namespace niels::daemon::kernels {
namespace {
namespace quant_prefill_test {  // this file's own names: the suite compiles as one unity unit

std::vector<float> Normal(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = normal(rng);
  return v;
}

// q8_0 / q4_0 / q5_0 y[r, o] by the documented chain, one scalar operation at a time.
float Block32Chain(Dtype dtype, const unsigned char* w_row, const ActivationRow& x, int64_t in, const float* bias,
                   int64_t o, bool fused) {
  const int64_t block_bytes = DtypeBlockBytes(dtype);
  float acc = 0.0f;
  for (int64_t b = 0; b < in / 32; ++b) {
    const unsigned char* p = w_row + b * block_bytes;
    int32_t s = 0;
    for (int i = 0; i < 32; ++i) {
      int level;
      if (dtype == Dtype::kQ8_0) {
        level = static_cast<int8_t>(p[2 + i]);
      } else if (dtype == Dtype::kQ4_0) {
        level = (i < 16 ? (p[2 + i] & 15) : (p[2 + i - 16] >> 4)) - 8;
      } else {  // q5_0: d, 4 bytes of fifth bits (bit i of the little-endian word), the nibbles
        level = ((i < 16 ? (p[6 + i] & 15) : (p[6 + i - 16] >> 4)) | (p[2 + i / 8] >> (i % 8) & 1) << 4) - 16;
      }
      s += level * x.q[32 * b + i];
    }
    uint16_t half;
    std::memcpy(&half, p, 2);
    const float scale = HalfToFloat(half) * x.d[8 * b];
    if (fused) {
      acc = std::fma(static_cast<float>(s), scale, acc);
    } else {
      const float term = static_cast<float>(s) * scale;
      acc = acc + term;
    }
  }
  return bias != nullptr ? acc + bias[o] : acc;
}

// q4_k / q5_k / q6_k y[r, o] by simd_quant_avx512.cc's chain, one scalar operation at a time: per
// 256-block the exact A = sum_k sc_k * (dot of sub-block k's levels with q; q6_k: of 16-value group
// k's levels - 32) and M = sum_k m_k * (sum of q over sub-block k; q6_k: 0), then block = float(A)
// * d; block = fma(-float(M), dmin, block) (not q6_k); acc = fma(block, d_x, acc); + bias.
float Block256Chain(Dtype dtype, const unsigned char* w_row, const ActivationRow& x, int64_t in, const float* bias,
                    int64_t o) {
  const int64_t block_bytes = DtypeBlockBytes(dtype);
  float acc = 0.0f;
  for (int64_t u = 0; u < in / 256; ++u) {
    const unsigned char* p = w_row + u * block_bytes;
    if (dtype == Dtype::kQ6_K) {
      int64_t a = 0;
      for (int g = 0; g < 16; ++g) {
        int64_t dot = 0;
        for (int v = 16 * g; v < 16 * g + 16; ++v) {
          const int h = v / 128, l = v % 32, quarter = v % 128 / 32;
          const unsigned char low = p[64 * h + l + (quarter % 2) * 32];
          const int level = (quarter < 2 ? low & 15 : low >> 4) | (p[128 + 32 * h + l] >> (2 * quarter) & 3) << 4;
          dot += (level - 32) * x.q[256 * u + v];
        }
        a += static_cast<int8_t>(p[192 + g]) * dot;
      }
      uint16_t half;
      std::memcpy(&half, p + 208, 2);
      acc = std::fma(static_cast<float>(a) * HalfToFloat(half), x.d[u], acc);
      continue;
    }
    const unsigned char* qs = p + (dtype == Dtype::kQ4_K ? 16 : 48);
    int64_t a = 0, m = 0;
    for (int k = 0; k < 8; ++k) {
      uint8_t scale, min;
      ScaleMinK4(p + 4, k, &scale, &min);
      int64_t dot = 0, sum = 0;
      for (int l = 0; l < 32; ++l) {
        const int v = 32 * k + l, c = v / 64;
        int level = (v % 64 < 32 ? qs[32 * c + l] & 15 : qs[32 * c + l] >> 4);
        if (dtype == Dtype::kQ5_K) level |= (p[16 + l] >> k & 1) << 4;  // bit 2c (+1) of qh[l] = bit k
        dot += level * x.q[256 * u + v];
        sum += x.q[256 * u + v];
      }
      a += scale * dot;
      m += min * sum;
    }
    uint16_t halves[2];
    std::memcpy(halves, p, 4);
    float block = static_cast<float>(a) * HalfToFloat(halves[0]);
    block = std::fma(-static_cast<float>(m), HalfToFloat(halves[1]), block);
    acc = std::fma(block, x.d[u], acc);
  }
  return bias != nullptr ? acc + bias[o] : acc;
}

class QuantPrefillTest : public ::testing::TestWithParam<Dtype> {
 protected:
  void TearDown() override {
    simd::ForceIsaForTesting(simd::Detected());
    simd::UseAmxForTesting(true);
  }

  // Runs every assertion of the file for the implementation in use; `label` names it.
  void CheckAll(const std::string& label) {
    const Dtype dtype = GetParam();
    const int64_t k = DtypeBlockElements(dtype);
    const int64_t in = k == 32 ? 32 * 7 : 256 * 3;  // 32-blocks: an odd number of them
    const std::string name = simd::QuantName();
    const bool block32 = k == 32;
    const bool exact_chain = block32 && (name.rfind("avx512", 0) == 0 || name == "avx2" || name == "portable");
    const bool k_chain = !block32 && (name.rfind("avx512", 0) == 0 || name == "avx2");
    for (int64_t out : {int64_t{1}, int64_t{31}, int64_t{33}, int64_t{97}}) {
      std::vector<unsigned char> w(static_cast<size_t>(out * RowBytes(dtype, in)));
      const auto floats = Normal(out * in, static_cast<uint32_t>(out));
      QuantizeBlocks(dtype, floats.data(), out * in, w.data());
      std::vector<float> values(static_cast<size_t>(out * in));
      DequantizeBlocks(dtype, w.data(), out * in / k, values.data());
      const auto bias = Normal(out, 3);
      constexpr int64_t kMaxRows = 64;
      const auto x = Normal(kMaxRows * in, static_cast<uint32_t>(100 + out));
      const ActivationLayout layout = ActivationLayoutFor(dtype, in);
      std::vector<unsigned char> xq(static_cast<size_t>(kMaxRows * layout.row_bytes));
      simd::QuantizeActivations(dtype, x.data(), in, kMaxRows, in, xq.data());
      // Decode: each row alone.
      std::vector<float> alone(static_cast<size_t>(kMaxRows * out));
      for (int64_t r = 0; r < kMaxRows; ++r) {
        simd::DotRowsQuantized({w.data(), dtype}, in, xq.data() + r * layout.row_bytes, 1, bias.data(),
                               alone.data() + r * out, out, 0, out);
      }
      for (int64_t r = 0; r < kMaxRows; ++r) {
        const ActivationRow row = ActivationRowAt(layout, xq.data() + r * layout.row_bytes);
        for (int64_t o = 0; o < out; ++o) {
          const float got = alone[r * out + o];
          if (exact_chain) {
            const float chain = Block32Chain(dtype, w.data() + o * RowBytes(dtype, in), row, in, bias.data(), o,
                                             name != "portable");
            ASSERT_EQ(got, chain) << label << " out " << out << " at " << r << "," << o;
          }
          if (k_chain) {
            const float chain = Block256Chain(dtype, w.data() + o * RowBytes(dtype, in), row, in, bias.data(), o);
            ASSERT_EQ(got, chain) << label << " out " << out << " at " << r << "," << o;
          }
          double sum = bias[o], magnitude = 0;
          for (int64_t i = 0; i < in; ++i) {
            const double dx = block32 ? row.d[8 * (i / 32)] : row.d[i / 256];
            const double term = values[o * in + i] * (dx * row.q[i]);
            sum += term;
            magnitude += std::fabs(term);
          }
          // q4_k / q5_k: the mins' products cancel part of each term, so their scale is wider.
          const double tolerance = (block32 ? 1e-5 : 1e-4) * magnitude + 1e-30;
          ASSERT_NEAR(got, sum, tolerance) << label << " out " << out << " at " << r << "," << o;
        }
      }
      // Batches: the same bits, over the whole output range and split at odd places.
      for (int64_t rows : {2, 15, 16, 17, 33, 48, 64}) {
        std::vector<float> y(static_cast<size_t>(rows * out), std::nanf(""));
        simd::DotRowsQuantized({w.data(), dtype}, in, xq.data(), rows, bias.data(), y.data(), out, 0, out);
        for (int64_t i = 0; i < rows * out; ++i) {
          ASSERT_EQ(y[i], alone[i]) << label << " out " << out << " rows " << rows << " at " << i / out << ","
                                    << i % out;
        }
        if (out < 33) continue;
        std::fill(y.begin(), y.end(), std::nanf(""));
        for (int64_t o = 0; o < out;) {
          const int64_t end = std::min(out, o + 5 + (o * 13) % 37);
          simd::DotRowsQuantized({w.data(), dtype}, in, xq.data(), rows, bias.data(), y.data(), out, o, end, out);
          o = end;
        }
        for (int64_t i = 0; i < rows * out; ++i) {
          ASSERT_EQ(y[i], alone[i]) << label << " split, rows " << rows << " at " << i / out << "," << i % out;
        }
      }
    }
  }
};

TEST_P(QuantPrefillTest, BatchesAreBitwiseTheDecodePathAndMatchTheReferences) {
  const bool amx = simd::UseAmxForTesting(true);
  CheckAll(std::string(simd::QuantName()));
  if (amx) {  // the same assertions for the VNNI kernels alone
    ASSERT_FALSE(simd::UseAmxForTesting(false));
    CheckAll(std::string(simd::QuantName()) + " (AMX off)");
  }
  for (simd::Isa isa : {simd::Isa::kAvx2, simd::Isa::kPortable}) {  // and the others this CPU runs
    if (isa == simd::Detected() || !simd::ForceIsaForTesting(isa)) continue;
    CheckAll(simd::QuantName());
  }
}

INSTANTIATE_TEST_SUITE_P(EveryBlockType, QuantPrefillTest,
                         ::testing::Values(Dtype::kQ8_0, Dtype::kQ4_0, Dtype::kQ4_K, Dtype::kQ5_K, Dtype::kQ6_K, Dtype::kQ5_0),
                         [](const ::testing::TestParamInfo<Dtype>& info) { return std::string(DtypeName(info.param)); });

}  // namespace quant_prefill_test
}  // namespace
}  // namespace niels::daemon::kernels
