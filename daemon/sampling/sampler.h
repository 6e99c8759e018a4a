#pragma once
// Sampler: turns one position's logits into a token id (docs/ARCHITECTURE.md "Tokenizer, chat
// template and sampling").
//
// Order per step: logit bias (added to the raw logits) -> banned ids and ids outside the allowed
// mask -> repetition penalty (CTRL: positive logits divided, negative multiplied, over ids in
// `history`) -> temperature (0 = argmax) -> top-k -> top-p -> draw with the sampler's own RNG
// (std::mt19937_64 seeded per request). Same seed and inputs => same ids.
// Every step works on its own copy of one row, so a row's result never depends on other rows.
// The draw is an inverse-CDF draw with a uniform double built from one 64-bit RNG output, so results
// depend on nothing but the seed and the inputs (not on torch's RNG, not on <random>'s distributions).
// Greedy steps (temperature 0) draw nothing from the RNG.
// Not thread-safe; one Sampler per request.

#include <cstdint>
#include <random>
#include <span>
#include <string_view>
#include <vector>

#include "common/defaults.h"
#include "common/status.h"

namespace niels::daemon::sampling {

// One logit bias entry: `bias` is added to the raw logit of `id`.
struct TokenBias {
  int32_t id = 0;
  float bias = 0.0f;
  bool operator==(const TokenBias&) const = default;
};

struct SamplingParams {
  // Defaults: the original CLI's (common/defaults.h).
  float temperature = common::kDefaultTemperature;                // 0 = greedy (argmax); must be >= 0
  int32_t top_k = common::kDefaultTopK;                           // 0 = off
  float top_p = common::kDefaultTopP;                             // 0 = off; else in (0, 1]
  float repetition_penalty = common::kDefaultRepetitionPenalty;  // 1 = off; must be > 0
  uint64_t seed = common::kDefaultSeed;
  std::vector<int32_t> banned_ids;   // never sampled
  // Added to the raw logits before anything else; a bias of -inf bans its id (the Sampler counts
  // it among banned_ids). See ValidateLogitBias for what is valid.
  std::vector<TokenBias> logit_bias;
};

// INVALID_ARGUMENT naming `field` ("sampling.logit_bias") and the entry ("sampling.logit_bias[3]")
// unless: at most vocab_size entries, every id in [0, vocab_size), no id twice, every bias finite
// or -inf. Cost O(n log n) for n entries (nothing of size V).
common::Status ValidateLogitBias(std::span<const TokenBias> bias, int64_t vocab_size, std::string_view field);

// Adds each entry's bias to logits[id], in place: O(entries). A finite bias never makes a finite
// logit infinite (the sum saturates at +-FLT_MAX); -inf makes it -inf. Ids outside the row are
// ignored.
void ApplyLogitBias(std::span<float> logits, std::span<const TokenBias> bias);

// The ids whose bias is -inf, ascending (they are never sampled: banned).
std::vector<int32_t> BannedByBias(std::span<const TokenBias> bias);

// INVALID_ARGUMENT naming the field when a parameter is out of range (vocab_size for ids):
// temperature < 0 or not finite, top_k < 0, top_p outside [0, 1] (or NaN), repetition_penalty <= 0
// or not finite, a banned id outside [0, vocab_size), every id banned (ids with a -inf bias
// counted), or logit_bias invalid (ValidateLogitBias, field "logit_bias").
common::Status ValidateSamplingParams(const SamplingParams& params, int64_t vocab_size);

// CTRL repetition penalty, in place: every distinct id of `history` within [0, logits.size())
// gets logit / penalty when the logit is > 0, logit * penalty otherwise. Each id is penalised once
// however often it occurs. penalty == 1 leaves the logits unchanged. Out-of-range ids are ignored.
void ApplyRepetitionPenalty(std::span<float> logits, std::span<const int32_t> history, float penalty);

// A set of allowed ids as bits (bit id % 64 of word id / 64; set = allowed), e.g. a grammar's token
// mask (daemon/grammar/token_bitset.h) for structured output. Empty = every id is allowed. Ids
// outside it are treated exactly like banned ids (their logits become -inf before anything else).
using AllowedMask = std::span<const uint64_t>;

// One token the draw may pick and its probability.
struct SamplingCandidate {
  int32_t id;
  double prob;
};

// The distribution a temperature > 0 step draws from, after logit bias, banned ids (and ids outside `allowed`),
// repetition penalty, temperature, top-k and top-p: candidates sorted by probability, best first
// (ties: lower id first), probabilities renormalised to sum to 1. Never empty for valid params: when
// no logit is finite it holds the first id that is allowed and not banned (nor biased by -inf) with probability 1 (id 0
// when there is none: callers with a mask check that it allows some unbanned id). With temperature
// 0 it is the argmax alone. REQUIRES: allowed empty or at least ceil(V / 64) words.
std::vector<SamplingCandidate> SamplingDistribution(std::span<const float> logits,
                                                    std::span<const int32_t> history,
                                                    const SamplingParams& params, AllowedMask allowed = {});

// Cost per Sample: O(V + distinct banned ids + logit bias entries + history) (V the logits row),
// plus the sort of the candidates when temperature > 0; the banned list is made distinct (and the
// ids of -inf biases added to it) once, at construction.
class Sampler {
 public:
  // REQUIRES: ValidateSamplingParams(params, V).ok() for the V of the logits given to Sample.
  // params().banned_ids holds the distinct banned ids, ascending, the ids of -inf biases among them.
  explicit Sampler(SamplingParams params);

  // logits: [V] (not modified). history: ids the repetition penalty applies to. allowed: see
  // AllowedMask (empty = all). A mask changes nothing else: same RNG draws, same order of steps.
  int32_t Sample(std::span<const float> logits, std::span<const int32_t> history, AllowedMask allowed = {});
  // The same draw; `drawn_from` (not null) receives the distribution it was drawn from
  // (SamplingDistribution of the same arguments: best first, the drawn id among them).
  int32_t Sample(std::span<const float> logits, std::span<const int32_t> history, AllowedMask allowed,
                 std::vector<SamplingCandidate>* drawn_from);

  const SamplingParams& params() const { return params_; }

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
};

}  // namespace niels::daemon::sampling
