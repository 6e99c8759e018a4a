// Token masks are exact: at random states (including inside a UTF-8 character), AllowedTokens
// equals a brute-force check of every token (a fresh matcher at the same point advanced by the
// token's bytes one by one) -- on small synthetic vocabularies and on Qwen3's real 151,936-id
// vocabulary. Also: the vocabulary trie holds every text token once; special ids behave.

#include <gtest/gtest.h>

#include <random>

#include "daemon/grammar/json_schema.h"
#include "tests/daemon/grammar/grammar_test_util.h"
#include "tests/daemon/grammar/hf_vocabulary.h"

namespace niels::daemon::grammar {
namespace {

// The ids where two masks differ (for failure messages).
std::string Diff(const TokenBitset& got, const TokenBitset& want, const Vocabulary& vocab) {
  std::string out;
  for (int32_t id = 0; id < got.size() && out.size() < 400; ++id) {
    if (got.Test(id) != want.Test(id)) {
      out += "\n  id " + std::to_string(id) + (got.Test(id) ? " allowed" : " refused") + " but should not be, bytes " +
             nlohmann::json(vocab.token(id).bytes).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    }
  }
  return out;
}

// Brute force: which tokens a fresh matcher at `prefix` accepts, byte by byte.
TokenBitset BruteForce(const std::shared_ptr<const CompiledGrammar>& g, const std::string& prefix,
                       const Vocabulary& vocab) {
  TokenBitset out(vocab.size());
  Matcher at(g);
  EXPECT_TRUE(at.AcceptBytes(prefix).ok());
  const Matcher::Snapshot start = at.snapshot();
  for (int32_t id = 0; id < vocab.size(); ++id) {
    const VocabularyToken& t = vocab.token(id);
    at.Restore(start);
    if (t.kind == TokenKind::kEndOfOutput) {
      if (at.IsComplete()) out.Set(id);
      continue;
    }
    if (t.kind == TokenKind::kNever || t.bytes.empty()) continue;
    bool ok = true;
    for (char b : t.bytes) {
      if (!at.AcceptBytes(std::string_view(&b, 1)).ok()) {
        ok = false;
        break;
      }
    }
    if (ok) out.Set(id);
  }
  return out;
}

// A small vocabulary: every single byte, pieces of sentences (cut at random byte offsets, so many
// end or start inside a character), random byte strings, duplicates, and special ids.
std::shared_ptr<const Vocabulary> SmallVocabulary(const std::vector<std::string>& sentences, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<VocabularyToken> tokens;
  for (int b = 0; b < 256; ++b) tokens.push_back({std::string(1, static_cast<char>(b)), TokenKind::kText});
  for (const std::string& s : sentences) {
    for (int k = 0; k < 40 && !s.empty(); ++k) {
      const size_t at = std::uniform_int_distribution<size_t>(0, s.size() - 1)(rng);
      const size_t len = std::uniform_int_distribution<size_t>(1, 8)(rng);
      tokens.push_back({s.substr(at, len), TokenKind::kText});
    }
  }
  for (int k = 0; k < 200; ++k) {
    std::string bytes;
    const int len = std::uniform_int_distribution<int>(1, 4)(rng);
    for (int i = 0; i < len; ++i) bytes.push_back(static_cast<char>(std::uniform_int_distribution<int>(0, 255)(rng)));
    tokens.push_back({bytes, TokenKind::kText});
  }
  // Longer than the 8 bytes Vocabulary::Create sorts by first, equal in them, with zero bytes.
  for (const std::string& bytes : {std::string("abcdefghij"), std::string("abcdefgh"), std::string("abcdefghi"),
                                   std::string("abcdefgh\0", 9), std::string("abcdefg\0\0z", 10),
                                   std::string("abcdefg"), std::string("\0\0\0\0\0\0\0\0\x01", 9)}) {
    tokens.push_back({bytes, TokenKind::kText});
  }
  tokens.push_back({"{\"", TokenKind::kText});
  tokens.push_back({"{\"", TokenKind::kText});  // a duplicate
  tokens.push_back({"", TokenKind::kText});     // empty: never
  tokens.push_back({"", TokenKind::kEndOfOutput});
  tokens.push_back({"x", TokenKind::kNever});
  auto v = Vocabulary::Create(std::move(tokens));
  EXPECT_TRUE(v.ok());
  return *v;
}

// Random points of sentences: whole prefixes at random byte offsets (often inside a character).
std::vector<std::string> RandomPrefixes(const std::vector<std::string>& sentences, int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::string> out = {""};
  for (int k = 0; k < n; ++k) {
    const std::string& s = sentences[std::uniform_int_distribution<size_t>(0, sentences.size() - 1)(rng)];
    out.push_back(s.substr(0, std::uniform_int_distribution<size_t>(0, s.size())(rng)));
  }
  return out;
}

std::vector<std::string> Sentences(const CompiledGrammar& g, int n, uint64_t seed) {
  std::vector<std::string> out;
  for (uint64_t k = 0; static_cast<int>(out.size()) < n && k < uint64_t{20} * n; ++k) {
    testing::SentenceGenerator gen(g, seed + k, 80);
    std::string s;
    if (gen.Generate(&s)) out.push_back(s);
  }
  return out;
}

std::vector<std::pair<std::string, std::shared_ptr<const CompiledGrammar>>> TestGrammars() {
  std::vector<std::pair<std::string, std::shared_ptr<const CompiledGrammar>>> out;
  out.emplace_back("any-json", CompiledGrammar::AnyJson());
  for (const char* name : {"c", "japanese", "chess", "list", "arithmetic"}) {
    auto g = CompiledGrammar::FromGbnf(testing::ReadFile(testing::LlamaGrammarDir() / (std::string(name) + ".gbnf")));
    EXPECT_TRUE(g.ok()) << name << ": " << g.status().ToString() << " " << testing::kMissingReferences;
    if (g.ok()) out.emplace_back(name, *g);
  }
  auto schema = CompileJsonSchema(R"({"type":"object","properties":{"name":{"type":"string","pattern":"^[a-zé]{2,5}$"},
      "tags":{"type":"array","items":{"enum":["a","b","\u00fc"]},"maxItems":3}},"required":["name"]})");
  EXPECT_TRUE(schema.ok()) << schema.status().ToString();
  if (schema.ok()) out.emplace_back("schema", *schema);
  auto bounded = CompileJsonSchema(R"({"type":"object","properties":{"s":{"type":"string","maxLength":6},
      "t":{"type":"string","minLength":2,"maxLength":4},"u":{"type":"string"},"v":{"type":"string","pattern":"^[a-z]{0,3}x$"}},
      "required":["s","t","u","v"]})");
  EXPECT_TRUE(bounded.ok()) << bounded.status().ToString();
  if (bounded.ok()) out.emplace_back("bounded strings", *bounded);
  return out;
}

TEST(TokenMaskTest, SmallVocabulariesMatchBruteForceAtRandomStates) {
  int states = 0, tokens_checked = 0;
  for (const auto& [name, g] : TestGrammars()) {
    SCOPED_TRACE(name);
    const std::vector<std::string> sentences = Sentences(*g, 30, 17);
    ASSERT_GE(sentences.size(), 20u);
    const auto vocab = SmallVocabulary(sentences, 5);
    Matcher m(g);  // one matcher: its cache (states, masks) serves every point below
    for (const std::string& prefix : RandomPrefixes(sentences, 60, 99)) {
      Matcher at = m.Clone();
      ASSERT_TRUE(at.AcceptBytes(prefix).ok());
      TokenBitset mask;
      ASSERT_TRUE(at.AllowedTokens(*vocab, &mask).ok());
      const TokenBitset want = BruteForce(g, prefix, *vocab);
      ASSERT_TRUE(mask == want) << Diff(mask, want, *vocab) << "\nprefix " << nlohmann::json(prefix).dump(-1, ' ', false,
                                                                  nlohmann::json::error_handler_t::replace);
      // Twice: the second answer comes from the mask cache.
      TokenBitset again;
      ASSERT_TRUE(at.AllowedTokens(*vocab, &again).ok());
      EXPECT_TRUE(again == want);
      ++states;
      tokens_checked += vocab->size();
    }
  }
  std::printf("[ grammar ] masks equal brute force at %d states (%d token checks)\n", states, tokens_checked);
}

TEST(TokenMaskTest, QwenVocabularyMatchesBruteForce) {
  const std::string json = testing::ReadFile(testing::QwenTokenizerJson());
  ASSERT_FALSE(json.empty()) << testing::kMissingReferences;
  const auto vocab = testing::LoadByteLevelVocabulary(json, 151936);
  ASSERT_NE(vocab, nullptr);
  int states = 0;
  for (const auto& [name, g] : TestGrammars()) {
    SCOPED_TRACE(name);
    const std::vector<std::string> sentences = Sentences(*g, 10, 3);
    Matcher m(g);
    for (const std::string& prefix : RandomPrefixes(sentences, name == "bounded strings" ? 12 : 3, 7)) {
      Matcher at = m.Clone();
      ASSERT_TRUE(at.AcceptBytes(prefix).ok());
      TokenBitset mask;
      ASSERT_TRUE(at.AllowedTokens(*vocab, &mask).ok());
      const TokenBitset want = BruteForce(g, prefix, *vocab);
      ASSERT_TRUE(mask == want) << Diff(mask, want, *vocab) << "\nprefix " << nlohmann::json(prefix).dump(
          -1, ' ', false, nlohmann::json::error_handler_t::replace);
      ++states;
    }
  }
  std::printf("[ grammar ] Qwen3 masks (151,936 ids) equal brute force at %d states\n", states);
}

// A vocabulary of mostly word tokens (letters, some non-ASCII, some long), so that string states
// take their masks from runs (Vocabulary::LoopTable) rather than the trie; plus every byte and
// pieces of sentences with quotes, escapes and split characters.
std::shared_ptr<const Vocabulary> WordyVocabulary(const std::vector<std::string>& sentences, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<VocabularyToken> tokens;
  for (int b = 0; b < 256; ++b) tokens.push_back({std::string(1, static_cast<char>(b)), TokenKind::kText});
  const std::vector<std::string> letters = {"a", "b", "e", "x", " ", "\xc3\xa9", "\xe6\x97\xa5", "Z", "1", "\xf0\x9f\x98\x80"};
  for (int k = 0; k < 3000; ++k) {
    std::string w;
    const int len = std::uniform_int_distribution<int>(1, k % 50 == 0 ? 12 : 5)(rng);
    for (int i = 0; i < len; ++i) w += letters[std::uniform_int_distribution<size_t>(0, letters.size() - 1)(rng)];
    tokens.push_back({w, TokenKind::kText});
  }
  for (const std::string& s : sentences) {
    for (int k = 0; k < 10 && !s.empty(); ++k) {
      const size_t at = std::uniform_int_distribution<size_t>(0, s.size() - 1)(rng);
      tokens.push_back({s.substr(at, std::uniform_int_distribution<size_t>(1, 6)(rng)), TokenKind::kText});
    }
  }
  tokens.push_back({"", TokenKind::kEndOfOutput});
  return *Vocabulary::Create(std::move(tokens));
}

TEST(TokenMaskTest, RunMasksMatchBruteForce) {
  int states = 0;
  size_t runs = 0;
  for (const auto& [name, g] : TestGrammars()) {
    SCOPED_TRACE(name);
    const std::vector<std::string> sentences = Sentences(*g, 30, 23);
    const auto vocab = WordyVocabulary(sentences, 11);
    Matcher m(g);
    for (const std::string& prefix : RandomPrefixes(sentences, 80, 5)) {
      Matcher at = m.Clone();
      ASSERT_TRUE(at.AcceptBytes(prefix).ok());
      TokenBitset mask;
      ASSERT_TRUE(at.AllowedTokens(*vocab, &mask).ok());
      const TokenBitset want = BruteForce(g, prefix, *vocab);
      ASSERT_TRUE(mask == want) << Diff(mask, want, *vocab) << "\nprefix "
                                << nlohmann::json(prefix).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      ++states;
    }
    runs += m.run_count();
  }
  EXPECT_GE(runs, 5u);  // the run path was exercised
  std::printf("[ grammar ] run-path masks equal brute force at %d states (%zu runs)\n", states, runs);
}

TEST(TokenMaskTest, VocabularyTrieHoldsEveryTextTokenOnce) {
  const auto vocab = SmallVocabulary({"hello", "h\xc3\xa9llo"}, 1);
  std::vector<int> seen(vocab->size(), 0);
  std::vector<std::string> path(vocab->max_token_bytes() + 1);
  std::string previous;
  for (const auto& node : vocab->trie()) {
    path[node.depth] = path[node.depth - 1] + static_cast<char>(node.byte);
    EXPECT_LT(previous, path[node.depth]) << "the trie is in preorder of the bytes";
    previous = path[node.depth];
    for (int32_t id = node.token; id >= 0; id = vocab->same_bytes_next(id)) {
      ++seen[id];
      EXPECT_EQ(vocab->token(id).bytes, path[node.depth]);
    }
  }
  for (int32_t id = 0; id < vocab->size(); ++id) {
    const VocabularyToken& t = vocab->token(id);
    EXPECT_EQ(seen[id], t.kind == TokenKind::kText && !t.bytes.empty() ? 1 : 0) << id;
  }
}

TEST(TokenMaskTest, EndTokensOnlyWhenCompleteAndNothingAfterThem) {
  auto g = CompiledGrammar::FromGbnf("root ::= \"ab\" | \"abc\"\n");
  ASSERT_TRUE(g.ok());
  auto v = Vocabulary::Create({{"a", TokenKind::kText}, {"b", TokenKind::kText}, {"c", TokenKind::kText},
                               {"", TokenKind::kEndOfOutput}, {"", TokenKind::kNever}});
  ASSERT_TRUE(v.ok());
  Matcher m(*g);
  TokenBitset mask;
  ASSERT_TRUE(m.AllowedTokens(**v, &mask).ok());
  EXPECT_TRUE(mask.Test(0) && !mask.Test(3) && !mask.Test(4));
  ASSERT_TRUE(m.AcceptToken(0, **v).ok());
  EXPECT_FALSE(m.AcceptToken(3, **v).ok());
  ASSERT_TRUE(m.AcceptToken(1, **v).ok());
  ASSERT_TRUE(m.AllowedTokens(**v, &mask).ok());
  EXPECT_TRUE(mask.Test(2) && mask.Test(3) && !mask.Test(0) && !mask.Test(4));
  const Matcher::Snapshot before_end = m.snapshot();
  ASSERT_TRUE(m.AcceptToken(3, **v).ok());
  EXPECT_TRUE(m.IsEnded());
  ASSERT_TRUE(m.AllowedTokens(**v, &mask).ok());
  EXPECT_EQ(mask.Count(), 0);
  m.Restore(before_end);  // rollback
  ASSERT_TRUE(m.AcceptToken(2, **v).ok());
  EXPECT_TRUE(m.IsComplete());
  EXPECT_FALSE(m.CanContinue());
}

}  // namespace
}  // namespace niels::daemon::grammar
