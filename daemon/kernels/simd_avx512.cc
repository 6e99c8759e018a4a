// The AVX-512 implementation of the kernels: the templates of simd_generic.h over 16-float __m512
// vectors, with masked loads and stores for tails. Compiled with -mavx512f -mavx512bw -mavx512vl
// -mavx512dq -mfma -mf16c (daemon/CMakeLists.txt) and called only when the CPU has them
// (simd_kernels.cc). f16 widens with VCVTPH2PS, bf16 by a 16-bit shift; both accumulate in f32.
// Includes nothing that defines inline functions (simd_table.h).

#if defined(__x86_64__)

#include <immintrin.h>

#include <cstdint>

// GCC 12 warns about the deliberately undefined source operands inside its own AVX-512 intrinsics.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include "daemon/kernels/simd_table.h"

namespace niels::daemon::kernels::simd {
namespace {

struct Isa {
  using V = __m512;
  static constexpr int64_t kLanes = 16;
  // 4 x 6 accumulators + 6 rows of x + 1 weight = 31 of the 32 registers.
  static constexpr int kTileRows = 6;

  static __mmask16 TailMask(int64_t n) { return static_cast<__mmask16>((1u << n) - 1); }
  static V Zero() { return _mm512_setzero_ps(); }
  static V Set1(float f) { return _mm512_set1_ps(f); }
  static V Add(V a, V b) { return _mm512_add_ps(a, b); }
  static V Mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V Div(V a, V b) { return _mm512_div_ps(a, b); }
  static V Fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V LoadF32(const float* p) { return _mm512_loadu_ps(p); }
  static V LoadF32Tail(const float* p, int64_t n) { return _mm512_maskz_loadu_ps(TailMask(n), p); }
  static V LoadF16(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static V LoadF16Tail(const uint16_t* p, int64_t n) { return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(TailMask(n), p)); }
  static V WidenBF16(__m256i bf16) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bf16), 16)); }
  static V LoadBF16(const uint16_t* p) { return WidenBF16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
  static V LoadBF16Tail(const uint16_t* p, int64_t n) { return WidenBF16(_mm256_maskz_loadu_epi16(TailMask(n), p)); }
  static void StoreF32(float* p, V v) { _mm512_storeu_ps(p, v); }
  static void StoreF32Tail(float* p, V v, int64_t n) { _mm512_mask_storeu_ps(p, TailMask(n), v); }
  static void StoreF16(uint16_t* p, V v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  }
  static void StoreF16Tail(uint16_t* p, V v, int64_t n) {
    _mm256_mask_storeu_epi16(p, TailMask(n), _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  }
  // Lanes l and l+8 added, then for each vector ((l0+l1)+(l2+l3)) + ((l4+l5)+(l6+l7)).
  static __m256 Half(V v) { return _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1)); }
  static __m128 Sum4Vector(V a, V b, V c, V d) {
    const __m256 ab_cd = _mm256_hadd_ps(_mm256_hadd_ps(Half(a), Half(b)), _mm256_hadd_ps(Half(c), Half(d)));
    return _mm_add_ps(_mm256_castps256_ps128(ab_cd), _mm256_extractf128_ps(ab_cd, 1));
  }
  static void Sum4(V a, V b, V c, V d, float* out) { _mm_storeu_ps(out, Sum4Vector(a, b, c, d)); }
  static float SumLanes(V v) { return _mm_cvtss_f32(Sum4Vector(v, Zero(), Zero(), Zero())); }

  // The primitives of CephesExp (simd_generic.h); see simd_avx2.cc.
  static V Min(V a, V b) { return _mm512_min_ps(a, b); }
  static V Max(V a, V b) { return _mm512_max_ps(a, b); }
  static V Round(V v) { return _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static V Fnmadd(V a, V b, V c) { return _mm512_fnmadd_ps(a, b, c); }
  static V MulPow2(V y, V n) {
    const __m512i ni = _mm512_cvtps_epi32(n);
    const __m512i half = _mm512_srai_epi32(ni, 1);
    const __m512i bias = _mm512_set1_epi32(127);
    const V first = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(half, bias), 23));
    const V second = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(_mm512_sub_epi32(ni, half), bias), 23));
    return _mm512_mul_ps(_mm512_mul_ps(y, first), second);
  }
  static V ExpEdges(V result, V x, V hi, V lo) {
    result = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, hi, _CMP_GT_OQ), result, Set1(__builtin_inff()));
    result = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ), result, Zero());
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), result, x);
  }
  static V Exp(V x);  // CephesExp, defined after simd_generic.h
};
using V = Isa::V;

#define NIELS_KERNELS_SIMD_GENERIC_INCLUDED_BY_AN_ISA_FILE
#include "daemon/kernels/simd_generic.h"
#include "daemon/kernels/simd_attention.h"
#include "daemon/kernels/simd_table_make.h"

inline V Isa::Exp(V x) { return CephesExp(x); }

constexpr KernelTable kTable = MakeKernelTable("avx512");

}  // namespace

const KernelTable& Avx512Table() { return kTable; }

}  // namespace niels::daemon::kernels::simd

#endif  // __x86_64__
