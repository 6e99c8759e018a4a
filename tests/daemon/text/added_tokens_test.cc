// AddedTokenMatcher against the rules of Hugging Face tokenizers' AddedVocabulary::find_matches
// (leftmost-longest, non-overlapping; special tokens left as text unless parsed; single_word with
// Rust's \w; lstrip/rstrip over White_Space, never into the previous match). Expected segments are
// worked out by hand from those rules.
#include "daemon/text/added_tokens.h"

#include <gtest/gtest.h>

namespace niels::daemon::text {
namespace {
namespace added_tokens_test {  // this file's own names: the suite compiles as one unity unit

using Token = AddedTokenMatcher::Token;

// Renders segments as "text|[id:text]|text" for compact comparisons.
std::string Render(const AddedTokenMatcher& matcher, std::string_view text, bool parse_special) {
  std::vector<AddedTokenMatcher::Segment> segments;
  matcher.Split(text, parse_special, &segments);
  std::string out;
  for (const auto& s : segments) {
    if (!out.empty()) out += "|";
    const std::string covered(text.substr(s.begin, s.end - s.begin));
    if (s.id < 0) {
      out += covered;
    } else {
      out.append("[").append(std::to_string(s.id)).append(":").append(covered).append("]");
    }
  }
  return out;
}

TEST(AddedTokensTest, LeftmostThenLongest) {
  const AddedTokenMatcher m({{1, "<a>", false, {}}, {2, "<a><b>", false, {}}, {3, "b>", false, {}},
                             {4, "ab", false, {}}, {5, "bcd", false, {}}});
  EXPECT_EQ(Render(m, "x<a><b>y", true), "x|[2:<a><b>]|y");
  EXPECT_EQ(Render(m, "x<a><c>", true), "x|[1:<a>]|<c>");
  EXPECT_EQ(Render(m, "abcd", true), "[4:ab]|cd");  // "ab" starts first; "bcd" overlaps it
  EXPECT_EQ(Render(m, "xbcd", true), "x|[5:bcd]");
  EXPECT_EQ(Render(m, "", true), "");
  EXPECT_EQ(Render(m, "<a", true), "<a");
}

TEST(AddedTokensTest, SpecialTokensAreTextUnlessParsed) {
  const AddedTokenMatcher m({{7, "<|im_start|>", true, {}}, {8, "<think>", false, {}}, {9, "x", false, {}}});
  EXPECT_EQ(Render(m, "a<|im_start|>b", true), "a|[7:<|im_start|>]|b");
  EXPECT_EQ(Render(m, "a<|im_start|>b", false), "a<|im_start|>b");
  // A non-special token is matched either way.
  EXPECT_EQ(Render(m, "<think>hi", false), "[8:<think>]|hi");
  // The skipped special match still ends the search there: the "x" inside it stays text.
  EXPECT_EQ(Render(m, "<|im_start|>", false), "<|im_start|>");
  EXPECT_EQ(Render(m, "a x", false), "a |[9:x]");
}

TEST(AddedTokensTest, SingleWordNeedsNoWordCharacterAround) {
  const AddedTokenMatcher m({{1, "[W]", false, {.single_word = true}}});
  EXPECT_EQ(Render(m, "a [W] b", true), "a |[1:[W]]| b");
  EXPECT_EQ(Render(m, "[W]", true), "[1:[W]]");
  EXPECT_EQ(Render(m, "![W]!", true), "!|[1:[W]]|!");
  EXPECT_EQ(Render(m, "a[W] b", true), "a[W] b");
  EXPECT_EQ(Render(m, "a [W]b", true), "a [W]b");
  EXPECT_EQ(Render(m, "\xC3\xA9[W]", true), "\xC3\xA9[W]");      // é is Alphabetic
  EXPECT_EQ(Render(m, "_[W]", true), "_[W]");                     // '_' is Pc
  EXPECT_EQ(Render(m, "\xD9\xA3[W]", true), "\xD9\xA3[W]");      // Arabic-Indic three is Nd
  EXPECT_EQ(Render(m, "e\xCC\x81[W]", true), "e\xCC\x81[W]");    // a combining mark is \w too
  EXPECT_EQ(Render(m, "\xE2\x80\x94[W]", true), "\xE2\x80\x94|[1:[W]]");  // an em dash is not
}

TEST(AddedTokensTest, LstripTakesWhitespaceBeforeButNotThePreviousMatch) {
  const AddedTokenMatcher m({{1, "[L]", false, {.lstrip = true}}, {2, "<x>", false, {}}});
  EXPECT_EQ(Render(m, "a  [L]b", true), "a|[1:  [L]]|b");
  EXPECT_EQ(Render(m, " \t\n[L]", true), "[1: \t\n[L]]");
  EXPECT_EQ(Render(m, "a\xE3\x80\x80[L]", true), "a|[1:\xE3\x80\x80[L]]");  // U+3000 is White_Space
  EXPECT_EQ(Render(m, "[L] [L]", true), "[1:[L]]|[1: [L]]");
  EXPECT_EQ(Render(m, "<x> [L]", true), "[2:<x>]|[1: [L]]");
  EXPECT_EQ(Render(m, "a\xE2\x80\x8B[L]", true), "a\xE2\x80\x8B|[1:[L]]");  // U+200B is not White_Space
}

TEST(AddedTokensTest, RstripTakesWhitespaceAfter) {
  const AddedTokenMatcher m({{1, "[R]", false, {.rstrip = true}}});
  EXPECT_EQ(Render(m, "[R]  b", true), "[1:[R]  ]|b");
  EXPECT_EQ(Render(m, "a[R]\xC2\xA0\xC2\x85x", true), "a|[1:[R]\xC2\xA0\xC2\x85]|x");  // NBSP, NEL
  EXPECT_EQ(Render(m, "[R]", true), "[1:[R]]");
  EXPECT_EQ(Render(m, "[R][R] ", true), "[1:[R]]|[1:[R] ]");
}

}  // namespace added_tokens_test
}  // namespace
}  // namespace niels::daemon::text
