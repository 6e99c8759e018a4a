// TextStream: streamed text pieces add up to the decoded reply; partial UTF-8 is held back.
#include "daemon/engine/text_stream.h"

#include <gtest/gtest.h>

#include "tests/support/test_model.h"

namespace niels::daemon::engine {
namespace {

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
    tokenizer_ = model::Tokenizer::Load(*dir_ / "tokenizer.model").value().release();
  }
  static void TearDownTestSuite() {
    delete tokenizer_;
    delete dir_;
  }
  static niels::testing::TempDir* dir_;
  static model::Tokenizer* tokenizer_;
};
niels::testing::TempDir* TextStreamTest::dir_ = nullptr;
model::Tokenizer* TextStreamTest::tokenizer_ = nullptr;

TEST_F(TextStreamTest, PiecesConcatenateToTheDecodedText) {
  std::vector<std::string> texts = niels::testing::TinyCorpus();
  texts.push_back("na\xC3\xAFve caf\xC3\xA9 \xE2\x82\xAC 5 \xF0\x9F\x98\x80!");  // byte-fallback pieces
  for (const std::string& text : texts) {
    const std::vector<int32_t> ids = tokenizer_->Encode(text);
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
  const std::vector<int32_t> ids = tokenizer_->Encode("hello world");
  TextStream stream(*tokenizer_);
  std::string joined;
  for (int32_t id : ids) joined += stream.Add(id, false);
  joined += stream.Add(tokenizer_->special().eot, true);
  EXPECT_EQ(joined, tokenizer_->Decode(ids));
}

}  // namespace
}  // namespace niels::daemon::engine
