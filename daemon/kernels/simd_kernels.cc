#include "daemon/kernels/simd_kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define NIELS_KERNELS_X86 1
#endif

namespace niels::daemon::kernels::simd {
namespace {

// Rows of x up to which DotRows runs row by row (a matrix-vector product per row); above it, the
// GEMM-shaped tile.
constexpr int64_t kMatVecRows = 8;

// The arguments of DotRows, passed on to whichever implementation runs.
struct DotRowsArgs {
  const float* w;
  int64_t in;
  const float* x;
  int64_t rows;
  const float* bias;
  float* y;
  int64_t y_stride;
};

// 8 independent partial sums, which compilers vectorize without reassociating (each lane is its
// own sum), added in a fixed order at the end.
float DotPortable(const float* w, const float* x, int64_t in) {
  float lanes[8] = {};
  int64_t i = 0;
  for (; i + 8 <= in; i += 8) {
    for (int k = 0; k < 8; ++k) lanes[k] += w[i + k] * x[i + k];
  }
  for (; i < in; ++i) lanes[i % 8] += w[i] * x[i];
  return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
}

void DotRowsPortable(const DotRowsArgs& a, int64_t o_begin, int64_t o_end) {
  for (int64_t o = o_begin; o < o_end; ++o) {
    for (int64_t r = 0; r < a.rows; ++r) {
      const float sum = DotPortable(a.w + o * a.in, a.x + r * a.in, a.in);
      a.y[r * a.y_stride + o] = a.bias != nullptr ? sum + a.bias[o] : sum;
    }
  }
}

void WeightedSumRowsPortable(const float* p, const float* rows, int64_t m, int64_t n, float* out, bool accumulate) {
  if (!accumulate) {
    for (int64_t i = 0; i < n; ++i) out[i] = 0.0f;
  }
  for (int64_t j = 0; j < m; ++j) {
    for (int64_t i = 0; i < n; ++i) out[i] += p[j] * rows[j * n + i];
  }
}

#ifdef NIELS_KERNELS_X86

// {sum of a's 8 lanes, of b's, of c's, of d's}.
__attribute__((target("avx2,fma"))) inline __m128 HorizontalSum4(__m256 a, __m256 b, __m256 c, __m256 d) {
  const __m256 ab_cd = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
  return _mm_add_ps(_mm256_castps256_ps128(ab_cd), _mm256_extractf128_ps(ab_cd, 1));
}

// Lanes i..i+7 that lie below n: all ones where loaded, zero elsewhere.
__attribute__((target("avx2,fma"))) inline __m256i TailMask(int64_t i, int64_t n) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int32_t>(n - i)), lane);
}

// Dot products of the 4 consecutive rows at w (row length `in`) with x: 4 streams through memory
// at once. The last in % 8 columns are loaded under a mask, so nothing past a row is read.
__attribute__((target("avx2,fma"))) inline __m128 Dot4Avx2(const float* w, int64_t in, const float* x) {
  const float* w0 = w;
  const float* w1 = w0 + in;
  const float* w2 = w1 + in;
  const float* w3 = w2 + in;
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  int64_t i = 0;
  for (; i + 8 <= in; i += 8) {
    const __m256 xv = _mm256_loadu_ps(x + i);
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w0 + i), xv, a0);
    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(w1 + i), xv, a1);
    a2 = _mm256_fmadd_ps(_mm256_loadu_ps(w2 + i), xv, a2);
    a3 = _mm256_fmadd_ps(_mm256_loadu_ps(w3 + i), xv, a3);
  }
  if (i < in) {
    const __m256i mask = TailMask(i, in);
    const __m256 xv = _mm256_maskload_ps(x + i, mask);
    a0 = _mm256_fmadd_ps(_mm256_maskload_ps(w0 + i, mask), xv, a0);
    a1 = _mm256_fmadd_ps(_mm256_maskload_ps(w1 + i, mask), xv, a1);
    a2 = _mm256_fmadd_ps(_mm256_maskload_ps(w2 + i, mask), xv, a2);
    a3 = _mm256_fmadd_ps(_mm256_maskload_ps(w3 + i, mask), xv, a3);
  }
  return HorizontalSum4(a0, a1, a2, a3);
}

// The same sum as one lane of Dot4Avx2 (same lanes, same order), for a single row.
__attribute__((target("avx2,fma"))) inline float Dot1Avx2(const float* w, int64_t in, const float* x) {
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= in; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(w + i), _mm256_loadu_ps(x + i), acc);
  if (i < in) {
    const __m256i mask = TailMask(i, in);
    acc = _mm256_fmadd_ps(_mm256_maskload_ps(w + i, mask), _mm256_maskload_ps(x + i, mask), acc);
  }
  const __m256 zero = _mm256_setzero_ps();
  return _mm_cvtss_f32(HorizontalSum4(acc, zero, zero, zero));
}

// row[k] += wv * xk for the 3 rows of x of a Dot4x3Avx2 tile.
__attribute__((target("avx2,fma"))) inline void Fma3(__m256 wv, __m256 xv0, __m256 xv1, __m256 xv2, __m256* row) {
  row[0] = _mm256_fmadd_ps(wv, xv0, row[0]);
  row[1] = _mm256_fmadd_ps(wv, xv1, row[1]);
  row[2] = _mm256_fmadd_ps(wv, xv2, row[2]);
}

// The GEMM-shaped tile: the dot products of 4 consecutive weight rows with 3 rows of x, 12
// accumulators in registers, so each loaded weight vector feeds 3 FMAs and each x vector 4. Every
// one of the 12 sums runs through exactly the lanes and the order of Dot4Avx2 (one FMA per 8
// columns, the same masked tail, the same HorizontalSum4), so a result does not depend on whether
// its row of x went through this tile or through Dot4Avx2: batch invariance (simd_kernels.h).
__attribute__((target("avx2,fma"))) inline void Dot4x3Avx2(const float* w, int64_t in, const float* x,
                                                           __m128 out[3]) {
  const float* w0 = w;
  const float* w1 = w0 + in;
  const float* w2 = w1 + in;
  const float* w3 = w2 + in;
  const float* x0 = x;
  const float* x1 = x0 + in;
  const float* x2 = x1 + in;
  __m256 acc[4][3];
  for (auto& row : acc) {
    for (__m256& lane : row) lane = _mm256_setzero_ps();
  }
  int64_t i = 0;
  for (; i + 8 <= in; i += 8) {
    const __m256 xv0 = _mm256_loadu_ps(x0 + i), xv1 = _mm256_loadu_ps(x1 + i), xv2 = _mm256_loadu_ps(x2 + i);
    Fma3(_mm256_loadu_ps(w0 + i), xv0, xv1, xv2, acc[0]);
    Fma3(_mm256_loadu_ps(w1 + i), xv0, xv1, xv2, acc[1]);
    Fma3(_mm256_loadu_ps(w2 + i), xv0, xv1, xv2, acc[2]);
    Fma3(_mm256_loadu_ps(w3 + i), xv0, xv1, xv2, acc[3]);
  }
  if (i < in) {
    const __m256i mask = TailMask(i, in);
    const __m256 xv0 = _mm256_maskload_ps(x0 + i, mask), xv1 = _mm256_maskload_ps(x1 + i, mask),
                 xv2 = _mm256_maskload_ps(x2 + i, mask);
    Fma3(_mm256_maskload_ps(w0 + i, mask), xv0, xv1, xv2, acc[0]);
    Fma3(_mm256_maskload_ps(w1 + i, mask), xv0, xv1, xv2, acc[1]);
    Fma3(_mm256_maskload_ps(w2 + i, mask), xv0, xv1, xv2, acc[2]);
    Fma3(_mm256_maskload_ps(w3 + i, mask), xv0, xv1, xv2, acc[3]);
  }
  for (int r = 0; r < 3; ++r) out[r] = HorizontalSum4(acc[0][r], acc[1][r], acc[2][r], acc[3][r]);
}

__attribute__((target("avx2,fma"))) void DotRowsAvx2(const DotRowsArgs& a, int64_t o_begin, int64_t o_end) {
  // Up to kMatVecRows rows of x: one weight-row block, then each row of x against it (the weight
  // is the stream that matters). More rows: 3 rows of x per pass through the 4 weight rows.
  const int64_t tiled_rows = a.rows > kMatVecRows ? a.rows / 3 * 3 : 0;
  int64_t o = o_begin;
  for (; o + 4 <= o_end; o += 4) {
    const float* w = a.w + o * a.in;
    const __m128 bias = a.bias != nullptr ? _mm_loadu_ps(a.bias + o) : _mm_setzero_ps();
    int64_t r = 0;
    for (; r < tiled_rows; r += 3) {
      __m128 sums[3];
      Dot4x3Avx2(w, a.in, a.x + r * a.in, sums);
      for (int k = 0; k < 3; ++k) _mm_storeu_ps(a.y + (r + k) * a.y_stride + o, _mm_add_ps(sums[k], bias));
    }
    // The 4 weight rows (4 x 4.5 KiB for in = 1152) stay in L1 for the 2nd..rows-th row of x.
    for (; r < a.rows; ++r) {
      _mm_storeu_ps(a.y + r * a.y_stride + o, _mm_add_ps(Dot4Avx2(w, a.in, a.x + r * a.in), bias));
    }
  }
  for (; o < o_end; ++o) {
    for (int64_t r = 0; r < a.rows; ++r) {
      const float sum = Dot1Avx2(a.w + o * a.in, a.in, a.x + r * a.in);
      a.y[r * a.y_stride + o] = a.bias != nullptr ? sum + a.bias[o] : sum;
    }
  }
}

__attribute__((target("avx2,fma"))) void WeightedSumRowsAvx2(const float* p, const float* rows, int64_t m, int64_t n,
                                                             float* out, bool accumulate) {
  int64_t i = 0;
  // Columns 64 at a time: 8 accumulators stay in registers while the m rows stream past.
  for (; i + 64 <= n; i += 64) {
    __m256 acc[8];
    for (int k = 0; k < 8; ++k) acc[k] = accumulate ? _mm256_loadu_ps(out + i + 8 * k) : _mm256_setzero_ps();
    for (int64_t j = 0; j < m; ++j) {
      const __m256 weight = _mm256_set1_ps(p[j]);
      const float* row = rows + j * n + i;
      for (int k = 0; k < 8; ++k) acc[k] = _mm256_fmadd_ps(weight, _mm256_loadu_ps(row + 8 * k), acc[k]);
    }
    for (int k = 0; k < 8; ++k) _mm256_storeu_ps(out + i + 8 * k, acc[k]);
  }
  // The remaining columns 8 at a time, the last under a mask.
  for (; i < n; i += 8) {
    const __m256i mask = TailMask(i, n);
    __m256 acc = accumulate ? _mm256_maskload_ps(out + i, mask) : _mm256_setzero_ps();
    for (int64_t j = 0; j < m; ++j) {
      acc = _mm256_fmadd_ps(_mm256_set1_ps(p[j]), _mm256_maskload_ps(rows + j * n + i, mask), acc);
    }
    _mm256_maskstore_ps(out + i, mask, acc);
  }
}

#endif  // NIELS_KERNELS_X86

struct Implementation {
  void (*dot_rows)(const DotRowsArgs&, int64_t, int64_t);
  void (*weighted_sum_rows)(const float*, const float*, int64_t, int64_t, float*, bool);
  const char* name;
};

const Implementation kPortable{DotRowsPortable, WeightedSumRowsPortable, "portable"};

Implementation Pick() {
#ifdef NIELS_KERNELS_X86
  __builtin_cpu_init();  // needed when this runs as a static initializer, before main
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    return {DotRowsAvx2, WeightedSumRowsAvx2, "avx2+fma"};
  }
#endif
  return kPortable;
}

const Implementation kPicked = Pick();
Implementation active = kPicked;  // kPicked, or kPortable while a test forces it

}  // namespace

void DotRows(const float* w, int64_t in, const float* x, int64_t rows, const float* bias, float* y,
             int64_t y_stride, int64_t o_begin, int64_t o_end) {
  active.dot_rows({w, in, x, rows, bias, y, y_stride}, o_begin, o_end);
}

void WeightedSumRows(const float* p, const float* rows, int64_t m, int64_t n, float* out, bool accumulate) {
  active.weighted_sum_rows(p, rows, m, n, out, accumulate);
}

const char* Name() { return active.name; }

void ForcePortableForTesting(bool portable) { active = portable ? kPortable : kPicked; }

}  // namespace niels::daemon::kernels::simd
