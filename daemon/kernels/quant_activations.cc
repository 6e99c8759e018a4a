#include "daemon/kernels/quant_activations.h"

#include <cmath>
#include <cstring>

namespace niels::daemon::kernels {
namespace {

constexpr uint32_t kInfinityBits = 0x7f800000;
constexpr uint32_t kTinyBits = 0x0d800000;  // 2^-100

uint32_t AbsBits(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  return bits & 0x7fffffff;
}

float FromBits(uint32_t bits) {
  float v;
  std::memcpy(&v, &bits, sizeof v);
  return v;
}

// One block of n values: its scale and levels by the rules of quant_activations.h.
float QuantizeBlock(const float* x, int64_t n, int8_t* q) {
  uint32_t amax_bits = 0;
  for (int64_t i = 0; i < n; ++i) amax_bits = AbsBits(x[i]) > amax_bits ? AbsBits(x[i]) : amax_bits;
  if (amax_bits >= kInfinityBits || amax_bits < kTinyBits) {
    for (int64_t i = 0; i < n; ++i) q[i] = 0;
    return amax_bits >= kInfinityBits ? FromBits(0x7fc00000) : 0.0f;
  }
  const float d = FromBits(amax_bits) / 127.0f;
  const float id = 1.0f / d;
  for (int64_t i = 0; i < n; ++i) {
    const float level = std::nearbyint(x[i] * id);
    q[i] = static_cast<int8_t>(level > 127.0f ? 127.0f : level < -127.0f ? -127.0f : level);
  }
  return d;
}

}  // namespace

ActivationLayout ActivationLayoutFor(Dtype weight, int64_t in) {
  ActivationLayout l;
  l.in = in;
  l.block = DtypeBlockElements(weight);
  l.padded = (in + 63) / 64 * 64;
  l.bias = weight == Dtype::kQ8_0 ? 128 : weight == Dtype::kQ4_0 ? 8 : weight == Dtype::kQ5_0 ? 16 : weight == Dtype::kQ6_K ? 32 : 0;
  const int64_t d_bytes = l.block == 32 ? l.padded / 32 * 8 * 4 : in / 256 * 4;
  l.d_offset = l.padded;
  l.sums_offset = l.d_offset + (d_bytes + 63) / 64 * 64;
  l.starts_offset = l.sums_offset + (l.padded / 32 * 2 + 63) / 64 * 64;
  l.row_bytes = l.starts_offset + l.padded / 4 * 4;
  l.row_bytes = (l.row_bytes + 63) / 64 * 64;
  return l;
}

void QuantizeActivationRow(const ActivationLayout& layout, const float* x, void* row) {
  auto* base = static_cast<unsigned char*>(row);
  std::memset(base, 0, static_cast<size_t>(layout.row_bytes));
  auto* q = reinterpret_cast<int8_t*>(base);
  auto* d = reinterpret_cast<float*>(base + layout.d_offset);
  auto* sums = reinterpret_cast<int16_t*>(base + layout.sums_offset);
  auto* starts = reinterpret_cast<int32_t*>(base + layout.starts_offset);
  for (int64_t b = 0; b < layout.in / layout.block; ++b) {
    const float scale = QuantizeBlock(x + b * layout.block, layout.block, q + b * layout.block);
    if (layout.block == 32) {
      for (int k = 0; k < 8; ++k) d[b * 8 + k] = scale;
    } else {
      d[b] = scale;
    }
  }
  for (int64_t g = 0; g < layout.in / 32; ++g) {
    int sum = 0;
    for (int i = 0; i < 32; ++i) sum += q[32 * g + i];
    sums[g] = static_cast<int16_t>(sum);
  }
  for (int64_t g = 0; g < layout.in / 4; ++g) {
    starts[g] = -layout.bias * (q[4 * g] + q[4 * g + 1] + q[4 * g + 2] + q[4 * g + 3]);
  }
}

}  // namespace niels::daemon::kernels
