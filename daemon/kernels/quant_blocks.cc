#include "daemon/kernels/quant_blocks.h"

#include <cmath>
#include <cstring>

namespace niels::daemon::kernels {
namespace {

// The f16 at p (any alignment), widened.
float HalfAt(const void* p) {
  uint16_t half;
  std::memcpy(&half, p, sizeof half);
  return HalfToFloat(half);
}

void DequantizeQ8_0(const unsigned char* block, float* y) {
  const float d = HalfAt(block + offsetof(BlockQ8_0, d));
  const auto* qs = reinterpret_cast<const int8_t*>(block + offsetof(BlockQ8_0, qs));
  for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(qs[j]) * d;
}

void DequantizeQ4_0(const unsigned char* block, float* y) {
  const float d = HalfAt(block + offsetof(BlockQ4_0, d));
  const unsigned char* qs = block + offsetof(BlockQ4_0, qs);
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>((qs[j] & 15) - 8) * d;
    y[j + 16] = static_cast<float>((qs[j] >> 4) - 8) * d;
  }
}

// q5_0: q4_0's nibbles with a fifth bit from qh, minus 16.
void DequantizeQ5_0(const unsigned char* block, float* y) {
  const float d = HalfAt(block + offsetof(BlockQ5_0, d));
  uint32_t qh;
  std::memcpy(&qh, block + offsetof(BlockQ5_0, qh), sizeof qh);
  const unsigned char* qs = block + offsetof(BlockQ5_0, qs);
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>(((qs[j] & 15) | static_cast<int>(qh >> j & 1) << 4) - 16) * d;
    y[j + 16] = static_cast<float>(((qs[j] >> 4) | static_cast<int>(qh >> (j + 16) & 1) << 4) - 16) * d;
  }
}

// q4_k and q5_k: value 64c + l from the low nibble of qs[32c + l] (sub-block 2c), 64c + 32 + l
// from the high nibble (sub-block 2c + 1), plus 16 where qh (q5_k) has bit 2c / 2c + 1 of byte l.
void DequantizeK4OrK5(float d, float dmin, const uint8_t* scales, const uint8_t* qs, const uint8_t* qh, float* y) {
  for (int c = 0; c < 4; ++c) {
    uint8_t sc, m;
    ScaleMinK4(scales, 2 * c, &sc, &m);
    const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
    ScaleMinK4(scales, 2 * c + 1, &sc, &m);
    const float d2 = d * static_cast<float>(sc), m2 = dmin * static_cast<float>(m);
    for (int l = 0; l < 32; ++l) {
      const int high1 = qh != nullptr && (qh[l] >> (2 * c) & 1) ? 16 : 0;
      const int high2 = qh != nullptr && (qh[l] >> (2 * c + 1) & 1) ? 16 : 0;
      y[64 * c + l] = d1 * static_cast<float>((qs[32 * c + l] & 15) + high1) - m1;
      y[64 * c + 32 + l] = d2 * static_cast<float>((qs[32 * c + l] >> 4) + high2) - m2;
    }
  }
}

void DequantizeQ4K(const unsigned char* block, float* y) {
  DequantizeK4OrK5(HalfAt(block + offsetof(BlockQ4K, d)), HalfAt(block + offsetof(BlockQ4K, dmin)),
                   block + offsetof(BlockQ4K, scales), block + offsetof(BlockQ4K, qs), nullptr, y);
}

void DequantizeQ5K(const unsigned char* block, float* y) {
  DequantizeK4OrK5(HalfAt(block + offsetof(BlockQ5K, d)), HalfAt(block + offsetof(BlockQ5K, dmin)),
                   block + offsetof(BlockQ5K, scales), block + offsetof(BlockQ5K, qs),
                   block + offsetof(BlockQ5K, qh), y);
}

void DequantizeQ6K(const unsigned char* block, float* y) {
  const float d = HalfAt(block + offsetof(BlockQ6K, d));
  const auto* scales = reinterpret_cast<const int8_t*>(block + offsetof(BlockQ6K, scales));
  for (int h = 0; h < 2; ++h) {
    const unsigned char* ql = block + offsetof(BlockQ6K, ql) + 64 * h;
    const unsigned char* qh = block + offsetof(BlockQ6K, qh) + 32 * h;
    const int8_t* sc = scales + 8 * h;
    float* out = y + 128 * h;
    for (int l = 0; l < 32; ++l) {
      const int g = l / 16;  // the 16-value group within each quarter
      const int q1 = ((ql[l] & 15) | (qh[l] & 3) << 4) - 32;
      const int q2 = ((ql[l + 32] & 15) | (qh[l] >> 2 & 3) << 4) - 32;
      const int q3 = ((ql[l] >> 4) | (qh[l] >> 4 & 3) << 4) - 32;
      const int q4 = ((ql[l + 32] >> 4) | (qh[l] >> 6 & 3) << 4) - 32;
      out[l] = d * static_cast<float>(sc[g]) * static_cast<float>(q1);
      out[l + 32] = d * static_cast<float>(sc[g + 2]) * static_cast<float>(q2);
      out[l + 64] = d * static_cast<float>(sc[g + 4]) * static_cast<float>(q3);
      out[l + 96] = d * static_cast<float>(sc[g + 6]) * static_cast<float>(q4);
    }
  }
}

// q8_0: d = amax / 127, values round(x / d) (half away from zero), as ggml's reference.
void QuantizeQ8_0Block(const float* x, BlockQ8_0* out) {
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j) amax = std::fabs(x[j]) > amax ? std::fabs(x[j]) : amax;
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  out->d = FloatToHalf(d);
  for (int j = 0; j < 32; ++j) out->qs[j] = static_cast<int8_t>(TruncateToInt32(std::round(x[j] * id)));
}

// The levels of q4_0 (offset 8) and q5_0 (offset 16) into q[32]: d = -(the value of largest
// magnitude, the first such) / offset, so that value maps to -offset (level 0); q = min(2 offset -
// 1, trunc(x / d + offset + 0.5)). Returns d.
float OffsetLevels(const float* x, int offset, uint8_t* q) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < 32; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  const float d = max / -static_cast<float>(offset);
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  const int top = 2 * offset - 1;
  for (int j = 0; j < 32; ++j) {
    const int level = static_cast<int8_t>(TruncateToInt32(x[j] * id + (static_cast<float>(offset) + 0.5f)));
    q[j] = static_cast<uint8_t>(level < top ? level : top);
  }
  return d;
}

// q4_0: OffsetLevels(x, 8), two per byte (value j low, j + 16 high).
void QuantizeQ4_0Block(const float* x, BlockQ4_0* out) {
  uint8_t q[32];
  out->d = FloatToHalf(OffsetLevels(x, 8, q));
  for (int j = 0; j < 16; ++j) out->qs[j] = static_cast<uint8_t>(q[j] | q[j + 16] << 4);
}

// q5_0: OffsetLevels(x, 16): the low four bits as q4_0's, the fifth of value j as bit j of qh.
void QuantizeQ5_0Block(const float* x, BlockQ5_0* out) {
  uint8_t q[32];
  out->d = FloatToHalf(OffsetLevels(x, 16, q));
  uint32_t qh = 0;
  for (int j = 0; j < 16; ++j) {
    out->qs[j] = static_cast<uint8_t>((q[j] & 15) | (q[j + 16] & 15) << 4);
    qh |= static_cast<uint32_t>(q[j] >> 4 & 1) << j | static_cast<uint32_t>(q[j + 16] >> 4 & 1) << (j + 16);
  }
  std::memcpy(out->qh, &qh, sizeof qh);  // little-endian, as the format
}

}  // namespace

void ScaleMinK4(const uint8_t* scales, int j, uint8_t* scale, uint8_t* min) {
  if (j < 4) {
    *scale = scales[j] & 63;
    *min = scales[j + 4] & 63;
  } else {
    *scale = static_cast<uint8_t>((scales[j + 4] & 15) | (scales[j - 4] >> 6) << 4);
    *min = static_cast<uint8_t>((scales[j + 4] >> 4) | (scales[j] >> 6) << 4);
  }
}

void DequantizeBlocks(Dtype dtype, const void* src, int64_t blocks, float* dst) {
  const auto* p = static_cast<const unsigned char*>(src);
  const int64_t bytes = DtypeBlockBytes(dtype), values = DtypeBlockElements(dtype);
  for (int64_t b = 0; b < blocks; ++b, p += bytes, dst += values) {
    switch (dtype) {
      case Dtype::kQ8_0: DequantizeQ8_0(p, dst); break;
      case Dtype::kQ4_0: DequantizeQ4_0(p, dst); break;
      case Dtype::kQ4_K: DequantizeQ4K(p, dst); break;
      case Dtype::kQ5_K: DequantizeQ5K(p, dst); break;
      case Dtype::kQ6_K: DequantizeQ6K(p, dst); break;
      case Dtype::kQ5_0: DequantizeQ5_0(p, dst); break;
      default: return;
    }
  }
}

void QuantizeBlocks(Dtype dtype, const float* src, int64_t n, void* dst) {
  auto* p = static_cast<unsigned char*>(dst);
  const int64_t values = DtypeBlockElements(dtype), bytes = DtypeBlockBytes(dtype);
  // Each block is built in a local struct and copied out: dst may be unaligned.
  auto emit = [&p, bytes](const auto& block) {
    std::memcpy(p, &block, static_cast<size_t>(bytes));
    p += bytes;
  };
  for (int64_t i = 0; i + values <= n; i += values) {
    switch (dtype) {
      case Dtype::kQ8_0: { BlockQ8_0 b; QuantizeQ8_0Block(src + i, &b); emit(b); break; }
      case Dtype::kQ4_0: { BlockQ4_0 b; QuantizeQ4_0Block(src + i, &b); emit(b); break; }
      case Dtype::kQ4_K: { BlockQ4K b; QuantizeQ4KBlock(src + i, &b); emit(b); break; }
      case Dtype::kQ5_K: { BlockQ5K b; QuantizeQ5KBlock(src + i, &b); emit(b); break; }
      case Dtype::kQ6_K: { BlockQ6K b; QuantizeQ6KBlock(src + i, &b); emit(b); break; }
      case Dtype::kQ5_0: { BlockQ5_0 b; QuantizeQ5_0Block(src + i, &b); emit(b); break; }
      default: return;
    }
  }
}

}  // namespace niels::daemon::kernels
