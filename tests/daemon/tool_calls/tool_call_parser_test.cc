// The tool-call parsers (daemon/tool_calls/tool_call_parser.h): one table of model outputs per
// family, shaped as the families' documentation shows them (Qwen's chat template and function-call
// docs for Hermes-style <tool_call>; Meta's Llama 3.1/3.2 template and prompt-format docs for the
// JSON calls), each parsed whole, streamed byte by byte and in seeded random pieces: all must give
// the expected calls and content, and the streamed pieces must join to the final reply.
#include "daemon/tool_calls/tool_call_parser.h"

#include <gtest/gtest.h>

#include <map>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "common/bounded_json.h"

namespace niels::daemon::tool_calls {
namespace {

const std::vector<std::string> kToolNames = {"get_weather", "get_time", "search", "write_file"};

ToolCallParserOptions Options(size_t max_call_bytes = kDefaultMaxCallBytes) {
  ToolCallParserOptions options;
  options.tool_names = kToolNames;
  options.max_call_bytes = max_call_bytes;
  return options;
}

struct Case {
  const char* name;
  ToolCallFamily family;
  std::string text;
  std::vector<ToolCall> calls;
  std::string content;
};

// gtest prints a failing case by its name.
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

std::string HermesCall(const std::string& name, const std::string& arguments) {
  return "<tool_call>\n{\"name\": \"" + name + "\", \"arguments\": " + arguments + "}\n</tool_call>";
}

const std::string kParisArgs = R"({"location": "Paris", "unit": "celsius"})";
const std::string kSeattleArgs = R"({"location": "Seattle, WA", "unit": "fahrenheit"})";
const std::string kNestedArgs =
    R"({"path": "notes/a b.txt", "content": {"lines": ["x } y", "{ \"q\" \\"], "meta": {"n": [1, 2.5e3, -0, {"deep": [null, true, false]}]}}})";
const std::string kUnicodeArgs = R"({"location": "Zürich – 東京 🌧", "note": "\u00e9\n"})";

std::vector<Case> Cases() {
  using F = ToolCallFamily;
  std::vector<Case> cases = {
      // Hermes (Qwen3, Qwen2.5).
      {"hermes_plain_text", F::kHermes, "The capital of France is Paris.", {}, "The capital of France is Paris."},
      {"hermes_one_call", F::kHermes, HermesCall("get_weather", kParisArgs), {{"get_weather", kParisArgs}}, ""},
      {"hermes_text_then_two_calls", F::kHermes,
       "Let me check both cities.\n" + HermesCall("get_weather", kParisArgs) + "\n" +
           HermesCall("get_weather", kSeattleArgs),
       {{"get_weather", kParisArgs}, {"get_weather", kSeattleArgs}},
       "Let me check both cities.\n\n"},
      {"hermes_text_after_call", F::kHermes, HermesCall("get_time", "{}") + "\nDone, asking now.",
       {{"get_time", "{}"}}, "\nDone, asking now."},
      {"hermes_nested_arguments", F::kHermes, HermesCall("write_file", kNestedArgs), {{"write_file", kNestedArgs}},
       ""},
      {"hermes_unicode", F::kHermes, "Wetter für Zürich: " + HermesCall("get_weather", kUnicodeArgs) + " ✓",
       {{"get_weather", kUnicodeArgs}}, "Wetter für Zürich:  ✓"},
      {"hermes_compact_no_newlines", F::kHermes,
       R"(<tool_call>{"arguments":{"query":"a"},"name":"search"}</tool_call>)", {{"search", R"({"query":"a"})"}},
       ""},
      {"hermes_space_before_close", F::kHermes,
       "<tool_call> \t{\"name\": \"search\", \"arguments\": {\"query\": \"b\"}}  \n\n</tool_call>",
       {{"search", R"({"query": "b"})"}}, ""},
      {"hermes_unterminated", F::kHermes, "Sure. <tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\"",
       {}, "Sure. <tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\""},
      {"hermes_missing_close_tag_at_end", F::kHermes, "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n",
       {}, "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n"},
      {"hermes_partial_close_tag_at_end", F::kHermes, "<tool_call>{\"name\": \"get_time\", \"arguments\": {}}</tool_ca",
       {}, "<tool_call>{\"name\": \"get_time\", \"arguments\": {}}</tool_ca"},
      {"hermes_invalid_json", F::kHermes, HermesCall("get_weather", R"({"location": Paris})"), {},
       HermesCall("get_weather", R"({"location": Paris})")},
      {"hermes_unknown_tool_is_content", F::kHermes, HermesCall("delete_everything", "{}"), {},
       HermesCall("delete_everything", "{}")},
      {"hermes_arguments_not_object", F::kHermes, HermesCall("search", R"("llama")"), {},
       HermesCall("search", R"("llama")")},
      {"hermes_extra_key", F::kHermes,
       R"(<tool_call>{"name": "search", "arguments": {}, "id": 1}</tool_call>)", {},
       R"(<tool_call>{"name": "search", "arguments": {}, "id": 1}</tool_call>)"},
      {"hermes_duplicate_key", F::kHermes,
       R"(<tool_call>{"name": "search", "name": "get_time", "arguments": {}}</tool_call>)", {},
       R"(<tool_call>{"name": "search", "name": "get_time", "arguments": {}}</tool_call>)"},
      {"hermes_escaped_key", F::kHermes, R"(<tool_call>{"n\u0061me": "search", "arguments": {}}</tool_call>)", {},
       R"(<tool_call>{"n\u0061me": "search", "arguments": {}}</tool_call>)"},
      {"hermes_not_an_object", F::kHermes, "<tool_call>[1, 2]</tool_call> and <tool_call>", {},
       "<tool_call>[1, 2]</tool_call> and <tool_call>"},
      {"hermes_text_between_object_and_tag", F::kHermes,
       "<tool_call>{\"name\": \"get_time\", \"arguments\": {}} oops</tool_call>", {},
       "<tool_call>{\"name\": \"get_time\", \"arguments\": {}} oops</tool_call>"},
      {"hermes_forgot_close_tag_then_next_call", F::kHermes,
       "<tool_call>{\"name\": \"get_time\", \"arguments\": {}}" + HermesCall("search", R"({"query": "c"})"),
       {{"search", R"({"query": "c"})"}}, "<tool_call>{\"name\": \"get_time\", \"arguments\": {}}"},
      {"hermes_near_triggers", F::kHermes,
       std::string("a <tool_ca b <<tool_call>") + "{\"name\": \"get_time\", \"arguments\": {}}</tool_call> <tool_call",
       {{"get_time", "{}"}}, "a <tool_ca b < <tool_call"},
      {"hermes_close_tag_in_string", F::kHermes,
       R"(<tool_call>{"name": "search", "arguments": {"query": "</tool_call> <tool_call>"}}</tool_call>)",
       {{"search", R"({"query": "</tool_call> <tool_call>"})"}}, ""},
      {"hermes_json_family_shape_is_text", F::kHermes, R"({"name": "search", "parameters": {}})", {},
       R"({"name": "search", "parameters": {}})"},

      // Llama 3.1-3.3 JSON tool calls.
      {"llama_template_shape", F::kLlama3Json,
       R"({"name": "get_weather", "parameters": {"location": "San Francisco, CA"}})",
       {{"get_weather", R"({"location": "San Francisco, CA"})"}}, ""},
      {"llama_python_tag", F::kLlama3Json, R"(<|python_tag|>{"name": "search", "parameters": {"query": "llama 3.1"}})",
       {{"search", R"({"query": "llama 3.1"})"}}, ""},
      {"llama_python_tag_then_space", F::kLlama3Json,
       "<|python_tag|>\n {\"name\": \"search\", \"parameters\": {\"query\": \"x\"}}", {{"search", R"({"query": "x"})"}},
       ""},
      {"llama_arguments_spelling", F::kLlama3Json, R"({"name": "get_time", "arguments": {"zone": "UTC"}})",
       {{"get_time", R"({"zone": "UTC"})"}}, ""},
      {"llama_type_function", F::kLlama3Json, R"({"type": "function", "name": "get_time", "parameters": {}})",
       {{"get_time", "{}"}}, ""},
      {"llama_leading_whitespace", F::kLlama3Json, " \n{\"name\": \"get_time\", \"parameters\": {}}",
       {{"get_time", "{}"}}, " \n"},
      {"llama_two_calls_semicolon", F::kLlama3Json,
       R"({"name": "get_weather", "parameters": {"location": "Paris"}}; {"name": "get_time", "parameters": {}})",
       {{"get_weather", R"({"location": "Paris"})"}, {"get_time", "{}"}}, ""},
      {"llama_two_calls_newline", F::kLlama3Json,
       "{\"name\": \"get_time\", \"parameters\": {}}\n{\"name\": \"search\", \"parameters\": {\"query\": \"y\"}}",
       {{"get_time", "{}"}, {"search", R"({"query": "y"})"}}, "\n"},
      {"llama_call_then_text", F::kLlama3Json, "{\"name\": \"get_time\", \"parameters\": {}}\nLet me know.",
       {{"get_time", "{}"}}, "\nLet me know."},
      {"llama_semicolon_then_text", F::kLlama3Json, "{\"name\": \"get_time\", \"parameters\": {}}; that is all",
       {{"get_time", "{}"}}, "; that is all"},
      {"llama_nested_unicode", F::kLlama3Json,
       "{\"name\": \"write_file\", \"parameters\": " + kNestedArgs + "};{\"name\": \"get_weather\", \"parameters\": " +
           kUnicodeArgs + "}",
       {{"write_file", kNestedArgs}, {"get_weather", kUnicodeArgs}}, ""},
      {"llama_text_first_is_content", F::kLlama3Json,
       R"(The call would be {"name": "get_time", "parameters": {}})", {},
       R"(The call would be {"name": "get_time", "parameters": {}})"},
      {"llama_code_interpreter_is_content", F::kLlama3Json,
       "<|python_tag|>def is_prime(n):\n    return n > 1\n\nprint(is_prime(7))", {},
       "<|python_tag|>def is_prime(n):\n    return n > 1\n\nprint(is_prime(7))"},
      {"llama_pythonic_list_is_content", F::kLlama3Json, "[get_weather(city='San Francisco', metric='celsius')]", {},
       "[get_weather(city='San Francisco', metric='celsius')]"},
      {"llama_almost_python_tag", F::kLlama3Json, "<|python_ta>{}", {}, "<|python_ta>{}"},
      {"llama_unknown_tool", F::kLlama3Json, R"({"name": "rm", "parameters": {}})", {},
       R"({"name": "rm", "parameters": {}})"},
      {"llama_both_argument_keys", F::kLlama3Json, R"({"name": "get_time", "parameters": {}, "arguments": {}})", {},
       R"({"name": "get_time", "parameters": {}, "arguments": {}})"},
      {"llama_type_not_function", F::kLlama3Json, R"({"type": "tool", "name": "get_time", "parameters": {}})", {},
       R"({"type": "tool", "name": "get_time", "parameters": {}})"},
      {"llama_second_call_invalid", F::kLlama3Json,
       R"({"name": "get_time", "parameters": {}}; {"name": "get_time", "parameters": [}; {"name": "search"})",
       {{"get_time", "{}"}}, R"(; {"name": "get_time", "parameters": [}; {"name": "search"})"},
      {"llama_unterminated", F::kLlama3Json, R"({"name": "search", "parameters": {"query": "unfinished)", {},
       R"({"name": "search", "parameters": {"query": "unfinished)"},
      {"llama_plain_answer", F::kLlama3Json, "It is 25 C in San Francisco.", {}, "It is 25 C in San Francisco."},

      // The generic format.
      {"generic_answer", F::kGenericJson, "The answer is 4.", {}, "The answer is 4."},
      {"generic_one_call", F::kGenericJson,
       R"({"tool_calls": [{"name": "get_weather", "arguments": {"location": "Oslo"}}]})",
       {{"get_weather", R"({"location": "Oslo"})"}}, ""},
      {"generic_two_calls_nested", F::kGenericJson,
       "\n{\"tool_calls\": [\n  {\"name\": \"write_file\", \"arguments\": " + kNestedArgs +
           "},\n  {\"arguments\": " + kUnicodeArgs + ", \"name\": \"get_weather\"}\n]}\n",
       {{"write_file", kNestedArgs}, {"get_weather", kUnicodeArgs}}, "\n\n"},
      {"generic_text_after", F::kGenericJson, R"({"tool_calls":[{"name":"get_time","arguments":{}}]} thanks)",
       {{"get_time", "{}"}}, " thanks"},
      {"generic_empty_list", F::kGenericJson, R"({"tool_calls": []})", {}, R"({"tool_calls": []})"},
      {"generic_one_unknown_name", F::kGenericJson,
       R"({"tool_calls": [{"name": "get_time", "arguments": {}}, {"name": "nope", "arguments": {}}]})", {},
       R"({"tool_calls": [{"name": "get_time", "arguments": {}}, {"name": "nope", "arguments": {}}]})"},
      {"generic_other_object", F::kGenericJson, R"({"answer": "four"})", {}, R"({"answer": "four"})"},
      {"generic_invalid", F::kGenericJson, R"({"tool_calls": [{"name": "get_time", "arguments": {}},]})", {},
       R"({"tool_calls": [{"name": "get_time", "arguments": {}},]})"},
      {"generic_text_first", F::kGenericJson, R"(Answer: {"tool_calls": [{"name": "get_time", "arguments": {}}]})",
       {}, R"(Answer: {"tool_calls": [{"name": "get_time", "arguments": {}}]})"},
      {"generic_python_tag_is_text", F::kGenericJson,
       R"(<|python_tag|>{"tool_calls": [{"name": "get_time", "arguments": {}}]})", {},
       R"(<|python_tag|>{"tool_calls": [{"name": "get_time", "arguments": {}}]})"},
  };
  return cases;
}

// What a stream of Deltas adds up to, checked against the parser's own invariants on the way.
struct Streamed {
  FinalReply final;
  std::string joined_content;
  std::map<size_t, std::string> joined_arguments;
  std::map<size_t, std::string> names;
};

size_t HeldBackBound(ToolCallFamily family, const ToolCallParserOptions& options) {
  return std::max<size_t>(options.max_call_bytes, 14);  // <|python_tag|> is the longest trigger
}

void AddDelta(const Delta& delta, Streamed& out) {
  out.joined_content += delta.content;
  for (const ToolCallDelta& call : delta.calls) {
    if (!call.name.empty()) {
      EXPECT_EQ(out.names.count(call.index), 0u) << "name sent twice for call " << call.index;
      out.names[call.index] = call.name;
    } else {
      EXPECT_EQ(out.names.count(call.index), 1u) << "arguments before the name of call " << call.index;
    }
    out.joined_arguments[call.index] += call.arguments;
  }
}

// Feeds `text` cut at `cuts` (ascending offsets) and checks the stream's invariants.
Streamed Stream(ToolCallFamily family, const ToolCallParserOptions& options, std::string_view text,
                const std::vector<size_t>& cuts) {
  Streamed out;
  auto parser = MakeToolCallParser(family, options);
  size_t begin = 0;
  std::vector<size_t> ends = cuts;
  ends.push_back(text.size());
  for (size_t end : ends) {
    AddDelta(parser->Feed(text.substr(begin, end - begin)), out);
    EXPECT_LE(parser->held_back_bytes(), HeldBackBound(family, options));
    begin = end;
  }
  out.final = parser->Finish();
  AddDelta(out.final.last, out);
  EXPECT_EQ(out.joined_content, out.final.content);
  EXPECT_EQ(out.joined_arguments.size(), out.final.calls.size());
  for (size_t i = 0; i < out.final.calls.size(); ++i) {
    EXPECT_EQ(out.names[i], out.final.calls[i].name);
    EXPECT_EQ(out.joined_arguments[i], out.final.calls[i].arguments);
  }
  EXPECT_LE(parser->work_units(), kMaxWorkUnitsPerByte * std::max<size_t>(text.size(), 1));
  return out;
}

std::vector<size_t> EveryByte(size_t n) {
  std::vector<size_t> cuts;
  for (size_t i = 1; i < n; ++i) cuts.push_back(i);
  return cuts;
}

std::vector<size_t> RandomCuts(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<size_t> cuts;
  size_t pos = 0;
  while (n > 0) {
    pos += 1 + rng() % 7;
    if (pos >= n) break;
    cuts.push_back(pos);
  }
  return cuts;
}

class ToolCallTableTest : public testing::TestWithParam<Case> {};

TEST_P(ToolCallTableTest, WholeGivesTheExpectedCallsAndContent) {
  const Case& c = GetParam();
  const FinalReply reply = ParseToolCalls(c.family, Options(), c.text);
  EXPECT_EQ(reply.content, c.content);
  EXPECT_EQ(reply.calls, c.calls);
  EXPECT_EQ(reply.last.content, reply.content);
  ASSERT_EQ(reply.last.calls.size(), c.calls.size());
  for (const ToolCall& call : reply.calls) {
    auto arguments = common::ParseJsonBounded(call.arguments, "arguments");
    ASSERT_TRUE(arguments.ok()) << call.arguments;
    EXPECT_TRUE(arguments->is_object());
  }
}

TEST_P(ToolCallTableTest, StreamedOneByteAtATimeGivesTheSameReply) {
  const Case& c = GetParam();
  const Streamed streamed = Stream(c.family, Options(), c.text, EveryByte(c.text.size()));
  EXPECT_EQ(streamed.final.content, c.content);
  EXPECT_EQ(streamed.final.calls, c.calls);
}

TEST_P(ToolCallTableTest, SeededRandomPiecesGiveTheSameReply) {
  const Case& c = GetParam();
  for (uint32_t seed = 1; seed <= 40; ++seed) {
    const Streamed streamed = Stream(c.family, Options(), c.text, RandomCuts(c.text.size(), seed));
    EXPECT_EQ(streamed.final.content, c.content) << "seed " << seed;
    EXPECT_EQ(streamed.final.calls, c.calls) << "seed " << seed;
  }
}

TEST_P(ToolCallTableTest, CallsNotAllowedMeansAllContent) {
  const Case& c = GetParam();
  ToolCallParserOptions options = Options();
  options.calls_allowed = false;
  const Streamed streamed = Stream(c.family, options, c.text, RandomCuts(c.text.size(), 7));
  EXPECT_EQ(streamed.final.content, c.text);
  EXPECT_TRUE(streamed.final.calls.empty());
}

TEST_P(ToolCallTableTest, NoToolNamesMeansAllContent) {
  const Case& c = GetParam();
  ToolCallParserOptions options = Options();
  options.tool_names.clear();
  EXPECT_EQ(ParseToolCalls(c.family, options, c.text).content, c.text);
}

INSTANTIATE_TEST_SUITE_P(Families, ToolCallTableTest, testing::ValuesIn(Cases()),
                         [](const testing::TestParamInfo<Case>& info) { return std::string(info.param.name); });

// Content is streamed as soon as it is decided: only a possible trigger is held back.
TEST(ToolCallParserTest, ContentIsStreamedAtOnceAndATriggerPrefixIsHeldBack) {
  auto parser = MakeToolCallParser(ToolCallFamily::kHermes, Options());
  EXPECT_EQ(parser->Feed("Hello <tool").content, "Hello ");
  EXPECT_EQ(parser->held_back_bytes(), 5u);
  EXPECT_EQ(parser->Feed("box> and <").content, "<toolbox> and ");
  const Delta call = parser->Feed("tool_call>{\"name\": \"get_time\", \"arguments\": {}}</tool_call>");
  EXPECT_EQ(call.content, "");
  ASSERT_EQ(call.calls.size(), 1u);
  EXPECT_EQ(call.calls[0].index, 0u);
  EXPECT_EQ(call.calls[0].name, "get_time");
  EXPECT_EQ(call.calls[0].arguments, "{}");
  EXPECT_EQ(parser->held_back_bytes(), 0u);
  const FinalReply reply = parser->Finish();
  EXPECT_EQ(reply.content, "Hello <toolbox> and ");
}

// A call attempt is held back up to max_call_bytes (from its trigger's first byte to its last byte).
TEST(ToolCallParserTest, ACallUpToTheByteLimitParsesOneByteMoreIsContent) {
  const std::string call = HermesCall("search", R"({"query": "bounded"})");
  const std::string text = "x" + call + "y";
  const FinalReply at_limit = ParseToolCalls(ToolCallFamily::kHermes, Options(call.size()), text);
  ASSERT_EQ(at_limit.calls.size(), 1u);
  EXPECT_EQ(at_limit.content, "xy");
  const Streamed over = Stream(ToolCallFamily::kHermes, Options(call.size() - 1), text, EveryByte(text.size()));
  EXPECT_TRUE(over.final.calls.empty());
  EXPECT_EQ(over.final.content, text);

  // Llama: the second attempt starts at its `;`.
  const std::string first = R"({"name": "search", "parameters": {}})";
  const std::string second = R"(; {"name": "get_time", "parameters": {}})";
  ASSERT_LT(first.size(), second.size());
  EXPECT_EQ(ParseToolCalls(ToolCallFamily::kLlama3Json, Options(second.size()), first + second).calls.size(), 2u);
  const FinalReply cut = ParseToolCalls(ToolCallFamily::kLlama3Json, Options(second.size() - 1), first + second);
  ASSERT_EQ(cut.calls.size(), 1u);
  EXPECT_EQ(cut.content, second);
}

// An unterminated call never holds more than max_call_bytes: the attempt becomes content at the
// limit and the text after it streams out as it comes.
TEST(ToolCallParserTest, AnEndlessCallBodyIsHeldOnlyUpToTheLimit) {
  for (ToolCallFamily family : {ToolCallFamily::kHermes, ToolCallFamily::kLlama3Json, ToolCallFamily::kGenericJson}) {
    auto parser = MakeToolCallParser(family, Options(4096));
    std::string fed = family == ToolCallFamily::kHermes ? "<tool_call>" : "";
    fed += R"({"name": "write_file", "arguments": {"content": ")";
    size_t streamed = parser->Feed(fed).content.size();
    const std::string chunk(1000, 'a');
    for (int i = 0; i < 1000; ++i) {
      streamed += parser->Feed(chunk).content.size();
      fed += chunk;
      ASSERT_LE(parser->held_back_bytes(), 4096u);
    }
    EXPECT_GE(streamed, fed.size() - 4096) << ToolCallFamilyName(family);
    const FinalReply reply = parser->Finish();
    EXPECT_EQ(reply.content, fed);
    EXPECT_LE(parser->work_units(), kMaxWorkUnitsPerByte * fed.size());
  }
}

// Work per byte fed is bounded by a constant whatever the input: near-triggers, deep brackets,
// many calls, many failing attempts, objects that end just short of the limit, partial closing
// tags that are read again.
TEST(ToolCallParserTest, WorkPerByteIsBoundedOnAdversarialInputs) {
  struct Adversary {
    ToolCallFamily family;
    std::string unit;
    size_t max_call_bytes;
  };
  const std::vector<Adversary> adversaries = {
      {ToolCallFamily::kHermes, "<tool_cal<tool_ca<<", kDefaultMaxCallBytes},
      {ToolCallFamily::kHermes, "<tool_call>{\"name\": \"get_time\", \"arguments\": {}}</tool_call>", 64},
      {ToolCallFamily::kHermes, "<tool_call>{\"name\": \"nope\", \"arguments\": {}}</tool_call>", kDefaultMaxCallBytes},
      {ToolCallFamily::kHermes, "<tool_call>{\"name\": \"get_time\", \"arguments\": {}}</tool_cal", 80},
      {ToolCallFamily::kHermes, "<tool_call>{[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[", 1000},
      {ToolCallFamily::kLlama3Json, "{\"name\": \"get_time\", \"parameters\": {\"a\": [1, {\"b\": \"}\"}]}};", 4096},
      {ToolCallFamily::kGenericJson, "{\"tool_calls\": [{\"name\": \"get_time\", \"arguments\": {\"x\": [[[]]]}}, ", 1 << 20},
  };
  for (const Adversary& adversary : adversaries) {
    std::string text;
    while (text.size() < 200000) text += adversary.unit;
    for (const std::vector<size_t>& cuts : {std::vector<size_t>{}, RandomCuts(text.size(), 3)}) {
      auto parser = MakeToolCallParser(adversary.family, Options(adversary.max_call_bytes));
      size_t begin = 0;
      std::vector<size_t> ends = cuts;
      ends.push_back(text.size());
      for (size_t end : ends) {
        parser->Feed(std::string_view(text).substr(begin, end - begin));
        begin = end;
      }
      parser->Finish();
      EXPECT_GE(parser->work_units(), text.size()) << adversary.unit;  // every byte is looked at
      EXPECT_LE(parser->work_units(), kMaxWorkUnitsPerByte * text.size()) << adversary.unit;
    }
  }
}

TEST(ToolCallParserTest, ManyCallsGetConsecutiveIndices) {
  std::string text;
  std::vector<ToolCall> expected;
  for (int i = 0; i < 50; ++i) {
    const std::string arguments = "{\"query\": \"" + std::to_string(i) + "\"}";
    text += HermesCall("search", arguments) + "\n";
    expected.push_back({"search", arguments});
  }
  const Streamed streamed = Stream(ToolCallFamily::kHermes, Options(), text, RandomCuts(text.size(), 11));
  EXPECT_EQ(streamed.final.calls, expected);
  EXPECT_EQ(streamed.final.content, std::string(50, '\n'));
}

TEST(ToolCallParserTest, NestingPastTheJsonLimitIsContent) {
  const std::string deep = std::string(200, '[') + std::string(200, ']');
  const std::string text = HermesCall("search", "{\"q\": " + deep + "}");
  const FinalReply reply = ParseToolCalls(ToolCallFamily::kHermes, Options(), text);
  EXPECT_TRUE(reply.calls.empty());
  EXPECT_EQ(reply.content, text);
}

TEST(ToolCallParserTest, FamilyNames) {
  EXPECT_EQ(ToolCallFamilyName(ToolCallFamily::kHermes), "hermes");
  EXPECT_EQ(ToolCallFamilyName(ToolCallFamily::kLlama3Json), "llama3_json");
  EXPECT_EQ(ToolCallFamilyName(ToolCallFamily::kGenericJson), "generic_json");
}

}  // namespace
}  // namespace niels::daemon::tool_calls
