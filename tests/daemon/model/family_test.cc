// The Llama family on one forward pass: each member's flags (grouped-query attention, RoPE over
// halves, llama3 frequency scaling, q/k/v biases, per-head q/k RMSNorm, a head width apart from
// C / H, an untied output projection, llama.cpp's interleaved q/k rows) on a tiny model of its
// shape. For every member, every kernel implementation this CPU runs and every weight dtype, the
// logits agree with the naive scalar reference, and prefill, decode, batched decode and the
// uncached forward are bitwise equal to each other.

#include <cmath>
#include <ostream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "daemon/kernels/simd_kernels.h"
#include "daemon/model/kv_pool.h"
#include "daemon/model/transformer.h"
#include "tests/daemon/model/model_test_util.h"
#include "tests/daemon/model/scalar_reference.h"

namespace niels::daemon::model {
namespace {

struct Member {
  std::string name;
  ModelConfig config;
  bool fused_qkv = false;
};

void PrintTo(const Member& m, std::ostream* os) { *os << m.name; }

ModelConfig Base() {
  ModelConfig c;
  c.vocab_size = 64;
  c.context = 40;
  c.width = 32;
  c.layers = 2;
  c.heads = 4;
  c.d_ff = 48;
  c.rope_theta = 10000.0;
  c.rms_norm_eps = 1e-6;
  return c;
}

// Llama 3.x: GQA (4 query heads on 2 key/value heads), halves, llama3 frequency scaling chosen so
// that the tiny head (D = 8) has a kept, a blended and two divided frequencies, no biases.
ModelConfig Llama() {
  ModelConfig c = Base();
  c.architecture = Architecture::kLlama;
  c.kv_heads = 2;
  c.rope_pairs = RopePairs::kHalves;
  c.rope_theta = 500000.0;
  c.rope_scaling = RopeScaling{.type = RopeScaling::Type::kLlama3,
                               .factor = 8.0,
                               .low_freq_factor = 1.0,
                               .high_freq_factor = 4.0,
                               .original_context = 16};
  c.mlp_bias = false;
  c.tied_embeddings = false;
  return c;
}

// Qwen2: q/k/v biases, GQA, tied.
ModelConfig Qwen2() {
  ModelConfig c = Base();
  c.architecture = Architecture::kQwen2;
  c.kv_heads = 1;
  c.rope_pairs = RopePairs::kHalves;
  c.attention_bias = true;
  c.mlp_bias = false;
  return c;
}

// Qwen3: per-head q/k RMSNorm and a head width apart from C / H (H D = 64 on C = 32), untied.
ModelConfig Qwen3() {
  ModelConfig c = Base();
  c.architecture = Architecture::kQwen3;
  c.kv_heads = 2;
  c.head_size = 16;
  c.rope_pairs = RopePairs::kHalves;
  c.rope_theta = 1000000.0;
  c.qk_norm = true;
  c.mlp_bias = false;
  c.tied_embeddings = false;
  return c;
}

std::vector<Member> Members() {
  ModelConfig niels = Base();
  niels.rms_norm_eps = 1e-5;
  return {{"niels_gpt", niels, /*fused_qkv=*/true},
          {"llama", Llama()},
          {"qwen2", Qwen2()},
          {"qwen3", Qwen3()},
          {"qwen3_fused", Qwen3(), /*fused_qkv=*/true}};
}

// std 0.2 (not 0.02): attention far from uniform, so positions and heads matter.
Weights WeightsOf(const Member& m, uint64_t seed = 11) { return RandomWeights(m.config, seed, 0.2, m.fused_qkv); }

class FamilyTest : public ::testing::TestWithParam<Member> {};

TEST_P(FamilyTest, ConfigIsValid) { EXPECT_TRUE(ValidateModelConfig(GetParam().config, "test").ok()); }

TEST_P(FamilyTest, EveryIsaAndDtypeAgreesWithTheScalarReferenceAndAllPathsAreBitwiseEqual) {
  const Member& m = GetParam();
  const int64_t V = m.config.vocab_size;
  const auto tokens = RandomTokens(m.config.context, 5, V);
  for (kernels::simd::Isa isa :
       {kernels::simd::Isa::kAvx512, kernels::simd::Isa::kAvx2, kernels::simd::Isa::kPortable}) {
    if (!kernels::simd::ForceIsaForTesting(isa)) continue;
    for (kernels::Dtype dtype : {kernels::Dtype::kF32, kernels::Dtype::kF16, kernels::Dtype::kBF16}) {
      for (kernels::Dtype kv : {kernels::Dtype::kF32, kernels::Dtype::kF16}) {
        SCOPED_TRACE(std::string(kernels::simd::Name()) + " weights " + std::string(kernels::DtypeName(dtype)) +
                     " KV " + std::string(kernels::DtypeName(kv)));
        auto weights = ConvertWeights(WeightsOf(m), dtype);
        ASSERT_TRUE(weights.ok()) << weights.status().ToString();
        const Transformer model(m.config, *weights, nullptr, kv);
        const std::vector<float> full = model.Forward(tokens);
        const ScalarReference reference(m.config, model.weights(), kv);
        const std::vector<float> expected = reference.Forward(tokens);
        EXPECT_LT(MaxAbsDiff(full, expected), kv == kernels::Dtype::kF32 ? 1e-4 : 3e-3);
        EXPECT_GT(StdDev(expected), 0.1);
        KvCache cache(m.config, kv);
        const std::span<const int32_t> all(tokens);
        EXPECT_EQ(model.Prefill(all.first(7), cache, true), SliceRows(full, V, 0, 7));
        EXPECT_EQ(model.Prefill(all.subspan(7, 12), cache, true), SliceRows(full, V, 7, 12));
        EXPECT_EQ(DecodeEach(model, all.subspan(19), cache), SliceRows(full, V, 19, m.config.context - 19));
      }
    }
  }
  kernels::simd::ForceIsaForTesting(kernels::simd::Detected());
}

TEST_P(FamilyTest, BatchedDecodeEqualsEachSequenceAlone) {
  const Member& m = GetParam();
  const int64_t V = m.config.vocab_size;
  const Transformer model(m.config, WeightsOf(m));
  const std::vector<int64_t> prompt_lengths = {2, 11, 23};
  std::vector<KvCache> batched, alone;
  for (size_t s = 0; s < prompt_lengths.size(); ++s) {
    const auto prompt = RandomTokens(prompt_lengths[s], 30 + s, V);
    batched.emplace_back(m.config);
    alone.emplace_back(m.config);
    model.Prefill(prompt, batched.back());
    model.Prefill(prompt, alone.back());
  }
  std::vector<KvCache*> caches = {&batched[0], &batched[1], &batched[2]};
  for (int step = 0; step < 5; ++step) {
    const auto next = RandomTokens(3, 200 + step, V);
    const std::vector<float> logits = model.Decode(next, caches);
    for (int64_t s = 0; s < 3; ++s) {
      KvCache* own[] = {&alone[s]};
      EXPECT_EQ(SliceRows(logits, V, s, 1), model.Decode(std::span(&next[s], 1), own)) << "sequence " << s;
    }
  }
}

// The KV cache holds KV heads of D per layer and position, not H: GQA's memory saving is real.
TEST_P(FamilyTest, KvCacheHoldsKeyValueHeadsOnly) {
  const Member& m = GetParam();
  const Transformer model(m.config, WeightsOf(m));
  KvCache cache(m.config);
  model.Prefill(RandomTokens(KvPool::kBlockTokens, 3, m.config.vocab_size), cache);
  const int64_t per_token = 2 * m.config.layers * m.config.kv_width() * static_cast<int64_t>(sizeof(float));
  EXPECT_EQ(cache.bytes(), per_token * KvPool::kBlockTokens);
}

INSTANTIATE_TEST_SUITE_P(Members, FamilyTest, ::testing::ValuesIn(Members()),
                         [](const ::testing::TestParamInfo<Member>& info) { return info.param.name; });

// Each flag changes the logits: a model of the family that ignored one would fail the reference.
TEST(FamilyFlagsTest, EachFlagChangesTheResult) {
  const auto tokens = RandomTokens(20, 9, 64);
  const auto logits = [&](const ModelConfig& c, const Weights& w) { return Transformer(c, w).Forward(tokens); };
  {
    const ModelConfig halves = Llama();
    ModelConfig adjacent = halves;
    adjacent.rope_pairs = RopePairs::kAdjacent;
    const Weights w = RandomWeights(halves, 1, 0.2, false);
    EXPECT_GT(MaxAbsDiff(logits(halves, w), logits(adjacent, w)), 1e-3) << "RoPE pairs";
  }
  {
    const ModelConfig scaled = Llama();
    ModelConfig plain = scaled;
    plain.rope_scaling = {};
    Weights w = RandomWeights(scaled, 1, 0.2, false);
    const auto with = logits(scaled, w);
    w.rope_freqs = {};
    EXPECT_GT(MaxAbsDiff(with, logits(plain, w)), 1e-3) << "llama3 frequency scaling";
  }
  {
    const ModelConfig normed = Qwen3();
    const Weights w = RandomWeights(normed, 1, 0.2, false);
    Weights unit = w;  // q_norm and k_norm weights replaced by 1: RMSNorm still changes the scale
    std::vector<float> ones(normed.head_dim(), 1.0f);
    for (BlockWeights& b : unit.blocks) {
      b.q_norm = OwnedTensor(ones, {normed.head_dim()}, unit.backing);
      b.k_norm = b.q_norm;
    }
    EXPECT_GT(MaxAbsDiff(logits(normed, w), logits(normed, unit)), 1e-3) << "q/k norm weights";
  }
}

// llama.cpp stores a llama model's q and k rows with each head's halves interleaved (its
// converter permutes them for the adjacent-pair RoPE it runs). The same weights so permuted, with
// qk_rows_interleaved, give bitwise the logits of the Hugging Face order: the forward pass puts
// the rows back before anything that depends on the order.
TEST(FamilyLayoutTest, InterleavedQkRowsGiveBitwiseTheLogitsOfTheHalvesOrder) {
  const ModelConfig hf = Llama();
  ModelConfig gguf = hf;
  gguf.qk_rows_interleaved = true;
  const Weights w = RandomWeights(hf, 4, 0.2, /*fused_qkv=*/false);
  const int64_t D = hf.head_dim(), C = hf.width;
  Weights permuted = w;
  const auto interleave = [&](const Tensor& t, int64_t heads) {
    const std::vector<float> rows = t.ToFloats();
    std::vector<float> out(rows.size());
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t i = 0; i < D / 2; ++i) {
        std::copy_n(&rows[(h * D + i) * C], C, &out[(h * D + 2 * i) * C]);
        std::copy_n(&rows[(h * D + D / 2 + i) * C], C, &out[(h * D + 2 * i + 1) * C]);
      }
    }
    return OwnedTensor(std::move(out), t.shape, permuted.backing);
  };
  for (BlockWeights& b : permuted.blocks) {
    b.wq = interleave(b.wq, hf.heads);
    b.wk = interleave(b.wk, hf.kv_head_count());
  }
  const auto tokens = RandomTokens(hf.context, 8, hf.vocab_size);
  const Transformer reference(hf, w), interleaved(gguf, permuted);
  const std::vector<float> expected = reference.Forward(tokens);
  EXPECT_EQ(interleaved.Forward(tokens), expected);
  KvCache cache(gguf);
  const std::span<const int32_t> all(tokens);
  EXPECT_EQ(interleaved.Prefill(all.first(13), cache, true), SliceRows(expected, hf.vocab_size, 0, 13));
  EXPECT_EQ(DecodeEach(interleaved, all.subspan(13), cache),
            SliceRows(expected, hf.vocab_size, 13, hf.context - 13));
  // And the scalar reference, which un-interleaves on its own, agrees.
  EXPECT_LT(MaxAbsDiff(ScalarReference(gguf, permuted).Forward(tokens), expected), 1e-4);
  // Without the flag the permuted rows are simply different weights.
  EXPECT_GT(MaxAbsDiff(Transformer(hf, permuted).Forward(tokens), expected), 1e-3);
}

// Hugging Face's llama3 rope_scaling formula, computed here in double from the published
// definition (transformers' _compute_llama3_parameters), against the factors the model uses.
TEST(FamilyLayoutTest, Llama3RopeFactorsFollowTheHuggingFaceFormula) {
  ModelConfig c = Llama();
  c.head_size = 128;
  c.width = 512;
  c.rope_scaling.original_context = 8192;
  const std::vector<float> factors = Llama3RopeFactors(c);
  ASSERT_EQ(factors.size(), 64u);
  const double low_wavelen = 8192 / 1.0, high_wavelen = 8192 / 4.0;
  int kept = 0, divided = 0, blended = 0;
  for (int i = 0; i < 64; ++i) {
    const double inv_freq = std::pow(c.rope_theta, -2.0 * i / 128);
    const double wavelen = 2 * M_PI / inv_freq;
    double scaled;
    if (wavelen < high_wavelen) {
      scaled = inv_freq;
      ++kept;
    } else if (wavelen > low_wavelen) {
      scaled = inv_freq / 8.0;
      ++divided;
    } else {
      const double smooth = (8192 / wavelen - 1.0) / (4.0 - 1.0);
      scaled = (1 - smooth) * inv_freq / 8.0 + smooth * inv_freq;
      ++blended;
    }
    EXPECT_NEAR(inv_freq / factors[i], scaled, 1e-6 * scaled) << i;
  }
  EXPECT_GT(kept, 0);
  EXPECT_GT(divided, 0);
  EXPECT_GT(blended, 0);
}

}  // namespace
}  // namespace niels::daemon::model
