// RandomWeights (declared in weights.h): deterministic random niels_gpt weights for tests and benchmarks.

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/InferenceMode.h>

#include "daemon/model/weights.h"

namespace niels::daemon::model {
namespace {

// Draws tensors in a fixed order from one seeded CPU generator.
class Drawer {
 public:
  Drawer(uint64_t seed, double std) : generator_(at::make_generator<at::CPUGeneratorImpl>(seed)), std_(std) {}

  torch::Tensor Matrix(int64_t rows, int64_t cols) { return Normal({rows, cols}, 0.0, std_); }
  torch::Tensor Bias(int64_t n) { return Normal({n}, 0.0, std_); }
  torch::Tensor Norm(int64_t n) { return Normal({n}, 1.0, 0.1); }

 private:
  torch::Tensor Normal(at::IntArrayRef shape, double mean, double std) {
    return at::normal(mean, std, shape, generator_, at::TensorOptions().dtype(at::kFloat));
  }

  at::Generator generator_;
  double std_;
};

}  // namespace

Weights RandomWeights(const ModelConfig& config, uint64_t seed, double std) {
  // Plain (non-inference) tensors, so that training may copy them and set requires_grad.
  const int64_t c = config.width;
  const int64_t d_ff = config.d_ff;
  Drawer draw(seed, std);
  Weights weights;
  weights.tok_emb = draw.Matrix(config.vocab_size, c);  // [V, C]
  for (int64_t i = 0; i < config.layers; ++i) {
    BlockWeights block;
    block.ln1 = draw.Norm(c);                 // [C]
    block.qkv = draw.Matrix(3 * c, c);        // [3C, C]
    block.proj = draw.Matrix(c, c);           // [C, C]
    block.ln2 = draw.Norm(c);                 // [C]
    block.fc_a_w = draw.Matrix(d_ff, c);      // [d_ff, C]
    block.fc_a_b = draw.Bias(d_ff);           // [d_ff]
    block.fc_g_w = draw.Matrix(d_ff, c);      // [d_ff, C]
    block.fc_g_b = draw.Bias(d_ff);           // [d_ff]
    block.fc_out_w = draw.Matrix(c, d_ff);    // [C, d_ff]
    block.fc_out_b = draw.Bias(c);            // [C]
    weights.blocks.push_back(std::move(block));
  }
  weights.ln_f = draw.Norm(c);  // [C]
  return weights;
}

}  // namespace niels::daemon::model
