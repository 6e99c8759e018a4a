// JSON Schema -> grammar: for 28 schemas, outputs sampled through the matcher -- byte by byte with
// random allowed bytes, and token by token with random allowed tokens of Qwen3's real vocabulary --
// all validate with Debian's python3-jsonschema against their schema (validate_json.py); outputs
// of the "any JSON" grammar parse with Python's json. Plus a table of refused schemas with the
// keyword and JSON pointer in their messages.

#include <gtest/gtest.h>

#include <random>

#include "daemon/grammar/json_schema.h"
#include "tests/daemon/grammar/grammar_test_util.h"
#include "tests/daemon/grammar/hf_vocabulary.h"

namespace niels::daemon::grammar {
namespace {

const std::vector<std::string> kSchemas = {
    R"({"type":"object","properties":{"name":{"type":"string","minLength":1,"maxLength":12},"age":{"type":"integer","minimum":0,"maximum":150}},"required":["name","age"]})",
    R"({"type":"object","properties":{"a":{"type":"boolean"},"b":{"type":"null"},"c":{"type":"number"}}})",
    R"({"type":"array","items":{"type":"array","items":{"type":"integer"},"minItems":1,"maxItems":3},"maxItems":4})",
    R"({"type":"object","properties":{"color":{"enum":["red","green","blue",null,3]},"v":{"const":{"k":[1,"x"]}}},"required":["color","v"]})",
    R"({"anyOf":[{"type":"string","maxLength":5},{"type":"number"},{"type":"null"}]})",
    R"({"$defs":{"node":{"type":"object","properties":{"value":{"type":"integer"},"children":{"type":"array","items":{"$ref":"#/$defs/node"},"maxItems":2}},"required":["value"]}},"$ref":"#/$defs/node"})",
    R"({"type":"string","pattern":"^\\d{3}-\\d{4}$"})",
    R"({"type":"string","pattern":"ab+c"})",
    R"({"type":"string","minLength":3,"maxLength":6})",
    R"({"type":"object","properties":{"d":{"type":"string","format":"date"},"t":{"type":"string","format":"time"},"dt":{"type":"string","format":"date-time"},"id":{"type":"string","format":"uuid"}},"required":["d","t","dt","id"]})",
    R"({"type":"object","properties":{"known":{"type":"integer"}},"required":["known"],"additionalProperties":true})",
    R"({"type":"object","properties":{"x":{"type":"string"}},"additionalProperties":{"type":"number"}})",
    R"({"type":["string","null"],"maxLength":4})",
    R"({"type":"array","prefixItems":[{"type":"string"},{"type":"integer"},{"type":"boolean"}],"items":false})",
    R"({"oneOf":[{"type":"object","properties":{"kind":{"const":"a"},"n":{"type":"integer"}},"required":["kind","n"]},{"type":"object","properties":{"kind":{"const":"b"},"s":{"type":"string"}},"required":["kind"]}]})",
    R"({"allOf":[{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]},{"$ref":"#/definitions/B"}],"definitions":{"B":{"properties":{"b":{"type":"string"}},"required":["b"]}}})",
    R"({"type":"object","properties":{"p":{"$ref":"#/definitions/point"},"q":{"$ref":"#/definitions/point"}},"required":["p"],"definitions":{"point":{"type":"array","items":{"type":"number"},"minItems":2,"maxItems":2}}})",
    R"({"type":"object","properties":{"t":{"type":"integer","minimum":-50,"maximum":50},"u":{"type":"integer","exclusiveMinimum":0,"exclusiveMaximum":1000},"v":{"type":"integer","minimum":-7}},"required":["t","u","v"]})",
    R"({"type":"boolean"})",
    R"({})",
    R"({"type":"object"})",
    R"({"enum":["a\"b","tab\t","\u00fc","back\\slash","\u0001"]})",
    R"({"type":"string","pattern":"^(cat|dog)s?( [0-9]+)?$"})",
    R"({"type":"string","pattern":"^[\"\\\\a-c\u00e9]{1,4}\\.[^a-z\n]$"})",
    R"({"type":"object","properties":{"a":{"type":"integer"}},"required":["a","b"],"additionalProperties":{"type":"string","maxLength":3}})",
    R"({"type":"array","items":{"enum":["x","y"]},"minItems":2,"maxItems":2})",
    R"({"type":"array","items":{"type":"object","properties":{"id":{"type":"integer"},"score":{"type":"number"},"tags":{"type":"array","items":{"type":"string"}}},"required":["id"]},"minItems":1})",
    R"({"type":"object","properties":{"v":{"type":"integer"},"next":{"$ref":"#"}},"required":["v"]})",
};

// Random bytes the matcher allows; past `soft_limit` it takes the byte that leaves the fewest bytes
// to completion (ties at random), and it stops at complete points with probability 1/8 (always
// past the limit).
std::string WalkBytes(const std::shared_ptr<const CompiledGrammar>& g, std::mt19937_64& rng, size_t soft_limit) {
  Matcher m(g);
  std::string out;
  for (int step = 0; step < 20000; ++step) {
    if (m.IsComplete() && (out.size() > soft_limit || rng() % 8 == 0 || !m.CanContinue())) break;
    const std::bitset<256> allowed = m.AllowedBytes();
    std::vector<int> choices;
    uint32_t best = UINT32_MAX;
    for (int b = 0; b < 256; ++b) {
      if (!allowed[b]) continue;
      if (out.size() <= soft_limit) {
        choices.push_back(b);
        continue;
      }
      const Matcher::Snapshot s = m.snapshot();
      EXPECT_TRUE(m.AcceptBytes(std::string(1, static_cast<char>(b))).ok());
      const uint32_t left = m.MinBytesToComplete();
      m.Restore(s);
      if (left < best) choices.clear(), best = left;
      if (left == best) choices.push_back(b);
    }
    EXPECT_FALSE(choices.empty()) << "stuck after " << out;
    if (choices.empty()) break;
    const char b = static_cast<char>(choices[std::uniform_int_distribution<size_t>(0, choices.size() - 1)(rng)]);
    EXPECT_TRUE(m.AcceptBytes(std::string(1, b)).ok());
    out.push_back(b);
  }
  EXPECT_TRUE(m.IsComplete()) << out;
  return out;
}

// Random allowed tokens of `vocab`; past `soft_limit` bytes the best of 64 random allowed tokens
// and all single-byte ones (fewest bytes left), and the end token as soon as it is allowed.
std::string WalkTokens(const std::shared_ptr<const CompiledGrammar>& g, const Vocabulary& vocab,
                       std::mt19937_64& rng, size_t soft_limit) {
  Matcher m(g);
  std::string out;
  TokenBitset mask;
  for (int step = 0; step < 5000 && !m.IsEnded(); ++step) {
    EXPECT_TRUE(m.AllowedTokens(vocab, &mask).ok());
    std::vector<int32_t> allowed;
    for (int32_t id = 0; id < vocab.size(); ++id) {
      if (mask.Test(id)) allowed.push_back(id);
    }
    EXPECT_FALSE(allowed.empty()) << "no token allowed after " << out;
    if (allowed.empty()) break;
    const bool can_end = m.IsComplete();
    int32_t pick = allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(rng)];
    if (can_end && (out.size() > soft_limit || rng() % 6 == 0)) {
      pick = vocab.end_of_output_ids()[0];
    } else if (out.size() > soft_limit) {
      std::vector<int32_t> candidates;
      for (int k = 0; k < 64; ++k) candidates.push_back(allowed[rng() % allowed.size()]);
      for (int32_t id : allowed) {
        if (vocab.token(id).bytes.size() == 1) candidates.push_back(id);
      }
      uint32_t best = UINT32_MAX;
      for (int32_t id : candidates) {
        if (vocab.token(id).kind != TokenKind::kText) continue;
        Matcher probe = m.Clone();
        EXPECT_TRUE(probe.AcceptToken(id, vocab).ok());
        if (probe.MinBytesToComplete() < best) best = probe.MinBytesToComplete(), pick = id;
      }
    }
    EXPECT_TRUE(m.AcceptToken(pick, vocab).ok()) << pick;
    if (vocab.token(pick).kind == TokenKind::kText) out += vocab.token(pick).bytes;
  }
  EXPECT_TRUE(m.IsEnded()) << out;
  return out;
}

TEST(JsonSchemaTest, SampledOutputsValidateWithPythonJsonschema) {
  const std::string json = testing::ReadFile(testing::QwenTokenizerJson());
  ASSERT_FALSE(json.empty()) << testing::kMissingReferences;
  const auto vocab = testing::LoadByteLevelVocabulary(json, 151936);
  ASSERT_NE(vocab, nullptr);
  nlohmann::json request = nlohmann::json::array();
  std::vector<std::vector<std::string>> outputs;
  for (size_t i = 0; i < kSchemas.size(); ++i) {
    SCOPED_TRACE(kSchemas[i]);
    auto g = CompileJsonSchema(kSchemas[i]);
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    std::mt19937_64 rng(i + 1);
    std::vector<std::string> texts;
    for (int k = 0; k < 40; ++k) texts.push_back(WalkBytes(*g, rng, 60));
    for (int k = 0; k < 8; ++k) texts.push_back(WalkTokens(*g, *vocab, rng, 60));
    request.push_back({{"schema", nlohmann::json::parse(kSchemas[i])}, {"instances", texts}});
    outputs.push_back(std::move(texts));
  }
  // The built-in "any JSON value" grammar: json.loads only.
  {
    std::mt19937_64 rng(99);
    std::vector<std::string> texts;
    for (int k = 0; k < 60; ++k) texts.push_back(WalkBytes(CompiledGrammar::AnyJson(), rng, 80));
    for (int k = 0; k < 10; ++k) texts.push_back(WalkTokens(CompiledGrammar::AnyJson(), *vocab, rng, 80));
    request.push_back({{"schema", nullptr}, {"instances", texts}});
    outputs.push_back(std::move(texts));
  }
  const nlohmann::json verdicts = testing::RunPython("validate_json.py", request);
  ASSERT_EQ(verdicts.size(), outputs.size());
  int total = 0;
  for (size_t i = 0; i < outputs.size(); ++i) {
    for (size_t k = 0; k < outputs[i].size(); ++k) {
      EXPECT_TRUE(verdicts[i][k].is_null())
          << (i < kSchemas.size() ? kSchemas[i] : "any JSON") << "\noutput: "
          << nlohmann::json(outputs[i][k]).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
          << "\nreason: " << verdicts[i][k];
      ++total;
    }
  }
  std::printf("[ grammar ] %zu schemas + any-JSON: %d outputs (48 per schema: 40 byte walks, 8 Qwen3 token walks) "
              "checked by python3-jsonschema\n", kSchemas.size(), total);
}

struct SchemaError {
  std::string schema;
  std::string message;
};

TEST(JsonSchemaTest, RefusedSchemasNameTheKeywordAndPointer) {
  const std::vector<SchemaError> cases = {
      {R"({"not":{}})", "json schema at /not: unsupported keyword 'not'"},
      {R"({"properties":{"a":{"type":"number","minimum":1}}})", "at /properties/a/minimum: unsupported keyword 'minimum' for type number"},
      {R"({"type":"object","properties":{"e":{"type":"string","format":"email"}}})", "at /properties/e/format: unsupported format \"email\""},
      {R"({"type":"string","pattern":"(?=a)b"})", "at /pattern: pattern offset 0: only (?:...) groups are supported"},
      {R"({"type":"string","pattern":"a\\bc"})", "at /pattern: pattern offset 1: unsupported escape '\\b'"},
      {R"({"type":"string","pattern":"a^b"})", "'^' is only supported at the very start"},
      {R"({"type":"string","pattern":"[^\\d]"})", "not supported in a negated class"},
      {R"({"$ref":"http://example.com/s.json"})", "at /$ref: unsupported $ref 'http://example.com/s.json'"},
      {R"({"$ref":"#/$defs/missing"})", "at /$ref: $ref '#/$defs/missing' points to nothing"},
      {R"({"type":"foo"})", "at /type: unknown type \"foo\""},
      {R"({"type":)", "not valid JSON"},
      {R"({"type":"object","properties":{"a":{"$ref":"#"}},"required":["a"]})", "cannot be satisfied"},
      {R"({"type":"array","items":false,"minItems":1})", "minItems asks for more items"},
      {R"({"type":"object","properties":{},"required":["x"],"additionalProperties":false})",
       "at /required: required property 'x' is neither in properties nor allowed"},
      {R"({"type":"array","uniqueItems":true})", "at /uniqueItems: unsupported keyword 'uniqueItems'"},
      {R"({"type":"integer","minimum":5,"maximum":4})", "the integer range is empty"},
      {R"({"items":[{"type":"string"}]})", "at /items: items as an array (draft-07 tuples) is not supported"},
      {R"({"type":"string","anyOf":[{"maxLength":3}]})", "anyOf together with other validating keywords"},
      {R"({"$ref":"#/$defs/a","type":"string","$defs":{"a":{}}})", "$ref together with other validating keywords"},
      {R"({"properties":{"a":{"patternProperties":{}}}})", "at /properties/a/patternProperties: unsupported keyword"},
      {R"({"properties":{"a/b~c":{"if":{}}}})", "at /properties/a~1b~0c/if: unsupported keyword 'if'"},
      {R"({"type":"string","maxLength":100000})", "at /maxLength: 100000 is above the supported limit 10000"},
      {R"({"type":"string","minLength":-1})", "at /minLength: must be a non-negative integer"},
      {R"({"allOf":[{"type":"object","properties":{"a":{"type":"integer"}}},{"properties":{"a":{"type":"string"}}}]})",
       "at /allOf/1/properties/a: the property differs between allOf parts"},
      {R"({"allOf":[{"type":"string"}]})", "at /allOf/0/type: keyword 'type' in an allOf part is not supported"},
      {R"({"enum":[1,2],"type":"string"})", "enum/const leaves no value"},
      {R"(false)", "the schema false matches nothing"},
      {R"({"properties":5,"allOf":[{"properties":{"a":{}}}]})", "at /properties: must be an object"},
      {R"({"required":"a","allOf":[{"required":["b"]}]})", "at /required: must be an array of strings"},
      {std::string(100, '[') + std::string(100, ']'), "nested deeper than 64 levels"},
  };
  for (const SchemaError& c : cases) {
    SCOPED_TRACE(c.schema.substr(0, 100));
    auto g = CompileJsonSchema(c.schema);
    ASSERT_FALSE(g.ok());
    EXPECT_EQ(g.status().code(), common::StatusCode::kInvalidArgument);
    EXPECT_NE(g.status().message().find(c.message), std::string::npos) << g.status().message();
  }
}

TEST(JsonSchemaTest, PropertyOrderRequiredAndExtraKeys) {
  auto g = CompileJsonSchema(R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"}},
      "required":["b"],"additionalProperties":{"type":"integer"}})");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_TRUE(testing::Judge(*g, R"({"b": 1})").full);
  EXPECT_TRUE(testing::Judge(*g, R"({"a": 1, "b": 2, "c": 3, "ab": 4})").full);
  EXPECT_FALSE(testing::Judge(*g, R"({"a": 1})").full);            // b is required
  EXPECT_FALSE(testing::Judge(*g, R"({"b": 1, "a": 2})").prefix);  // properties keep their order
  EXPECT_FALSE(testing::Judge(*g, R"({"b": 1, "b": 2})").prefix);  // an extra key is never a named one
  EXPECT_FALSE(testing::Judge(*g, R"({"b": 1, "c": "x"})").prefix);
}

}  // namespace
}  // namespace niels::daemon::grammar
