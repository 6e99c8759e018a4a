// UTF-8 repair by maximal subparts, against the Unicode Standard's own examples (chapter 3,
// "U+FFFD Substitution of Maximal Subparts", tables 3-8 to 3-11) and the byte ranges of table 3-7.
#include "daemon/text/utf8_repair.h"

#include <gtest/gtest.h>

namespace niels::daemon::text {
namespace {
namespace utf8_repair_test {  // this file's own names: the suite compiles as one unity unit

const std::string kR = "\xEF\xBF\xBD";  // U+FFFD

struct Case {
  std::string input;
  std::string repaired;
};

TEST(Utf8RepairTest, ReplacesEachMaximalSubpart) {
  const Case cases[] = {
      // Table 3-8: a truncated 4-byte sequence, a truncated 3-byte one, a lone lead, stray trails.
      {"\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64", "a" + kR + kR + kR + "b" + kR + "c" + kR + kR + "d"},
      // Table 3-9: bytes that never start a sequence.
      {"\x61\xC0\xAF\x62", "a" + kR + kR + "b"},
      {"\xF8\x88\x80\x80\x80", kR + kR + kR + kR + kR},
      // Table 3-10: surrogates (ED A0..BF) and overlongs (E0 80..9F, F0 80..8F).
      {"\x61\xED\xA0\x80\x62", "a" + kR + kR + kR + "b"},
      {"\xE0\x80\xAF", kR + kR + kR},
      {"\xF0\x80\x80\xAF", kR + kR + kR + kR},
      // Table 3-11: truncated sequences.
      {"\x61\xF1\x80\x80\x62", "a" + kR + "b"},
      {"\xE1\x80", kR},
      // Above U+10FFFF, and F5..FF.
      {"\xF4\x90\x80\x80", kR + kR + kR + kR},
      {"\xF5\xFF\xFE", kR + kR + kR},
      // Well-formed: the edges of every range stay as they are.
      {"\x7F\xC2\x80\xDF\xBF\xE0\xA0\x80\xED\x9F\xBF\xEE\x80\x80\xF0\x90\x80\x80\xF4\x8F\xBF\xBF",
       "\x7F\xC2\x80\xDF\xBF\xE0\xA0\x80\xED\x9F\xBF\xEE\x80\x80\xF0\x90\x80\x80\xF4\x8F\xBF\xBF"},
      {"", ""},
      {kR, kR},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(RepairUtf8(c.input), c.repaired) << "input of " << c.input.size() << " bytes";
    EXPECT_EQ(IsValidUtf8(c.input), c.input == c.repaired);
    EXPECT_TRUE(IsValidUtf8(RepairUtf8(c.input)));
  }
}

TEST(Utf8RepairTest, ValidPrefixAndSequenceLengths) {
  EXPECT_EQ(ValidUtf8PrefixLength("abcdefghij\xE4\xB8"), 10u);
  EXPECT_EQ(ValidUtf8PrefixLength("abcdefghijklmnopq\x80"), 17u);
  EXPECT_EQ(ValidUtf8PrefixLength("\xE4\xB8\xAD"), 3u);
  EXPECT_EQ(WellFormedSequenceLength("\xF0\x9F\x98\x80", 0), 4u);
  EXPECT_EQ(WellFormedSequenceLength("\xF0\x9F\x98", 0), 0u);
  EXPECT_EQ(WellFormedSequenceLength("a\xC3\xA9", 1), 2u);
  EXPECT_EQ(WellFormedSequenceLength("\x80", 0), 0u);
}

}  // namespace utf8_repair_test
}  // namespace
}  // namespace niels::daemon::text
