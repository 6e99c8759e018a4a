#include "tools/quantize/legacy_blocks.h"

#include <cfloat>
#include <cmath>
#include <cstring>

#include "daemon/kernels/dtype.h"
#include "daemon/kernels/quant_blocks.h"

namespace niels::tools::quantize {
namespace {

using daemon::kernels::FloatToHalf;
using daemon::kernels::HalfToFloat;
using daemon::kernels::TruncateToInt32;

void StoreHalf(unsigned char* p, float value) {
  const uint16_t half = FloatToHalf(value);
  std::memcpy(p, &half, sizeof half);
}

float LoadHalf(const unsigned char* p) {
  uint16_t half;
  std::memcpy(&half, p, sizeof half);
  return HalfToFloat(half);
}

// Packs 32 five-bit levels: low nibbles of values j and j + 16 share qs[j], fifth bits go to qh.
void PackLevels(const uint8_t* q, unsigned char* qh_out, unsigned char* qs) {
  uint32_t qh = 0;
  for (int j = 0; j < 16; ++j) {
    qs[j] = static_cast<unsigned char>((q[j] & 15) | (q[j + 16] & 15) << 4);
    qh |= static_cast<uint32_t>(q[j] >> 4 & 1) << j;
    qh |= static_cast<uint32_t>(q[j + 16] >> 4 & 1) << (j + 16);
  }
  std::memcpy(qh_out, &qh, sizeof qh);  // little-endian, as the format
}

// The 32 five-bit levels of a block's qh and qs.
void UnpackLevels(const unsigned char* qh_in, const unsigned char* qs, int* q) {
  uint32_t qh;
  std::memcpy(&qh, qh_in, sizeof qh);
  for (int j = 0; j < 16; ++j) {
    q[j] = (qs[j] & 15) | static_cast<int>(qh >> j & 1) << 4;
    q[j + 16] = (qs[j] >> 4) | static_cast<int>(qh >> (j + 16) & 1) << 4;
  }
}

void QuantizeQ5_1Block(const float* x, unsigned char* block) {
  float min = FLT_MAX, max = -FLT_MAX;
  for (int j = 0; j < 32; ++j) {
    if (x[j] < min) min = x[j];
    if (x[j] > max) max = x[j];
  }
  const float d = (max - min) / 31.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  StoreHalf(block, d);
  StoreHalf(block + 2, min);
  uint8_t q[32];
  for (int j = 0; j < 32; ++j) q[j] = static_cast<uint8_t>(TruncateToInt32((x[j] - min) * id + 0.5f));
  PackLevels(q, block + 4, block + 8);
}

}  // namespace

void QuantizeQ5_0(const float* src, int64_t n, void* dst) {
  daemon::kernels::QuantizeBlocks(daemon::kernels::Dtype::kQ5_0, src, n, dst);
}

void QuantizeQ5_1(const float* src, int64_t n, void* dst) {
  auto* out = static_cast<unsigned char*>(dst);
  for (int64_t i = 0; i + 32 <= n; i += 32, out += kQ5_1BlockBytes) QuantizeQ5_1Block(src + i, out);
}

void DequantizeQ5_0(const void* src, int64_t blocks, float* dst) {
  daemon::kernels::DequantizeBlocks(daemon::kernels::Dtype::kQ5_0, src, blocks, dst);
}

void DequantizeQ5_1(const void* src, int64_t blocks, float* dst) {
  const auto* block = static_cast<const unsigned char*>(src);
  for (int64_t b = 0; b < blocks; ++b, block += kQ5_1BlockBytes, dst += 32) {
    const float d = LoadHalf(block), m = LoadHalf(block + 2);
    int q[32];
    UnpackLevels(block + 4, block + 8, q);
    for (int j = 0; j < 32; ++j) dst[j] = static_cast<float>(q[j]) * d + m;
  }
}

}  // namespace niels::tools::quantize
