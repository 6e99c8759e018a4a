#pragma once
// What the model's kernels (ForwardStep) see of a model: its dimensions and read-only views of its
// weights. No libtorch, no ownership: daemon/model/transformer.cc builds the views from the Weights
// it owns.
// Shapes: C width, H query heads, KV key/value heads, D head size, F = d_ff, V vocab, T context.

#include <cstdint>
#include <vector>

#include "daemon/kernels/dtype.h"

namespace niels::daemon::kernels {

// The model dimensions and settings the kernels need (a subset of model::ModelConfig, which
// documents each).
struct ModelShape {
  int64_t layers;    // L
  int64_t width;     // C
  int64_t heads;     // H: query heads
  int64_t kv_heads;  // KV: key/value heads; H % KV == 0
  int64_t head_dim;  // D (even)
  int64_t d_ff;      // F
  int64_t vocab;     // V
  int64_t context;   // T
  double rms_norm_eps;
  bool rope_halves;          // RoPE rotates (x[i], x[i + D/2]) instead of (x[2i], x[2i+1])
  bool qk_rows_interleaved;  // q and k come out of the projection in llama.cpp's llama order
  int64_t q_width() const { return heads * head_dim; }      // H D
  int64_t kv_width() const { return kv_heads * head_dim; }  // KV D
  int64_t qkv_width() const { return q_width() + 2 * kv_width(); }
};

// One block's weights (daemon/model/weights.h names them): the matrices in the model's dtype, norms
// and biases as floats; an absent optional one is null (a Matrix with data == nullptr).
struct BlockWeightViews {
  const float* attn_norm;    // [C]
  Matrix wqkv;               // [H D + 2 KV D, C], or null when q, k and v are apart:
  Matrix wq, wk, wv;         // [H D, C], [KV D, C], [KV D, C]
  const float* bq;           // [H D] or null
  const float* bk;           // [KV D] or null
  const float* bv;           // [KV D] or null
  const float* q_norm;       // [D] or null
  const float* k_norm;       // [D] or null
  Matrix wo;                 // [C, H D]
  const float* ffn_norm;     // [C]
  Matrix w_gate, w_up;       // [F, C]
  const float* b_gate;       // [F] or null
  const float* b_up;         // [F] or null
  Matrix w_down;             // [C, F]
  const float* b_down;       // [C] or null
};

struct WeightViews {
  Matrix tok_emb;                        // [V, C]
  std::vector<BlockWeightViews> blocks;  // L entries
  const float* final_norm;               // [C]
  Matrix lm_head;                        // [V, C] (tok_emb when tied)
  const float* rope;  // [T, D/2, 2]: (cos, sin) of position p's angle for pair i (float64-computed)
};

}  // namespace niels::daemon::kernels
