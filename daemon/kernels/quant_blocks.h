#pragma once
// GGUF's block quantizations of weights (ggml's ggml-common.h layouts, byte for byte): the block
// structs, a readable scalar dequantization per type -- the definition that every kernel is tested
// against, as ggml's reference dequantization is for its SIMD code -- and scalar quantizers
// float -> blocks that give the blocks ggml's reference quantizers (quantize_row_*_ref, no
// importance matrix) give on the same input. No libtorch, no SIMD.
//
// Layouts (f16 = IEEE binary16, little-endian; "x" is the dequantized value):
//   q8_0  32 values in 34 bytes: d (f16), qs[32] (int8).           x[j] = qs[j] * d
//   q4_0  32 values in 18 bytes: d (f16), qs[16] (two 4-bit each).  x[j] = ((qs[j] & 15) - 8) * d,
//         x[j + 16] = ((qs[j] >> 4) - 8) * d, j < 16
//   q4_k  256 values in 144 bytes: d, dmin (f16), scales[12] (eight 6-bit scales sc and eight
//         6-bit mins m, ScaleMinK4), qs[128]. Sub-block s < 8 holds values 32s..32s+31: value
//         64c + l (l < 32, c < 4) is the low nibble of qs[32c + l], value 64c + 32 + l its high
//         nibble; x = (d * sc_s) * q - (dmin * m_s)
//   q5_k  256 values in 176 bytes: d, dmin, scales[12] as q4_k, qh[32], qs[128]: q4_k's nibbles
//         plus a fifth bit (16): for value 64c + l bit 2c of qh[l], for 64c + 32 + l bit 2c + 1
//   q6_k  256 values in 210 bytes: ql[128], qh[64], scales[16] (int8), d (f16). Half h < 2 holds
//         values 128h..128h+127; with l < 32, ql = ql + 64h, qh = qh + 32h: value 128h + l is
//         (ql[l] & 15) | ((qh[l] & 3) << 4), +32: (ql[l + 32] & 15) | ((qh[l] >> 2 & 3) << 4),
//         +64: (ql[l] >> 4) | ((qh[l] >> 4 & 3) << 4), +96: (ql[l + 32] >> 4) | ((qh[l] >> 6) << 4);
//         minus 32. x = (d * scales[v / 16]) * q
//   q5_0  32 values in 22 bytes: d (f16), qh[4] (a little-endian uint32: bit j is the fifth bit of
//         value j), qs[16] as q4_0's. q_j = (qs[j] & 15) | (bit j of qh) << 4, q_{j+16} =
//         (qs[j] >> 4) | (bit j + 16 of qh) << 4, j < 16; x = (q - 16) * d
// Every product above is one float32 operation in the order written (no fused multiply-add):
// DequantizeBlocks computes exactly that, and so does ggml's dequantize_row_* (built without FMA).
//
// Blocks may sit at any byte address (a memory-mapped file): everything reads them bytewise.

#include <cstdint>

#include "daemon/kernels/dtype.h"

namespace niels::daemon::kernels {

inline constexpr int kBlock32 = 32;    // values per q8_0 / q4_0 / q5_0 block
inline constexpr int kBlock256 = 256;  // values per q4_k / q5_k / q6_k super-block

struct BlockQ8_0 {
  uint16_t d;  // f16 scale
  int8_t qs[32];
};
struct BlockQ4_0 {
  uint16_t d;  // f16 scale
  uint8_t qs[16];
};
struct BlockQ5_0 {
  uint16_t d;  // f16 scale
  uint8_t qh[4];
  uint8_t qs[16];
};
struct BlockQ4K {
  uint16_t d;     // f16 scale of the 6-bit scales
  uint16_t dmin;  // f16 scale of the 6-bit mins
  uint8_t scales[12];
  uint8_t qs[128];
};
struct BlockQ5K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qh[32];
  uint8_t qs[128];
};
struct BlockQ6K {
  uint8_t ql[128];
  uint8_t qh[64];
  int8_t scales[16];
  uint16_t d;
};
static_assert(sizeof(BlockQ8_0) == 34, "q8_0 block: 34 bytes per 32 values");
static_assert(sizeof(BlockQ4_0) == 18, "q4_0 block: 18 bytes per 32 values");
static_assert(sizeof(BlockQ5_0) == 22, "q5_0 block: 22 bytes per 32 values");
static_assert(sizeof(BlockQ4K) == 144, "q4_k block: 144 bytes per 256 values");
static_assert(sizeof(BlockQ5K) == 176, "q5_k block: 176 bytes per 256 values");
static_assert(sizeof(BlockQ6K) == 210, "q6_k block: 210 bytes per 256 values");

// The 6-bit scale and min of sub-block j < 8 of a q4_k / q5_k block: for j < 4 the low 6 bits of
// scales[j] and scales[j + 4]; for j >= 4 the nibbles of scales[j + 4] with the top two bits of
// scales[j - 4] (scale) and scales[j] (min) above them.
void ScaleMinK4(const uint8_t* scales, int j, uint8_t* scale, uint8_t* min);

// dst[0 .. blocks * DtypeBlockElements(dtype)) = the values of `blocks` consecutive blocks at src,
// by the formulas above. REQUIRES: a block type.
void DequantizeBlocks(Dtype dtype, const void* src, int64_t blocks, float* dst);

// Quantizes n values (a multiple of the block) into n / DtypeBlockElements blocks at dst, as ggml's
// reference quantizer for the type does (bit for bit, tested against ggml): q8_0, q4_0 and q5_0
// scale by the absolute maximum; q4_k and q5_k search each sub-block's scale and min (weighted least
// squares over a range of candidate scales), then quantize the eight scales and mins to 6 bits
// and the values again with them; q6_k searches each 16-value group's scale, quantizes the
// sixteen scales to int8 and the values again. REQUIRES: a block type, finite values.
void QuantizeBlocks(Dtype dtype, const float* src, int64_t n, void* dst);

// The K-type quantizers QuantizeBlocks calls (quant_k_quantize.cc); one super-block each.
void QuantizeQ4KBlock(const float* x, BlockQ4K* out);
void QuantizeQ5KBlock(const float* x, BlockQ5K* out);
void QuantizeQ6KBlock(const float* x, BlockQ6K* out);

// ggml's rounding of a float to the nearest integer (ties to even) through the float addition of
// 1.5 * 2^23; exact for |value| < 2^22 (beyond, ggml's bits are reproduced, not a rounding).
inline int NearestInt(float value) {
  const float shifted = value + 12582912.0f;
  int32_t bits;
  __builtin_memcpy(&bits, &shifted, sizeof bits);
  return (bits & 0x007fffff) - 0x00400000;
}

// ggml's float -> integer conversion (a C cast) as its x86-64 build performs it (CVTTSS2SI):
// truncation toward zero, and INT32_MIN for NaN and values outside int32. Only a block whose scale
// is a subnormal whose inverse overflows to infinity meets the latter (its values dequantize to 0
// whatever the levels); the cast itself would be undefined behaviour there.
inline int32_t TruncateToInt32(float value) {
  if (!(value >= -2147483648.0f && value < 2147483648.0f)) return INT32_MIN;
  return static_cast<int32_t>(value);
}

}  // namespace niels::daemon::kernels
