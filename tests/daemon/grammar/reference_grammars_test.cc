// llama.cpp's own grammars (grammars/*.gbnf, shipped by node-llama-cpp 3.21.1; installed by
// scripts/install_references.sh, never committed) as the test set: every one compiles,
// random sentences derived from each are accepted, and for sentences, random mutations and
// prefixes the matcher's verdicts (sentence? viable prefix?) equal those of an independent Earley
// recognizer written in Python (gbnf_reference.py).

#include <gtest/gtest.h>

#include <random>

#include "tests/daemon/grammar/grammar_test_util.h"

namespace niels::daemon::grammar {
namespace {

using testing::Judge;
using testing::Verdict;

const std::vector<std::string> kGrammars = {"arithmetic", "c", "chess", "english", "japanese",
                                            "json", "json_arr", "list"};

std::u32string Decode(const std::string& s) {
  std::u32string out;
  size_t pos = 0;
  uint32_t cp = 0;
  while (DecodeUtf8(s, &pos, &cp)) out.push_back(cp);
  return out;
}

std::string Encode(const std::u32string& s) {
  std::string out;
  for (char32_t c : s) AppendUtf8(c, &out);
  return out;
}

// A random edit: delete, insert, replace or swap characters (inserted ones from the sentence
// itself, a few grammar punctuation marks, or any character).
std::string Mutate(const std::string& sentence, std::mt19937_64& rng) {
  std::u32string s = Decode(sentence);
  const std::u32string pool = U"\"{}[](),:;=+-*/. \n\tax0Z9_#\\\u3042\u00e9";
  auto any_char = [&]() -> char32_t {
    const int kind = std::uniform_int_distribution<int>(0, 2)(rng);
    if (kind == 0 && !s.empty()) return s[std::uniform_int_distribution<size_t>(0, s.size() - 1)(rng)];
    if (kind == 1) return pool[std::uniform_int_distribution<size_t>(0, pool.size() - 1)(rng)];
    uint32_t cp = std::uniform_int_distribution<uint32_t>(0, 0x3000)(rng);
    return IsSurrogate(cp) ? U'?' : cp;
  };
  const int edits = std::uniform_int_distribution<int>(1, 2)(rng);
  for (int e = 0; e < edits; ++e) {
    const size_t at = s.empty() ? 0 : std::uniform_int_distribution<size_t>(0, s.size() - 1)(rng);
    switch (std::uniform_int_distribution<int>(0, 3)(rng)) {
      case 0: if (!s.empty()) s.erase(at, 1); break;
      case 1: s.insert(s.begin() + at, any_char()); break;
      case 2: if (!s.empty()) s[at] = any_char(); break;
      default: if (s.size() > 1 && at + 1 < s.size()) std::swap(s[at], s[at + 1]); break;
    }
  }
  return Encode(s);
}

TEST(ReferenceGrammarsTest, EveryGrammarCompilesAndAgreesWithAnEarleyRecognizer) {
  ASSERT_TRUE(std::filesystem::is_directory(testing::LlamaGrammarDir())) << testing::kMissingReferences;
  int total_sentences = 0, total_cases = 0, total_full = 0;
  for (const std::string& name : kGrammars) {
    SCOPED_TRACE(name);
    const std::string text = testing::ReadFile(testing::LlamaGrammarDir() / (name + ".gbnf"));
    ASSERT_FALSE(text.empty());
    auto g = CompiledGrammar::FromGbnf(text);
    ASSERT_TRUE(g.ok()) << g.status().ToString();

    std::mt19937_64 rng(std::hash<std::string>()(name));
    std::vector<std::string> cases;
    int sentences = 0;
    for (uint64_t seed = 0; sentences < 100 && seed < 1000; ++seed) {
      testing::SentenceGenerator gen(**g, seed * 7919 + name.size(), 100);
      std::string s;
      if (!gen.Generate(&s)) continue;
      ++sentences;
      const Verdict v = Judge(*g, s);
      EXPECT_TRUE(v.full) << "generated sentence rejected: " << nlohmann::json(s).dump();
      cases.push_back(s);
      for (int k = 0; k < 3; ++k) cases.push_back(Mutate(s, rng));
      const std::u32string cps = Decode(s);
      cases.push_back(Encode(cps.substr(0, std::uniform_int_distribution<size_t>(0, cps.size())(rng))));
    }
    ASSERT_GE(sentences, 80);
    const nlohmann::json reference = testing::RunPython(
        "gbnf_reference.py", {{"grammar", text}, {"strings", cases}});
    ASSERT_EQ(reference.size(), cases.size());
    int full = 0;
    for (size_t i = 0; i < cases.size(); ++i) {
      const Verdict want{reference[i]["full"].get<bool>(), reference[i]["prefix"].get<bool>()};
      EXPECT_EQ(Judge(*g, cases[i]), want) << "case " << nlohmann::json(cases[i]).dump()
                                           << " reference full=" << want.full << " prefix=" << want.prefix;
      full += want.full;
    }
    std::printf("[ grammar ] %-10s %3d sentences, %3zu cases checked against Earley (%d sentences, %zu not)\n",
                name.c_str(), sentences, cases.size(), full, cases.size() - full);
    total_sentences += sentences;
    total_cases += static_cast<int>(cases.size());
    total_full += full;
  }
  std::printf("[ grammar ] total: %d generated sentences, %d cases, %d in the language\n", total_sentences,
              total_cases, total_full);
}

}  // namespace
}  // namespace niels::daemon::grammar
