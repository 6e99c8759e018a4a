// Tool-call grammars (daemon/tool_grammar/tool_call_grammar.h):
//   - sentences derived from the grammar itself (SentenceGenerator, independent of the matcher),
//     for each family and tool choice, parse with the family's ToolCallParser into calls of the
//     tools, and every call's arguments validate against its tool's schema (python3-jsonschema);
//     REQUIRED and NAMED sentences are calls only (no content), NAMED only of that tool;
//   - sampled replies (temperature 1.0, many seeds) of a random-weight model with Qwen3's real
//     vocabulary (151,936 rows) under the grammar, within max_new_tokens: every one complete, and
//     parsed and validated the same way (Hermes, and the other two families on the same vocabulary);
//   - refusals: no tools, duplicate or unwritable names, a schema that does not compile or allows
//     non-objects, a NAMED choice of no tool.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "daemon/engine/generator.h"
#include "daemon/grammar/json_schema.h"
#include "daemon/engine/output_constraint.h"
#include "daemon/model/sequence.h"
#include "daemon/model/transformer.h"
#include "daemon/model/weights.h"
#include "daemon/text/generic_tool_format.h"
#include "daemon/tool_calls/tool_call_parser.h"
#include "daemon/tool_grammar/tool_call_grammar.h"
#include "nlohmann/json.hpp"
#include "tests/daemon/grammar/grammar_test_util.h"
#include "tests/daemon/text/reference_tokenizers.h"

namespace niels::daemon::tool_grammar {
namespace {

using tool_calls::ToolCallFamily;

std::vector<text::ToolDefinition> Tools() {
  return {
      {"get_weather", "The weather at a place",
       R"({"type":"object","properties":{"city":{"type":"string","maxLength":12},"unit":{"enum":["c","f"]}},"required":["city"]})"},
      {"add", "Adds two integers",
       R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"}},"required":["a","b"]})"},
      {"search", "Searches", R"({"type":"object","properties":{"query":{"type":"string"},"tags":{"type":"array","items":{"type":"string","maxLength":5},"maxItems":3}},"required":["query"]})"},
      {"now", "The time (no parameters)", ""},
  };
}

nlohmann::json SchemaOf(const text::ToolDefinition& tool) {
  return tool.parameters.empty() ? nlohmann::json::parse(R"({"type":"object"})") : nlohmann::json::parse(tool.parameters);
}

const char* FamilyName(ToolCallFamily f) {
  return f == ToolCallFamily::kHermes ? "hermes" : f == ToolCallFamily::kLlama3Json ? "llama3_json" : "generic_json";
}

// Parses `replies` with the family's parser; checks the calls against the choice, and collects the
// arguments for the schema validator. Returns the number of calls.
struct Checked {
  int replies = 0, calls = 0, replies_with_calls = 0;
  nlohmann::json cases = nlohmann::json::array();  // validate_json.py input
  std::vector<std::string> where;                  // per case
};

void CheckReplies(const std::vector<std::string>& replies, ToolCallFamily family, const ToolChoice& choice,
                  const std::vector<text::ToolDefinition>& tools, Checked* out) {
  tool_calls::ToolCallParserOptions options;
  for (const auto& t : tools) options.tool_names.push_back(t.name);
  for (const std::string& reply : replies) {
    ++out->replies;
    const tool_calls::FinalReply parsed = tool_calls::ParseToolCalls(family, options, reply);
    if (choice.mode != ToolChoiceMode::kAuto) {
      EXPECT_FALSE(parsed.calls.empty()) << FamilyName(family) << ": no call in " << reply;
      // Calls only: at most the "\n" between Hermes calls is content.
      for (char c : parsed.content) {
        EXPECT_EQ(c, '\n') << "content beside the calls: " << reply;
      }
    }
    out->replies_with_calls += parsed.calls.empty() ? 0 : 1;
    for (const tool_calls::ToolCall& call : parsed.calls) {
      ++out->calls;
      if (choice.mode == ToolChoiceMode::kNamed) {
        EXPECT_EQ(call.name, choice.name) << reply;
      }
      const text::ToolDefinition* tool = nullptr;
      for (const auto& t : tools) {
        if (t.name == call.name) tool = &t;
      }
      ASSERT_NE(tool, nullptr) << call.name;
      out->cases.push_back({{"schema", SchemaOf(*tool)}, {"instances", nlohmann::json::array({call.arguments})}});
      out->where.push_back(reply);
    }
  }
}

void ValidateAll(const Checked& c) {
  if (c.cases.empty()) return;
  const nlohmann::json verdicts = grammar::testing::RunPython("validate_json.py", c.cases);
  ASSERT_EQ(verdicts.size(), c.cases.size());
  for (size_t i = 0; i < verdicts.size(); ++i) {
    EXPECT_TRUE(verdicts[i][0].is_null()) << c.cases[i]["instances"][0] << " in " << c.where[i] << ": " << verdicts[i][0];
  }
}

const std::vector<ToolChoice> kChoices = {
    {ToolChoiceMode::kRequired, ""}, {ToolChoiceMode::kNamed, "search"}, {ToolChoiceMode::kAuto, ""}};
const std::vector<ToolCallFamily> kFamilies = {ToolCallFamily::kHermes, ToolCallFamily::kLlama3Json,
                                               ToolCallFamily::kGenericJson};

TEST(ToolCallGrammarTest, DerivedSentencesParseIntoValidCalls) {
  const auto tools = Tools();
  for (ToolCallFamily family : kFamilies) {
    for (const ToolChoice& choice : kChoices) {
      for (bool reasoning : {false, true}) {
        SCOPED_TRACE(::testing::Message() << FamilyName(family) << " mode " << static_cast<int>(choice.mode)
                                          << (reasoning ? " with reasoning" : ""));
        ToolGrammarOptions options;
        options.max_calls = 3;
        if (reasoning) options.reasoning = ReasoningTags{"<think>", "</think>"};
        auto g = CompileToolCallGrammar(tools, family, choice, options);
        ASSERT_TRUE(g.ok()) << g.status().ToString();
        std::vector<std::string> replies;
        for (uint64_t seed = 1; replies.size() < 150 && seed < 2000; ++seed) {
          grammar::testing::SentenceGenerator gen(**g, seed, 200);
          std::string s;
          if (!gen.Generate(&s)) continue;
          if (reasoning) {  // the parser is given the answer: the reasoning block is split off first
            if (s.starts_with("<think>")) {
              const size_t close = s.find("</think>");
              ASSERT_NE(close, std::string::npos) << s;
              const size_t answer = s.find_first_not_of(" \t\n\r", close + 8);
              s = answer == std::string::npos ? std::string() : s.substr(answer);
            }
          }
          replies.push_back(s);
        }
        ASSERT_GE(replies.size(), 100u);
        if (choice.mode == ToolChoiceMode::kAuto && family == ToolCallFamily::kHermes) {
          // Derivations rarely spell the 11 characters of the trigger by chance: splice calls (the
          // REQUIRED grammar's sentences) into text, which the lazy grammar must take whole.
          ToolGrammarOptions plain = options;
          plain.reasoning.reset();
          plain.max_calls = 1;  // two spliced: within the three the lazy grammar allows
          auto calls = CompileToolCallGrammar(tools, family, {ToolChoiceMode::kRequired, ""}, plain);
          ASSERT_TRUE(calls.ok());
          for (uint64_t seed = 1; seed <= 60; ++seed) {
            grammar::testing::SentenceGenerator gen(**calls, seed, 200);
            std::string call;
            if (!gen.Generate(&call)) continue;
            const std::string reply = "Let me look <tool that up.\n" + call + "\nThen <tool_cal" + call;
            EXPECT_TRUE(grammar::testing::Judge(*g, reply).full) << reply;
            replies.push_back(reply);
          }
          // Inside free text the trigger opens a call: what follows must be one.
          EXPECT_FALSE(grammar::testing::Judge(*g, "a <tool_call>\n{\"name\": \"nope").prefix);
          EXPECT_FALSE(grammar::testing::Judge(*g, "a <tool_call> hello").prefix);
          EXPECT_TRUE(grammar::testing::Judge(*g, "a <tool_call").full) << "a trigger's start at the end is text";
        }
        Checked checked;
        CheckReplies(replies, family, choice, tools, &checked);
        ValidateAll(checked);
        if (choice.mode != ToolChoiceMode::kAuto) {
          EXPECT_EQ(checked.replies_with_calls, checked.replies);
        } else {
          EXPECT_GT(checked.replies_with_calls, 0) << "no derived reply called a tool";
          EXPECT_LT(checked.replies_with_calls, checked.replies) << "no derived reply was free text";
        }
      }
    }
  }
}

// The generic tool format shows the model its own calls as the text it sampled: a forced
// sentence of the kGenericJson grammar, parsed into calls and rewritten as an assistant message
// (text/generic_tool_format.h), is that sentence again, byte for byte, but for JSON whitespace the
// model wrote after a call's arguments.
TEST(ToolCallGrammarTest, GenericFormatRendersACallBackAsTheGrammarWroteIt) {
  const auto tools = Tools();
  ToolGrammarOptions options;
  options.max_calls = 3;
  auto g = CompileToolCallGrammar(tools, ToolCallFamily::kGenericJson, {ToolChoiceMode::kRequired, ""}, options);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  tool_calls::ToolCallParserOptions parser;
  for (const auto& t : tools) parser.tool_names.push_back(t.name);
  int checked = 0;
  for (uint64_t seed = 1; checked < 100 && seed < 2000; ++seed) {
    grammar::testing::SentenceGenerator gen(**g, seed, 200);
    std::string sentence;
    if (!gen.Generate(&sentence)) continue;
    const tool_calls::FinalReply parsed = tool_calls::ParseToolCalls(ToolCallFamily::kGenericJson, parser, sentence);
    ASSERT_FALSE(parsed.calls.empty()) << sentence;
    text::ChatMessage reply{text::Role::kAssistant, parsed.content, ""};
    for (const tool_calls::ToolCall& call : parsed.calls) reply.tool_calls.push_back({"id", call.name, call.arguments});
    const text::RewrittenConversation rewritten = text::GenericToolConversation(std::nullopt, {&reply, 1}, &tools);
    ASSERT_EQ(rewritten.messages.size(), 1u);
    // The schema grammar lets JSON whitespace follow a value; after a call's arguments the parser
    // does not keep it, so the rendering has none there.
    std::string expected = sentence;
    size_t at = 0;
    for (const tool_calls::ToolCall& call : parsed.calls) {
      at = expected.find(call.arguments, at);
      ASSERT_NE(at, std::string::npos);
      at += call.arguments.size();
      const size_t after = expected.find_first_not_of(" \t\n\r", at);
      expected.erase(at, after - at);
    }
    EXPECT_EQ(rewritten.messages[0].content, expected);
    ++checked;
  }
  EXPECT_EQ(checked, 100);
}

TEST(ToolCallGrammarTest, RefusalsNameTheField) {
  const auto tools = Tools();
  const ToolChoice required{ToolChoiceMode::kRequired, ""};
  auto refused = [&](std::vector<text::ToolDefinition> t, ToolChoice c, const std::string& starts) {
    auto g = CompileToolCallGrammar(t, ToolCallFamily::kHermes, c);
    ASSERT_FALSE(g.ok()) << starts;
    EXPECT_EQ(g.status().code(), common::StatusCode::kInvalidArgument) << g.status().ToString();
    EXPECT_TRUE(g.status().message().starts_with(starts)) << g.status().ToString();
  };
  refused({}, required, "tools:");
  auto dup = tools;
  dup.push_back(tools[1]);
  refused(dup, required, "tools[4].name: 'add' is given twice");
  refused({{"bad\"name", "", ""}}, required, "tools[0].name:");
  refused({{"", "", ""}}, required, "tools[0].name: empty");
  refused({{"f", "", R"({"type":"string"})"}}, required, "tools[0].parameters: the schema allows values that are not JSON objects");
  refused({{"f", "", R"({"type":"object","not":{}})"}}, required, "tools[0].parameters: json schema");
  refused({{"f", "", "{nope"}}, required, "tools[0].parameters:");
  refused(tools, {ToolChoiceMode::kNamed, "missing"}, "tool_choice.name: 'missing' is none of the tools");
}

// Sampling on Qwen3's real vocabulary with a random-weight model of its output size.
constexpr int32_t kRows = 151936;

struct Qwen {
  std::unique_ptr<text::BpeTokenizer> tok;
  std::vector<int32_t> stops;
  std::shared_ptr<const engine::ConstraintVocabulary> vocab;
};

const Qwen& Qwen3() {
  static const Qwen* q = [] {
    auto* out = new Qwen;
    out->tok = text::testing::LoadReferenceTokenizer("qwen3");
    if (out->tok == nullptr) return out;
    for (const char* literal : {"<|im_end|>", "<|endoftext|>"}) {
      const auto ids = out->tok->EncodeRendered(literal);
      if (ids.ok() && ids->size() == 1) out->stops.push_back(ids->front());
    }
    auto built = engine::ConstraintVocabulary::Build(*out->tok, kRows, out->stops);
    EXPECT_TRUE(built.ok()) << built.status().ToString();
    if (built.ok()) out->vocab = std::move(built).value();
    return out;
  }();
  return *q;
}

const model::Transformer& RandomQwenShapedModel() {
  static const model::Transformer* m = [] {
    model::ModelConfig c;
    c.vocab_size = kRows, c.context = 512, c.width = 32, c.layers = 1, c.heads = 4, c.d_ff = 64;
    c.rope_theta = 10000.0, c.name = "random-qwen3-vocab";
    return new model::Transformer(c, model::RandomWeights(c, 38, /*std=*/0.5));
  }();
  return *m;
}

TEST(ToolCallGrammarTest, SampledRepliesOnQwen3sVocabularyParseIntoValidCalls) {
  const Qwen& q = Qwen3();
  ASSERT_NE(q.vocab, nullptr) << grammar::testing::kMissingReferences;
  const model::Transformer& m = RandomQwenShapedModel();
  const auto tools = Tools();
  const std::vector<int32_t> prompt = *q.tok->Encode("Call a tool:");
  for (ToolCallFamily family : kFamilies) {
    for (const ToolChoice& choice : kChoices) {
      SCOPED_TRACE(::testing::Message() << FamilyName(family) << " mode " << static_cast<int>(choice.mode));
      ToolGrammarOptions options;
      options.max_calls = 2;
      auto g = CompileToolCallGrammar(tools, family, choice, options);
      ASSERT_TRUE(g.ok()) << g.status().ToString();
      std::vector<std::string> replies;
      int forced = 0;
      const int seeds = choice.mode == ToolChoiceMode::kAuto ? 3 : 6;
      for (int seed = 1; seed <= seeds; ++seed) {
        model::Sequence seq(m.config());
        engine::GenerateOptions go;
        go.sampling.temperature = 1.0f;
        go.sampling.top_k = 0;
        go.sampling.seed = 7000 + 100 * static_cast<int>(family) + 10 * static_cast<int>(choice.mode) + seed;
        go.max_new_tokens = 48;
        go.stop_ids = {q.stops[0]};
        go.constraint = {*g, q.vocab, {}};
        const engine::GenerateResult r = engine::Generate(m, seq, prompt, go);
        ASSERT_NE(r.stop_reason, engine::StopReason::kFailed) << r.error.ToString();
        ASSERT_NE(r.stop_reason, engine::StopReason::kConstraintIncomplete) << "seed " << seed;
        forced += r.constraint_forced_end ? 1 : 0;
        std::vector<int32_t> ids = r.new_tokens;
        if (!ids.empty() && ids.back() == q.stops[0]) ids.pop_back();
        replies.push_back(q.tok->Decode(ids));
      }
      Checked checked;
      CheckReplies(replies, family, choice, tools, &checked);
      ValidateAll(checked);
      std::printf("[ tool calls ] %s, %s: %d replies, %d with calls, %d calls, all valid; %d ended by the budget\n",
                  FamilyName(family),
                  choice.mode == ToolChoiceMode::kAuto ? "auto" : choice.mode == ToolChoiceMode::kNamed ? "named" : "required",
                  checked.replies, checked.replies_with_calls, checked.calls, forced);
      if (choice.mode != ToolChoiceMode::kAuto) {
        EXPECT_EQ(checked.replies_with_calls, checked.replies);
      }
    }
  }
}

// A client's grammar placed after an optional reasoning block (CompileAfterOptionalReasoning): its
// sentences alone, or after one block and JSON whitespace; nothing else. The client's rule names
// cannot clash with the ones written around it (its grammar is embedded as compiled). Derived
// sentences, with their block split off, validate against the schema.
TEST(ToolCallGrammarTest, AnAnswerGrammarAfterAnOptionalReasoningBlock) {
  const ReasoningTags tags{"<think>", "</think>"};
  // Named like the rules written around it.
  auto own = grammar::CompiledGrammar::FromGbnf("root ::= answer jws think-0\nanswer ::= \"yes\" | \"no\"\njws ::= \"!\"\nthink-0 ::= \"z\"\n");
  ASSERT_TRUE(own.ok()) << own.status().ToString();
  auto g = CompileAfterOptionalReasoning(**own, tags);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_TRUE(grammar::testing::Judge(*g, "yes!z").full);
  EXPECT_TRUE(grammar::testing::Judge(*g, "<think>a </thin k></think>\n\nno!z").full);
  EXPECT_TRUE(grammar::testing::Judge(*g, "<think></think>yes!z").full);
  EXPECT_TRUE(grammar::testing::Judge(*g, "<think>still thinking").prefix);
  EXPECT_FALSE(grammar::testing::Judge(*g, "<think>still thinking").full);
  EXPECT_FALSE(grammar::testing::Judge(*g, "<think>x</think>").full) << "the answer must follow";
  EXPECT_FALSE(grammar::testing::Judge(*g, "<think>x</think> maybe").prefix);
  EXPECT_FALSE(grammar::testing::Judge(*g, " yes!z").prefix) << "whitespace only after a block";
  EXPECT_FALSE(grammar::testing::Judge(*g, "yes!z<think>").prefix);
  EXPECT_FALSE(grammar::testing::Judge(*g, "<think>a</think><think>b</think>yes!z").prefix) << "one block";
  EXPECT_FALSE(CompileAfterOptionalReasoning(**own, ReasoningTags{"<think>", ""}).ok());

  const std::string schema = R"({"type":"object","properties":{"n":{"type":"integer"},"s":{"type":"string","maxLength":6}},"required":["n"]})";
  auto answer = grammar::CompileJsonSchema(schema);
  ASSERT_TRUE(answer.ok()) << answer.status().ToString();
  auto wrapped = CompileAfterOptionalReasoning(**answer, tags);
  ASSERT_TRUE(wrapped.ok()) << wrapped.status().ToString();
  nlohmann::json cases = nlohmann::json::array({{{"schema", nlohmann::json::parse(schema)}, {"instances", nlohmann::json::array()}}});
  int with_block = 0;
  for (uint64_t seed = 1; seed <= 300; ++seed) {
    grammar::testing::SentenceGenerator gen(**wrapped, seed, 200);
    std::string s;
    if (!gen.Generate(&s)) continue;
    if (s.starts_with("<think>")) {
      ++with_block;
      const size_t close = s.find("</think>");
      ASSERT_NE(close, std::string::npos) << s;
      s = s.substr(std::min(s.size(), s.find_first_not_of(" \t\n\r", close + 8)));
    }
    cases[0]["instances"].push_back(s);
  }
  ASSERT_GE(cases[0]["instances"].size(), 200u);
  EXPECT_GT(with_block, 0);
  EXPECT_LT(with_block, static_cast<int>(cases[0]["instances"].size()));
  const nlohmann::json verdicts = grammar::testing::RunPython("validate_json.py", cases);
  ASSERT_EQ(verdicts.size(), 1u);
  for (size_t i = 0; i < verdicts[0].size(); ++i) {
    EXPECT_TRUE(verdicts[0][i].is_null()) << cases[0]["instances"][i] << ": " << verdicts[0][i];
  }
}

// A reasoning block before a required call: the budget closes it in time for a whole call.
TEST(ToolCallGrammarTest, TheBudgetClosesAReasoningBlockInTimeForTheCall) {
  const Qwen& q = Qwen3();
  ASSERT_NE(q.vocab, nullptr) << grammar::testing::kMissingReferences;
  const model::Transformer& m = RandomQwenShapedModel();
  const auto tools = Tools();
  ToolGrammarOptions options;
  options.reasoning = ReasoningTags{"<think>", "</think>"};
  auto g = CompileToolCallGrammar(tools, ToolCallFamily::kHermes, {ToolChoiceMode::kRequired, ""}, options);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  const std::vector<int32_t> prompt = *q.tok->Encode("Think, then call a tool:");
  std::vector<std::string> answers;
  int thought = 0;
  for (int seed = 1; seed <= 8; ++seed) {
    model::Sequence seq(m.config());
    engine::GenerateOptions go;
    go.sampling.temperature = 1.0f;
    go.sampling.top_k = 0;
    go.sampling.seed = 9100 + seed;
    go.max_new_tokens = 56;
    go.stop_ids = {q.stops[0]};
    go.constraint = {*g, q.vocab, {}};
    const engine::GenerateResult r = engine::Generate(m, seq, prompt, go);
    ASSERT_NE(r.stop_reason, engine::StopReason::kFailed) << r.error.ToString();
    ASSERT_NE(r.stop_reason, engine::StopReason::kConstraintIncomplete) << "seed " << seed;
    std::vector<int32_t> ids = r.new_tokens;
    if (!ids.empty() && ids.back() == q.stops[0]) ids.pop_back();
    std::string text = q.tok->Decode(ids);
    if (text.starts_with("<think>")) {
      ++thought;
      const size_t close = text.find("</think>");
      ASSERT_NE(close, std::string::npos) << text;
      const size_t answer = text.find_first_not_of(" \t\n\r", close + 8);
      text = answer == std::string::npos ? std::string() : text.substr(answer);
    }
    answers.push_back(text);
  }
  Checked checked;
  CheckReplies(answers, ToolCallFamily::kHermes, {ToolChoiceMode::kRequired, ""}, tools, &checked);
  ValidateAll(checked);
  std::printf("[ tool calls ] hermes, required after reasoning: %d replies, %d began with a think block, %d calls\n",
              checked.replies, thought, checked.calls);
  EXPECT_EQ(checked.replies_with_calls, checked.replies);
  EXPECT_GT(thought, 0);
}

}  // namespace
}  // namespace niels::daemon::tool_grammar
