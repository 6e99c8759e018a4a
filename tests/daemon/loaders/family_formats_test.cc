// The same model of each family member as a Hugging Face directory and as a GGUF file gives
// bitwise the same logits, and the same logits as the model built in memory from the weights
// written (f32, f16, bf16 matrices; llama's interleaved q/k rows; a sharded directory).
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "daemon/loaders/model_loader.h"
#include "daemon/model/transformer.h"
#include "tests/support/family_model.h"
#include "tests/support/temp_files.h"

namespace niels::daemon::loaders {
namespace {

using kernels::Dtype;
using model::Architecture;
using model::ModelConfig;
using model::Weights;

// 48 positions: a start marker, then ids spread over the vocabulary.
std::vector<int32_t> Prompt(const ModelConfig& config, int32_t first) {
  std::vector<int32_t> ids{first};
  for (int i = 1; i < 48; ++i) ids.push_back(static_cast<int32_t>((i * 37 + 11) % 280));
  return ids;
}

std::unique_ptr<Model> Load(const std::filesystem::path& path, const LoadOptions& options = {}) {
  auto model = LoadModel(path, nullptr, options);
  EXPECT_TRUE(model.ok()) << model.status().ToString();
  return model.ok() ? std::move(model).value() : nullptr;
}

// The weights as a model file of `dtype` holds them: matrices rounded to it, 1-D tensors f32.
Weights Rounded(const Weights& w, Dtype dtype) {
  if (dtype == Dtype::kF32) return w;
  auto rounded = model::ConvertWeights(w, dtype);
  EXPECT_TRUE(rounded.ok());
  return std::move(rounded).value();
}

struct Case {
  Architecture architecture;
  Dtype dtype;
};

class FamilyFormatsTest : public ::testing::TestWithParam<Case> {};

TEST_P(FamilyFormatsTest, HfDirectoryAndGgufGiveBitwiseTheSameLogits) {
  const auto [architecture, dtype] = GetParam();
  const ModelConfig config = testing::TinyFamilyConfig(architecture);
  const Weights weights = testing::TinyFamilyWeights(config, 7);
  niels::testing::TempDir dir("niels_family_formats_");
  testing::MakeHfModel(config, weights, dtype).Write(dir / "hf");
  testing::MakeGgufModel(config, weights, dtype).Write(dir / "model.gguf");

  const auto hf = Load(dir / "hf");
  const auto gguf = Load(dir / "model.gguf");
  ASSERT_TRUE(hf && gguf);
  EXPECT_EQ(hf->format, ModelFormat::kHfDir);
  EXPECT_EQ(gguf->format, ModelFormat::kGguf);
  EXPECT_EQ(gguf->config.qk_rows_interleaved, architecture == Architecture::kLlama);
  EXPECT_FALSE(hf->config.qk_rows_interleaved);
  for (const Model* m : {hf.get(), gguf.get()}) {
    EXPECT_EQ(m->config.architecture, architecture);
    EXPECT_EQ(m->config.vocab_size, config.vocab_size);
    EXPECT_EQ(m->config.head_dim(), config.head_dim());
    EXPECT_EQ(m->config.kv_head_count(), config.kv_head_count());
    EXPECT_EQ(m->config.tied_embeddings, config.tied_embeddings);
    EXPECT_EQ(m->config.attention_bias, config.attention_bias);
    EXPECT_EQ(m->config.qk_norm, config.qk_norm);
    EXPECT_EQ(m->config.rope_scaling.type, config.rope_scaling.type);
    EXPECT_EQ(m->transformer->weights().dtype(), dtype) << "the file's dtype is kept";
    EXPECT_EQ(m->tokenizer->vocab_size(), config.vocab_size);
    // Matrices are used from the mapping: all but the 1-D tensors (and llama3's computed factors).
    EXPECT_GT(MappedWeightBytes(*m), m->transformer->weights().bytes() * 9 / 10);
  }
  // Stop ids, template, special tokens: what the files say, the same in both.
  EXPECT_EQ(hf->stop_ids, gguf->stop_ids);
  EXPECT_FALSE(hf->stop_ids.empty());
  EXPECT_EQ(hf->chat_template, gguf->chat_template);
  EXPECT_FALSE(hf->chat_template.empty());
  EXPECT_EQ(hf->eos_token, gguf->eos_token);
  EXPECT_EQ(hf->add_bos_id, gguf->add_bos_id);
  if (architecture == Architecture::kLlama) {
    EXPECT_EQ(hf->bos_token, "<|begin_of_text|>");
    EXPECT_EQ(gguf->bos_token, "<|begin_of_text|>");
    EXPECT_EQ(hf->add_bos_id, testing::TinyFamilyTokenId(architecture, "<|begin_of_text|>"));
  }
  for (const char* text : {"Hello, the model is 12345 tokens <think>x\n\n  and", "<|im_start|>caf\xC3\xA9"}) {
    EXPECT_EQ(hf->tokenizer->Encode(text).value(), gguf->tokenizer->Encode(text).value()) << text;
    EXPECT_EQ(hf->tokenizer->EncodeRendered(text).value(), gguf->tokenizer->EncodeRendered(text).value()) << text;
  }

  // The model built in memory from the weights the files hold.
  const model::Transformer reference(config, Rounded(weights, dtype));
  const std::vector<int32_t> prompt = Prompt(config, hf->stop_ids.front());
  const std::vector<float> expected = reference.Forward(prompt);
  const std::vector<float> from_hf = hf->transformer->Forward(prompt);
  const std::vector<float> from_gguf = gguf->transformer->Forward(prompt);
  ASSERT_EQ(from_hf.size(), prompt.size() * static_cast<size_t>(config.vocab_size));
  EXPECT_TRUE(from_hf == expected) << "HF directory vs the weights in memory";
  EXPECT_TRUE(from_gguf == from_hf) << "GGUF vs HF directory";
  // Not flat: the comparison sees the positions.
  const auto [lo, hi] = std::minmax_element(from_hf.begin(), from_hf.end());
  EXPECT_GT(*hi - *lo, 5.0f);
}

INSTANTIATE_TEST_SUITE_P(Members, FamilyFormatsTest,
                         ::testing::Values(Case{Architecture::kLlama, Dtype::kF32}, Case{Architecture::kLlama, Dtype::kF16},
                                           Case{Architecture::kLlama, Dtype::kBF16}, Case{Architecture::kQwen2, Dtype::kF32},
                                           Case{Architecture::kQwen2, Dtype::kBF16}, Case{Architecture::kQwen3, Dtype::kF32},
                                           Case{Architecture::kQwen3, Dtype::kF16}),
                         [](const auto& info) {
                           return std::string(model::ArchitectureName(info.param.architecture)) + "_" +
                                  std::string(kernels::DtypeName(info.param.dtype));
                         });

TEST(FamilyFormatsTest, ShardedDirectoryEqualsTheSingleFile) {
  const ModelConfig config = testing::TinyFamilyConfig(Architecture::kQwen3);
  const Weights weights = testing::TinyFamilyWeights(config, 3);
  niels::testing::TempDir dir("niels_family_shards_");
  const testing::HfModelFiles files = testing::MakeHfModel(config, weights);
  files.Write(dir / "single");
  files.Write(dir / "sharded", 3);
  ASSERT_TRUE(std::filesystem::exists(dir / "sharded" / "model-00003-of-00003.safetensors"));
  ASSERT_FALSE(std::filesystem::exists(dir / "sharded" / "model.safetensors"));
  const auto single = Load(dir / "single");
  const auto sharded = Load(dir / "sharded");
  ASSERT_TRUE(single && sharded);
  EXPECT_EQ(sharded->weights_file->files().size(), 3u);
  const std::vector<int32_t> prompt = Prompt(config, 5);
  EXPECT_TRUE(single->transformer->Forward(prompt) == sharded->transformer->Forward(prompt));
  EXPECT_GT(MappedWeightBytes(*sharded), sharded->transformer->weights().bytes() * 9 / 10);
  EXPECT_TRUE(sharded->weights_file->CheckUnchanged().ok());
}

TEST(FamilyFormatsTest, DtypeOptionConvertsAndMaxContextCaps) {
  const ModelConfig config = testing::TinyFamilyConfig(Architecture::kLlama);
  const Weights weights = testing::TinyFamilyWeights(config, 5);
  niels::testing::TempDir dir("niels_family_options_");
  testing::MakeGgufModel(config, weights, Dtype::kF32).Write(dir / "m.gguf");
  LoadOptions options;
  options.dtype = Dtype::kBF16;
  options.max_context = 32;
  const auto model = Load(dir / "m.gguf", options);
  ASSERT_TRUE(model);
  EXPECT_EQ(model->transformer->weights().dtype(), Dtype::kBF16);
  EXPECT_EQ(model->config.context, 32);
  EXPECT_EQ(model->model_context, 64);
  LoadOptions uncapped;
  uncapped.max_context = 0;
  EXPECT_EQ(Load(dir / "m.gguf", uncapped)->config.context, 64);
  // bf16 at load = the bf16 file.
  testing::MakeGgufModel(config, weights, Dtype::kBF16).Write(dir / "b.gguf");
  std::vector<int32_t> prompt = Prompt(config, 1);
  prompt.resize(32);
  EXPECT_TRUE(model->transformer->Forward(prompt) == Load(dir / "b.gguf")->transformer->Forward(prompt));
}

// `w` with every matrix whose rows are whole blocks of `dtype` quantized to it (ggml's reference
// quantizer, family_model.h's TensorBytes), as a GGUF of that type holds them.
Weights Quantized(const Weights& w, Dtype dtype) {
  Weights out = w;
  out.ForEachMutable([&](const std::string&, model::Tensor& t) {
    if (t.shape.size() != 2 || t.shape[1] % kernels::DtypeBlockElements(dtype) != 0) return;
    auto bytes = std::make_shared<std::string>(testing::TensorBytes(t, dtype));
    out.backing.push_back(bytes);
    t = model::Tensor{bytes->data(), dtype, t.shape};
  });
  if (out.tok_emb.data != w.tok_emb.data && w.lm_head.data == w.tok_emb.data) out.lm_head = out.tok_emb;
  return out;
}

class QuantizedGgufTest : public ::testing::TestWithParam<Case> {};

// A GGUF of block-type matrices (Q8_0, Q4_0, and the K types at a width of whole 256-blocks) keeps
// them in their type, used from the mapping, and computes what the same quantized weights built in
// memory compute.
TEST_P(QuantizedGgufTest, KeepsTheBlockTypeAndEqualsTheModelInMemory) {
  const Architecture architecture = GetParam().architecture;
  const Dtype dtype = GetParam().dtype;  // not a structured binding: the lambda below uses it
  ModelConfig config = testing::TinyFamilyConfig(architecture);
  if (kernels::DtypeBlockElements(dtype) == 256) {  // every matrix's rows whole 256-blocks
    config.width = 256;
    config.head_size = 64;
    config.d_ff = 256;
  }
  const Weights weights = testing::TinyFamilyWeights(config, 9);
  niels::testing::TempDir dir("niels_family_quant_");
  testing::MakeGgufModel(config, weights, dtype).Write(dir / "q.gguf");
  const auto gguf = Load(dir / "q.gguf");
  ASSERT_TRUE(gguf);
  int quantized = 0;
  gguf->transformer->weights().ForEach([&](const std::string& name, const model::Tensor& t) {
    if (t.shape.size() == 2) {
      EXPECT_EQ(t.dtype, dtype) << name;
      ++quantized;
    }
  });
  EXPECT_GE(quantized, 7 * config.layers);
  EXPECT_GT(MappedWeightBytes(*gguf), gguf->transformer->weights().bytes() * 8 / 10);

  const model::Transformer reference(config, Quantized(weights, dtype));
  const std::vector<int32_t> prompt = Prompt(config, gguf->stop_ids.front());
  const std::vector<float> expected = reference.Forward(prompt);
  const std::vector<float> got = gguf->transformer->Forward(prompt);
  ASSERT_EQ(got.size(), expected.size());
  EXPECT_TRUE(got == expected) << "GGUF vs the quantized weights in memory";
  // Not what the f32 weights give: the quantization is real.
  EXPECT_FALSE(got == model::Transformer(config, weights).Forward(prompt));
}

INSTANTIATE_TEST_SUITE_P(Members, QuantizedGgufTest,
                         ::testing::Values(Case{Architecture::kLlama, Dtype::kQ8_0}, Case{Architecture::kQwen2, Dtype::kQ4_0},
                                           Case{Architecture::kQwen3, Dtype::kQ8_0}, Case{Architecture::kLlama, Dtype::kQ4_K},
                                           Case{Architecture::kQwen2, Dtype::kQ6_K}, Case{Architecture::kQwen3, Dtype::kQ5_K}),
                         [](const auto& info) {
                           return std::string(model::ArchitectureName(info.param.architecture)) + "_" +
                                  std::string(kernels::DtypeName(info.param.dtype));
                         });

}  // namespace
}  // namespace niels::daemon::loaders
