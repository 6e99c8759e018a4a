// The q4_k, q5_k and q6_k quantizers of quant_blocks.h. They must give the blocks ggml's reference
// quantizers give, bit for bit, so every float operation below is one float32 operation in the
// order ggml's reference performs it (this file is compiled with -ffp-contract=off: no fused
// multiply-add, as in ggml's generic x86-64 build), and ties and out-of-range cases fall as
// ggml's do (NearestInt, the first maximum wins, unsigned 8-bit wrap-around before min(63, .)).

#include <cmath>
#include <cstring>

#include "daemon/kernels/quant_blocks.h"

namespace niels::daemon::kernels {
namespace {

// Below this largest magnitude a q6_k group (or block) counts as all zero (ggml's GROUP_MAX_EPS).
constexpr float kGroupMaxEps = 1e-15f;

int Clamp(int value, int low, int high) { return value < low ? low : value > high ? high : value; }

// Fits x[i] ~ scale * L[i] - min_out (L in [0, nmax], min_out >= 0) for one sub-block, minimizing
// sum w[i] * (scale * L[i] + min - x[i])^2 (min = -min_out <= 0): first with the levels of the
// plain range (max - min) / nmax, then for nstep + 1 trial scales
// (nmax + rmin + rdelta * k) / (max - min) the least-squares scale and min of the levels that
// scale gives; the best fit wins. Returns the scale; L gets the levels. n <= 32.
float FitScaleAndMin(int n, int nmax, const float* x, const float* w, uint8_t* L, float* min_out, float rmin,
                     float rdelta, int nstep) {
  float min = x[0], max = x[0];
  float sum_w = w[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    sum_w += w[i];
    sum_x += w[i] * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    *min_out = -min;
    return 0.0f;
  }
  float iscale = static_cast<float>(nmax) / (max - min);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    L[i] = static_cast<uint8_t>(Clamp(NearestInt(iscale * (x[i] - min)), 0, nmax));
    const float diff = scale * static_cast<float>(L[i]) + min - x[i];
    best_error += w[i] * (diff * diff);
  }
  uint8_t trial[32];
  for (int step = 0; step <= nstep; ++step) {
    iscale = (rmin + rdelta * static_cast<float>(step) + static_cast<float>(nmax)) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = Clamp(NearestInt(iscale * (x[i] - min)), 0, nmax);
      trial[i] = static_cast<uint8_t>(l);
      const float wl = w[i] * static_cast<float>(l);
      sum_l += wl;
      sum_l2 += wl * static_cast<float>(l);
      sum_xl += wl * x[i];
    }
    const float det = sum_w * sum_l2 - sum_l * sum_l;
    if (!(det > 0)) continue;
    float this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
    float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
    if (this_min > 0) {
      this_min = 0;
      this_scale = sum_xl / sum_l2;
    }
    float error = 0;
    for (int i = 0; i < n; ++i) {
      const float diff = this_scale * static_cast<float>(trial[i]) + this_min - x[i];
      error += w[i] * (diff * diff);
    }
    if (error < best_error) {
      std::memcpy(L, trial, static_cast<size_t>(n));
      best_error = error;
      scale = this_scale;
      min = this_min;
    }
  }
  *min_out = -min;
  return scale;
}

// Fits x[i] ~ scale * (L[i] - nmax) (L in [0, 2 nmax)) for one q6_k group, with weights x[i]^2:
// the scale that maps the value of largest magnitude to -nmax, then 18 trial scales around it
// (nmax +- 0.1 k); the least-squares scale of the best trial's levels wins. Returns the scale.
float FitSymmetricScale(int n, int nmax, const float* x, int8_t* L) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.0f;
  }
  auto level = [nmax](float iscale, float v) { return Clamp(NearestInt(iscale * v), -nmax, nmax - 1); };
  // sum w x l and sum w l^2 over the levels of `iscale`, w = x^2.
  auto sums = [&](float iscale, float* sum_lx, float* sum_l2) {
    *sum_lx = 0;
    *sum_l2 = 0;
    for (int i = 0; i < n; ++i) {
      const float l = static_cast<float>(level(iscale, x[i]));
      const float w = x[i] * x[i];
      *sum_lx += w * x[i] * l;
      *sum_l2 += w * l * l;
    }
  };
  float iscale = static_cast<float>(-nmax) / max;
  for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(nmax + level(iscale, x[i]));
  float sum_lx, sum_l2;
  sums(iscale, &sum_lx, &sum_l2);
  float scale = sum_l2 != 0 ? sum_lx / sum_l2 : 0.0f;
  float best = scale * sum_lx;
  for (int step = -9; step <= 9; ++step) {
    if (step == 0) continue;
    iscale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(step)) / max;
    sums(iscale, &sum_lx, &sum_l2);
    if (sum_l2 > 0 && sum_lx * sum_lx > best * sum_l2) {
      for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(nmax + level(iscale, x[i]));
      scale = sum_lx / sum_l2;
      best = scale * sum_lx;
    }
  }
  return scale;
}

// The sub-block fits and the 6-bit scales and mins shared by q4_k and q5_k (nmax 15 or 31): fills
// d, dmin and the 12 scale bytes, and L with each value's level in [0, nmax].
void FitK4OrK5(const float* x, int nmax, float rmin, float rdelta, int nstep, uint16_t* d_out, uint16_t* dmin_out,
               uint8_t* packed, uint8_t* L) {
  float scales[8], mins[8], w[32];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; ++j) {
    const float* xs = x + 32 * j;
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += xs[l] * xs[l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) w[l] = av_x + std::fabs(xs[l]);
    scales[j] = FitScaleAndMin(32, nmax, xs, w, L + 32 * j, &mins[j], rmin, rdelta, nstep);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
  const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
  for (int j = 0; j < 8; ++j) {
    uint8_t ls = static_cast<uint8_t>(NearestInt(inv_scale * scales[j]));
    uint8_t lm = static_cast<uint8_t>(NearestInt(inv_min * mins[j]));
    ls = ls < 63 ? ls : 63;
    lm = lm < 63 ? lm : 63;
    if (j < 4) {
      packed[j] = ls;
      packed[j + 4] = lm;
    } else {
      packed[j + 4] = static_cast<uint8_t>((ls & 15) | (lm & 15) << 4);
      packed[j - 4] |= static_cast<uint8_t>((ls >> 4) << 6);
      packed[j] |= static_cast<uint8_t>((lm >> 4) << 6);
    }
  }
  *d_out = FloatToHalf(max_scale / 63.0f);
  *dmin_out = FloatToHalf(max_min / 63.0f);
  // The values again, with the quantized scales and mins (a sub-block whose scale is 0 keeps its
  // levels from the fit).
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    ScaleMinK4(packed, j, &sc, &m);
    const float d = HalfToFloat(*d_out) * static_cast<float>(sc);
    if (d == 0) continue;
    const float dm = HalfToFloat(*dmin_out) * static_cast<float>(m);
    for (int i = 0; i < 32; ++i) L[32 * j + i] = static_cast<uint8_t>(Clamp(NearestInt((x[32 * j + i] + dm) / d), 0, nmax));
  }
}

}  // namespace

void QuantizeQ4KBlock(const float* x, BlockQ4K* out) {
  uint8_t L[256];
  std::memset(out->scales, 0, sizeof out->scales);
  FitK4OrK5(x, 15, -1.0f, 0.1f, 20, &out->d, &out->dmin, out->scales, L);
  for (int c = 0; c < 4; ++c) {
    for (int l = 0; l < 32; ++l) out->qs[32 * c + l] = static_cast<uint8_t>(L[64 * c + l] | L[64 * c + 32 + l] << 4);
  }
}

void QuantizeQ5KBlock(const float* x, BlockQ5K* out) {
  uint8_t L[256];
  std::memset(out->scales, 0, sizeof out->scales);
  FitK4OrK5(x, 31, -0.5f, 0.1f, 15, &out->d, &out->dmin, out->scales, L);
  std::memset(out->qh, 0, sizeof out->qh);
  for (int c = 0; c < 4; ++c) {
    for (int l = 0; l < 32; ++l) {
      const int low = L[64 * c + l], high = L[64 * c + 32 + l];
      out->qh[l] |= static_cast<uint8_t>((low >> 4) << (2 * c) | (high >> 4) << (2 * c + 1));
      out->qs[32 * c + l] = static_cast<uint8_t>((low & 15) | (high & 15) << 4);
    }
  }
}

void QuantizeQ6KBlock(const float* x, BlockQ6K* out) {
  int8_t L[256];
  float scales[16];
  float max_scale = 0, max_abs_scale = 0;
  for (int g = 0; g < 16; ++g) {
    scales[g] = FitSymmetricScale(16, 32, x + 16 * g, L + 16 * g);
    if (std::fabs(scales[g]) > max_abs_scale) {
      max_abs_scale = std::fabs(scales[g]);
      max_scale = scales[g];
    }
  }
  std::memset(out, 0, sizeof *out);
  if (max_abs_scale < kGroupMaxEps) return;  // all zero (d = +0)
  const float iscale = -128.0f / max_scale;
  out->d = FloatToHalf(1 / iscale);
  for (int g = 0; g < 16; ++g) {
    const int s = NearestInt(iscale * scales[g]);
    out->scales[g] = static_cast<int8_t>(s < 127 ? s : 127);
  }
  for (int g = 0; g < 16; ++g) {
    const float d = HalfToFloat(out->d) * static_cast<float>(out->scales[g]);
    if (d == 0) continue;
    for (int i = 0; i < 16; ++i) L[16 * g + i] = static_cast<int8_t>(Clamp(NearestInt(x[16 * g + i] / d), -32, 31) + 32);
  }
  for (int h = 0; h < 2; ++h) {
    const int8_t* Lh = L + 128 * h;
    for (int l = 0; l < 32; ++l) {
      out->ql[64 * h + l] = static_cast<uint8_t>((Lh[l] & 15) | (Lh[l + 64] & 15) << 4);
      out->ql[64 * h + l + 32] = static_cast<uint8_t>((Lh[l + 32] & 15) | (Lh[l + 96] & 15) << 4);
      out->qh[32 * h + l] = static_cast<uint8_t>((Lh[l] >> 4) | (Lh[l + 32] >> 4) << 2 | (Lh[l + 64] >> 4) << 4 |
                                                 (Lh[l + 96] >> 4) << 6);
    }
  }
}

}  // namespace niels::daemon::kernels
