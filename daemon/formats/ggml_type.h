#pragma once
// GgmlType: the tensor element types of ggml (and so of GGUF files), with the block layout of each.
//
// Every ggml type stores elements in blocks: `block_size` elements take `type_size` bytes (plain
// types such as F32 are blocks of one element). A tensor's rows (its fastest-varying dimension,
// ne[0] in GGUF) must be a whole number of blocks. The table covers every type id that ggml assigns
// today, also the quantized ones nielsd cannot compute with yet, so a GGUF reader can validate the
// size of every tensor; ids ggml has retired (4, 5, 31-33, 36-38) and ids past the table are
// unknown. Sizes follow ggml's block structs (ggml-common.h) and gguf-py's GGML_QUANT_SIZES.
// Pure data; safe from any thread.

#include <cstdint>
#include <optional>
#include <string_view>

namespace niels::daemon::formats {

enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  // 4, 5: Q4_2, Q4_3 (retired)
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ2_XXS = 16,
  kIQ2_XS = 17,
  kIQ3_XXS = 18,
  kIQ1_S = 19,
  kIQ4_NL = 20,
  kIQ3_S = 21,
  kIQ2_S = 22,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kIQ1_M = 29,
  kBF16 = 30,
  // 31-33: Q4_0_4_4, Q4_0_4_8, Q4_0_8_8 (retired from GGUF files)
  kTQ1_0 = 34,
  kTQ2_0 = 35,
  // 36-38: IQ4_NL_4_4, IQ4_NL_4_8, IQ4_NL_8_8 (retired)
  kMXFP4 = 39,
  kNVFP4 = 40,
  kQ1_0 = 41,
};

struct GgmlTypeTraits {
  GgmlType type;
  std::string_view name;  // ggml's name: "f32", "q4_K", "iq2_xxs", ...
  int64_t block_size;     // elements per block
  int64_t type_size;      // bytes per block
};

// The traits of type id `id`; nullopt for a retired or unknown id.
std::optional<GgmlTypeTraits> FindGgmlType(uint32_t id);
// The traits of a known type. REQUIRES: `type` is one of the enumerators above.
const GgmlTypeTraits& GgmlTypeInfo(GgmlType type);
// ggml's name of `type` ("f32", "q8_0", ...).
std::string_view GgmlTypeName(GgmlType type);

// Bytes of a tensor of `elements` elements whose rows have `row_length` elements: nullopt when the
// row length is not a whole number of blocks, or the size does not fit in int64.
// REQUIRES: 0 <= elements, 0 < row_length or elements == 0.
std::optional<int64_t> GgmlTensorBytes(GgmlType type, int64_t row_length, int64_t elements);

}  // namespace niels::daemon::formats
