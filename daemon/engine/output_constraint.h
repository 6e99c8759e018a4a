#pragma once
// Structured output on the engine side (docs/ARCHITECTURE.md, "Structured output"): a grammar
// (daemon/grammar) that the text a turn generates must follow.
//
// ConstraintVocabulary, per model (built once, immutable, shared by every turn): the grammar room's
// Vocabulary of the model's tokenizer, twice -- the ids as they read while the generated text is
// still empty (`at_start`) and after some text (`after`), because SentencePiece drops a piece's
// leading space at the start of a decoding (text::TextBytes). The model's stop ids (end of turn,
// end of text) are the end-of-output ids; every other id that adds no fixed text (special, control,
// unknown, unused) is never allowed, and so is a text id that adds no bytes (it could be sampled
// forever).
//
// OutputConstraint, per turn: a Matcher over the bytes the turn's ids decode to -- exactly the text
// a client receives (ChatResponse.reply; the concatenated TokenEvent texts of a stream; the
// decoding of Generate's new ids). The generation loop (generator.h) does, every step:
//   AllowedIds(&mask)       exact: a text id iff the text so far followed by its bytes is a prefix
//                           of some sentence of the grammar; a stop id iff the text is a complete
//                           sentence; nothing else;
//   sample from the logits with the ids outside the mask at -inf (as banned ids);
//   Accept(id)              advances the matcher (a stop id ends the output).
// A turn's matcher starts empty: each turn (each Chat or Generate request) constrains only its own
// new text, never the session's earlier tokens.
//
// Threading: a ConstraintVocabulary may be shared by any threads; an OutputConstraint belongs to
// one turn on the engine thread.

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "daemon/grammar/compiled_grammar.h"
#include "daemon/grammar/matcher.h"
#include "daemon/grammar/token_bitset.h"
#include "daemon/grammar/vocabulary.h"
#include "daemon/sampling/token_id_set.h"
#include "daemon/text/tokenizer.h"

namespace niels::daemon::engine {

struct ConstraintVocabulary {
  // While the generated text is empty; the same object as `after` when no id reads differently at
  // the start (byte-level BPE).
  std::shared_ptr<const grammar::Vocabulary> at_start;
  std::shared_ptr<const grammar::Vocabulary> after;     // after some text

  // From Tokenizer::Bytes, one entry per row of the model's output (`output_rows`, its
  // ModelConfig::vocab_size: the masks cover every logit). A row the tokenizer has no id for (Qwen's
  // output has 151,936 rows, its tokenizer 151,669 ids) is never allowed. `end_ids` (the model's
  // stop ids) are the end-of-output ids. INVALID_ARGUMENT for output_rows <= 0 or a vocabulary the
  // grammar room refuses (an id longer than 64 KiB).
  static common::StatusOr<std::shared_ptr<const ConstraintVocabulary>> Build(const text::Tokenizer& tokenizer,
                                                                             int32_t output_rows,
                                                                             std::span<const int32_t> end_ids);
};

// What a request asks for: the compiled grammar (compiled before the turn starts, off the engine
// thread: daemon/handlers) and the model's vocabulary. `grammar` null = no constraint.
struct ConstraintSpec {
  std::shared_ptr<const grammar::CompiledGrammar> grammar;
  std::shared_ptr<const ConstraintVocabulary> vocabulary;
  grammar::MatcherLimits limits;
  // Text the output is taken to begin with although the prompt wrote it (a reasoning open tag the
  // chat template put at the end of the prompt): matched before the first id, not part of text().
  // REQUIRES: a prefix of some sentence of the grammar.
  std::string matched_prefix = {};
};

class OutputConstraint {
 public:
  // `stop_ids`: where the output may end (the turn's stop ids); REQUIRES: none of them is a text id
  // of the vocabulary (the handlers check), spec.grammar and spec.vocabulary set.
  OutputConstraint(const ConstraintSpec& spec, std::vector<int32_t> stop_ids);

  // The ids allowed next (bits over the vocabulary). RESOURCE_EXHAUSTED when the matcher exceeded a
  // MatcherLimits bound (the grammar is too costly to follow; the turn should fail).
  common::Status AllowedIds(grammar::TokenBitset* out);
  // The same with `tokens_left` ids left to the turn, this one included (min(max_new_tokens left,
  // context left)): a text id only when the fewest ids that complete the text after it, by the
  // matcher's completion bound N over the `after` vocabulary (Matcher::AllowedTokensWithin), plus
  // one fit in tokens_left; a stop id where the text is complete. So a text started within a budget
  // that N says allows a completion always ends complete (a stop id, or a complete text cut by the
  // budget). When no id leaves room (N of every id too large: the budget allows no completion N
  // sees), the grammar's own mask, as AllowedIds. REQUIRES: tokens_left >= 1.
  common::Status AllowedIds(grammar::TokenBitset* out, int64_t tokens_left);
  // Some AllowedIds(out, tokens_left) took away an id the grammar allowed: the budget shaped the
  // ending of the text.
  bool budget_narrowed() const { return budget_narrowed_; }
  // N at the current point (Matcher::CompletionBound over the `after` vocabulary).
  uint32_t CompletionBound() { return matcher_.CompletionBound(*spec_.vocabulary->after); }
  // Advances by a sampled id: a stop id ends the output; a text id adds its bytes. INVALID_ARGUMENT
  // when the id was not allowed (the matcher is then unchanged).
  common::Status Accept(int32_t id);

  // The text so far is a complete sentence of the grammar (it may still continue).
  bool IsComplete() const { return matcher_.IsComplete(); }
  // Complete and no byte may follow: only a stop id can come next.
  bool MustEnd() const { return matcher_.IsComplete() && !matcher_.CanContinue(); }
  // A stop id was accepted.
  bool ended() const { return ended_; }
  bool IsStop(int32_t id) const;
  // The bytes accepted so far (what the ids decode to).
  const std::string& text() const { return text_; }

 private:
  const grammar::Vocabulary& vocab() const { return at_start_ ? *spec_.vocabulary->at_start : *spec_.vocabulary->after; }

  ConstraintSpec spec_;
  sampling::TokenIdSet stops_;  // the turn's stop ids: IsStop in O(log n)
  grammar::Matcher matcher_;
  bool at_start_ = true;
  bool ended_ = false;
  bool budget_narrowed_ = false;
  std::string text_;
};

}  // namespace niels::daemon::engine
