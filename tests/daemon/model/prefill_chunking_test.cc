// Prefill chunking: a position's keys, values and logits do not depend on how the prompt was split
// into prefill chunks (the scheduler's --prefill-chunk, and prefix sharing, which resumes a prefill
// at a block boundary). Compared bitwise, on shapes that take OpenBLAS's and libtorch's real paths.
#include <memory>
#include <span>
#include <vector>

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include "daemon/kernels/worker_pool.h"
#include "daemon/model/transformer.h"
#include "tests/daemon/model/model_test_util.h"

namespace niels::daemon::model {
namespace {

ModelConfig ShapeOf(int64_t width, int64_t heads, int64_t layers, int64_t vocab) {
  ModelConfig config;
  config.vocab_size = vocab;
  config.context = 300;
  config.width = width;
  config.heads = heads;
  config.layers = layers;
  config.d_ff = 3 * width;
  return config;
}

// Prefills `tokens` into a fresh cache in chunks ending at `ends` (the last must be tokens.size()),
// returning the logits of every position [n, V].
torch::Tensor PrefillInChunks(const Transformer& model, std::span<const int32_t> tokens,
                              const std::vector<int64_t>& ends, KvCache& cache) {
  std::vector<torch::Tensor> logits;
  int64_t begin = 0;
  for (int64_t end : ends) {
    logits.push_back(model.Prefill(tokens.subspan(begin, end - begin), cache, /*all_logits=*/true));
    begin = end;
  }
  return at::cat(logits);
}

bool BitwiseEqual(const torch::Tensor& a, const torch::Tensor& b) {
  return a.sizes() == b.sizes() && at::equal(a.contiguous(), b.contiguous());
}

TEST(PrefillChunkingTest, KeysValuesAndLogitsDoNotDependOnTheChunks) {
  c10::InferenceMode guard;
  for (const ModelConfig& config : {ShapeOf(384, 6, 2, 1024), ShapeOf(160, 4, 2, 301)}) {
    for (int threads : {1, 2}) {
      Transformer model(config, RandomWeights(config, 5, 0.1), std::make_shared<kernels::WorkerPool>(threads));
      const std::vector<int32_t> tokens = RandomTokens(290, 9, config.vocab_size);
      KvCache whole(config);
      const torch::Tensor reference = PrefillInChunks(model, tokens, {290}, whole);
      for (const std::vector<int64_t>& ends : std::vector<std::vector<int64_t>>{
               {16, 290}, {1, 2, 3, 290}, {8, 16, 24, 32, 290}, {100, 256, 290}, {256, 290}, {37, 200, 289, 290}}) {
        KvCache chunked(config);
        const torch::Tensor logits = PrefillInChunks(model, tokens, ends, chunked);
        EXPECT_TRUE(BitwiseEqual(logits, reference))
            << "C " << config.width << " threads " << threads << " first chunk " << ends[0]
            << ": max diff " << (logits - reference).abs().max().item<float>();
        for (int64_t layer = 0; layer < config.layers; ++layer) {
          EXPECT_TRUE(BitwiseEqual(chunked.Keys(layer, 290), whole.Keys(layer, 290))) << "keys, layer " << layer;
          EXPECT_TRUE(BitwiseEqual(chunked.Values(layer, 290), whole.Values(layer, 290))) << "values, layer " << layer;
        }
      }
    }
  }
}

}  // namespace
}  // namespace niels::daemon::model
