#include "daemon/sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>

#include "daemon/sampling/token_id_set.h"

namespace niels::daemon::sampling {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// A logit that can still be chosen: not banned (banned ones are -inf) and not NaN.
bool Selectable(float x) { return !std::isnan(x) && x != kNegInf; }

bool InMask(AllowedMask allowed, int32_t id) { return allowed.empty() || ((allowed[id >> 6] >> (id & 63)) & 1); }

// Copy of the logits with the logit bias added, banned ids and ids outside `allowed` set to -inf
// and the repetition penalty applied (the penalty acts on the biased logits).
std::vector<float> PenalisedLogits(std::span<const float> logits, std::span<const int32_t> history,
                                   const SamplingParams& params, AllowedMask allowed) {
  std::vector<float> out(logits.begin(), logits.end());
  ApplyLogitBias(out, params.logit_bias);
  ApplyRepetitionPenalty(out, history, params.repetition_penalty);
  const int64_t vocab = static_cast<int64_t>(out.size());
  for (int32_t id : params.banned_ids) {
    if (id >= 0 && id < vocab) out[id] = kNegInf;
  }
  if (!allowed.empty()) {
    for (int64_t word = 0; word * 64 < vocab; ++word) {
      const uint64_t bits = allowed[word];
      if (bits == ~uint64_t{0}) continue;
      const int64_t end = std::min<int64_t>(vocab, word * 64 + 64);
      if (bits == 0) {
        std::fill(out.begin() + word * 64, out.begin() + end, kNegInf);
        continue;
      }
      for (int64_t id = word * 64; id < end; ++id) {
        if (!((bits >> (id & 63)) & 1)) out[id] = kNegInf;
      }
    }
  }
  return out;
}

// The first id that is allowed, not in banned_ids and not biased by -inf (the fallback when no
// logit is selectable): one pass over those lists and one over the ids, O(V + banned + bias).
int32_t FirstAllowedId(const SamplingParams& params, int64_t vocab, AllowedMask allowed) {
  std::vector<bool> banned(static_cast<size_t>(std::max<int64_t>(vocab, 0)), false);
  for (int32_t id : params.banned_ids) {
    if (id >= 0 && id < vocab) banned[id] = true;
  }
  for (const TokenBias& entry : params.logit_bias) {
    if (entry.bias == kNegInf && entry.id >= 0 && entry.id < vocab) banned[entry.id] = true;
  }
  for (int32_t id = 0; id < vocab; ++id) {
    if (InMask(allowed, id) && !banned[id]) return id;
  }
  return 0;
}

// Argmax over selectable logits; ties go to the lower id.
int32_t Argmax(const std::vector<float>& logits, const SamplingParams& params, AllowedMask allowed) {
  int32_t best = -1;
  for (int32_t id = 0; id < static_cast<int32_t>(logits.size()); ++id) {
    if (Selectable(logits[id]) && (best < 0 || logits[id] > logits[best])) best = id;
  }
  return best >= 0 ? best : FirstAllowedId(params, static_cast<int64_t>(logits.size()), allowed);
}

// Keeps the smallest prefix of `sorted` (best first, sums to 1) whose cumulative probability
// reaches top_p, at least one candidate, and renormalises it.
void ApplyTopP(std::vector<SamplingCandidate>& sorted, double top_p) {
  double cumulative = 0.0;
  size_t keep = sorted.size();
  for (size_t i = 0; i < sorted.size(); ++i) {
    cumulative += sorted[i].prob;
    if (cumulative >= top_p) {
      keep = i + 1;
      break;
    }
  }
  sorted.resize(keep);
  double total = 0.0;
  for (const auto& c : sorted) total += c.prob;
  for (auto& c : sorted) c.prob /= total;
}

// A uniform double in [0, 1) from the top 53 bits of one RNG output.
double UniformDouble(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

}  // namespace

common::Status ValidateSamplingParams(const SamplingParams& params, int64_t vocab_size) {
  using common::Status;
  if (!std::isfinite(params.temperature) || params.temperature < 0.0f) {
    return Status::InvalidArgument("temperature must be finite and >= 0, got " +
                                   std::to_string(params.temperature));
  }
  if (params.top_k < 0) {
    return Status::InvalidArgument("top_k must be >= 0 (0 = off), got " + std::to_string(params.top_k));
  }
  if (!(params.top_p >= 0.0f && params.top_p <= 1.0f)) {
    return Status::InvalidArgument("top_p must be in [0, 1] (0 = off), got " + std::to_string(params.top_p));
  }
  if (!std::isfinite(params.repetition_penalty) || params.repetition_penalty <= 0.0f) {
    return Status::InvalidArgument("repetition_penalty must be finite and > 0 (1 = off), got " +
                                   std::to_string(params.repetition_penalty));
  }
  if (common::Status bias = ValidateLogitBias(params.logit_bias, vocab_size, "logit_bias"); !bias.ok()) return bias;
  std::vector<bool> banned(static_cast<size_t>(std::max<int64_t>(vocab_size, 0)), false);
  int64_t distinct = 0;
  for (const TokenBias& entry : params.logit_bias) {
    if (entry.bias == kNegInf && !banned[entry.id]) {
      banned[entry.id] = true;
      ++distinct;
    }
  }
  for (int32_t id : params.banned_ids) {
    if (id < 0 || id >= vocab_size) {
      return Status::InvalidArgument("banned_ids: id " + std::to_string(id) + " outside [0, " +
                                     std::to_string(vocab_size) + ")");
    }
    if (!banned[id]) {
      banned[id] = true;
      ++distinct;
    }
  }
  if (distinct >= vocab_size) {
    return Status::InvalidArgument("banned_ids: every one of the " + std::to_string(vocab_size) +
                                   " ids is banned (by banned_ids and -inf logit biases)");
  }
  return Status::Ok();
}

common::Status ValidateLogitBias(std::span<const TokenBias> bias, int64_t vocab_size, std::string_view field) {
  using common::Status;
  if (static_cast<int64_t>(bias.size()) > vocab_size) {
    return Status::InvalidArgument(std::string(field) + ": " + std::to_string(bias.size()) +
                                   " entries (the limit is the vocabulary size, " + std::to_string(vocab_size) + ")");
  }
  auto entry_name = [&](size_t i) { return std::string(field) + "[" + std::to_string(i) + "]"; };
  for (size_t i = 0; i < bias.size(); ++i) {
    if (bias[i].id < 0 || bias[i].id >= vocab_size) {
      return Status::InvalidArgument(entry_name(i) + ": id " + std::to_string(bias[i].id) +
                                     " is outside the vocabulary [0, " + std::to_string(vocab_size) + ")");
    }
    if (!std::isfinite(bias[i].bias) && bias[i].bias != kNegInf) {
      return Status::InvalidArgument(entry_name(i) + ": the bias must be finite or -inf, got " +
                                     std::to_string(bias[i].bias));
    }
  }
  // Repeats: the entries' indices sorted by id (stable, so the later one of a pair is named).
  std::vector<uint32_t> order(bias.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<uint32_t>(i);
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return bias[a].id < bias[b].id; });
  size_t first_repeat = bias.size();
  size_t repeated = 0;
  for (size_t k = 1; k < order.size(); ++k) {
    if (bias[order[k]].id == bias[order[k - 1]].id && order[k] < first_repeat) {
      first_repeat = order[k];
      repeated = order[k - 1];
    }
  }
  if (first_repeat < bias.size()) {
    return Status::InvalidArgument(entry_name(first_repeat) + ": id " + std::to_string(bias[first_repeat].id) +
                                   " already has a bias (" + entry_name(repeated) + ")");
  }
  return Status::Ok();
}

void ApplyLogitBias(std::span<float> logits, std::span<const TokenBias> bias) {
  constexpr float kMax = std::numeric_limits<float>::max();
  for (const TokenBias& entry : bias) {
    if (entry.id < 0 || static_cast<size_t>(entry.id) >= logits.size()) continue;
    float& x = logits[entry.id];
    if (entry.bias == kNegInf) {
      x = kNegInf;
      continue;
    }
    const float sum = x + entry.bias;
    // A finite logit stays finite; an infinite or NaN one stays what it is.
    x = std::isfinite(x) && !std::isfinite(sum) ? (sum > 0 ? kMax : -kMax) : sum;
  }
}

std::vector<int32_t> BannedByBias(std::span<const TokenBias> bias) {
  std::vector<int32_t> ids;
  for (const TokenBias& entry : bias) {
    if (entry.bias == kNegInf) ids.push_back(entry.id);
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

void ApplyRepetitionPenalty(std::span<float> logits, std::span<const int32_t> history, float penalty) {
  if (penalty == 1.0f || history.empty()) return;
  std::vector<bool> seen(logits.size(), false);
  for (int32_t id : history) {
    if (id < 0 || static_cast<size_t>(id) >= logits.size() || seen[id]) continue;
    seen[id] = true;
    float& x = logits[id];
    x = x > 0.0f ? x / penalty : x * penalty;
  }
}

std::vector<SamplingCandidate> SamplingDistribution(std::span<const float> logits,
                                                    std::span<const int32_t> history,
                                                    const SamplingParams& params, AllowedMask allowed) {
  const std::vector<float> penalised = PenalisedLogits(logits, history, params, allowed);
  if (params.temperature == 0.0f) return {{Argmax(penalised, params, allowed), 1.0}};

  // Temperature: scaled logits in double (a tiny temperature cannot overflow them).
  std::vector<SamplingCandidate> cands;  // .prob holds the scaled logit until the softmax
  cands.reserve(penalised.size());
  for (int32_t id = 0; id < static_cast<int32_t>(penalised.size()); ++id) {
    if (!Selectable(penalised[id])) continue;
    const double x = std::min<double>(penalised[id], std::numeric_limits<float>::max());
    cands.push_back({id, x / params.temperature});
  }
  if (cands.empty()) return {{FirstAllowedId(params, static_cast<int64_t>(logits.size()), allowed), 1.0}};

  auto better = [](const SamplingCandidate& a, const SamplingCandidate& b) {
    return a.prob > b.prob || (a.prob == b.prob && a.id < b.id);
  };
  // Top-k: the k best scaled logits (the same k as the k most probable tokens).
  if (params.top_k > 0 && static_cast<size_t>(params.top_k) < cands.size()) {
    std::nth_element(cands.begin(), cands.begin() + params.top_k - 1, cands.end(), better);
    cands.resize(params.top_k);
  }
  std::sort(cands.begin(), cands.end(), better);

  // Softmax over the kept candidates (renormalised after top-k).
  const double max_logit = cands.front().prob;
  double total = 0.0;
  for (auto& c : cands) {
    c.prob = std::exp(c.prob - max_logit);
    total += c.prob;
  }
  for (auto& c : cands) c.prob /= total;

  if (params.top_p > 0.0f && params.top_p < 1.0f) ApplyTopP(cands, params.top_p);
  return cands;
}

Sampler::Sampler(SamplingParams params) : params_(std::move(params)), rng_(params_.seed) {
  // Each step sets the banned logits to -inf: once per distinct id, however often the list repeats it.
  const std::vector<int32_t> by_bias = BannedByBias(params_.logit_bias);
  params_.banned_ids.insert(params_.banned_ids.end(), by_bias.begin(), by_bias.end());
  const TokenIdSet banned(params_.banned_ids);
  params_.banned_ids.assign(banned.ids().begin(), banned.ids().end());
}

int32_t Sampler::Sample(std::span<const float> logits, std::span<const int32_t> history, AllowedMask allowed) {
  std::vector<SamplingCandidate> dist;
  return Sample(logits, history, allowed, &dist);
}

int32_t Sampler::Sample(std::span<const float> logits, std::span<const int32_t> history, AllowedMask allowed,
                        std::vector<SamplingCandidate>* drawn_from) {
  std::vector<SamplingCandidate>& dist = *drawn_from;
  dist = SamplingDistribution(logits, history, params_, allowed);
  if (params_.temperature == 0.0f) return dist.front().id;  // greedy: no RNG draw
  // Inverse CDF: the first candidate whose cumulative probability exceeds u.
  const double u = UniformDouble(rng_);
  double cumulative = 0.0;
  for (const auto& c : dist) {
    cumulative += c.prob;
    if (u < cumulative) return c.id;
  }
  return dist.back().id;  // u beyond a sum rounded below 1
}

}  // namespace niels::daemon::sampling
