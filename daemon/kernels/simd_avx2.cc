// The AVX2 + FMA + F16C implementation of the kernels: the templates of simd_generic.h over 8-float
// __m256 vectors. Compiled with -mavx2 -mfma -mf16c (daemon/CMakeLists.txt) and called only when the
// CPU has them (simd_kernels.cc). Includes nothing that defines inline functions (simd_table.h).

#if defined(__x86_64__)

#include <immintrin.h>

#include <cstdint>

#include "daemon/kernels/simd_table.h"

namespace niels::daemon::kernels::simd {
namespace {

struct Isa {
  using V = __m256;
  static constexpr int64_t kLanes = 8;
  static constexpr int kTileRows = 3;  // 4 x 3 accumulators + 3 rows of x + 1 weight = 16 registers

  // Lanes 0..n-1 all ones, the others zero.
  static __m256i TailMask(int64_t n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int32_t>(n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static V Zero() { return _mm256_setzero_ps(); }
  static V Set1(float f) { return _mm256_set1_ps(f); }
  static V Add(V a, V b) { return _mm256_add_ps(a, b); }
  static V Mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V Div(V a, V b) { return _mm256_div_ps(a, b); }
  static V Fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V LoadF32(const float* p) { return _mm256_loadu_ps(p); }
  static V LoadF32Tail(const float* p, int64_t n) { return _mm256_maskload_ps(p, TailMask(n)); }
  static V LoadF16(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  static V LoadBF16(const uint16_t* p) {
    const __m256i widened = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(widened, 16));
  }
  // 16-bit elements have no masked load in AVX2: the tail goes through a zeroed buffer.
  static V LoadF16Tail(const uint16_t* p, int64_t n) {
    alignas(16) uint16_t buffer[8] = {};
    for (int64_t k = 0; k < n; ++k) buffer[k] = p[k];
    return LoadF16(buffer);
  }
  static V LoadBF16Tail(const uint16_t* p, int64_t n) {
    alignas(16) uint16_t buffer[8] = {};
    for (int64_t k = 0; k < n; ++k) buffer[k] = p[k];
    return LoadBF16(buffer);
  }
  static void StoreF32(float* p, V v) { _mm256_storeu_ps(p, v); }
  static void StoreF32Tail(float* p, V v, int64_t n) { _mm256_maskstore_ps(p, TailMask(n), v); }
  static void StoreF16(uint16_t* p, V v) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  }
  static void StoreF16Tail(uint16_t* p, V v, int64_t n) {
    alignas(16) uint16_t buffer[8];
    StoreF16(buffer, v);
    for (int64_t k = 0; k < n; ++k) p[k] = buffer[k];
  }
  // {sum of a's 8 lanes, of b's, of c's, of d's}: for each vector ((l0+l1)+(l2+l3)) + ((l4+l5)+(l6+l7)).
  static __m128 Sum4Vector(V a, V b, V c, V d) {
    const __m256 ab_cd = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
    return _mm_add_ps(_mm256_castps256_ps128(ab_cd), _mm256_extractf128_ps(ab_cd, 1));
  }
  static void Sum4(V a, V b, V c, V d, float* out) { _mm_storeu_ps(out, Sum4Vector(a, b, c, d)); }
  static float SumLanes(V v) { return _mm_cvtss_f32(Sum4Vector(v, Zero(), Zero(), Zero())); }

  // The primitives of CephesExp (simd_generic.h).
  static V Min(V a, V b) { return _mm256_min_ps(a, b); }
  static V Max(V a, V b) { return _mm256_max_ps(a, b); }
  static V Round(V v) { return _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static V Fnmadd(V a, V b, V c) { return _mm256_fnmadd_ps(a, b, c); }
  // y * 2^n for integral n in [-150, 128], as two factors 2^(n/2) and 2^(n - n/2) built in the
  // exponent bits (each a normal float), so that subnormal results come out right.
  static V MulPow2(V y, V n) {
    const __m256i ni = _mm256_cvtps_epi32(n);
    const __m256i half = _mm256_srai_epi32(ni, 1);
    const __m256i bias = _mm256_set1_epi32(127);
    const V first = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(half, bias), 23));
    const V second = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_sub_epi32(ni, half), bias), 23));
    return _mm256_mul_ps(_mm256_mul_ps(y, first), second);
  }
  // result, but inf where x > hi, 0 where x < lo and x where x is NaN.
  static V ExpEdges(V result, V x, V hi, V lo) {
    result = _mm256_blendv_ps(result, Set1(__builtin_inff()), _mm256_cmp_ps(x, hi, _CMP_GT_OQ));
    result = _mm256_blendv_ps(result, Zero(), _mm256_cmp_ps(x, lo, _CMP_LT_OQ));
    return _mm256_blendv_ps(result, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  }
  static V Exp(V x);  // CephesExp, defined after simd_generic.h
};
using V = Isa::V;

#define NIELS_KERNELS_SIMD_GENERIC_INCLUDED_BY_AN_ISA_FILE
#include "daemon/kernels/simd_generic.h"
#include "daemon/kernels/simd_attention.h"
#include "daemon/kernels/simd_table_make.h"

inline V Isa::Exp(V x) { return CephesExp(x); }

constexpr KernelTable kTable = MakeKernelTable("avx2+fma");

}  // namespace

const KernelTable& Avx2Table() { return kTable; }

}  // namespace niels::daemon::kernels::simd

#endif  // __x86_64__
