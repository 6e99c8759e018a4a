#include "daemon/model/transformer.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <utility>

namespace niels::daemon::model {
namespace {

[[noreturn]] void Fail(const std::string& message) { throw std::invalid_argument(message); }

}  // namespace

void FillRopeTable(const ModelConfig& config, std::span<const float> freq_factors, int64_t first, int64_t last,
                   float* table) {
  const int64_t half = config.head_dim() / 2;
  for (int64_t i = 0; i < half; ++i) {
    double inv_freq = std::pow(config.rope_theta, static_cast<double>(i) * (-2.0 / config.head_dim()));
    if (!freq_factors.empty()) inv_freq /= static_cast<double>(freq_factors[i]);
    for (int64_t p = first; p < last; ++p) {
      const double angle = static_cast<double>(p) * inv_freq;
      table[(p * half + i) * 2] = static_cast<float>(std::cos(angle));
      table[(p * half + i) * 2 + 1] = static_cast<float>(std::sin(angle));
    }
  }
}

Transformer::Transformer(ModelConfig config, Weights weights, std::shared_ptr<kernels::WorkerPool> pool,
                         kernels::Dtype kv_dtype)
    : config_(std::move(config)),
      weights_(std::move(weights)),
      // Not value-initialized: FillRopeTo writes each row before a step reads it.
      rope_(new float[static_cast<size_t>(config_.context * config_.head_dim())]),
      step_(config_, KvPool::kBlockTokens, std::move(pool)),
      scratch_pool_(std::make_shared<KvPool>(config_, KvPool::BytesForOneSequence(config_, kv_dtype), kv_dtype)) {}

void Transformer::FillRopeTo(int64_t end) const {
  if (end <= rope_filled_) return;
  end = std::min(config_.context, (end + kRopeRows - 1) / kRopeRows * kRopeRows);
  const std::span<const float> factors = weights_.rope_freqs.defined()
                                             ? std::span<const float>(weights_.rope_freqs.f32(), config_.head_dim() / 2)
                                             : std::span<const float>();
  FillRopeTable(config_, factors, rope_filled_, end, rope_.get());
  rope_filled_ = end;
}

std::vector<float> Transformer::Step(std::span<const SequenceInput> inputs, int64_t trace_layer) const {
  if (inputs.empty()) Fail("Step: no input");
  if (trace_layer >= config_.layers) {
    Fail("Step: trace layer " + std::to_string(trace_layer) + " >= L = " + std::to_string(config_.layers));
  }
  int64_t logits_rows = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {  // every check before any cache is touched
    const SequenceInput& input = inputs[i];
    const int64_t n = static_cast<int64_t>(input.tokens.size());
    if (n < 1 || input.cache->length() + n > config_.context) {
      Fail("Step: need n >= 1 and length + n <= T, got " + std::to_string(input.cache->length()) + " + " +
           std::to_string(n));
    }
    for (int32_t token : input.tokens) {
      if (token < 0 || token >= config_.vocab_size) {
        Fail("Step: token " + std::to_string(token) + " not in [0, " + std::to_string(config_.vocab_size) + ")");
      }
    }
    for (size_t other = 0; other < i; ++other) {
      if (inputs[other].cache == input.cache) Fail("Step: cache " + std::to_string(i) + " repeated");
    }
    if (input.observer != nullptr && !input.observer->sites().empty() &&
        input.observer->sites().layers() != config_.layers) {
      Fail("Step: an observer of " + std::to_string(input.observer->sites().layers()) + " layers for L = " +
           std::to_string(config_.layers));
    }
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
    std::vector<void*>& pointers = block_pointers_[i];
    pointers.clear();
    for (BlockId id : input.cache->block_ids()) pointers.push_back(input.cache->pool().data(id));
    float* trace = nullptr;
    if (trace_layer >= 0 && input.trace != nullptr) {
      input.trace->assign(static_cast<size_t>(config_.heads * (input.cache->length() + n)), 0.0f);  // [H, length]
      trace = input.trace->data();
    }
    sequences_[i] = {input.tokens.data(), n, input.cache->length(), pointers.data(), input.cache->pool().dtype(),
                     input.all_logits ? 0 : (input.want_logits ? n - 1 : n), trace, input.observer};
  }
  std::vector<float> logits(static_cast<size_t>(logits_rows * config_.vocab_size));  // [n, V]
  int64_t rope_end = 0;
  for (const SequenceInput& input : inputs) {
    rope_end = std::max(rope_end, input.cache->length() + static_cast<int64_t>(input.tokens.size()));
  }
  FillRopeTo(rope_end);
  step_.Run(weights_, rope_.get(), sequences_, trace_layer, logits.data());
  for (const SequenceInput& input : inputs) input.cache->Commit(input.tokens);
  return logits;
}

std::vector<float> Transformer::Prefill(std::span<const int32_t> tokens, KvCache& cache, bool all_logits) const {
  const SequenceInput input{&cache, tokens, /*want_logits=*/true, all_logits};
  return Step(std::span(&input, 1));  // [n, V] or [V]
}

std::vector<float> Transformer::Decode(std::span<const int32_t> tokens, std::span<KvCache* const> caches,
                                       AttentionTrace* trace) const {
  if (tokens.empty() || tokens.size() != caches.size()) Fail("Decode: need B >= 1 tokens, one per cache");
  const int64_t layer = trace != nullptr ? trace->layer : -1;
  std::vector<SequenceInput> inputs;
  if (trace != nullptr) trace->rows.assign(tokens.size(), {});
  for (size_t b = 0; b < tokens.size(); ++b) {
    inputs.push_back({caches[b], tokens.subspan(b, 1), true, false, trace != nullptr ? &trace->rows[b] : nullptr});
  }
  return Step(inputs, layer);  // [B, V]
}

std::vector<float> Transformer::Forward(std::span<const int32_t> tokens, bool last_only) const {
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n < 1 || n > config_.context) Fail("Forward: need 1 <= n <= T, got n = " + std::to_string(n));
  KvCache scratch(scratch_pool_);
  return Prefill(tokens, scratch, /*all_logits=*/!last_only);  // the scratch blocks go back on return
}

KvCache Transformer::NewForwardCache() const {
  if (!window_pool_) {
    window_pool_ = std::make_shared<KvPool>(config_, KvPool::BytesForOneSequence(config_, kv_dtype()), kv_dtype());
  }
  return KvCache(window_pool_);
}

}  // namespace niels::daemon::model
