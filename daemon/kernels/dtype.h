#pragma once
// The element types weights and KV caches may be stored in, and exact scalar conversions between
// them and float. No libtorch.
//
// f16 is IEEE 754 binary16; bf16 is the upper half of a float32. Widening (f16/bf16 -> f32) is
// exact. Narrowing (f32 -> f16/bf16) rounds to nearest, ties to even, like the F16C instruction
// VCVTPS2PH with rounding mode 0 and like torch's .to(): values beyond f16's range become
// infinity, NaN stays a (quiet) NaN. The SIMD bulk conversions (simd_kernels.h) give the same bits.
//
// The block types q8_0, q4_0, q4_k, q5_k, q6_k and q5_0 are GGUF's (ggml's) block quantizations,
// byte for byte (quant_blocks.h): a row of `cols` elements is cols / DtypeBlockElements blocks of
// DtypeBlockBytes bytes, so a weight costs 8.5, 4.5, 4.5, 5.5, 6.5625 or 5.5 bits. Weights only (never
// a KV cache). f32, f16 and bf16 are the element types: one element per "block".

#include <cstdint>
#include <optional>
#include <string_view>

namespace niels::daemon::kernels {

enum class Dtype : uint8_t {
  kF32 = 0,
  kF16 = 1,
  kBF16 = 2,
  kQ8_0 = 3,  // blocks of 32: f16 scale, 32 int8 (34 bytes)
  kQ4_0 = 4,  // blocks of 32: f16 scale, 32 4-bit (18 bytes)
  kQ4_K = 5,  // super-blocks of 256: 8 x 32 with 6-bit scales and mins (144 bytes)
  kQ5_K = 6,  // super-blocks of 256: as q4_k with a fifth bit (176 bytes)
  kQ6_K = 7,  // super-blocks of 256: 16 x 16 with int8 scales, 6-bit values (210 bytes)
  kQ5_0 = 8,  // blocks of 32: f16 scale, 32 5-bit (22 bytes); q4_k_m's type for rows not whole 256-blocks
};
inline constexpr int kDtypeCount = 9;

// "f32", "f16", "bf16", "q8_0", "q4_0", "q4_k", "q5_k", "q6_k", "q5_0" (f32/f16/bf16: the spelling of
// nielsd's --dtype flag and niels-convert's).
std::string_view DtypeName(Dtype dtype);
// The inverse of DtypeName; nullopt for anything else.
std::optional<Dtype> ParseDtype(std::string_view name);
// True for the block types (q8_0 ... q5_0: every dtype from kQ8_0 on).
inline bool IsQuantized(Dtype dtype) { return static_cast<int>(dtype) >= static_cast<int>(Dtype::kQ8_0); }
// Elements per block: 1 (f32, f16, bf16), 32 (q8_0, q4_0, q5_0) or 256 (q4_k, q5_k, q6_k).
int64_t DtypeBlockElements(Dtype dtype);
// Bytes per block: 4, 2, 2, 34, 18, 144, 176, 210, 22.
int64_t DtypeBlockBytes(Dtype dtype);
// Bytes per element of an element type: 4 or 2. A block type has no whole number of bytes per
// element: 0 (use RowBytes).
int64_t DtypeSize(Dtype dtype);
// Bytes of `cols` elements: cols / DtypeBlockElements * DtypeBlockBytes.
// REQUIRES: cols is a multiple of DtypeBlockElements(dtype).
inline int64_t RowBytes(Dtype dtype, int64_t cols) { return cols / DtypeBlockElements(dtype) * DtypeBlockBytes(dtype); }

// A read-only row-major matrix of `dtype` elements; the shape comes from the caller (rows of
// `cols` elements, no padding between rows; for a block type, cols is a multiple of its block).
struct Matrix {
  const void* data = nullptr;
  Dtype dtype = Dtype::kF32;

  // The first element (the first block) of row `row`.
  const void* Row(int64_t row, int64_t cols) const {
    return static_cast<const unsigned char*>(data) + row * RowBytes(dtype, cols);
  }
};

float HalfToFloat(uint16_t half);
uint16_t FloatToHalf(float value);
inline float BFloat16ToFloat(uint16_t bf16) {
  const uint32_t bits = static_cast<uint32_t>(bf16) << 16;
  float value;
  __builtin_memcpy(&value, &bits, sizeof value);
  return value;
}
uint16_t FloatToBFloat16(float value);

// The element `index` of a `dtype` array, as a float (for a block type: its block dequantized,
// quant_blocks.h).
float ElementToFloat(const void* data, Dtype dtype, int64_t index);

}  // namespace niels::daemon::kernels
