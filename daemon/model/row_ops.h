#pragma once
// The per-row operations of the forward pass (docs/ARCHITECTURE.md, "Model math"), used by
// ForwardStep on every row alike, so a token's result is bitwise the same whether it was decoded
// alone, in a batch, or prefilled among others. No libtorch; serial (callers split rows among
// threads).

#include <cstdint>

#include "daemon/kernels/dtype.h"

namespace niels::daemon::model {

// out = x / sqrt(mean(x^2) + eps) * weight for each of `rows` rows of width C (the sum of squares in
// float64, in order).
void RmsNorm(const float* x, const float* weight, int64_t rows, int64_t width, double eps, float* out);

// Rotates the adjacent pairs (x[2i], x[2i+1]) of each of H heads [H, D] by position p's angles:
// x'[2i] = x[2i] cos - x[2i+1] sin, x'[2i+1] = x[2i] sin + x[2i+1] cos. rope: [D/2, 2] of position p.
void ApplyRope(float* x, const float* rope, int64_t heads, int64_t head_dim);
// The same rotations on the pairs (x[i], x[i + D/2]) (Hugging Face's rotate_half).
void ApplyRopeHalves(float* x, const float* rope, int64_t heads, int64_t head_dim);
// Undoes llama.cpp's row order of q and k for its llama architecture in each of H heads [H, D]:
// element 2i goes to i and 2i+1 to D/2 + i (ModelConfig::qk_rows_interleaved). A move of
// values, nothing rounded.
void UninterleaveHalves(float* x, int64_t heads, int64_t head_dim);

// h[i] += x[i], i < n.
void AddInto(float* h, const float* x, int64_t n);

// Row `token` of the embedding matrix as floats: out [C].
void EmbedRow(kernels::Matrix tok_emb, int64_t width, int32_t token, float* out);

}  // namespace niels::daemon::model
