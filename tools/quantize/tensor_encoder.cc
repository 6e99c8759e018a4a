#include "tools/quantize/tensor_encoder.h"

#include <cmath>
#include <cstring>

#include "daemon/kernels/dtype.h"
#include "daemon/kernels/quant_blocks.h"
#include "daemon/kernels/simd_kernels.h"
#include "tools/quantize/legacy_blocks.h"

namespace niels::tools::quantize {
namespace {

using daemon::kernels::Dtype;
using formats::GgmlType;

// The kernels' dtype of a type they encode; nullopt for q5_1 (legacy_blocks.h).
std::optional<Dtype> KernelDtype(GgmlType type) {
  switch (type) {
    case GgmlType::kF32: return Dtype::kF32;
    case GgmlType::kF16: return Dtype::kF16;
    case GgmlType::kBF16: return Dtype::kBF16;
    case GgmlType::kQ8_0: return Dtype::kQ8_0;
    case GgmlType::kQ4_0: return Dtype::kQ4_0;
    case GgmlType::kQ4_K: return Dtype::kQ4_K;
    case GgmlType::kQ5_K: return Dtype::kQ5_K;
    case GgmlType::kQ6_K: return Dtype::kQ6_K;
    case GgmlType::kQ5_0: return Dtype::kQ5_0;
    default: return std::nullopt;
  }
}

// Byte offsets of the f16 scales in a block of `type` (ggml-common.h): up to two; -1 for none.
void ScaleOffsets(GgmlType type, int* first, int* second) {
  *first = 0;
  *second = -1;
  switch (type) {
    case GgmlType::kQ5_1:
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K: *second = 2; break;  // d, m / dmin
    case GgmlType::kQ6_K: *first = 208; break;  // d after ql, qh, scales
    default: break;                              // q8_0, q4_0, q5_0: d first; f16: the value
  }
}

bool FiniteHalf(const unsigned char* p) {
  uint16_t half;
  std::memcpy(&half, p, sizeof half);
  return (half & 0x7c00) != 0x7c00;  // exponent all ones: infinity or NaN
}

}  // namespace

bool CanEncode(GgmlType type) { return KernelDtype(type).has_value() || type == GgmlType::kQ5_1; }

std::optional<int64_t> FirstUnencodableValue(GgmlType target, const float* values, int64_t n) {
  const bool block_type = formats::GgmlTypeInfo(target).block_size > 1;
  const float limit = block_type ? kMaxQuantizedMagnitude : INFINITY;
  for (int64_t i = 0; i < n; ++i) {
    // Written so that NaN fails too.
    if (!(std::fabs(values[i]) <= limit) || std::isinf(values[i])) return i;
  }
  return std::nullopt;
}

void EncodeValues(GgmlType target, const float* src, int64_t n, void* dst) {
  if (target == GgmlType::kQ5_1) return QuantizeQ5_1(src, n, dst);
  const Dtype dtype = *KernelDtype(target);
  if (dtype == Dtype::kF32) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
  } else if (daemon::kernels::IsQuantized(dtype)) {
    daemon::kernels::QuantizeBlocks(dtype, src, n, dst);
  } else {
    daemon::kernels::simd::FromFloat(src, n, dtype, dst);
  }
}

std::optional<int64_t> FirstInvalidBlock(GgmlType type, const void* data, int64_t blocks) {
  if (type == GgmlType::kF32) return std::nullopt;
  const auto* p = static_cast<const unsigned char*>(data);
  if (type == GgmlType::kBF16) {
    for (int64_t b = 0; b < blocks; ++b) {
      uint16_t bits;
      std::memcpy(&bits, p + 2 * b, sizeof bits);
      if ((bits & 0x7f80) == 0x7f80) return b;
    }
    return std::nullopt;
  }
  const int64_t bytes = formats::GgmlTypeInfo(type).type_size;
  int first = 0, second = -1;
  ScaleOffsets(type, &first, &second);
  for (int64_t b = 0; b < blocks; ++b, p += bytes) {
    if (!FiniteHalf(p + first) || (second >= 0 && !FiniteHalf(p + second))) return b;
  }
  return std::nullopt;
}

}  // namespace niels::tools::quantize
