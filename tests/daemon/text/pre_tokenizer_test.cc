// PreTokenizer: the Llama 3 and Qwen split patterns run by PCRE2 with Oniguruma's meaning (the
// engine of Hugging Face tokenizers). Expected pieces are worked out by hand from the patterns and
// Oniguruma's documented semantics: \s is White_Space (U+0085 included, U+FEFF not) and (?i)
// folds case by Unicode (so 's also matches U+017F LONG S). Also: long runs split without hitting
// the match limit, and a bad pattern is refused with its index.
#include "daemon/text/pre_tokenizer.h"

#include <gtest/gtest.h>

namespace niels::daemon::text {
namespace {
namespace pre_tokenizer_test {  // this file's own names: the suite compiles as one unity unit

std::vector<std::string> Split(std::string_view name, std::string_view text) {
  auto setup = PreTokenizerForGgufName(name);
  EXPECT_TRUE(setup.ok());
  auto pre = PreTokenizer::Create(*setup);
  EXPECT_TRUE(pre.ok()) << pre.status().ToString();
  std::vector<std::string_view> pieces;
  const auto status = (*pre)->Split(text, &pieces);
  EXPECT_TRUE(status.ok()) << status.ToString();
  return {pieces.begin(), pieces.end()};
}

using Pieces = std::vector<std::string>;

TEST(PreTokenizerTest, SplitsLikeTheLlama3Pattern) {
  EXPECT_EQ(Split("llama-bpe", "Hello world, it's 12345!"),
            (Pieces{"Hello", " world", ",", " it", "'s", " ", "123", "45", "!"}));
  EXPECT_EQ(Split("llama-bpe", "I'M HERE'LL"), (Pieces{"I", "'M", " HERE", "'LL"}));
  EXPECT_EQ(Split("llama-bpe", "a  \n\n b\t"), (Pieces{"a", "  \n\n", " b", "\t"}));
  EXPECT_EQ(Split("llama-bpe", "x\r\n\r\ny"), (Pieces{"x", "\r\n\r\n", "y"}));
  EXPECT_EQ(Split("llama-bpe", "   x"), (Pieces{"  ", " x"}));
  EXPECT_EQ(Split("llama-bpe", "\xE4\xBD\xA0\xE5\xA5\xBD!!\n"), (Pieces{"\xE4\xBD\xA0\xE5\xA5\xBD", "!!\n"}));
}

TEST(PreTokenizerTest, QwenTakesDigitsOneByOne) {
  EXPECT_EQ(Split("qwen2", "x 2024"), (Pieces{"x", " ", "2", "0", "2", "4"}));
  EXPECT_EQ(Split("llama-bpe", "x 2024"), (Pieces{"x", " ", "202", "4"}));
  // Other numbers (\p{N}): Arabic-Indic digits, superscripts, fractions.
  EXPECT_EQ(Split("llama-bpe", "\xD9\xA1\xD9\xA2\xC2\xB2\xC2\xBD"), (Pieces{"\xD9\xA1\xD9\xA2\xC2\xB2", "\xC2\xBD"}));
}

TEST(PreTokenizerTest, WhitespaceIsOnigurumasWhiteSpace) {
  // U+0085 NEXT LINE is \s for Oniguruma: "x", then two whitespace pieces, then "!". PCRE2's own
  // \s would leave U+0085 to the punctuation branch: one piece "\u0085\u0085!".
  EXPECT_EQ(Split("llama-bpe", "x\xC2\x85\xC2\x85!"), (Pieces{"x", "\xC2\x85", "\xC2\x85", "!"}));
  // U+FEFF is no whitespace for Oniguruma (JavaScript's \s would take it): one punctuation piece.
  EXPECT_EQ(Split("llama-bpe", "x\xEF\xBB\xBF\xEF\xBB\xBF!"), (Pieces{"x", "\xEF\xBB\xBF\xEF\xBB\xBF!"}));
  // NBSP and U+3000 are whitespace everywhere.
  EXPECT_EQ(Split("qwen2", "a\xC2\xA0\xE3\x80\x80" "b"), (Pieces{"a", "\xC2\xA0", "\xE3\x80\x80" "b"}));
}

TEST(PreTokenizerTest, ContractionsFoldCaseByUnicode) {
  EXPECT_EQ(Split("llama-bpe", "'St"), (Pieces{"'S", "t"}));
  EXPECT_EQ(Split("llama-bpe", "'\xC5\xBFt"), (Pieces{"'\xC5\xBF", "t"}));  // 'ſt: LONG S folds to s
  EXPECT_EQ(Split("llama-bpe", "'Xt"), (Pieces{"'Xt"}));
}

TEST(PreTokenizerTest, TranslatesOnlyTheEscapesThatDiffer) {
  EXPECT_EQ(PreTokenizer::TranslatePattern(R"([^\s\p{L}]\S\h\d\\s)"),
            R"([^\p{White_Space}\p{L}]\P{White_Space}\p{ASCII_Hex_Digit}\d\\s)");
}

TEST(PreTokenizerTest, LongRunsSplitWithinTheMatchLimit) {
  for (const std::string& unit : {std::string(" "), std::string("\n"), std::string("\t"), std::string("a"),
                                  std::string("1"), std::string("!"), std::string(" a"), std::string("\r\n"),
                                  std::string(" \n"), std::string("\xE4\xB8\xAD"), std::string("'s")}) {
    std::string text;
    while (text.size() < (size_t{1} << 20)) text += unit;
    text += "x";
    for (const char* name : {"llama-bpe", "qwen2"}) {
      auto pre = PreTokenizer::Create(*PreTokenizerForGgufName(name));
      ASSERT_TRUE(pre.ok());
      std::vector<std::string_view> pieces;
      const auto status = (*pre)->Split(text, &pieces);
      ASSERT_TRUE(status.ok()) << status.ToString();
      size_t covered = 0;
      for (auto piece : pieces) covered += piece.size();
      EXPECT_EQ(covered, text.size());
    }
  }
}

TEST(PreTokenizerTest, EmptyMatchesAndGapsAreHandled) {
  auto pre = PreTokenizer::Create({{"a*", "b"}, Normalization::kNone});  // "a*" matches empty strings
  ASSERT_TRUE(pre.ok());
  std::vector<std::string_view> pieces;
  ASSERT_TRUE((*pre)->Split("xaab\xC3\xA9" "b", &pieces).ok());
  EXPECT_EQ(std::vector<std::string>(pieces.begin(), pieces.end()),
            (Pieces{"x", "aa", "b", "\xC3\xA9", "b"}));
}

TEST(PreTokenizerTest, RefusesAPatternThatDoesNotCompile) {
  auto pre = PreTokenizer::Create({{"ok", "(unclosed"}, Normalization::kNone});
  ASSERT_FALSE(pre.ok());
  EXPECT_NE(pre.status().message().find("split pattern 1 does not compile"), std::string::npos);
}

TEST(PreTokenizerTest, ReportsARegexThatBacktracksWithoutBound) {
  auto pre = PreTokenizer::Create({{"(a+)+$"}, Normalization::kNone});
  ASSERT_TRUE(pre.ok());
  std::vector<std::string_view> pieces;
  std::string text(40, 'a');
  text.push_back('!');  // (not string + "!": GCC 12 warns falsely of -Warray-bounds on that)
  const auto status = (*pre)->Split(text, &pieces);
  EXPECT_EQ(status.code(), common::StatusCode::kResourceExhausted) << status.ToString();
}

TEST(PreTokenizerTest, NfcComposes) {
  std::string out;
  AppendNfc("e\xCC\x81 A\xCC\x8A \xE2\x84\xAB \xE1\x84\x80\xE1\x85\xA1 plain", &out);
  EXPECT_EQ(out, "\xC3\xA9 \xC3\x85 \xC3\x85 \xEA\xB0\x80 plain");  // é Å Å(from U+212B) 가
}

}  // namespace pre_tokenizer_test
}  // namespace
}  // namespace niels::daemon::text
