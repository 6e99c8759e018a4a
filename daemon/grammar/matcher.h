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
  void WalkTrie(const Vocabulary& vocab, TokenBitset* out);
  // The mask of a state on a run (matcher_core.h): tokens inside the run's characters by their
  // character count, the others advanced from their exit. False when the run stops being uniform
  // within the longest token (then the caller walks the trie).
  bool MaskFromRun(const Vocabulary::LoopTable& table, const Vocabulary& vocab, TokenBitset* out);

  std::shared_ptr<MatcherCore> core_;
  Snapshot now_;
};

}  // namespace niels::daemon::grammar
