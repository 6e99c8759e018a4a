#pragma once
// A test harness, not a loader: nielsd's forward pass (model::Transformer on daemon/kernels) on a
// GGUF file's weights of the llama, qwen2 or qwen3 architecture (f32/f16/bf16 or quantized by
// niels-quantize), read straight from the file's mapping in the file's types. It maps llama.cpp's
// tensor names and hyperparameter keys onto model::Weights and ModelConfig for the files the tests
// make (convert_hf_to_gguf.py's layout, niels-export's) and nothing more: no tokenizer (so it runs
// niels-export's files, whose SentencePiece vocabularies LoadModel refuses), no validation beyond
// model::ValidateModelConfig and model::CheckShapes. A tensor type nielsd has no kernel for (q5_0,
// q5_1, ...) is an INVALID_ARGUMENT naming it. Used by niels_gguf_logits and niels_quant_accuracy.

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"
#include "daemon/kernels/worker_pool.h"
#include "daemon/model/config.h"
#include "daemon/model/transformer.h"

namespace niels::testing {

struct GgufTestModel {
  daemon::model::ModelConfig config;
  std::unique_ptr<daemon::model::Transformer> transformer;
};

// The model in the GGUF file at `path`, run with a context of `context` positions, or the file's
// `{arch}.context_length` when that is smaller (Llama 3's 131072 would size the RoPE table and the
// uncached Forward's KV cache for it). dequantize: the block-type matrices widened to f32 first
// (model::Tensor::ToFloats: float products on the exact dequantized weights, no 8-bit activations).
// `pool` runs the kernels (nullptr: one thread). Errors name the file and the key or tensor.
common::StatusOr<GgufTestModel> LoadGgufTestModel(const std::string& path, int64_t context, bool dequantize = false,
                                                  std::shared_ptr<daemon::kernels::WorkerPool> pool = nullptr);

}  // namespace niels::testing
