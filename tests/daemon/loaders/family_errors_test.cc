// What the Hugging Face and GGUF loaders refuse, and that each refusal names the file and the key,
// tensor or value that is wrong: each case breaks one thing of a valid tiny model (family_model.h)
// and loads it.
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "daemon/loaders/model_loader.h"
#include "tests/support/family_model.h"
#include "tests/support/temp_files.h"

namespace niels::daemon::loaders {
namespace {

using formats::GgmlType;
using formats::GgufWriteValue;
using formats::SafetensorsDtype;
using model::Architecture;
using model::ModelConfig;

struct Refusal {
  common::StatusCode code = common::StatusCode::kInvalidArgument;
  std::vector<std::string> mentions;  // each must appear in the message
};

void ExpectRefused(const std::filesystem::path& path, const Refusal& expected) {
  auto model = LoadModel(path);
  ASSERT_FALSE(model.ok()) << path << " loaded";
  EXPECT_EQ(model.status().code(), expected.code) << model.status().ToString();
  for (const std::string& part : expected.mentions) {
    EXPECT_NE(model.status().message().find(part), std::string::npos)
        << "\"" << part << "\" not in: " << model.status().message();
  }
}

class FamilyErrorsTest : public ::testing::Test {
 protected:
  FamilyErrorsTest()
      : config_(testing::TinyFamilyConfig(Architecture::kLlama)), weights_(testing::TinyFamilyWeights(config_, 11)) {}

  // A valid HF directory with `edit` applied; returns its path.
  std::filesystem::path Hf(const std::function<void(testing::HfModelFiles&)>& edit, int shards = 1) {
    testing::HfModelFiles files = testing::MakeHfModel(config_, weights_);
    edit(files);
    const std::filesystem::path dir = dir_ / ("hf" + std::to_string(count_++));
    files.Write(dir, shards);
    return dir;
  }
  std::filesystem::path Gguf(const std::function<void(testing::GgufModelFiles&)>& edit) {
    testing::GgufModelFiles files = testing::MakeGgufModel(config_, weights_);
    edit(files);
    const std::filesystem::path path = dir_ / ("m" + std::to_string(count_++) + ".gguf");
    files.Write(path);
    return path;
  }

  ModelConfig config_;
  model::Weights weights_;
  niels::testing::TempDir dir_{"niels_family_errors_"};
  int count_ = 0;
};

TEST_F(FamilyErrorsTest, TheUneditedFilesLoad) {
  EXPECT_TRUE(LoadModel(Hf([](auto&) {})).ok());
  EXPECT_TRUE(LoadModel(Gguf([](auto&) {})).ok());
}

TEST_F(FamilyErrorsTest, HfMissingTensor) {
  const auto dir = Hf([](testing::HfModelFiles& f) {
    std::erase_if(f.tensors, [](const auto& t) { return t.file.name == "model.layers.1.mlp.down_proj.weight"; });
  });
  ExpectRefused(dir, {.mentions = {dir.string(), "missing tensor model.layers.1.mlp.down_proj.weight", "[64, 128]"}});
}

TEST_F(FamilyErrorsTest, HfWrongShape) {
  const auto dir = Hf([](testing::HfModelFiles& f) { f.Find("model.layers.0.self_attn.k_proj.weight")->file.shape = {64, 32}; });
  ExpectRefused(dir, {.mentions = {"model.safetensors: tensor model.layers.0.self_attn.k_proj.weight has shape [64, 32], "
                                   "expected [32, 64]"}});
}

TEST_F(FamilyErrorsTest, HfUnexpectedTensor) {
  const auto dir = Hf([](testing::HfModelFiles& f) {
    auto extra = *f.Find("model.norm.weight");
    extra.file.name = "model.layers.0.self_attn.sinks";
    f.tensors.push_back(extra);
  });
  ExpectRefused(dir, {.mentions = {"unexpected tensor model.layers.0.self_attn.sinks"}});
}

TEST_F(FamilyErrorsTest, HfUnknownArchitecture) {
  const auto dir = Hf([](testing::HfModelFiles& f) { f.config["architectures"] = {"GemmaForCausalLM"}; });
  ExpectRefused(dir, {.mentions = {(dir / "config.json").string(), "GemmaForCausalLM", "LlamaForCausalLM"}});
}

TEST_F(FamilyErrorsTest, HfUnsupportedRopeScaling) {
  const auto dir = Hf([](testing::HfModelFiles& f) {
    f.config["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 32}};
  });
  ExpectRefused(dir, {.mentions = {(dir / "config.json").string(), "rope_scaling", "\"yarn\""}});
}

TEST_F(FamilyErrorsTest, HfLlama3ScalingWithoutItsFactors) {
  const auto dir = Hf([](testing::HfModelFiles& f) { f.config["rope_scaling"].erase("low_freq_factor"); });
  ExpectRefused(dir, {.mentions = {"rope_scaling.low_freq_factor"}});
}

TEST_F(FamilyErrorsTest, HfOtherRefusedSettings) {
  const std::pair<const char*, nlohmann::json> cases[] = {
      {"hidden_act", "gelu"}, {"partial_rotary_factor", 0.5}, {"quantization_config", {{"quant_method", "gptq"}}}};
  for (const auto& c : cases) {
    const char* key = c.first;  // not structured bindings: the lambda uses them
    const nlohmann::json& value = c.second;
    const auto dir = Hf([&](testing::HfModelFiles& f) { f.config[key] = value; });
    ExpectRefused(dir, {.mentions = {(dir / "config.json").string(), key}});
  }
}

TEST_F(FamilyErrorsTest, HfBadDtype) {
  const auto dir = Hf([](testing::HfModelFiles& f) { f.Find("model.layers.0.mlp.up_proj.weight")->dtype = SafetensorsDtype::kI32; });
  ExpectRefused(dir, {.mentions = {"tensor model.layers.0.mlp.up_proj.weight has dtype I32, expected F32, F16 or BF16"}});
}

TEST_F(FamilyErrorsTest, HfMissingShard) {
  const auto dir = Hf([](auto&) {}, 3);
  std::filesystem::remove(dir / "model-00002-of-00003.safetensors");
  ExpectRefused(dir, {.code = common::StatusCode::kNotFound, .mentions = {"model-00002-of-00003.safetensors", "missing"}});
}

TEST_F(FamilyErrorsTest, HfTiedHeadThatDiffers) {
  const auto dir = Hf([](testing::HfModelFiles& f) {
    auto head = *f.Find("model.embed_tokens.weight");
    head.file.name = "lm_head.weight";
    head.file.bytes[0] ^= 1;
    f.tensors.push_back(head);
  });
  ExpectRefused(dir, {.mentions = {"lm_head.weight differs from model.embed_tokens.weight", "tie_word_embeddings"}});
}

TEST_F(FamilyErrorsTest, HfWithoutTokenizer) {
  const auto dir = Hf([](auto&) {});
  std::filesystem::remove(dir / "tokenizer.json");
  auto model = LoadModel(dir);
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.status().message().find("tokenizer.json"), std::string::npos) << model.status().message();
}

// Each JSON file of the directory with a value nested 200,000 levels deep where a number, an id
// list, a template or a map belongs: refused while parsing, naming the file and the limit. (Before
// the limit, config.json's and generation_config.json's error messages dumped the value recursively
// and overflowed the stack: nielsd died of SIGSEGV at load.)
TEST_F(FamilyErrorsTest, HfDeeplyNestedJsonIsRefusedWhileParsing) {
  constexpr size_t kDepth = 200'000;
  const std::string deep = std::string(kDepth, '[') + std::string(kDepth, ']');
  // `file`'s JSON text with `key` (the last one, so it wins) set to the deep value.
  const auto with_deep_key = [&](const nlohmann::json& valid, const std::string& key) {
    std::string text = valid.dump();
    text.pop_back();  // the closing brace
    return text + ",\"" + key + "\": " + deep + "}";
  };
  const struct {
    const char* file;
    const char* key;
    int shards;
  } cases[] = {{"config.json", "hidden_size", 1},
               {"generation_config.json", "eos_token_id", 1},
               {"tokenizer_config.json", "chat_template", 1},
               {"tokenizer.json", "model", 1},
               {"model.safetensors.index.json", "weight_map", 3}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.file);
    testing::HfModelFiles files = testing::MakeHfModel(config_, weights_);
    const std::filesystem::path dir = dir_ / ("deep" + std::to_string(count_++));
    files.Write(dir, c.shards);
    const std::filesystem::path path = dir / c.file;
    niels::testing::WriteFile(path, with_deep_key(nlohmann::json::parse(niels::testing::ReadFile(path)), c.key));
    ExpectRefused(dir, {.mentions = {path.string() + ": nested deeper than 128 levels"}});
  }
  // Nesting up to the limit is only data: an unknown key of config.json nested 127 levels (128
  // with the file's own object) loads.
  const auto dir = Hf([](auto&) {});
  const std::filesystem::path path = dir / "config.json";
  std::string text = niels::testing::ReadFile(path);
  text.erase(text.find_last_of('}'));
  niels::testing::WriteFile(path, text + ",\"deep_but_allowed\": " + std::string(127, '[') + std::string(127, ']') + "}");
  EXPECT_TRUE(LoadModel(dir).ok());
}

// A shard name that is not a plain file name of the directory, and a key of a megabyte whose value
// is not a name: the messages quote both, at most 80 bytes each.
TEST_F(FamilyErrorsTest, HfIndexNamesOnlyFilesOfTheDirectoryAndIsQuotedBounded) {
  const auto dir = Hf([](auto&) {}, 3);
  const std::filesystem::path index = dir / "model.safetensors.index.json";
  niels::testing::WriteFile(index, R"({"weight_map": {"model.norm.weight": "../model-00001-of-00003.safetensors"}})");
  ExpectRefused(dir, {.mentions = {index.string() + ": weight_map[\"model.norm.weight\"] = "
                                   "\"../model-00001-of-00003.safetensors\" is not a file name in this directory"}});
  niels::testing::WriteFile(index, R"({"weight_map": {")" + std::string(1 << 20, 'k') + R"(": 7}})");
  auto model = LoadModel(dir);
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.status().message().find(index.string() + ": weight_map[\"kkk"), std::string::npos)
      << model.status().message().substr(0, 300);
  EXPECT_NE(model.status().message().find("...] must be a file name"), std::string::npos);
  EXPECT_LT(model.status().message().size(), index.string().size() + 200);
}

TEST_F(FamilyErrorsTest, GgufMissingTensor) {
  const auto path = Gguf([](testing::GgufModelFiles& f) {
    std::erase_if(f.tensors, [](const auto& t) { return t.file.name == "blk.1.ffn_down.weight"; });
  });
  ExpectRefused(path, {.mentions = {path.string(), "missing tensor blk.1.ffn_down.weight"}});
}

TEST_F(FamilyErrorsTest, GgufWrongShape) {
  const auto path = Gguf([](testing::GgufModelFiles& f) { f.Find("blk.0.attn_k.weight")->file.shape = {64, 32}; });
  ExpectRefused(path, {.mentions = {path.string() + ": tensor blk.0.attn_k.weight has shape [64, 32], expected [32, 64]"}});
}

TEST_F(FamilyErrorsTest, GgufUnknownArchitecture) {
  const auto path = Gguf([](testing::GgufModelFiles& f) { f.Set("general.architecture", GgufWriteValue::String("gemma")); });
  ExpectRefused(path, {.mentions = {path.string(), "general.architecture \"gemma\" is not supported"}});
}

TEST_F(FamilyErrorsTest, GgufUnsupportedRopeScaling) {
  const auto path = Gguf([](testing::GgufModelFiles& f) { f.Set("llama.rope.scaling.type", GgufWriteValue::String("yarn")); });
  ExpectRefused(path, {.mentions = {path.string(), "llama.rope.scaling.type", "\"yarn\""}});
}

TEST_F(FamilyErrorsTest, GgufMissingKey) {
  const auto path = Gguf([](testing::GgufModelFiles& f) { f.Remove("llama.attention.layer_norm_rms_epsilon"); });
  ExpectRefused(path, {.mentions = {path.string(), "missing metadata key \"llama.attention.layer_norm_rms_epsilon\""}});
}

TEST_F(FamilyErrorsTest, GgufBadType) {
  const auto path = Gguf([](testing::GgufModelFiles& f) { f.Find("blk.0.ffn_up.weight")->type = GgmlType::kI32; });
  ExpectRefused(path, {.mentions = {path.string() + ": tensor blk.0.ffn_up.weight has type", "cannot compute with"}});
}

TEST_F(FamilyErrorsTest, GgufUnigramTokenizer) {
  // SentencePiece BPE ("llama") loads (gguf_sentencepiece_test.cc); unigram ("t5") is refused.
  const auto path = Gguf([](testing::GgufModelFiles& f) { f.Set("tokenizer.ggml.model", GgufWriteValue::String("t5")); });
  ExpectRefused(path, {.mentions = {path.string(), "tokenizer.ggml.model", "\"t5\"", "unigram"}});
}

TEST_F(FamilyErrorsTest, GgufTokenCountDisagreesWithTheEmbedding) {
  const auto path = Gguf([](testing::GgufModelFiles& f) {
    std::vector<std::string> tokens(10, "a");
    f.Set("tokenizer.ggml.tokens", GgufWriteValue::StringArray(tokens));
  });
  ExpectRefused(path, {.mentions = {path.string(), "tokenizer.ggml.tokens", "10 tokens"}});
}

TEST_F(FamilyErrorsTest, NeitherFormat) {
  const std::filesystem::path path = dir_ / "weights.bin";
  std::ofstream(path) << "not a model";
  ExpectRefused(path, {.mentions = {path.string(), "neither a model directory nor a GGUF file"}});
  ExpectRefused(dir_ / "absent", {.code = common::StatusCode::kNotFound, .mentions = {"absent"}});
  std::filesystem::create_directories(dir_ / "other");
  std::ofstream(dir_ / "other" / "config.json") << R"({"model_type": "bert"})";
  ExpectRefused(dir_ / "other", {.mentions = {"config.json", "architectures"}});
}

}  // namespace
}  // namespace niels::daemon::loaders
