// TextStream: streamed text pieces add up to the decoded reply; partial UTF-8 is held back.
#include "daemon/text/text_stream.h"

#include <gtest/gtest.h>

#include <random>

#include "daemon/text/sentencepiece_tokenizer.h"
#include "tests/support/test_model.h"

namespace niels::daemon::text {
namespace {
namespace text_stream_test {  // this file's own names: the suite compiles as one unity unit

TEST(CompleteUtf8PrefixTest, HoldsBackIncompleteTails) {
  struct Case {
    std::string text;
    std::string expected;
  };
  const Case cases[] = {
      {"", ""},
      {"abc", "abc"},
      {"caf\xC3\xA9", "caf\xC3\xA9"},          // complete 2-byte sequence
      {"caf\xC3", "caf"},                      // lead byte of 2 alone
      {"x\xE2\x82", "x"},                      // 2 of 3 bytes
      {"x\xE2\x82\xAC", "x\xE2\x82\xAC"},      // euro sign, complete
      {"x\xF0\x9F\x98", "x"},                  // 3 of 4 bytes
      {"x\xF0\x9F\x98\x80", "x\xF0\x9F\x98\x80"},
      {"ok\xEF\xBF\xBD", "ok"},                // U+FFFD from byte fallback
      {"ok\xEF\xBF\xBD\xEF\xBF\xBD", "ok"},
      {"\xEF\xBF\xBD" "a", "\xEF\xBF\xBD" "a"},  // only trailing ones are held
  };
  for (const Case& c : cases) EXPECT_EQ(CompleteUtf8Prefix(c.text), c.expected) << c.text;
}

class TextStreamTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new niels::testing::TempDir("niels_text_stream_");
    niels::testing::TrainTinyTokenizer(*dir_ / "tokenizer.model");
    tokenizer_ = text::SentencePieceTokenizer::Load(*dir_ / "tokenizer.model").value().release();
  }
  static void TearDownTestSuite() {
    delete tokenizer_;
    delete dir_;
  }
  static niels::testing::TempDir* dir_;
  static text::SentencePieceTokenizer* tokenizer_;
};
niels::testing::TempDir* TextStreamTest::dir_ = nullptr;
text::SentencePieceTokenizer* TextStreamTest::tokenizer_ = nullptr;

TEST_F(TextStreamTest, PiecesConcatenateToTheDecodedText) {
  std::vector<std::string> texts = niels::testing::TinyCorpus();
  texts.push_back("na\xC3\xAFve caf\xC3\xA9 \xE2\x82\xAC 5 \xF0\x9F\x98\x80!");  // byte-fallback pieces
  for (const std::string& text : texts) {
    const std::vector<int32_t> ids = niels::testing::EncodeText(*tokenizer_, text);
    TextStream stream(*tokenizer_);
    std::string joined;
    for (size_t i = 0; i < ids.size(); ++i) {
      const std::string piece = stream.Add(ids[i], /*flush=*/i + 1 == ids.size());
      EXPECT_EQ(CompleteUtf8Prefix(piece), piece) << "a piece ends mid-character: " << text;
      joined += piece;
    }
    EXPECT_EQ(joined, tokenizer_->Decode(ids)) << text;
    EXPECT_EQ(stream.sent(), joined);
  }
}

TEST_F(TextStreamTest, SpecialIdsAddNoTextButFlush) {
  const std::vector<int32_t> ids = niels::testing::EncodeText(*tokenizer_, "hello world");
  TextStream stream(*tokenizer_);
  std::string joined;
  for (int32_t id : ids) joined += stream.Add(id, false);
  joined += stream.Add(tokenizer_->special().eot, true);
  EXPECT_EQ(joined, tokenizer_->Decode(ids));
}

// The incremental decoding against the plain definition (decode every id so far, hold back an
// incomplete end) on random id lists: every id of the vocabulary, byte-fallback pieces in runs
// that complete a character or do not, specials and out-of-range ids, with both the test
// tokenizer and the shipped demo model's. After every Add the text handed out must be exactly the
// plain definition's.
void ExpectSameAsDecodingEverything(const text::SentencePieceTokenizer& tokenizer, uint32_t seed) {
  std::mt19937 rng(seed);
  const int32_t vocab = tokenizer.vocab_size();
  std::vector<int32_t> bytes;  // the byte-fallback pieces <0x00>..<0xFF>, when the model has them
  for (int32_t id = 0; id < vocab; ++id) {
    if (tokenizer.Piece(id).starts_with("<0x")) bytes.push_back(id);
  }
  for (int list = 0; list < 200; ++list) {
    TextStream stream(tokenizer);
    std::vector<int32_t> ids;
    const int length = 1 + static_cast<int>(rng() % 80);
    for (int i = 0; i < length; ++i) {
      const uint32_t kind = rng() % 10;
      int32_t id;
      if (kind < 6 || bytes.empty()) {
        id = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
      } else if (kind < 9) {
        id = bytes[rng() % bytes.size()];
      } else {
        const int32_t odd[] = {tokenizer.special().eot, tokenizer.special().sys, -1, vocab};
        id = odd[rng() % 4];
      }
      ids.push_back(id);
      const bool flush = i + 1 == length;
      stream.Add(id, flush);
      const std::string everything = tokenizer.Decode(ids);
      const std::string expected(flush ? std::string_view(everything) : CompleteUtf8Prefix(everything));
      ASSERT_EQ(stream.sent(), expected) << "seed " << seed << " list " << list << " after " << ids.size() << " ids";
    }
  }
}

TEST_F(TextStreamTest, IncrementalDecodingEqualsDecodingEverythingWithTheTestTokenizer) {
  ExpectSameAsDecodingEverything(*tokenizer_, 1);
}

TEST(TextStreamDemoTest, IncrementalDecodingEqualsDecodingEverythingWithTheShippedTokenizer) {
  auto loaded = text::SentencePieceTokenizer::Load(NIELS_SOURCE_DIR "/models/niels-demo/tokenizer.model");
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  ExpectSameAsDecodingEverything(**loaded, 2);
}

}  // namespace text_stream_test
}  // namespace
}  // namespace niels::daemon::text
