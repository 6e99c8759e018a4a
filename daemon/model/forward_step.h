#pragma once
// ForwardStep: one forward pass over new tokens of several sequences at once -- prefill chunks and
// decode steps alike -- written as plain loops over float rows plus MatVec, with the model math of
// docs/ARCHITECTURE.md ("Model math"; row_ops.h holds the per-row parts). The kernels it calls
// (daemon/kernels: MatVec, simd::Attend, simd::SiluMul, the dtype conversions) are primitives that
// know nothing of a model.
//
// Every new token is a row. A row at position P of its sequence embeds its token, and in every layer
// writes its key (after RoPE) and value into its sequence's KV block for P, then attends over
// positions 0..P of that sequence -- which include the rows of the same sequence earlier in this
// step, written just before. So a prefill chunk of n tokens is n rows, a decode step one row.
//
// Weights are read in their stored dtype (f32, f16 or bf16, widened in registers; or a GGUF block
// type, multiplied with 8-bit activations per block, matvec.h; a quantized token embedding row is
// dequantized); every float sum is f32. A decode step reads every weight once, so its speed is memory bandwidth; a prefill of many
// rows runs the same MatVec as a register-tiled GEMM.
//
// Invariance (the engine relies on it): a row's keys, values, logits and trace are bitwise the same
// whatever else is in the step and however its sequence's tokens were split into steps. Every
// kernel reduces each row in an order that depends only on that row: MatVec and DotRows (row r of y
// is independent of the other rows and of their number), RMSNorm and RoPE per row, SiLU per
// element, and attention (simd::Attend): scores, softmax and the value sum per (row, head) over the
// row's own positions in order, whatever rows share the call and however the KV blocks split them. Hence a
// prefill equals the same tokens decoded one by one, a prompt prefilled in one chunk equals it
// prefilled in several, and a block computed for one sequence is exactly what another sequence with
// the same prefix would compute (prefix sharing changes no result).
//
// KV blocks hold f32 or f16 elements (StepSequence::kv_dtype): a key or value is narrowed once as
// it is written (simd::FromFloat, dtype.h's rounding) and read widened; every sum stays f32.
//
// One forward pass serves the whole family (config.h, weights.h): grouped-query attention (query
// head h reads key/value head h / (H / KV)), q/k/v as one matrix or three, optional q/k/v biases,
// RMSNorm over each head of q and k, RoPE over adjacent pairs or halves, biased or plain SwiGLU, a
// tied or separate output projection.
//
// No libtorch: it reads the model's own ModelConfig and Weights (weights.h) and a RoPE table
// (transformer.h, FillRopeTable), KV blocks as pointers (kv_pool.h owns them). Shapes: C width,
// H query heads, KV key/value heads, D head size, F = d_ff, V vocab, T context, bt = block tokens.

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "daemon/kernels/dtype.h"
#include "daemon/kernels/worker_pool.h"
#include "daemon/model/config.h"
#include "daemon/model/hook_sites.h"
#include "daemon/model/weights.h"

namespace niels::daemon::model {

// Where a position's keys and values live in a KV block: a block holds positions [i*bt, (i+1)*bt)
// of one sequence as [L][2][KV][bt][D] elements (keys 0, values 1) of the sequence's KV dtype.
struct KvBlockLayout {
  int64_t heads;         // KV: key/value heads
  int64_t head_dim;      // D
  int64_t block_tokens;  // bt
  // Element offset of (layer, keys 0 / values 1, head, slot) in a block.
  int64_t Offset(int64_t layer, int kv, int64_t head, int64_t slot) const {
    return (((layer * 2 + kv) * heads + head) * block_tokens + slot) * head_dim;
  }
};

// One sequence's part of a step: `count` new tokens at positions start .. start+count-1.
struct StepSequence {
  const int32_t* tokens;  // [count], each in [0, V)
  int64_t count;          // >= 1
  int64_t start;          // positions already cached; start + count <= T
  // Block pointers covering positions [0, start + count): blocks[p / bt] holds position p. Blocks
  // are read for positions < start and written for the new ones.
  void* const* blocks;
  // The element type of the blocks: f32 or f16.
  Dtype kv_dtype;
  // Rows [logits_from, count) get logits (count - 1: the last token only; count: none).
  int64_t logits_from;
  // If not null: the attention probabilities of layer `trace_layer` for the LAST row, [H, start+count].
  float* trace = nullptr;
  // If not null: receives every row's activation at the hook sites it selects (hook_sites.h), after
  // they are computed; it only reads them, so every value of the step stays as it is without it.
  ActivationObserver* observer = nullptr;
};

// down(silu(gate(x)) * up(x)) (with the biases the block has) for `rows` rows of x [rows, C] into
// out [rows, C]; a and g are scratch [rows, F]. FeedForwardHidden is its first half: a = silu(gate(x))
// * up(x) [rows, F], the input of down (the hook site mlp.hook_post).
void FeedForward(const BlockWeights& block, const ModelConfig& config, const float* x, int64_t rows, float* a,
                 float* g, float* out, kernels::WorkerPool& pool);
void FeedForwardHidden(const BlockWeights& block, const ModelConfig& config, const float* x, int64_t rows, float* a,
                       float* g, kernels::WorkerPool& pool);

// Runs steps for one model. Holds the activations of a step ([rows, ...]) and reuses them from step
// to step: sized for the most rows seen so far, never shrinking, so a step allocates nothing once
// that size has been reached.
// Thread-safety: not thread-safe (the scratch is shared by its steps); one caller at a time -- the
// engine thread in nielsd. The pool may be shared with other users (WorkerPool::Run is safe).
class ForwardStep {
 public:
  // Positions whose attention one simd::Attend call computes, for all the query heads of one
  // key/value head (each key and value is read once for all of them).
  static constexpr int64_t kQueryBlock = 16;

  // REQUIRES: config is valid (ValidateModelConfig); the weights given to Run match it (CheckShapes).
  ForwardStep(ModelConfig config, int64_t block_tokens, std::shared_ptr<kernels::WorkerPool> pool);

  const ModelConfig& config() const { return config_; }
  const KvBlockLayout& layout() const { return layout_; }
  kernels::WorkerPool& pool() const { return *pool_; }

  // Writes every new row's keys and values into its blocks, and the logits of the rows that want
  // them into `logits` [n, V], sequence after sequence, rows in order. Returns n. trace_layer < 0:
  // no trace. rope: [T, D/2, 2], (cos, sin) of position p's angle for pair i (FillRopeTable), filled
  // for every position of the step. REQUIRES: distinct sequences write distinct blocks.
  // Observers (StepSequence::observer) are called on this thread as their sites are reached; a step
  // without any costs one branch per site and layer.
  int64_t Run(const Weights& weights, const float* rope, std::span<const StepSequence> sequences,
              int64_t trace_layer, float* logits);
  // Frees the scratch (Run sizes it again for its rows).
  void ReleaseScratch();

 private:
  // A run of consecutive rows of one sequence whose attention one work item computes for one head.
  struct QueryBlock {
    int32_t sequence;
    int64_t first_row;  // index into the step's rows
    int64_t rows;       // <= kQueryBlock
    int64_t position;   // of the first row
  };
  struct Scratch {
    std::vector<float> h;       // [R, C] the residual stream
    std::vector<float> x;       // [R, C] RMSNorm(h), then a block's output
    std::vector<float> qkv;     // [R, H D + 2 KV D] q | k | v, head h at columns [hD, (h+1)D) of each
    std::vector<float> heads;   // [R, H D] attention output, heads concatenated
    std::vector<float> a;       // [R, F] fc_a(x), then silu(g) * a
    std::vector<float> g;       // [R, F] fc_g(x)
    std::vector<float> scores;  // [threads, H / KV * kQueryBlock, P] scores, then probabilities
  };
  // Sizes the scratch for `rows` rows attending to up to `positions` positions (P; grows only).
  void Reserve(int64_t rows, int64_t positions);
  // Calls fn(begin, end) over [0, n) split among the pool's threads (serially for a few rows).
  template <typename Fn>
  void ForRows(int64_t n, Fn&& fn);
  // q, k and v of every row into s_.qkv (one product, or three with their biases).
  void ProjectQkv(const BlockWeights& block);
  // What attention needs of one row's fresh q and k: llama order undone, per-head norms, RoPE.
  void PrepareQueryKey(const BlockWeights& block, const float* rope, float* q, float* k) const;
  void Attention(const BlockWeights& block, const float* rope, std::span<const StepSequence> sequences, int64_t layer,
                 int64_t trace_layer);
  void AttendBlock(std::span<const StepSequence> sequences, const QueryBlock& block, int64_t kv_head, int64_t layer,
                   int64_t trace_layer, float* scores);
  // Hands the rows of every observing sequence that selects (site, layer) their row of `values`
  // [R, width].
  void Observe(std::span<const StepSequence> sequences, HookSite site, int64_t layer, const float* values,
               int64_t width);
  // ln_final.hook_normalized of the observing sequences' rows that select it.
  void ObserveFinalNormalized(std::span<const StepSequence> sequences);

  ModelConfig config_;
  KvBlockLayout layout_;
  std::shared_ptr<kernels::WorkerPool> pool_;
  int64_t reserved_rows_ = 0;
  int64_t scores_stride_ = 0;  // P of Scratch::scores
  std::vector<int32_t> row_sequence_;   // [R] which sequence each row belongs to
  std::vector<int64_t> row_position_;   // [R] its position
  std::vector<QueryBlock> query_blocks_;
  std::vector<int64_t> logit_rows_;     // rows that want logits, in order
  std::vector<int64_t> sequence_first_row_;  // [sequences] the first row of each
  std::vector<int32_t> observing_;      // the sequences with an observer, in order
  std::vector<float> observed_norm_;    // [C] one row's ln_final.hook_normalized
  std::vector<float> unit_weight_;      // [C] ones
  Scratch s_;
};

}  // namespace niels::daemon::model
