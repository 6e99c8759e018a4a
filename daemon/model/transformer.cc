#include "daemon/model/transformer.h"

#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <c10/util/Exception.h>

#include "daemon/model/transformer_stages.h"

namespace niels::daemon::model {
namespace {

// [n] int64 copy of the token ids.
torch::Tensor TokenTensor(std::span<const int32_t> tokens) {
  return at::tensor(at::ArrayRef<int32_t>(tokens.data(), tokens.size()), at::kInt).to(at::kLong);
}

// Hidden states after the last block (before ln_f) of an uncached forward: tokens [B, n] -> [B, n, C].
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

kernels::DecodeWeights FloatViews(Weights& w, torch::Tensor& rope_pairs) {
  kernels::DecodeWeights views{FloatData(w.tok_emb), {}, FloatData(w.ln_f), FloatData(rope_pairs)};
  for (BlockWeights& b : w.blocks) {
    views.blocks.push_back({FloatData(b.ln1), FloatData(b.qkv), FloatData(b.proj), FloatData(b.ln2),
                            FloatData(b.fc_a_w), FloatData(b.fc_a_b), FloatData(b.fc_g_w), FloatData(b.fc_g_b),
                            FloatData(b.fc_out_w), FloatData(b.fc_out_b)});
  }
  return views;
}

kernels::DecodeShape ShapeOf(const ModelConfig& c) {
  return {c.layers, c.width, c.heads, c.d_ff, c.vocab_size, c.context};
}

}  // namespace

torch::Tensor ForwardTrain(const ModelConfig& config, const Weights& weights, const torch::Tensor& tokens) {
  TORCH_CHECK(tokens.dim() == 2 && tokens.size(1) >= 1 && tokens.size(1) <= config.context,
              "ForwardTrain: tokens must be [B, n] with 1 <= n <= T");
  torch::Tensor rope = RopeTable(config).narrow(0, 0, tokens.size(1));  // [n, D/2]
  return Logits(weights, Trunk(config, weights, rope, tokens));         // [B, n, V]
}

Transformer::Transformer(ModelConfig config, Weights weights, std::shared_ptr<kernels::WorkerPool> pool)
    : config_(std::move(config)), weights_(std::move(weights)), decode_step_(ShapeOf(config_), std::move(pool)) {
  c10::InferenceMode guard;
  rope_ = RopeTable(config_);                           // [T, D/2] complex
  rope_pairs_ = at::view_as_real(rope_).contiguous();  // [T, D/2, 2] float
  decode_weights_ = FloatViews(weights_, rope_pairs_);
}

torch::Tensor Transformer::Forward(std::span<const int32_t> tokens, bool last_only) const {
  const int64_t n = static_cast<int64_t>(tokens.size());
  TORCH_CHECK(n >= 1 && n <= config_.context, "Forward: need 1 <= n <= T, got n = ", n);
  c10::InferenceMode guard;
  torch::Tensor h = Trunk(config_, weights_, rope_.narrow(0, 0, n), TokenTensor(tokens).unsqueeze(0))[0];
  if (last_only) return Logits(weights_, h[n - 1]);  // [V]
  return Logits(weights_, h);                        // [n, V]
}

torch::Tensor Transformer::Prefill(std::span<const int32_t> tokens, KvCache& cache, bool all_logits) const {
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t start = cache.length();
  TORCH_CHECK(n >= 1 && start + n <= config_.context, "Prefill: need n >= 1 and length + n <= T, got ",
              start, " + ", n);
  c10::InferenceMode guard;
  cache.Reserve(n);
  torch::Tensor rope = rope_.narrow(0, start, n);          // [n, D/2]
  torch::Tensor mask = CausalMask(n, start + n, start);    // [n, start + n]
  torch::Tensor h = Embed(weights_, TokenTensor(tokens));  // [n, C]
  for (int64_t layer = 0; layer < config_.layers; ++layer) {
    const BlockWeights& block = weights_.blocks[layer];
    h = Block(block, h, [&](const torch::Tensor& x) {
      QueryKeyValue qkv = ProjectQkv(config_, block, x, rope);  // each [H, n, D]
      cache.Write(layer, qkv.k, qkv.v);
      torch::Tensor keys = cache.Keys(layer, start + n);      // [H, start + n, D]
      torch::Tensor values = cache.Values(layer, start + n);  // [H, start + n, D]
      return ProjectHeads(block, Attend(qkv.q, keys, values, mask));
    });
  }
  cache.Advance(n);
  if (all_logits) return Logits(weights_, h);  // [n, V]
  return Logits(weights_, h[n - 1]);           // [V]
}

torch::Tensor Transformer::Decode(std::span<const int32_t> tokens, std::span<KvCache* const> caches,
                                  AttentionTrace* trace) const {
  const int64_t batch = static_cast<int64_t>(tokens.size());
  TORCH_CHECK(batch >= 1 && tokens.size() == caches.size(), "Decode: need B >= 1 tokens, one per cache");
  c10::InferenceMode guard;
  TORCH_CHECK(trace == nullptr || trace->layer < config_.layers, "Decode: trace layer ", trace->layer,
              " >= L = ", config_.layers);
  for (int64_t b = 0; b < batch; ++b) {  // every check before any cache is touched
    TORCH_CHECK(tokens[b] >= 0 && tokens[b] < config_.vocab_size, "Decode: token ", tokens[b], " not in [0, ",
                config_.vocab_size, ")");
    TORCH_CHECK(caches[b]->length() < config_.context, "Decode: cache ", b, " is full (T = ", config_.context, ")");
    for (int64_t other = 0; other < b; ++other) {
      TORCH_CHECK(caches[other] != caches[b], "Decode: cache ", b, " repeated");
    }
  }
  std::vector<kernels::DecodeSequence>& sequences = sequences_;
  sequences.resize(batch);
  if (trace != nullptr) trace->rows.assign(batch, torch::Tensor());
  for (int64_t b = 0; b < batch; ++b) {
    KvCache& cache = *caches[b];
    kernels::DecodeSequence& seq = sequences[b];
    cache.Reserve(1);
    seq.token = tokens[b];
    seq.position = cache.length();
    seq.capacity = cache.capacity();
    seq.keys.resize(config_.layers);
    seq.values.resize(config_.layers);
    for (int64_t layer = 0; layer < config_.layers; ++layer) {
      seq.keys[layer] = cache.KeyStorage(layer);
      seq.values[layer] = cache.ValueStorage(layer);
    }
    seq.trace = nullptr;
    if (trace != nullptr && trace->layer >= 0) {
      trace->rows[b] = at::empty({config_.heads, seq.position + 1}, at::kFloat);  // [H, length]
      seq.trace = trace->rows[b].data_ptr<float>();
    }
  }
  torch::Tensor logits = at::empty({batch, config_.vocab_size}, at::kFloat);  // [B, V]
  decode_step_.Run(decode_weights_, std::span(sequences.data(), sequences.size()),
                   trace != nullptr ? trace->layer : -1, logits.data_ptr<float>());
  for (KvCache* cache : caches) cache->Advance(1);
  return logits;
}

}  // namespace niels::daemon::model
