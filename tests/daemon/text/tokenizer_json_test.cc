// Reading tokenizer.json and tokenizer_config.json: a small file of our own loads and encodes as
// its merges say; each way of breaking it is refused with a message naming the key; the GGUF-style
// path (plain vectors + a pre-tokenizer name) gives the same tokenizer as the real tokenizer.json.
#include "daemon/text/tokenizer_json.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "daemon/text/bpe_tokenizer.h"
#include "daemon/text/tokenizer_config.h"
#include "tests/daemon/text/reference_tokenizers.h"
#include "tests/daemon/text/test_specs.h"

namespace niels::daemon::text {
namespace {
namespace tokenizer_json_test {  // this file's own names: the suite compiles as one unity unit

using nlohmann::json;
using testing::Spell;

// A Llama-3-shaped tokenizer.json: the 256 byte pieces, merges for " t", "he", " the", two added
// tokens, Split + ByteLevel.
json SmallTokenizer() {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[Spell(std::string(1, static_cast<char>(b)))] = b;
  vocab[Spell(" t")] = 256;
  vocab[Spell("he")] = 257;
  vocab[Spell(" the")] = 258;
  return json{
      {"version", "1.0"},
      {"added_tokens",
       {{{"id", 259}, {"content", "<|eot_id|>"}, {"special", true}, {"normalized", false}, {"lstrip", false},
         {"rstrip", false}, {"single_word", false}},
        {{"id", 260}, {"content", "<think>"}, {"special", false}}}},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"}, {"pattern", {{"Regex", std::string(kLlama3SplitPattern)}}}, {"behavior", "Isolated"},
           {"invert", false}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}}}}},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", {{{"SpecialToken", {{"id", "<|eot_id|>"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}}}}}}}},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", true}}},
      {"model",
       {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"ignore_merges", true}, {"byte_fallback", false},
        {"vocab", vocab}, {"merges", {Spell(" ") + " t", "h e", Spell(" t") + " he"}}}}};
}

common::StatusOr<BpeSpec> Parse(const json& doc) { return BpeSpecFromTokenizerJson(doc.dump(), "tok.json"); }

TEST(TokenizerJsonTest, LoadsASmallFileAndEncodesByItsMerges) {
  auto spec = Parse(SmallTokenizer());
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->pieces.size(), 261u);
  EXPECT_EQ(spec->types[259], TokenType::kControl);
  EXPECT_EQ(spec->types[260], TokenType::kUserDefined);
  EXPECT_TRUE(spec->ignore_merges);
  EXPECT_EQ(spec->special.bos, 259);  // the template's leading special token
  EXPECT_TRUE(spec->special.add_bos);
  auto tokenizer = BpeTokenizer::Create(std::move(spec).value());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().ToString();
  // " the" -> 258; " then" -> " the" + "n"? No: the pre-token " then" is not in the vocabulary, so
  // the merges run: " t"(0), "he"(1), " the"(2) leave " the" + "n".
  EXPECT_EQ((*tokenizer)->Encode("a the then<|eot_id|><think>", true).value(),
            (std::vector<int32_t>{'a', 258, 258, 'n', 259, 260}));
  EXPECT_EQ((*tokenizer)->Encode("<|eot_id|>", false).value(),
            (std::vector<int32_t>{'<', '|', 'e', 'o', 't', '_', 'i', 'd', '|', '>'}));
}

TEST(TokenizerJsonTest, MergesInPairFormAreTheSame) {
  json doc = SmallTokenizer();
  doc["model"]["merges"] = json::array({json::array({Spell(" "), "t"}), json::array({"h", "e"}),
                                        json::array({Spell(" t"), "he"})});
  auto spec = Parse(doc);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  ASSERT_EQ(spec->merges.size(), 3u);
  EXPECT_EQ(spec->merges[2], std::make_pair(Spell(" t"), std::string("he")));
}

struct Broken {
  const char* what;
  std::function<void(json&)> mutate;
  const char* message;  // a substring the error must contain
  common::StatusCode code = common::StatusCode::kInvalidArgument;
};

TEST(TokenizerJsonTest, RefusesBrokenFilesNamingTheKey) {
  const common::StatusCode unimplemented = common::StatusCode::kUnimplemented;
  const Broken cases[] = {
      {"no model", [](json& d) { d.erase("model"); }, "tok.json: tokenizer: missing key \"model\""},
      {"vocab not an object", [](json& d) { d["model"]["vocab"] = json::array(); }, "model.vocab: expected an object"},
      {"id not a number", [](json& d) { d["model"]["vocab"]["a"] = "7"; }, "model.vocab[\"a\"]: expected an integer id"},
      {"negative id", [](json& d) { d["model"]["vocab"]["a"] = -1; }, "model.vocab[\"a\"]: id -1 is outside"},
      {"huge id", [](json& d) { d["model"]["vocab"]["a"] = 1 << 30; }, "model.vocab[\"a\"]: id 1073741824"},
      {"sparse ids", [](json& d) { d["model"]["vocab"]["a"] = 5000; }, "leaves more than 1024 ids unused"},
      {"two pieces one id", [](json& d) { d["model"]["vocab"]["zz"] = 3; }, "id 3 is given to both"},
      {"merge without space", [](json& d) { d["model"]["merges"][1] = "he"; }, "model.merges[1]: \"he\" is not two pieces"},
      {"merge with two spaces", [](json& d) { d["model"]["merges"][0] = "a b c"; }, "model.merges[0]"},
      {"merge of three", [](json& d) { d["model"]["merges"][2] = json::array({"a", "b", "c"}); }, "model.merges[2]: expected"},
      {"merge not a string", [](json& d) { d["model"]["merges"][2] = json::array({"a", 5}); }, "model.merges[2][1]: expected a string"},
      {"no merges", [](json& d) { d["model"].erase("merges"); }, "model: missing key \"merges\""},
      {"added token without content", [](json& d) { d["added_tokens"][1].erase("content"); }, "added_tokens[1]: missing key \"content\""},
      {"added flag not bool", [](json& d) { d["added_tokens"][0]["special"] = 1; }, "added_tokens[0].special: expected true or false"},
      {"added tokens not a list", [](json& d) { d["added_tokens"] = "x"; }, "added_tokens: expected an array"},
      {"added id clash", [](json& d) { d["added_tokens"][0]["id"] = 65; }, "id 65 is given to both"},
      {"ignore_merges not bool", [](json& d) { d["model"]["ignore_merges"] = "yes"; }, "model.ignore_merges: expected true or false"},
      {"unknown unk", [](json& d) { d["model"]["unk_token"] = "<unk>"; }, "model.unk_token: \"<unk>\" is not in the vocabulary"},
      {"WordPiece", [](json& d) { d["model"]["type"] = "WordPiece"; }, "model.type: \"WordPiece\" is not supported", unimplemented},
      {"byte fallback", [](json& d) { d["model"]["byte_fallback"] = true; }, "model.byte_fallback: true is not supported", unimplemented},
      {"dropout", [](json& d) { d["model"]["dropout"] = 0.1; }, "model.dropout: 0.1 is not supported", unimplemented},
      {"suffix", [](json& d) { d["model"]["end_of_word_suffix"] = "</w>"; }, "model.end_of_word_suffix", unimplemented},
      {"NFKC", [](json& d) { d["normalizer"] = {{"type", "NFKC"}}; }, "normalizer.type: \"NFKC\" is not supported", unimplemented},
      {"Lowercase in a sequence", [](json& d) { d["normalizer"] = {{"type", "Sequence"}, {"normalizers", {{{"type", "Lowercase"}}}}}; },
       "normalizer.normalizers[0].type", unimplemented},
      {"Removed", [](json& d) { d["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed"; },
       "pre_tokenizer.pretokenizers[0].behavior: \"Removed\" is not supported", unimplemented},
      {"inverted split", [](json& d) { d["pre_tokenizer"]["pretokenizers"][0]["invert"] = true; },
       "pre_tokenizer.pretokenizers[0].invert", unimplemented},
      {"string pattern", [](json& d) { d["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"String", " "}}; },
       "pre_tokenizer.pretokenizers[0].pattern", unimplemented},
      {"pattern not a string", [](json& d) { d["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = 3; },
       "pre_tokenizer.pretokenizers[0].pattern.Regex: expected a string"},
      {"no ByteLevel", [](json& d) { d["pre_tokenizer"]["pretokenizers"].erase(1); }, "pre_tokenizer: a Sequence without ByteLevel", unimplemented},
      {"prefix space", [](json& d) { d["pre_tokenizer"]["pretokenizers"][1]["add_prefix_space"] = true; },
       "pre_tokenizer.pretokenizers[1].add_prefix_space: true is not supported", unimplemented},
      {"step after ByteLevel", [](json& d) { d["pre_tokenizer"]["pretokenizers"].push_back(d["pre_tokenizer"]["pretokenizers"][0]); },
       "pre_tokenizer.pretokenizers[2]: a step after ByteLevel", unimplemented},
      {"Metaspace", [](json& d) { d["pre_tokenizer"] = {{"type", "Metaspace"}}; }, "pre_tokenizer.type: \"Metaspace\"", unimplemented},
      {"no pre_tokenizer", [](json& d) { d["pre_tokenizer"] = nullptr; }, "pre_tokenizer: null", unimplemented},
      {"WordPiece decoder", [](json& d) { d["decoder"] = {{"type", "WordPiece"}}; }, "decoder.type: \"WordPiece\"", unimplemented},
      {"not an object", [](json& d) { d = json::array(); }, "tok.json: tokenizer: expected an object"},
  };
  for (const Broken& c : cases) {
    json doc = SmallTokenizer();
    c.mutate(doc);
    const auto spec = Parse(doc);
    ASSERT_FALSE(spec.ok()) << c.what;
    EXPECT_EQ(spec.status().code(), c.code) << c.what << ": " << spec.status().ToString();
    EXPECT_NE(spec.status().message().find(c.message), std::string::npos) << c.what << ": " << spec.status().ToString();
  }
}

TEST(TokenizerJsonTest, BuildErrorsNameTheMergeAndThePattern) {
  json doc = SmallTokenizer();
  doc["model"]["merges"].push_back("h zz");
  auto spec = Parse(doc);
  ASSERT_TRUE(spec.ok());
  auto tokenizer = BpeTokenizer::Create(std::move(spec).value());
  ASSERT_FALSE(tokenizer.ok());
  EXPECT_NE(tokenizer.status().message().find("merge 3 (\"h\" \"zz\"): \"zz\" is not in the vocabulary"), std::string::npos);
  doc = SmallTokenizer();
  doc["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "([a-";
  tokenizer = BpeTokenizer::Create(Parse(doc).value());
  ASSERT_FALSE(tokenizer.ok());
  EXPECT_NE(tokenizer.status().message().find("split pattern 0 does not compile at offset"), std::string::npos)
      << tokenizer.status().ToString();
}

TEST(TokenizerJsonTest, SyntaxErrorsNameLineAndColumn) {
  const auto spec = BpeSpecFromTokenizerJson("{\n  \"model\": {\n    \"vocab\": {,}\n  }\n}", "tok.json");
  ASSERT_FALSE(spec.ok());
  EXPECT_NE(spec.status().message().find("tok.json: JSON syntax error at byte 29 (line 3, column 15)"), std::string::npos)
      << spec.status().ToString();
  EXPECT_FALSE(BpeSpecFromTokenizerJson("", "empty.json").ok());
  const std::string deep = std::string(5000, '[') + std::string(5000, ']');
  const auto nested = BpeSpecFromTokenizerJson(deep, "deep.json");
  ASSERT_FALSE(nested.ok());
  EXPECT_NE(nested.status().message().find("deep.json"), std::string::npos);
}

// tokenizer.json (simdjson) and tokenizer_config.json (nlohmann-json) refuse nesting past the
// limit every JSON file of a model shares, with the same message; the limit itself is accepted.
TEST(TokenizerJsonTest, NestingPastTheLimitIsRefusedWithTheSharedMessage) {
  const auto deep = [](size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); };
  for (size_t depth : {size_t{129}, size_t{200'000}}) {
    SCOPED_TRACE(depth);
    const auto nested = BpeSpecFromTokenizerJson(deep(depth), "deep.json");
    ASSERT_FALSE(nested.ok());
    EXPECT_EQ(nested.status().message(), "deep.json: nested deeper than 128 levels");
    // One level of the file's own object: 128 + 1 brackets inside it.
    auto spec = Parse(SmallTokenizer());
    ASSERT_TRUE(spec.ok());
    const auto config = ApplyTokenizerConfigJson(R"({"chat_template": )" + deep(depth) + "}", "cfg.json", &*spec);
    EXPECT_EQ(config.message(), "cfg.json: nested deeper than 128 levels");
  }
  // At the limit: tokenizer.json's own object holding an unknown key nested 127 levels reads.
  json doc = SmallTokenizer();
  std::string text = doc.dump();
  text.pop_back();
  EXPECT_TRUE(BpeSpecFromTokenizerJson(text + R"(, "extra": )" + deep(127) + "}", "tok.json").ok());
  auto spec = Parse(SmallTokenizer());
  ASSERT_TRUE(spec.ok());
  EXPECT_TRUE(ApplyTokenizerConfigJson(R"({"extra": )" + deep(127) + "}", "cfg.json", &*spec).ok());
}

TEST(TokenizerJsonTest, ReadsTokenizerConfig) {
  auto spec = Parse(SmallTokenizer());
  ASSERT_TRUE(spec.ok());
  const std::string config = R"({"bos_token": {"content": "<think>", "__type": "AddedToken"}, "eos_token": "<|eot_id|>",
    "pad_token": null, "add_bos_token": false, "model_max_length": 1000000000000000019884624838656,
    "chat_template": [{"name": "tool_use", "template": "x"}, {"name": "default", "template": "{{ messages }}"}]})";
  ASSERT_TRUE(ApplyTokenizerConfigJson(config, "cfg.json", &*spec).ok());
  EXPECT_EQ(spec->special.bos, 260);
  EXPECT_EQ(spec->special.eos, 259);
  EXPECT_FALSE(spec->special.pad.has_value());
  EXPECT_FALSE(spec->special.add_bos);
  EXPECT_EQ(spec->chat_template, "{{ messages }}");
  const auto bad = ApplyTokenizerConfigJson(R"({"eos_token": "<nope>"})", "cfg.json", &*spec);
  EXPECT_NE(bad.message().find("cfg.json: eos_token: \"<nope>\" is not in the vocabulary"), std::string::npos) << bad.ToString();
  const auto broken = ApplyTokenizerConfigJson("{\"a\": [1,", "cfg.json", &*spec);
  EXPECT_NE(broken.message().find("cfg.json: JSON syntax error"), std::string::npos) << broken.ToString();
}

TEST(TokenizerJsonTest, RealConfigsNameTheirSpecialTokens) {
  const auto qwen = testing::LoadReferenceTokenizer("qwen3");
  const auto llama = testing::LoadReferenceTokenizer("llama3_2");
  ASSERT_TRUE(qwen && llama);
  EXPECT_EQ(qwen->special_ids().eos, qwen->TokenId("<|im_end|>"));
  EXPECT_FALSE(qwen->special_ids().bos.has_value());
  EXPECT_FALSE(qwen->special_ids().add_bos);
  EXPECT_EQ(llama->special_ids().bos, llama->TokenId("<|begin_of_text|>"));
  EXPECT_TRUE(llama->special_ids().add_bos);  // from the TemplateProcessing post-processor
  EXPECT_EQ(llama->special_ids().eos, llama->TokenId("<|eot_id|>"));
  EXPECT_NE(qwen->chat_template().find("<|im_start|>"), std::string::npos);
}

// What a GGUF loader does: tokens, token types and "a b" merge strings as plain vectors, and the
// pre-tokenizer from tokenizer.ggml.pre. It must give the tokenizer the tokenizer.json gives.
TEST(TokenizerJsonTest, GgufStyleVectorsGiveTheSameTokenizer) {
  for (const auto& [name, pre] : {std::pair<std::string, std::string>{"qwen3", "qwen2"}, {"llama3_1", "llama-bpe"}}) {
    auto from_json = LoadBpeSpecFromDirectory(testing::ReferenceTokenizerDir(name));
    ASSERT_TRUE(from_json.ok()) << from_json.status().ToString();
    BpeSpec gguf;
    gguf.pieces = from_json->pieces;
    gguf.types = from_json->types;
    for (const auto& [a, b] : from_json->merges) {  // as GGUF stores them: "a b"
      auto merge = SplitMergeLine(a + " " + b, gguf.merges.size());
      ASSERT_TRUE(merge.ok()) << merge.status().ToString();
      gguf.merges.push_back(std::move(merge).value());
    }
    auto setup = PreTokenizerForGgufName(pre);
    ASSERT_TRUE(setup.ok());
    gguf.pre_tokenizer = *setup;
    gguf.ignore_merges = pre == "llama-bpe";
    EXPECT_EQ(gguf.pre_tokenizer.split_patterns, from_json->pre_tokenizer.split_patterns);
    EXPECT_EQ(gguf.pre_tokenizer.normalization, from_json->pre_tokenizer.normalization);
    EXPECT_EQ(gguf.ignore_merges, from_json->ignore_merges);
    auto a = BpeTokenizer::Create(std::move(from_json).value());
    auto b = BpeTokenizer::Create(std::move(gguf));
    ASSERT_TRUE(a.ok() && b.ok());
    for (const char* text : {"Hello, world! 12345 <|im_start|>x<think> caf\xC3\xA9 e\xCC\x81 \xE4\xB8\xAD\xE6\x96\x87\n\n"}) {
      EXPECT_EQ((*a)->Encode(text, true).value(), (*b)->Encode(text, true).value()) << name;
      EXPECT_EQ((*a)->Encode(text, false).value(), (*b)->Encode(text, false).value()) << name;
    }
  }
  const auto unknown = PreTokenizerForGgufName("gpt-4o");
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), common::StatusCode::kUnimplemented);
  EXPECT_NE(unknown.status().message().find("\"gpt-4o\""), std::string::npos);
}

TEST(TokenizerJsonTest, GgufHelpers) {
  EXPECT_EQ(TokenTypeFromGguf(1), TokenType::kNormal);
  EXPECT_EQ(TokenTypeFromGguf(3), TokenType::kControl);
  EXPECT_EQ(TokenTypeFromGguf(6), TokenType::kByte);
  EXPECT_FALSE(TokenTypeFromGguf(0));
  EXPECT_FALSE(TokenTypeFromGguf(7));
  EXPECT_EQ(SplitMergeLine("\xC4\xA0 t", 0).value(), std::make_pair(std::string("\xC4\xA0"), std::string("t")));
  const auto bad = SplitMergeLine("a b c", 41);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("merge 41: \"a b c\""), std::string::npos);
  EXPECT_FALSE(SplitMergeLine("ab", 0).ok());
}

TEST(TokenizerJsonTest, MissingDirectoryIsNotFound) {
  const auto spec = LoadBpeSpecFromDirectory("/nonexistent/nielsd/tokenizer");
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), common::StatusCode::kNotFound);
  EXPECT_NE(spec.status().message().find("/nonexistent/nielsd/tokenizer/tokenizer.json"), std::string::npos);
}

}  // namespace tokenizer_json_test
}  // namespace
}  // namespace niels::daemon::text
