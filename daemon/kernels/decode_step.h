#pragma once
// DecodeStep: one cached decode step for a batch of B sequences -- the hot path of generation --
// written as plain loops over float rows plus MatVec, with the math of docs/ARCHITECTURE.md "Model
// math" (row_ops.h holds the per-row parts it shares with PrefillStep).
//
// A step reads every weight once (86 MB for the `personal` preset in f32, 43 MB in f16/bf16), so
// its speed is memory bandwidth: the weights are read in their stored dtype and widened in
// registers, and the only other heavy work is reading the KV caches, split across a WorkerPool.
//
// No libtorch: weights, RoPE table and caches come in as views (model_views.h; Transformer::Decode
// builds them). Shapes: B batch, C width, H heads, D = C/H, F = d_ff, V vocab, P = position.
//
// Batch invariance: a sequence's logits (and its trace) are bitwise the same whatever else is in
// the batch and whatever B is: every kernel reduces each row in an order that depends only on that
// row (MatVec, per-row RMSNorm, per-(sequence, head) attention). They are also bitwise the same as
// PrefillStep's for that token (the same row operations).

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "daemon/kernels/model_views.h"
#include "daemon/kernels/worker_pool.h"

namespace niels::daemon::kernels {

// One sequence of the batch.
struct DecodeSequence {
  int32_t token;     // the new token, in [0, V)
  int64_t position;  // its position P = tokens already cached, < T
  // Positions 0..P-1 are cached; the step writes position P (after RoPE for keys).
  // REQUIRES: cache.capacity > P.
  KvView cache;
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
  DecodeStep(ModelShape shape, std::shared_ptr<WorkerPool> pool);

  const ModelShape& shape() const { return shape_; }
  WorkerPool& pool() const { return *pool_; }
  const std::shared_ptr<WorkerPool>& shared_pool() const { return pool_; }

  // Writes every sequence's key and value at its position in every layer and the logits [B, V]
  // into `logits`. Sequences attend only to their own cache. trace_layer < 0: no trace.
  void Run(const WeightViews& weights, std::span<DecodeSequence> batch, int64_t trace_layer, float* logits);

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
  void Attention(const WeightViews& w, std::span<DecodeSequence> batch, int64_t layer, bool traced);

  ModelShape shape_;
  std::shared_ptr<WorkerPool> pool_;
  int64_t reserved_batch_ = 0;
  Scratch s_;
};

// fc_out(silu(fc_g(x)) * fc_a(x)) for `rows` rows of x [rows, C] into out [rows, C]; a and g are
// scratch [rows, F]. Shared by DecodeStep and PrefillStep.
void FeedForward(const BlockWeightViews& block, const ModelShape& shape, const float* x, int64_t rows, float* a,
                 float* g, float* out, WorkerPool& pool);

}  // namespace niels::daemon::kernels
