// model::ForwardStep with block-quantized weight matrices (every GGUF block type, the token
// embedding and tied head included): the whole step's invariance holds bitwise as with f32/f16
// weights -- a prompt prefilled at once, in chunks, decoded token by token, or beside another
// sequence gives the same logits (==) -- and the logits stay close to those of the f32 model with
// the same (dequantized) weights (the 8-bit activations' rounding is the only difference).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "daemon/kernels/dtype.h"
#include "daemon/kernels/quant_blocks.h"
#include "daemon/kernels/simd_kernels.h"
#include "daemon/kernels/worker_pool.h"
#include "daemon/model/config.h"
#include "daemon/model/forward_step.h"
#include "daemon/model/weights.h"

namespace niels::daemon::model {
namespace {
namespace forward_step_quant_test {  // this file's own names: the suite compiles as one unity unit

using kernels::DequantizeBlocks;
using kernels::DtypeBlockElements;
using kernels::DtypeName;
using kernels::QuantizeBlocks;
using kernels::RowBytes;
using kernels::WorkerPool;

// Fused q, k and v, biased SwiGLU, no q/k/v biases, adjacent-pair RoPE, a tied head.
const ModelConfig kConfig = [] {
  ModelConfig c;
  c.layers = 2;
  c.width = 256;
  c.heads = 4;
  c.kv_heads = 4;
  c.head_size = 64;
  c.d_ff = 512;
  c.vocab_size = 300;
  c.context = 64;
  c.rms_norm_eps = 1e-5;
  c.rope_pairs = RopePairs::kAdjacent;
  c.qk_rows_interleaved = false;
  return c;
}();
constexpr int64_t kBlockTokens = 16;

// A random model whose matrices are stored in `dtype` (quantized from N(0, 0.06) floats), plus the
// same model with those matrices dequantized to f32.
struct Model {
  std::vector<std::vector<unsigned char>> matrices;  // quantized bytes
  std::vector<std::vector<float>> dequantized;       // their values, f32
  std::vector<std::vector<float>> vectors;           // norms and biases
  std::vector<float> rope;
  Weights quantized_weights, f32_weights;  // views of the buffers above
};

std::unique_ptr<Model> MakeModel(Dtype dtype) {
  auto m = std::make_unique<Model>();
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto matrix = [&](int64_t rows, int64_t cols) {
    std::vector<float> values(static_cast<size_t>(rows * cols));
    for (float& v : values) v = 0.06f * normal(rng);
    std::vector<unsigned char> bytes(static_cast<size_t>(rows * RowBytes(dtype, cols)));
    QuantizeBlocks(dtype, values.data(), rows * cols, bytes.data());
    DequantizeBlocks(dtype, bytes.data(), rows * cols / DtypeBlockElements(dtype), values.data());
    m->matrices.push_back(std::move(bytes));
    m->dequantized.push_back(std::move(values));
    const size_t k = m->matrices.size() - 1;
    return std::make_pair(Tensor{m->matrices[k].data(), dtype, {rows, cols}},
                          Tensor{m->dequantized[k].data(), Dtype::kF32, {rows, cols}});
  };
  auto vector = [&](int64_t n, float center) {
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = center + 0.05f * normal(rng);
    m->vectors.push_back(std::move(v));
    return Tensor{m->vectors.back().data(), Dtype::kF32, {n}};
  };
  m->matrices.reserve(32);
  m->dequantized.reserve(32);
  m->vectors.reserve(32);
  const int64_t C = kConfig.width, F = kConfig.d_ff;
  const auto tok_emb = matrix(kConfig.vocab_size, C);
  m->quantized_weights.tok_emb = m->quantized_weights.lm_head = tok_emb.first;
  m->f32_weights.tok_emb = m->f32_weights.lm_head = tok_emb.second;
  for (int64_t layer = 0; layer < kConfig.layers; ++layer) {
    BlockWeights q, f;
    q.attn_norm = f.attn_norm = vector(C, 1.0f);
    std::tie(q.wqkv, f.wqkv) = matrix(3 * C, C);
    std::tie(q.wo, f.wo) = matrix(C, C);
    q.ffn_norm = f.ffn_norm = vector(C, 1.0f);
    std::tie(q.w_up, f.w_up) = matrix(F, C);
    q.b_up = f.b_up = vector(F, 0.0f);
    std::tie(q.w_gate, f.w_gate) = matrix(F, C);
    q.b_gate = f.b_gate = vector(F, 0.0f);
    std::tie(q.w_down, f.w_down) = matrix(C, F);
    q.b_down = f.b_down = vector(C, 0.0f);
    m->quantized_weights.blocks.push_back(q);
    m->f32_weights.blocks.push_back(f);
  }
  m->quantized_weights.final_norm = m->f32_weights.final_norm = vector(C, 1.0f);
  const int64_t D = kConfig.head_dim();
  m->rope.resize(static_cast<size_t>(kConfig.context * D));
  for (int64_t p = 0; p < kConfig.context; ++p) {
    for (int64_t i = 0; i < D / 2; ++i) {
      const double angle = static_cast<double>(p) * std::pow(10000.0, -2.0 * static_cast<double>(i) / static_cast<double>(D));
      m->rope[p * D + 2 * i] = static_cast<float>(std::cos(angle));
      m->rope[p * D + 2 * i + 1] = static_cast<float>(std::sin(angle));
    }
  }
  return m;
}

// One sequence's KV blocks (f32).
struct Cache {
  std::vector<std::vector<float>> storage;
  std::vector<void*> blocks;
  explicit Cache(const KvBlockLayout& layout) {
    const int64_t elements = kConfig.layers * 2 * layout.heads * layout.block_tokens * layout.head_dim;
    for (int64_t b = 0; b < kConfig.context / kBlockTokens; ++b) {
      storage.emplace_back(static_cast<size_t>(elements), 0.0f);
      blocks.push_back(storage.back().data());
    }
  }
};

// Logits of every position of `tokens`, run in steps of the given sizes (the sequence alone, or
// beside a second sequence that takes the same steps with its own tokens).
std::vector<float> RunSteps(ForwardStep& step, const Weights& w, const float* rope, const std::vector<int32_t>& tokens,
                            const std::vector<int64_t>& chunks, bool with_neighbour) {
  Cache cache(step.layout()), other(step.layout());
  std::vector<int32_t> other_tokens(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) other_tokens[i] = static_cast<int32_t>((tokens[i] * 7 + 3) % kConfig.vocab_size);
  std::vector<float> logits, out;
  int64_t start = 0;
  for (int64_t n : chunks) {
    std::vector<StepSequence> sequences;
    sequences.push_back({tokens.data() + start, n, start, cache.blocks.data(), Dtype::kF32, 0});
    if (with_neighbour) sequences.push_back({other_tokens.data() + start, n, start, other.blocks.data(), Dtype::kF32, n});
    out.assign(static_cast<size_t>(n * kConfig.vocab_size), 0.0f);
    const int64_t rows = step.Run(w, rope, sequences, -1, out.data());
    EXPECT_EQ(rows, n);
    logits.insert(logits.end(), out.begin(), out.end());
    start += n;
  }
  return logits;
}

class ForwardStepQuantTest : public ::testing::TestWithParam<Dtype> {};

TEST_P(ForwardStepQuantTest, PrefillChunksDecodeAndBatchesGiveBitwiseTheSameLogits) {
  const auto model = MakeModel(GetParam());
  ForwardStep step(kConfig, kBlockTokens, std::make_shared<WorkerPool>(2));
  std::vector<int32_t> tokens;
  for (int i = 0; i < 23; ++i) tokens.push_back(static_cast<int32_t>((i * 37 + 11) % kConfig.vocab_size));
  const Weights& quantized = model->quantized_weights;
  const float* rope = model->rope.data();
  const auto whole = RunSteps(step, quantized, rope, tokens, {23}, false);
  const auto chunked = RunSteps(step, quantized, rope, tokens, {7, 1, 15}, false);
  const auto decoded = RunSteps(step, quantized, rope, tokens, std::vector<int64_t>(23, 1), false);
  const auto batched = RunSteps(step, quantized, rope, tokens, {5, 18}, true);
  ASSERT_EQ(whole.size(), decoded.size());
  for (size_t i = 0; i < whole.size(); ++i) {
    ASSERT_EQ(whole[i], chunked[i]) << "chunked, position " << i / kConfig.vocab_size;
    ASSERT_EQ(whole[i], decoded[i]) << "decoded, position " << i / kConfig.vocab_size;
    ASSERT_EQ(whole[i], batched[i]) << "beside another sequence, position " << i / kConfig.vocab_size;
  }
  // Against the f32 model of the dequantized weights: the 8-bit activations move the logits by
  // about 1% of their spread.
  const auto f32 = RunSteps(step, model->f32_weights, rope, tokens, {23}, false);
  double max_diff = 0, max_logit = 0;
  for (size_t i = 0; i < whole.size(); ++i) {
    max_diff = std::max(max_diff, std::fabs(static_cast<double>(whole[i]) - f32[i]));
    max_logit = std::max(max_logit, std::fabs(static_cast<double>(f32[i])));
  }
  EXPECT_LT(max_diff, 0.05 * max_logit) << "max |logit| " << max_logit;
  RecordProperty("max_abs_logit_diff_vs_f32", std::to_string(max_diff));
}

INSTANTIATE_TEST_SUITE_P(EveryBlockType, ForwardStepQuantTest,
                         ::testing::Values(Dtype::kQ8_0, Dtype::kQ4_0, Dtype::kQ4_K, Dtype::kQ5_K, Dtype::kQ6_K, Dtype::kQ5_0),
                         [](const ::testing::TestParamInfo<Dtype>& info) { return std::string(DtypeName(info.param)); });

}  // namespace forward_step_quant_test
}  // namespace
}  // namespace niels::daemon::model
