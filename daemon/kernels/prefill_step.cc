#include "daemon/kernels/prefill_step.h"

#include <algorithm>
#include <atomic>
#include <utility>

#include "daemon/kernels/decode_step.h"
#include "daemon/kernels/matvec.h"
#include "daemon/kernels/row_ops.h"
#include "daemon/kernels/simd_kernels.h"

namespace niels::daemon::kernels {

PrefillStep::PrefillStep(ModelShape shape, std::shared_ptr<WorkerPool> pool)
    : shape_(shape), pool_(pool != nullptr ? std::move(pool) : std::make_shared<WorkerPool>(1)) {}

void PrefillStep::Reserve(int64_t rows) {
  if (rows <= reserved_rows_) return;
  const ModelShape& c = shape_;
  h_.resize(rows * c.width);
  x_.resize(rows * c.width);
  qkv_.resize(rows * 3 * c.width);
  heads_.resize(rows * c.width);
  a_.resize(rows * c.d_ff);
  g_.resize(rows * c.d_ff);
  scores_.resize(pool_->threads() * kQueryBlock * c.context);
  reserved_rows_ = rows;
}

template <typename Fn>
void PrefillStep::ForRows(int64_t n, Fn&& fn) {
  if (n < 4 || pool_->threads() == 1) {
    fn(int64_t{0}, n);
    return;
  }
  pool_->Run([&](int part, int parts) {
    const int64_t begin = n * part / parts, end = n * (part + 1) / parts;
    if (begin < end) fn(begin, end);
  });
}

void PrefillStep::Run(const WeightViews& weights, std::span<const int32_t> tokens, const KvView& cache,
                      int64_t start, bool all_logits, float* logits) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  for (int64_t done = 0; done < n; done += kMaxRows) {
    const int64_t rows = std::min(kMaxRows, n - done);
    const bool last = done + rows == n;
    float* out = all_logits ? logits + done * shape_.vocab : (last ? logits : nullptr);
    RunChunk(weights, tokens.subspan(done, rows), cache, start + done, all_logits, out);
  }
}

// Causal attention of `layer` for the n rows of the chunk, whose q, k, v are in qkv_: RoPE on q and
// k and the keys and values stored at their positions first (a row attends to the rows before it in
// the chunk), then each (head, query block) pair: the block's scores against keys 0..start+i1-1,
// then per row i softmax and the weighted values over its own keys 0..start+i.
void PrefillStep::Attention(const WeightViews& w, const KvView& cache, int64_t layer, int64_t start, int64_t n) {
  const ModelShape& c = shape_;
  const int64_t C = c.width, H = c.heads, D = c.head_dim(), T = c.context;
  ForRows(n, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      float* q = qkv_.data() + i * 3 * C;
      const float* rope = w.rope + (start + i) * D;
      ApplyRope(q, rope, H, D);
      ApplyRope(q + C, rope, H, D);
      StoreKv(cache, layer, start + i, q + C, q + 2 * C, H, D);
    }
  });
  const int64_t blocks = (n + kQueryBlock - 1) / kQueryBlock;
  auto attend = [&](int64_t item, float* scores) {
    const int64_t h = item % H, i0 = item / H * kQueryBlock, i1 = std::min(n, i0 + kQueryBlock);
    const Matrix keys = cache.Keys(layer, h, D), values = cache.Values(layer, h, D);
    const float* q0 = qkv_.data() + i0 * 3 * C + h * D;
    simd::DotRows(keys, D, q0, 3 * C, i1 - i0, nullptr, scores, T, 0, start + i1);  // [rows, start + i1]
    for (int64_t i = i0; i < i1; ++i) {
      AttendRow(qkv_.data() + i * 3 * C + h * D, keys, values, start + i + 1, D, scores + (i - i0) * T,
                /*scores_ready=*/true, heads_.data() + i * C + h * D);
    }
  };
  // Items go to whichever thread is free, the last query blocks (the longest causal prefixes) first,
  // so that no thread is left with a long one at the end. Scratch is per part.
  const int64_t items = blocks * H;
  std::atomic<int64_t> next{0};
  pool_->Run([&](int part, int) {
    float* scores = scores_.data() + part * kQueryBlock * T;
    for (int64_t taken = next.fetch_add(1, std::memory_order_relaxed); taken < items;
         taken = next.fetch_add(1, std::memory_order_relaxed)) {
      attend(items - 1 - taken, scores);
    }
  });
}

void PrefillStep::RunChunk(const WeightViews& w, std::span<const int32_t> tokens, const KvView& cache,
                           int64_t start, bool all_logits, float* logits) {
  const ModelShape& c = shape_;
  const int64_t n = static_cast<int64_t>(tokens.size()), C = c.width;
  Reserve(n);
  WorkerPool& pool = *pool_;
  ForRows(n, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) EmbedRow(w.tok_emb, C, tokens[i], h_.data() + i * C);
  });
  auto norm = [&](const float* weight) {
    ForRows(n, [&](int64_t begin, int64_t end) {
      RmsNorm(h_.data() + begin * C, weight, end - begin, C, x_.data() + begin * C);
    });
  };
  auto add_x_into_h = [&] {
    ForRows(n, [&](int64_t begin, int64_t end) { AddInto(h_.data() + begin * C, x_.data() + begin * C, (end - begin) * C); });
  };
  for (int64_t layer = 0; layer < c.layers; ++layer) {
    const BlockWeightViews& block = w.blocks[layer];
    norm(block.ln1);
    MatVec(block.qkv, 3 * C, C, nullptr, x_.data(), n, qkv_.data(), pool);  // [n, 3C]
    Attention(w, cache, layer, start, n);                                    // [n, C] into heads_
    MatVec(block.proj, C, C, nullptr, heads_.data(), n, x_.data(), pool);    // [n, C]
    add_x_into_h();
    norm(block.ln2);
    FeedForward(block, c, x_.data(), n, a_.data(), g_.data(), x_.data(), pool);  // [n, C]
    add_x_into_h();
  }
  if (logits == nullptr) return;  // a chunk before the last, last-position logits only
  const int64_t first = all_logits ? 0 : n - 1;
  const int64_t rows = n - first;
  RmsNorm(h_.data() + first * C, w.ln_f, rows, C, x_.data());
  MatVec(w.tok_emb, c.vocab, C, nullptr, x_.data(), rows, logits, pool);  // [rows, V]
}

}  // namespace niels::daemon::kernels
