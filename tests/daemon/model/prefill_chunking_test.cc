// Prefill chunking: a position's keys, values and logits do not depend on how the prompt was split
// into prefill chunks (the scheduler's --prefill-chunk, and prefix sharing, which resumes a prefill
// at a block boundary). Compared bitwise, on a shape as wide as the `personal` preset.
#include <memory>
#include <span>
#include <vector>

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
std::vector<float> PrefillInChunks(const Transformer& model, std::span<const int32_t> tokens,
                                   const std::vector<int64_t>& ends, KvCache& cache) {
  std::vector<float> logits;
  int64_t begin = 0;
  for (int64_t end : ends) {
    const std::vector<float> part = model.Prefill(tokens.subspan(begin, end - begin), cache, /*all_logits=*/true);
    logits.insert(logits.end(), part.begin(), part.end());
    begin = end;
  }
  return logits;
}

TEST(PrefillChunkingTest, KeysValuesAndLogitsDoNotDependOnTheChunks) {
  for (const ModelConfig& config : {ShapeOf(384, 6, 2, 1024), ShapeOf(160, 4, 2, 301)}) {
    for (int threads : {1, 2}) {
      Transformer model(config, RandomWeights(config, 5, 0.1), std::make_shared<kernels::WorkerPool>(threads));
      const std::vector<int32_t> tokens = RandomTokens(290, 9, config.vocab_size);
      KvCache whole(config);
      const std::vector<float> reference = PrefillInChunks(model, tokens, {290}, whole);
      for (const std::vector<int64_t>& ends : std::vector<std::vector<int64_t>>{
               {16, 290}, {1, 2, 3, 290}, {8, 16, 24, 32, 290}, {100, 256, 290}, {256, 290}, {37, 200, 289, 290}}) {
        KvCache chunked(config);
        const std::vector<float> logits = PrefillInChunks(model, tokens, ends, chunked);
        EXPECT_EQ(logits, reference) << "C " << config.width << " threads " << threads << " first chunk " << ends[0];
        for (int64_t layer = 0; layer < config.layers; ++layer) {
          EXPECT_EQ(chunked.KeysAsFloats(layer, 290), whole.KeysAsFloats(layer, 290)) << "keys, layer " << layer;
          EXPECT_EQ(chunked.ValuesAsFloats(layer, 290), whole.ValuesAsFloats(layer, 290)) << "values, layer " << layer;
        }
      }
    }
  }
}

}  // namespace
}  // namespace niels::daemon::model
