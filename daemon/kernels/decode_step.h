#pragma once
// DecodeStep: one cached decode step for a batch of B sequences -- the hot path of generation --
// written as plain loops over float rows plus MatVec, with the same math as the libtorch stages
// (daemon/model/transformer_stages.h; docs/ARCHITECTURE.md, "Model math").
//
// Why not the libtorch stages: a step reads every weight once (86 MB for the `personal` preset),
// which takes ~1.4 ms on 2 cores; the ~300 small libtorch ops of a step cost another ~1 ms of
// dispatch and allocation, and attention through BLAS gemm repacks the whole KV cache per layer.
// Here the only heavy work is the weight and KV reads, split across a WorkerPool.
//
// No libtorch: weights, RoPE table and caches come in as float pointers (Transformer::Decode
// extracts them). Shapes: B batch, C width, H heads, D = C/H, F = d_ff, V vocab, P = position.
//
// Batch invariance: a sequence's logits (and its trace) are bitwise the same whatever else is in
// the batch and whatever B is: every kernel reduces each row in an order that depends only on that
// row (MatVec, per-row RMSNorm, per-(sequence, head) attention).

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "daemon/kernels/worker_pool.h"

namespace niels::daemon::kernels {

// The model dimensions a step needs (a torch-free subset of model::ModelConfig).
struct DecodeShape {
  int64_t layers;   // L
  int64_t width;    // C
  int64_t heads;    // H; C % H == 0, C/H even
  int64_t d_ff;     // F
  int64_t vocab;    // V
  int64_t context;  // T
  int64_t head_dim() const { return width / heads; }
};

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

// Runs steps for one model. Holds the activations of a step ([B, ...] rows) and reuses them from
// step to step: they are sized for the largest batch seen so far and never shrink, so a step
// allocates nothing once the batch size has been reached.
// Thread-safety: not thread-safe (the scratch is shared by its steps); one caller at a time -- the
// engine thread in nielsd. The pool may be shared with other users (WorkerPool::Run is safe).
class DecodeStep {
 public:
  DecodeStep(DecodeShape shape, std::shared_ptr<WorkerPool> pool);

  const DecodeShape& shape() const { return shape_; }
  WorkerPool& pool() const { return *pool_; }

  // Writes every sequence's key and value at its position in every layer and the logits [B, V]
  // into `logits`. Sequences attend only to their own cache. trace_layer < 0: no trace.
  void Run(const DecodeWeights& weights, std::span<DecodeSequence> batch, int64_t trace_layer, float* logits);

 private:
  struct Scratch {
    std::vector<float> h;       // [B, C] the residual stream
    std::vector<float> x;       // [B, C] RMSNorm(h), then a block's output
    std::vector<float> qkv;     // [B, 3C] q | k | v, head h at columns [hD, (h+1)D) of each third
    std::vector<float> heads;   // [B, C] attention output, heads concatenated
    std::vector<float> a;       // [B, F] fc_a(x), then silu(g) * a
    std::vector<float> g;       // [B, F] fc_g(x)
    std::vector<float> scores;  // [B, H, T] attention probabilities
  };
  void Reserve(int64_t batch);
  void Attention(const DecodeWeights& w, std::span<DecodeSequence> batch, int64_t layer, bool traced);
  void FeedForward(const DecodeBlockWeights& block, int64_t batch);

  DecodeShape shape_;
  std::shared_ptr<WorkerPool> pool_;
  int64_t reserved_batch_ = 0;
  Scratch s_;
};

}  // namespace niels::daemon::kernels
