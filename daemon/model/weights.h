#pragma once
// Weights: the named tensors of a niels_gpt model (state_dict names of docs/ARCHITECTURE.md "Model
// math").
//
// Loaded weights wrap the safetensors file's memory mapping without a copy when the stored dtype is
// f32 (f16/bf16 are converted to f32 at load). `backing` keeps the mapping alive as long as any
// copy of the Weights exists. Tensors are read-only during inference; training makes its own
// copies with requires_grad.

#include <filesystem>
#include <memory>
#include <vector>

#include <torch/types.h>

#include "common/status.h"
#include "daemon/model/config.h"

namespace niels::daemon::model {

struct BlockWeights {
  torch::Tensor ln1;       // [C]          blocks.{i}.ln1.weight
  torch::Tensor qkv;       // [3C, C]      blocks.{i}.attn.qkv.weight
  torch::Tensor proj;      // [C, C]       blocks.{i}.attn.proj.weight
  torch::Tensor ln2;       // [C]          blocks.{i}.ln2.weight
  torch::Tensor fc_a_w;    // [d_ff, C]    blocks.{i}.mlp.fc_a.weight
  torch::Tensor fc_a_b;    // [d_ff]       blocks.{i}.mlp.fc_a.bias
  torch::Tensor fc_g_w;    // [d_ff, C]    blocks.{i}.mlp.fc_g.weight
  torch::Tensor fc_g_b;    // [d_ff]       blocks.{i}.mlp.fc_g.bias
  torch::Tensor fc_out_w;  // [C, d_ff]    blocks.{i}.mlp.fc_out.weight
  torch::Tensor fc_out_b;  // [C]          blocks.{i}.mlp.fc_out.bias
};

struct Weights {
  torch::Tensor tok_emb;             // [V, C]  tok_emb.weight (also the tied lm_head)
  std::vector<BlockWeights> blocks;  // L entries
  torch::Tensor ln_f;                // [C]     ln_f.weight
  std::shared_ptr<const void> backing;  // the file mapping the tensors may point into; may be null

  // Total bytes of all tensors (what a decode step must read).
  int64_t bytes() const;
  // Every tensor with its state_dict name, in a fixed order (lm_head.weight not included).
  std::vector<std::pair<std::string, torch::Tensor>> Named() const;
};

// Loads and checks model.safetensors against `config`. Every failure is INVALID_ARGUMENT (NOT_FOUND
// for a missing file) with a message naming the file and the tensor: missing or extra tensor, wrong
// shape or dtype, header longer than the file, data offsets past the end, lm_head.weight present but
// not equal to tok_emb.weight.
common::StatusOr<Weights> LoadWeights(const std::filesystem::path& safetensors_path,
                                      const ModelConfig& config);

// Writes `weights` as f32 safetensors (with no lm_head.weight). For tests, tools and training.
common::Status SaveWeights(const Weights& weights, const std::filesystem::path& safetensors_path);

// Random weights with the right shapes (normal(0, std) matrices, biases normal(0, std), norms
// 1 + normal(0, 0.1)), deterministic for a seed. For tests (a larger std makes attention peaked,
// so that position handling matters) and benchmarks.
Weights RandomWeights(const ModelConfig& config, uint64_t seed, double std = 0.02);

}  // namespace niels::daemon::model
