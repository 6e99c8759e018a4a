#pragma once
// The training loop: AdamW over the niels_gpt weights with the daemon's differentiable forward
// (model::ForwardTrain), cross-entropy masked to assistant tokens, length-bucketed padded batches,
// linear warmup then cosine decay, gradient clipping, a fixed seed. Single-threaded caller; libtorch
// intra-op threads as set by the caller.

#include <cstdint>
#include <vector>

#include "daemon/model/config.h"
#include "tools/torch/torch_weights.h"
#include "tools/train/chat_corpus.h"

namespace niels::tools::train {

namespace model = ::niels::daemon::model;
namespace torch_model = ::niels::torch_model;

struct TrainOptions {
  int64_t steps = 2000;          // optimizer steps
  double lr = 3e-3;              // peak learning rate
  double min_lr_ratio = 0.05;    // the cosine decays to lr * min_lr_ratio
  int64_t warmup = 100;          // linear warmup steps
  double weight_decay = 0.05;    // AdamW decay for matrices and embeddings (not norms or biases)
  double grad_clip = 1.0;        // max global gradient norm (0 = off)
  int64_t batch_tokens = 4096;   // padded tokens per batch (B * n <= batch_tokens)
  uint64_t seed = 1234;          // data order (weights are seeded by the caller)
  int64_t log_every = 50;        // steps between plain progress lines (non-terminal stderr)
};

struct TrainResult {
  double final_loss = 0;   // mean loss over the last 5% of steps (at least one)
  double seconds = 0;
  int64_t tokens = 0;      // non-padding tokens processed
};

// Trains `weights` in place (they leave with requires_grad off and no grad). REQUIRES: examples
// non-empty, each with 2..T tokens.
TrainResult TrainModel(const model::ModelConfig& config, torch_model::TorchWeights& weights,
                       const std::vector<Example>& examples, const TrainOptions& options);

// The learning rate at 0-based `step`: linear warmup to lr, then cosine down to lr * min_lr_ratio.
double LearningRate(const TrainOptions& options, int64_t step);

}  // namespace niels::tools::train
