#pragma once
// The stages of the niels_gpt forward pass (docs/ARCHITECTURE.md, "Model math") in libtorch, one
// function each, for the differentiable training forward (ForwardTrain, torch_weights.h) and as an
// independent reference in tests. Inference (nielsd) runs on daemon/kernels instead and loads no
// libtorch. Every function is pure ATen (autograd-friendly, no in-place updates of inputs) and works
// on any leading batch dims.
//
// Shapes: B batch, n new positions, m attended positions, C width, H heads, D = C/H, V vocab.

#include <cstdint>

#include <torch/types.h>

#include "daemon/model/config.h"
#include "tools/torch/torch_weights.h"

namespace niels::torch_model {

// x @ weight^T (+ bias): [..., in] -> [..., out], through at::linear (BLAS gemm).
torch::Tensor Linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias = {});

// RoPE rotations for positions 0..T-1: [T, D/2] complex64, entry (p, i) = e^{i * p * inv_freq_i}
// with inv_freq_i = rope_theta^(-2i/D), angles, cos and sin computed in float64 and stored as
// float32 -- RopeTable (transformer.h) computed with libtorch's functions, as training always has
// (a cos or sin may differ from the C library's in the last float bit).
torch::Tensor RopeRotations(const ModelConfig& config);

// tok_emb[tokens]: [..., n] int64 -> [..., n, C].
torch::Tensor Embed(const TorchWeights& weights, const torch::Tensor& tokens);

// x / sqrt(mean(x^2 over C) + eps) * weight, no bias, no mean subtraction. [..., C] -> [..., C].
torch::Tensor RmsNorm(const torch::Tensor& x, const torch::Tensor& weight, double eps);

// Rotates ADJACENT pairs (x[2i], x[2i+1]) of every head by the angle of its position:
// x [..., n, H, D], rope [..., n, D/2] complex (the rows of RopeTable for these positions).
torch::Tensor ApplyRope(const torch::Tensor& x, const torch::Tensor& rope);

// The attention inputs of one block, per head, with RoPE applied to q and k.
struct QueryKeyValue {
  torch::Tensor q;  // [..., H, n, D]
  torch::Tensor k;  // [..., H, n, D]
  torch::Tensor v;  // [..., H, n, D]
};

// qkv = x @ qkv.weight^T split into thirds, each split into heads: x [..., n, C], rope [..., n, D/2].
QueryKeyValue ProjectQkv(const ModelConfig& config, const TorchBlockWeights& block, const torch::Tensor& x,
                         const torch::Tensor& rope);

// Boolean mask [n, m], true where query i (at position first_pos + i) must NOT see key j (j > first_pos + i).
torch::Tensor CausalMask(int64_t n, int64_t m, int64_t first_pos);

// softmax(q k^T / sqrt(D) masked) v: q [..., H, n, D], k and v [..., H, m, D] -> [..., H, n, D].
// `mask` may be undefined (no masking, e.g. one query at the newest position). If `probs` is not
// null it receives the attention probabilities [..., H, n, m].
torch::Tensor Attend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                     const torch::Tensor& mask, torch::Tensor* probs = nullptr);

// Heads concatenated, then @ proj.weight^T: [..., H, n, D] -> [..., n, C].
torch::Tensor ProjectHeads(const TorchBlockWeights& block, const torch::Tensor& heads);

// Uncached causal self-attention over positions 0..n-1: x [..., n, C] -> [..., n, C].
torch::Tensor Attention(const ModelConfig& config, const TorchBlockWeights& block, const torch::Tensor& x,
                        const torch::Tensor& rope);

// fc_out(silu(fc_g(x)) * fc_a(x)), with biases: [..., C] -> [..., C].
torch::Tensor FeedForward(const TorchBlockWeights& block, const torch::Tensor& x);

// One pre-norm block as two residual lines; `attention` maps RMSNorm1(h) [..., n, C] to [..., n, C]
// (uncached, or reading and writing a KV cache).
template <typename AttentionFn>
torch::Tensor Block(const ModelConfig& config, const TorchBlockWeights& block, const torch::Tensor& h,
                    AttentionFn&& attention) {
  torch::Tensor x = h + attention(RmsNorm(h, block.ln1, config.rms_norm_eps));
  return x + FeedForward(block, RmsNorm(x, block.ln2, config.rms_norm_eps));
}

// RMSNorm_f(h) @ tok_emb^T (the tied lm_head): [..., C] -> [..., V].
torch::Tensor Logits(const ModelConfig& config, const TorchWeights& weights, const torch::Tensor& h);

}  // namespace niels::torch_model
