#include "daemon/loaders/model_loader.h"
#include "daemon/loaders/niels_dir.h"

#include <map>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "daemon/formats/safetensors.h"
#include "daemon/model/weights.h"
#include "tests/daemon/loaders/niels_named.h"
#include "tests/support/test_model.h"

namespace niels::daemon::loaders {
namespace {

using formats::SafetensorsDtype;
using formats::SafetensorsEntry;
using formats::SafetensorsFile;
using formats::WriteSafetensors;
using kernels::Dtype;
using model::ModelConfig;
using model::ModelConfigToJson;
using model::OwnedTensor;
using model::RandomWeights;
using model::Weights;

using common::StatusCode;
using ::testing::AllOf;
using ::testing::HasSubstr;

class ModelDirTest : public ::testing::Test {
 protected:
  void SetUp() override { niels::testing::WriteModelDir(dir_.path(), config_, kSeed); }

  // Loads dir_ and expects `code` with a message containing `needles`.
  void ExpectError(StatusCode code, const std::vector<std::string>& needles) {
    auto model = LoadModel(dir_.path());
    ASSERT_FALSE(model.ok());
    EXPECT_EQ(model.status().code(), code) << model.status().ToString();
    for (const auto& n : needles) EXPECT_THAT(model.status().message(), HasSubstr(n));
  }

  static constexpr uint64_t kSeed = 11;
  ModelConfig config_ = niels::testing::TinyConfig();
  niels::testing::TempDir dir_{"niels_model_dir_test_"};
};

TEST_F(ModelDirTest, LoadsAValidDirectory) {
  auto model = LoadModel(dir_.path());
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  const Model& m = **model;
  EXPECT_EQ(m.dir, dir_.path());
  EXPECT_EQ(m.config.vocab_size, niels::testing::TinyTokenizerVocabSize());
  EXPECT_EQ(m.config.width, config_.width);
  EXPECT_EQ(m.config.layers, config_.layers);
  EXPECT_EQ(m.config.name, "tiny");
  ASSERT_NE(m.tokenizer, nullptr);
  EXPECT_EQ(m.tokenizer->vocab_size(), m.config.vocab_size);
  ASSERT_NE(m.transformer, nullptr);
  EXPECT_EQ(m.transformer->config().vocab_size, m.config.vocab_size);
  // The weights are the ones written (RandomWeights is deterministic for a seed).
  const Weights written = RandomWeights(m.config, kSeed);
  std::vector<std::pair<std::string, model::Tensor>> expected, loaded;  // views into the weights
  written.ForEach([&](const std::string& name, const model::Tensor& t) { expected.emplace_back(name, t); });
  m.transformer->weights().ForEach([&](const std::string& name, const model::Tensor& t) { loaded.emplace_back(name, t); });
  ASSERT_EQ(expected.size(), loaded.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(expected[i].second.ToFloats(), loaded[i].second.ToFloats()) << expected[i].first;
  }
}

TEST_F(ModelDirTest, MissingDirectoryIsNotFound) {
  auto model = LoadModel(dir_.path() / "nope");
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(model.status().message(), HasSubstr("nope"));
}

TEST_F(ModelDirTest, EachMissingFileIsNamed) {
  for (const char* name : {"config.json", "tokenizer.model", "model.safetensors"}) {
    SCOPED_TRACE(name);
    const std::string saved = niels::testing::ReadFile(dir_ / name);
    std::filesystem::remove(dir_ / name);
    ExpectError(StatusCode::kNotFound, {(dir_ / name).string()});
    niels::testing::WriteFile(dir_ / name, saved);
  }
  EXPECT_TRUE(LoadModel(dir_.path()).ok());
}

TEST_F(ModelDirTest, InvalidConfigJsonNamesTheFile) {
  niels::testing::WriteFile(dir_ / "config.json", "{\"V\": 12,");
  ExpectError(StatusCode::kInvalidArgument, {(dir_ / "config.json").string(), "invalid JSON"});
}

// Malformed case: vocab size disagreeing between config and tokenizer.
TEST_F(ModelDirTest, ConfigVocabDisagreesWithTokenizer) {
  ModelConfig c = config_;
  c.vocab_size = niels::testing::TinyTokenizerVocabSize() + 8;
  niels::testing::WriteFile(dir_ / "config.json", ModelConfigToJson(c));
  ExpectError(StatusCode::kInvalidArgument,
              {(dir_ / "config.json").string(), "\"V\" = " + std::to_string(c.vocab_size),
               (dir_ / "tokenizer.model").string(),
               std::to_string(niels::testing::TinyTokenizerVocabSize()) + " pieces"});
}

// Malformed case: vocab size disagreeing between config (and tokenizer) and the embedding.
TEST_F(ModelDirTest, EmbeddingRowsDisagreeWithConfig) {
  ModelConfig bigger = config_;
  bigger.vocab_size = niels::testing::TinyTokenizerVocabSize() + 8;
  ASSERT_TRUE(SaveNielsWeights(RandomWeights(bigger, kSeed), dir_ / "model.safetensors").ok());
  ExpectError(StatusCode::kInvalidArgument,
              {(dir_ / "model.safetensors").string(), "tok_emb.weight",
               fmt::format("[{}, 32]", bigger.vocab_size),
               "V = " + std::to_string(niels::testing::TinyTokenizerVocabSize())});
}

TEST_F(ModelDirTest, TokenizerWithoutSpecialTokenIsRejected) {
  niels::testing::TinyTokenizerOptions options;
  options.user_defined_symbols = niels::testing::AllSpecialLiterals();
  options.user_defined_symbols->pop_back();  // no eot
  niels::testing::TrainTinyTokenizer(dir_ / "tokenizer.model", options);
  ExpectError(StatusCode::kInvalidArgument, {(dir_ / "tokenizer.model").string(), "eot"});
}

TEST_F(ModelDirTest, WrongTensorShapeNamesFileAndTensor) {
  Weights w = RandomWeights(config_, kSeed);
  w.blocks[1].wo = OwnedTensor(std::vector<float>(config_.width * config_.width / 2), {config_.width, config_.width / 2},
                                 w.backing);
  ASSERT_TRUE(SaveNielsWeights(w, dir_ / "model.safetensors").ok());
  ExpectError(StatusCode::kInvalidArgument, {(dir_ / "model.safetensors").string(), "blocks.1.attn.proj.weight",
                                             "[32, 16]", "expected [32, 32]"});
}

// The refusals of 16-bit files name the file and the tensor: a file holding two dtypes, a dtype
// that is not a float of ours, a 16-bit file cut short.
TEST_F(ModelDirTest, MixedDtypesAreRefusedNamingTheTensor) {
  Weights w = RandomWeights(config_, kSeed);
  std::vector<SafetensorsEntry> entries;
  std::vector<std::vector<uint16_t>> halves;
  for (const auto& [name, t] : NielsNamed(w)) {
    if (name == "blocks.1.mlp.fc_g.weight") {  // this one tensor in f16
      const std::vector<float> values = t.ToFloats();
      halves.emplace_back(values.size());
      for (size_t i = 0; i < values.size(); ++i) halves.back()[i] = kernels::FloatToHalf(values[i]);
      entries.push_back({name, SafetensorsDtype::kF16, t.shape, halves.back().data()});
    } else {
      entries.push_back({name, SafetensorsDtype::kF32, t.shape, t.data});
    }
  }
  ASSERT_TRUE(WriteSafetensors(dir_ / "model.safetensors", entries).ok());
  ExpectError(StatusCode::kInvalidArgument, {(dir_ / "model.safetensors").string(), "blocks.1.mlp.fc_g.weight",
                                             "dtype F16 but tok_emb.weight has F32"});
}

TEST_F(ModelDirTest, UnsupportedDtypeIsRefusedNamingTheTensor) {
  Weights w = RandomWeights(config_, kSeed);
  std::vector<SafetensorsEntry> entries;
  std::vector<double> doubles;
  for (const auto& [name, t] : NielsNamed(w)) {
    if (name == "ln_f.weight") {
      for (float v : t.ToFloats()) doubles.push_back(v);
      entries.push_back({name, SafetensorsDtype::kF64, t.shape, doubles.data()});
    } else {
      entries.push_back({name, SafetensorsDtype::kF32, t.shape, t.data});
    }
  }
  ASSERT_TRUE(WriteSafetensors(dir_ / "model.safetensors", entries).ok());
  ExpectError(StatusCode::kInvalidArgument,
              {(dir_ / "model.safetensors").string(), "tensor ln_f.weight has dtype F64, expected F32, F16 or BF16"});
}

TEST_F(ModelDirTest, TruncatedSixteenBitFileIsRefusedNamingTheTensor) {
  for (Dtype dtype : {Dtype::kF16, Dtype::kBF16}) {
    ASSERT_TRUE(SaveNielsWeights(RandomWeights(config_, kSeed), dir_ / "model.safetensors", dtype).ok());
    const std::string bytes = niels::testing::ReadFile(dir_ / "model.safetensors");
    niels::testing::WriteFile(dir_ / "model.safetensors", bytes.substr(0, bytes.size() - 3));
    // SaveWeights writes ln_f.weight last: its byte range is the one cut off.
    ExpectError(StatusCode::kInvalidArgument,
                {(dir_ / "model.safetensors").string(), "tensor ln_f.weight", "point past the end"});
  }
}

}  // namespace
}  // namespace niels::daemon::loaders
