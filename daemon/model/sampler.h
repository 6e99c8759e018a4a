#pragma once
// Sampler: turns one position's logits into a token id (DESIGN.md section 4).
//
// Order per step: banned ids -> repetition penalty (CTRL: positive logits divided, negative
// multiplied, over ids in `history`) -> temperature (0 = argmax) -> top-k -> top-p -> draw with the
// sampler's own RNG (std::mt19937_64 seeded per request). Same seed and inputs => same ids.
// Not thread-safe; one Sampler per request.

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include <torch/types.h>

#include "common/status.h"

namespace niels::daemon::model {

struct SamplingParams {
  float temperature = 0.9f;          // 0 = greedy (argmax); must be >= 0
  int32_t top_k = 50;                // 0 = off
  float top_p = 0.0f;                // 0 = off; else in (0, 1]
  float repetition_penalty = 1.0f;   // 1 = off; must be > 0
  uint64_t seed = 42;
  std::vector<int32_t> banned_ids;   // never sampled
};

// INVALID_ARGUMENT naming the field when a parameter is out of range (vocab_size for ids).
common::Status ValidateSamplingParams(const SamplingParams& params, int64_t vocab_size);

class Sampler {
 public:
  explicit Sampler(SamplingParams params);

  // logits: [V] f32 (not modified). history: ids the repetition penalty applies to.
  int32_t Sample(const torch::Tensor& logits, std::span<const int32_t> history);

  const SamplingParams& params() const { return params_; }

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
};

}  // namespace niels::daemon::model
