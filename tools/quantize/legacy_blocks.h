#pragma once
// The two ggml block types that llama.cpp's recipe falls back to for tensors whose rows are not
// whole 256-value blocks (q4_K -> q5_0, q5_K -> q5_1): quantizers that give the blocks of ggml's
// reference quantizers (quantize_row_q5_0_ref, quantize_row_q5_1_ref) byte for byte, and the
// dequantization ggml defines for them; legacy_blocks_test holds both to ggml's own code. q5_0 is
// a kernels' block type (daemon/kernels/quant_blocks.h, which these two functions call); q5_1 is
// not (nielsd refuses a file with it): its quantizer lives here alone.
//
// Layouts (ggml-common.h; f16 little-endian; "x" is the dequantized value), j < 16:
//   q5_0  32 values in 22 bytes: d (f16), qh[4] (bit j: 5th bit of value j), qs[16].
//         q_j = (qs[j] & 15) | bit j of qh << 4, q_{j+16} = (qs[j] >> 4) | bit j + 16 of qh << 4;
//         x = (q - 16) * d
//   q5_1  32 values in 24 bytes: d, m (f16), qh[4], qs[16], the q as q5_0; x = q * d + m
// Each product and sum is one float32 operation (this file is compiled without contraction).
// Blocks may sit at any address. Pure functions; safe from any thread.

#include <cstdint>

namespace niels::tools::quantize {

inline constexpr int kQ5_0BlockBytes = 22;
inline constexpr int kQ5_1BlockBytes = 24;

// Quantizes n values (a multiple of 32) into n / 32 blocks at dst. q5_0: d = -(the value of
// largest magnitude, the first such) / 16, q = min(31, trunc(x / d + 16.5)); q5_1: d = (max - min)
// / 31, m = min, q = trunc((x - min) / d + 0.5). REQUIRES: finite values.
void QuantizeQ5_0(const float* src, int64_t n, void* dst);
void QuantizeQ5_1(const float* src, int64_t n, void* dst);

// dst[0 .. blocks * 32) = the values of `blocks` consecutive blocks at src.
void DequantizeQ5_0(const void* src, int64_t blocks, float* dst);
void DequantizeQ5_1(const void* src, int64_t blocks, float* dst);

}  // namespace niels::tools::quantize
