#pragma once
// PreTokenizer: cuts normalized text into pre-tokens with the Split regexes of a tokenizer
// (Hugging Face's Split pre-tokenizer with the "Isolated" behaviour: every match is a piece and so
// is the text between two matches), before BPE runs on each piece.
//
// The patterns are written for Oniguruma, the engine of Hugging Face tokenizers; PCRE2 runs them
// (UTF and Unicode-property mode, JIT-compiled when the machine allows). Where the two engines
// read the same escape differently it is translated: `\s` / `\S` become `\p{White_Space}` /
// `\P{White_Space}` (PCRE2's own \s leaves out U+0085 NEXT LINE, Oniguruma's includes it), and `\h`
// / `\H` (a hex digit in Oniguruma's Ruby syntax) become `\p{ASCII_Hex_Digit}` and its negation.
// Case-insensitive groups fold case by Unicode rules in both (so `(?i:'s)` matches "'ſ", U+017F).
//
// Immutable after Create(); Split() is safe from any number of threads at once.

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "daemon/text/bpe_spec.h"

namespace niels::daemon::text {

class PreTokenizer {
 public:
  ~PreTokenizer();
  PreTokenizer(const PreTokenizer&) = delete;
  PreTokenizer& operator=(const PreTokenizer&) = delete;

  // Compiles the split patterns of `setup` (none: the whole text is one piece). INVALID_ARGUMENT
  // naming the pattern's index, the offset in it and PCRE2's message if one does not compile.
  static common::StatusOr<std::unique_ptr<PreTokenizer>> Create(const PreTokenizerSetup& setup);

  // Appends the pre-tokens of `text`, views into it, in order, to *pieces; they cover `text`
  // exactly, none is empty. RESOURCE_EXHAUSTED if a pattern exceeds PCRE2's match limit on this
  // text (a pattern that backtracks without bound; the patterns of known models never do).
  // REQUIRES: text is valid UTF-8.
  common::Status Split(std::string_view text, std::vector<std::string_view>* pieces) const;

  Normalization normalization() const { return normalization_; }

  // `pattern` with the escapes above rewritten for PCRE2 (exposed for tests).
  static std::string TranslatePattern(std::string_view pattern);

 private:
  struct Compiled;
  PreTokenizer() = default;
  common::Status SplitOne(const Compiled& regex, std::string_view text,
                          std::vector<std::string_view>* pieces) const;

  std::vector<std::unique_ptr<Compiled>> regexes_;
  Normalization normalization_ = Normalization::kNone;
};

// Appends the NFC form of `text` to *out (utf8proc). REQUIRES: text is valid UTF-8.
void AppendNfc(std::string_view text, std::string* out);

}  // namespace niels::daemon::text
