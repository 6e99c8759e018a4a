#pragma once
// Generate: the generation loop of one sequence (DESIGN.md section 4), composing Transformer,
// Sampler and a stop rule. It knows nothing about text, sessions or sockets.
//
// Cache semantics (the seeds' generate() with the sequence as the cache): `input` is appended to
// the sequence and processed first, then up to max_new_tokens ids are sampled and appended.
// The sequence's cache always covers a prefix of its tokens; the last sampled id is not cached
// until the next call feeds it. No id is ever fed twice.
// Runs on the engine thread; blocking; checks `cancel` between steps.

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include <torch/types.h>

#include "daemon/model/kv_cache.h"
#include "daemon/model/sampler.h"
#include "daemon/model/language_model.h"

namespace niels::daemon::engine {

// A token sequence plus the KV cache of a prefix of it.
struct Sequence {
  std::vector<int32_t> tokens;
  model::KvCache cache;
  explicit Sequence(const model::ModelConfig& config) : cache(config) {}
};

enum class StopReason { kStopToken, kMaxTokens, kContextFull, kCancelled };

struct TokenAlternative {
  int32_t id;
  float logprob;
};

// One sampled id, handed to the on_token callback as soon as it is sampled.
struct StepEvent {
  int32_t id = 0;
  int32_t index = 0;                        // 0-based among this call's new ids
  std::optional<float> logprob;             // when want_logprobs
  std::vector<TokenAlternative> top;        // top_logprobs best ids of the model's own distribution
                                            // (log_softmax of the raw logits), best first
  std::optional<torch::Tensor> attention;   // [H, length] when trace_layer >= 0 (cached path)
};

struct GenerateOptions {
  model::SamplingParams sampling;
  int32_t max_new_tokens = 256;             // 0 = only process input
  // The sequence never grows past T: at length T generation stops with kContextFull.
  bool use_kv_cache = true;                 // false: full forward over the last T tokens per step
  std::vector<int32_t> stop_ids;            // stop (inclusive: the stop id is appended) on any of these
  bool want_logprobs = false;
  int32_t top_logprobs = 0;                 // n best alternatives per step
  int64_t trace_layer = -1;                 // record this layer's attention row per step
  const std::atomic<bool>* cancel = nullptr;  // checked before every forward
  std::function<void(const StepEvent&)> on_token;  // may be empty
};

struct GenerateResult {
  std::vector<int32_t> new_tokens;  // sampled ids (a stop id included when it ended the call)
  StopReason stop_reason = StopReason::kMaxTokens;
  int64_t prompt_tokens = 0;        // sequence length before sampling (after appending input)
  int64_t reused_tokens = 0;        // ids already in the cache at the start
  int64_t prefilled_tokens = 0;     // ids processed by the prefill of this call
  double time_to_first_token_s = 0; // from call start to the first sampled id
  double decode_tokens_per_s = 0;   // sampled ids after the first / time after the first
};

// REQUIRES: every id in input in [0, V). Fails only on invariant violations (exceptions).
// On kCancelled the sequence keeps what was processed; callers that need atomic turns snapshot first.
GenerateResult Generate(const model::LanguageModel& model, Sequence& sequence,
                        std::span<const int32_t> input, const GenerateOptions& options);

}  // namespace niels::daemon::engine
