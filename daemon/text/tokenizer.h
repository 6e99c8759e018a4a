#pragma once
// Tokenizer: text <-> token ids, the one interface the engine, the handlers and the tools use
// (docs/ARCHITECTURE.md, "Tokenizers, chat templates, text and sampling"). Two implementations:
//   - SentencePieceTokenizer (sentencepiece_tokenizer.h): niels_gpt's tokenizer.model;
//   - BpeTokenizer (bpe_tokenizer.h): byte-level BPE (Llama 3.x, Qwen2.5, Qwen3) from tokenizer.json
//     or GGUF metadata.
// Implementations are immutable once built; every method is safe from any thread.
//
// Special tokens: "control" ids (chat markers such as <|im_end|>, <|eot_id|>, niels_gpt's four
// markers) are what IsSpecial() names. Encode() never produces one from text; EncodeRendered()
// reads their literals as the ids (a rendered chat template); Decode() drops them. Ids that are
// added but not special (Qwen3's <think>) are ordinary text for all three.

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace niels::daemon::text {

// The exact bytes one id adds to Decode()'s text. Structured output needs them: a grammar constrains
// exactly the text a client receives (daemon/engine/output_constraint.h builds the grammar room's
// Vocabulary from them).
//   - Byte-level BPE: every id in range but an unused or special one adds its fixed bytes
//     (BpeTokenizer::TokenBytes), wherever it stands: at_start == bytes.
//   - SentencePiece: an ordinary piece adds its piece string with every U+2581 read as a space; a
//     byte-fallback piece <0xNN> adds that one byte (a character may take several of them); a
//     special, control, unknown or unused id adds no fixed text. While the decoded text is still
//     empty, SentencePiece drops one leading U+2581 of a piece (its dummy-prefix rule): `at_start`
//     is what the id adds then.
// So for ids whose bytes make up valid UTF-8 (special ids anywhere between them):
//   Decode(ids) == at_start of each text id up to and including the first whose at_start is not
//                  empty, then `bytes` of every later text id.
// (One exception: a SentencePiece model that keeps extra whitespace ends the start at a lone U+2581
// piece although it adds nothing. An id that adds nothing is never sampled under a constraint, so
// this does not arise there.) text_test (token_bytes_test) checks the rule against both decoders.
// A byte range [begin, end) of a text.
struct TextRange {
  size_t begin = 0;
  size_t end = 0;
  bool operator==(const TextRange&) const = default;
};

// Whether [begin, end) overlaps one of `ranges` (sorted, disjoint). O(log ranges).
bool OverlapsAny(std::span<const TextRange> ranges, size_t begin, size_t end);

struct TextBytes {
  bool is_text = false;  // false: adds no fixed text (special, control, unknown, unused, out of range)
  std::string bytes;     // what the id adds after some text
  std::string at_start;  // what it adds while the decoded text is still empty
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // The number of ids, 0 .. vocab_size() - 1.
  virtual int32_t vocab_size() const = 0;

  // Plain text (a user's text, a Tokenize request): special-token literals inside it are encoded as
  // ordinary text, never as their ids. Errors only past an implementation's limits (INVALID_ARGUMENT
  // or RESOURCE_EXHAUSTED, with the reason); the text is never silently truncated.
  virtual common::StatusOr<std::vector<int32_t>> Encode(std::string_view text) const = 0;

  // Text a chat template rendered: special-token literals become their ids, the rest is encoded as
  // Encode() would (what transformers and llama.cpp do with a rendered prompt).
  virtual common::StatusOr<std::vector<int32_t>> EncodeRendered(std::string_view text) const = 0;

  // EncodeRendered(text), except that a special-token literal overlapping one of `plain` (sorted,
  // disjoint byte ranges of `text`) stays text: it is encoded together with the text around it, as
  // Encode() encodes text. A chat rendering whose message contents typed special-token literals
  // marks them so (JinjaChatFormat): only the template's own structure becomes special ids. With
  // `plain` empty this is EncodeRendered(text). Errors as EncodeRendered.
  virtual common::StatusOr<std::vector<int32_t>> EncodeRenderedKeepingText(std::string_view text,
                                                                           std::span<const TextRange> plain) const = 0;

  // The special-token literals EncodeRendered(text) reads as ids, each as the range of the literal
  // itself (not whitespace an lstrip/rstrip token takes with it), in order and disjoint. Costs what
  // EncodeRendered's search for literals costs. REQUIRES: text is valid UTF-8 (none are found
  // otherwise: a chat template refuses such text anyway).
  virtual std::vector<TextRange> FindSpecialLiterals(std::string_view text) const = 0;

  // The text of `ids`: special ids decode to nothing, out-of-range ids are skipped, and bytes that
  // do not form valid UTF-8 come out as U+FFFD.
  virtual std::string Decode(std::span<const int32_t> ids) const = 0;

  // The vocabulary's own string for `id` (a SentencePiece piece, a byte-level BPE token in its
  // byte-to-unicode alphabet); "" when out of range. For display (Tokenize, top logprobs).
  virtual std::string Piece(int32_t id) const = 0;

  // Whether `id` is a control token (see above). False when out of range.
  virtual bool IsSpecial(int32_t id) const = 0;

  // Whether `id` is an ordinary text id after which decoding restarts cleanly: in range, not
  // special, and (SentencePiece) not an unknown, unused or byte-fallback piece. The text of the ids
  // that follow such an id does not depend on the ids before it once some text exists (TextStream
  // relies on this).
  virtual bool IsTextPiece(int32_t id) const = 0;

  // What `id` adds to Decode()'s text (TextBytes above).
  virtual TextBytes Bytes(int32_t id) const = 0;
};

}  // namespace niels::daemon::text
