// The block quantizations (quant_blocks.h, dtype.h): the type tables; dequantization against a
// per-value reading of ggml's block formulas written independently here, on random blocks with
// edge scales; and quantize -> dequantize error bounds. (Against ggml's own dequantizers and
// reference quantizers: tests/daemon/kernels/ggml.)

#include "daemon/kernels/quant_blocks.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "daemon/kernels/dtype.h"
#include "daemon/kernels/simd_kernels.h"

namespace niels::daemon::kernels {
namespace {
namespace quant_blocks_test {  // this file's own names: the suite compiles as one unity unit

constexpr Dtype kBlockTypes[] = {Dtype::kQ8_0, Dtype::kQ4_0, Dtype::kQ4_K, Dtype::kQ5_K, Dtype::kQ6_K, Dtype::kQ5_0};

TEST(QuantDtypeTest, NamesSizesAndRows) {
  const struct {
    Dtype dtype;
    const char* name;
    int64_t elements, bytes;
  } expected[] = {{Dtype::kF32, "f32", 1, 4},      {Dtype::kF16, "f16", 1, 2},      {Dtype::kBF16, "bf16", 1, 2},
                  {Dtype::kQ8_0, "q8_0", 32, 34},  {Dtype::kQ4_0, "q4_0", 32, 18},  {Dtype::kQ4_K, "q4_k", 256, 144},
                  {Dtype::kQ5_K, "q5_k", 256, 176}, {Dtype::kQ6_K, "q6_k", 256, 210}, {Dtype::kQ5_0, "q5_0", 32, 22}};
  for (const auto& e : expected) {
    EXPECT_EQ(DtypeName(e.dtype), e.name);
    EXPECT_EQ(ParseDtype(e.name), e.dtype);
    EXPECT_EQ(DtypeBlockElements(e.dtype), e.elements) << e.name;
    EXPECT_EQ(DtypeBlockBytes(e.dtype), e.bytes) << e.name;
    EXPECT_EQ(IsQuantized(e.dtype), e.elements > 1) << e.name;
    EXPECT_EQ(DtypeSize(e.dtype), e.elements > 1 ? 0 : e.bytes) << e.name;
    EXPECT_EQ(RowBytes(e.dtype, 1024), 1024 / e.elements * e.bytes) << e.name;
    const unsigned char base[1] = {};
    const Matrix m{base, e.dtype};
    EXPECT_EQ(static_cast<const unsigned char*>(m.Row(3, 512)) - base, 3 * (512 / e.elements) * e.bytes) << e.name;
  }
  EXPECT_EQ(ParseDtype("Q8_0"), std::nullopt);
  EXPECT_EQ(ParseDtype("q4_k_m"), std::nullopt);
}

uint16_t LoadU16(const unsigned char* p) { return static_cast<uint16_t>(p[0] | p[1] << 8); }
float Half(const unsigned char* p) { return HalfToFloat(LoadU16(p)); }

// Value e of one block, read per value from the layout in quant_blocks.h (offsets spelled out
// here, not taken from the structs).
float ReferenceValue(Dtype dtype, const unsigned char* b, int e) {
  switch (dtype) {
    case Dtype::kQ8_0: return static_cast<float>(static_cast<int8_t>(b[2 + e])) * Half(b);
    case Dtype::kQ4_0: {
      const int byte = b[2 + e % 16];
      return static_cast<float>((e < 16 ? byte & 15 : byte >> 4) - 8) * Half(b);
    }
    case Dtype::kQ5_0: {  // d, then qh as 4 bytes (bit e of the little-endian word), then q4_0's nibbles
      const int byte = b[6 + e % 16];
      const int fifth = b[2 + e / 8] >> (e % 8) & 1;
      return static_cast<float>(((e < 16 ? byte & 15 : byte >> 4) | fifth << 4) - 16) * Half(b);
    }
    case Dtype::kQ4_K:
    case Dtype::kQ5_K: {
      const unsigned char* scales = b + 4;
      const unsigned char* qh = b + 16;  // q5_k only
      const unsigned char* qs = b + (dtype == Dtype::kQ4_K ? 16 : 48);
      const int s = e / 32, c = e / 64, l = e % 32;
      const bool high_nibble = e % 64 >= 32;
      int q = high_nibble ? qs[32 * c + l] >> 4 : qs[32 * c + l] & 15;
      if (dtype == Dtype::kQ5_K) q += 16 * (qh[l] >> (2 * c + (high_nibble ? 1 : 0)) & 1);
      // Six bits each: for s < 4 the low bits of bytes s and s + 4; above, a nibble of byte s + 4
      // plus the top two bits of byte s - 4 (scale) or s (min) as bits 4 and 5.
      const int sc = s < 4 ? scales[s] & 63 : (scales[s + 4] & 15) + 16 * (scales[s - 4] >> 6);
      const int m = s < 4 ? scales[s + 4] & 63 : (scales[s + 4] >> 4) + 16 * (scales[s] >> 6);
      return Half(b) * static_cast<float>(sc) * static_cast<float>(q) - Half(b + 2) * static_cast<float>(m);
    }
    case Dtype::kQ6_K: {
      const unsigned char* ql = b;
      const unsigned char* qh = b + 128;
      const auto* scales = reinterpret_cast<const int8_t*>(b + 192);
      const int h = e / 128, quarter = e % 128 / 32, l = e % 32;
      const int byte = ql[64 * h + l + 32 * (quarter & 1)];
      const int low = quarter < 2 ? byte & 15 : byte >> 4;
      const int high = qh[32 * h + l] >> (2 * quarter) & 3;
      return Half(b + 208) * static_cast<float>(scales[e / 16]) * static_cast<float>((low | high << 4) - 32);
    }
    default: return std::nanf("");
  }
}

// Scales that test the arithmetic's edges: zeros, subnormals, the largest finite, negatives,
// infinity and NaN, besides ordinary ones.
constexpr uint16_t kEdgeHalves[] = {0x0000, 0x8000, 0x0001, 0x03ff, 0x8200, 0x0400, 0x7bff, 0xfbff,
                                    0x3c00, 0xbc00, 0x2e66, 0x7c00, 0xfc00, 0x7e00, 0x1234};

// `count` random blocks of `dtype`; the f16 scales of block k are edge values for k < 4 * 15.
std::vector<unsigned char> RandomBlocks(Dtype dtype, int count, uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t bytes = DtypeBlockBytes(dtype);
  std::vector<unsigned char> data(static_cast<size_t>(count * bytes));
  for (auto& byte : data) byte = static_cast<unsigned char>(rng());
  const int n_edge = static_cast<int>(std::size(kEdgeHalves));
  for (int k = 0; k < count; ++k) {
    unsigned char* b = data.data() + k * bytes;
    auto set = [](unsigned char* p, uint16_t h) {
      p[0] = static_cast<unsigned char>(h);
      p[1] = static_cast<unsigned char>(h >> 8);
    };
    const uint16_t edge = kEdgeHalves[k % n_edge];
    const bool use_edge = k < 4 * n_edge;
    if (dtype == Dtype::kQ6_K) {
      if (use_edge) set(b + 208, edge);
    } else if (use_edge) {
      set(b, edge);
      if (dtype == Dtype::kQ4_K || dtype == Dtype::kQ5_K) set(b + 2, kEdgeHalves[(k / n_edge + k) % n_edge]);
    } else {
      // Ordinary blocks: keep the scales finite so the values are.
      set(b, static_cast<uint16_t>(LoadU16(b) & 0x7bff));
      if (dtype == Dtype::kQ4_K || dtype == Dtype::kQ5_K) set(b + 2, static_cast<uint16_t>(LoadU16(b + 2) & 0x7bff));
    }
  }
  return data;
}

class QuantBlocksTest : public ::testing::TestWithParam<Dtype> {};

TEST_P(QuantBlocksTest, DequantizationIsTheBlockFormulaBitForBit) {
  const Dtype dtype = GetParam();
  const int count = 2000;
  const int64_t n = DtypeBlockElements(dtype);
  const auto blocks = RandomBlocks(dtype, count, 21);
  // At an odd byte offset: blocks in a mapped file may sit anywhere.
  std::vector<unsigned char> shifted(blocks.size() + 1);
  std::memcpy(shifted.data() + 1, blocks.data(), blocks.size());
  std::vector<float> values(count * n), converted(count * n);
  DequantizeBlocks(dtype, shifted.data() + 1, count, values.data());
  simd::ToFloat(shifted.data() + 1, dtype, count * n, converted.data());
  for (int k = 0; k < count; ++k) {
    const unsigned char* b = blocks.data() + k * DtypeBlockBytes(dtype);
    for (int e = 0; e < n; ++e) {
      const float expected = ReferenceValue(dtype, b, e);
      const float got = values[k * n + e];
      ASSERT_EQ(std::memcmp(&got, &expected, 4), 0) << "block " << k << " value " << e << ": " << got << " vs " << expected;
      ASSERT_EQ(std::memcmp(&converted[k * n + e], &expected, 4), 0) << "simd::ToFloat, block " << k << " value " << e;
      const float element = ElementToFloat(shifted.data() + 1, dtype, k * n + e);
      ASSERT_EQ(std::memcmp(&element, &expected, 4), 0) << "ElementToFloat, block " << k << " value " << e;
    }
  }
}

std::vector<float> NormalValues(int64_t n, uint32_t seed, float sigma = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, sigma);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = normal(rng);
  return v;
}

std::vector<float> RoundTrip(Dtype dtype, const std::vector<float>& x) {
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<unsigned char> blocks(static_cast<size_t>(RowBytes(dtype, n)));
  simd::FromFloat(x.data(), n, dtype, blocks.data());
  std::vector<float> back(x.size());
  DequantizeBlocks(dtype, blocks.data(), n / DtypeBlockElements(dtype), back.data());
  return back;
}

// q8_0, q4_0 and q5_0: a hard bound per value from the block's largest magnitude amax. q8_0: half a
// step (amax / 127 / 2) plus the f16 rounding of the scale times the largest level (127 * 2^-11
// steps); q4_0: the step amax / 8 (the level opposite the largest value clips at 7 steps, one short
// of 8); q5_0 likewise amax / 16.
TEST(QuantRoundTripTest, Block32TypesStayWithinTheirStep) {
  std::vector<float> x = NormalValues(256 * 64, 31);
  for (size_t i = 0; i < 32 * 8; ++i) x[i] *= 1000.0f;   // large blocks
  for (size_t i = 256; i < 256 + 32 * 8; ++i) x[i] *= 0.05f;  // small ones (scale still a normal f16)
  x[600] = 80.0f;                                         // an outlier within its block
  for (Dtype dtype : {Dtype::kQ8_0, Dtype::kQ4_0, Dtype::kQ5_0}) {
    const auto back = RoundTrip(dtype, x);
    for (size_t b = 0; b < x.size() / 32; ++b) {
      float amax = 0;
      for (size_t i = 32 * b; i < 32 * b + 32; ++i) amax = std::max(amax, std::fabs(x[i]));
      const double bound = dtype == Dtype::kQ8_0   ? amax * (0.5 / 127 + 127.0 / 127 / 2048) * 1.0001
                           : dtype == Dtype::kQ4_0 ? amax / 8.0 * (1 + 1.0 / 1024) * 1.0001
                                                   : amax / 16.0 * (1 + 1.0 / 1024) * 1.0001;
      for (size_t i = 32 * b; i < 32 * b + 32; ++i) {
        ASSERT_LE(std::fabs(static_cast<double>(x[i]) - back[i]), bound) << DtypeName(dtype) << " value " << i;
      }
    }
  }
}

// The K types: the RMS error relative to the RMS of N(0, 1) values, over 256 super-blocks, below a
// bound 1.3x what these quantizers (= ggml's reference ones) reach: 0.0714, 0.0362, 0.0177 (16, 32
// and 64 levels per scale); and no value off by more than its block's largest magnitude / 4
// (q4_k), / 8 (q5_k, q6_k).
TEST(QuantRoundTripTest, KTypesStayWithinTheirErrorBounds) {
  const auto x = NormalValues(256 * 256, 32);
  const struct {
    Dtype dtype;
    double rms_bound, max_fraction;
  } cases[] = {{Dtype::kQ4_K, 0.093, 0.25}, {Dtype::kQ5_K, 0.047, 0.125}, {Dtype::kQ6_K, 0.023, 0.125}};
  for (const auto& c : cases) {
    const auto back = RoundTrip(c.dtype, x);
    double err2 = 0, x2 = 0;
    for (size_t b = 0; b < x.size() / 256; ++b) {
      float amax = 0;
      for (size_t i = 256 * b; i < 256 * b + 256; ++i) amax = std::max(amax, std::fabs(x[i]));
      for (size_t i = 256 * b; i < 256 * b + 256; ++i) {
        const double e = static_cast<double>(x[i]) - back[i];
        ASSERT_LE(std::fabs(e), amax * c.max_fraction) << DtypeName(c.dtype) << " value " << i;
        err2 += e * e;
        x2 += static_cast<double>(x[i]) * x[i];
      }
    }
    const double rms = std::sqrt(err2 / x2);
    EXPECT_LT(rms, c.rms_bound) << DtypeName(c.dtype);
    RecordProperty(std::string(DtypeName(c.dtype)) + "_relative_rms_error", std::to_string(rms));
  }
}

// All-zero and constant blocks, and a block of one value among zeros, come back as they went in
// (to the type's resolution) for every type.
TEST(QuantRoundTripTest, DegenerateBlocks) {
  for (Dtype dtype : kBlockTypes) {
    std::vector<float> zeros(512, 0.0f);
    EXPECT_EQ(RoundTrip(dtype, zeros), zeros) << DtypeName(dtype);
    std::vector<float> constant(512, 1.5f);
    for (float v : RoundTrip(dtype, constant)) ASSERT_NEAR(v, 1.5f, 1.5f / 64) << DtypeName(dtype);
    std::vector<float> spike(512, 0.0f);
    spike[77] = -3.0f;
    const auto back = RoundTrip(dtype, spike);
    for (size_t i = 0; i < spike.size(); ++i) ASSERT_NEAR(back[i], spike[i], 3.0f / 64) << DtypeName(dtype) << " " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(EveryBlockType, QuantBlocksTest, ::testing::ValuesIn(kBlockTypes),
                         [](const ::testing::TestParamInfo<Dtype>& info) { return std::string(DtypeName(info.param)); });

}  // namespace quant_blocks_test
}  // namespace
}  // namespace niels::daemon::kernels
