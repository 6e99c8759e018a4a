// Structured output on the engine side (output_constraint.h, generator.h) over the shipped demo
// model's real vocabulary (1024 SentencePiece ids, byte fallback):
//   - masks are exact: at a few hundred points of random constrained outputs (llama.cpp's grammars,
//     JSON schemas, any JSON), AllowedIds equals a brute force that advances a fresh matcher by each
//     id's bytes as Tokenizer::Bytes gives them (at the start of the text and after it) -- so the
//     vocabulary build is checked too;
//   - ids that span several grammar symbols, characters split over byte-fallback ids, special ids,
//     the leading-space rule at the start;
//   - generation with the demo model: the decoded new ids are the matcher's text, forced end,
//     CONSTRAINT_INCOMPLETE, a matcher limit fails the call;
//   - ending within the budget: at temperature 1.0 over many seeds, every schema-constrained reply
//     whose budget (max_new_tokens or the context) allows a completion ends complete and valid by
//     python3-jsonschema; a budget that allows none is CONSTRAINT_INCOMPLETE.

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "daemon/engine/generator.h"
#include "daemon/engine/output_constraint.h"
#include "daemon/grammar/json_schema.h"
#include "daemon/loaders/model_loader.h"
#include "tests/daemon/grammar/grammar_test_util.h"

namespace niels::daemon::engine {
namespace {

using grammar::CompiledGrammar;
using grammar::TokenBitset;

const loaders::Model& DemoModel() {
  static const std::unique_ptr<loaders::Model> model = [] {
    auto loaded = loaders::LoadModel(std::filesystem::path(NIELS_SOURCE_DIR) / "models/niels-demo");
    if (!loaded.ok()) throw std::runtime_error(loaded.status().ToString());
    return std::move(loaded).value();
  }();
  return *model;
}

std::shared_ptr<const ConstraintVocabulary> DemoVocabulary() {
  static const std::shared_ptr<const ConstraintVocabulary> vocab = [] {
    auto built = ConstraintVocabulary::Build(*DemoModel().tokenizer, static_cast<int32_t>(DemoModel().config.vocab_size),
                                             DemoModel().stop_ids);
    if (!built.ok()) throw std::runtime_error(built.status().ToString());
    return std::move(built).value();
  }();
  return vocab;
}

std::shared_ptr<const CompiledGrammar> OutputGbnf(const std::string& text) {
  auto g = CompiledGrammar::FromGbnf(text);
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  return g.ok() ? *g : nullptr;
}

std::vector<std::pair<std::string, std::shared_ptr<const CompiledGrammar>>> TestGrammars() {
  std::vector<std::pair<std::string, std::shared_ptr<const CompiledGrammar>>> out;
  out.emplace_back("any-json", CompiledGrammar::AnyJson());
  for (const char* name : {"json", "chess", "japanese", "arithmetic", "list", "c"}) {
    const std::string text = grammar::testing::ReadFile(grammar::testing::LlamaGrammarDir() / (std::string(name) + ".gbnf"));
    EXPECT_FALSE(text.empty()) << name << ": " << grammar::testing::kMissingReferences;
    out.emplace_back(name, OutputGbnf(text));
  }
  auto schema = grammar::CompileJsonSchema(
      R"({"type":"object","properties":{"name":{"type":"string","maxLength":8},"n":{"type":"integer"},
          "tags":{"type":"array","items":{"enum":["a","\u00fc","\u4e2d"]},"maxItems":3}},"required":["name"]})");
  EXPECT_TRUE(schema.ok()) << schema.status().ToString();
  out.emplace_back("schema", *schema);
  out.emplace_back("unicode", OutputGbnf("root ::= [a-c\\u00e9\\u4e2d\\U0001F600]{1,6} \"!\"\n"));
  return out;
}

// Brute force: which ids may come after `text` (the bytes accepted so far), by advancing a fresh
// matcher with each id's bytes from Tokenizer::Bytes (at_start while `text` is empty).
TokenBitset BruteForce(const std::shared_ptr<const CompiledGrammar>& g, const std::string& text,
                       const text::Tokenizer& tok, int32_t eot) {
  TokenBitset out(tok.vocab_size());
  grammar::Matcher m(g);
  EXPECT_TRUE(m.AcceptBytes(text).ok());
  const grammar::Matcher::Snapshot at = m.snapshot();
  for (int32_t id = 0; id < tok.vocab_size(); ++id) {
    if (id == eot) {
      if (m.IsComplete()) out.Set(id);
      continue;
    }
    const text::TextBytes b = tok.Bytes(id);
    const std::string& bytes = text.empty() ? b.at_start : b.bytes;
    if (!b.is_text || bytes.empty()) continue;
    m.Restore(at);
    if (m.AcceptBytes(bytes).ok()) out.Set(id);
  }
  return out;
}

TEST(OutputConstraintTest, MasksAreExactOverTheDemoVocabulary) {
  const text::Tokenizer& tok = *DemoModel().tokenizer;
  const int32_t eot = DemoModel().special.eot;
  std::mt19937_64 rng(28);
  int states = 0, split_chars = 0;
  for (const auto& [name, g] : TestGrammars()) {
    ASSERT_NE(g, nullptr) << name;
    for (int walk = 0; walk < 4; ++walk) {
      OutputConstraint c({g, DemoVocabulary(), {}}, {eot});
      for (int step = 0; step < 12 && !c.ended(); ++step) {
        TokenBitset mask;
        ASSERT_TRUE(c.AllowedIds(&mask).ok()) << name;
        const TokenBitset want = BruteForce(g, c.text(), tok, eot);
        ASSERT_EQ(mask, want) << name << " after " << c.text();
        ++states;
        std::vector<int32_t> ids;
        for (int32_t id = 0; id < mask.size(); ++id) {
          if (mask.Test(id) && (id != eot || rng() % 4 == 0)) ids.push_back(id);
        }
        if (ids.empty()) ids.push_back(eot);
        const int32_t id = ids[rng() % ids.size()];
        ASSERT_TRUE(c.Accept(id).ok()) << name << " id " << id;
        const text::TextBytes b = tok.Bytes(id);
        if (b.is_text && b.bytes.size() == 1 && static_cast<uint8_t>(b.bytes[0]) >= 0x80) ++split_chars;
      }
    }
  }
  EXPECT_GE(states, 300);
  EXPECT_GT(split_chars, 10) << "characters were spelled with byte-fallback ids";
}

TEST(OutputConstraintTest, IdsSpanningSymbolsSpecialIdsAndTheStartRule) {
  const text::Tokenizer& tok = *DemoModel().tokenizer;
  const text::SpecialTokens& s = DemoModel().special;
  const std::vector<int32_t> ids = *tok.Encode("nielsd");  // one piece, "\u2581nielsd"
  ASSERT_EQ(ids.size(), 1u);
  OutputConstraint c({OutputGbnf("root ::= \"nielsd\" (\" is\" [a-z ]*)?\n"), DemoVocabulary(), {}}, {s.eot});
  TokenBitset mask;
  ASSERT_TRUE(c.AllowedIds(&mask).ok());
  EXPECT_TRUE(mask.Test(ids[0])) << "at the start, \"\\u2581nielsd\" adds \"nielsd\": six symbols at once";
  for (int32_t special : {s.sys, s.usr, s.asst, s.eot}) EXPECT_FALSE(mask.Test(special)) << special;
  ASSERT_TRUE(c.Accept(ids[0]).ok());
  EXPECT_EQ(c.text(), "nielsd");
  ASSERT_TRUE(c.AllowedIds(&mask).ok());
  EXPECT_TRUE(mask.Test(s.eot)) << "complete";
  EXPECT_FALSE(mask.Test(ids[0])) << "after text the same id adds \" nielsd\", which the grammar refuses";
  const int32_t is = tok.Encode("nielsd is")->back();  // "\u2581is": a space and a word
  EXPECT_TRUE(mask.Test(is));
  ASSERT_TRUE(c.Accept(is).ok());
  EXPECT_EQ(c.text(), "nielsd is");
  EXPECT_EQ(tok.Decode(std::vector<int32_t>{ids[0], is}), c.text());
  EXPECT_FALSE(c.Accept(s.usr).ok()) << "never";
  ASSERT_TRUE(c.Accept(s.eot).ok());
  EXPECT_TRUE(c.ended());
  ASSERT_TRUE(c.AllowedIds(&mask).ok());
  EXPECT_EQ(mask.Count(), 0);
}

TEST(OutputConstraintTest, CharactersSplitOverByteFallbackIds) {
  const text::Tokenizer& tok = *DemoModel().tokenizer;
  const int32_t eot = DemoModel().special.eot;
  OutputConstraint c({OutputGbnf("root ::= \"\\u00e9\\u4e2d\\U0001F600\"\n"), DemoVocabulary(), {}}, {eot});
  std::vector<int32_t> out;
  for (int step = 0; step < 20 && !c.ended(); ++step) {
    TokenBitset mask;
    ASSERT_TRUE(c.AllowedIds(&mask).ok());
    ASSERT_EQ(mask.Count(), 1) << "exactly one way on, after " << out.size() << " ids";
    int32_t id = 0;
    while (!mask.Test(id)) ++id;
    ASSERT_TRUE(c.Accept(id).ok());
    out.push_back(id);
  }
  ASSERT_TRUE(c.ended());
  EXPECT_EQ(out.size(), 2u + 3u + 4u + 1u) << "one byte id per byte, then eot";
  EXPECT_EQ(c.text(), "\u00e9\u4e2d\U0001F600");
  EXPECT_EQ(tok.Decode(out), c.text());
}

// Generation with the demo model: the decoded new ids are the matcher's text.
struct ConstrainedRun {
  GenerateResult result;
  std::string text;
  std::vector<StepEvent> events;
};

ConstrainedRun Constrained(const std::shared_ptr<const CompiledGrammar>& g, int max_new_tokens, uint64_t seed,
                bool cached = true) {
  const loaders::Model& m = DemoModel();
  model::Sequence seq(m.config);
  GenerateOptions options;
  options.sampling.temperature = 1.0f;
  options.sampling.top_k = 0;
  options.sampling.seed = seed;
  options.max_new_tokens = max_new_tokens;
  options.use_kv_cache = cached;
  options.stop_ids = {m.special.eot};
  options.constraint = {g, DemoVocabulary(), {}};
  options.want_logprobs = true;
  ConstrainedRun run;
  options.on_token = [&](const StepEvent& e) { run.events.push_back(e); };
  const std::vector<int32_t> prompt = *m.tokenizer->Encode("hello, what is nielsd?");
  run.result = Generate(*m.transformer, seq, prompt, options);
  std::vector<int32_t> ids = run.result.new_tokens;
  if (!ids.empty() && ids.back() == m.special.eot) ids.pop_back();
  run.text = m.tokenizer->Decode(ids);
  return run;
}

TEST(OutputConstraintTest, GenerationFollowsTheGrammarAndEndsByItself) {
  const auto g = OutputGbnf("root ::= \"{\\\"ok\\\": \" (\"true\" | \"false\") \"}\"\n");
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    const ConstrainedRun cached = Constrained(g, 40, seed);
    ASSERT_EQ(cached.result.stop_reason, StopReason::kStopToken) << cached.result.error.ToString();
    EXPECT_TRUE(cached.text == "{\"ok\": true}" || cached.text == "{\"ok\": false}") << cached.text;
    // The eot came without a forward: the grammar could only end (no logprob on its event).
    ASSERT_FALSE(cached.events.empty());
    EXPECT_TRUE(cached.events.back().last);
    EXPECT_FALSE(cached.events.back().logprob.has_value());
    const ConstrainedRun uncached = Constrained(g, 40, seed, /*cached=*/false);
    EXPECT_EQ(uncached.result.new_tokens, cached.result.new_tokens) << "seed " << seed;
  }
}

TEST(OutputConstraintTest, MaxNewTokensBeforeTheEndIsConstraintIncomplete) {
  const auto g = OutputGbnf("root ::= \"[\" [a-z]{60} \"]\"\n");
  const ConstrainedRun run = Constrained(g, 5, 3);
  EXPECT_EQ(run.result.stop_reason, StopReason::kConstraintIncomplete);
  EXPECT_EQ(run.result.new_tokens.size(), 5u);
  EXPECT_TRUE(run.text.starts_with("[")) << run.text;
  // A complete text cut by max_new_tokens is MAX_TOKENS.
  const ConstrainedRun complete = Constrained(OutputGbnf("root ::= [a-z]+\n"), 3, 3);
  EXPECT_TRUE(complete.result.stop_reason == StopReason::kMaxTokens ||
              complete.result.stop_reason == StopReason::kStopToken);
}

// Ending within the budget: at temperature 1.0 the random demo model rarely closes a string by
// itself, so without the budget most of these replies would end inside one. With it, every reply
// whose budget allows a completion at the start (the completion bound N there fits) ends complete
// and validates (Debian's python3-jsonschema), whether max_new_tokens or the context is the limit.
TEST(OutputConstraintTest, EveryReplyWhoseBudgetAllowsACompletionEndsValid) {
  const loaders::Model& m = DemoModel();
  const char* kSchemas[] = {
      R"({"type":"object","properties":{"name":{"type":"string"},"tags":{"type":"array","items":{"type":"string"}},)"
      R"("n":{"type":"integer"}},"required":["name","tags","n"]})",
      R"({"type":"array","items":{"type":"string"},"minItems":2})",
      R"({"type":"object","properties":{"a":{"type":"object","properties":{"b":{"type":"string"}},"required":["b"]}},)"
      R"("required":["a"]})",
  };
  EXPECT_TRUE(DemoVocabulary()->after->every_byte_is_a_token()) << "byte fallback: the bytes bound applies";
  nlohmann::json cases = nlohmann::json::array();
  int total = 0, complete = 0, forced = 0, by_context = 0;
  for (size_t s = 0; s < std::size(kSchemas); ++s) {
    auto g = grammar::CompileJsonSchema(kSchemas[s]);
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    OutputConstraint probe({*g, DemoVocabulary(), {}}, {m.special.eot});
    const uint32_t n = probe.CompletionBound();
    ASSERT_LT(n, 64u) << "the shortest completion of schema " << s;
    nlohmann::json instances = nlohmann::json::array();
    for (int budget : {static_cast<int>(n) + 1, static_cast<int>(n) + 3, static_cast<int>(n) + 8, 40}) {
      for (uint64_t seed = 1; seed <= 10; ++seed) {
        for (bool context_limits : {false, true}) {
          SCOPED_TRACE(::testing::Message() << "schema " << s << " budget " << budget << " seed " << seed
                                            << (context_limits ? " (context)" : ""));
          model::Sequence seq(m.config);
          GenerateOptions options;
          options.sampling.temperature = 1.0f;
          options.sampling.top_k = 0;
          options.sampling.seed = 1000 * s + 10 * seed + budget;
          options.stop_ids = {m.special.eot};
          options.constraint = {*g, DemoVocabulary(), {}};
          std::vector<int32_t> prompt = *m.tokenizer->Encode("Answer in JSON: what is nielsd?");
          if (context_limits) {
            // The context leaves `budget` ids: a prompt of T - budget ids, max_new_tokens larger.
            const size_t want = static_cast<size_t>(m.config.context - budget);
            while (prompt.size() < want) prompt.push_back(prompt[prompt.size() % 8]);
            prompt.resize(want);
            options.max_new_tokens = budget + 50;
          } else {
            options.max_new_tokens = budget;
          }
          const GenerateResult r = Generate(*m.transformer, seq, prompt, options);
          ++total;
          ASSERT_NE(r.stop_reason, StopReason::kFailed) << r.error.ToString();
          EXPECT_NE(r.stop_reason, StopReason::kConstraintIncomplete);
          EXPECT_LE(static_cast<int64_t>(r.new_tokens.size()), budget);
          if (r.stop_reason == StopReason::kConstraintIncomplete) continue;
          ++complete;
          forced += r.constraint_forced_end ? 1 : 0;
          by_context += context_limits && r.stop_reason == StopReason::kContextFull ? 1 : 0;
          std::vector<int32_t> ids = r.new_tokens;
          if (!ids.empty() && ids.back() == m.special.eot) ids.pop_back();
          instances.push_back(m.tokenizer->Decode(ids));
        }
      }
    }
    cases.push_back({{"schema", nlohmann::json::parse(kSchemas[s])}, {"instances", instances}});
  }
  const nlohmann::json verdicts = grammar::testing::RunPython("validate_json.py", cases);
  ASSERT_EQ(verdicts.size(), cases.size());
  int valid = 0;
  for (size_t c = 0; c < cases.size(); ++c) {
    for (size_t i = 0; i < cases[c]["instances"].size(); ++i) {
      EXPECT_TRUE(verdicts[c][i].is_null()) << cases[c]["instances"][i] << ": " << verdicts[c][i];
      valid += verdicts[c][i].is_null() ? 1 : 0;
    }
  }
  std::printf("[ budget ] demo model, temperature 1.0: %d replies with a budget that allows a completion, %d complete, "
              "%d valid, %d shaped by the budget (constraint_forced_end), %d ended by the context\n",
              total, complete, valid, forced, by_context);
  EXPECT_EQ(complete, total);
  EXPECT_EQ(valid, total);
  EXPECT_GT(forced, total / 4) << "the budgets were tight: most endings are shaped by them";
}

// A budget too small for any completion the bound sees: the grammar's own mask, CONSTRAINT_INCOMPLETE.
TEST(OutputConstraintTest, ABudgetThatAllowsNoCompletionIsConstraintIncomplete) {
  auto g = grammar::CompileJsonSchema(R"({"type":"object","properties":{"name":{"type":"string"}},"required":["name"]})");
  ASSERT_TRUE(g.ok());
  OutputConstraint probe({*g, DemoVocabulary(), {}}, {DemoModel().special.eot});
  const uint32_t n = probe.CompletionBound();
  ASSERT_GT(n, 3u);
  const ConstrainedRun run = Constrained(*g, 3, 7);
  EXPECT_EQ(run.result.stop_reason, StopReason::kConstraintIncomplete);
  EXPECT_FALSE(run.result.constraint_forced_end);
  EXPECT_EQ(run.result.new_tokens.size(), 3u);
}

TEST(OutputConstraintTest, AMatcherLimitFailsTheCall) {
  const loaders::Model& m = DemoModel();
  model::Sequence seq(m.config);
  GenerateOptions options;
  options.sampling.seed = 5;
  options.max_new_tokens = 50;
  options.stop_ids = {m.special.eot};
  grammar::MatcherLimits tight;
  tight.max_states = 3;
  options.constraint = {CompiledGrammar::AnyJson(), DemoVocabulary(), tight};
  const GenerateResult result = Generate(*m.transformer, seq, *m.tokenizer->Encode("hi"), options);
  EXPECT_EQ(result.stop_reason, StopReason::kFailed);
  EXPECT_EQ(result.error.code(), common::StatusCode::kResourceExhausted) << result.error.ToString();
}

// Banned ids given with repeats and in any order act as their set: every id that could spell "yes"
// banned (twice, descending) leaves the grammar only "no"; the forced end takes the first stop id
// that is not banned (here the second one given).
TEST(OutputConstraintTest, BannedIdsAndStopIdsActAsSets) {
  const loaders::Model& m = DemoModel();
  const grammar::Vocabulary& after = *DemoVocabulary()->after;
  const grammar::Vocabulary& start = *DemoVocabulary()->at_start;
  std::vector<int32_t> banned;
  for (int copy = 0; copy < 2; ++copy) {
    for (int32_t id = after.size() - 1; id >= 0; --id) {
      if (after.token(id).bytes.find('y') != std::string::npos || start.token(id).bytes.find('y') != std::string::npos) {
        banned.push_back(id);
      }
    }
    banned.push_back(m.special.usr);
  }
  ASSERT_GT(banned.size(), 4u);
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    model::Sequence seq(m.config);
    GenerateOptions options;
    options.sampling.temperature = 1.0f;
    options.sampling.top_k = 0;
    options.sampling.seed = seed;
    options.sampling.banned_ids = banned;
    options.max_new_tokens = 20;
    options.stop_ids = {m.special.usr, m.special.eot};
    options.constraint = {OutputGbnf("root ::= \"yes\" | \"no\"\n"), DemoVocabulary(), {}};
    const GenerateResult result = Generate(*m.transformer, seq, *m.tokenizer->Encode("yes or no?"), options);
    ASSERT_EQ(result.stop_reason, StopReason::kStopToken) << result.error.ToString();
    ASSERT_FALSE(result.new_tokens.empty());
    EXPECT_EQ(result.new_tokens.back(), m.special.eot);
    std::vector<int32_t> ids = result.new_tokens;
    ids.pop_back();
    EXPECT_EQ(m.tokenizer->Decode(ids), "no") << seed;
    for (int32_t id : result.new_tokens) EXPECT_EQ(std::find(banned.begin(), banned.end(), id), banned.end()) << id;
  }
}

TEST(OutputConstraintTest, AMatcherBudgetFailsTheCallWithItsName) {
  // Budgets from tiny to enough: past it the turn fails RESOURCE_EXHAUSTED naming the budget,
  // whether the mask or the advance by the sampled id crossed it (never INTERNAL); within it the
  // turn runs as usual.
  const loaders::Model& m = DemoModel();
  int failed = 0, finished = 0;
  for (uint64_t budget = 10; budget <= 20'000; budget = budget * 3 / 2) {
    SCOPED_TRACE(budget);
    model::Sequence seq(m.config);
    GenerateOptions options;
    options.sampling.seed = 11;
    options.max_new_tokens = 12;
    options.stop_ids = {m.special.eot};
    grammar::MatcherLimits limits;
    limits.max_steps_per_token = budget;
    options.constraint = {CompiledGrammar::AnyJson(), DemoVocabulary(), limits};
    const GenerateResult result = Generate(*m.transformer, seq, *m.tokenizer->Encode("hi"), options);
    if (result.stop_reason == StopReason::kFailed) {
      ++failed;
      EXPECT_EQ(result.error.code(), common::StatusCode::kResourceExhausted) << result.error.ToString();
      EXPECT_NE(result.error.message().find("(budget matcher_steps_per_token)"), std::string::npos) << result.error.ToString();
    } else {
      ++finished;
    }
  }
  EXPECT_GT(failed, 0);
  EXPECT_GT(finished, 0);
}

}  // namespace
}  // namespace niels::daemon::engine
