#include "daemon/kernels/dtype.h"

#include <cstring>

#include "daemon/kernels/quant_blocks.h"

namespace niels::daemon::kernels {
namespace {

uint32_t Bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

float FromBits(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

}  // namespace

std::string_view DtypeName(Dtype dtype) {
  switch (dtype) {
    case Dtype::kF32: return "f32";
    case Dtype::kF16: return "f16";
    case Dtype::kBF16: return "bf16";
    case Dtype::kQ8_0: return "q8_0";
    case Dtype::kQ4_0: return "q4_0";
    case Dtype::kQ4_K: return "q4_k";
    case Dtype::kQ5_K: return "q5_k";
    case Dtype::kQ6_K: return "q6_k";
    case Dtype::kQ5_0: return "q5_0";
  }
  return "?";
}

std::optional<Dtype> ParseDtype(std::string_view name) {
  for (int i = 0; i < kDtypeCount; ++i) {
    const Dtype dtype = static_cast<Dtype>(i);
    if (name == DtypeName(dtype)) return dtype;
  }
  return std::nullopt;
}

int64_t DtypeBlockElements(Dtype dtype) {
  switch (dtype) {
    case Dtype::kF32:
    case Dtype::kF16:
    case Dtype::kBF16: return 1;
    case Dtype::kQ8_0:
    case Dtype::kQ4_0:
    case Dtype::kQ5_0: return 32;
    case Dtype::kQ4_K:
    case Dtype::kQ5_K:
    case Dtype::kQ6_K: return 256;
  }
  return 1;
}

int64_t DtypeBlockBytes(Dtype dtype) {
  switch (dtype) {
    case Dtype::kF32: return 4;
    case Dtype::kF16:
    case Dtype::kBF16: return 2;
    case Dtype::kQ8_0: return sizeof(BlockQ8_0);
    case Dtype::kQ4_0: return sizeof(BlockQ4_0);
    case Dtype::kQ4_K: return sizeof(BlockQ4K);
    case Dtype::kQ5_K: return sizeof(BlockQ5K);
    case Dtype::kQ6_K: return sizeof(BlockQ6K);
    case Dtype::kQ5_0: return sizeof(BlockQ5_0);
  }
  return 4;
}

int64_t DtypeSize(Dtype dtype) { return IsQuantized(dtype) ? 0 : DtypeBlockBytes(dtype); }

float HalfToFloat(uint16_t half) {
  const uint32_t sign = static_cast<uint32_t>(half & 0x8000) << 16;
  const uint32_t exponent = (half >> 10) & 0x1f;
  uint32_t mantissa = half & 0x3ff;
  if (exponent == 0x1f) return FromBits(sign | 0x7f800000 | (mantissa << 13));  // inf, NaN (payload kept)
  if (exponent != 0) return FromBits(sign | ((exponent + 112) << 23) | (mantissa << 13));
  if (mantissa == 0) return FromBits(sign);  // +-0
  // Subnormal: value = mantissa * 2^-24; normalize it.
  int shift = 0;
  while ((mantissa & 0x400) == 0) {
    mantissa <<= 1;
    ++shift;
  }
  return FromBits(sign | static_cast<uint32_t>(113 - shift) << 23 | ((mantissa & 0x3ff) << 13));
}

uint16_t FloatToHalf(float value) {
  const uint32_t bits = Bits(value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000);
  const uint32_t magnitude = bits & 0x7fffffff;
  if (magnitude > 0x7f800000) {  // NaN: quiet, the payload's upper bits kept (as VCVTPS2PH does)
    return static_cast<uint16_t>(sign | 0x7e00 | ((magnitude >> 13) & 0x3ff));
  }
  if (magnitude >= 0x477ff000) return static_cast<uint16_t>(sign | 0x7c00);  // rounds to >= 65536: inf
  if (magnitude >= 0x38800000) {  // normal in f16 (>= 2^-14)
    // Rebias the exponent (127 -> 15) and round the 23-bit mantissa to 10 bits, ties to even; a
    // carry out of the mantissa correctly bumps the exponent.
    const uint32_t rebiased = magnitude - (112u << 23);
    const uint32_t rounded = rebiased + 0xfff + ((rebiased >> 13) & 1);
    return static_cast<uint16_t>(sign | (rounded >> 13));
  }
  if (magnitude < 0x33000000) return sign;  // below half the smallest subnormal (2^-25): +-0
  // Subnormal in f16: value / 2^-24, rounded to an integer, ties to even.
  const uint32_t exponent = magnitude >> 23;
  const uint32_t mantissa = (magnitude & 0x7fffff) | 0x800000;  // 24 significant bits
  const uint32_t shift = 126 - exponent;                        // 14..24
  const uint32_t truncated = mantissa >> shift;
  const uint32_t remainder = mantissa & ((1u << shift) - 1);
  const uint32_t halfway = 1u << (shift - 1);
  const uint32_t rounded = truncated + (remainder > halfway || (remainder == halfway && (truncated & 1)) ? 1 : 0);
  return static_cast<uint16_t>(sign | rounded);
}

uint16_t FloatToBFloat16(float value) {
  const uint32_t bits = Bits(value);
  if ((bits & 0x7fffffff) > 0x7f800000) return static_cast<uint16_t>((bits >> 16) | 0x40);  // quiet NaN
  return static_cast<uint16_t>((bits + 0x7fff + ((bits >> 16) & 1)) >> 16);
}

float ElementToFloat(const void* data, Dtype dtype, int64_t index) {
  switch (dtype) {
    case Dtype::kF32: return static_cast<const float*>(data)[index];
    case Dtype::kF16: return HalfToFloat(static_cast<const uint16_t*>(data)[index]);
    case Dtype::kBF16: return BFloat16ToFloat(static_cast<const uint16_t*>(data)[index]);
    default: {
      const int64_t block = DtypeBlockElements(dtype);
      float values[256];
      DequantizeBlocks(dtype, static_cast<const unsigned char*>(data) + index / block * DtypeBlockBytes(dtype), 1,
                       values);
      return values[index % block];
    }
  }
}

}  // namespace niels::daemon::kernels
