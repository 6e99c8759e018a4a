#pragma once
// Transformer: the niels_gpt forward pass (docs/ARCHITECTURE.md, "Model math") for inference, with
// and without a KV cache, and ForwardTrain for training.
//
// Inference runs on nielsd's own kernels (daemon/kernels/forward_step.h): a prefill chunk, a decode
// step and a mixed Step of several sequences are all rows of one ForwardStep, so every position's
// result is bitwise the same however its tokens were split into steps and whatever else ran beside
// it; the uncached Forward is a prefill into a private scratch cache. The libtorch stages
// (transformer_stages.h) define the same math for ForwardTrain, which is differentiable; the tests
// hold the kernels to them and to a naive scalar reference.
//
// The Transformer holds the weights, the RoPE table, the step (with its scratch, allocated once and
// reused) and a small KV pool for Forward. Its kernels run on the WorkerPool given at construction
// (no process-wide pool). Thread-safety: calls must come from one thread at a time (the engine
// thread in nielsd): the step's scratch is shared.

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include <torch/types.h>

#include "daemon/kernels/forward_step.h"
#include "daemon/kernels/worker_pool.h"
#include "daemon/model/config.h"
#include "daemon/model/kv_cache.h"
#include "daemon/model/language_model.h"
#include "daemon/model/weights.h"

namespace niels::daemon::model {

// Differentiable full forward for training: tokens [B, n] (int64, n <= T, positions 0..n-1)
// -> logits [B, n, V]. Uses the libtorch stage functions.
torch::Tensor ForwardTrain(const ModelConfig& config, const Weights& weights, const torch::Tensor& tokens);

class Transformer final : public LanguageModel {
 public:
  // pool: the kernels' threads (shared with whoever else uses it); nullptr = a 1-thread pool.
  Transformer(ModelConfig config, Weights weights, std::shared_ptr<kernels::WorkerPool> pool = nullptr);

  const ModelConfig& config() const override { return config_; }
  const Weights& weights() const { return weights_; }

  // See LanguageModel for the contracts. The returned logits are inference tensors (made under
  // c10::InferenceMode): read them freely, but modify them in place only under InferenceMode (or
  // clone them first). Violated REQUIREs throw c10::Error; a full KV pool throws KvExhausted.
  torch::Tensor Prefill(std::span<const int32_t> tokens, KvCache& cache,
                        bool all_logits = false) const override;
  torch::Tensor Decode(std::span<const int32_t> tokens, std::span<KvCache* const> caches,
                       AttentionTrace* trace = nullptr) const override;
  torch::Tensor Forward(std::span<const int32_t> tokens, bool last_only = false) const override;
  torch::Tensor Step(std::span<const SequenceInput> inputs, int64_t trace_layer = -1) const override;

 private:
  ModelConfig config_;
  Weights weights_;
  torch::Tensor rope_pairs_;             // [T, D/2, 2] float: (cos, sin) of the RoPE angles (f64-made)
  kernels::WeightViews weight_views_;    // float views of weights_ and rope_pairs_
  mutable kernels::ForwardStep step_;    // its scratch is reused from call to call
  std::shared_ptr<KvPool> scratch_pool_;  // Forward's cache: T positions
  mutable std::vector<kernels::StepSequence> sequences_;  // the inputs of the last step, reused
  mutable std::vector<std::vector<float*>> block_pointers_;
};

}  // namespace niels::daemon::model
