#pragma once
// AddedTokenMatcher: finds a tokenizer's added tokens (<|im_start|>, <think>, ...) in text before
// it is pre-tokenized, the way Hugging Face tokenizers' AddedVocabulary does:
//  - the search is leftmost-longest and non-overlapping: the match starting first wins, the longest
//    one among those starting there, and the next search starts where it ends;
//  - a special token (kControl) found while special tokens are not parsed is left as text, and so
//    is a single_word token with a word character (Alphabetic, Mark, Nd, Pc, Join_Control: Rust's
//    \w) right before or after it; the search still resumes after either;
//  - lstrip / rstrip widen a match over the whitespace (White_Space) before / after it, never back
//    into the previous match.
// Matching costs O(text length x longest added token) at most; positions whose byte cannot start a
// token are skipped at once.
//
// Immutable after construction; Split is safe from any number of threads at once.

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/text/bpe_spec.h"
#include "daemon/text/tokenizer.h"

namespace niels::daemon::text {

class AddedTokenMatcher {
 public:
  struct Token {
    int32_t id = 0;
    std::string content;  // what is matched
    bool special = false;
    AddedTokenFlags flags;
  };
  // A piece of the text: an added token (id >= 0, [begin, end) the text it covers, whitespace that
  // lstrip/rstrip took included) or text between tokens (id == -1).
  struct Segment {
    size_t begin;
    size_t end;
    int32_t id;
  };

  // REQUIRES: every content non-empty and distinct.
  explicit AddedTokenMatcher(std::vector<Token> tokens);
  ~AddedTokenMatcher();
  AddedTokenMatcher(const AddedTokenMatcher&) = delete;
  AddedTokenMatcher& operator=(const AddedTokenMatcher&) = delete;

  bool empty() const { return tokens_.empty(); }

  // Appends the segments of `text` to *out, in order. They cover `text` (a segment may overlap the
  // one before it only where an rstrip token took whitespace that starts the next token, as in
  // Hugging Face). With parse_special, a special token whose text overlaps one of `plain` (sorted,
  // disjoint byte ranges of `text`) is left as text all the same. REQUIRES: text is valid UTF-8.
  void Split(std::string_view text, bool parse_special, std::vector<Segment>* out,
             std::span<const TextRange> plain = {}) const;

 private:
  struct CharClasses;
  // Length of the longest token starting at text[pos] and its index in tokens_, or {0, -1}.
  std::pair<size_t, int32_t> LongestAt(std::string_view text, size_t pos) const;
  bool Accept(const Token& token, std::string_view text, size_t start, size_t stop, bool parse_special,
              std::span<const TextRange> plain) const;

  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> children;  // byte -> node index
    int32_t token = -1;                                  // index in tokens_ ending here
  };
  std::vector<Token> tokens_;
  std::vector<Node> trie_;
  std::array<bool, 256> can_start_{};
  std::unique_ptr<CharClasses> classes_;  // only when a token has lstrip, rstrip or single_word
};

}  // namespace niels::daemon::text
