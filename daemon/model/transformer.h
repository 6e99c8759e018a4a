#pragma once
// Transformer: the niels_gpt forward pass (docs/ARCHITECTURE.md "Model math"), with and without a
// KV cache.
//
// The math lives in free functions (one per stage) so that inference and training share one
// definition; ForwardTrain is differentiable. Decode, the hot path, runs the same math as plain
// float loops (decode_step.h); tests hold it to the libtorch stages and to a scalar reference.
// The Transformer class holds the weights and the RoPE tables and runs under
// torch::InferenceMode. It is immutable after construction; the engine thread owns all KV caches,
// so calls are made from one thread at a time.

#include <cstdint>
#include <span>

#include <torch/types.h>

#include "daemon/model/config.h"
#include "daemon/model/decode_step.h"
#include "daemon/model/kv_cache.h"
#include "daemon/model/language_model.h"
#include "daemon/model/weights.h"

namespace niels::daemon::model {

// Differentiable full forward for training: tokens [B, n] (int64, n <= T, positions 0..n-1)
// -> logits [B, n, V]. Uses the same stage functions as the inference paths.
torch::Tensor ForwardTrain(const ModelConfig& config, const Weights& weights, const torch::Tensor& tokens);

class Transformer final : public LanguageModel {
 public:
  Transformer(ModelConfig config, Weights weights);

  const ModelConfig& config() const override { return config_; }
  const Weights& weights() const { return weights_; }

  // See LanguageModel for the contracts. The returned logits are inference tensors (made under
  // c10::InferenceMode): read them freely, but modify them in place only under InferenceMode (or
  // clone them first). Violated REQUIREs throw c10::Error.
  torch::Tensor Prefill(std::span<const int32_t> tokens, KvCache& cache,
                        bool all_logits = false) const override;
  torch::Tensor Decode(std::span<const int32_t> tokens, std::span<KvCache* const> caches,
                       AttentionTrace* trace = nullptr) const override;
  torch::Tensor Forward(std::span<const int32_t> tokens, bool last_only = false) const override;

 private:
  ModelConfig config_;
  Weights weights_;
  torch::Tensor rope_;  // [T, D/2] complex64: cos + i sin of the RoPE angles (computed in f64)
  torch::Tensor rope_pairs_;       // the same table as floats [T, D/2, 2] (cos, sin), for DecodeStep
  DecodeWeights decode_weights_;   // float views of weights_ and rope_pairs_
};

}  // namespace niels::daemon::model
