#pragma once
// ScalarReference: an independent, deliberately naive niels_gpt forward (docs/ARCHITECTURE.md
// "Model math") for tests. Plain loops over std::vector<float> (sums in double), no libtorch. It reads the same weights as the model under test (16-bit
// matrices widened exactly), and with kv_dtype f16 rounds each cached key and value to f16 as an f16
// KV cache does.

#include <cmath>
#include <cstdint>
#include <vector>

#include "daemon/kernels/dtype.h"
#include "daemon/model/config.h"
#include "daemon/model/weights.h"

namespace niels::daemon::model {

class ScalarReference {
 public:
  // Which elements RoPE rotates together: (x[2i], x[2i+1]) as specified, or (x[i], x[i+D/2]) (the
  // GPT-NeoX / Llama-HF convention, which niels_gpt does not use).
  enum class RopePairs { kAdjacent, kHalves };

  ScalarReference(const ModelConfig& config, const Weights& weights, RopePairs pairs,
                  kernels::Dtype kv_dtype = kernels::Dtype::kF32)
      : config_(config), pairs_(pairs), kv_dtype_(kv_dtype) {
    tok_emb_ = Read(weights.tok_emb);
    ln_f_ = Read(weights.ln_f);
    for (const BlockWeights& b : weights.blocks) {
      blocks_.push_back({Read(b.ln1), Read(b.qkv), Read(b.proj), Read(b.ln2), Read(b.fc_a_w), Read(b.fc_a_b),
                         Read(b.fc_g_w), Read(b.fc_g_b), Read(b.fc_out_w), Read(b.fc_out_b)});
    }
  }

  // Logits [n, V] (row-major) for `tokens` at positions 0..n-1. With `trace` set, the attention
  // probabilities of the last position in layer `trace_layer` go there: [H, n], row-major.
  std::vector<float> Forward(const std::vector<int32_t>& tokens, int64_t trace_layer = -1,
                             std::vector<float>* trace = nullptr) const {
    const int64_t n = static_cast<int64_t>(tokens.size());
    const int64_t c = config_.width;
    std::vector<Vec> h(n);
    for (int64_t p = 0; p < n; ++p) h[p] = Vec(&tok_emb_[tokens[p] * c], &tok_emb_[(tokens[p] + 1) * c]);
    for (size_t layer = 0; layer < blocks_.size(); ++layer) {
      const Block& block = blocks_[layer];
      const bool traced = trace != nullptr && static_cast<int64_t>(layer) == trace_layer;
      const std::vector<Vec> attn = Attention(block, h, traced ? trace : nullptr);
      for (int64_t p = 0; p < n; ++p) Add(h[p], attn[p]);
      for (int64_t p = 0; p < n; ++p) Add(h[p], Mlp(block, RmsNorm(h[p], block.ln2)));
    }
    std::vector<float> logits;
    for (int64_t p = 0; p < n; ++p) {
      const Vec row = MatVec(tok_emb_, config_.vocab_size, RmsNorm(h[p], ln_f_));
      logits.insert(logits.end(), row.begin(), row.end());
    }
    return logits;
  }

 private:
  using Vec = std::vector<float>;
  struct Block {
    Vec ln1, qkv, proj, ln2, fc_a_w, fc_a_b, fc_g_w, fc_g_b, fc_out_w, fc_out_b;
  };

  static Vec Read(const Tensor& t) { return t.ToFloats(); }

  // An f16 KV cache stores each value rounded to f16.
  void StoreAsCached(Vec& row) const {
    if (kv_dtype_ == kernels::Dtype::kF32) return;
    for (float& x : row) x = kernels::HalfToFloat(kernels::FloatToHalf(x));
  }

  static void Add(Vec& into, const Vec& x) {
    for (size_t i = 0; i < into.size(); ++i) into[i] += x[i];
  }

  // w is [rows, x.size()] row-major; returns w @ x.
  static Vec MatVec(const Vec& w, int64_t rows, const Vec& x) {
    Vec out(rows);
    const size_t cols = x.size();
    for (int64_t r = 0; r < rows; ++r) {
      double sum = 0;
      for (size_t i = 0; i < cols; ++i) sum += static_cast<double>(w[r * cols + i]) * x[i];
      out[r] = static_cast<float>(sum);
    }
    return out;
  }

  Vec RmsNorm(const Vec& x, const Vec& weight) const {
    const double eps = config_.rms_norm_eps;
    double sum_sq = 0;
    for (float v : x) sum_sq += static_cast<double>(v) * v;
    const double rms = std::sqrt(sum_sq / x.size() + eps);
    Vec out(x.size());
    for (size_t i = 0; i < x.size(); ++i) out[i] = static_cast<float>(x[i] / rms) * weight[i];
    return out;
  }

  // Rotates one head's vector (length D) for position `pos`, in place.
  void Rope(float* x, int64_t pos) const {
    const int64_t d = config_.head_dim();
    for (int64_t i = 0; i < d / 2; ++i) {
      const double angle = static_cast<double>(pos) * std::pow(config_.rope_theta, -2.0 * i / d);
      const float cos = static_cast<float>(std::cos(angle));
      const float sin = static_cast<float>(std::sin(angle));
      float* a = pairs_ == RopePairs::kAdjacent ? &x[2 * i] : &x[i];
      float* b = pairs_ == RopePairs::kAdjacent ? &x[2 * i + 1] : &x[i + d / 2];
      const float x0 = *a, x1 = *b;
      *a = x0 * cos - x1 * sin;
      *b = x0 * sin + x1 * cos;
    }
  }

  // Causal multi-head self-attention output (after proj) at every position; the last position's
  // probabilities [H, n] into `last_probs` when set.
  std::vector<Vec> Attention(const Block& block, const std::vector<Vec>& h, Vec* last_probs = nullptr) const {
    const int64_t n = static_cast<int64_t>(h.size());
    const int64_t c = config_.width, d = config_.head_dim();
    std::vector<Vec> q(n), k(n), v(n);
    for (int64_t p = 0; p < n; ++p) {
      const Vec qkv = MatVec(block.qkv, 3 * c, RmsNorm(h[p], block.ln1));
      q[p] = Vec(qkv.begin(), qkv.begin() + c);
      k[p] = Vec(qkv.begin() + c, qkv.begin() + 2 * c);
      v[p] = Vec(qkv.begin() + 2 * c, qkv.end());
      for (int64_t head = 0; head < config_.heads; ++head) {
        Rope(&q[p][head * d], p);
        Rope(&k[p][head * d], p);
      }
      StoreAsCached(k[p]);
      StoreAsCached(v[p]);
    }
    std::vector<Vec> out(n);
    if (last_probs != nullptr) last_probs->assign(config_.heads * n, 0.0f);
    for (int64_t i = 0; i < n; ++i) {
      Vec concat(c, 0.0f);
      for (int64_t head = 0; head < config_.heads; ++head) {
        std::vector<double> scores(i + 1);
        double max_score = -1e300;
        for (int64_t j = 0; j <= i; ++j) {
          double dot = 0;
          for (int64_t e = 0; e < d; ++e) dot += static_cast<double>(q[i][head * d + e]) * k[j][head * d + e];
          scores[j] = dot / std::sqrt(static_cast<double>(d));
          max_score = std::max(max_score, scores[j]);
        }
        double total = 0;
        for (double& s : scores) total += (s = std::exp(s - max_score));
        if (last_probs != nullptr && i == n - 1) {
          for (int64_t j = 0; j <= i; ++j) (*last_probs)[head * n + j] = static_cast<float>(scores[j] / total);
        }
        for (int64_t j = 0; j <= i; ++j) {
          for (int64_t e = 0; e < d; ++e) concat[head * d + e] += static_cast<float>(scores[j] / total) * v[j][head * d + e];
        }
      }
      out[i] = MatVec(block.proj, c, concat);
    }
    return out;
  }

  Vec Mlp(const Block& block, const Vec& x) const {
    const int64_t f = config_.d_ff;
    const Vec g = MatVec(block.fc_g_w, f, x);
    const Vec a = MatVec(block.fc_a_w, f, x);
    Vec hidden(f);
    for (int64_t i = 0; i < f; ++i) {
      const double gate = g[i] + block.fc_g_b[i];
      hidden[i] = static_cast<float>(gate / (1.0 + std::exp(-gate)) * (a[i] + block.fc_a_b[i]));
    }
    Vec out = MatVec(block.fc_out_w, config_.width, hidden);
    for (int64_t i = 0; i < config_.width; ++i) out[i] += block.fc_out_b[i];
    return out;
  }

  ModelConfig config_;
  RopePairs pairs_;
  kernels::Dtype kv_dtype_;
  Vec tok_emb_, ln_f_;
  std::vector<Block> blocks_;
};

}  // namespace niels::daemon::model
