#include "daemon/kernels/row_ops.h"

#include <cmath>

#include "daemon/kernels/simd_kernels.h"

namespace niels::daemon::kernels {

void RmsNorm(const float* x, const float* weight, int64_t rows, int64_t width, float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * width;
    double sum_sq = 0.0;
    for (int64_t i = 0; i < width; ++i) sum_sq += static_cast<double>(xr[i]) * xr[i];
    const float inv_rms = static_cast<float>(1.0 / std::sqrt(sum_sq / static_cast<double>(width) + kRmsNormEps));
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

void AddInto(float* h, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) h[i] += x[i];
}

void EmbedRow(Matrix tok_emb, int64_t width, int32_t token, float* out) {
  simd::ToFloat(tok_emb.Row(token, width), tok_emb.dtype, width, out);
}

void StoreKv(const KvView& cache, int64_t layer, int64_t position, const float* k, const float* v, int64_t heads,
             int64_t head_dim) {
  const int64_t element = DtypeSize(cache.dtype);
  for (int64_t h = 0; h < heads; ++h) {  // storage [H, capacity, D]: head h, row `position`
    const int64_t offset = (h * cache.capacity + position) * head_dim * element;
    simd::FromFloat(k + h * head_dim, head_dim, cache.dtype, static_cast<unsigned char*>(cache.keys[layer]) + offset);
    simd::FromFloat(v + h * head_dim, head_dim, cache.dtype,
                    static_cast<unsigned char*>(cache.values[layer]) + offset);
  }
}

void AttendRow(const float* q, Matrix keys, Matrix values, int64_t m, int64_t head_dim, float* scores,
               bool scores_ready, float* out) {
  if (!scores_ready) simd::DotRows(keys, head_dim, q, head_dim, 1, nullptr, scores, m, 0, m);  // k_j . q
  simd::Softmax(scores, m, static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim))));
  simd::WeightedSumRows(scores, values, m, head_dim, out);  // [D]
}

}  // namespace niels::daemon::kernels
