#pragma once
// Small helpers shared by the transformer tests.

#include <cstdint>
#include <random>
#include <vector>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "daemon/model/torch/torch_weights.h"

namespace niels::daemon::model {

// n token ids drawn uniformly from [0, vocab), deterministic for a seed.
inline std::vector<int32_t> RandomTokens(int64_t n, uint32_t seed, int64_t vocab) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> tokens(n);
  for (auto& t : tokens) t = id(rng);
  return tokens;
}

// max |a - b| over all elements; a failed expectation if the shapes differ.
inline float MaxAbsDiff(const torch::Tensor& a, const torch::Tensor& b) {
  EXPECT_EQ(a.sizes(), b.sizes());
  return (a - b).abs().max().item<float>();
}

// Logits rows as returned by the model (row-major, `vocab` per row) as a tensor [rows, V].
inline torch::Tensor Rows(const std::vector<float>& logits, int64_t vocab) {
  return AsTensor(logits, {static_cast<int64_t>(logits.size()) / vocab, vocab});
}

// One row of logits [V].
inline torch::Tensor Row(const std::vector<float>& logits) {
  return AsTensor(logits, {static_cast<int64_t>(logits.size())});
}

// Rows [first, first + count) of row-major logits with `vocab` columns.
inline std::vector<float> SliceRows(const std::vector<float>& logits, int64_t vocab, int64_t first, int64_t count) {
  return std::vector<float>(logits.begin() + first * vocab, logits.begin() + (first + count) * vocab);
}

}  // namespace niels::daemon::model
