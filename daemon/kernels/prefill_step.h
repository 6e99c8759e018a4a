#pragma once
// PrefillStep: the forward pass of n new tokens of one sequence at positions start..start+n-1, with
// their keys and values written into the sequence's KV cache (a chat prefill, and the uncached
// forward over a fresh cache). No libtorch: weights and cache come in as views (model_views.h).
//
// It is the decode step's math over many rows at once: the same row operations (row_ops.h) and
// MatVec, which for hundreds of rows of x runs as a register-tiled GEMM that reads 16-bit weights
// directly (simd_kernels.h), and attention per (head, block of 16 queries): the scores of a block
// against the keys come from one DotRows call, then softmax and the weighted sum of the values run
// per query over its own causal prefix. Each row's reduction order depends on that row only, so the
// logits and cached keys/values of a token are bitwise the same as if it had been decoded by
// DecodeStep, or prefilled in other chunks.
//
// Rows are processed in chunks of at most kMaxRows (a chunk runs all layers before the next one
// starts), which bounds the scratch: [kMaxRows, 3C + 3C + 2F] floats, allocated on first use and
// reused.
//
// Thread-safety: not thread-safe (shared scratch); one caller at a time. Work is split across the
// WorkerPool: matrix rows in MatVec, rows for the row operations, (head, query block) pairs for
// attention.

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "daemon/kernels/model_views.h"
#include "daemon/kernels/worker_pool.h"

namespace niels::daemon::kernels {

class PrefillStep {
 public:
  static constexpr int64_t kMaxRows = 512;    // tokens per chunk
  static constexpr int64_t kQueryBlock = 16;  // queries whose scores one DotRows call computes

  PrefillStep(ModelShape shape, std::shared_ptr<WorkerPool> pool);

  // Processes `tokens` at positions start..start+n-1 of `cache` (which holds positions 0..start-1):
  // writes their keys and values into it and the logits of the last position [V] into `logits`, or
  // of every position [n, V] when all_logits. The caller advances its cache's length.
  // REQUIRES: n >= 1, start + n <= cache.capacity, start + n <= T, every token in [0, V).
  void Run(const WeightViews& weights, std::span<const int32_t> tokens, const KvView& cache, int64_t start,
           bool all_logits, float* logits);

 private:
  void Reserve(int64_t rows);
  void RunChunk(const WeightViews& w, std::span<const int32_t> tokens, const KvView& cache, int64_t start,
                bool all_logits, float* logits);
  void Attention(const WeightViews& w, const KvView& cache, int64_t layer, int64_t start, int64_t n);
  // fn(begin, end) over row ranges of [0, n) split among the pool's threads.
  template <typename Fn>
  void ForRows(int64_t n, Fn&& fn);

  ModelShape shape_;
  std::shared_ptr<WorkerPool> pool_;
  int64_t reserved_rows_ = 0;
  std::vector<float> h_, x_, qkv_, heads_, a_, g_;  // [rows, C], [rows, C], [rows, 3C], [rows, C], [rows, F] x 2
  std::vector<float> scores_;                       // [threads, kQueryBlock, T]
};

}  // namespace niels::daemon::kernels
