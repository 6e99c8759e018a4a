#include "daemon/model/transformer.h"

#include <cmath>
#include <stdexcept>
#include <string>
#include <utility>

namespace niels::daemon::model {
namespace {

kernels::WeightViews ViewsOf(const Weights& w, const std::vector<float>& rope) {
  kernels::WeightViews views{w.tok_emb.matrix(), {}, w.ln_f.f32(), rope.data()};
  for (const BlockWeights& b : w.blocks) {
    views.blocks.push_back({b.ln1.f32(), b.qkv.matrix(), b.proj.matrix(), b.ln2.f32(), b.fc_a_w.matrix(),
                            b.fc_a_b.f32(), b.fc_g_w.matrix(), b.fc_g_b.f32(), b.fc_out_w.matrix(),
                            b.fc_out_b.f32()});
  }
  return views;
}

kernels::ModelShape ShapeOf(const ModelConfig& c) {
  return {c.layers, c.width, c.heads, c.d_ff, c.vocab_size, c.context};
}

[[noreturn]] void Fail(const std::string& message) { throw std::invalid_argument(message); }

}  // namespace

std::vector<float> RopeTable(const ModelConfig& config) {
  const int64_t half = config.head_dim() / 2;
  std::vector<float> table(static_cast<size_t>(config.context * half * 2));
  for (int64_t i = 0; i < half; ++i) {
    const double inv_freq = std::pow(config.rope_theta, static_cast<double>(i) * (-2.0 / config.head_dim()));
    for (int64_t p = 0; p < config.context; ++p) {
      const double angle = static_cast<double>(p) * inv_freq;
      table[(p * half + i) * 2] = static_cast<float>(std::cos(angle));
      table[(p * half + i) * 2 + 1] = static_cast<float>(std::sin(angle));
    }
  }
  return table;
}

Transformer::Transformer(ModelConfig config, Weights weights, std::shared_ptr<kernels::WorkerPool> pool)
    : config_(std::move(config)),
      weights_(std::move(weights)),
      rope_(RopeTable(config_)),
      views_(ViewsOf(weights_, rope_)),
      decode_step_(ShapeOf(config_), pool),
      prefill_step_(ShapeOf(config_), decode_step_.shared_pool()) {}

void Transformer::CheckTokens(std::span<const int32_t> tokens, const char* what) const {
  for (int32_t token : tokens) {
    if (token < 0 || token >= config_.vocab_size) {
      Fail(std::string(what) + ": token " + std::to_string(token) + " not in [0, " +
           std::to_string(config_.vocab_size) + ")");
    }
  }
}

std::vector<float> Transformer::Forward(std::span<const int32_t> tokens, bool last_only) const {
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n < 1 || n > config_.context) Fail("Forward: need 1 <= n <= T, got n = " + std::to_string(n));
  CheckTokens(tokens, "Forward");
  KvCache cache(config_);  // the uncached path: a fresh cache, dropped afterwards
  return Prefill(tokens, cache, /*all_logits=*/!last_only);
}

std::vector<float> Transformer::Prefill(std::span<const int32_t> tokens, KvCache& cache, bool all_logits) const {
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t start = cache.length();
  if (n < 1 || start + n > config_.context) {
    Fail("Prefill: need n >= 1 and length + n <= T, got " + std::to_string(start) + " + " + std::to_string(n));
  }
  CheckTokens(tokens, "Prefill");
  cache.Reserve(n);
  std::vector<float> logits(static_cast<size_t>((all_logits ? n : 1) * config_.vocab_size));
  prefill_step_.Run(views_, tokens, cache.View(), start, all_logits, logits.data());
  cache.Advance(n);
  return logits;
}

std::vector<float> Transformer::Decode(std::span<const int32_t> tokens, std::span<KvCache* const> caches,
                                       AttentionTrace* trace) const {
  const int64_t batch = static_cast<int64_t>(tokens.size());
  if (batch < 1 || tokens.size() != caches.size()) Fail("Decode: need B >= 1 tokens, one per cache");
  if (trace != nullptr && trace->layer >= config_.layers) {
    Fail("Decode: trace layer " + std::to_string(trace->layer) + " >= L = " + std::to_string(config_.layers));
  }
  CheckTokens(tokens, "Decode");
  for (int64_t b = 0; b < batch; ++b) {  // every check before any cache is touched
    if (caches[b]->length() >= config_.context) {
      Fail("Decode: cache " + std::to_string(b) + " is full (T = " + std::to_string(config_.context) + ")");
    }
    for (int64_t other = 0; other < b; ++other) {
      if (caches[other] == caches[b]) Fail("Decode: cache " + std::to_string(b) + " repeated");
    }
  }
  std::vector<kernels::DecodeSequence>& sequences = sequences_;
  sequences.resize(batch);
  if (trace != nullptr) trace->rows.assign(batch, {});
  for (int64_t b = 0; b < batch; ++b) {
    KvCache& cache = *caches[b];
    kernels::DecodeSequence& seq = sequences[b];
    cache.Reserve(1);
    seq.token = tokens[b];
    seq.position = cache.length();
    seq.cache = cache.View();
    seq.trace = nullptr;
    if (trace != nullptr && trace->layer >= 0) {
      trace->rows[b].resize(static_cast<size_t>(config_.heads * (seq.position + 1)));  // [H, length]
      seq.trace = trace->rows[b].data();
    }
  }
  std::vector<float> logits(static_cast<size_t>(batch * config_.vocab_size));  // [B, V]
  decode_step_.Run(views_, std::span(sequences.data(), sequences.size()), trace != nullptr ? trace->layer : -1,
                   logits.data());
  for (KvCache* cache : caches) cache->Advance(1);
  return logits;
}

}  // namespace niels::daemon::model
