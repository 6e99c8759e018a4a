// Tokenizer::Bytes, the exact bytes an id adds to decoded text (what structured output constrains),
// held to the tokenizers' own Decode: SentencePiece's on the tiny test tokenizer and the shipped
// demo model's -- every id alone and after some text, and random id lists (ordinary pieces,
// byte-fallback pieces spelling whole UTF-8 characters, lone U+2581 pieces at the start, special
// ids in between) decode to the concatenation that tokenizer.h states; and byte-level BPE's
// (Qwen3's real tokenizer.json) for random id lists whose bytes are valid UTF-8.

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "daemon/text/sentencepiece_tokenizer.h"
#include "tests/daemon/text/reference_tokenizers.h"
#include "tests/support/test_model.h"

namespace niels::daemon::text {
namespace {
namespace token_bytes_test {  // this file's own names: the suite compiles as one unity unit

// The text tokenizer.h says ids decode to.
std::string ByRule(const Tokenizer& tok, const std::vector<int32_t>& ids) {
  std::string out;
  bool at_start = true;
  for (int32_t id : ids) {
    const TextBytes b = tok.Bytes(id);
    if (!b.is_text) continue;
    out += at_start ? b.at_start : b.bytes;
    if (!out.empty()) at_start = false;
  }
  return out;
}

class TokenBytesTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    std::filesystem::path path;
    if (GetParam() == "tiny") {
      path = dir_.path() / "tokenizer.model";
      niels::testing::TrainTinyTokenizer(path);
    } else {
      path = std::filesystem::path(NIELS_SOURCE_DIR) / "models/niels-demo/tokenizer.model";
    }
    auto loaded = SentencePieceTokenizer::Load(path);
    ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
    tok_ = std::move(loaded).value();
    for (int32_t id = 0; id < tok_->vocab_size(); ++id) {
      const TextBytes b = tok_->Bytes(id);
      if (!b.is_text) continue;
      if (tok_->Piece(id).starts_with("<0x")) {
        byte_ids_[static_cast<uint8_t>(b.bytes[0])] = id;
      } else {
        piece_ids_.push_back(id);
      }
    }
  }

  // A random character spelled with byte-fallback pieces (1 to 4 bytes).
  std::vector<int32_t> CharAsBytes(std::mt19937_64& rng) const {
    static const uint32_t kSamples[] = {'a', '{', ' ', 0xE9, 0x3B1, 0x4E2D, 0x3042, 0x1F600, 0x10348};
    const uint32_t cp = kSamples[rng() % std::size(kSamples)];
    std::string utf8;
    if (cp < 0x80) {
      utf8 = {static_cast<char>(cp)};
    } else if (cp < 0x800) {
      utf8 = {static_cast<char>(0xC0 | (cp >> 6)), static_cast<char>(0x80 | (cp & 0x3F))};
    } else if (cp < 0x10000) {
      utf8 = {static_cast<char>(0xE0 | (cp >> 12)), static_cast<char>(0x80 | ((cp >> 6) & 0x3F)),
              static_cast<char>(0x80 | (cp & 0x3F))};
    } else {
      utf8 = {static_cast<char>(0xF0 | (cp >> 18)), static_cast<char>(0x80 | ((cp >> 12) & 0x3F)),
              static_cast<char>(0x80 | ((cp >> 6) & 0x3F)), static_cast<char>(0x80 | (cp & 0x3F))};
    }
    std::vector<int32_t> ids;
    for (char c : utf8) ids.push_back(byte_ids_[static_cast<uint8_t>(c)]);
    return ids;
  }

  niels::testing::TempDir dir_{"niels_token_bytes_test_"};
  std::unique_ptr<SentencePieceTokenizer> tok_;
  std::vector<int32_t> piece_ids_;
  int32_t byte_ids_[256] = {};
};

TEST_P(TokenBytesTest, EveryIdAloneAndAfterText) {
  ASSERT_GT(piece_ids_.size(), 100u);
  for (int b = 0; b < 256; ++b) ASSERT_GT(byte_ids_[b], 0) << "byte fallback piece for " << b;
  const int32_t a = tok_->Encode("a")->back();  // an ordinary piece that decodes to text alone
  ASSERT_FALSE(tok_->Decode(std::vector<int32_t>{a}).empty());
  int leading_space = 0;
  for (int32_t id = 0; id < tok_->vocab_size(); ++id) {
    const TextBytes b = tok_->Bytes(id);
    if (!b.is_text) {
      // Special and control ids decode to nothing; <unk> to a marker (" \u2047 "), never to fixed text.
      if (tok_->Piece(id) != "<unk>") {
        EXPECT_EQ(tok_->Decode(std::vector<int32_t>{a, id}), tok_->Decode(std::vector<int32_t>{a})) << id;
      }
      continue;
    }
    const bool byte_piece = tok_->Piece(id).starts_with("<0x");
    if (!byte_piece || static_cast<uint8_t>(b.bytes[0]) < 0x80) {
      EXPECT_EQ(tok_->Decode(std::vector<int32_t>{id}), b.at_start) << "id " << id << " " << tok_->Piece(id);
      EXPECT_EQ(tok_->Decode(std::vector<int32_t>{a, id}), tok_->Decode(std::vector<int32_t>{a}) + b.bytes)
          << "id " << id << " " << tok_->Piece(id);
    }
    if (b.at_start != b.bytes) {
      ++leading_space;
      EXPECT_EQ(" " + b.at_start, b.bytes) << "only the leading U+2581 is dropped: " << tok_->Piece(id);
    }
  }
  EXPECT_GT(leading_space, 20) << "the start rule was exercised";
  const SpecialTokens& s = tok_->special();
  for (int32_t id : {s.sys, s.usr, s.asst, s.eot, -1, tok_->vocab_size()}) EXPECT_FALSE(tok_->Bytes(id).is_text) << id;
}

TEST_P(TokenBytesTest, RandomIdListsDecodeToTheConcatenation) {
  std::mt19937_64 rng(28);
  const SpecialTokens& s = tok_->special();
  std::vector<int32_t> lone_spaces;  // pieces that add nothing at the start
  for (int32_t id : piece_ids_) {
    if (tok_->Bytes(id).at_start.empty()) lone_spaces.push_back(id);
  }
  for (int n = 0; n < 3000; ++n) {
    std::vector<int32_t> ids;
    const int len = 1 + static_cast<int>(rng() % 12);
    for (int k = 0; k < len; ++k) {
      const int kind = static_cast<int>(rng() % 10);
      if (kind < 5) {
        ids.push_back(piece_ids_[rng() % piece_ids_.size()]);
      } else if (kind < 8) {
        for (int32_t id : CharAsBytes(rng)) ids.push_back(id);
      } else if (kind == 8 && !lone_spaces.empty() && k < 2) {
        ids.push_back(lone_spaces[rng() % lone_spaces.size()]);
      } else {
        ids.push_back(rng() % 2 ? s.eot : s.asst);
      }
    }
    EXPECT_EQ(tok_->Decode(ids), ByRule(*tok_, ids)) << "case " << n;
  }
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, TokenBytesTest, ::testing::Values("tiny", "demo"));

// Byte-level BPE: every text id adds its TokenBytes wherever it stands; Decode of ids whose bytes
// are valid UTF-8 is their concatenation; special ids add nothing.
TEST(BpeTokenBytesTest, RandomIdListsDecodeToTheConcatenation) {
  const std::unique_ptr<BpeTokenizer> tok = testing::LoadReferenceTokenizer("qwen3");
  ASSERT_NE(tok, nullptr);
  std::vector<int32_t> text_ids, special_ids;
  for (int32_t id = 0; id < tok->vocab_size(); ++id) {
    const TextBytes b = tok->Bytes(id);
    (b.is_text ? text_ids : special_ids).push_back(id);
    if (b.is_text) {
      ASSERT_EQ(b.at_start, b.bytes) << id;
    }
  }
  ASSERT_GT(text_ids.size(), 150000u);
  ASSERT_FALSE(special_ids.empty());
  std::mt19937_64 rng(28);
  int checked = 0;
  for (int n = 0; n < 3000; ++n) {
    std::vector<int32_t> ids;
    const int len = 1 + static_cast<int>(rng() % 10);
    for (int k = 0; k < len; ++k) {
      ids.push_back(rng() % 8 == 0 ? special_ids[rng() % special_ids.size()] : text_ids[rng() % text_ids.size()]);
    }
    const std::string concatenation = ByRule(*tok, ids);
    if (tok->Decode(ids) != concatenation) {
      // Only where the bytes are not valid UTF-8 (Decode repairs them to U+FFFD).
      EXPECT_NE(tok->Decode(ids).find("\xEF\xBF\xBD"), std::string::npos) << "case " << n;
      continue;
    }
    ++checked;
  }
  EXPECT_GT(checked, 1000);
}

}  // namespace token_bytes_test
}  // namespace
}  // namespace niels::daemon::text
