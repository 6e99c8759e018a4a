#pragma once
// BpeTokenizer: the byte-level BPE tokenizer of the Llama 3.x, Qwen2.5 and Qwen3 models, with the
// behaviour of Hugging Face tokenizers for their tokenizer.json files. Built from a BpeSpec, which
// a tokenizer.json (daemon/text/tokenizer_json.h) or a GGUF file's metadata fills.
//
// Encode, step by step:
//  1. Invalid UTF-8 is repaired first: each maximal ill-formed subpart becomes U+FFFD
//     (daemon/text/utf8_repair.h), as a TextDecoder or Python's errors="replace" would decode it.
//  2. Added tokens are found in the text (daemon/text/added_tokens.h); special ones only when the
//     caller parses special tokens, non-special ones (Qwen3's <think>) always.
//  3. The text between them is normalized (NFC for Qwen), split into pre-tokens by the
//     pre-tokenizer's regexes (daemon/text/pre_tokenizer.h), and each pre-token's UTF-8 bytes are
//     merged by BPE (daemon/text/bpe_model.h). No BOS or EOS is ever added.
//
// Decoding: every id stands for a fixed byte string, TokenBytes(id): the bytes its byte-level
// piece spells, or an added token's text (as Hugging Face's ByteLevel decoder treats it: text
// spelled wholly in the byte-level alphabet stands for the bytes it spells). Decode(ids) is the
// concatenation of the kept ids' bytes with each maximal invalid UTF-8 subpart replaced by
// U+FFFD. So a streaming detokenizer can append TokenBytes of each new id and hand out the
// longest complete UTF-8 prefix, in O(n) over the whole stream.
// Decode(Encode(x)) == x for valid UTF-8 x, except where the normalizer changes x (Qwen: text not
// in NFC comes back in NFC), where a special literal was parsed and then skipped, and where an
// added token with lstrip/rstrip took whitespace (none of the Llama 3.x / Qwen tokens does).
//
// Immutable after Create(); every const method is safe from any number of threads at once.

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "daemon/text/added_tokens.h"
#include "daemon/text/bpe_model.h"
#include "daemon/text/bpe_spec.h"
#include "daemon/text/pre_tokenizer.h"
#include "daemon/text/tokenizer.h"

namespace niels::daemon::text {

class BpeTokenizer final : public Tokenizer {
 public:
  // Largest vocabulary (ids 0 .. kMaxVocabSize-1) and largest text Encode accepts.
  static constexpr size_t kMaxVocabSize = size_t{1} << 22;
  static constexpr size_t kMaxTextBytes = size_t{1} << 30;

  ~BpeTokenizer() override;
  BpeTokenizer(const BpeTokenizer&) = delete;
  BpeTokenizer& operator=(const BpeTokenizer&) = delete;

  // Builds the tokenizer. INVALID_ARGUMENT naming what is wrong if: the vocabulary is empty or
  // larger than kMaxVocabSize; pieces and types differ in length; a merge names a piece that is not
  // in the vocabulary or merges into one that is not; an added-flags, unk, bos, eos or pad id is out
  // of range (or flags a token that is not an added token); a split pattern does not compile.
  // An added token with empty text is never matched; of two with the same text the lower id is.
  static common::StatusOr<std::unique_ptr<BpeTokenizer>> Create(BpeSpec spec);

  // The ids of `text`. With parse_special, special-token literals ("<|im_start|>") become their
  // ids (what a rendered chat template needs); without, they are encoded as ordinary text (what
  // user content needs). Non-special added tokens are matched either way.
  // INVALID_ARGUMENT if text is longer than kMaxTextBytes; RESOURCE_EXHAUSTED if a split regex
  // exceeds its match limit (see PreTokenizer::Split).
  common::StatusOr<std::vector<int32_t>> Encode(std::string_view text, bool parse_special) const;

  // The text of `ids`: the concatenated TokenBytes of each id in range (and, with skip_special,
  // not special), with invalid UTF-8 repaired. Out-of-range ids are skipped.
  std::string Decode(std::span<const int32_t> ids, bool skip_special) const;

  // Tokenizer: Encode(text, false), Encode(text, true), Decode(ids, true).
  common::StatusOr<std::vector<int32_t>> Encode(std::string_view text) const override { return Encode(text, false); }
  common::StatusOr<std::vector<int32_t>> EncodeRendered(std::string_view text) const override {
    return Encode(text, true);
  }
  // Encode(text, true) with the special literals that overlap `plain` left as text. A normalized
  // special token (matched after NFC) is read as text in every gap between raw added tokens that
  // overlaps `plain` (its offsets there are those of the normalized text). Text that is not valid
  // UTF-8 is repaired and then encoded as Encode(text, false) when `plain` is not empty.
  common::StatusOr<std::vector<int32_t>> EncodeRenderedKeepingText(std::string_view text,
                                                                   std::span<const TextRange> plain) const override;
  // The special added tokens the raw matcher finds with parse_special, then the normalized ones in
  // the gaps between them (on the text as given: a literal only NFC would form is not found).
  std::vector<TextRange> FindSpecialLiterals(std::string_view text) const override;
  std::string Decode(std::span<const int32_t> ids) const override { return Decode(ids, true); }
  // Every id in range but an unused or special one: each decodes to its own fixed bytes.
  bool IsTextPiece(int32_t id) const override;
  // TokenBytes(id) at the start and after text alike, for the ids IsTextPiece names.
  TextBytes Bytes(int32_t id) const override;

  // The bytes id stands for ("" when out of range or unused). The view lives as long as *this.
  std::string_view TokenBytes(int32_t id) const;
  // The piece of id as the file spells it ("Ġthe", "<|im_start|>"); "" when out of range.
  std::string Piece(int32_t id) const override;
  // The id of a piece (an added token's text, or a vocabulary piece in byte-level spelling).
  std::optional<int32_t> TokenId(std::string_view piece) const;

  // kUnused when out of range.
  TokenType type(int32_t id) const;
  // A special added token (kControl): skipped by Decode(skip_special), matched by Encode only
  // with parse_special. These are the ids a sampler should treat as control tokens.
  bool IsSpecial(int32_t id) const override { return type(id) == TokenType::kControl; }
  // Any added token (kControl or kUserDefined).
  bool IsAdded(int32_t id) const;

  int32_t vocab_size() const override { return static_cast<int32_t>(pieces_.size()); }
  const SpecialTokenIds& special_ids() const { return special_; }
  const std::string& chat_template() const { return chat_template_; }

 private:
  BpeTokenizer() = default;
  common::Status BuildTokenBytes();
  common::Status BuildAddedTokens(const std::vector<std::pair<int32_t, AddedTokenFlags>>& flags);
  // Encodes text between added tokens.
  common::Status EncodeGap(std::string_view gap, bool parse_special, BpeModel::Scratch* scratch,
                           std::vector<int32_t>* ids) const;
  common::StatusOr<std::vector<int32_t>> EncodeWithPlain(std::string_view text, bool parse_special,
                                                         std::span<const TextRange> plain) const;
  common::Status EncodeNormalized(std::string_view text, BpeModel::Scratch* scratch,
                                  std::vector<int32_t>* ids) const;

  std::vector<std::string> pieces_;
  std::vector<TokenType> types_;
  std::string token_bytes_;              // TokenBytes of every id, back to back
  std::vector<uint32_t> bytes_offsets_;  // id -> start in token_bytes_; one extra at the end
  std::unique_ptr<BpeModel> model_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<AddedTokenMatcher> raw_tokens_;         // matched in the text as given
  std::unique_ptr<AddedTokenMatcher> normalized_tokens_;  // matched after normalization
  std::unordered_map<std::string_view, int32_t> added_ids_;  // added token text -> id
  std::unordered_map<int32_t, std::string> normalized_text_;  // normalized added tokens NFC changes
  SpecialTokenIds special_;
  std::string chat_template_;
};

}  // namespace niels::daemon::text
