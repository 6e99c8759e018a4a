#pragma once
// DecodeStep: one cached decode step for a batch of B sequences -- the hot path of generation --
// written as plain loops over float rows plus MatVec, with the same math as the libtorch stages
// (transformer_stages.h, docs/ARCHITECTURE.md "Model math").
//
// Why not the libtorch stages: a step reads every weight once (86 MB for the `personal` preset),
// which takes ~1.4 ms on 2 cores; the ~300 small libtorch ops of a step cost another ~1 ms of
// dispatch and allocation, and attention through BLAS gemm repacks the whole KV cache per layer.
// Here the only heavy work is the weight and KV reads, split across a WorkerPool.
//
// No libtorch: weights, RoPE table and caches come in as float pointers (Transformer::Decode
// extracts them). Shapes: B batch, C width, H heads, D = C/H, F = d_ff, V vocab, P = position.

#include <cstdint>
#include <span>
#include <vector>

#include "daemon/model/config.h"
#include "daemon/model/worker_pool.h"

namespace niels::daemon::model {

// Row-major float views of one block's weights (state_dict names in weights.h).
struct DecodeBlockWeights {
  const float* ln1;       // [C]
  const float* qkv;       // [3C, C]
  const float* proj;      // [C, C]
  const float* ln2;       // [C]
  const float* fc_a_w;    // [F, C]
  const float* fc_a_b;    // [F]
  const float* fc_g_w;    // [F, C]
  const float* fc_g_b;    // [F]
  const float* fc_out_w;  // [C, F]
  const float* fc_out_b;  // [C]
};

struct DecodeWeights {
  const float* tok_emb;  // [V, C], also the tied lm_head
  std::vector<DecodeBlockWeights> blocks;  // L entries
  const float* ln_f;     // [C]
  const float* rope;     // [T, D/2, 2]: (cos, sin) of position p's angle for pair i (RopeTable)
};

// One sequence of the batch.
struct DecodeSequence {
  int32_t token;     // the new token, in [0, V)
  int64_t position;  // its position P = tokens already cached, < T
  // Per layer: key and value storage [H, capacity, D] holding positions 0..P-1; the step writes
  // position P (after RoPE for keys). REQUIRES: capacity > P.
  std::vector<float*> keys;
  std::vector<float*> values;
  int64_t capacity;
  // If not null: receives the attention probabilities of layer `trace_layer` [H, P + 1].
  float* trace = nullptr;
};

// Runs the step: writes every sequence's key and value at its position in every layer and the
// logits [B, V] into `logits`. Sequences attend only to their own cache. trace_layer < 0: no trace.
void RunDecodeStep(const ModelConfig& config, const DecodeWeights& weights, std::span<DecodeSequence> batch,
                   int64_t trace_layer, float* logits, WorkerPool& pool);

}  // namespace niels::daemon::model
