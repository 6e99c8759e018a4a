#pragma once
// Transformer: the niels_gpt forward pass (docs/ARCHITECTURE.md, "Model math") for inference, with
// and without a KV cache, on nielsd's own kernels (daemon/kernels): Prefill and the uncached Forward
// on PrefillStep, Decode on DecodeStep. No libtorch (training's differentiable forward is
// daemon/model/torch/transformer_stages.h; tests hold both to a scalar reference).
//
// The weights stay in their dtype (f32, f16 or bf16; weights.h) and are read by the kernels as they
// are. A token's logits and cached keys/values are bitwise the same whether it was prefilled (in any
// chunking), decoded (in any batch) or run through the uncached Forward: all three run the same row
// operations (daemon/kernels/row_ops.h) and batch-invariant matrix products.
//
// The Transformer holds the weights, the RoPE table and the two steps (with their scratch,
// allocated once and reused); the kernels run on the WorkerPool given at construction (no
// process-wide pool). Thread-safety: calls must come from one thread at a time (the engine thread in
// nielsd): the steps reuse their scratch.

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "daemon/kernels/decode_step.h"
#include "daemon/kernels/model_views.h"
#include "daemon/kernels/prefill_step.h"
#include "daemon/kernels/worker_pool.h"
#include "daemon/model/config.h"
#include "daemon/model/kv_cache.h"
#include "daemon/model/language_model.h"
#include "daemon/model/weights.h"

namespace niels::daemon::model {

// RoPE angles for positions 0..T-1 as (cos, sin) pairs [T, D/2, 2]: entry (p, i) is the rotation
// by p * inv_freq_i with inv_freq_i = rope_theta^(-2i/D), computed in float64 and stored as float.
std::vector<float> RopeTable(const ModelConfig& config);

class Transformer final : public LanguageModel {
 public:
  // pool: the kernels' threads (shared with whoever else uses it); nullptr = a 1-thread pool.
  // REQUIRES: the weights' shapes match `config` (LoadWeights checks a file).
  Transformer(ModelConfig config, Weights weights, std::shared_ptr<kernels::WorkerPool> pool = nullptr);

  const ModelConfig& config() const override { return config_; }
  const Weights& weights() const { return weights_; }

  // See LanguageModel for the contracts.
  std::vector<float> Prefill(std::span<const int32_t> tokens, KvCache& cache, bool all_logits = false) const override;
  std::vector<float> Decode(std::span<const int32_t> tokens, std::span<KvCache* const> caches,
                            AttentionTrace* trace = nullptr) const override;
  std::vector<float> Forward(std::span<const int32_t> tokens, bool last_only = false) const override;

 private:
  void CheckTokens(std::span<const int32_t> tokens, const char* what) const;

  ModelConfig config_;
  Weights weights_;
  std::vector<float> rope_;  // RopeTable(config_)
  kernels::WeightViews views_;
  mutable kernels::DecodeStep decode_step_;    // its scratch is reused from call to call
  mutable kernels::PrefillStep prefill_step_;  // likewise
  mutable std::vector<kernels::DecodeSequence> sequences_;  // the batch of the last Decode, reused
};

}  // namespace niels::daemon::model
