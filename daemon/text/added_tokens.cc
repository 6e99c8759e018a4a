#include "daemon/text/added_tokens.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <cstdlib>

namespace niels::daemon::text {
// Named, not anonymous: AddedTokenMatcher::CharClasses (external linkage) holds these as members.
namespace added_token_classes {

// One compiled single-character class, matched anchored at a position.
class CharClass {
 public:
  explicit CharClass(std::string_view pattern) {
    int error = 0;
    PCRE2_SIZE offset = 0;
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                          PCRE2_UTF | PCRE2_UCP | PCRE2_ANCHORED, &error, &offset, nullptr);
    if (code_ == nullptr) std::abort();  // a constant pattern: cannot fail
  }
  ~CharClass() { pcre2_code_free(code_); }
  CharClass(const CharClass&) = delete;
  CharClass& operator=(const CharClass&) = delete;

  // Whether the code point at text[pos] is in the class. REQUIRES: pos < text.size(). Match data
  // per call: the matcher is shared between threads (this runs only next to a flagged token).
  bool At(std::string_view text, size_t pos) const {
    pcre2_match_data* match = pcre2_match_data_create_from_pattern(code_, nullptr);
    if (match == nullptr) std::abort();  // out of memory
    const int rc = pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), pos,
                               PCRE2_NO_UTF_CHECK, match, nullptr);
    pcre2_match_data_free(match);
    return rc > 0;
  }

 private:
  pcre2_code* code_ = nullptr;
};

}  // namespace added_token_classes

namespace {

// Start of the code point that ends at `end` (end > 0).
size_t PreviousCodePoint(std::string_view text, size_t end) {
  size_t pos = end - 1;
  while (pos > 0 && (static_cast<uint8_t>(text[pos]) & 0xC0) == 0x80) --pos;
  return pos;
}

size_t CodePointLength(std::string_view text, size_t pos) {
  size_t n = 1;
  while (pos + n < text.size() && (static_cast<uint8_t>(text[pos + n]) & 0xC0) == 0x80) ++n;
  return n;
}

}  // namespace

// Rust regex's \s (White_Space) and \w, which Hugging Face's added-token code uses.
struct AddedTokenMatcher::CharClasses {
  using CharClass = added_token_classes::CharClass;
  CharClass space{R"(\p{White_Space})"};
  CharClass word{R"([\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\p{Join_Control}])"};
};

AddedTokenMatcher::AddedTokenMatcher(std::vector<Token> tokens) : tokens_(std::move(tokens)) {
  trie_.emplace_back();
  bool needs_classes = false;
  for (size_t t = 0; t < tokens_.size(); ++t) {
    const Token& token = tokens_[t];
    needs_classes |= token.flags.lstrip || token.flags.rstrip || token.flags.single_word;
    can_start_[static_cast<uint8_t>(token.content[0])] = true;
    int32_t node = 0;
    for (char c : token.content) {
      const auto byte = static_cast<uint8_t>(c);
      int32_t next = -1;
      for (const auto& [b, child] : trie_[static_cast<size_t>(node)].children) {
        if (b == byte) next = child;
      }
      if (next < 0) {
        next = static_cast<int32_t>(trie_.size());
        trie_[static_cast<size_t>(node)].children.emplace_back(byte, next);
        trie_.emplace_back();
      }
      node = next;
    }
    trie_[static_cast<size_t>(node)].token = static_cast<int32_t>(t);
  }
  if (needs_classes) classes_ = std::make_unique<CharClasses>();
}

AddedTokenMatcher::~AddedTokenMatcher() = default;

std::pair<size_t, int32_t> AddedTokenMatcher::LongestAt(std::string_view text, size_t pos) const {
  std::pair<size_t, int32_t> best{0, -1};
  int32_t node = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    const auto byte = static_cast<uint8_t>(text[i]);
    int32_t next = -1;
    for (const auto& [b, child] : trie_[static_cast<size_t>(node)].children) {
      if (b == byte) {
        next = child;
        break;
      }
    }
    if (next < 0) break;
    node = next;
    if (trie_[static_cast<size_t>(node)].token >= 0) best = {i + 1 - pos, trie_[static_cast<size_t>(node)].token};
  }
  return best;
}

bool AddedTokenMatcher::Accept(const Token& token, std::string_view text, size_t start, size_t stop,
                               bool parse_special, std::span<const TextRange> plain) const {
  if (token.special && (!parse_special || OverlapsAny(plain, start, stop))) return false;
  if (token.flags.single_word) {
    const bool word_before = start > 0 && classes_->word.At(text, PreviousCodePoint(text, start));
    const bool word_after = stop < text.size() && classes_->word.At(text, stop);
    if (word_before || word_after) return false;
  }
  return true;
}

void AddedTokenMatcher::Split(std::string_view text, bool parse_special, std::vector<Segment>* out,
                              std::span<const TextRange> plain) const {
  size_t emitted = 0;  // end of the last segment pushed (HF's start_offset)
  size_t pos = 0;
  while (pos < text.size()) {
    if (!can_start_[static_cast<uint8_t>(text[pos])]) {
      ++pos;
      continue;
    }
    const auto [length, index] = LongestAt(text, pos);
    if (index < 0) {
      ++pos;
      continue;
    }
    const Token& token = tokens_[static_cast<size_t>(index)];
    size_t start = pos, stop = pos + length;
    pos = stop;  // the next search starts after this match whatever becomes of it
    if (!Accept(token, text, start, stop, parse_special, plain)) continue;
    if (token.flags.lstrip) {
      while (start > emitted) {
        const size_t prev = PreviousCodePoint(text, start);
        if (!classes_->space.At(text, prev)) break;
        start = prev;
      }
    }
    if (token.flags.rstrip) {
      while (stop < text.size() && classes_->space.At(text, stop)) stop += CodePointLength(text, stop);
    }
    if (emitted < start) out->push_back({emitted, start, -1});
    out->push_back({start, stop, token.id});
    emitted = stop;
  }
  if (emitted < text.size()) out->push_back({emitted, text.size(), -1});
}

}  // namespace niels::daemon::text
