// BpeModel's merges: by rank, leftmost among equal ranks, stale heap entries ignored, against hand
// examples and against a naive O(n^2) merge (naive_bpe.h) on random vocabularies and words.
#include "daemon/text/bpe_model.h"

#include <random>

#include <gtest/gtest.h>

#include "tests/daemon/text/naive_bpe.h"
#include "tests/daemon/text/test_specs.h"

namespace niels::daemon::text {
namespace {
namespace bpe_model_test {  // this file's own names: the suite compiles as one unity unit

using testing::ByteSpec;
using testing::Spell;

std::vector<std::string> Pieces(const BpeSpec& spec, const std::vector<int32_t>& ids) {
  std::vector<std::string> out;
  for (int32_t id : ids) out.push_back(spec.pieces[static_cast<size_t>(id)]);
  return out;
}

std::vector<std::string> EncodeWord(const BpeSpec& spec, std::string_view word) {
  auto model = BpeModel::Build(spec.pieces, spec.types, spec);
  EXPECT_TRUE(model.ok()) << model.status().ToString();
  BpeModel::Scratch scratch;
  std::vector<int32_t> ids;
  (*model)->Encode(word, &scratch, &ids);
  return Pieces(spec, ids);
}

TEST(BpeModelTest, MergesLowestRankFirst) {
  // "abc": (b,c) has the better rank, so "a" + "bc", although (a,b) comes first in the word.
  const BpeSpec spec = ByteSpec({{"b", "c"}, {"a", "b"}, {"ab", "c"}});
  EXPECT_EQ(EncodeWord(spec, "abc"), (std::vector<std::string>{"a", "bc"}));
  const BpeSpec other = ByteSpec({{"a", "b"}, {"b", "c"}, {"ab", "c"}});
  EXPECT_EQ(EncodeWord(other, "abc"), (std::vector<std::string>{"abc"}));
}

TEST(BpeModelTest, EqualRanksMergeLeftmostFirst) {
  const BpeSpec spec = ByteSpec({{"a", "a"}});
  EXPECT_EQ(EncodeWord(spec, "aaa"), (std::vector<std::string>{"aa", "a"}));
  EXPECT_EQ(EncodeWord(spec, "aaaaa"), (std::vector<std::string>{"aa", "aa", "a"}));
  const BpeSpec doubling = ByteSpec({{"a", "a"}, {"aa", "aa"}});
  EXPECT_EQ(EncodeWord(doubling, "aaaaaaa"), (std::vector<std::string>{"aaaa", "aa", "a"}));
}

TEST(BpeModelTest, SpellsBytesAndKeepsUnmergedOnes) {
  const BpeSpec spec = ByteSpec({{" ", "t"}, {"\xC3", "\xA9"}});
  EXPECT_EQ(EncodeWord(spec, " t\xC3\xA9!"), (std::vector<std::string>{Spell(" t"), Spell("\xC3\xA9"), "!"}));
  EXPECT_EQ(EncodeWord(spec, "x"), (std::vector<std::string>{"x"}));
  EXPECT_TRUE(EncodeWord(spec, "").empty());
}

TEST(BpeModelTest, IgnoreMergesTakesAWholeVocabularyWord) {
  // "abc" is a piece, but the merges alone would never make it.
  BpeSpec spec = ByteSpec({{"b", "c"}});
  spec.pieces.push_back("abc");
  spec.types.push_back(TokenType::kNormal);
  EXPECT_EQ(EncodeWord(spec, "abc"), (std::vector<std::string>{"a", "bc"}));
  spec.ignore_merges = true;
  EXPECT_EQ(EncodeWord(spec, "abc"), (std::vector<std::string>{"abc"}));
  EXPECT_EQ(EncodeWord(spec, "abcd"), (std::vector<std::string>{"a", "bc", "d"}));
}

TEST(BpeModelTest, BytesWithoutAPieceAreDroppedOrUnknown) {
  BpeSpec spec = ByteSpec({});
  spec.types[static_cast<size_t>('x')] = TokenType::kUnused;  // no piece for 'x'
  spec.pieces[static_cast<size_t>('x')].clear();
  EXPECT_EQ(EncodeWord(spec, "axxb"), (std::vector<std::string>{"a", "b"}));
  spec.unk = 'u';
  EXPECT_EQ(EncodeWord(spec, "axxb"), (std::vector<std::string>{"a", "u", "u", "b"}));
  spec.fuse_unk = true;
  EXPECT_EQ(EncodeWord(spec, "axxbx"), (std::vector<std::string>{"a", "u", "b", "u"}));
}

TEST(BpeModelTest, RepeatedMergeKeepsItsLastRank) {
  // (b,c) listed first and again after (a,b): its rank is the later one, so (a,b) wins.
  BpeSpec spec = ByteSpec({{"b", "c"}, {"a", "b"}, {"b", "c"}});
  EXPECT_EQ(EncodeWord(spec, "abc"), (std::vector<std::string>{"ab", "c"}));
}

TEST(BpeModelTest, BuildNamesAMergeOutsideTheVocabulary) {
  BpeSpec spec = ByteSpec({{"a", "b"}});
  spec.merges.emplace_back("ab", "zz");
  auto model = BpeModel::Build(spec.pieces, spec.types, spec);
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.status().message().find("merge 1 (\"ab\" \"zz\"): \"zz\" is not in the vocabulary"), std::string::npos)
      << model.status().ToString();
  spec.merges.back() = {"a", "a"};  // both pieces exist, their concatenation does not
  model = BpeModel::Build(spec.pieces, spec.types, spec);
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.status().message().find("\"aa\" is not in the vocabulary"), std::string::npos);
}

// Random vocabularies over a four-letter alphabet, random words: the heap merge equals the naive one.
TEST(BpeModelTest, AgreesWithANaiveMergeOnRandomVocabularies) {
  std::mt19937 rng(20240926);
  const std::string letters = "ab c";
  for (int round = 0; round < 200; ++round) {
    std::vector<std::string> known = {"a", "b", " ", "c"};
    std::vector<std::pair<std::string, std::string>> merges;
    const int count = 1 + static_cast<int>(rng() % 40);
    for (int m = 0; m < count; ++m) {
      const std::string& left = known[rng() % known.size()];
      const std::string& right = known[rng() % known.size()];
      merges.emplace_back(left, right);
      if (std::find(known.begin(), known.end(), left + right) == known.end()) known.push_back(left + right);
    }
    BpeSpec spec = ByteSpec(merges);
    spec.ignore_merges = rng() % 2 == 0;
    auto model = BpeModel::Build(spec.pieces, spec.types, spec);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    const testing::NaiveBpe naive(spec);
    BpeModel::Scratch scratch;
    for (int w = 0; w < 50; ++w) {
      std::string word;
      const size_t length = rng() % 24;
      for (size_t i = 0; i < length; ++i) word.push_back(letters[rng() % letters.size()]);
      std::vector<int32_t> ids;
      (*model)->Encode(word, &scratch, &ids);
      ASSERT_EQ(ids, naive.Encode(word)) << "round " << round << " word \"" << word << "\"";
    }
  }
}

TEST(BpeModelTest, LongRunsMergeCompletely) {
  // 2^k doublings: a run of 2^16 'a' becomes 2^16 / 2^k pieces of 2^k letters.
  std::vector<std::pair<std::string, std::string>> merges;
  std::string piece = "a";
  for (int k = 0; k < 8; ++k) {
    merges.emplace_back(piece, piece);
    piece += piece;
  }
  const BpeSpec spec = ByteSpec(merges);
  const auto pieces = EncodeWord(spec, std::string(1 << 16, 'a'));
  ASSERT_EQ(pieces.size(), size_t{1} << 8);
  for (const auto& p : pieces) EXPECT_EQ(p, piece);
}

}  // namespace bpe_model_test
}  // namespace
}  // namespace niels::daemon::text
