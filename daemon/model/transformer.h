#pragma once
// Transformer: the niels_gpt forward pass (DESIGN.md section 2), with and without a KV cache.
//
// The math lives in free functions (one per stage) so that inference and training share one
// definition; ForwardTrain is differentiable. The Transformer class holds the weights and the RoPE
// tables and runs under torch::InferenceMode. It is immutable after construction: const methods may
// be called from one thread at a time per KvCache (the engine thread owns all caches).

#include <cstdint>
#include <span>
#include <vector>

#include <torch/types.h>

#include "daemon/model/config.h"
#include "daemon/model/kv_cache.h"
#include "daemon/model/weights.h"

namespace niels::daemon::model {

// Differentiable full forward for training: tokens [B, n] (int64, n <= T, positions 0..n-1)
// -> logits [B, n, V]. Uses the same stage functions as the inference paths.
torch::Tensor ForwardTrain(const ModelConfig& config, const Weights& weights, const torch::Tensor& tokens);

// Optional per-step output of one layer's attention probabilities.
struct AttentionTrace {
  int64_t layer = -1;              // which layer to record; -1 = none
  std::vector<torch::Tensor> rows;  // filled by Decode: per sequence [H, length] (after softmax)
};

class Transformer {
 public:
  Transformer(ModelConfig config, Weights weights);

  const ModelConfig& config() const { return config_; }
  const Weights& weights() const { return weights_; }

  // Processes `tokens` at positions cache.length() .. cache.length()+n-1 in one batched forward,
  // appending their keys/values to `cache`. Returns logits at the last position [V], or at every
  // position [n, V] when `all_logits` (the vocab projection is skipped elsewhere otherwise).
  // REQUIRES: n >= 1, cache.length() + n <= T, every id in [0, V).
  torch::Tensor Prefill(std::span<const int32_t> tokens, KvCache& cache, bool all_logits = false) const;

  // One decode step for B sequences: token b goes to position caches[b]->length() (lengths may
  // differ) and is appended to that cache. Returns logits [B, V].
  // REQUIRES: B >= 1, tokens.size() == caches.size(), distinct caches, each length < T.
  torch::Tensor Decode(std::span<const int32_t> tokens, std::span<KvCache* const> caches,
                       AttentionTrace* trace = nullptr) const;

  // Uncached full forward over `tokens` at positions 0..n-1: logits [n, V] (last_only: [V]).
  // REQUIRES: 1 <= n <= T.
  torch::Tensor Forward(std::span<const int32_t> tokens, bool last_only = false) const;

 private:
  ModelConfig config_;
  Weights weights_;
  torch::Tensor rope_cos_;  // [T, D/2] f32 (angles computed in f64)
  torch::Tensor rope_sin_;  // [T, D/2]
};

}  // namespace niels::daemon::model
