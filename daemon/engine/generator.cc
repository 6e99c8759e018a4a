#include "daemon/engine/generator.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <utility>

#include <fmt/format.h>

namespace niels::daemon::engine {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// Fills event.logprob / event.top from log_softmax of the logits given (the raw row, or with a
// logit bias the biased row).
void AddLogprobs(std::span<const float> logits, int32_t top_n, bool want_logprob, StepEvent& event) {
  const float max_logit = *std::max_element(logits.begin(), logits.end());
  double sum = 0.0;
  for (float x : logits) sum += std::exp(static_cast<double>(x) - max_logit);
  const double log_norm = max_logit + std::log(sum);
  auto logprob = [&](int32_t id) { return static_cast<float>(logits[id] - log_norm); };
  if (want_logprob) event.logprob = logprob(event.id);
  const int32_t n = std::min<int32_t>(top_n, static_cast<int32_t>(logits.size()));
  if (n <= 0) return;
  std::vector<int32_t> ids(logits.size());
  for (int32_t i = 0; i < static_cast<int32_t>(ids.size()); ++i) ids[i] = i;
  std::partial_sort(ids.begin(), ids.begin() + n, ids.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  for (int32_t i = 0; i < n; ++i) event.top.push_back({ids[i], logprob(ids[i])});
}

// The traced row of the single sequence of a Decode call (empty when the model recorded none).
std::vector<float> TraceRow(model::AttentionTrace& trace) {
  if (trace.rows.empty()) return {};
  return std::move(trace.rows[0]);
}

// Throws (before anything changes) when a REQUIRES of Generate does not hold. `banned`: the
// options' banned ids as a set.
void CheckRequires(const model::ModelConfig& config, const Sequence& sequence, std::span<const int32_t> input,
                   const GenerateOptions& options, const sampling::TokenIdSet& banned) {
  for (int32_t id : input) {
    if (id < 0 || id >= config.vocab_size) {
      throw std::out_of_range("Generate: input id " + std::to_string(id) + " outside [0, " +
                              std::to_string(config.vocab_size) + ")");
    }
  }
  const int64_t length = static_cast<int64_t>(sequence.tokens.size() + input.size());
  if (length > config.context) {
    throw std::invalid_argument("Generate: sequence of " + std::to_string(length) +
                                " tokens exceeds the context " + std::to_string(config.context));
  }
  if (options.max_new_tokens < 0) throw std::invalid_argument("Generate: max_new_tokens < 0");
  if (options.max_new_tokens > 0 && length == 0) {
    throw std::invalid_argument("Generate: nothing to condition on (empty sequence and input)");
  }
  if (sequence.cache.length() > static_cast<int64_t>(sequence.tokens.size())) {
    throw std::invalid_argument("Generate: cache covers more positions than the sequence has tokens");
  }
  if (options.observer != nullptr && (!options.use_kv_cache || options.trace_layer >= 0)) {
    throw std::invalid_argument("Generate: an activation observer needs the cached path without a trace");
  }
  const common::Status valid = sampling::ValidateSamplingParams(options.sampling, config.vocab_size);
  if (!valid.ok()) throw std::invalid_argument("Generate: " + valid.ToString());
  if (options.constraint.grammar != nullptr) {
    if (options.constraint.vocabulary == nullptr) throw std::invalid_argument("Generate: a constraint without a vocabulary");
    if (options.constraint.vocabulary->after->size() != config.vocab_size ||
        options.constraint.vocabulary->at_start->size() != config.vocab_size) {
      throw std::invalid_argument("Generate: the constraint's vocabulary does not cover the model's output rows");
    }
    if (options.stop_ids.empty()) throw std::invalid_argument("Generate: a constraint needs a stop id");
    if (options.text_stop != nullptr) throw std::invalid_argument("Generate: stop strings with a constraint");
    if (std::all_of(options.stop_ids.begin(), options.stop_ids.end(), [&](int32_t id) { return banned.Contains(id); })) {
      throw std::invalid_argument("Generate: a constraint needs a stop id that is not banned");
    }
  }
}

}  // namespace

GenerationTask::GenerationTask(const model::LanguageModel& model, Sequence& sequence, GenerateOptions options)
    : model_(model),
      sequence_(sequence),
      options_(std::move(options)),
      sampler_(options_.sampling),
      stops_(options_.stop_ids) {
  // The sampler holds the banned ids distinct and ascending: the set costs one pass.
  if (options_.constraint.grammar != nullptr) banned_ = sampling::TokenIdSet(sampler_.params().banned_ids);
  if (options_.constraint.grammar != nullptr && options_.constraint.vocabulary != nullptr) {
    constraint_ = std::make_unique<OutputConstraint>(options_.constraint, options_.stop_ids);
    for (int32_t stop : options_.stop_ids) {
      if (!banned_.Contains(stop)) {
        forced_stop_ = stop;
        break;
      }
    }
    // Every id but the banned ones (ids past the vocabulary are never set: the mask has V bits).
    const int64_t vocab = model_.config().vocab_size;
    unbanned_.Reset(static_cast<int32_t>(vocab));
    std::vector<uint64_t>& words = unbanned_.mutable_words();
    std::fill(words.begin(), words.end(), ~uint64_t{0});
    if (vocab % 64 != 0) words.back() = (uint64_t{1} << (vocab % 64)) - 1;
    for (int32_t id : banned_.ids()) {
      if (id >= 0 && id < vocab) unbanned_.Clear(id);
    }
  }
}

void GenerationTask::Start(std::span<const int32_t> input, int64_t prefill_chunk) {
  CheckRequires(model_.config(), sequence_, input, options_, banned_);
  if (prefill_chunk < 0) throw std::invalid_argument("Generate: prefill_chunk < 0");
  start_time_ = Clock::now();
  prefill_chunk_ = prefill_chunk;
  result_.used_kv_cache = options_.use_kv_cache;
  sequence_.tokens.insert(sequence_.tokens.end(), input.begin(), input.end());
  result_.prompt_tokens = static_cast<int64_t>(sequence_.tokens.size());
  if (options_.use_kv_cache) {
    StartCached();
    if (prefill_chunk == 0) {
      while (prefilling_) PrefillChunk();
    }
  } else {
    StartUncached();
  }
}

void GenerationTask::StartCached() {
  std::vector<int32_t>& tokens = sequence_.tokens;
  model::KvCache& cache = sequence_.cache;
  const int64_t length = static_cast<int64_t>(tokens.size());
  will_sample_ = options_.max_new_tokens > 0 && length < model_.config().context;
  // The cache starts from the longest run of blocks of the same leading tokens the pool holds when
  // that run reaches past what the cache has (prefix sharing): a new session, one whose cache was
  // dropped, or one that holds only its system prompt while an earlier request of its user left
  // the whole conversation (a stateless HTTP request re-sending it).
  // An observed call computes every position its cache does not hold, so none of its input goes
  // unobserved (prefix sharing would change no value, only what is computed).
  if (options_.observer == nullptr) cache.ExtendFromPrefix(tokens, will_sample_ ? length - 1 : length);
  // Sampling needs the last position's logits: recompute it if the cache already holds it.
  if (will_sample_ && cache.length() == length) cache.Truncate(length - 1);
  result_.reused_tokens = cache.length();
  const int64_t pending = length - cache.length();
  if (pending == 0) {
    Finish(options_.max_new_tokens == 0 ? StopReason::kMaxTokens : StopReason::kContextFull);
    return;
  }
  if (Cancelled()) {
    Finish(StopReason::kCancelled);
    return;
  }
  result_.prefilled_tokens = pending;
  prefilling_ = true;
}

std::vector<float> GenerationTask::ObservedStep(std::span<const int32_t> tokens, model::KvCache& cache) const {
  if (options_.observer == nullptr) return model_.Prefill(tokens, cache);
  const model::SequenceInput input{
      .cache = &cache, .tokens = tokens, .want_logits = true, .observer = options_.observer.get()};
  return model_.Step(std::span(&input, 1));  // the last token's logits [V], as Prefill
}

void GenerationTask::PrefillChunk() {
  if (!prefilling_) throw std::logic_error("GenerationTask::PrefillChunk while not prefilling");
  if (Cancelled()) {
    prefilling_ = false;
    Finish(StopReason::kCancelled);
    return;
  }
  if (!options_.use_kv_cache) {  // the next chunk of this id's forward window
    const std::span<const int32_t> chunk = PendingChunk(prefill_chunk_);
    const bool samples = ChunkSamples(static_cast<int64_t>(chunk.size()));
    const std::vector<float> logits = model_.Prefill(chunk, *window_cache_);
    AcceptPrefilled(samples ? std::span<const float>(logits) : std::span<const float>());
    return;
  }
  const std::vector<int32_t>& tokens = sequence_.tokens;
  model::KvCache& cache = sequence_.cache;
  const int64_t length = static_cast<int64_t>(tokens.size());
  const bool traced = will_sample_ && options_.trace_layer >= 0;
  // Traced: the last pending position goes through Decode, which records its attention row.
  const int64_t prefill_end = traced ? length - 1 : length;
  if (!traced) {
    const std::span<const int32_t> chunk = PendingChunk(prefill_chunk_ > 0 ? prefill_chunk_ : length);
    const bool samples = ChunkSamples(static_cast<int64_t>(chunk.size()));
    const std::vector<float> logits = ObservedStep(chunk, cache);
    AcceptPrefilled(samples ? std::span<const float>(logits) : std::span<const float>());
    return;
  }
  const int64_t begin = cache.length();
  int64_t n = prefill_end - begin;
  if (prefill_chunk_ > 0) n = std::min(n, prefill_chunk_);
  if (n > 0) {
    model_.Prefill(std::span<const int32_t>(tokens.data() + begin, static_cast<size_t>(n)), cache);
    if (begin + n < prefill_end) return;  // more chunks to come
  }
  prefilling_ = false;
  model::AttentionTrace trace{options_.trace_layer, {}};
  model::KvCache* caches[] = {&cache};
  const std::vector<float> logits = model_.Decode(std::span<const int32_t>(tokens).last(1), caches, &trace);
  AcceptDecodeLogits(logits, TraceRow(trace));
}

std::span<const int32_t> GenerationTask::PendingChunk(int64_t budget) const {
  const std::vector<int32_t>& tokens = sequence_.tokens;
  const int64_t begin = WindowBegin() + filled_cache().length();
  const int64_t n = std::max<int64_t>(0, std::min(static_cast<int64_t>(tokens.size()) - begin, budget));
  return std::span<const int32_t>(tokens.data() + begin, static_cast<size_t>(n));
}

bool GenerationTask::ChunkSamples(int64_t n) const {
  const bool ends = WindowBegin() + filled_cache().length() + n == static_cast<int64_t>(sequence_.tokens.size());
  return ends && (will_sample_ || !options_.use_kv_cache);
}

void GenerationTask::AcceptPrefilled(std::span<const float> logits) {
  if (!options_.use_kv_cache) {  // a forward window
    if (WindowBegin() + window_cache_->length() < static_cast<int64_t>(sequence_.tokens.size())) return;
    if (logits.empty()) throw std::logic_error("GenerationTask::AcceptPrefilled without the logits to sample");
    prefilling_ = false;
    window_cache_->Clear();  // the next id's window is computed afresh, as a full forward is
    SampleAndEmit(logits, {});
    if (!done_) prefilling_ = true;
    return;
  }
  if (sequence_.cache.length() < static_cast<int64_t>(sequence_.tokens.size())) return;  // more chunks
  prefilling_ = false;
  if (!will_sample_) {  // only inject the input; the logits are not needed
    Finish(options_.max_new_tokens == 0 ? StopReason::kMaxTokens : StopReason::kContextFull);
    return;
  }
  if (logits.empty()) throw std::logic_error("GenerationTask::AcceptPrefilled without the logits to sample");
  SampleAndEmit(logits, {});
}

void GenerationTask::StartUncached() {
  const int64_t length = static_cast<int64_t>(sequence_.tokens.size());
  if (options_.max_new_tokens == 0 || length >= model_.config().context) {
    Finish(options_.max_new_tokens == 0 ? StopReason::kMaxTokens : StopReason::kContextFull);
    return;
  }
  if (Cancelled()) {
    Finish(StopReason::kCancelled);
    return;
  }
  result_.prefilled_tokens = length;
  if (prefill_chunk_ > 0) {  // every forward in chunks, into a window cache (see Start)
    window_cache_.emplace(model_.NewForwardCache());
    prefilling_ = true;
    return;
  }
  SampleAndEmit(ForwardWindow(), {});
}

int64_t GenerationTask::WindowBegin() const {
  if (options_.use_kv_cache) return 0;
  const int64_t length = static_cast<int64_t>(sequence_.tokens.size());
  return length - std::min<int64_t>(length, model_.config().context);
}

// Full forward over the last T tokens of the sequence: logits of the last position [V].
std::vector<float> GenerationTask::ForwardWindow() const {
  const std::vector<int32_t>& tokens = sequence_.tokens;
  const size_t window = std::min<size_t>(tokens.size(), static_cast<size_t>(model_.config().context));
  return model_.Forward(std::span<const int32_t>(tokens).last(window), /*last_only=*/true);
}

bool GenerationTask::PollCancel() {
  if (!done_ && Cancelled()) {
    prefilling_ = false;
    Finish(StopReason::kCancelled);
  } else if (!done_ && !prefilling_ && Stopped()) {
    Finish(StopReason::kStopped);
  }
  return done_;
}

bool GenerationTask::PrepareStep() {
  if (done_ || prefilling_) return false;
  if (Cancelled()) {
    Finish(StopReason::kCancelled);
    return false;
  }
  if (Stopped()) {
    Finish(StopReason::kStopped);
    return false;
  }
  return true;
}

void GenerationTask::Step() {
  if (prefilling_) {
    PrefillChunk();
    return;
  }
  if (!PrepareStep()) return;
  if (!options_.use_kv_cache) {
    SampleAndEmit(ForwardWindow(), {});
    return;
  }
  // Invariant between steps: the cache holds every token but the last sampled one.
  const int32_t token = decode_token();
  model::KvCache* caches[] = {&sequence_.cache};
  if (options_.trace_layer < 0) {
    AcceptDecodeLogits(options_.observer != nullptr ? ObservedStep({&token, 1}, sequence_.cache)
                                                    : model_.Decode({&token, 1}, caches));
    return;
  }
  model::AttentionTrace trace{options_.trace_layer, {}};
  const std::vector<float> logits = model_.Decode({&token, 1}, caches, &trace);
  AcceptDecodeLogits(logits, TraceRow(trace));
}

void GenerationTask::AcceptDecodeLogits(std::span<const float> logits, std::vector<float> attention) {
  SampleAndEmit(logits, std::move(attention));
}

void GenerationTask::SampleAndEmit(std::span<const float> logits, std::vector<float> attention) {
  const int64_t vocab = model_.config().vocab_size;
  if (static_cast<int64_t>(logits.size()) < vocab) throw std::logic_error("GenerationTask: short logits row");
  const std::span<const float> row = logits.first(static_cast<size_t>(vocab));
  if (constraint_ && !MaskStep()) return;
  const sampling::AllowedMask allowed = constraint_ ? sampling::AllowedMask(mask_.words()) : sampling::AllowedMask();
  // Repetition history = the sequence so far.
  const int32_t id = options_.sampled_top_logprobs > 0 ? sampler_.Sample(row, sequence_.tokens, allowed, &drawn_from_)
                                                       : sampler_.Sample(row, sequence_.tokens, allowed);
  if (options_.sampled_top_logprobs > 0) KeepDrawnFrom(id);
  if (constraint_) {
    if (common::Status accepted = constraint_->Accept(id); !accepted.ok()) {
      // A matcher budget may run out while it advances (RESOURCE_EXHAUSTED, kept as it is); any
      // other refusal of an id the mask allowed is a bug.
      Fail(accepted.code() == common::StatusCode::kResourceExhausted
               ? accepted
               : common::Status::Internal("constraint: the sampled id was not allowed: " + accepted.message()));
      return;
    }
  }
  Append(id, row, std::move(attention));
  // Forced end: the text is complete and nothing may follow it; the stop id needs no forward.
  if (!done_ && constraint_ && constraint_->MustEnd() && forced_stop_ >= 0) {
    (void)constraint_->Accept(forced_stop_);
    Append(forced_stop_, {}, {});
  }
}

bool GenerationTask::MaskStep() {
  // The ids left to this call, this one included: a text id is allowed only when the text can
  // still be completed within them (OutputConstraint::AllowedIds).
  int64_t tokens_left =
      std::min<int64_t>(options_.max_new_tokens - static_cast<int64_t>(result_.new_tokens.size()),
                        model_.config().context - static_cast<int64_t>(sequence_.tokens.size()));
  // One id is kept for the stop id, so that a text the budget shapes still ends on it (a reply that
  // ends on the template's end-of-turn id, not at max_new_tokens), unless only one is left.
  if (forced_stop_ >= 0 && tokens_left > 1) --tokens_left;
  if (common::Status masked = constraint_->AllowedIds(&mask_, std::max<int64_t>(tokens_left, 1)); !masked.ok()) {
    Fail(masked);
    return false;
  }
  // The banned ids off the mask: one AND per word, however many ids are banned.
  std::vector<uint64_t>& words = mask_.mutable_words();
  const std::vector<uint64_t>& unbanned = unbanned_.words();
  for (size_t w = 0; w < words.size() && w < unbanned.size(); ++w) words[w] &= unbanned[w];
  if (mask_.Count() == 0) {
    Fail(common::Status::InvalidArgument(fmt::format(
        "the constraint allows only banned ids after {} bytes of output", constraint_->text().size())));
    return false;
  }
  return true;
}

void GenerationTask::Append(int32_t id, std::span<const float> row, std::vector<float> attention) {
  std::vector<int32_t>& tokens = sequence_.tokens;
  tokens.push_back(id);
  result_.new_tokens.push_back(id);
  last_token_time_ = Clock::now();
  if (result_.new_tokens.size() == 1) first_token_time_ = last_token_time_;
  std::optional<StopReason> stop = StopAfter(id);
  if (options_.text_stop && options_.text_stop->Add(id, stop.has_value())) stop = StopReason::kStopString;
  if (options_.on_token) {
    StepEvent event;
    event.id = id;
    event.index = static_cast<int32_t>(result_.new_tokens.size()) - 1;
    event.last = stop.has_value();
    if (!row.empty() && (options_.want_logprobs || options_.top_logprobs > 0)) {
      const std::vector<sampling::TokenBias>& bias = sampler_.params().logit_bias;
      if (bias.empty()) {
        AddLogprobs(row, options_.top_logprobs, options_.want_logprobs, event);
      } else {
        // The biased distribution: this row's own copy with the bias added.
        std::vector<float> biased(row.begin(), row.end());
        sampling::ApplyLogitBias(biased, bias);
        AddLogprobs(biased, options_.top_logprobs, options_.want_logprobs, event);
      }
    }
    if (!row.empty()) {
      event.sampled_top = std::move(sampled_top_);
      event.sampled_logprob = sampled_logprob_;
    }
    sampled_top_.clear();
    sampled_logprob_.reset();
    if (!attention.empty()) {
      const int64_t heads = model_.config().heads;
      const int64_t length = static_cast<int64_t>(attention.size()) / heads;
      event.attention = AttentionRow{std::move(attention), heads, length};
    }
    options_.on_token(event);
  }
  if (stop) Finish(*stop);
}

void GenerationTask::KeepDrawnFrom(int32_t id) {
  sampled_top_.clear();
  sampled_logprob_.reset();
  const size_t n = std::min(drawn_from_.size(), static_cast<size_t>(options_.sampled_top_logprobs));
  for (size_t i = 0; i < n; ++i) {
    sampled_top_.push_back({drawn_from_[i].id, static_cast<float>(std::log(drawn_from_[i].prob))});
  }
  for (const sampling::SamplingCandidate& c : drawn_from_) {
    if (c.id == id) sampled_logprob_ = static_cast<float>(std::log(c.prob));
  }
}

std::optional<StopReason> GenerationTask::StopAfter(int32_t id) const {
  if (stops_.Contains(id)) return StopReason::kStopToken;
  const bool incomplete = constraint_ && !constraint_->IsComplete();
  if (static_cast<int64_t>(result_.new_tokens.size()) >= options_.max_new_tokens) {
    return incomplete ? StopReason::kConstraintIncomplete : StopReason::kMaxTokens;
  }
  if (static_cast<int64_t>(sequence_.tokens.size()) >= model_.config().context) {
    return incomplete ? StopReason::kConstraintIncomplete : StopReason::kContextFull;
  }
  return std::nullopt;
}

void GenerationTask::Fail(common::Status error) {
  result_.error = std::move(error);
  prefilling_ = false;
  Finish(StopReason::kFailed);
}

void GenerationTask::Finish(StopReason reason) {
  done_ = true;
  result_.stop_reason = reason;
  result_.constraint_forced_end = constraint_ && constraint_->budget_narrowed() &&
                                  (reason == StopReason::kStopToken || reason == StopReason::kMaxTokens ||
                                   reason == StopReason::kContextFull);
  if (reason == StopReason::kStopString) {
    // Roll back the ids that reach into the match: the sequence ends with the last id before it.
    const size_t kept = std::min(options_.text_stop->kept_tokens(), result_.new_tokens.size());
    const size_t dropped = result_.new_tokens.size() - kept;
    result_.new_tokens.resize(kept);
    sequence_.tokens.resize(sequence_.tokens.size() - dropped);
    const auto length = static_cast<int64_t>(sequence_.tokens.size());
    if (sequence_.cache.length() > length) sequence_.cache.Truncate(length);
  }
  const size_t n = result_.new_tokens.size();
  if (n >= 1) result_.time_to_first_token_s = Seconds(first_token_time_ - start_time_);
  const double decode_s = Seconds(last_token_time_ - first_token_time_);
  if (n >= 2 && decode_s > 0) result_.decode_tokens_per_s = static_cast<double>(n - 1) / decode_s;
  if (!options_.use_kv_cache) {
    sequence_.cache.Clear();  // the next cached call re-prefills
    window_cache_.reset();    // its blocks go back
  }
}

bool GenerationTask::Cancelled() const {
  return options_.cancel != nullptr && options_.cancel->load(std::memory_order_relaxed);
}

bool GenerationTask::Stopped() const {
  return options_.stop != nullptr && options_.stop->load(std::memory_order_relaxed);
}

GenerateResult GenerationTask::TakeResult() {
  if (!done_) throw std::logic_error("GenerationTask::TakeResult before done()");
  return std::move(result_);
}

GenerateResult Generate(const model::LanguageModel& model, Sequence& sequence,
                        std::span<const int32_t> input, const GenerateOptions& options) {
  GenerationTask task(model, sequence, options);
  task.Start(input);
  while (!task.done()) task.Step();
  return task.TakeResult();
}

}  // namespace niels::daemon::engine
