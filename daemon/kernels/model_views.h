#pragma once
// What the model's kernels (DecodeStep, PrefillStep) see of a model and of a sequence's KV cache:
// its dimensions, read-only views of its weights and views of the cache storage. No libtorch, no
// ownership: daemon/model/transformer.cc builds the views from the Weights and KvCaches it owns.
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

// A sequence's KV cache storage: per layer, keys (after RoPE) and values [H, capacity, D] of `dtype`
// (f32 or f16). Positions 0..length-1 are valid; a step writes the positions it processes.
struct KvView {
  std::vector<void*> keys;    // L entries
  std::vector<void*> values;  // L entries
  int64_t capacity = 0;
  Dtype dtype = Dtype::kF32;

  // Rows [capacity, D] of head h of `layer`.
  Matrix Keys(int64_t layer, int64_t head, int64_t head_dim) const { return Head(keys[layer], head, head_dim); }
  Matrix Values(int64_t layer, int64_t head, int64_t head_dim) const { return Head(values[layer], head, head_dim); }

 private:
  Matrix Head(void* storage, int64_t head, int64_t head_dim) const {
    return {static_cast<const unsigned char*>(storage) + head * capacity * head_dim * DtypeSize(dtype), dtype};
  }
};

}  // namespace niels::daemon::kernels
