// The compilers' cost: the work units (CompileWork, rule_set.h) the JSON Schema compiler and the
// GBNF compiler count, on the shapes that were quadratic (allOf with many properties, long property
// names, many spellings of one $ref target, chains of GBNF rules that point to higher indices):
// doubling the input at most ~2.5x the work. Plus both work budgets: realistic inputs use a small
// part of them, inputs past them are refused with RESOURCE_EXHAUSTED naming the budget.

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "daemon/grammar/compiled_grammar.h"
#include "daemon/grammar/json_grammar.h"
#include "daemon/grammar/json_schema.h"
#include "fmt/format.h"
#include "tests/daemon/grammar/grammar_test_util.h"

namespace niels::daemon::grammar {
namespace {

// Rules in GBNF text (lines with "::=").
size_t RuleCount(const std::string& gbnf) {
  size_t n = 0;
  for (size_t at = gbnf.find("::="); at != std::string::npos; at = gbnf.find("::=", at + 3)) ++n;
  return n;
}

struct Measured {
  size_t input_bytes = 0;
  CompileWork work;
  size_t rules = 0;  // of the generated GBNF (schemas)
};

Measured CompileSchema(const std::string& schema) {
  Measured m;
  m.input_bytes = schema.size();
  auto gbnf = JsonSchemaToGbnf(schema, {}, &m.work);
  EXPECT_TRUE(gbnf.ok()) << gbnf.status().ToString();
  if (!gbnf.ok()) return m;
  m.rules = RuleCount(*gbnf);
  auto g = CompiledGrammar::FromGbnf(*gbnf, {}, &m.work);
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  return m;
}

// Work of the input twice as large over the work of the input, for both stages; each at most 2.5.
void ExpectLinear(const Measured& small, const Measured& large) {
  std::printf("[ grammar ] %zu -> %zu input bytes: schema work %llu -> %llu, grammar work %llu -> %llu, rules %zu -> %zu\n",
              small.input_bytes, large.input_bytes, static_cast<unsigned long long>(small.work.schema_units),
              static_cast<unsigned long long>(large.work.schema_units),
              static_cast<unsigned long long>(small.work.grammar_units),
              static_cast<unsigned long long>(large.work.grammar_units), small.rules, large.rules);
  ASSERT_GT(small.work.schema_units + small.work.grammar_units, 0u);
  const double input_ratio = static_cast<double>(large.input_bytes) / small.input_bytes;
  EXPECT_GE(input_ratio, 1.8);
  EXPECT_LE(input_ratio, 2.2);
  if (small.work.schema_units > 0) {
    EXPECT_LE(large.work.schema_units, 2.5 * small.work.schema_units)
        << small.work.schema_units << " -> " << large.work.schema_units;
  }
  EXPECT_LE(large.work.grammar_units, 2.5 * small.work.grammar_units)
      << small.work.grammar_units << " -> " << large.work.grammar_units;
  if (small.rules > 0) {
    EXPECT_LE(large.rules, 2.5 * small.rules) << small.rules << " -> " << large.rules;
  }
  // And both far inside their budgets.
  EXPECT_LE(large.work.schema_units, large.work.schema_budget / 4);
  EXPECT_LE(large.work.grammar_units, large.work.grammar_budget / 4);
}

// allOf of `parts` objects with `shared` properties that every part repeats (the merge compares
// them) and `per_part` of their own.
std::string AllOfSchema(int parts, int per_part, int shared) {
  std::string first;
  for (int k = 0; k < shared; ++k) first += fmt::format("{}\"a{}\":{{\"type\":\"integer\"}}", k ? "," : "", k);
  std::string out = R"({"allOf":[)";
  for (int i = 0; i < parts; ++i) {
    out += i ? "," : "";
    out += R"({"type":"object","properties":{)" + first;
    for (int k = 0; k < per_part; ++k) out += fmt::format(",\"p{}_{}\":{{\"type\":\"string\"}}", i, k);
    out += fmt::format(R"(}},"required":["a0","p{}_0"]}})", i);
  }
  return out + "]}";
}

TEST(CompileWorkTest, AllOfMergeIsLinearInTheProperties) {
  // Old merge: a linear search of the merged properties per property, ~1.5 R P^2 comparisons.
  const Measured small = CompileSchema(AllOfSchema(16, 40, 40));
  ExpectLinear(small, CompileSchema(AllOfSchema(32, 40, 40)));  // twice the parts
  ExpectLinear(small, CompileSchema(AllOfSchema(16, 80, 80)));  // twice the properties per part
  // Few parts that repeat many properties: the merged set is large from the start.
  ExpectLinear(CompileSchema(AllOfSchema(8, 10, 300)), CompileSchema(AllOfSchema(8, 20, 600)));
}

// Properties whose names share their first 60 bytes: every rule made for them has the same 40-byte
// name base.
std::string LongNamesSchema(int properties) {
  const std::string prefix(60, 'n');
  std::string out = R"({"type":"object","properties":{)";
  for (int i = 0; i < properties; ++i) {
    out += fmt::format("{}\"{}{}\":{{\"type\":\"array\",\"items\":{{\"type\":\"string\",\"maxLength\":3}}}}", i ? "," : "",
                       prefix, i);
  }
  return out + "}}";
}

TEST(CompileWorkTest, RuleNamesUnderALongPropertyNameCostConstantProbes) {
  // Old naming: each name probed base, base-1, base-2, ... from the start: ~(3P)^2/2 probes.
  const Measured small = CompileSchema(LongNamesSchema(300));
  const Measured large = CompileSchema(LongNamesSchema(600));
  ExpectLinear(small, large);
  // Names stay deterministic and distinct.
  auto a = JsonSchemaToGbnf(LongNamesSchema(50));
  auto b = JsonSchemaToGbnf(LongNamesSchema(50));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
  ASSERT_TRUE(CompiledGrammar::FromGbnf(*a).ok());  // a name defined twice would be refused
}

// `spellings` $refs to the same object of `properties` properties, each spelled differently
// ("#/$defs/t/0/0/0", "#/$defs/t/00/0/0", ...: leading zeros of array indices).
std::string RefSpellingsSchema(int spellings, int properties) {
  std::string target = R"({"type":"object","properties":{)";
  for (int k = 0; k < properties; ++k) target += fmt::format("{}\"f{}\":{{\"type\":\"integer\"}}", k ? "," : "", k);
  target += "}}";
  std::string out = R"({"type":"object","properties":{)";
  for (int i = 0; i < spellings; ++i) {
    const std::string ref = fmt::format("#/$defs/t/{}/{}/{}", std::string(1 + i % 8, '0'), std::string(1 + i / 8 % 8, '0'),
                                        std::string(1 + i / 64 % 8, '0'));
    out += fmt::format("{}\"r{}\":{{\"$ref\":\"{}\"}}", i ? "," : "", i, ref);
  }
  return out + R"(},"$defs":{"t":[[[)" + target + "]]]}}";
}

TEST(CompileWorkTest, SpellingsOfOneRefTargetShareOneRule) {
  // Old cache: keyed on the spelling, so each spelling compiled the target again: R x P rules.
  const Measured small = CompileSchema(RefSpellingsSchema(128, 128));
  const Measured large = CompileSchema(RefSpellingsSchema(256, 256));
  ExpectLinear(small, large);
  // One rule for the target (3 per property of it, 3 per property of the root, and a few more).
  EXPECT_LE(large.rules, 3u * (256 + 256) + 60);
}

TEST(CompileWorkTest, ARepeatedTypeCompilesItsSchemaOnce) {
  // "type": ["object", "object", ...] compiled the properties once per entry: N x P rules.
  std::string types, props;
  for (int i = 0; i < 200; ++i) types += i ? ",\"object\"" : "\"object\"";
  for (int k = 0; k < 50; ++k) props += fmt::format("{}\"k{}\":{{\"type\":\"integer\"}}", k ? "," : "", k);
  const Measured m = CompileSchema("{\"type\":[" + types + "],\"properties\":{" + props + "}}");
  EXPECT_LE(m.rules, 3u * 50 + 40);
}

// root ::= r1 "a", r1 ::= r2 "a", ..., rN ::= "a": every rule refers to one with a higher index.
std::string ChainGbnf(int rules) {
  std::string out = "root ::= r1 \"a\"\n";
  for (int i = 1; i < rules; ++i) out += fmt::format("r{} ::= r{} \"a\" | \"b\" r{}\n", i, i + 1, i + 1);
  return out + fmt::format("r{} ::= \"a\"\n", rules);
}

Measured CompileGbnf(const std::string& text) {
  Measured m;
  m.input_bytes = text.size();
  auto g = CompiledGrammar::FromGbnf(text, {}, &m.work);
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  return m;
}

TEST(CompileWorkTest, RuleMinimaOfAChainToHigherIndicesAreLinear) {
  // Old fixpoint: one rule settled per pass over all rules, ~N^2 symbol visits.
  const Measured small = CompileGbnf(ChainGbnf(10000));
  const Measured large = CompileGbnf(ChainGbnf(20000));
  ExpectLinear(small, large);
  auto g = CompiledGrammar::FromGbnf(ChainGbnf(20000));
  ASSERT_TRUE(g.ok());
  EXPECT_EQ((*g)->rule_min_bytes((*g)->root()), 20001u);  // N+1 "a"s at the least
}

TEST(CompileWorkTest, LongLeftRecursionIsReportedInLinearWork) {
  // a0 ::= a1 "x", ..., aN ::= a0 "x": the whole chain is one left-recursive cycle. The message
  // names its first rules and how many more there are (describing each one scans the text).
  std::string text = "root ::= a0\n";
  for (int i = 0; i < 20000; ++i) text += fmt::format("a{} ::= a{} \"x\"\n", i, (i + 1) % 20000);
  CompileWork work;
  auto g = CompiledGrammar::FromGbnf(text, {}, &work);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), common::StatusCode::kInvalidArgument);
  EXPECT_NE(g.status().message().find("left recursion: 'a0' -> 'a1'"), std::string::npos) << g.status().message();
  EXPECT_NE(g.status().message().find("more)"), std::string::npos);
  EXPECT_LT(g.status().message().size(), 400u);
  EXPECT_LE(work.grammar_units, work.grammar_budget / 4);
}

TEST(CompileWorkTest, PatternsAreWrappedOnceAndTheirGrammarIsBoundedWhileBuilt) {
  // A quantifier after a quantifier (`a???...`) is refused as ECMA-262 and Python refuse it; it was
  // accepted, each `?` rewrapping (copying) the whole atom: quadratic in the pattern.
  auto lazy = JsonSchemaToGbnf(R"({"type":"string","pattern":"a)" + std::string(4000, '?') + R"("})");
  ASSERT_FALSE(lazy.ok());
  EXPECT_NE(lazy.status().message().find("a quantifier may not follow another quantifier"), std::string::npos)
      << lazy.status().message();
  EXPECT_TRUE(JsonSchemaToGbnf(R"({"type":"string","pattern":"^a??b*?c{1,2}?$"})").ok());
  // Each `.` is a fragment of ~30 alternatives: 8000 of them pass max_text_bytes, which the
  // pattern's own translation stops at (rather than building the whole text first).
  CompileWork work;
  auto dots = JsonSchemaToGbnf(R"({"type":"string","pattern":")" + std::string(8000, '.') + R"("})", {}, &work);
  ASSERT_FALSE(dots.ok());
  EXPECT_EQ(dots.status().code(), common::StatusCode::kInvalidArgument);
  EXPECT_NE(dots.status().message().find("the pattern's grammar passes 1048576 bytes"), std::string::npos)
      << dots.status().message();
}

const char* const kToolCallSchema = R"({
  "type":"object",
  "properties":{
    "name":{"enum":["get_weather","search","send_email","create_event"]},
    "arguments":{"anyOf":[
      {"type":"object","properties":{"city":{"type":"string","maxLength":64},"unit":{"enum":["c","f"]},
        "days":{"type":"integer","minimum":1,"maximum":14}},"required":["city"]},
      {"type":"object","properties":{"query":{"type":"string","minLength":1},"limit":{"type":"integer","minimum":1,"maximum":50},
        "site":{"type":"string","pattern":"^[a-z0-9.-]+\\.[a-z]{2,6}$"}},"required":["query"]},
      {"type":"object","properties":{"to":{"type":"array","items":{"type":"string","format":"uuid"},"minItems":1,"maxItems":8},
        "subject":{"type":"string","maxLength":200},"body":{"type":"string"}},"required":["to","subject","body"]},
      {"allOf":[{"$ref":"#/$defs/when"},{"type":"object","properties":{"title":{"type":"string"},
        "attendees":{"type":"array","items":{"$ref":"#/$defs/person"}}},"required":["title"]}]}
    ]}
  },
  "required":["name","arguments"],
  "$defs":{
    "when":{"type":"object","properties":{"date":{"type":"string","format":"date"},"time":{"type":"string","format":"time"}},
      "required":["date"]},
    "person":{"type":"object","properties":{"name":{"type":"string"},"email":{"type":"string"},
      "manager":{"$ref":"#/$defs/person"}},"required":["name"],"additionalProperties":false}
  }
})";

// A form-like schema: `n` properties of assorted kinds.
std::string FormSchema(int n) {
  std::string out = R"({"type":"object","properties":{)";
  std::string required;
  for (int i = 0; i < n; ++i) {
    static const char* const kinds[] = {
        R"({"type":"string","maxLength":80})", R"({"type":"integer","minimum":0,"maximum":1000})",
        R"({"type":"boolean"})", R"({"enum":["low","medium","high"]})",
        R"({"type":"array","items":{"type":"string"},"maxItems":10})", R"({"type":["number","null"]})",
        R"({"type":"string","format":"date-time"})"};
    out += fmt::format("{}\"field_{}\":{}", i ? "," : "", i, kinds[i % 7]);
    if (i % 3 == 0) required += fmt::format("{}\"field_{}\"", required.empty() ? "" : ",", i);
  }
  return out + "},\"required\":[" + required + "],\"additionalProperties\":false}";
}

TEST(CompileWorkTest, RealisticSchemasAndGrammarsUseAFractionOfTheBudgets) {
  for (const std::string& schema : {std::string(kToolCallSchema), FormSchema(20), FormSchema(300)}) {
    CompileWork work;
    auto g = CompileJsonSchema(schema, {}, &work);
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    std::printf("[ grammar ] schema of %zu bytes: schema work %llu of %llu, grammar work %llu of %llu\n", schema.size(),
                static_cast<unsigned long long>(work.schema_units), static_cast<unsigned long long>(work.schema_budget),
                static_cast<unsigned long long>(work.grammar_units), static_cast<unsigned long long>(work.grammar_budget));
    EXPECT_LE(work.schema_units * 20, work.schema_budget) << work.schema_units << " of " << work.schema_budget;
    EXPECT_LE(work.grammar_units * 20, work.grammar_budget) << work.grammar_units << " of " << work.grammar_budget;
  }
  // The reference grammars of llama.cpp (when installed) and the built-in JSON grammar.
  std::vector<std::string> grammars = {std::string(AnyJsonGbnf())};
  if (std::filesystem::is_directory(testing::LlamaGrammarDir())) {
    for (const auto& entry : std::filesystem::directory_iterator(testing::LlamaGrammarDir())) {
      if (entry.path().extension() == ".gbnf") grammars.push_back(testing::ReadFile(entry.path()));
    }
  }
  for (const std::string& text : grammars) {
    CompileWork work;
    auto g = CompiledGrammar::FromGbnf(text, {}, &work);
    if (!g.ok()) continue;  // some reference grammars use token references (refused, not costly)
    EXPECT_LE(work.grammar_units * 20, work.grammar_budget) << work.grammar_units << " of " << work.grammar_budget;
  }
}

// allOf that inlines a definition which has allOf inlining the next one, twice per level: the
// schema grows by one definition per level, the compiled grammar doubles.
std::string DoublingAllOfSchema(int levels) {
  std::string defs;
  for (int i = 0; i < levels; ++i) {
    defs += fmt::format(
        R"({}"d{}":{{"type":"object","properties":{{"x":{{"allOf":[{{"$ref":"#/$defs/d{}"}}]}},"y":{{"allOf":[{{"$ref":"#/$defs/d{}"}}]}}}}}})",
        i ? "," : "", i, i + 1, i + 1);
  }
  defs += fmt::format(R"(,"d{}":{{"type":"object","properties":{{"z":{{"type":"integer"}}}}}})", levels);
  return R"({"$ref":"#/$defs/d0","$defs":{)" + defs + "}}";
}

TEST(CompileWorkTest, SchemaPastItsWorkBudgetIsRefusedNamingIt) {
  // 4 levels: 16 copies of the last definition, well inside the budget.
  CompileWork small;
  ASSERT_TRUE(CompileJsonSchema(DoublingAllOfSchema(4), {}, &small).ok());
  EXPECT_LE(small.schema_units * 20, small.schema_budget);
  // 30 levels would be 2^30 copies: refused once the work passes the budget, having done no more.
  CompileWork work;
  const std::string hostile = DoublingAllOfSchema(30);
  auto g = CompileJsonSchema(hostile, {}, &work);
  ASSERT_FALSE(g.ok());
  std::printf("[ grammar ] %s (%llu units counted)\n", g.status().ToString().c_str(),
              static_cast<unsigned long long>(work.schema_units));
  EXPECT_EQ(g.status().code(), common::StatusCode::kResourceExhausted) << g.status().ToString();
  EXPECT_NE(g.status().message().find("json schema compile work budget exhausted"), std::string::npos)
      << g.status().message();
  GrammarLimits limits;
  EXPECT_EQ(work.schema_budget, limits.schema_work_per_byte * hostile.size() + limits.schema_work_base);
  EXPECT_GT(work.schema_units, work.schema_budget);
  EXPECT_LT(work.schema_units, work.schema_budget + 100'000);  // stopped at once
  EXPECT_EQ(work.grammar_units, 0u);                           // never got to the GBNF
}

TEST(CompileWorkTest, GbnfPastItsWorkBudgetIsRefusedNamingIt) {
  // Short text, large expansion: each `[a-z]{10000}` is 10,000 symbols; 45 of them stay inside the
  // symbol limit (1,000,000 counted for them) but not inside the budget for 700 bytes.
  std::string text = "root ::=";
  for (int i = 0; i < 45; ++i) text += " [a-z]{10000}";
  text += "\n";
  CompileWork work;
  auto g = CompiledGrammar::FromGbnf(text, {}, &work);
  ASSERT_FALSE(g.ok());
  std::printf("[ grammar ] %s (%llu units counted)\n", g.status().ToString().c_str(),
              static_cast<unsigned long long>(work.grammar_units));
  EXPECT_EQ(g.status().code(), common::StatusCode::kResourceExhausted) << g.status().ToString();
  EXPECT_NE(g.status().message().find("grammar compile work budget exhausted"), std::string::npos)
      << g.status().message();
  GrammarLimits limits;
  EXPECT_EQ(work.grammar_budget, limits.grammar_work_per_byte * text.size() + limits.grammar_work_base);
  EXPECT_GT(work.grammar_units, work.grammar_budget);
  // A single such repetition at 1x is fine.
  CompileWork one;
  ASSERT_TRUE(CompiledGrammar::FromGbnf("root ::= [a-z]{10000}\n", {}, &one).ok());
  EXPECT_LE(one.grammar_units * 4, one.grammar_budget);
}

// A compile that has started stops when its cancel predicate turns true: within about one poll
// interval (kCancelPollUnits) of work, with CANCELLED, and no budget refusal counted.
TEST(CompileWorkTest, ARunningCompileStopsSoonAfterItIsCancelled) {
  const std::string schema = AllOfSchema(32, 80, 80);
  CompileWork full;
  ASSERT_TRUE(CompileJsonSchema(schema, {}, &full).ok());
  ASSERT_GT(full.schema_units, 8 * kCancelPollUnits);  // long enough to be stopped midway
  ASSERT_GT(full.grammar_units, 8 * kCancelPollUnits);

  const uint64_t refusals = common::Refusals(common::BudgetId::kSchemaCompileSteps) +
                            common::Refusals(common::BudgetId::kGrammarCompileSteps);
  // Cancelled at the third poll of the schema stage.
  int polls = 0;
  GrammarLimits limits;
  limits.cancelled = [&polls] { return ++polls >= 3; };
  CompileWork stopped;
  auto g = CompileJsonSchema(schema, limits, &stopped);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), common::StatusCode::kCancelled) << g.status().ToString();
  EXPECT_EQ(polls, 3);
  EXPECT_LE(stopped.schema_units, 5 * kCancelPollUnits) << "of " << full.schema_units;
  EXPECT_EQ(stopped.grammar_units, 0u);

  // Cancelled in the GBNF stage at its first poll: the schema's generated grammar, compiled on its
  // own. Its passes over all rules charge their units before they run, so the count can pass the
  // poll point by one pass; the compile stops there, before doing it.
  auto gbnf = JsonSchemaToGbnf(schema);
  ASSERT_TRUE(gbnf.ok());
  polls = 0;
  limits.cancelled = [&polls] { return ++polls >= 1; };
  CompileWork grammar_stopped;
  auto h = CompiledGrammar::FromGbnf(*gbnf, limits, &grammar_stopped);
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), common::StatusCode::kCancelled) << h.status().ToString();
  EXPECT_EQ(polls, 1);
  std::printf("[ grammar ] cancelled compile: schema %llu of %llu units, grammar %llu of %llu units\n",
              static_cast<unsigned long long>(stopped.schema_units), static_cast<unsigned long long>(full.schema_units),
              static_cast<unsigned long long>(grammar_stopped.grammar_units),
              static_cast<unsigned long long>(full.grammar_units));
  EXPECT_LT(grammar_stopped.grammar_units, full.grammar_units / 2);
  EXPECT_EQ(common::Refusals(common::BudgetId::kSchemaCompileSteps) +
                common::Refusals(common::BudgetId::kGrammarCompileSteps),
            refusals);

  // A predicate that stays false changes nothing.
  limits.cancelled = [] { return false; };
  CompileWork again;
  ASSERT_TRUE(CompileJsonSchema(schema, limits, &again).ok());
  EXPECT_EQ(again.schema_units, full.schema_units);
  EXPECT_EQ(again.grammar_units, full.grammar_units);
}

// The grammar size limits are budgets too: a grammar past one is refused INVALID_ARGUMENT with the
// budget's name, and the refusal is counted (Stats). Small limits here, the same code path as the
// defaults (GrammarLimits takes them from common/budgets.h).
TEST(CompileWorkTest, GrammarSizeLimitsAreCountedBudgets) {
  GrammarLimits limits;
  limits.max_rules = 8;
  limits.max_symbols = 100;
  const uint64_t rules_before = common::Refusals(common::BudgetId::kGrammarRules);
  const uint64_t symbols_before = common::Refusals(common::BudgetId::kGrammarSymbols);
  const uint64_t bytes_before = common::Refusals(common::BudgetId::kSchemaGrammarBytes);
  std::string many = "root ::= r0";
  for (int i = 1; i < 10; ++i) many += fmt::format(" r{}", i);
  many += "\n";
  for (int i = 0; i < 10; ++i) many += fmt::format("r{} ::= \"x\"\n", i);
  auto rules = CompiledGrammar::FromGbnf(many, limits);
  ASSERT_FALSE(rules.ok());
  EXPECT_EQ(rules.status().code(), common::StatusCode::kInvalidArgument);
  EXPECT_TRUE(rules.status().message().ends_with("(budget grammar_rules)")) << rules.status().message();
  EXPECT_EQ(common::Refusals(common::BudgetId::kGrammarRules), rules_before + 1);

  auto symbols = CompiledGrammar::FromGbnf("root ::= [a-z]{200}\n", limits);
  ASSERT_FALSE(symbols.ok());
  EXPECT_TRUE(symbols.status().message().ends_with("(budget grammar_symbols)")) << symbols.status().message();
  EXPECT_EQ(common::Refusals(common::BudgetId::kGrammarSymbols), symbols_before + 1);

  GrammarLimits small_text;
  small_text.max_text_bytes = 200;
  std::string schema = R"({"type":"object","properties":{)";
  for (int i = 0; i < 20; ++i) schema += fmt::format("{}\"p{}\":{{\"type\":\"string\"}}", i ? "," : "", i);
  schema += "}}";
  auto generated = JsonSchemaToGbnf(schema, small_text);
  ASSERT_FALSE(generated.ok());
  EXPECT_TRUE(generated.status().message().ends_with("(budget schema_grammar_bytes)")) << generated.status().message();
  EXPECT_EQ(common::Refusals(common::BudgetId::kSchemaGrammarBytes), bytes_before + 1);
  // Within the limits the same grammar compiles, and nothing more is counted.
  EXPECT_TRUE(CompiledGrammar::FromGbnf("root ::= [a-z]{30}\n", limits).ok());
  EXPECT_EQ(common::Refusals(common::BudgetId::kGrammarSymbols), symbols_before + 1);
}

}  // namespace
}  // namespace niels::daemon::grammar
