#pragma once
// The quantization recipe of niels-quantize: which ggml type each tensor of a model gets for a
// file type, as llama.cpp's llama-quantize chooses it (src/llama-quant.cpp of the llama.cpp that
// node-llama-cpp 3.21.1 bundles), without an importance matrix and with llama-quantize's default
// options. tools/quantize/README.md states the rules; quant_recipe_test holds them to llama.cpp's
// own type selection over many model shapes. Pure functions; safe from any thread.

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "daemon/formats/ggml_type.h"
#include "tools/quantize/tensor_source.h"

namespace niels::tools::quantize {

// The file types niels-quantize writes (llama.cpp's names: Q8_0, Q4_0, Q4_K_M, Q5_K_M).
enum class FileType { kQ8_0, kQ4_0, kQ4_K_M, kQ5_K_M };

// "q8_0", "q4_0", "q4_k_m", "q5_k_m" (any case) -> the type; nullopt for anything else.
std::optional<FileType> ParseFileType(std::string_view name);
// "q8_0", "q4_0", "q4_k_m", "q5_k_m".
std::string_view FileTypeName(FileType type);
// llama.cpp's llama_ftype value, which the output's general.file_type holds: 7, 2, 15, 17.
uint32_t LlamaFileType(FileType type);
// The type most tensors get: q8_0, q4_0, q4_K, q5_K.
formats::GgmlType DefaultTensorType(FileType type);

// The output type of every tensor of `tensors` (same order). Tensors llama.cpp does not quantize
// (fewer than 2 dims that are > 1, names not ending in "weight", norms, ...) keep their type.
// INVALID_ARGUMENT for a model the recipe is not written for: an architecture other than llama,
// qwen2 and qwen3, or a tensor type other than f32, f16 and bf16.
common::StatusOr<std::vector<formats::GgmlType>> PlanTensorTypes(FileType type, const ModelDesc& model,
                                                                 const std::vector<SourceTensor>& tensors);

// The parts of the recipe, exposed for tests and messages.
// True when llama.cpp quantizes a tensor of this name and these dims at all.
bool AllowsQuantization(std::string_view name, const std::vector<int64_t>& dims);
// The type llama.cpp falls back to when a row of `row_length` is not whole blocks of `type`
// (q4_K -> q5_0, q5_K -> q5_1, q6_K -> q8_0, then f16 when not whole 32-blocks either); `type`
// itself when it fits.
formats::GgmlType FallbackType(formats::GgmlType type, int64_t row_length);

}  // namespace niels::tools::quantize
