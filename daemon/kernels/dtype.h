#pragma once
// The element types weights and KV caches may be stored in, and exact scalar conversions between
// them and float. No libtorch.
//
// f16 is IEEE 754 binary16; bf16 is the upper half of a float32. Widening (f16/bf16 -> f32) is
// exact. Narrowing (f32 -> f16/bf16) rounds to nearest, ties to even, like the F16C instruction
// VCVTPS2PH with rounding mode 0 and like torch's .to(): values beyond f16's range become
// infinity, NaN stays a (quiet) NaN. The SIMD bulk conversions (simd_kernels.h) give the same bits.

#include <cstdint>
#include <optional>
#include <string_view>

namespace niels::daemon::kernels {

enum class Dtype : uint8_t { kF32 = 0, kF16 = 1, kBF16 = 2 };
inline constexpr int kDtypeCount = 3;

// "f32", "f16", "bf16" (the spelling of nielsd's --dtype flag and niels-convert's).
std::string_view DtypeName(Dtype dtype);
// The inverse of DtypeName; nullopt for anything else.
std::optional<Dtype> ParseDtype(std::string_view name);
// Bytes per element: 4 or 2.
int64_t DtypeSize(Dtype dtype);

// A read-only row-major matrix of `dtype` elements; the shape comes from the caller (rows of
// `cols` elements, no padding between rows).
struct Matrix {
  const void* data = nullptr;
  Dtype dtype = Dtype::kF32;

  // The first element of row `row`.
  const void* Row(int64_t row, int64_t cols) const {
    return static_cast<const unsigned char*>(data) + row * cols * DtypeSize(dtype);
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

// The element `index` of a `dtype` array, as a float.
float ElementToFloat(const void* data, Dtype dtype, int64_t index);

}  // namespace niels::daemon::kernels
