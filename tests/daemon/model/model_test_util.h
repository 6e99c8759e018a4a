#pragma once
// Small helpers shared by the transformer tests.

#include <cstdint>
#include <random>
#include <vector>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

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

}  // namespace niels::daemon::model
