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

}  // namespace

torch::Tensor ForwardTrain(const ModelConfig& config, const Weights& weights, const torch::Tensor& tokens) {
  TORCH_CHECK(tokens.dim() == 2 && tokens.size(1) >= 1 && tokens.size(1) <= config.context,
              "ForwardTrain: tokens must be [B, n] with 1 <= n <= T");
  torch::Tensor rope = RopeTable(config).narrow(0, 0, tokens.size(1));  // [n, D/2]
  return Logits(weights, Trunk(config, weights, rope, tokens));         // [B, n, V]
}

Transformer::Transformer(ModelConfig config, Weights weights)
    : config_(std::move(config)), weights_(std::move(weights)) {
  c10::InferenceMode guard;
  rope_ = RopeTable(config_);  // [T, D/2] complex
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
  std::vector<int64_t> positions(batch);
  for (int64_t b = 0; b < batch; ++b) {
    positions[b] = caches[b]->length();
    TORCH_CHECK(positions[b] < config_.context, "Decode: cache ", b, " is full (T = ", config_.context, ")");
    caches[b]->Reserve(1);
  }
  torch::Tensor rope = rope_.index_select(0, at::tensor(positions, at::kLong)).unsqueeze(1);  // [B, 1, D/2]
  if (trace != nullptr) trace->rows.assign(batch, torch::Tensor());

  torch::Tensor h = Embed(weights_, TokenTensor(tokens).unsqueeze(1));  // [B, 1, C]
  std::vector<torch::Tensor> heads(batch);
  for (int64_t layer = 0; layer < config_.layers; ++layer) {
    const BlockWeights& block = weights_.blocks[layer];
    const bool traced = trace != nullptr && trace->layer == layer;
    h = Block(block, h, [&](const torch::Tensor& x) {
      QueryKeyValue qkv = ProjectQkv(config_, block, x, rope);  // each [B, H, 1, D]
      // Each sequence attends over its own cache; the newest position needs no mask.
      for (int64_t b = 0; b < batch; ++b) {
        KvCache& cache = *caches[b];
        const int64_t length = positions[b] + 1;
        cache.Write(layer, qkv.k[b], qkv.v[b]);
        torch::Tensor probs;  // [H, 1, length]
        heads[b] = Attend(qkv.q[b], cache.Keys(layer, length), cache.Values(layer, length), torch::Tensor(),
                          traced ? &probs : nullptr);  // [H, 1, D]
        if (traced) trace->rows[b] = probs.squeeze(1);  // [H, length]
      }
      torch::Tensor all_heads = batch == 1 ? heads[0].unsqueeze(0) : at::stack(heads);  // [B, H, 1, D]
      return ProjectHeads(block, all_heads);                                            // [B, 1, C]
    });
  }
  for (KvCache* cache : caches) cache->Advance(1);
  return Logits(weights_, h.squeeze(1));  // [B, V]
}

}  // namespace niels::daemon::model
