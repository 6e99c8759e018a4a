#include "daemon/kernels/decode_step.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "daemon/kernels/matvec.h"
#include "daemon/kernels/simd_kernels.h"

namespace niels::daemon::kernels {
namespace {

constexpr double kEps = 1e-5;  // RMSNorm epsilon (kRmsNormEps of transformer_stages.h)

// out = x / sqrt(mean(x^2) + eps) * weight, for each of `rows` rows of width C.
void RmsNorm(const float* x, const float* weight, int64_t rows, int64_t width, float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * width;
    double sum_sq = 0.0;
    for (int64_t i = 0; i < width; ++i) sum_sq += static_cast<double>(xr[i]) * xr[i];
    const float inv_rms = static_cast<float>(1.0 / std::sqrt(sum_sq / static_cast<double>(width) + kEps));
    for (int64_t i = 0; i < width; ++i) out[r * width + i] = xr[i] * inv_rms * weight[i];
  }
}

// Rotates the adjacent pairs (x[2i], x[2i+1]) of each of H heads [H, D] by position p's angles:
// x'[2i] = x[2i] cos - x[2i+1] sin, x'[2i+1] = x[2i] sin + x[2i+1] cos. rope: [D/2, 2] of position p.
void ApplyRope(float* x, const float* rope, int64_t heads, int64_t head_dim) {
  for (int64_t h = 0; h < heads; ++h) {
    float* head = x + h * head_dim;
    for (int64_t i = 0; i < head_dim / 2; ++i) {
      const float cos = rope[2 * i], sin = rope[2 * i + 1];
      const float a = head[2 * i], b = head[2 * i + 1];
      head[2 * i] = a * cos - b * sin;
      head[2 * i + 1] = a * sin + b * cos;
    }
  }
}

// softmax(q . k_j / sqrt(D)) over j = 0..m-1, then sum_j p_j v_j, for one head of one sequence:
// q [D], keys and values [m, D] (rows of the cache), out [D], scores scratch [m] (left holding the
// probabilities).
void AttendHead(const float* q, const float* keys, const float* values, int64_t m, int64_t head_dim,
                float* scores, float* out) {
  simd::DotRows(keys, head_dim, q, 1, nullptr, scores, m, 0, m);  // scores[j] = k_j . q
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
  float max_score = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < m; ++j) {
    scores[j] *= scale;
    max_score = std::max(max_score, scores[j]);
  }
  double total = 0.0;
  for (int64_t j = 0; j < m; ++j) {
    scores[j] = std::exp(scores[j] - max_score);
    total += scores[j];
  }
  const float inv_total = static_cast<float>(1.0 / total);
  for (int64_t j = 0; j < m; ++j) scores[j] *= inv_total;
  simd::WeightedSumRows(scores, values, m, head_dim, out);  // [D]
}

}  // namespace

DecodeStep::DecodeStep(DecodeShape shape, std::shared_ptr<WorkerPool> pool)
    : shape_(shape), pool_(pool != nullptr ? std::move(pool) : std::make_shared<WorkerPool>(1)) {}

void DecodeStep::Reserve(int64_t batch) {
  if (batch <= reserved_batch_) return;
  const DecodeShape& c = shape_;
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
void DecodeStep::Attention(const DecodeWeights& w, std::span<DecodeSequence> batch, int64_t layer, bool traced) {
  const DecodeShape& c = shape_;
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
    for (int64_t h = 0; h < H; ++h) {  // storage [H, capacity, D]: head h, row P
      const int64_t row = (h * seq.capacity + seq.position) * D;
      std::copy(k + h * D, k + (h + 1) * D, seq.keys[layer] + row);
      std::copy(v + h * D, v + (h + 1) * D, seq.values[layer] + row);
    }
  }
  auto attend = [&](int64_t pair) {
    const int64_t b = pair / H, h = pair % H;
    const DecodeSequence& seq = batch[b];
    const int64_t head_start = h * seq.capacity * D;
    float* scores = s.scores.data() + pair * c.context;
    AttendHead(s.qkv.data() + b * 3 * C + h * D, seq.keys[layer] + head_start, seq.values[layer] + head_start,
               seq.position + 1, D, scores, s.heads.data() + b * C + h * D);
    if (traced && seq.trace != nullptr) {
      std::copy(scores, scores + seq.position + 1, seq.trace + h * (seq.position + 1));
    }
  };
  pool_->Run([&](int part, int parts) {
    for (int64_t pair = part; pair < B * H; pair += parts) attend(pair);
  });
}

// fc_out(silu(fc_g(x)) * fc_a(x)) for every row of x [B, C] into x.
void DecodeStep::FeedForward(const DecodeBlockWeights& block, int64_t batch) {
  const DecodeShape& c = shape_;
  Scratch& s = s_;
  WorkerPool& pool = *pool_;
  MatVec(block.fc_a_w, c.d_ff, c.width, block.fc_a_b, s.x.data(), batch, s.a.data(), pool);  // [B, F]
  MatVec(block.fc_g_w, c.d_ff, c.width, block.fc_g_b, s.x.data(), batch, s.g.data(), pool);  // [B, F]
  for (int64_t i = 0; i < batch * c.d_ff; ++i) {
    const float g = s.g[i];
    s.a[i] *= g / (1.0f + std::exp(-g));  // silu(g) * a
  }
  MatVec(block.fc_out_w, c.width, c.d_ff, block.fc_out_b, s.a.data(), batch, s.x.data(), pool);  // [B, C]
}

void DecodeStep::Run(const DecodeWeights& weights, std::span<DecodeSequence> batch, int64_t trace_layer,
                     float* logits) {
  const int64_t B = static_cast<int64_t>(batch.size()), C = shape_.width;
  if (B == 0) return;
  Reserve(B);
  Scratch& s = s_;
  WorkerPool& pool = *pool_;
  for (int64_t b = 0; b < B; ++b) {  // h = tok_emb[token]
    const float* row = weights.tok_emb + static_cast<int64_t>(batch[b].token) * C;
    std::copy(row, row + C, s.h.data() + b * C);
  }
  const int64_t rows = B * C;  // the scratch may be larger than this batch
  auto add_into_h = [&] {
    for (int64_t i = 0; i < rows; ++i) s.h[i] += s.x[i];
  };
  for (int64_t layer = 0; layer < shape_.layers; ++layer) {
    const DecodeBlockWeights& block = weights.blocks[layer];
    // h = h + proj(attention(RMSNorm1(h)))
    RmsNorm(s.h.data(), block.ln1, B, C, s.x.data());
    MatVec(block.qkv, 3 * C, C, nullptr, s.x.data(), B, s.qkv.data(), pool);  // [B, 3C]
    Attention(weights, batch, layer, layer == trace_layer);                    // [B, C]
    MatVec(block.proj, C, C, nullptr, s.heads.data(), B, s.x.data(), pool);    // [B, C]
    add_into_h();
    // h = h + mlp(RMSNorm2(h))
    RmsNorm(s.h.data(), block.ln2, B, C, s.x.data());
    FeedForward(block, B);  // [B, C]
    add_into_h();
  }
  RmsNorm(s.h.data(), weights.ln_f, B, C, s.x.data());
  MatVec(weights.tok_emb, shape_.vocab, C, nullptr, s.x.data(), B, logits, pool);  // [B, V]
}

}  // namespace niels::daemon::kernels
