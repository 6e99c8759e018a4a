#pragma once
// The activations a block-quantized weight matrix is multiplied with: each row of x (floats)
// quantized once per matrix product to 8 bits per block, so that the dot products with the weights'
// small integers run as integer multiply-adds (VNNI's VPDPBUSD, AVX2's VPMADDUBSW) and every
// partial sum within a block is exact. ggml does the same (its q8_0 / q8_K activations); this is
// nielsd's own layout, and the same bits on every instruction set.
//
// What is rounded where (per block of `block` values of one row: 32 for q8_0 / q4_0 / q5_0 weights, 256
// for q4_k / q5_k / q6_k):
//   amax = the largest |x| (exact);
//   d = amax / 127 (float division, rounded to nearest), id = 1 / d (rounded);
//   q[i] = x[i] * id (rounded) rounded to the nearest integer, ties to even (|q| <= 127).
// A block whose amax is below 2^-100 gets d = 0 and q = 0; one holding an infinity or NaN gets
// d = NaN and q = 0 (so the products come out NaN, as they would in f32). Nothing else is rounded:
// the sums below are exact integers. Each row's result depends on that row only.
//
// Layout of one row (row_bytes, a multiple of 64; `padded` = in rounded up to 64, zeros beyond in):
//   q       int8  [padded]
//   d       float [padded / 32 * 8] for 32-blocks (each block's d repeated 8 times: the lanes of
//                 its products), [in / 256] for 256-blocks
//   sums    int16 [padded / 32]: the sum of q over each 32
//   starts  int32 [padded / 4]: -bias * (the sum of q over each 4), bias = 128 (q8_0), 8 (q4_0),
//                 16 (q5_0), 32 (q6_k), 0 (q4_k, q5_k): what a lane of VPDPBUSD over 4 values
//                 starts from so that it ends at the true dot product with the weights' offset
//                 levels (q8_0 weights are fed as w + 128, q4_0's nibbles are (w + 8), q5_0's
//                 five-bit levels (w + 16), q6_k's (w + 32)).
// The kernels (simd_quant_*.cc) read it; QuantizeActivationRow is its scalar definition, and every
// SIMD implementation writes the same bytes (tested). The AMX tiles (simd_quant_amx.cc) read q (16
// rows at a time, x_row_bytes apart), d and sums; their weights are signed, so they need no starts.
// What the kernels round after the exact integer sums is each ISA file's header.

#include <cstdint>

#include "daemon/kernels/dtype.h"

namespace niels::daemon::kernels {

struct ActivationLayout {
  int64_t in = 0;
  int64_t block = 0;   // 32 or 256
  int64_t padded = 0;  // in rounded up to 64
  int32_t bias = 0;    // of `starts`
  int64_t d_offset = 0, sums_offset = 0, starts_offset = 0;  // bytes from the row's start (q at 0)
  int64_t row_bytes = 0;
};

// The layout for rows of `in` values multiplied with `weight` (a block type; in a multiple of its
// block).
ActivationLayout ActivationLayoutFor(Dtype weight, int64_t in);

// Quantizes one row x[0, in) into `row` (layout.row_bytes bytes), by the rules above.
void QuantizeActivationRow(const ActivationLayout& layout, const float* x, void* row);

// The pointers into one quantized row.
struct ActivationRow {
  const int8_t* q;
  const float* d;
  const int16_t* sums;
  const int32_t* starts;
};
inline ActivationRow ActivationRowAt(const ActivationLayout& layout, const void* row) {
  const auto* base = static_cast<const unsigned char*>(row);
  return {reinterpret_cast<const int8_t*>(base), reinterpret_cast<const float*>(base + layout.d_offset),
          reinterpret_cast<const int16_t*>(base + layout.sums_offset),
          reinterpret_cast<const int32_t*>(base + layout.starts_offset)};
}

}  // namespace niels::daemon::kernels
