#pragma once
// Transformer: the forward pass of the family (docs/ARCHITECTURE.md, "Model math") for inference,
// with and without a KV cache, run by one ForwardStep (forward_step.h) on nielsd's own kernels.
// No libtorch (training's differentiable forward of niels_gpt is tools/torch/transformer_stages.h;
// tests hold both to a scalar reference).
//
// A prefill chunk, a decode step and a mixed Step of several sequences are all rows of one
// ForwardStep, so every position's logits and cached keys/values are bitwise the same however its
// tokens were split into steps and whatever else ran beside it; the uncached Forward is a prefill
// into a private scratch cache. The weights stay in their dtype (f32, f16 or bf16; weights.h) and
// are read by the kernels as they are.
//
// The Transformer holds the weights, the RoPE table, the step (with its scratch, allocated once and
// reused) and a small KV pool for Forward. Its kernels run on the WorkerPool given at construction
// (no process-wide pool). Thread-safety: calls must come from one thread at a time (the engine
// thread in nielsd): the step's scratch is shared.

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "daemon/kernels/worker_pool.h"
#include "daemon/model/config.h"
#include "daemon/model/forward_step.h"
#include "daemon/model/kv_cache.h"
#include "daemon/model/language_model.h"
#include "daemon/model/weights.h"

namespace niels::daemon::model {

// RoPE angles as (cos, sin) pairs, rows [T, D/2, 2]: entry (p, i) is the rotation by p * inv_freq_i
// with inv_freq_i = rope_theta^(-2i/D) / freq_factors[i] (1 when no factors are given), computed in
// float64 and stored as float. Writes the rows of positions [first, last) of `table` (T rows).
// REQUIRES: 0 <= first <= last <= T; freq_factors empty or D/2 long.
void FillRopeTable(const ModelConfig& config, std::span<const float> freq_factors, int64_t first, int64_t last,
                   float* table);

class Transformer final : public LanguageModel {
 public:
  // pool: the kernels' threads (shared with whoever else uses it); nullptr = a 1-thread pool.
  // kv_dtype: the KV blocks of Forward's private cache (f32 or f16); the caches given to Prefill,
  // Decode and Step may be of either dtype (their pool's).
  // REQUIRES: the weights' shapes match `config` (model::CheckShapes; the loaders check every file).
  Transformer(ModelConfig config, Weights weights, std::shared_ptr<kernels::WorkerPool> pool = nullptr,
              kernels::Dtype kv_dtype = kernels::Dtype::kF32);

  const ModelConfig& config() const override { return config_; }
  const Weights& weights() const { return weights_; }
  // The KV dtype of Forward's cache (the process's --kv-dtype in nielsd).
  kernels::Dtype kv_dtype() const { return scratch_pool_->dtype(); }

  // See LanguageModel for the contracts. Violated REQUIREs throw std::invalid_argument before any
  // cache is touched; a full KV pool throws KvExhausted.
  std::vector<float> Prefill(std::span<const int32_t> tokens, KvCache& cache, bool all_logits = false) const override;
  std::vector<float> Decode(std::span<const int32_t> tokens, std::span<KvCache* const> caches,
                            AttentionTrace* trace = nullptr) const override;
  std::vector<float> Forward(std::span<const int32_t> tokens, bool last_only = false) const override;
  std::vector<float> Step(std::span<const SequenceInput> inputs, int64_t trace_layer = -1) const override;
  KvCache NewForwardCache() const override;
  void ReleaseScratch() const override { step_.ReleaseScratch(); }

 private:
  ModelConfig config_;
  Weights weights_;
  // The RoPE table (FillRopeTable), allocated for T positions and filled only as far as a step has
  // reached (in kRopeRows steps): nothing at start-up (sin and cos of all 40,960 positions of a Qwen3
  // model took 100 ms), and untouched pages stay out of RSS.
  void FillRopeTo(int64_t end) const;
  static constexpr int64_t kRopeRows = 256;
  std::unique_ptr<float[]> rope_;
  mutable int64_t rope_filled_ = 0;  // rows [0, rope_filled_) are filled
  mutable ForwardStep step_;              // its scratch is reused from call to call
  std::shared_ptr<KvPool> scratch_pool_;  // Forward's cache: T positions
  // NewForwardCache's pool: T positions, made at the first call (only the uncached path uses it).
  mutable std::shared_ptr<KvPool> window_pool_;
  mutable std::vector<StepSequence> sequences_;  // the inputs of the last step, reused
  mutable std::vector<std::vector<void*>> block_pointers_;
};

}  // namespace niels::daemon::model
