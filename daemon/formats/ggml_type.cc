#include "daemon/formats/ggml_type.h"

#include <cstdlib>

namespace niels::daemon::formats {
namespace {

constexpr int64_t kQK = 256;  // QK_K: the super-block of the k-quants and most i-quants

// Sizes from ggml's block structs: e.g. block_q4_0 = f16 scale + 16 bytes of nibbles (32 weights);
// block_q4_K = f16 d, f16 dmin, 12 bytes of scales, 128 bytes of nibbles (256 weights).
constexpr GgmlTypeTraits kTypes[] = {
    {GgmlType::kF32, "f32", 1, 4},
    {GgmlType::kF16, "f16", 1, 2},
    {GgmlType::kQ4_0, "q4_0", 32, 2 + 16},
    {GgmlType::kQ4_1, "q4_1", 32, 2 + 2 + 16},
    {GgmlType::kQ5_0, "q5_0", 32, 2 + 4 + 16},
    {GgmlType::kQ5_1, "q5_1", 32, 2 + 2 + 4 + 16},
    {GgmlType::kQ8_0, "q8_0", 32, 2 + 32},
    {GgmlType::kQ8_1, "q8_1", 32, 2 + 2 + 32},
    {GgmlType::kQ2_K, "q2_K", kQK, kQK / 16 + kQK / 4 + 2 + 2},
    {GgmlType::kQ3_K, "q3_K", kQK, kQK / 8 + kQK / 4 + 12 + 2},
    {GgmlType::kQ4_K, "q4_K", kQK, 2 + 2 + 12 + kQK / 2},
    {GgmlType::kQ5_K, "q5_K", kQK, 2 + 2 + 12 + kQK / 8 + kQK / 2},
    {GgmlType::kQ6_K, "q6_K", kQK, kQK / 2 + kQK / 4 + kQK / 16 + 2},
    {GgmlType::kQ8_K, "q8_K", kQK, 4 + kQK + kQK / 16 * 2},
    {GgmlType::kIQ2_XXS, "iq2_xxs", kQK, 2 + kQK / 8 * 2},
    {GgmlType::kIQ2_XS, "iq2_xs", kQK, 2 + kQK / 8 * 2 + kQK / 32},
    {GgmlType::kIQ3_XXS, "iq3_xxs", kQK, 2 + kQK / 4 + kQK / 8},
    {GgmlType::kIQ1_S, "iq1_s", kQK, 2 + kQK / 8 + kQK / 16},
    {GgmlType::kIQ4_NL, "iq4_nl", 32, 2 + 16},
    {GgmlType::kIQ3_S, "iq3_s", kQK, 2 + kQK / 4 + kQK / 8 + kQK / 32 + 4},
    {GgmlType::kIQ2_S, "iq2_s", kQK, 2 + kQK / 4 + kQK / 16},
    {GgmlType::kIQ4_XS, "iq4_xs", kQK, 2 + 2 + kQK / 2 + kQK / 64},
    {GgmlType::kI8, "i8", 1, 1},
    {GgmlType::kI16, "i16", 1, 2},
    {GgmlType::kI32, "i32", 1, 4},
    {GgmlType::kI64, "i64", 1, 8},
    {GgmlType::kF64, "f64", 1, 8},
    {GgmlType::kIQ1_M, "iq1_m", kQK, kQK / 8 + kQK / 16 + kQK / 32},
    {GgmlType::kBF16, "bf16", 1, 2},
    {GgmlType::kTQ1_0, "tq1_0", kQK, 2 + 4 * 13},
    {GgmlType::kTQ2_0, "tq2_0", kQK, 2 + 64},
    {GgmlType::kMXFP4, "mxfp4", 32, 1 + 16},
    {GgmlType::kNVFP4, "nvfp4", 64, 4 + 32},
    {GgmlType::kQ1_0, "q1_0", 128, 2 + 16},
};

}  // namespace

std::optional<GgmlTypeTraits> FindGgmlType(uint32_t id) {
  for (const GgmlTypeTraits& t : kTypes) {
    if (static_cast<uint32_t>(t.type) == id) return t;
  }
  return std::nullopt;
}

const GgmlTypeTraits& GgmlTypeInfo(GgmlType type) {
  for (const GgmlTypeTraits& t : kTypes) {
    if (t.type == type) return t;
  }
  std::abort();  // REQUIRES violated: not an enumerator
}

std::string_view GgmlTypeName(GgmlType type) { return GgmlTypeInfo(type).name; }

std::optional<int64_t> GgmlTensorBytes(GgmlType type, int64_t row_length, int64_t elements) {
  const GgmlTypeTraits& t = GgmlTypeInfo(type);
  if (elements == 0) return 0;
  if (row_length <= 0 || row_length % t.block_size != 0) return std::nullopt;
  const int64_t blocks = elements / t.block_size;  // rows are whole blocks, so this is exact
  int64_t bytes = 0;
  if (__builtin_mul_overflow(blocks, t.type_size, &bytes)) return std::nullopt;
  return bytes;
}

}  // namespace niels::daemon::formats
