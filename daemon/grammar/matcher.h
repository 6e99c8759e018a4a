#pragma once
// Matcher: where one request's output stands in a grammar. It answers which bytes and which tokens
// may come next, whether the output is complete, and advances by the bytes of a sampled token.
//
// Use per request (the engine's loop, later):
//   auto grammar = CompiledGrammar::FromGbnf(text);  // or CompileJsonSchema(json), AnyJson(); once
//   Matcher m(*grammar);
//   each step:  m.AllowedTokens(*vocab, &mask);           // exact: see below
//               sample among the ids set in `mask`;
//               m.AcceptToken(id, *vocab);                 // advances (an end id ends the output)
//   rollback:   Matcher::Snapshot s = m.snapshot(); ... m.Restore(s);
//   with a token budget: m.AllowedTokensWithin(*vocab, *after, tokens_left - 1, &mask) instead of
//               AllowedTokens: only the tokens after which the output can still be completed
//               within the budget (see "Completion within a budget" below).
//
// Exactness: a text token is allowed iff the output so far followed by all its bytes is a prefix
// of some sentence of the grammar (a token may end inside a UTF-8 character: allowed iff some
// completion of that character can follow). An end-of-output token is allowed iff the output is a
// complete sentence (and not inside a character); a never token never. The compiled grammar has no
// dead ends (compiled_grammar.h), so every prefix allowed can be completed.
//
// Output is valid UTF-8 by construction: classes match Unicode scalar values, and bytes are
// checked strictly (no overlong forms, no surrogates).
//
// Cost: states (sets of stack ids, O(stacks) memory each) and their transitions are built on first
// use and shared by clones (matcher_core.h), so a repeated situation (the next character of a JSON
// string) costs a table lookup, and its token mask is cached. A new state's mask walks the vocabulary trie once, except inside strings and
// other "runs" (matcher_core.h), whose masks come from a per-vocabulary table of which tokens stay
// inside the run's characters (Vocabulary::LoopTable, built once per character set and kept in
// the vocabulary's bounded LRU cache, ~20 ms at 151,936 ids) plus the few tokens that leave it. nielsd-grammar-bench has the numbers.
//
// Threading: a Matcher and all its clones share one cache: use them from one thread. The
// CompiledGrammar and Vocabulary may be shared by any threads.
// Errors: a matcher that exceeds a MatcherLimits bound stays failed (status() and every later
// call report RESOURCE_EXHAUSTED); the request should end.
// Budgets (matcher_core.h): at most MatcherLimits::max_steps_per_token matcher steps from the end
// of one AcceptToken/AcceptBytes to the end of the next (the masks and byte sets asked for in
// between, and the start state in the first window, included), plus at most one walk of the
// vocabulary's trie per mask; at most max_memory_bytes held by the matcher and its clones.

#include <bitset>
#include <cstdint>
#include <memory>
#include <string_view>

#include "common/status.h"
#include "daemon/grammar/compiled_grammar.h"
#include "daemon/grammar/matcher_core.h"
#include "daemon/grammar/token_bitset.h"
#include "daemon/grammar/utf8.h"
#include "daemon/grammar/vocabulary.h"

namespace niels::daemon::grammar {

class Matcher {
 public:
  // Where the output stands; cheap to copy (a few words). Only valid with the matcher (or a clone)
  // that produced it.
  struct Snapshot {
    int32_t state = MatcherCore::kError;
    PartialChar partial;
    bool ended = false;  // an end-of-output token was accepted
  };

  // A matcher at the start of the output. If the grammar's start state already exceeds a limit,
  // status() reports it.
  explicit Matcher(std::shared_ptr<const CompiledGrammar> grammar, const MatcherLimits& limits = {});

  // Another matcher at the same point, sharing the cache (same thread only).
  Matcher Clone() const { return *this; }
  Snapshot snapshot() const { return now_; }
  // REQUIRES: `s` came from this matcher or a clone of it.
  void Restore(const Snapshot& s) { now_ = s; }

  // Advances by `bytes`. INVALID_ARGUMENT (naming the byte offset) when they are not allowed; the
  // matcher is then unchanged. RESOURCE_EXHAUSTED when a limit is exceeded. Ends a token's window
  // of the step budget.
  common::Status AcceptBytes(std::string_view bytes);
  // Advances by token `id`: its bytes, or for an end-of-output token, ends the output (allowed
  // only when IsComplete()). INVALID_ARGUMENT when not allowed (unchanged) or id out of range.
  common::Status AcceptToken(int32_t id, const Vocabulary& vocab);

  // Exactly the allowed tokens (bits over vocab.size()). Empty after an end-of-output token.
  // RESOURCE_EXHAUSTED when a limit is exceeded.
  common::Status AllowedTokens(const Vocabulary& vocab, TokenBitset* out);
  // The bytes that may come next (a lead byte counts if some character it begins can follow).
  std::bitset<256> AllowedBytes();

  // The output so far is a sentence of the grammar (it may still continue).
  bool IsComplete() const;
  // An end-of-output token was accepted: nothing more may follow.
  bool IsEnded() const { return now_.ended; }
  // Some byte may still follow.
  bool CanContinue() const;
  // The fewest further bytes of any completion (0 when complete). With a byte-level vocabulary
  // (every single byte is a token) the output can be completed within this many tokens, plus one
  // end-of-output token; it is a lower bound on the tokens any vocabulary needs.
  uint32_t MinBytesToComplete() const;

  // Completion within a budget. The completion bound N(p) of a point p of the output (a state and
  // a partial character), over the vocabulary `after` that the ids after the next one come from:
  //   B(p), the bytes bound: MinBytesToComplete() at p, when after.every_byte_is_a_token(); else none;
  //   S(p), the spelling bound: at a character boundary MatcherCore::SpellBound (the fewest ids of
  //         `after` that spell the state's canonical shortest completion, split only at character
  //         boundaries); inside a character none;
  //   N(p) = min(B(p), S(p)); 0 when the output is complete; kNoBound when neither exists.
  // N is an upper bound on the fewest ids that complete the output (never below the true fewest
  // T(p)), and one that can be followed: when N(p) = n > 0 some id of `after` leads to a point p'
  // with N(p') <= n - 1 (B: the next byte of a shortest completion; S: the first id of the
  // spelling). So after an id t with N(after t) <= k the output can be completed within k ids, and
  // at each of them an id with room again exists.
  static constexpr uint32_t kNoBound = MatcherCore::kNoBound;
  // N at the current point (kNoBound after an end-of-output token or an error).
  uint32_t CompletionBound(const Vocabulary& after);
  // The ids that leave room: those of AllowedTokens(vocab) whose point after them has
  // N <= max_tokens_after (an end-of-output id where the output is complete, as there). Sound: it
  // never admits an id after which no completion within max_tokens_after more ids exists. An
  // approximation: an id after which the true fewest ids T fit but N does not is refused (N = T
  // for byte-level vocabularies where single bytes are the only ids a completion can use, and
  // whenever the shortest completion's best spelling is the best of all completions).
  // When no id leaves room (the budget allows no completion the bound can see), it gives the
  // unbounded mask. `narrowed` (optional): the budget took away some id the grammar allowed.
  // Cost: as AllowedTokens while every allowed id leaves room (the most bytes any id of a state's
  // mask leaves, B's worst case, is kept with its cached mask: one comparison); otherwise one more
  // mask computation, not cached (the trie walk or the run's tables, each token's point checked
  // with O(1) for B, a cached S per state, O(stacks) for a token ending inside a character).
  common::Status AllowedTokensWithin(const Vocabulary& vocab, const Vocabulary& after, uint32_t max_tokens_after,
                                     TokenBitset* out, bool* narrowed = nullptr);

  const common::Status& status() const { return core_->status(); }
  const CompiledGrammar& grammar() const { return core_->grammar(); }
  // Size of the shared cache (for tests and benchmarks).
  size_t state_count() const { return core_->state_count(); }
  size_t run_count() const { return core_->run_count(); }
  // Work done and memory held by the shared cache (the budgets' counters).
  MatcherStats stats() const { return core_->stats(); }

 private:
  // One byte from `at`; false when not allowed. May set a core error (then also false).
  bool Advance(uint8_t byte, Snapshot* at);
  // AcceptBytes without ending the token's window.
  common::Status Advance(std::string_view bytes);
  // With a budget, a text token is set only if the point after it has N <= limit.
  struct Budget {
    const Vocabulary* after = nullptr;
    uint32_t limit = 0;
  };
  // The mask of the current point into `out` (cleared first); with `budget` only the ids that
  // leave room; `worst` (optional) gets the most bytes (MinBytesAt) that the point after an id of the
  // unbudgeted mask leaves to complete.
  void ComputeMask(const Vocabulary& vocab, const Budget* budget, TokenBitset* out, uint32_t* worst);
  // AllowedTokens with the worst byte count of its ids (cached with the mask).
  common::Status MaskAndWorst(const Vocabulary& vocab, TokenBitset* out, uint32_t* worst);
  void WalkTrie(const Vocabulary& vocab, TokenBitset* out, const Budget* budget, uint32_t* worst);
  // The mask of a state on a run (matcher_core.h): tokens inside the run's characters by their
  // character count, the others advanced from their exit. False when the run stops being uniform
  // within the longest token (then the caller walks the trie).
  bool MaskFromRun(const Vocabulary::LoopTable& table, const Vocabulary& vocab, TokenBitset* out, const Budget* budget,
                   uint32_t* worst);
  // The fewest bytes that complete the output from `s` (kNoBound for a failed point).
  uint32_t MinBytesAt(const Snapshot& s);
  // N at `s` (see above). With `limit`, S is only computed when B does not fit and S could.
  uint32_t BoundAt(const Snapshot& s, const Vocabulary& after, const uint32_t* limit);
  bool Fits(const Snapshot& s, const Budget& budget) { return BoundAt(s, *budget.after, &budget.limit) <= budget.limit; }

  std::shared_ptr<MatcherCore> core_;
  Snapshot now_;
};

}  // namespace niels::daemon::grammar
