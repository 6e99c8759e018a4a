#pragma once
// ForwardStep: one forward pass over new tokens of several sequences at once -- prefill chunks and
// decode steps alike -- written as plain loops over float rows plus MatVec, with the same math as
// the libtorch stages (daemon/model/transformer_stages.h; docs/ARCHITECTURE.md, "Model math").
//
// Every new token is a row. A row at position P of its sequence embeds its token, and in every layer
// writes its key (after RoPE) and value into its sequence's KV block for P, then attends over
// positions 0..P of that sequence -- which include the rows of the same sequence earlier in this
// step, written just before. So a prefill chunk of n tokens is n rows, a decode step one row.
//
// Invariance (the engine relies on it): a row's keys, values, logits and trace are bitwise the same
// whatever else is in the step and however its sequence's tokens were split into steps. Every
// kernel reduces each row in an order that depends only on that row: MatVec (row r of y is
// independent of the other rows and of their number), RMSNorm and RoPE per row, SiLU per element,
// attention per (row, head) over the row's own positions in order. Hence a prefill equals the same
// tokens decoded one by one, a prompt prefilled in one chunk equals it prefilled in several, and a
// block computed for one sequence is exactly what another sequence with the same prefix would
// compute (prefix sharing changes no result).
//
// Why not the libtorch stages: those are not chunk-invariant (OpenBLAS and libtorch choose kernels
// by shape), a decode step would pay ~300 small op dispatches, and attention would need the blocks
// gathered. Here the heavy work is MatVec (weights streamed once for all rows) and the KV reads.
//
// No libtorch: weights, RoPE table and KV blocks come in as float pointers (Transformer extracts
// them). Shapes: C width, H heads, D = C/H, F = d_ff, V vocab, T context, bt = block tokens.

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "daemon/kernels/worker_pool.h"

namespace niels::daemon::kernels {

// The model dimensions a step needs (a torch-free subset of model::ModelConfig) and the KV block
// layout: a block holds positions [i*bt, (i+1)*bt) of one sequence as [L][2][H][bt][D] floats.
struct ForwardShape {
  int64_t layers;        // L
  int64_t width;         // C
  int64_t heads;         // H; C % H == 0, C/H even
  int64_t d_ff;          // F
  int64_t vocab;         // V
  int64_t context;       // T
  int64_t block_tokens;  // bt
  int64_t head_dim() const { return width / heads; }
  // Float offset of (layer, keys 0 / values 1, head, slot) in a block.
  int64_t BlockOffset(int64_t layer, int kv, int64_t head, int64_t slot) const {
    return (((layer * 2 + kv) * heads + head) * block_tokens + slot) * head_dim();
  }
};

// Row-major float views of one block's weights (state_dict names in weights.h).
struct BlockWeightViews {
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

struct WeightViews {
  const float* tok_emb;  // [V, C], also the tied lm_head
  std::vector<BlockWeightViews> blocks;  // L entries
  const float* ln_f;     // [C]
  const float* rope;     // [T, D/2, 2]: (cos, sin) of position p's angle for pair i (RopeTable)
};

// One sequence's part of a step: `count` new tokens at positions start .. start+count-1.
struct StepSequence {
  const int32_t* tokens;  // [count], each in [0, V)
  int64_t count;          // >= 1
  int64_t start;          // positions already cached; start + count <= T
  // Block pointers covering positions [0, start + count): blocks[p / bt] holds position p. Blocks
  // are read for positions < start and written for the new ones.
  float* const* blocks;
  // Rows [logits_from, count) get logits (count - 1: the last token only; count: none).
  int64_t logits_from;
  // If not null: the attention probabilities of layer `trace_layer` for the LAST row, [H, start+count].
  float* trace = nullptr;
};

// Runs steps for one model. Holds the activations of a step ([rows, ...]) and reuses them from step
// to step: sized for the most rows seen so far, never shrinking, so a step allocates nothing once
// that size has been reached.
// Thread-safety: not thread-safe (the scratch is shared by its steps); one caller at a time -- the
// engine thread in nielsd. The pool may be shared with other users (WorkerPool::Run is safe).
class ForwardStep {
 public:
  ForwardStep(ForwardShape shape, std::shared_ptr<WorkerPool> pool);

  const ForwardShape& shape() const { return shape_; }
  WorkerPool& pool() const { return *pool_; }

  // Writes every new row's keys and values into its blocks, and the logits of the rows that want
  // them into `logits` [n, V], sequence after sequence, rows in order. Returns n. trace_layer < 0:
  // no trace. REQUIRES: distinct sequences write distinct blocks.
  int64_t Run(const WeightViews& weights, std::span<const StepSequence> sequences, int64_t trace_layer,
              float* logits);

 private:
  // Where row r comes from.
  struct Row {
    int32_t sequence;
    int64_t position;
  };
  struct Scratch {
    std::vector<float> h;       // [R, C] the residual stream
    std::vector<float> x;       // [R, C] RMSNorm(h), then a block's output
    std::vector<float> qkv;     // [R, 3C] q | k | v, head h at columns [hD, (h+1)D) of each third
    std::vector<float> heads;   // [R, C] attention output, heads concatenated
    std::vector<float> a;       // [R, F] fc_a(x), then silu(g) * a
    std::vector<float> g;       // [R, F] fc_g(x)
    std::vector<float> scores;  // [threads, T] attention probabilities of the (row, head) in hand
    std::vector<float> final;   // [n, C] RMSNorm_f of the rows that want logits
  };
  void Reserve(int64_t rows);
  void Attention(const WeightViews& w, std::span<const StepSequence> sequences, int64_t layer, int64_t trace_layer);
  void FeedForward(const BlockWeightViews& block, int64_t rows);

  ForwardShape shape_;
  std::shared_ptr<WorkerPool> pool_;
  int64_t reserved_rows_ = 0;
  std::vector<Row> rows_;
  Scratch s_;
};

}  // namespace niels::daemon::kernels
