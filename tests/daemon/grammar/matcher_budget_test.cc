// The matcher's budgets, shown by counting: a state's memory is O(stacks), never stacks x class
// ranges (measured by the heap this binary allocates, and by MatcherStats); the matcher steps of
// one token are bounded by MatcherLimits::max_steps_per_token and its memory by max_memory_bytes,
// each refused with RESOURCE_EXHAUSTED naming the budget; realistic JSON Schemas on Qwen3's
// vocabulary stay far under both.

#include <gtest/gtest.h>
#include <malloc.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include "daemon/grammar/json_schema.h"
#include "daemon/grammar/utf8.h"
#include "tests/daemon/grammar/grammar_test_util.h"
#include "tests/daemon/grammar/hf_vocabulary.h"

// Live heap bytes of this process (every operator new and delete of the grammar_test binary goes
// through these replacements).
namespace {
std::atomic<int64_t> g_budget_test_live_heap{0};
}  // namespace

void* operator new(size_t size) {
  void* p = std::malloc(size == 0 ? 1 : size);
  if (p == nullptr) throw std::bad_alloc();
  g_budget_test_live_heap.fetch_add(static_cast<int64_t>(malloc_usable_size(p)), std::memory_order_relaxed);
  return p;
}
void* operator new[](size_t size) { return operator new(size); }
void operator delete(void* p) noexcept {
  if (p == nullptr) return;
  g_budget_test_live_heap.fetch_sub(static_cast<int64_t>(malloc_usable_size(p)), std::memory_order_relaxed);
  std::free(p);
}
void operator delete[](void* p) noexcept { operator delete(p); }
void operator delete(void* p, size_t) noexcept { operator delete(p); }
void operator delete[](void* p, size_t) noexcept { operator delete(p); }

namespace niels::daemon::grammar {
namespace {

int64_t LiveHeap() { return g_budget_test_live_heap.load(std::memory_order_relaxed); }

// `big` is a class of `ranges` ranges (every other code point from U+4E00: no two adjacent), and
// root has `alternatives` ways through it, each a distinct parse alive at the start and after
// every character of the class.
std::string WideClassGrammar(int ranges, int alternatives) {
  std::string g = "root ::= ";
  for (int i = 0; i < alternatives; ++i) g += (i ? " | " : "") + std::string("big \"a") + std::to_string(i) + "\"";
  g += "\nbig ::= [";
  for (int i = 0; i < ranges; ++i) AppendUtf8(0x4E00 + 2 * i, &g);
  g += "]\n";
  return g;
}

// `alternatives` parses alive at once, each counting the letters it has read (a new state after
// every letter, so no state repeats and no run table applies: 26 letters are too few).
std::string CountingGrammar(int alternatives, int repetitions) {
  std::string g = "root ::= ";
  for (int i = 0; i < alternatives; ++i) {
    g += (i ? " | " : "") + std::string("[a-z]{0,") + std::to_string(repetitions) + "} \"" + std::to_string(i) + "\"";
  }
  return g + "\n";
}

// Every byte, and words of 2-12 letters: a mask walks into each letter state several levels deep.
std::shared_ptr<const Vocabulary> LetterVocabulary() {
  std::vector<VocabularyToken> tokens;
  for (int b = 0; b < 256; ++b) tokens.push_back({std::string(1, static_cast<char>(b)), TokenKind::kText});
  uint32_t x = 12345;
  for (int k = 0; k < 3000; ++k) {
    std::string w;
    const int len = 2 + k % 11;
    for (int i = 0; i < len; ++i) {
      x = x * 1103515245u + 12345u;
      w.push_back(static_cast<char>('a' + (x >> 16) % 26));
    }
    tokens.push_back({w, TokenKind::kText});
  }
  tokens.push_back({"", TokenKind::kEndOfOutput});
  return *Vocabulary::Create(std::move(tokens));
}

TEST(MatcherBudgetTest, WideStatesHoldNoCopiesOfTheirClasses) {
  // 400 parses over one class of 2,000 ranges: copying the class per parse held 800,000 ranges
  // (6.4 MB) in the start state alone, and as much again for the non-ASCII transition bounds.
  size_t ranges_held_at_50 = 0;
  for (int alternatives : {50, 400}) {
    SCOPED_TRACE(alternatives);
    auto g = CompiledGrammar::FromGbnf(WideClassGrammar(2000, alternatives));
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    const int64_t before = LiveHeap();
    Matcher m(*g);
    ASSERT_TRUE(m.status().ok()) << m.status().ToString();
    std::string cjk;
    AppendUtf8(0x4E00 + 2 * 777, &cjk);
    ASSERT_TRUE(m.AcceptBytes(cjk).ok());  // a non-ASCII transition of the wide start state
    EXPECT_TRUE(m.AllowedBytes()['a']);
    const int64_t grown = LiveHeap() - before;
    const MatcherStats stats = m.stats();
    std::printf("[ grammar ] %d parses over 2,000 ranges: %zu states, %zu stacks, %zu ranges held, %lld heap bytes\n",
                alternatives, stats.states, stats.stacks_held, stats.ranges_held, static_cast<long long>(grown));
    // The classes stay in the grammar: no state keeps a range of the big one (its union is too
    // large to keep); the ranges held (the small unions after it) do not grow with the parses.
    EXPECT_LE(stats.ranges_held, 2 * MatcherCore::kMaxUnionRanges);
    if (alternatives == 50) ranges_held_at_50 = stats.ranges_held;
    EXPECT_EQ(stats.ranges_held, ranges_held_at_50);
    // The start, after the character, after 'a': one stack id per parse in each.
    EXPECT_EQ(stats.states, 3u);
    EXPECT_EQ(stats.stacks_held, 3 * static_cast<size_t>(alternatives));
    // O(stacks): ~100 bytes per parse (frames, stack ids), no product with the 2,000 ranges.
    EXPECT_LT(grown, 64 * 1024 + 200 * alternatives);
    EXPECT_LE(stats.memory_bytes, static_cast<size_t>(16 * 1024 + 200 * alternatives));
  }
}

TEST(MatcherBudgetTest, ManyCountingParsesAreRefusedByTheStepBudget) {
  const auto vocab = LetterVocabulary();
  // 1,000 parses alive, each one counting: every letter of a mask's walk is a new (state, letter)
  // transition of 1,000 stacks (~2,000 steps: each stack expanded and entered into the new state).
  auto hostile = CompiledGrammar::FromGbnf(CountingGrammar(1000, 30));
  ASSERT_TRUE(hostile.ok()) << hostile.status().ToString();
  Matcher m(*hostile);
  ASSERT_TRUE(m.status().ok());
  TokenBitset mask;
  const common::Status s = m.AllowedTokens(*vocab, &mask);
  EXPECT_EQ(s.code(), common::StatusCode::kResourceExhausted) << s.ToString();
  EXPECT_NE(s.message().find("(budget matcher_steps_per_token)"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("250000"), std::string::npos) << s.message();
  const MatcherStats stats = m.stats();
  // The work stopped at the budget (plus the charge that crossed it: at most one state's stacks).
  EXPECT_GT(stats.steps_this_token, MatcherLimits{}.max_steps_per_token);
  EXPECT_LE(stats.steps, MatcherLimits{}.max_steps_per_token + 2 * 1000);
  std::printf("[ grammar ] 1,000 counting parses: refused after %llu steps, %llu transitions, %zu states\n",
              static_cast<unsigned long long>(stats.steps), static_cast<unsigned long long>(stats.transitions),
              stats.states);

  // The same shape with 4 parses follows a whole output well under the budget: the bound is on
  // the work, not on the grammar's shape.
  auto narrow = CompiledGrammar::FromGbnf(CountingGrammar(4, 40));
  ASSERT_TRUE(narrow.ok());
  Matcher ok(*narrow);
  for (char c : std::string("hello") + "world" + "2") {
    ASSERT_TRUE(ok.AllowedTokens(*vocab, &mask).ok()) << ok.status().ToString();
    ASSERT_TRUE(ok.AcceptBytes(std::string(1, c)).ok());
  }
  EXPECT_TRUE(ok.IsComplete());
  EXPECT_LT(ok.stats().max_steps_in_a_token, MatcherLimits{}.max_steps_per_token / 10);
}

TEST(MatcherBudgetTest, StepsPerTokenCountTheWorkOfEachToken) {
  // Per token, the steps are the stacks the token's new transitions advance: with n parses a
  // letter state's mask costs about n steps per letter depth reached, so the count grows linearly
  // with n and the budget caps it.
  const auto vocab = LetterVocabulary();
  uint64_t steps_at[2] = {0, 0};
  int i = 0;
  for (int n : {10, 40}) {
    auto g = CompiledGrammar::FromGbnf(CountingGrammar(n, 40));
    ASSERT_TRUE(g.ok());
    Matcher m(*g);
    TokenBitset mask;
    ASSERT_TRUE(m.AllowedTokens(*vocab, &mask).ok());
    steps_at[i++] = m.stats().max_steps_in_a_token;
  }
  EXPECT_GT(steps_at[1], 3 * steps_at[0]);
  EXPECT_LT(steps_at[1], 5 * steps_at[0]);
}

TEST(MatcherBudgetTest, TheMemoryBudgetRefusesAMatcherThatKeepsGrowing) {
  // 100 counting parses, fed letters one token at a time: every letter is a new state of 100
  // stacks (the step budget of a token is never reached, the memory keeps growing). Its 100
  // repetitions of up to 900 are more than the default grammar compile budget allows a 2 KB text
  // (rule_set.h); this test is about the matcher, so it compiles under a larger one.
  GrammarLimits compile_limits;
  compile_limits.grammar_work_base = 20'000'000;
  auto g = CompiledGrammar::FromGbnf(CountingGrammar(100, 900), compile_limits);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  MatcherLimits limits;
  limits.max_memory_bytes = 2 << 20;
  Matcher m(*g, limits);
  common::Status s;
  int letters = 0;
  for (; letters < 900 && s.ok(); ++letters) s = m.AcceptBytes("q");
  EXPECT_EQ(s.code(), common::StatusCode::kResourceExhausted) << s.ToString();
  EXPECT_NE(s.message().find("(budget matcher_memory_bytes)"), std::string::npos) << s.message();
  const MatcherStats stats = m.stats();
  EXPECT_LE(stats.peak_memory_bytes, limits.max_memory_bytes + 64 * 1024);
  EXPECT_LT(letters, 900);
  EXPECT_LT(stats.max_steps_in_a_token, limits.max_steps_per_token);
  std::printf("[ grammar ] memory budget of %zu bytes reached after %d letters (%zu states, %zu frames)\n",
              limits.max_memory_bytes, letters, stats.states, stats.frames);
}

// Greedy longest match over the vocabulary's trie: the ids of `text` (empty if some byte has none).
std::vector<int32_t> GreedyIds(const Vocabulary& vocab, const std::string& text) {
  const auto& trie = vocab.trie();
  std::vector<int32_t> out;
  size_t pos = 0;
  while (pos < text.size()) {
    int32_t best = -1;
    size_t best_len = 0, i = 0, depth = 0;
    while (i < trie.size() && pos + depth < text.size()) {
      const auto want = static_cast<uint8_t>(text[pos + depth]);
      size_t child = i;
      bool found = false;
      while (child < trie.size() && trie[child].depth == depth + 1) {
        if (trie[child].byte == want) {
          found = true;
          break;
        }
        child = trie[child].subtree_end;
      }
      if (!found) break;
      ++depth;
      if (trie[child].token >= 0) best = trie[child].token, best_len = depth;
      i = child + 1;
    }
    if (best < 0) return {};
    out.push_back(best);
    pos += best_len;
  }
  return out;
}

TEST(MatcherBudgetTest, RealisticSchemasStayFarUnderTheBudgets) {
  const std::string json = testing::ReadFile(testing::QwenTokenizerJson());
  ASSERT_FALSE(json.empty()) << testing::kMissingReferences;
  const auto vocab = testing::LoadByteLevelVocabulary(json, 151936);
  ASSERT_NE(vocab, nullptr);
  struct Case {
    const char* schema;
    const char* doc;
  };
  const Case cases[] = {
      {R"j({"type":"object","properties":{
  "name":{"type":"string","minLength":1,"maxLength":80},"age":{"type":"integer","minimum":0,"maximum":150},
  "email":{"type":"string"},"tags":{"type":"array","items":{"type":"string"},"maxItems":8},
  "address":{"type":"object","properties":{"street":{"type":"string"},"city":{"type":"string"},
  "zip":{"type":"string","pattern":"^[0-9]{5}$"}},"required":["city"]}},"required":["name","age"]})j",
       R"j({"name": "José Martínez Ñúñez", "age": 42, "email": "jose@example.es", "tags": ["ingeniero", "música", "日本語"], "address": {"street": "Calle Mayor 5", "city": "Madrid", "zip": "28013"}})j"},
      {R"j({"type":"object","properties":{
  "tool":{"enum":["search","calculator","weather","calendar"]},
  "arguments":{"type":"object","properties":{"query":{"type":"string"},"max_results":{"type":"integer","minimum":1,"maximum":50},
  "date":{"type":"string","format":"date"},"units":{"enum":["metric","imperial"]}}},
  "reason":{"type":"string","maxLength":400}},"required":["tool","arguments"]})j",
       R"j({"tool": "search", "arguments": {"query": "best hiking trails near Seattle with waterfalls", "max_results": 5}, "reason": "The user asked for trail recommendations, so a web search is the most direct way to find current, well-reviewed options."})j"},
      {R"j({"type":"array","items":{"$ref":"#/$defs/item"},"minItems":1,"maxItems":20,
  "$defs":{"item":{"type":"object","properties":{"id":{"type":"integer"},"title":{"type":"string"},
  "price":{"type":"number"},"in_stock":{"type":"boolean"},"variants":{"type":"array","items":{"$ref":"#/$defs/item"}}},
  "required":["id","title"]}}})j",
       R"j([{"id": 1, "title": "Wireless mouse", "price": 24.99, "in_stock": true}, {"id": 2, "title": "Mechanical keyboard", "price": 89.5, "in_stock": false, "variants": [{"id": 21, "title": "Brown switches", "price": 92.0}, {"id": 22, "title": "Red switches"}]}, {"id": 3, "title": "USB-C hub (7 ports)", "price": 39.0, "in_stock": true}])j"},
  };
  // A large enum: 500 values alive at once at its start.
  std::string words = "[", big_enum_doc;
  uint32_t x = 777;
  for (int i = 0; i < 500; ++i) {
    std::string w;
    for (int k = 0; k < 4 + i % 9; ++k) {
      x = x * 1103515245u + 12345u;
      w.push_back(static_cast<char>('a' + (x >> 16) % 26));
    }
    words += (i ? ",\"" : "\"") + w + "\"";
    if (i == 321) big_enum_doc = "{\"code\": \"" + w + "\"}";
  }
  const std::string big_enum_schema =
      R"({"type":"object","properties":{"code":{"enum":)" + words + R"(]}},"required":["code"]})";
  std::vector<Case> all(std::begin(cases), std::end(cases));
  all.push_back({big_enum_schema.c_str(), big_enum_doc.c_str()});
  const MatcherLimits defaults;
  for (const Case& c : all) {
    auto g = CompileJsonSchema(c.schema);
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    Matcher m(*g);
    const std::vector<int32_t> ids = GreedyIds(*vocab, c.doc);
    ASSERT_FALSE(ids.empty());
    TokenBitset mask;
    for (int32_t id : ids) {
      ASSERT_TRUE(m.AllowedTokens(*vocab, &mask).ok()) << m.status().ToString();
      ASSERT_TRUE(mask.Test(id)) << vocab->token(id).bytes;
      ASSERT_TRUE(m.AcceptToken(id, *vocab).ok());
    }
    ASSERT_TRUE(m.AllowedTokens(*vocab, &mask).ok());
    EXPECT_TRUE(m.IsComplete());
    const MatcherStats stats = m.stats();
    std::printf("[ grammar ] realistic schema, %zu tokens: at most %llu steps in a token (budget %llu), %llu in all, "
                "peak %zu bytes held (budget %zu), %zu states, %llu trie nodes\n",
                ids.size(), static_cast<unsigned long long>(stats.max_steps_in_a_token),
                static_cast<unsigned long long>(defaults.max_steps_per_token),
                static_cast<unsigned long long>(stats.steps), stats.peak_memory_bytes, defaults.max_memory_bytes,
                stats.states, static_cast<unsigned long long>(stats.trie_nodes));
    EXPECT_LT(stats.max_steps_in_a_token, defaults.max_steps_per_token / 5);
    EXPECT_LT(stats.peak_memory_bytes, defaults.max_memory_bytes / 8);
  }
}

}  // namespace
}  // namespace niels::daemon::grammar
