#pragma once
// libtorch's view of a model, for the programs that use libtorch: training (niels-train), tests
// (reference forwards, perturbed weights) and tools. nielsd itself never includes this (it loads no
// libtorch); library niels_model_torch.
//
// TorchWeights holds every tensor as a plain f32 torch::Tensor (not an inference tensor), so that
// training can set requires_grad; ToTorch/FromTorch convert to and from the torch-free Weights.

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include <torch/types.h>

#include "common/status.h"
#include "daemon/model/config.h"
#include "daemon/model/weights.h"

namespace niels::torch_model {

using daemon::model::ModelConfig;
using daemon::model::Tensor;
using daemon::model::Weights;

struct TorchBlockWeights {
  torch::Tensor ln1, qkv, proj, ln2, fc_a_w, fc_a_b, fc_g_w, fc_g_b, fc_out_w, fc_out_b;
};

struct TorchWeights {
  torch::Tensor tok_emb;
  std::vector<TorchBlockWeights> blocks;
  torch::Tensor ln_f;

  // Every tensor, in the state_dict order of Weights::Named().
  std::vector<torch::Tensor*> All();
};

// f32 copies of every tensor (16-bit matrices widened).
TorchWeights ToTorch(const Weights& weights);
// The tensors copied into f32 buffers owned by the result (then ConvertWeights for 16 bits).
Weights FromTorch(const TorchWeights& weights);

// Random initial weights for training, drawn from libtorch's CPU generator seeded with `seed`
// (normal(0, std) matrices and biases, norms 1 + normal(0, 0.1)): niels-train's initialization, so
// that a documented training command reproduces its model bit for bit. (RandomWeights, weights.h,
// draws torch-free numbers for tests and benchmarks.)
TorchWeights RandomTorchWeights(const ModelConfig& config, uint64_t seed, double std = 0.02);

// Differentiable full forward for training: tokens [B, n] (int64, n <= T, positions 0..n-1)
// -> logits [B, n, V], built from the stages of transformer_stages.h.
torch::Tensor ForwardTrain(const ModelConfig& config, const TorchWeights& weights, const torch::Tensor& tokens);

// Writes torch tensors (any shape, made contiguous; f32, f16, bf16, f64, i64, i32, i16, i8, u8 or
// bool) as safetensors through WriteSafetensors (safetensors.h). INTERNAL for another dtype.
common::Status WriteTorchSafetensors(const std::filesystem::path& path,
                                     const std::vector<std::pair<std::string, torch::Tensor>>& tensors);

// A float row-major buffer (model logits) as a tensor of `shape` (a copy).
torch::Tensor AsTensor(const std::vector<float>& values, std::vector<int64_t> shape);

}  // namespace niels::torch_model
