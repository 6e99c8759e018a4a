// The libtorch model (tools/torch: training's differentiable forward) against nielsd's inference
// forward on its own kernels: the same logits on the same weights, and gradients that reach every
// weight. This is the torch reference suite (torch_reference_test, built with NIELSD_WITH_TORCH).

#include <cstdint>
#include <random>
#include <vector>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "daemon/model/transformer.h"
#include "daemon/model/weights.h"
#include "tools/torch/torch_weights.h"

namespace niels::torch_model {
namespace {

using daemon::model::ModelConfig;
using daemon::model::Transformer;

ModelConfig TinyConfig() {
  ModelConfig config;
  config.vocab_size = 50;
  config.context = 32;
  config.width = 16;
  config.layers = 2;
  config.heads = 2;
  config.d_ff = 24;
  config.rope_theta = 10000.0;
  return config;
}

// std 0.2 (not 0.02) so that attention is far from uniform and positions matter.
Weights TinyWeights() { return daemon::model::RandomWeights(TinyConfig(), 7, 0.2); }

std::vector<int32_t> RandomTokens(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> id(0, 49);
  std::vector<int32_t> tokens(n);
  for (auto& t : tokens) t = id(rng);
  return tokens;
}

// max |a - b| between a torch tensor and row-major logits of the same number of elements.
float MaxAbsDiff(const torch::Tensor& a, const std::vector<float>& b) {
  EXPECT_EQ(a.numel(), static_cast<int64_t>(b.size()));
  return (a.reshape({-1}) - AsTensor(b, {static_cast<int64_t>(b.size())})).abs().max().item<float>();
}

TEST(ForwardTrainTest, EqualsForwardAndGradientsReachEveryWeight) {
  const ModelConfig config = TinyConfig();
  const Transformer model(config, TinyWeights());
  TorchWeights trainable = ToTorch(TinyWeights());
  for (torch::Tensor* t : trainable.All()) *t = t->detach().clone().requires_grad_(true);
  const auto a = RandomTokens(12, 6);
  const auto b = RandomTokens(12, 7);
  std::vector<int64_t> ids(a.begin(), a.end());
  ids.insert(ids.end(), b.begin(), b.end());
  const torch::Tensor tokens = at::tensor(ids, at::kLong).view({2, 12});  // [B=2, n=12]

  const torch::Tensor logits = ForwardTrain(config, trainable, tokens);  // [2, 12, V]
  ASSERT_EQ(logits.sizes(), (at::IntArrayRef{2, 12, config.vocab_size}));
  EXPECT_TRUE(logits.requires_grad());
  EXPECT_LT(MaxAbsDiff(logits[0].detach(), model.Forward(a)), 1e-5);
  EXPECT_LT(MaxAbsDiff(logits[1].detach(), model.Forward(b)), 1e-5);

  const torch::Tensor targets = at::roll(tokens, -1, 1);  // next-token targets (wrapping is fine here)
  at::cross_entropy_loss(logits.view({-1, config.vocab_size}), targets.reshape({-1})).backward();
  for (torch::Tensor* t : trainable.All()) {
    ASSERT_TRUE(t->grad().defined());
    EXPECT_GT(t->grad().abs().sum().item<float>(), 0.0f) << "shape " << t->sizes();
  }
}

// FromTorch(ToTorch(w)) gives back the same values (the conversions training uses to save a model).
TEST(ForwardTrainTest, TorchRoundTripKeepsEveryValue) {
  const Weights original = TinyWeights();
  const Weights back = FromTorch(ToTorch(original));
  std::vector<std::pair<std::string, std::vector<float>>> a, b;
  original.ForEach([&](const std::string& name, const Tensor& t) { a.emplace_back(name, t.ToFloats()); });
  back.ForEach([&](const std::string& name, const Tensor& t) { b.emplace_back(name, t.ToFloats()); });
  EXPECT_EQ(a, b);
}

}  // namespace
}  // namespace niels::torch_model
