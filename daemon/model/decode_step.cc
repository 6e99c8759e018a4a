#include "daemon/model/decode_step.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "daemon/model/matvec.h"
#include "daemon/model/simd_kernels.h"

namespace niels::daemon::model {
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
  kernels::DotRows(keys, head_dim, q, 1, nullptr, scores, m, 0, m);  // scores[j] = k_j . q
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
  kernels::WeightedSumRows(scores, values, m, head_dim, out);  // [D]
}

// Activations of one step, [B, ...] row-major.
struct Scratch {
  Scratch(const ModelConfig& c, int64_t batch)
      : h(batch * c.width), x(batch * c.width), qkv(batch * 3 * c.width), heads(batch * c.width),
        a(batch * c.d_ff), g(batch * c.d_ff), scores(batch * c.heads * c.context) {}
  std::vector<float> h;       // [B, C] the residual stream
  std::vector<float> x;       // [B, C] RMSNorm(h), then a block's output
  std::vector<float> qkv;     // [B, 3C] q | k | v, head h at columns [hD, (h+1)D) of each third
  std::vector<float> heads;   // [B, C] attention output, heads concatenated
  std::vector<float> a;       // [B, F] fc_a(x), then silu(g) * a
  std::vector<float> g;       // [B, F] fc_g(x)
  std::vector<float> scores;  // [B, H, T] attention probabilities
};

// Causal self-attention of `layer` for every sequence, from this layer's s.qkv: RoPE on q and k,
// k and v written to the cache at the sequence's position, then every (sequence, head) pair
// attends over positions 0..P of its own cache, the pairs split across the pool. Fills s.heads.
void Attention(const ModelConfig& c, const DecodeWeights& w, std::span<DecodeSequence> batch, int64_t layer,
               bool traced, Scratch& s, WorkerPool& pool) {
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
  pool.Run([&](int part, int parts) {
    for (int64_t pair = part; pair < B * H; pair += parts) attend(pair);
  });
}

// fc_out(silu(fc_g(x)) * fc_a(x)) for every row of s.x [B, C] into s.x.
void FeedForward(const ModelConfig& c, const DecodeBlockWeights& block, int64_t batch, Scratch& s,
                 WorkerPool& pool) {
  MatVec(block.fc_a_w, c.d_ff, c.width, block.fc_a_b, s.x.data(), batch, s.a.data(), pool);  // [B, F]
  MatVec(block.fc_g_w, c.d_ff, c.width, block.fc_g_b, s.x.data(), batch, s.g.data(), pool);  // [B, F]
  for (size_t i = 0; i < s.a.size(); ++i) {
    const float g = s.g[i];
    s.a[i] *= g / (1.0f + std::exp(-g));  // silu(g) * a
  }
  MatVec(block.fc_out_w, c.width, c.d_ff, block.fc_out_b, s.a.data(), batch, s.x.data(), pool);  // [B, C]
}

void AddInto(std::vector<float>& h, const std::vector<float>& x) {
  for (size_t i = 0; i < h.size(); ++i) h[i] += x[i];
}

}  // namespace

void RunDecodeStep(const ModelConfig& config, const DecodeWeights& weights, std::span<DecodeSequence> batch,
                   int64_t trace_layer, float* logits, WorkerPool& pool) {
  const int64_t B = static_cast<int64_t>(batch.size()), C = config.width;
  Scratch s(config, B);
  for (int64_t b = 0; b < B; ++b) {  // h = tok_emb[token]
    const float* row = weights.tok_emb + static_cast<int64_t>(batch[b].token) * C;
    std::copy(row, row + C, s.h.data() + b * C);
  }
  for (int64_t layer = 0; layer < config.layers; ++layer) {
    const DecodeBlockWeights& block = weights.blocks[layer];
    // h = h + proj(attention(RMSNorm1(h)))
    RmsNorm(s.h.data(), block.ln1, B, C, s.x.data());
    MatVec(block.qkv, 3 * C, C, nullptr, s.x.data(), B, s.qkv.data(), pool);  // [B, 3C]
    Attention(config, weights, batch, layer, layer == trace_layer, s, pool);   // [B, C]
    MatVec(block.proj, C, C, nullptr, s.heads.data(), B, s.x.data(), pool);    // [B, C]
    AddInto(s.h, s.x);
    // h = h + mlp(RMSNorm2(h))
    RmsNorm(s.h.data(), block.ln2, B, C, s.x.data());
    FeedForward(config, block, B, s, pool);  // [B, C]
    AddInto(s.h, s.x);
  }
  RmsNorm(s.h.data(), weights.ln_f, B, C, s.x.data());
  MatVec(weights.tok_emb, config.vocab_size, C, nullptr, s.x.data(), B, logits, pool);  // [B, V]
}

}  // namespace niels::daemon::model
