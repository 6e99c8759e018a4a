#pragma once
// Generate: the generation loop of one sequence (docs/ARCHITECTURE.md, "Engine: scheduling and
// batching"), composing Transformer,
// Sampler and a stop rule. It knows nothing about text, sessions or sockets.
//
// Cache semantics (the seeds' generate() with the sequence as the cache): `input` is appended to
// the sequence and processed first, then up to max_new_tokens ids are sampled and appended.
// The sequence's cache always covers a prefix of its tokens; the last sampled id is not cached
// until the next call feeds it. No id is ever fed twice.
// Runs on the engine thread; blocking; checks `cancel` between steps.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "common/defaults.h"
#include "common/status.h"
#include "daemon/engine/output_constraint.h"
#include "daemon/grammar/token_bitset.h"
#include "daemon/model/kv_cache.h"
#include "daemon/model/sequence.h"
#include "daemon/sampling/sampler.h"
#include "daemon/sampling/token_id_set.h"
#include "daemon/model/language_model.h"

namespace niels::daemon::engine {

using model::Sequence;

// kConstraintIncomplete: max_new_tokens or the context ended a constrained generation before its
// text was a complete sentence of the grammar (in place of kMaxTokens / kContextFull).
// kStopString: the generated text reached one of the request's stop strings (TextStopRule).
// kFailed: the constraint could not go on (GenerateResult::error says why); the turn fails.
// kStopped: the request's stop flag (a Cancel with keep_output) ended it; what was generated is kept.
enum class StopReason {
  kStopToken,
  kMaxTokens,
  kContextFull,
  kCancelled,
  kConstraintIncomplete,
  kStopString,
  kFailed,
  kStopped,
};

// A stop rule over the generated text (stop strings: stop_string_rule.h). The generator knows no
// text: it hands the rule every new id, and when the rule reports a match it ends the call with
// kStopString and rolls back the ids from kept_tokens() on -- sequence, cache and new_tokens -- so
// the sequence ends with the last id wholly before the match.
class TextStopRule {
 public:
  virtual ~TextStopRule() = default;
  // Takes the next new id (`flush`: no id follows, so text held back for an incomplete character is
  // complete now). True once the text holds a match.
  virtual bool Add(int32_t id, bool flush) = 0;
  // After a match: how many of the new ids lie wholly before it.
  virtual size_t kept_tokens() const = 0;
};

struct TokenAlternative {
  int32_t id;
  float logprob;
};

// One layer's attention probabilities for the newest position: probs [heads, length], row-major.
struct AttentionRow {
  std::vector<float> probs;
  int64_t heads = 0;
  int64_t length = 0;
};

// One sampled id, handed to the on_token callback as soon as it is sampled.
struct StepEvent {
  int32_t id = 0;
  int32_t index = 0;                        // 0-based among this call's new ids
  bool last = false;                        // a stop rule ends the call with this id (no id follows
                                            // unless a cancel ended it first)
  std::optional<float> logprob;             // when want_logprobs (none for a forced stop id)
  std::vector<TokenAlternative> top;        // top_logprobs best ids of the model's own distribution
                                            // (log_softmax of the raw logits plus the sampling's
                                            // logit bias, if any), best first; logprob likewise
  std::optional<AttentionRow> attention;    // when trace_layer >= 0 (cached path)
  // When sampled_top_logprobs > 0: the distribution the id was drawn from, after every transform of
  // sampling (logit bias, banned ids, a constraint's mask, repetition penalty, temperature, top-k,
  // top-p; sampling::SamplingDistribution): its best sampled_top_logprobs ids, best first, with the
  // log of their probability there, and the drawn id's (finite: the id is in it). Ids outside it have
  // probability 0 and are never listed. Greedy: the argmax alone, logprob 0. None for a forced stop.
  std::vector<TokenAlternative> sampled_top;
  std::optional<float> sampled_logprob;
};

struct GenerateOptions {
  sampling::SamplingParams sampling;
  int32_t max_new_tokens = common::kDefaultMaxNewTokens;  // 0 = only process input
  // The sequence never grows past T: at length T generation stops with kContextFull.
  bool use_kv_cache = true;                 // false: full forward over the last T tokens per step
  std::vector<int32_t> stop_ids;            // stop (inclusive: the stop id is appended) on any of these
  bool want_logprobs = false;
  int32_t top_logprobs = 0;                 // n best alternatives per step
  int32_t sampled_top_logprobs = 0;         // n best of the distribution drawn from (StepEvent)
  int64_t trace_layer = -1;                 // record this layer's attention row per step
  // Structured output (output_constraint.h): the generated text follows spec.grammar; null = none.
  // REQUIRES with a grammar: stop_ids not empty, none a text id, not all banned; max_new_tokens >= 1;
  // spec.vocabulary built for the model's vocab_size (one entry per output row).
  ConstraintSpec constraint;
  const std::atomic<bool>* cancel = nullptr;  // checked before every forward
  // Checked before every decode step (not while prefilling): once set, the call ends with kStopped
  // and keeps what it generated, as a call cut by max_new_tokens does.
  const std::atomic<bool>* stop = nullptr;
  // Fed every new id before its event is emitted, so on_token can read the rule's state for it
  // (e.g. the text a stream may show). Null: none. REQUIRES: no constraint with it.
  std::shared_ptr<TextStopRule> text_stop;
  std::function<void(const StepEvent&)> on_token;  // may be empty
  // Activation probes (model/hook_sites.h): every position this call computes is handed to it, in
  // every path that computes it (PrefillChunk, Step, the engine's mixed steps). Observing changes no
  // result. REQUIRES with an observer: use_kv_cache and trace_layer < 0 (an uncached call recomputes
  // its window for every id; a traced one goes through Decode). Null: none.
  std::shared_ptr<model::ActivationObserver> observer;
};

struct GenerateResult {
  // Sampled ids (a stop id included when it ended the call; with kStopString only those wholly
  // before the match).
  std::vector<int32_t> new_tokens;
  StopReason stop_reason = StopReason::kMaxTokens;
  int64_t prompt_tokens = 0;        // sequence length before sampling (after appending input)
  int64_t reused_tokens = 0;        // ids already in the cache at the start
  int64_t prefilled_tokens = 0;     // ids processed by the prefill of this call
  double time_to_first_token_s = 0; // from call start to the first sampled id
  double decode_tokens_per_s = 0;   // sampled ids after the first / time after the first
  bool used_kv_cache = false;       // the call ran the cached path (options.use_kv_cache)
  common::Status error;             // why, with kFailed
  // With a constraint: the text is complete and the budget shaped its end -- at some step the ids
  // left (max_new_tokens, the context) took away an id the grammar allowed, because the text could
  // not have been completed within them after it (OutputConstraint::AllowedIds).
  bool constraint_forced_end = false;
};

// Runs the whole loop of one sequence (a GenerationTask driven to the end with Step()).
//
// Cached path: one Prefill of tokens[cache.length():] (the input included), then one Decode per new
// id. When the cache already covers every token (e.g. after a max_new_tokens = 0 call), the last
// cached position is dropped and recomputed to get its logits (reused_tokens counts one less).
// With trace_layer >= 0 the last pending token goes through Decode (the others through Prefill) so
// that every sampled id's StepEvent carries the attention row of the position that produced it.
// Uncached path: each step is a Forward over the last T tokens (last_only); afterwards the cache is
// cleared, so the next cached call re-prefills. No prefill happens when max_new_tokens = 0.
// Stops, checked after each sampled id in this order: a stop id (kStopToken), max_new_tokens
// (kMaxTokens), the sequence reaching T (kContextFull; it never exceeds T); the cancel flag is read
// before every forward (kCancelled). A text_stop rule that reports a match ends the call with
// kStopString in place of any of these, its ids from kept_tokens() on rolled back (the sequence's
// tokens and cache and new_tokens end before them; their StepEvents were emitted, the last with
// last = true). max_new_tokens = 0 only processes the input (kMaxTokens).
// With a constraint: every id is sampled from the logits masked by OutputConstraint::AllowedIds
// (ids outside the mask at -inf, like banned ids; the sampling order is otherwise unchanged) and
// the matcher then accepts it. When the text is complete and nothing may follow it
// (OutputConstraint::MustEnd) while max_new_tokens and the context leave room, the first stop id
// that is not banned is appended at once without a forward (its StepEvent has no logprob) and the
// call stops with kStopToken. Each mask counts the ids left (min(max_new_tokens, context) less
// those used, less one for that stop id while more than one is left): an id is allowed only if the
// text can still be completed within the rest
// (OutputConstraint::AllowedIds(mask, tokens_left)), so a text whose completion fits from the start
// ends complete (constraint_forced_end says when the budget shaped it); max_new_tokens or the
// context before the text is complete (a budget too small for any completion the bound sees, or a
// banned id on the way) stop it with kConstraintIncomplete; a matcher limit (or a mask left empty
// by banned ids) with kFailed.
// A sequence already at T with max_new_tokens > 0 gets its input processed, then kContextFull.
// Stop and banned ids cost O(S + B) once per call (their sets, for ascending lists; O(n log n)
// otherwise) and per step O(log S) for the stop rule, O(V / 64) for the banned ids in a constraint's
// mask, and the Sampler's O(V + B) (sampler.h), B <= V distinct ids: never S x B, never a scan of a
// list per lookup.
// REQUIRES (else std::invalid_argument / std::out_of_range, nothing changed): every id in input in
// [0, V); tokens.size() + input.size() <= T; a non-empty sequence when max_new_tokens > 0;
// max_new_tokens >= 0; cache.length() <= tokens.size(); sampling params valid for V.
// On kCancelled the sequence keeps what was processed; callers that need atomic turns snapshot first.
GenerateResult Generate(const model::LanguageModel& model, Sequence& sequence,
                        std::span<const int32_t> input, const GenerateOptions& options);

// Generate() as a state machine, so that an engine can run the decode steps of several sequences
// in one batched LanguageModel::Decode call:
//
//   GenerationTask task(model, sequence, options);
//   task.Start(input);                  // appends input, prefills, samples the first id
//   while (!task.done()) task.Step();   // one forward + one sampled id per Step
//
// Chunked prefill (cached path): Start(input, chunk) with chunk > 0 only appends the input; then
// while prefilling(), each PrefillChunk() (or Step()) prefills the next `chunk` pending tokens, and
// the last one samples the first id. The chunk boundaries depend only on this task (its cache
// length and `chunk`), never on other sequences, so the result does not depend on what else runs.
// Chunked uncached path: with chunk > 0 every id's full forward over the last T tokens is computed
// the same way, as a prefill of that window into a window cache (LanguageModel::NewForwardCache) in
// chunks, sampled at its end, after which the window cache is emptied (prefilling() stays true
// until the task is done). Its logits equal Forward's (the forward step is chunk-invariant).
//   GenerateResult result = task.TakeResult();
//
// Batched, for tasks with use_kv_cache (and the same trace_layer): for every task where
// PrepareStep() is true, collect decode_token() and &cache(), call Decode once, then hand row b
// (and trace row b) to AcceptDecodeLogits. The task and the sequence must outlive each other's use;
// same threading as Generate.
class GenerationTask {
 public:
  GenerationTask(const model::LanguageModel& model, Sequence& sequence, GenerateOptions options);
  GenerationTask(const GenerationTask&) = delete;
  GenerationTask& operator=(const GenerationTask&) = delete;

  // Appends `input` and processes it; samples the first id unless a stop rule applies first.
  // prefill_chunk > 0 (cached path): the prefill is left to PrefillChunk() calls (see above).
  // Throws as Generate does on a violated REQUIRES (before changing anything). Call once.
  void Start(std::span<const int32_t> input, int64_t prefill_chunk = 0);
  // True once a stop rule has ended the task.
  bool done() const { return done_; }
  // True while pending input tokens wait for PrefillChunk() (cached path, chunked Start).
  bool prefilling() const { return prefilling_; }
  // Prefills the next chunk (reading the cancel flag first); the last chunk samples the first id.
  // REQUIRES: prefilling().
  void PrefillChunk();
  // Ends the task with kCancelled now if its cancel flag is set, in any phase, or with kStopped if
  // its stop flag is set and it is not prefilling. Returns done().
  bool PollCancel();
  // Mixed steps (cached path, and the chunked uncached path's windows): instead of PrefillChunk(),
  // an engine may put the next chunk of the prefill into one LanguageModel::Step with other
  // sequences' rows, as an input into filled_cache() -- except for a traced task (trace_layer >= 0),
  // whose last prefill position must go through Decode (use PrefillChunk()).
  //   chunk = PendingChunk(budget): the next pending tokens, at most `budget` (the engine's
  //   per-iteration prefill budget; PrefillChunk() uses the task's own prefill_chunk);
  //   ChunkSamples(chunk.size()): whether that chunk ends the prefill and needs its last logits;
  //   after the Step wrote the chunk into filled_cache(): AcceptPrefilled(logits_row [V] or an empty
  //   span).
  // Results do not depend on how the prefill was split (the forward step is chunk-invariant).
  bool mixable_prefill() const { return prefilling_ && (options_.trace_layer < 0 || !options_.use_kv_cache); }
  // The cache a prefill chunk goes into: the sequence's (cached path) or the window cache.
  model::KvCache& filled_cache() { return options_.use_kv_cache ? sequence_.cache : *window_cache_; }
  const model::KvCache& filled_cache() const { return options_.use_kv_cache ? sequence_.cache : *window_cache_; }
  // Chunked uncached path: part of a forward window is computed (its window cache holds positions).
  bool forward_in_flight() const { return window_cache_.has_value() && window_cache_->length() > 0; }
  std::span<const int32_t> PendingChunk(int64_t budget) const;
  bool ChunkSamples(int64_t n) const;
  // Ends the prefill when the cache holds every token: samples the first id from `logits` [V]
  // (REQUIRED then, unless the task only injects its input), or finishes.
  void AcceptPrefilled(std::span<const float> logits);
  // Reads the cancel and stop flags: false when done, prefilling or just cancelled or stopped (the
  // task then ends with kCancelled / kStopped); true when the task needs one more decode step or
  // forward.
  bool PrepareStep();
  // One step alone: a prefill chunk while prefilling, else PrepareStep(), then Decode (cached) or
  // Forward (uncached), then sample.
  void Step();

  // For batching (cached path, after PrepareStep() returned true): the id to feed next and the
  // cache it goes into.
  int32_t decode_token() const { return sequence_.tokens.back(); }
  // The same id as a span into the sequence (stable until the step's logits are accepted).
  std::span<const int32_t> decode_input() const { return std::span<const int32_t>(sequence_.tokens).last(1); }
  model::KvCache& cache() { return sequence_.cache; }
  bool use_kv_cache() const { return options_.use_kv_cache; }
  int64_t trace_layer() const { return options_.trace_layer; }
  // GenerateOptions::observer, for the rows of this task in a batched step (null: none).
  model::ActivationObserver* observer() const { return options_.observer.get(); }
  // Samples from this sequence's logits row [V] of the Decode of decode_token(); attention is its
  // trace row [H, length] (AttentionTrace::rows[b]) when traced.
  void AcceptDecodeLogits(std::span<const float> logits, std::vector<float> attention = {});

  // The result. REQUIRES: done().
  GenerateResult TakeResult();

 private:
  void StartCached();
  void StartUncached();
  std::vector<float> ForwardWindow() const;
  // Prefill(tokens, cache), through Step with the observer when there is one.
  std::vector<float> ObservedStep(std::span<const int32_t> tokens, model::KvCache& cache) const;
  // The first position of the tokens a prefill covers: 0 (cached), else where the window starts.
  int64_t WindowBegin() const;
  void SampleAndEmit(std::span<const float> logits, std::vector<float> attention);
  // Appends `id` and emits its event; ends the task when a stop rule applies. `row` empty: a forced
  // id (no logprobs).
  void Append(int32_t id, std::span<const float> row, std::vector<float> attention);
  // The stop rule after `id` was appended, if any.
  std::optional<StopReason> StopAfter(int32_t id) const;
  // The step's sampled_top and sampled_logprob from the distribution `id` was drawn from.
  void KeepDrawnFrom(int32_t id);
  // The mask of this step into mask_ (false: the task failed).
  bool MaskStep();
  void Fail(common::Status error);
  void Finish(StopReason reason);
  bool Cancelled() const;
  bool Stopped() const;

  const model::LanguageModel& model_;
  Sequence& sequence_;
  GenerateOptions options_;
  sampling::Sampler sampler_;
  // The stop and banned ids as sets, built once: a step looks an id up in O(log n), never scans.
  sampling::TokenIdSet stops_;
  sampling::TokenIdSet banned_;                   // with a constraint (the sampler has its own)
  std::unique_ptr<OutputConstraint> constraint_;  // null without a constraint
  grammar::TokenBitset mask_;                     // this step's allowed ids (with a constraint)
  std::vector<sampling::SamplingCandidate> drawn_from_;  // this step's distribution (sampled_top_logprobs)
  std::vector<TokenAlternative> sampled_top_;            // what the next event carries of it
  std::optional<float> sampled_logprob_;
  grammar::TokenBitset unbanned_;                 // with a constraint: every id of [0, V) not banned
  int32_t forced_stop_ = -1;                      // with a constraint: the first stop id not banned
  GenerateResult result_;
  bool done_ = false;
  bool prefilling_ = false;
  bool will_sample_ = false;    // the cached prefill ends by sampling the first id
  int64_t prefill_chunk_ = 0;   // 0: the whole prefill at once
  std::optional<model::KvCache> window_cache_;  // chunked uncached path: the forward window so far
  std::chrono::steady_clock::time_point start_time_;
  std::chrono::steady_clock::time_point first_token_time_;
  std::chrono::steady_clock::time_point last_token_time_;
};

}  // namespace niels::daemon::engine
