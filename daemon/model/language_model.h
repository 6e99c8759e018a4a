#pragma once
// LanguageModel: what the generation loop needs from a model. Transformer is the real one; tests
// may script a model with forced outputs (e.g. to test stop rules) by implementing this interface.
// An implementation must append exactly the processed positions to the caches it is given
// (KvCache::PrepareWrite, then Commit). Logits are returned as plain float rows (row-major); no
// libtorch.

#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "daemon/model/config.h"
#include "daemon/model/hook_sites.h"
#include "daemon/model/kv_cache.h"

namespace niels::daemon::model {

// Optional per-step output of one layer's attention probabilities.
struct AttentionTrace {
  int64_t layer = -1;                   // which layer to record; -1 = none
  std::vector<std::vector<float>> rows;  // filled by Decode: per sequence [H, length] (after softmax)
};

// Thrown when a cache cannot get the KV blocks a forward pass needs (the pool is full of blocks in
// use). Nothing was written; the caches hold what they held before.
class KvExhausted : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// One sequence's part of a Step: its new tokens, and which logits it wants.
struct SequenceInput {
  KvCache* cache;                   // the tokens go to positions cache->length() ...
  std::span<const int32_t> tokens;  // at least one
  bool want_logits = true;          // the logits of the last token
  bool all_logits = false;          // the logits of every token (implies want_logits)
  std::vector<float>* trace = nullptr;  // if set (and trace_layer >= 0): [H, length] of the last token
  // If set: every token's activations at the hook sites it selects (hook_sites.h), during the step.
  // Observing changes no result. A model without hook sites (a test's scripted one) ignores it.
  ActivationObserver* observer = nullptr;
};

class LanguageModel {
 public:
  virtual ~LanguageModel() = default;

  virtual const ModelConfig& config() const = 0;

  // Processes `tokens` at positions cache.length() .. cache.length()+n-1 in one forward pass,
  // appending their keys/values to `cache`. Returns logits at the last position [V], or at every
  // position [n, V] when `all_logits` (the vocab projection is skipped elsewhere otherwise).
  // REQUIRES: n >= 1, cache.length() + n <= T, every id in [0, V); violations throw
  // std::invalid_argument before anything is touched. Throws KvExhausted.
  virtual std::vector<float> Prefill(std::span<const int32_t> tokens, KvCache& cache,
                                     bool all_logits = false) const = 0;

  // One decode step for B sequences: token b goes to position caches[b]->length() (lengths may
  // differ) and is appended to that cache. Returns logits [B, V].
  // REQUIRES: B >= 1, tokens.size() == caches.size(), distinct caches, each length < T, ids in
  // [0, V); violations throw std::invalid_argument before any cache is touched.
  virtual std::vector<float> Decode(std::span<const int32_t> tokens, std::span<KvCache* const> caches,
                                    AttentionTrace* trace = nullptr) const = 0;

  // Uncached full forward over `tokens` at positions 0..n-1: logits [n, V] (last_only: [V]).
  // REQUIRES: 1 <= n <= T, ids in [0, V) (else std::invalid_argument).
  virtual std::vector<float> Forward(std::span<const int32_t> tokens, bool last_only = false) const = 0;

  // A cache for computing an uncached forward in pieces (Prefill or Step inputs into it, from
  // position 0, then Clear): its logits at the end equal Forward's over the same tokens. The
  // Transformer's come from one pool of T positions kept for them (beside Forward's own), so AT MOST
  // ONE of them may hold positions at a time (a second one's write throws KvExhausted). The default
  // gives a cache with a small pool of its own.
  virtual KvCache NewForwardCache() const { return KvCache(config()); }

  // One forward pass over the new tokens of several sequences at once (prefill chunks and decode
  // tokens together). Returns the logits rows the inputs asked for, input after input [n, V].
  // Same REQUIREs as Prefill for each input; distinct caches. The default runs Prefill per input.
  virtual std::vector<float> Step(std::span<const SequenceInput> inputs, int64_t trace_layer = -1) const;

  // Frees the working memory kept from step to step (activation buffers sized for the largest step
  // so far); the next step allocates it again. For when the model has gone idle. Same threading as
  // the steps. The default keeps none.
  virtual void ReleaseScratch() const {}
};

}  // namespace niels::daemon::model
