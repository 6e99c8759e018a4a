#include "daemon/kernels/decode_step.h"

#include <algorithm>
#include <atomic>
#include <utility>

#include "daemon/kernels/matvec.h"
#include "daemon/kernels/row_ops.h"
#include "daemon/kernels/simd_kernels.h"

namespace niels::daemon::kernels {

void FeedForward(const BlockWeightViews& block, const ModelShape& shape, const float* x, int64_t rows, float* a,
                 float* g, float* out, WorkerPool& pool) {
  MatVec(block.fc_a_w, shape.d_ff, shape.width, block.fc_a_b, x, rows, a, pool);  // [rows, F]
  MatVec(block.fc_g_w, shape.d_ff, shape.width, block.fc_g_b, x, rows, g, pool);  // [rows, F]
  const int64_t total = rows * shape.d_ff;
  if (rows == 1 || pool.threads() == 1) {
    simd::SiluMul(g, a, total);
  } else {
    pool.Run([&](int part, int parts) {
      const int64_t begin = rows * part / parts * shape.d_ff, end = rows * (part + 1) / parts * shape.d_ff;
      simd::SiluMul(g + begin, a + begin, end - begin);
    });
  }
  MatVec(block.fc_out_w, shape.width, shape.d_ff, block.fc_out_b, a, rows, out, pool);  // [rows, C]
}

DecodeStep::DecodeStep(ModelShape shape, std::shared_ptr<WorkerPool> pool)
    : shape_(shape), pool_(pool != nullptr ? std::move(pool) : std::make_shared<WorkerPool>(1)) {}

void DecodeStep::Reserve(int64_t batch) {
  if (batch <= reserved_batch_) return;
  const ModelShape& c = shape_;
  s_.h.resize(batch * c.width);
  s_.x.resize(batch * c.width);
  s_.qkv.resize(batch * 3 * c.width);
  s_.heads.resize(batch * c.width);
  s_.a.resize(batch * c.d_ff);
  s_.g.resize(batch * c.d_ff);
  s_.scores.resize(batch * c.heads * c.context);
  reserved_batch_ = batch;
}

// Causal self-attention of `layer` for every sequence, from this layer's qkv rows: RoPE on q and k,
// k and v written to the cache at the sequence's position, then every (sequence, head) pair
// attends over positions 0..P of its own cache, the pairs split across the pool. Fills heads.
void DecodeStep::Attention(const WeightViews& w, std::span<DecodeSequence> batch, int64_t layer, bool traced) {
  const ModelShape& c = shape_;
  Scratch& s = s_;
  const int64_t B = static_cast<int64_t>(batch.size()), C = c.width, H = c.heads, D = c.head_dim();
  for (int64_t b = 0; b < B; ++b) {
    DecodeSequence& seq = batch[b];
    float* q = s.qkv.data() + b * 3 * C;  // [H, D]
    float* k = q + C;                     // [H, D]
    const float* v = k + C;               // [H, D]
    const float* rope = w.rope + seq.position * D;  // [D/2, 2]
    ApplyRope(q, rope, H, D);
    ApplyRope(k, rope, H, D);
    StoreKv(seq.cache, layer, seq.position, k, v, H, D);
  }
  auto attend = [&](int64_t pair) {
    const int64_t b = pair / H, h = pair % H;
    const DecodeSequence& seq = batch[b];
    float* scores = s.scores.data() + pair * c.context;
    AttendRow(s.qkv.data() + b * 3 * C + h * D, seq.cache.Keys(layer, h, D), seq.cache.Values(layer, h, D),
              seq.position + 1, D, scores, /*scores_ready=*/false, s.heads.data() + b * C + h * D);
    if (traced && seq.trace != nullptr) {
      std::copy(scores, scores + seq.position + 1, seq.trace + h * (seq.position + 1));
    }
  };
  std::atomic<int64_t> next{0};  // pairs go to whichever thread is free
  pool_->Run([&](int, int) {
    for (int64_t pair = next.fetch_add(1, std::memory_order_relaxed); pair < B * H;
         pair = next.fetch_add(1, std::memory_order_relaxed)) {
      attend(pair);
    }
  });
}

void DecodeStep::Run(const WeightViews& weights, std::span<DecodeSequence> batch, int64_t trace_layer,
                     float* logits) {
  const int64_t B = static_cast<int64_t>(batch.size()), C = shape_.width;
  if (B == 0) return;
  Reserve(B);
  Scratch& s = s_;
  WorkerPool& pool = *pool_;
  for (int64_t b = 0; b < B; ++b) EmbedRow(weights.tok_emb, C, batch[b].token, s.h.data() + b * C);
  const int64_t rows = B * C;  // the scratch may be larger than this batch
  for (int64_t layer = 0; layer < shape_.layers; ++layer) {
    const BlockWeightViews& block = weights.blocks[layer];
    // h = h + proj(attention(RMSNorm1(h)))
    RmsNorm(s.h.data(), block.ln1, B, C, s.x.data());
    MatVec(block.qkv, 3 * C, C, nullptr, s.x.data(), B, s.qkv.data(), pool);  // [B, 3C]
    Attention(weights, batch, layer, layer == trace_layer);                    // [B, C]
    MatVec(block.proj, C, C, nullptr, s.heads.data(), B, s.x.data(), pool);    // [B, C]
    AddInto(s.h.data(), s.x.data(), rows);
    // h = h + mlp(RMSNorm2(h))
    RmsNorm(s.h.data(), block.ln2, B, C, s.x.data());
    FeedForward(block, shape_, s.x.data(), B, s.a.data(), s.g.data(), s.x.data(), pool);  // [B, C]
    AddInto(s.h.data(), s.x.data(), rows);
  }
  RmsNorm(s.h.data(), weights.ln_f, B, C, s.x.data());
  MatVec(weights.tok_emb, shape_.vocab, C, nullptr, s.x.data(), B, logits, pool);  // [B, V]
}

}  // namespace niels::daemon::kernels
