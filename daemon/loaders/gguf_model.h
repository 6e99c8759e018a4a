#pragma once
// A GGUF file of the Llama family (llama.cpp's format; docs/ARCHITECTURE.md, "Loading a model"):
// the config from its metadata and tensor table (gguf_config.h), the tokenizer from its tokenizer.*
// metadata (gguf_tokenizer.h), the weights from its tensors under llama.cpp's names
// (tensor_slots.h), used straight from the file's mapping.
//
// Tensor types: F32, F16, BF16 and the block types Q8_0, Q4_0, Q4_K, Q5_K and Q6_K, mixed per
// tensor as llama.cpp's quantizer writes them (a Q4_K_M file holds Q4_K, Q6_K and F32 tensors);
// matrices stay in their type (the kernels compute with each), 1-D tensors (norms, biases,
// rope_freqs) are widened to f32. Every other type is refused, naming the tensor and the type;
// GgufFile::Open has already refused data out of the file, misaligned or of the wrong size.

#include <filesystem>
#include <memory>

#include "common/status.h"
#include "daemon/loaders/model_loader.h"

namespace niels::daemon::loaders {

// Whether `path` is a regular file that starts with the GGUF magic "GGUF".
bool IsGgufFile(const std::filesystem::path& path);

// Loads a GGUF file (LoadModel's contract).
common::StatusOr<std::unique_ptr<Model>> LoadGgufModel(const std::filesystem::path& path,
                                                       std::shared_ptr<kernels::WorkerPool> pool,
                                                       const LoadOptions& options);

}  // namespace niels::daemon::loaders
