#include "daemon/model/transformer.h"

#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <c10/util/Exception.h>

#include "daemon/model/transformer_stages.h"

namespace niels::daemon::model {
namespace {

// Hidden states after the last block (before ln_f) of a full forward: tokens [B, n] -> [B, n, C].
torch::Tensor Trunk(const ModelConfig& config, const Weights& weights, const torch::Tensor& rope,
                    const torch::Tensor& tokens) {
  torch::Tensor h = Embed(weights, tokens);  // [B, n, C]
  for (const BlockWeights& block : weights.blocks) {
    h = Block(block, h, [&](const torch::Tensor& x) { return Attention(config, block, x, rope); });
  }
  return h;
}

// A float32 row-major pointer to `t`, made so in place if it is not (loaded weights already are).
const float* FloatData(torch::Tensor& t) {
  if (t.scalar_type() != at::kFloat || !t.is_contiguous()) t = t.to(at::kFloat).contiguous();
  return t.data_ptr<float>();
}

kernels::WeightViews FloatViews(Weights& w, torch::Tensor& rope_pairs) {
  kernels::WeightViews views{FloatData(w.tok_emb), {}, FloatData(w.ln_f), FloatData(rope_pairs)};
  for (BlockWeights& b : w.blocks) {
    views.blocks.push_back({FloatData(b.ln1), FloatData(b.qkv), FloatData(b.proj), FloatData(b.ln2),
                            FloatData(b.fc_a_w), FloatData(b.fc_a_b), FloatData(b.fc_g_w), FloatData(b.fc_g_b),
                            FloatData(b.fc_out_w), FloatData(b.fc_out_b)});
  }
  return views;
}

kernels::ForwardShape ShapeOf(const ModelConfig& c) {
  return {c.layers, c.width, c.heads, c.d_ff, c.vocab_size, c.context, KvPool::kBlockTokens};
}

}  // namespace

torch::Tensor ForwardTrain(const ModelConfig& config, const Weights& weights, const torch::Tensor& tokens) {
  TORCH_CHECK(tokens.dim() == 2 && tokens.size(1) >= 1 && tokens.size(1) <= config.context,
              "ForwardTrain: tokens must be [B, n] with 1 <= n <= T");
  torch::Tensor rope = RopeTable(config).narrow(0, 0, tokens.size(1));  // [n, D/2]
  return Logits(weights, Trunk(config, weights, rope, tokens));         // [B, n, V]
}

Transformer::Transformer(ModelConfig config, Weights weights, std::shared_ptr<kernels::WorkerPool> pool)
    : config_(std::move(config)),
      weights_(std::move(weights)),
      step_(ShapeOf(config_), std::move(pool)),
      scratch_pool_(std::make_shared<KvPool>(config_, KvPool::BytesForOneSequence(config_))) {
  c10::InferenceMode guard;
  rope_pairs_ = at::view_as_real(RopeTable(config_)).contiguous();  // [T, D/2, 2] float
  weight_views_ = FloatViews(weights_, rope_pairs_);
}

torch::Tensor Transformer::Step(std::span<const SequenceInput> inputs, int64_t trace_layer) const {
  c10::InferenceMode guard;
  TORCH_CHECK(!inputs.empty(), "Step: no input");
  TORCH_CHECK(trace_layer < config_.layers, "Step: trace layer ", trace_layer, " >= L = ", config_.layers);
  int64_t logits_rows = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {  // every check before any cache is touched
    const SequenceInput& input = inputs[i];
    const int64_t n = static_cast<int64_t>(input.tokens.size());
    TORCH_CHECK(n >= 1 && input.cache->length() + n <= config_.context, "Step: need n >= 1 and length + n <= T, got ",
                input.cache->length(), " + ", n);
    for (int32_t token : input.tokens) {
      TORCH_CHECK(token >= 0 && token < config_.vocab_size, "Step: token ", token, " not in [0, ",
                  config_.vocab_size, ")");
    }
    for (size_t other = 0; other < i; ++other) TORCH_CHECK(inputs[other].cache != input.cache, "Step: cache repeated");
    logits_rows += input.all_logits ? n : (input.want_logits ? 1 : 0);
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].cache->PrepareWrite(static_cast<int64_t>(inputs[i].tokens.size()))) {
      for (size_t j = 0; j < i; ++j) inputs[j].cache->Truncate(inputs[j].cache->length());  // drop extra blocks
      throw KvExhausted("the KV cache memory (--kv-budget-mb) is full of blocks in use");
    }
  }
  sequences_.resize(inputs.size());
  block_pointers_.resize(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const SequenceInput& input = inputs[i];
    const int64_t n = static_cast<int64_t>(input.tokens.size());
    std::vector<float*>& pointers = block_pointers_[i];
    pointers.clear();
    for (BlockId id : input.cache->block_ids()) pointers.push_back(input.cache->pool().data(id));
    float* trace = nullptr;
    if (trace_layer >= 0 && input.trace != nullptr) {
      *input.trace = at::empty({config_.heads, input.cache->length() + n}, at::kFloat);  // [H, length]
      trace = input.trace->data_ptr<float>();
    }
    sequences_[i] = {input.tokens.data(), n, input.cache->length(), pointers.data(),
                     input.all_logits ? 0 : (input.want_logits ? n - 1 : n), trace};
  }
  torch::Tensor logits = at::empty({logits_rows, config_.vocab_size}, at::kFloat);  // [n, V]
  step_.Run(weight_views_, sequences_, trace_layer, logits.data_ptr<float>());
  for (const SequenceInput& input : inputs) input.cache->Commit(input.tokens);
  return logits;
}

torch::Tensor Transformer::Prefill(std::span<const int32_t> tokens, KvCache& cache, bool all_logits) const {
  const SequenceInput input{&cache, tokens, /*want_logits=*/true, all_logits};
  torch::Tensor logits = Step(std::span(&input, 1));
  return all_logits ? logits : logits[0];  // [n, V] or [V]
}

torch::Tensor Transformer::Decode(std::span<const int32_t> tokens, std::span<KvCache* const> caches,
                                  AttentionTrace* trace) const {
  TORCH_CHECK(!tokens.empty() && tokens.size() == caches.size(), "Decode: need B >= 1 tokens, one per cache");
  const int64_t layer = trace != nullptr ? trace->layer : -1;
  std::vector<SequenceInput> inputs;
  if (trace != nullptr) trace->rows.assign(tokens.size(), torch::Tensor());
  for (size_t b = 0; b < tokens.size(); ++b) {
    inputs.push_back({caches[b], tokens.subspan(b, 1), true, false, trace != nullptr ? &trace->rows[b] : nullptr});
  }
  return Step(inputs, layer);  // [B, V]
}

torch::Tensor Transformer::Forward(std::span<const int32_t> tokens, bool last_only) const {
  const int64_t n = static_cast<int64_t>(tokens.size());
  TORCH_CHECK(n >= 1 && n <= config_.context, "Forward: need 1 <= n <= T, got n = ", n);
  KvCache scratch(scratch_pool_);
  return Prefill(tokens, scratch, /*all_logits=*/!last_only);  // the scratch blocks go back on return
}

}  // namespace niels::daemon::model
