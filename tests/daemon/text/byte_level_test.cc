// The byte-level alphabet: GPT-2's bytes_to_unicode (printable Latin-1 bytes stand for themselves,
// the other 68 map to U+0100.. in byte order), checked against its definition and against the real
// vocabularies, whose first 256 pieces are that alphabet.
#include "daemon/text/byte_level.h"

#include <set>

#include <gtest/gtest.h>

#include "tests/daemon/text/reference_tokenizers.h"

namespace niels::daemon::text {
namespace {
namespace byte_level_test {  // this file's own names: the suite compiles as one unity unit

TEST(ByteLevelTest, IsGpt2sBytesToUnicode) {
  std::set<char32_t> seen;
  char32_t next_shifted = 0x100;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    const char32_t expected = printable ? char32_t(b) : next_shifted++;
    EXPECT_EQ(ByteToCodePoint(static_cast<uint8_t>(b)), expected) << b;
    EXPECT_EQ(CodePointToByte(expected), std::optional<uint8_t>(static_cast<uint8_t>(b)));
    seen.insert(ByteToCodePoint(static_cast<uint8_t>(b)));
  }
  EXPECT_EQ(seen.size(), 256u);
  EXPECT_EQ(next_shifted, char32_t{0x144});
  EXPECT_EQ(ByteToCodePoint(' '), char32_t{0x120});   // 'Ġ'
  EXPECT_EQ(ByteToCodePoint('\n'), char32_t{0x10A});  // 'Ċ'
  EXPECT_FALSE(CodePointToByte(0x144));
  EXPECT_FALSE(CodePointToByte(' '));
  EXPECT_FALSE(CodePointToByte(0xAD));
}

TEST(ByteLevelTest, SpellsAndDecodes) {
  std::string spelled;
  AppendByteLevel(std::string("a b\n\xE4\xB8\xAD", 7), &spelled);
  EXPECT_EQ(spelled, "a\xC4\xA0" "b\xC4\x8A\xC3\xA4\xC2\xB8\xC5\x83");  // "aĠbĊä¸Ń": 0xAD is the last shifted byte
  EXPECT_EQ(DecodeByteLevel(spelled), std::string("a b\n\xE4\xB8\xAD", 7));
  for (int b = 0; b < 256; ++b) {
    std::string one;
    const char c = static_cast<char>(b);
    AppendByteLevel(std::string_view(&c, 1), &one);
    EXPECT_EQ(DecodeByteLevel(one), std::string(1, c));
  }
  EXPECT_FALSE(DecodeByteLevel("a b"));               // a raw space is not in the alphabet
  EXPECT_FALSE(DecodeByteLevel("\xE4\xB8\xAD"));      // nor is a CJK character
  EXPECT_FALSE(DecodeByteLevel("\xC1\xA1"));          // an overlong 'a'
  EXPECT_FALSE(DecodeByteLevel("\xC4"));              // truncated
  std::string out = "keep";
  EXPECT_FALSE(AppendDecodedByteLevel("ok\xE4\xB8\xAD", &out));
  EXPECT_EQ(out, "keep");
}

TEST(ByteLevelTest, RealVocabulariesSpellEveryByteWithTheirFirstPieces) {
  for (const char* name : {"qwen3", "llama3"}) {
    const auto tokenizer = testing::LoadReferenceTokenizer(name);
    ASSERT_NE(tokenizer, nullptr);
    std::set<int32_t> ids;
    for (int b = 0; b < 256; ++b) {
      std::string piece;
      const char c = static_cast<char>(b);
      AppendByteLevel(std::string_view(&c, 1), &piece);
      const auto id = tokenizer->TokenId(piece);
      ASSERT_TRUE(id.has_value()) << name << " byte " << b;
      EXPECT_EQ(tokenizer->TokenBytes(*id), std::string(1, c));
      ids.insert(*id);
    }
    EXPECT_EQ(*ids.rbegin(), 255) << name << ": the alphabet is ids 0..255";
  }
}

}  // namespace byte_level_test
}  // namespace
}  // namespace niels::daemon::text
