#pragma once
// What the model's kernels (ForwardStep) see of a model: its dimensions and read-only views of its
// weights. No libtorch, no ownership: daemon/model/transformer.cc builds the views from the Weights
// it owns.
// Shapes: C width, H heads, D = C/H, F = d_ff, V vocab, T context.

#include <cstdint>
#include <vector>

#include "daemon/kernels/dtype.h"

namespace niels::daemon::kernels {

// The model dimensions the kernels need (a torch-free subset of model::ModelConfig).
struct ModelShape {
  int64_t layers;   // L
  int64_t width;    // C
  int64_t heads;    // H; C % H == 0, C/H even
  int64_t d_ff;     // F
  int64_t vocab;    // V
  int64_t context;  // T
  double rms_norm_eps;  // RMSNorm's epsilon (model::ModelConfig::rms_norm_eps)
  int64_t head_dim() const { return width / heads; }
};

// One block's weights (state_dict names in daemon/model/weights.h): the matrices in the model's
// dtype, norms and biases as floats.
struct BlockWeightViews {
  const float* ln1;   // [C]
  Matrix qkv;         // [3C, C]
  Matrix proj;        // [C, C]
  const float* ln2;   // [C]
  Matrix fc_a_w;      // [F, C]
  const float* fc_a_b;  // [F]
  Matrix fc_g_w;      // [F, C]
  const float* fc_g_b;  // [F]
  Matrix fc_out_w;    // [C, F]
  const float* fc_out_b;  // [C]
};

struct WeightViews {
  Matrix tok_emb;                        // [V, C], also the tied lm_head
  std::vector<BlockWeightViews> blocks;  // L entries
  const float* ln_f;                     // [C]
  const float* rope;  // [T, D/2, 2]: (cos, sin) of position p's angle for pair i (float64-computed)
};

}  // namespace niels::daemon::kernels
