#pragma once
// The niels model directory (docs/ARCHITECTURE.md, "Model math"): config.json (V, T, C, L, H, d_ff,
// rope_theta, name), model.safetensors with niels_gpt's state_dict names in one dtype (f32, f16 or
// bf16), tokenizer.model (SentencePiece with niels_gpt's four special tokens).
//
// niels_gpt's tensors, by name, and where they go in model::Weights:
//   tok_emb.weight [V, C] -> tok_emb (and the tied lm_head)   ln_f.weight [C] -> final_norm
//   blocks.i.ln1.weight -> attn_norm   blocks.i.attn.qkv.weight [3C, C] -> wqkv
//   blocks.i.attn.proj.weight -> wo    blocks.i.ln2.weight -> ffn_norm
//   blocks.i.mlp.fc_g.{weight,bias} -> w_gate, b_gate      blocks.i.mlp.fc_a.{weight,bias} -> w_up, b_up
//   blocks.i.mlp.fc_out.{weight,bias} -> w_down, b_down
// lm_head.weight, if present, must equal tok_emb.weight.

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "daemon/loaders/model_loader.h"
#include "daemon/loaders/tensor_slots.h"  // NielsTensorNames
#include "daemon/model/config.h"
#include "daemon/model/weights.h"

namespace niels::daemon::loaders {

// Whether `dir` looks like a niels model directory (its config.json has a key "V").
bool IsNielsDir(const std::filesystem::path& dir);

// Loads a niels model directory (LoadModel's contract).
common::StatusOr<std::unique_ptr<Model>> LoadNielsDir(const std::filesystem::path& dir,
                                                      std::shared_ptr<kernels::WorkerPool> pool,
                                                      const LoadOptions& options);

// Loads and checks model.safetensors against `config`: matrices in `dtype` (nullopt: as stored,
// used from the mapping; converted otherwise), norms and biases in f32. Every failure is
// INVALID_ARGUMENT (NOT_FOUND for a missing file) naming the file and the tensor: a missing or
// extra tensor, a wrong shape, a dtype other than F32/F16/BF16, tensors of different dtypes, a
// header longer than the file, data offsets past the end, lm_head.weight not equal to
// tok_emb.weight, a value that overflows the requested f16.
common::StatusOr<model::Weights> LoadNielsWeights(const std::filesystem::path& safetensors_path,
                                                  const model::ModelConfig& config,
                                                  std::optional<kernels::Dtype> dtype = std::nullopt);

// Writes niels_gpt weights (fused qkv, biased MLP, tied head) as model.safetensors with niels_gpt's
// names, every tensor in `dtype` (default: the matrices' own dtype; norms and biases then too).
// INVALID_ARGUMENT when the weights are not of niels_gpt's layout. For tests, tools and benchmarks.
common::Status SaveNielsWeights(const model::Weights& weights, const std::filesystem::path& safetensors_path,
                                std::optional<kernels::Dtype> dtype = std::nullopt);

}  // namespace niels::daemon::loaders
