#include "daemon/model/row_ops.h"

#include <algorithm>
#include <cmath>

#include "daemon/kernels/simd_kernels.h"

namespace niels::daemon::model {

void RmsNorm(const float* x, const float* weight, int64_t rows, int64_t width, double eps, float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * width;
    double sum_sq = 0.0;
    for (int64_t i = 0; i < width; ++i) sum_sq += static_cast<double>(xr[i]) * xr[i];
    const float inv_rms = static_cast<float>(1.0 / std::sqrt(sum_sq / static_cast<double>(width) + eps));
    for (int64_t i = 0; i < width; ++i) out[r * width + i] = xr[i] * inv_rms * weight[i];
  }
}

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

void ApplyRopeHalves(float* x, const float* rope, int64_t heads, int64_t head_dim) {
  const int64_t half = head_dim / 2;
  for (int64_t h = 0; h < heads; ++h) {
    float* head = x + h * head_dim;
    for (int64_t i = 0; i < half; ++i) {
      const float cos = rope[2 * i], sin = rope[2 * i + 1];
      const float a = head[i], b = head[i + half];
      head[i] = a * cos - b * sin;
      head[i + half] = a * sin + b * cos;
    }
  }
}

void UninterleaveHalves(float* x, int64_t heads, int64_t head_dim) {
  constexpr int64_t kMaxHeadDim = 4096;
  float moved[kMaxHeadDim];
  const int64_t half = head_dim / 2;
  for (int64_t h = 0; h < heads; ++h) {
    float* head = x + h * head_dim;
    for (int64_t i = 0; i < half; ++i) {
      moved[i] = head[2 * i];
      moved[half + i] = head[2 * i + 1];
    }
    std::copy(moved, moved + head_dim, head);
  }
}

void AddInto(float* h, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) h[i] += x[i];
}

void EmbedRow(kernels::Matrix tok_emb, int64_t width, int32_t token, float* out) {
  kernels::simd::ToFloat(tok_emb.Row(token, width), tok_emb.dtype, width, out);
}

}  // namespace niels::daemon::model
