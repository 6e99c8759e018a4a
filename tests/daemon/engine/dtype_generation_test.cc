// Greedy generation (the engine's Generate loop) with 16-bit weights, on model directories loaded
// the way nielsd loads them (LoadModelDir, --dtype).
//
// Documented tolerances (README.md, "Weight dtypes"):
// - f16 and bf16 weights: the same tokens and logprobs as the f32 model of the same (16-bit-
//   representable) weights, bitwise -- tolerance 0: the kernels widen each 16-bit weight exactly and
//   sum in the same order.
// - cached = uncached = full forward, bitwise, in every combination.

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "daemon/engine/generator.h"
#include "daemon/loaders/model_loader.h"
#include "daemon/loaders/niels_dir.h"
#include "daemon/formats/safetensors.h"
#include "daemon/model/weights.h"
#include "tests/support/test_model.h"

namespace niels::daemon::engine {
namespace {

using kernels::Dtype;
using loaders::Model;


struct Trace {
  std::vector<int32_t> ids;
  std::vector<float> logprobs;  // of each sampled id
  std::vector<std::vector<TokenAlternative>> top;
};

Trace Greedy(const Model& model, bool use_kv_cache, int new_tokens) {
  Sequence sequence(model.config);
  GenerateOptions options;
  options.sampling.temperature = 0.0f;
  options.max_new_tokens = new_tokens;
  options.use_kv_cache = use_kv_cache;
  options.want_logprobs = true;
  options.top_logprobs = 5;
  Trace trace;
  options.on_token = [&](const StepEvent& e) {
    trace.logprobs.push_back(*e.logprob);
    trace.top.push_back(e.top);
  };
  const std::vector<int32_t> prompt = {5, 17, 3, 99, 42, 7, 250, 11, 64, 2, 33};
  trace.ids = Generate(*model.transformer, sequence, prompt, options).new_tokens;
  return trace;
}

void ExpectSame(const Trace& a, const Trace& b, const std::string& what) {
  EXPECT_EQ(a.ids, b.ids) << what;
  EXPECT_EQ(a.logprobs, b.logprobs) << what;
  ASSERT_EQ(a.top.size(), b.top.size()) << what;
  for (size_t i = 0; i < a.top.size(); ++i) {
    ASSERT_EQ(a.top[i].size(), b.top[i].size()) << what;
    for (size_t k = 0; k < a.top[i].size(); ++k) {
      EXPECT_EQ(a.top[i][k].id, b.top[i][k].id) << what << " step " << i;
      EXPECT_EQ(a.top[i][k].logprob, b.top[i][k].logprob) << what << " step " << i;
    }
  }
}

class DtypeGenerationTest : public ::testing::TestWithParam<Dtype> {
 protected:
  void SetUp() override {
    config_ = niels::testing::TinyConfig();
    niels::testing::WriteModelDir(dir_ / "narrow", config_, 3);  // tokenizer and config.json
    niels::testing::WriteModelDir(dir_ / "wide", config_, 3);
    config_.vocab_size = niels::testing::TinyTokenizerVocabSize();
    // std 0.1: logits far from flat, so greedy choices are not decided by rounding noise.
    auto narrow = model::ConvertWeights(model::RandomWeights(config_, 21, 0.1), GetParam());
    ASSERT_TRUE(narrow.ok()) << narrow.status().ToString();
    ASSERT_TRUE(loaders::SaveNielsWeights(*narrow, dir_ / "narrow/model.safetensors").ok());  // every tensor 16-bit
    // The f32 model of the same weights: the 16-bit file read as f32 (every value widened exactly).
    auto widened = loaders::LoadNielsWeights(dir_ / "narrow/model.safetensors", config_, Dtype::kF32);
    ASSERT_TRUE(widened.ok()) << widened.status().ToString();
    ASSERT_TRUE(loaders::SaveNielsWeights(*widened, dir_ / "wide/model.safetensors", Dtype::kF32).ok());
  }

  std::unique_ptr<Model> Load(const std::string& name, loaders::LoadOptions options = {}) {
    auto loaded = loaders::LoadModel(dir_ / name, nullptr, options);
    EXPECT_TRUE(loaded.ok()) << loaded.status().ToString();
    return loaded.ok() ? std::move(loaded).value() : nullptr;
  }

  model::ModelConfig config_;
  niels::testing::TempDir dir_{"niels_dtype_generation_test_"};
};

TEST_P(DtypeGenerationTest, SameTokensAndLogprobsAsTheF32ModelOfTheSameWeights) {
  const auto narrow = Load("narrow");
  const auto wide = Load("wide");
  ASSERT_TRUE(narrow && wide);
  const model::Weights& weights = narrow->transformer->weights();
  ASSERT_EQ(weights.dtype(), GetParam()) << "the file's dtype is kept";
  ASSERT_EQ(wide->transformer->weights().dtype(), Dtype::kF32);
  // Kept 16-bit and used straight from the file: half the bytes, none copied but norms and biases.
  EXPECT_LT(2 * weights.bytes(), wide->transformer->weights().bytes() + 64 * 1024);
  const formats::SafetensorsFile& file = *narrow->weights_file;
  EXPECT_GT(model::BytesWithin(weights, file.mapping_data(), file.mapping_size()), weights.bytes() * 9 / 10);

  const Trace cached = Greedy(*narrow, /*use_kv_cache=*/true, 24);
  ASSERT_EQ(cached.ids.size(), 24u);
  ExpectSame(cached, Greedy(*wide, true, 24), "16-bit vs f32 weights, cached");
  ExpectSame(cached, Greedy(*narrow, /*use_kv_cache=*/false, 24), "cached vs uncached");
  ExpectSame(cached, Greedy(*wide, false, 24), "16-bit cached vs f32 uncached");
}

// nielsd --dtype: the f32 file converted at load equals the 16-bit file (its values are
// 16-bit-representable), and the 16-bit file widened at load equals the f32 one.
TEST_P(DtypeGenerationTest, ConvertingAtLoadGivesTheSameModel) {
  loaders::LoadOptions to_narrow;
  to_narrow.dtype = GetParam();
  const auto converted = Load("wide", to_narrow);
  loaders::LoadOptions to_wide;
  to_wide.dtype = Dtype::kF32;
  const auto widened = Load("narrow", to_wide);
  const auto narrow = Load("narrow");
  ASSERT_TRUE(converted && widened && narrow);
  EXPECT_EQ(converted->transformer->weights().dtype(), GetParam());
  EXPECT_EQ(widened->transformer->weights().dtype(), Dtype::kF32);
  const Trace expected = Greedy(*narrow, true, 16);
  ExpectSame(Greedy(*converted, true, 16), expected, "converted to 16 bits at load");
  ExpectSame(Greedy(*widened, true, 16), expected, "widened to f32 at load");
}

INSTANTIATE_TEST_SUITE_P(F16AndBF16, DtypeGenerationTest, ::testing::Values(Dtype::kF16, Dtype::kBF16),
                         [](const ::testing::TestParamInfo<Dtype>& info) {
                           return std::string(kernels::DtypeName(info.param));
                         });

}  // namespace
}  // namespace niels::daemon::engine
