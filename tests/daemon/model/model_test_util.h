#pragma once
// Small helpers shared by the transformer tests.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <span>
#include <vector>

#include <gtest/gtest.h>

#include "daemon/model/kv_cache.h"
#include "daemon/model/transformer.h"

namespace niels::daemon::model {

// n token ids drawn uniformly from [0, vocab), deterministic for a seed.
inline std::vector<int32_t> RandomTokens(int64_t n, uint32_t seed, int64_t vocab) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> tokens(n);
  for (auto& t : tokens) t = id(rng);
  return tokens;
}

// max |a - b| over all elements; a failed expectation (and infinity) if the sizes differ.
inline double MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  double most = 0;
  for (size_t i = 0; i < a.size(); ++i) most = std::max(most, std::abs(static_cast<double>(a[i]) - b[i]));
  return most;
}

// The standard deviation of all elements (to check that reference logits are not flat).
inline double StdDev(const std::vector<float>& values) {
  double sum = 0, sum_sq = 0;
  for (float v : values) {
    sum += v;
    sum_sq += static_cast<double>(v) * v;
  }
  const double n = static_cast<double>(values.size());
  return std::sqrt(std::max(0.0, sum_sq / n - (sum / n) * (sum / n)));
}

// Rows [first, first + count) of row-major logits with `vocab` columns.
inline std::vector<float> SliceRows(const std::vector<float>& logits, int64_t vocab, int64_t first, int64_t count) {
  return std::vector<float>(logits.begin() + first * vocab, logits.begin() + (first + count) * vocab);
}

// Decodes `tokens` one by one into `cache` (B = 1), returning logits [n, V] row-major.
inline std::vector<float> DecodeEach(const Transformer& model, std::span<const int32_t> tokens, KvCache& cache) {
  std::vector<float> rows;
  KvCache* caches[] = {&cache};
  for (int32_t token : tokens) {
    const std::vector<float> row = model.Decode(std::span(&token, 1), caches);
    rows.insert(rows.end(), row.begin(), row.end());
  }
  return rows;
}

}  // namespace niels::daemon::model
