#include "tools/torch/transformer_stages.h"

#include <cmath>
#include <limits>

#include <ATen/ATen.h>

namespace niels::torch_model {

using namespace daemon::model;  // the torch-free model this file converts to and from

torch::Tensor Linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  return at::linear(x, weight, bias);
}

torch::Tensor RopeRotations(const ModelConfig& config) {
  const int64_t half = config.head_dim() / 2;
  const auto f64 = at::TensorOptions().dtype(at::kDouble);
  // inv_freq_i = theta^(-2i/D), i in [0, D/2)
  torch::Tensor inv_freq = at::pow(config.rope_theta, at::arange(0, half, f64) * (-2.0 / config.head_dim()));
  torch::Tensor angles = at::outer(at::arange(0, config.context, f64), inv_freq);  // [T, D/2] f64
  return at::complex(at::cos(angles).to(at::kFloat), at::sin(angles).to(at::kFloat));  // [T, D/2] c64
}

torch::Tensor Embed(const TorchWeights& weights, const torch::Tensor& tokens) {
  return at::embedding(weights.tok_emb, tokens);  // [..., n, C]
}

torch::Tensor RmsNorm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  torch::Tensor inv_rms = at::rsqrt(x.mul(x).mean(-1, /*keepdim=*/true) + eps);  // [..., 1]
  return x * inv_rms * weight;
}

torch::Tensor ApplyRope(const torch::Tensor& x, const torch::Tensor& rope) {
  // The pair (x[2i], x[2i+1]) read as the complex number x[2i] + i x[2i+1]; multiplying by
  // e^{i angle} gives exactly x'[2i] = x[2i] cos - x[2i+1] sin, x'[2i+1] = x[2i] sin + x[2i+1] cos.
  auto shape = x.sizes().vec();
  shape.back() /= 2;
  shape.push_back(2);
  torch::Tensor pairs = at::view_as_complex(x.view(shape));  // [..., n, H, D/2] complex
  torch::Tensor rotated = pairs * rope.unsqueeze(-2);        // rope [..., n, 1, D/2] over heads
  return at::view_as_real(rotated).flatten(-2);               // [..., n, H, D]
}

QueryKeyValue ProjectQkv(const ModelConfig& config, const TorchBlockWeights& block, const torch::Tensor& x,
                         const torch::Tensor& rope) {
  torch::Tensor qkv = Linear(x, block.qkv);  // [..., n, 3C]
  auto shape = qkv.sizes().vec();
  shape.back() = 3;
  shape.push_back(config.heads);
  shape.push_back(config.head_dim());
  qkv = qkv.view(shape);            // [..., n, 3, H, D]: thirds q, k, v; head h = columns [hD, (h+1)D)
  const int64_t third = qkv.dim() - 3;
  torch::Tensor q = ApplyRope(qkv.select(third, 0), rope);  // [..., n, H, D]
  torch::Tensor k = ApplyRope(qkv.select(third, 1), rope);  // [..., n, H, D]
  torch::Tensor v = qkv.select(third, 2);                   // [..., n, H, D]
  return {q.transpose(-3, -2), k.transpose(-3, -2), v.transpose(-3, -2)};  // [..., H, n, D]
}

torch::Tensor CausalMask(int64_t n, int64_t m, int64_t first_pos) {
  return at::ones({n, m}, at::TensorOptions().dtype(at::kBool)).triu(first_pos + 1);  // [n, m]
}

torch::Tensor Attend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                     const torch::Tensor& mask, torch::Tensor* probs) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  torch::Tensor scores = at::matmul(q, k.transpose(-2, -1)) * scale;  // [..., H, n, m]
  if (mask.defined()) scores = scores.masked_fill(mask, -std::numeric_limits<float>::infinity());
  torch::Tensor p = at::softmax(scores, -1);  // [..., H, n, m]
  if (probs != nullptr) *probs = p;
  return at::matmul(p, v);  // [..., H, n, D]
}

torch::Tensor ProjectHeads(const TorchBlockWeights& block, const torch::Tensor& heads) {
  torch::Tensor merged = heads.transpose(-3, -2).flatten(-2);  // [..., n, H, D] -> [..., n, C]
  return Linear(merged, block.proj);                       // [..., n, C]
}

torch::Tensor Attention(const ModelConfig& config, const TorchBlockWeights& block, const torch::Tensor& x,
                        const torch::Tensor& rope) {
  const int64_t n = x.size(-2);
  QueryKeyValue qkv = ProjectQkv(config, block, x, rope);
  return ProjectHeads(block, Attend(qkv.q, qkv.k, qkv.v, CausalMask(n, n, 0)));
}

torch::Tensor FeedForward(const TorchBlockWeights& block, const torch::Tensor& x) {
  torch::Tensor gate = at::silu(Linear(x, block.fc_g_w, block.fc_g_b));  // [..., d_ff]
  torch::Tensor up = Linear(x, block.fc_a_w, block.fc_a_b);             // [..., d_ff]
  return Linear(gate * up, block.fc_out_w, block.fc_out_b);             // [..., C]
}

torch::Tensor Logits(const ModelConfig& config, const TorchWeights& weights, const torch::Tensor& h) {
  return Linear(RmsNorm(h, weights.ln_f, config.rms_norm_eps), weights.tok_emb);  // [..., V]
}

}  // namespace niels::torch_model
