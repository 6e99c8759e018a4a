#include "daemon/kernels/forward_step.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "daemon/kernels/matvec.h"
#include "daemon/kernels/simd_kernels.h"

namespace niels::daemon::kernels {
namespace {

constexpr double kEps = 1e-5;  // RMSNorm epsilon (kRmsNormEps of transformer_stages.h)

// out = x / sqrt(mean(x^2) + eps) * weight, for one row of width C.
void RmsNormRow(const float* x, const float* weight, int64_t width, float* out) {
  double sum_sq = 0.0;
  for (int64_t i = 0; i < width; ++i) sum_sq += static_cast<double>(x[i]) * x[i];
  const float inv_rms = static_cast<float>(1.0 / std::sqrt(sum_sq / static_cast<double>(width) + kEps));
  for (int64_t i = 0; i < width; ++i) out[i] = x[i] * inv_rms * weight[i];
}

void RmsNorm(const float* x, const float* weight, int64_t rows, int64_t width, float* out) {
  for (int64_t r = 0; r < rows; ++r) RmsNormRow(x + r * width, weight, width, out + r * width);
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

// softmax(q . k_j / sqrt(D)) over positions j = 0..m-1 of one head of one sequence, then
// sum_j p_j v_j into out [D]. Keys and values are read block by block (bt positions each, at
// key_offset / value_offset inside every block); scores [m] is left holding the probabilities.
// Positions are visited in order, so the result is that of one pass over contiguous rows.
void AttendHead(const ForwardShape& c, const float* q, float* const* blocks, int64_t key_offset,
                int64_t value_offset, int64_t m, float* scores, float* out) {
  const int64_t D = c.head_dim(), bt = c.block_tokens;
  for (int64_t begin = 0, b = 0; begin < m; begin += bt, ++b) {
    const int64_t n = std::min(bt, m - begin);
    simd::DotRows(blocks[b] + key_offset, D, q, 1, nullptr, scores + begin, 0, 0, n);  // k_j . q
  }
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
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
  for (int64_t begin = 0, b = 0; begin < m; begin += bt, ++b) {
    const int64_t n = std::min(bt, m - begin);
    simd::WeightedSumRows(scores + begin, blocks[b] + value_offset, n, D, out, /*accumulate=*/begin > 0);
  }
}

}  // namespace

ForwardStep::ForwardStep(ForwardShape shape, std::shared_ptr<WorkerPool> pool)
    : shape_(shape), pool_(pool != nullptr ? std::move(pool) : std::make_shared<WorkerPool>(1)) {
  s_.scores.resize(static_cast<size_t>(pool_->threads() * shape_.context));
}

void ForwardStep::Reserve(int64_t rows) {
  if (rows <= reserved_rows_) return;
  const ForwardShape& c = shape_;
  s_.h.resize(rows * c.width);
  s_.x.resize(rows * c.width);
  s_.qkv.resize(rows * 3 * c.width);
  s_.heads.resize(rows * c.width);
  s_.a.resize(rows * c.d_ff);
  s_.g.resize(rows * c.d_ff);
  s_.final.resize(rows * c.width);
  reserved_rows_ = rows;
}

// Causal self-attention of `layer` for every row, from this layer's qkv rows: RoPE on q and k, k
// and v written to the row's block at its position, then every (row, head) pair attends over
// positions 0..P of its own sequence, the pairs split across the pool. Fills heads.
void ForwardStep::Attention(const WeightViews& w, std::span<const StepSequence> sequences, int64_t layer,
                            int64_t trace_layer) {
  const ForwardShape& c = shape_;
  Scratch& s = s_;
  const int64_t R = static_cast<int64_t>(rows_.size()), C = c.width, H = c.heads, D = c.head_dim();
  const int64_t bt = c.block_tokens;
  for (int64_t r = 0; r < R; ++r) {
    const Row& row = rows_[r];
    float* q = s.qkv.data() + r * 3 * C;  // [H, D]
    float* k = q + C;                     // [H, D]
    const float* v = k + C;               // [H, D]
    const float* rope = w.rope + row.position * D;  // [D/2, 2]
    ApplyRope(q, rope, H, D);
    ApplyRope(k, rope, H, D);
    float* block = sequences[row.sequence].blocks[row.position / bt];
    const int64_t slot = row.position % bt;
    for (int64_t h = 0; h < H; ++h) {
      std::copy(k + h * D, k + (h + 1) * D, block + c.BlockOffset(layer, 0, h, slot));
      std::copy(v + h * D, v + (h + 1) * D, block + c.BlockOffset(layer, 1, h, slot));
    }
  }
  pool_->Run([&](int part, int parts) {
    float* scores = s.scores.data() + static_cast<int64_t>(part) * c.context;
    for (int64_t pair = part; pair < R * H; pair += parts) {
      const int64_t r = pair / H, h = pair % H;
      const Row& row = rows_[r];
      const StepSequence& seq = sequences[row.sequence];
      AttendHead(c, s.qkv.data() + r * 3 * C + h * D, seq.blocks, c.BlockOffset(layer, 0, h, 0),
                 c.BlockOffset(layer, 1, h, 0), row.position + 1, scores, s.heads.data() + r * C + h * D);
      const bool last_row = row.position == seq.start + seq.count - 1;
      if (layer == trace_layer && last_row && seq.trace != nullptr) {
        std::copy(scores, scores + row.position + 1, seq.trace + h * (row.position + 1));
      }
    }
  });
}

// fc_out(silu(fc_g(x)) * fc_a(x)) for every row of x [R, C] into x.
void ForwardStep::FeedForward(const BlockWeightViews& block, int64_t rows) {
  const ForwardShape& c = shape_;
  Scratch& s = s_;
  WorkerPool& pool = *pool_;
  MatVec(block.fc_a_w, c.d_ff, c.width, block.fc_a_b, s.x.data(), rows, s.a.data(), pool);  // [R, F]
  MatVec(block.fc_g_w, c.d_ff, c.width, block.fc_g_b, s.x.data(), rows, s.g.data(), pool);  // [R, F]
  for (int64_t i = 0; i < rows * c.d_ff; ++i) {
    const float g = s.g[i];
    s.a[i] *= g / (1.0f + std::exp(-g));  // silu(g) * a
  }
  MatVec(block.fc_out_w, c.width, c.d_ff, block.fc_out_b, s.a.data(), rows, s.x.data(), pool);  // [R, C]
}

int64_t ForwardStep::Run(const WeightViews& weights, std::span<const StepSequence> sequences, int64_t trace_layer,
                         float* logits) {
  const int64_t C = shape_.width;
  rows_.clear();
  for (size_t i = 0; i < sequences.size(); ++i) {
    for (int64_t t = 0; t < sequences[i].count; ++t) {
      rows_.push_back({static_cast<int32_t>(i), sequences[i].start + t});
    }
  }
  const int64_t R = static_cast<int64_t>(rows_.size());
  if (R == 0) return 0;
  Reserve(R);
  Scratch& s = s_;
  WorkerPool& pool = *pool_;
  for (int64_t r = 0; r < R; ++r) {  // h = tok_emb[token]
    const StepSequence& seq = sequences[rows_[r].sequence];
    const float* embedding = weights.tok_emb + static_cast<int64_t>(seq.tokens[rows_[r].position - seq.start]) * C;
    std::copy(embedding, embedding + C, s.h.data() + r * C);
  }
  auto add_into_h = [&] {
    for (int64_t i = 0; i < R * C; ++i) s.h[i] += s.x[i];
  };
  for (int64_t layer = 0; layer < shape_.layers; ++layer) {
    const BlockWeightViews& block = weights.blocks[layer];
    // h = h + proj(attention(RMSNorm1(h)))
    RmsNorm(s.h.data(), block.ln1, R, C, s.x.data());
    MatVec(block.qkv, 3 * C, C, nullptr, s.x.data(), R, s.qkv.data(), pool);  // [R, 3C]
    Attention(weights, sequences, layer, trace_layer);                         // [R, C]
    MatVec(block.proj, C, C, nullptr, s.heads.data(), R, s.x.data(), pool);    // [R, C]
    add_into_h();
    // h = h + mlp(RMSNorm2(h))
    RmsNorm(s.h.data(), block.ln2, R, C, s.x.data());
    FeedForward(block, R);  // [R, C]
    add_into_h();
  }
  // logits = RMSNorm_f(h) @ tok_emb^T, only for the rows that want them.
  int64_t n = 0;
  for (int64_t r = 0; r < R; ++r) {
    const StepSequence& seq = sequences[rows_[r].sequence];
    if (rows_[r].position - seq.start >= seq.logits_from) {
      RmsNormRow(s.h.data() + r * C, weights.ln_f, C, s.final.data() + n * C);
      ++n;
    }
  }
  MatVec(weights.tok_emb, shape_.vocab, C, nullptr, s.final.data(), n, logits, pool);  // [n, V]
  return n;
}

}  // namespace niels::daemon::kernels
