#pragma once
// ScalarReference: an independent, deliberately naive forward pass of the family
// (docs/ARCHITECTURE.md "Model math") for tests. Plain loops over std::vector<float>, every dot
// product and norm summed in double, no libtorch, nothing shared with the kernels but the weights it
// reads (16-bit and block-type matrices widened or dequantized exactly as stored). With kv_dtype f16
// it rounds each cached key and value to f16 as an f16 KV cache does.
//
// Written from the Hugging Face modeling code's semantics: grouped-query attention (query head h
// reads key/value head h / (H / KV)), q/k/v biases, RMSNorm over each head of q and k before RoPE,
// RoPE over adjacent pairs or halves with per-pair frequency divisors, SwiGLU with or without
// biases, a tied or separate output projection; q and k rows stored in llama.cpp's interleaved order
// are put back first.

#include <cmath>
#include <cstdint>
#include <functional>
#include <vector>

#include "daemon/kernels/dtype.h"
#include "daemon/model/config.h"
#include "daemon/model/hook_sites.h"
#include "daemon/model/weights.h"

namespace niels::daemon::model {

class ScalarReference {
 public:
  // Receives the activation of every hook site (daemon/model/hook_sites.h, which defines them) at
  // every position: (site, layer (-1 for ln_final.hook_normalized), position, values).
  using Hook = std::function<void(HookSite, int64_t, int64_t, const std::vector<float>&)>;

  ScalarReference(const ModelConfig& config, const Weights& weights, kernels::Dtype kv_dtype = kernels::Dtype::kF32)
      : config_(config), kv_dtype_(kv_dtype) {
    tok_emb_ = weights.tok_emb.ToFloats();
    lm_head_ = weights.lm_head.ToFloats();
    final_norm_ = weights.final_norm.ToFloats();
    if (weights.rope_freqs.defined()) rope_freqs_ = weights.rope_freqs.ToFloats();
    const int64_t HD = config.q_width(), KVD = config.kv_width(), C = config.width;
    for (const BlockWeights& b : weights.blocks) {
      Block block;
      block.attn_norm = b.attn_norm.ToFloats();
      if (b.wqkv.defined()) {  // rows [q | k | v]
        const Vec all = b.wqkv.ToFloats();
        block.wq.assign(all.begin(), all.begin() + HD * C);
        block.wk.assign(all.begin() + HD * C, all.begin() + (HD + KVD) * C);
        block.wv.assign(all.begin() + (HD + KVD) * C, all.end());
      } else {
        block.wq = b.wq.ToFloats();
        block.wk = b.wk.ToFloats();
        block.wv = b.wv.ToFloats();
      }
      block.bq = Optional(b.bq, HD);
      block.bk = Optional(b.bk, KVD);
      block.bv = Optional(b.bv, KVD);
      block.q_norm = b.q_norm.defined() ? b.q_norm.ToFloats() : Vec();
      block.k_norm = b.k_norm.defined() ? b.k_norm.ToFloats() : Vec();
      block.wo = b.wo.ToFloats();
      block.ffn_norm = b.ffn_norm.ToFloats();
      block.w_gate = b.w_gate.ToFloats();
      block.w_up = b.w_up.ToFloats();
      block.w_down = b.w_down.ToFloats();
      block.b_gate = Optional(b.b_gate, config.d_ff);
      block.b_up = Optional(b.b_up, config.d_ff);
      block.b_down = Optional(b.b_down, C);
      blocks_.push_back(std::move(block));
    }
  }

  // Logits [n, V] (row-major) for `tokens` at positions 0..n-1. With `trace` set, the attention
  // probabilities of the last position in layer `trace_layer` go there: [H, n], row-major.
  // With `hook` set, every site's values at every position go there (in forward order).
  std::vector<float> Forward(const std::vector<int32_t>& tokens, int64_t trace_layer = -1,
                             std::vector<float>* trace = nullptr, const Hook* hook = nullptr) const {
    const int64_t n = static_cast<int64_t>(tokens.size());
    const int64_t c = config_.width;
    std::vector<Vec> h(n);
    for (int64_t p = 0; p < n; ++p) h[p] = Vec(&tok_emb_[tokens[p] * c], &tok_emb_[(tokens[p] + 1) * c]);
    const auto observe = [&](HookSite site, int64_t layer, const std::vector<Vec>& rows) {
      if (hook == nullptr) return;
      for (int64_t p = 0; p < n; ++p) (*hook)(site, layer, p, rows[p]);
    };
    for (size_t layer = 0; layer < blocks_.size(); ++layer) {
      const Block& block = blocks_[layer];
      const auto l = static_cast<int64_t>(layer);
      observe(HookSite::kResidPre, l, h);
      const bool traced = trace != nullptr && l == trace_layer;
      const std::vector<Vec> attn = Attention(block, h, traced ? trace : nullptr);
      observe(HookSite::kAttnOut, l, attn);
      for (int64_t p = 0; p < n; ++p) Add(h[p], attn[p]);
      observe(HookSite::kResidMid, l, h);
      std::vector<Vec> hidden(n), mlp(n);
      for (int64_t p = 0; p < n; ++p) mlp[p] = Mlp(block, RmsNorm(h[p], block.ffn_norm), &hidden[p]);
      observe(HookSite::kMlpPost, l, hidden);
      observe(HookSite::kMlpOut, l, mlp);
      for (int64_t p = 0; p < n; ++p) Add(h[p], mlp[p]);
      observe(HookSite::kResidPost, l, h);
    }
    if (hook != nullptr) {  // h / sqrt(mean(h^2) + eps), before the final norm's weight
      for (int64_t p = 0; p < n; ++p) (*hook)(HookSite::kLnFinalNormalized, -1, p, RmsNorm(h[p], Vec(c, 1.0f)));
    }
    std::vector<float> logits;
    for (int64_t p = 0; p < n; ++p) {
      const Vec row = MatVec(lm_head_, config_.vocab_size, RmsNorm(h[p], final_norm_));
      logits.insert(logits.end(), row.begin(), row.end());
    }
    return logits;
  }

 private:
  using Vec = std::vector<float>;
  struct Block {
    Vec attn_norm, wq, wk, wv, bq, bk, bv, q_norm, k_norm, wo, ffn_norm, w_gate, w_up, w_down, b_gate, b_up, b_down;
  };

  // The tensor's values, or zeros of `n` when the model has none (a missing bias adds nothing).
  static Vec Optional(const Tensor& t, int64_t n) { return t.defined() ? t.ToFloats() : Vec(n, 0.0f); }

  // An f16 KV cache stores each value rounded to f16.
  void StoreAsCached(Vec& row) const {
    if (kv_dtype_ == kernels::Dtype::kF32) return;
    for (float& x : row) x = kernels::HalfToFloat(kernels::FloatToHalf(x));
  }

  static void Add(Vec& into, const Vec& x) {
    for (size_t i = 0; i < into.size(); ++i) into[i] += x[i];
  }

  // w is [rows, x.size()] row-major; returns w @ x (+ bias when given).
  static Vec MatVec(const Vec& w, int64_t rows, const Vec& x, const Vec* bias = nullptr) {
    Vec out(rows);
    const size_t cols = x.size();
    for (int64_t r = 0; r < rows; ++r) {
      double sum = 0;
      for (size_t i = 0; i < cols; ++i) sum += static_cast<double>(w[r * cols + i]) * x[i];
      if (bias != nullptr) sum += (*bias)[r];
      out[r] = static_cast<float>(sum);
    }
    return out;
  }

  // RMSNorm of x[offset, offset + width) with `weight` [width].
  Vec RmsNorm(const Vec& x, const Vec& weight, size_t offset = 0, size_t width = 0) const {
    if (width == 0) width = x.size();
    double sum_sq = 0;
    for (size_t i = 0; i < width; ++i) sum_sq += static_cast<double>(x[offset + i]) * x[offset + i];
    const double rms = std::sqrt(sum_sq / static_cast<double>(width) + config_.rms_norm_eps);
    Vec out(width);
    for (size_t i = 0; i < width; ++i) out[i] = static_cast<float>(x[offset + i] / rms) * weight[i];
    return out;
  }

  // llama.cpp's interleaved head order back to Hugging Face's: stored 2i is i, 2i+1 is D/2 + i.
  void Uninterleave(Vec& x, int64_t heads) const {
    const int64_t d = config_.head_dim();
    for (int64_t head = 0; head < heads; ++head) {
      Vec moved(d);
      for (int64_t i = 0; i < d / 2; ++i) {
        moved[i] = x[head * d + 2 * i];
        moved[d / 2 + i] = x[head * d + 2 * i + 1];
      }
      std::copy(moved.begin(), moved.end(), x.begin() + head * d);
    }
  }

  // Rotates one head's vector (length D) for position `pos`, in place.
  void Rope(float* x, int64_t pos) const {
    const int64_t d = config_.head_dim();
    const bool halves = config_.rope_pairs == RopePairs::kHalves;
    for (int64_t i = 0; i < d / 2; ++i) {
      double inv_freq = std::pow(config_.rope_theta, -2.0 * i / d);
      if (!rope_freqs_.empty()) inv_freq /= rope_freqs_[i];
      const double angle = static_cast<double>(pos) * inv_freq;
      const float cos = static_cast<float>(std::cos(angle));
      const float sin = static_cast<float>(std::sin(angle));
      float* a = halves ? &x[i] : &x[2 * i];
      float* b = halves ? &x[i + d / 2] : &x[2 * i + 1];
      const float x0 = *a, x1 = *b;
      *a = x0 * cos - x1 * sin;
      *b = x0 * sin + x1 * cos;
    }
  }

  // The head-wise RMSNorm of q or k (Qwen3), in place.
  void HeadNorm(Vec& x, int64_t heads, const Vec& weight) const {
    if (weight.empty()) return;
    const int64_t d = config_.head_dim();
    for (int64_t head = 0; head < heads; ++head) {
      const Vec normed = RmsNorm(x, weight, head * d, d);
      std::copy(normed.begin(), normed.end(), x.begin() + head * d);
    }
  }

  // Causal grouped-query self-attention output (after wo) at every position; the last position's
  // probabilities [H, n] into `last_probs` when set.
  std::vector<Vec> Attention(const Block& block, const std::vector<Vec>& h, Vec* last_probs = nullptr) const {
    const int64_t n = static_cast<int64_t>(h.size());
    const int64_t d = config_.head_dim(), heads = config_.heads, kv_heads = config_.kv_head_count();
    const int64_t group = heads / kv_heads;
    std::vector<Vec> q(n), k(n), v(n);
    for (int64_t p = 0; p < n; ++p) {
      const Vec x = RmsNorm(h[p], block.attn_norm);
      q[p] = MatVec(block.wq, heads * d, x, &block.bq);
      k[p] = MatVec(block.wk, kv_heads * d, x, &block.bk);
      v[p] = MatVec(block.wv, kv_heads * d, x, &block.bv);
      if (config_.qk_rows_interleaved) {
        Uninterleave(q[p], heads);
        Uninterleave(k[p], kv_heads);
      }
      HeadNorm(q[p], heads, block.q_norm);
      HeadNorm(k[p], kv_heads, block.k_norm);
      for (int64_t head = 0; head < heads; ++head) Rope(&q[p][head * d], p);
      for (int64_t head = 0; head < kv_heads; ++head) Rope(&k[p][head * d], p);
      StoreAsCached(k[p]);
      StoreAsCached(v[p]);
    }
    std::vector<Vec> out(n);
    if (last_probs != nullptr) last_probs->assign(heads * n, 0.0f);
    for (int64_t i = 0; i < n; ++i) {
      Vec concat(heads * d, 0.0f);
      for (int64_t head = 0; head < heads; ++head) {
        const int64_t kv = head / group;
        std::vector<double> scores(i + 1);
        double max_score = -1e300;
        for (int64_t j = 0; j <= i; ++j) {
          double dot = 0;
          for (int64_t e = 0; e < d; ++e) dot += static_cast<double>(q[i][head * d + e]) * k[j][kv * d + e];
          scores[j] = dot / std::sqrt(static_cast<double>(d));
          max_score = std::max(max_score, scores[j]);
        }
        double total = 0;
        for (double& s : scores) total += (s = std::exp(s - max_score));
        if (last_probs != nullptr && i == n - 1) {
          for (int64_t j = 0; j <= i; ++j) (*last_probs)[head * n + j] = static_cast<float>(scores[j] / total);
        }
        for (int64_t j = 0; j <= i; ++j) {
          for (int64_t e = 0; e < d; ++e) {
            concat[head * d + e] += static_cast<float>(scores[j] / total) * v[j][kv * d + e];
          }
        }
      }
      out[i] = MatVec(block.wo, config_.width, concat);
    }
    return out;
  }

  // The MLP's output; its hidden vector (the input of w_down) into *hidden_out when given.
  Vec Mlp(const Block& block, const Vec& x, Vec* hidden_out = nullptr) const {
    const int64_t f = config_.d_ff;
    const Vec g = MatVec(block.w_gate, f, x, &block.b_gate);
    const Vec a = MatVec(block.w_up, f, x, &block.b_up);
    Vec hidden(f);
    for (int64_t i = 0; i < f; ++i) {
      const double gate = g[i];
      hidden[i] = static_cast<float>(gate / (1.0 + std::exp(-gate)) * a[i]);
    }
    if (hidden_out != nullptr) *hidden_out = hidden;
    return MatVec(block.w_down, config_.width, hidden, &block.b_down);
  }

  ModelConfig config_;
  kernels::Dtype kv_dtype_;
  Vec tok_emb_, lm_head_, final_norm_, rope_freqs_;
  std::vector<Block> blocks_;
};

}  // namespace niels::daemon::model
