// The AVX-512 VNNI kernels of the block types: VPDPBUSD multiplies 64 unsigned 8-bit weight levels
// by 64 signed 8-bit activation levels (quant_activations.h) and adds each 4 products into one of
// 16 int32 lanes. Compiled with the AVX-512 flags plus -mavx512vnni (daemon/CMakeLists.txt); called
// only when the CPU has them (simd_kernels.cc). Includes nothing that defines inline functions
// (simd_table.h). Where AMX-INT8 is granted, prefill (16+ activation rows) runs simd_quant_amx.cc's
// tiles instead, and this file's kernels the rows and columns those leave over.
//
// What each (weight row o, activation row r) computes:
//   q8_0, q4_0, q5_0 (Block32Rows: the lanes are 16 weight rows; per 32-block b):
//     s_b = the exact int32 dot of the block's levels with q (VPDPBUSD over 4 values per lane with
//           the offset 128, 8 or 16 undone by `starts`, quant_activations.h, then the 8 lanes of a row
//           summed as integers)
//     acc = fma(float(s_b), d_w * d_x, acc)        b = 0, 1, ... in order; y = acc + bias
//   This chain has one float multiply and one fma per block and nothing per lane, so AMX's
//   TDPBSSD (an exact int32 per block, simd_quant_amx.cc) can follow it bit for bit.
//   q4_k, q5_k, q6_k (Block256Rows: 4 weight rows at a time; a unit = one 256-block in 4 steps of
//   64 values; per block):
//     A = the 16 lanes of sum over the steps of VPDPWSSD(VPDPBUSD(starts or 0, w, q), scale of the
//         lane's sub-block / group) added up = sum_g sc_g * (exact dot of group g)   (int32, exact)
//     M = sum_k m_k s_k (q4_k, q5_k): m_k the min of sub-block k, s_k the sum of its activation
//         levels (exact)
//     block = float(A) * d; block = fma(-float(M), dmin, block) (q4_k, q5_k)
//     acc = fma(block, d_x, acc)                  blocks in order; y = acc + bias
//   (the chain simd_quant_amx.cc's K kernels follow too).
// Every float product and fma is one rounding.

#if defined(__x86_64__)

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include "daemon/kernels/simd_table.h"

namespace niels::daemon::kernels::simd {
namespace {

#define NIELS_KERNELS_SIMD_QUANT_INCLUDED_BY_AN_ISA_FILE
#include "daemon/kernels/simd_quant_tile.h"

uint16_t LoadU16(const unsigned char* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
float HalfAt(const unsigned char* p) { return _cvtsh_ss(LoadU16(p)); }

// q8_0, q4_0 and q5_0 with the lanes over weight rows: 16 weight rows at a time, and per 32-block b
// the exact int32 dot s of each with one activation row, folded as acc = fma(float(s), d_w * d_x,
// acc) in block order (the chain simd_quant_amx.cc follows too; see the top of this file).
template <Block32Type kType>
struct Block32Rows {
  static constexpr int64_t kBlockBytes = kType == Block32Type::kQ8_0 ? 34 : kType == Block32Type::kQ4_0 ? 18 : 22;

  // Weight rows p and q's levels of one block as unsigned bytes in value order, p's in the lower
  // 256 bits: q8_0's w + 128, q4_0's nibbles (w + 8), q5_0's nibbles and fifth bits (w + 16).
  static __m512i Levels(const unsigned char* p, const unsigned char* q) {
    if constexpr (kType != Block32Type::kQ8_0) {
      constexpr int kNibbles = kType == Block32Type::kQ4_0 ? 2 : 6;  // q5_0: d, qh[4], then qs
      const __m512i both = _mm512_castsi256_si512(_mm256_set_m128i(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + kNibbles)),
                                                                   _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + kNibbles))));
      // 128-bit lanes [p, p, q, q]; the odd ones shifted down a nibble.
      const __m512i spread = _mm512_shuffle_i64x2(both, both, 0x50);
      const __m512i shifted = _mm512_srlv_epi64(spread, _mm512_set_epi64(4, 4, 0, 0, 4, 4, 0, 0));
      const __m512i nibbles = _mm512_and_si512(shifted, _mm512_set1_epi8(0x0f));
      if constexpr (kType == Block32Type::kQ4_0) return nibbles;
      // q5_0: bit i of p's qh is the fifth bit of its value i (byte i), q's of byte 32 + i.
      uint32_t p_bits, q_bits;
      std::memcpy(&p_bits, p + 2, sizeof p_bits);
      std::memcpy(&q_bits, q + 2, sizeof q_bits);
      const __mmask64 fifth = _cvtu64_mask64(p_bits | static_cast<uint64_t>(q_bits) << 32);
      return _mm512_or_si512(nibbles, _mm512_maskz_mov_epi8(fifth, _mm512_set1_epi8(16)));
    } else {
      const __m256i low = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2));
      const __m256i high = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 2));
      return _mm512_xor_si512(_mm512_inserti64x4(_mm512_castsi256_si512(low), high, 1), _mm512_set1_epi8(-128));
    }
  }

  // v[k]: lanes 0-7 the 8 partial sums of weight row 2k, lanes 8-15 those of row 2k + 1. Returns
  // lane n = the sum of row n's (exact: integers).
  static __m512i SumRows(const __m512i (&v)[8]) {
    __m512i u[4];
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {  // 128-bit lane i of u[k]: 4 partials of row 4k + i
      u[k] = _mm512_add_epi32(_mm512_shuffle_i32x4(v[2 * k], v[2 * k + 1], 0x88),
                              _mm512_shuffle_i32x4(v[2 * k], v[2 * k + 1], 0xdd));
    }
    // 128-bit lane i: 2 partials of row i, 2 of row 4 + i (w0); of rows 8 + i, 12 + i (w1).
    const __m512i w0 = _mm512_add_epi32(_mm512_unpacklo_epi64(u[0], u[1]), _mm512_unpackhi_epi64(u[0], u[1]));
    const __m512i w1 = _mm512_add_epi32(_mm512_unpacklo_epi64(u[2], u[3]), _mm512_unpackhi_epi64(u[2], u[3]));
    const __m512i first = _mm512_set_epi32(30, 26, 22, 18, 28, 24, 20, 16, 14, 10, 6, 2, 12, 8, 4, 0);
    const __m512i second = _mm512_add_epi32(first, _mm512_set1_epi32(1));
    return _mm512_add_epi32(_mm512_permutex2var_epi32(w0, first, w1), _mm512_permutex2var_epi32(w0, second, w1));
  }

  // Weight rows o .. o + n - 1 (n <= 16) against activation rows r .. r + RN - 1.
  template <int RN>
  static void Tile(const QuantDotArgs& a, int64_t o, int n, int64_t r) {
    const auto* w0 = static_cast<const unsigned char*>(a.w) + o * a.w_row_bytes;
    const unsigned char* w[16];  // rows past n repeat the last one (read, never stored)
#pragma GCC unroll 16
    for (int k = 0; k < 16; ++k) w[k] = w0 + (k < n ? k : n - 1) * a.w_row_bytes;
    const __m512i offsets = _mm512_mullo_epi32(_mm512_min_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                                                _mm512_set1_epi32(n - 1)),
                                               _mm512_set1_epi32(static_cast<int>(a.w_row_bytes)));
    XRow x[RN];
    __m512 acc[RN];
#pragma GCC unroll 8
    for (int j = 0; j < RN; ++j) {
      x[j] = XRowAt(a, r + j);
      acc[j] = _mm512_setzero_ps();
    }
    const int64_t blocks = a.in / 32;
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t at = b * kBlockBytes;
      __m512i levels[8];
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) {
        __builtin_prefetch(w[2 * k] + at + 512, 0, 2);
        __builtin_prefetch(w[2 * k + 1] + at + 512, 0, 2);
        levels[k] = Levels(w[2 * k] + at, w[2 * k + 1] + at);
      }
      const __m512i halves = _mm512_i32gather_epi32(_mm512_add_epi32(offsets, _mm512_set1_epi32(static_cast<int>(at))), w0, 1);
      const __m512 dw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(halves));
#pragma GCC unroll 8
      for (int j = 0; j < RN; ++j) {
        const __m512i q = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[j].q + 32 * b)));
        const __m512i start = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[j].starts + 8 * b)));
        __m512i partial[8];
#pragma GCC unroll 8
        for (int k = 0; k < 8; ++k) partial[k] = _mm512_dpbusd_epi32(start, levels[k], q);
        const __m512 s = _mm512_cvtepi32_ps(SumRows(partial));
        acc[j] = _mm512_fmadd_ps(s, _mm512_mul_ps(dw, _mm512_set1_ps(x[j].d[8 * b])), acc[j]);
      }
    }
    const __mmask16 mask = static_cast<__mmask16>((1u << n) - 1);
#pragma GCC unroll 8
    for (int j = 0; j < RN; ++j) {
      __m512 out = acc[j];
      if (a.bias != nullptr) out = _mm512_add_ps(out, _mm512_maskz_loadu_ps(mask, a.bias + o));
      _mm512_mask_storeu_ps(a.y + (r + j) * a.y_stride + o, mask, out);
    }
  }

  static void Rows(const QuantDotArgs& a, int64_t o_begin, int64_t o_end, int64_t r_begin, int64_t r_end) {
    for (int64_t o = o_begin; o < o_end; o += 16) {
      const int n = static_cast<int>(o_end - o < 16 ? o_end - o : 16);
      int64_t r = r_begin;
      for (; r + 4 <= r_end; r += 4) Tile<4>(a, o, n, r);
      switch (r_end - r) {
        case 3: Tile<3>(a, o, n, r); break;
        case 2: Tile<2>(a, o, n, r); break;
        case 1: Tile<1>(a, o, n, r); break;
        default: break;
      }
    }
  }
  static void Dot(const QuantDotArgs& a, int64_t o_begin, int64_t o_end) { Rows(a, o_begin, o_end, 0, a.rows); }
};

// The six-bit scales and mins of a q4_k / q5_k block (quant_blocks.h ScaleMinK4), as 8 bytes each.
void ScalesAndMinsK4(const unsigned char* packed, uint64_t* scales, uint64_t* mins) {
  uint32_t u[3];
  std::memcpy(u, packed, 12);
  const uint32_t scale_low = u[0] & 0x3f3f3f3f, min_low = u[1] & 0x3f3f3f3f;
  const uint32_t scale_high = (u[2] & 0x0f0f0f0f) | ((u[0] >> 2) & 0x30303030);
  const uint32_t min_high = ((u[2] >> 4) & 0x0f0f0f0f) | ((u[1] >> 2) & 0x30303030);
  *scales = scale_low | static_cast<uint64_t>(scale_high) << 32;
  *mins = min_low | static_cast<uint64_t>(min_high) << 32;
}

// q4_k, q5_k, q6_k: a unit is one 256-block, in 4 steps of 64 values (16 lanes of 4).
template <int kType>  // 0 q4_k, 1 q5_k, 2 q6_k
struct Block256Kernel {
  static constexpr bool kMins = kType != 2;
  static constexpr int64_t kUnit = 256, kTailUnit = 0;
  static constexpr int64_t kUnitBytes = kType == 0 ? 144 : kType == 1 ? 176 : 210;

  // What one weight row's unit needs across its steps.
  struct Row {
    __m512i scales;  // int32 lanes: the 8 sub-block scales (q4_k, q5_k) or 16 group scales (q6_k), < 2^15
    __m128i mins;    // int16: the 8 sub-block mins (q4_k, q5_k)
    __m512i high;    // q5_k's qh or q6_k's qh of the current half, in both 256-bit halves
    float d, dmin;
  };

  static void Prepare(const unsigned char* p, Row* row) {
    if constexpr (kMins) {
      uint64_t scales, mins;
      ScalesAndMinsK4(p + 4, &scales, &mins);
      row->scales = _mm512_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<long long>(scales)));
      row->mins = _mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<long long>(mins)));
      uint32_t halves;
      std::memcpy(&halves, p, 4);
      const __m128 d_dmin = _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(halves)));
      row->d = _mm_cvtss_f32(d_dmin);
      row->dmin = _mm_cvtss_f32(_mm_movehdup_ps(d_dmin));
      if constexpr (kType == 1) row->high = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 16)));
    } else {
      // Sign-extended int8 scales, the upper 16 bits of each lane cleared for VPDPWSSD.
      const __m512i wide = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 192)));
      row->scales = _mm512_and_si512(wide, _mm512_set1_epi32(0xffff));
      row->d = HalfAt(p + 208);
    }
  }

  // Step s < 4: the 64 weight levels (unsigned bytes, value order) and each lane's scale.
  static __m512i Levels(const unsigned char* p, Row* row, int s, __m512i* scale) {
    if constexpr (kMins) {
      const unsigned char* qs = p + (kType == 0 ? 16 : 48) + 32 * s;
      const __m512i both = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs)));
      // Low nibbles (sub-block 2s) in the lower half, high nibbles (2s + 1) in the upper.
      const __m512i nibble_shift = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(4), 1);
      __m512i levels = _mm512_and_si512(_mm512_srlv_epi16(both, nibble_shift), _mm512_set1_epi8(0x0f));
      if constexpr (kType == 1) {  // + 16 * bit 2s (lower half) / 2s + 1 (upper half) of qh
        const __m512i bit_shift = _mm512_inserti64x4(_mm512_set1_epi16(static_cast<short>(2 * s)),
                                                     _mm256_set1_epi16(static_cast<short>(2 * s + 1)), 1);
        const __m512i bits = _mm512_slli_epi16(_mm512_srlv_epi16(row->high, bit_shift), 4);
        levels = _mm512_ternarylogic_epi32(levels, bits, _mm512_set1_epi8(0x10), 0xf8);  // levels | (bits & 0x10)
      }
      const __m512i index = _mm512_inserti64x4(_mm512_set1_epi32(2 * s), _mm256_set1_epi32(2 * s + 1), 1);
      *scale = _mm512_permutexvar_epi32(index, row->scales);
      return levels;
    } else {
      // Half h = s / 2: ql[64h .. 64h + 63] holds values 128h + (0..63) in its low nibbles (step
      // 2h) and 128h + (64..127) in its high ones (step 2h + 1); qh[32h .. 32h + 31] their top bits.
      const int h = s / 2, upper = s % 2;
      if (upper == 0) row->high = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 128 + 32 * h)));
      const __m512i ql = _mm512_loadu_si512(p + 64 * h);
      const __m512i low = _mm512_and_si512(upper != 0 ? _mm512_srli_epi16(ql, 4) : ql, _mm512_set1_epi8(0x0f));
      // Values 0..31 of the step take qh bits 4 * upper + (0, 1), values 32..63 bits 4 * upper + (2, 3).
      const __m512i bit_shift = _mm512_inserti64x4(_mm512_set1_epi16(static_cast<short>(4 * upper)),
                                                   _mm256_set1_epi16(static_cast<short>(4 * upper + 2)), 1);
      const __m512i bits = _mm512_slli_epi16(_mm512_srlv_epi16(row->high, bit_shift), 4);
      const __m512i levels = _mm512_ternarylogic_epi32(low, bits, _mm512_set1_epi8(0x30), 0xf8);
      // Lane l covers values 4l .. 4l + 3 of the step: group 4s + l / 4.
      const __m512i index = _mm512_add_epi32(_mm512_set1_epi32(4 * s),
                                             _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0));
      *scale = _mm512_permutexvar_epi32(index, row->scales);
      return levels;
    }
  }

  // One weight row's unit (at p) against RN activation rows: each row's 16 lanes of
  // sum_steps VPDPWSSD(VPDPBUSD(..), scales) into a[j] (their total is A) and (q4_k, q5_k) the 4
  // lanes of VPMADDWD(sums, mins) into m[j] (their total is M). The row's 4 steps of levels and
  // scales are unpacked once and stay in registers while each activation row runs them.
  template <int RN>
  static void Sums(const unsigned char* p, const XRow (&x)[RN], int64_t u, Row* row, __m512i (&a)[RN], __m128i (&m)[RN]) {
    Prepare(p, row);
    __m512i levels[4], scales[4];
#pragma GCC unroll 4
    for (int s = 0; s < 4; ++s) levels[s] = Levels(p, row, s, &scales[s]);
#pragma GCC unroll 4
    for (int j = 0; j < RN; ++j) {
      __m512i sum = _mm512_setzero_si512();
#pragma GCC unroll 4
      for (int s = 0; s < 4; ++s) {
        const __m512i q = _mm512_loadu_si512(x[j].q + 256 * u + 64 * s);
        const __m512i start = kMins ? _mm512_setzero_si512() : _mm512_loadu_si512(x[j].starts + 64 * u + 16 * s);
        sum = _mm512_dpwssd_epi32(sum, _mm512_dpbusd_epi32(start, levels[s], q), scales[s]);
      }
      a[j] = sum;
      if constexpr (kMins) {
        const __m128i block_sums = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x[j].sums + 8 * u));
        m[j] = _mm_madd_epi16(block_sums, row->mins);
      }
    }
  }
};

// The totals of 4 vectors' int32 lanes: lane i = the sum of v_i's (exact).
__m128i Totals4(__m512i v0, __m512i v1, __m512i v2, __m512i v3) {
  auto half = [](__m512i v) { return _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1)); };
  const __m256i all = _mm256_hadd_epi32(_mm256_hadd_epi32(half(v0), half(v1)), _mm256_hadd_epi32(half(v2), half(v3)));
  return _mm_add_epi32(_mm256_castsi256_si128(all), _mm256_extracti128_si256(all, 1));
}

// q4_k, q5_k, q6_k by 4 weight rows at a time (the lanes of a __m128), one chain per (weight row,
// activation row) over the 256-blocks in order: A and M totalled as integers, then
//   block = float(A) * d; block = fma(-float(M), dmin, block); acc = fma(block, d_x, acc).
template <int kType>
struct Block256Rows {
  using K = Block256Kernel<kType>;

  // Weight rows o .. o + n - 1 (n <= 4) against activation rows r .. r + RN - 1.
  template <int RN>
  static void Tile(const QuantDotArgs& a, int64_t o, int n, int64_t r, bool prefetch) {
    const auto* w0 = static_cast<const unsigned char*>(a.w) + o * a.w_row_bytes;
    const unsigned char* w[4];  // rows past n repeat the last one (read, never stored)
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i) w[i] = w0 + (i < n ? i : n - 1) * a.w_row_bytes;
    // With `prefetch`, the same unit of the weight rows kPrefetchRows ahead is asked into L2.
    const unsigned char* ahead = prefetch ? w0 + kPrefetchRows * a.w_row_bytes : w0;
    XRow x[RN];
    __m128 acc[RN];
#pragma GCC unroll 4
    for (int j = 0; j < RN; ++j) {
      x[j] = XRowAt(a, r + j);
      acc[j] = _mm_setzero_ps();
    }
    const int64_t units = a.in / 256;
    for (int64_t u = 0; u < units; ++u) {
      __m512i sums[4][RN];
      __m128i mins[4][RN];
      alignas(16) float d[4], dmin[4];
#pragma GCC unroll 4
      for (int i = 0; i < 4; ++i) {
#pragma GCC unroll 4
        for (int64_t line = 0; line < K::kUnitBytes; line += 64) {
          __builtin_prefetch(ahead + i * a.w_row_bytes + u * K::kUnitBytes + line, /*rw=*/0, /*locality=*/2);
        }
        typename K::Row row;
        K::template Sums<RN>(w[i] + u * K::kUnitBytes, x, u, &row, sums[i], mins[i]);
        d[i] = row.d;
        dmin[i] = row.dmin;
      }
#pragma GCC unroll 4
      for (int j = 0; j < RN; ++j) {
        __m128 block = _mm_mul_ps(_mm_cvtepi32_ps(Totals4(sums[0][j], sums[1][j], sums[2][j], sums[3][j])), _mm_load_ps(d));
        if constexpr (K::kMins) {
          const __m128i m = _mm_hadd_epi32(_mm_hadd_epi32(mins[0][j], mins[1][j]), _mm_hadd_epi32(mins[2][j], mins[3][j]));
          block = _mm_fnmadd_ps(_mm_cvtepi32_ps(m), _mm_load_ps(dmin), block);
        }
        acc[j] = _mm_fmadd_ps(block, _mm_set1_ps(x[j].d[u]), acc[j]);
      }
    }
    const __mmask8 mask = static_cast<__mmask8>((1u << n) - 1);
#pragma GCC unroll 4
    for (int j = 0; j < RN; ++j) {
      __m128 out = acc[j];
      if (a.bias != nullptr) out = _mm_add_ps(out, _mm_maskz_loadu_ps(mask, a.bias + o));
      _mm_mask_storeu_ps(a.y + (r + j) * a.y_stride + o, mask, out);
    }
  }

  static void Dot(const QuantDotArgs& a, int64_t o_begin, int64_t o_end) {
    for (int64_t o = o_begin; o < o_end; o += 4) {
      const int n = static_cast<int>(o_end - o < 4 ? o_end - o : 4);
      const bool prefetch = o + kPrefetchRows + 4 <= a.prefetch_end;
      int64_t r = 0;
      for (; r + 3 <= a.rows; r += 3) Tile<3>(a, o, n, r, prefetch);
      if (a.rows - r == 2) Tile<2>(a, o, n, r, prefetch);
      if (a.rows - r == 1) Tile<1>(a, o, n, r, prefetch);
    }
  }
};

// quant_activations.h's quantization of one row, 16 values at a time: the same operations as
// QuantizeActivationRow (an integer max of |x|'s bits, d and 1 / d in scalar, x * id rounded to
// nearest even by VCVTPS2DQ), so the same bytes.
void QuantizeRow(const QuantizeActsArgs& l, const float* x, unsigned char* row) {
  std::memset(row, 0, static_cast<size_t>(l.row_bytes));
  auto* q = reinterpret_cast<int8_t*>(row);
  auto* d = reinterpret_cast<float*>(row + l.d_offset);
  auto* sums = reinterpret_cast<int16_t*>(row + l.sums_offset);
  auto* starts = reinterpret_cast<int32_t*>(row + l.starts_offset);
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
  for (int64_t b = 0; b < l.in / l.block; ++b) {
    const float* xb = x + b * l.block;
    __m512i max = _mm512_setzero_si512();
    for (int64_t k = 0; k < l.block; k += 16) {
      max = _mm512_max_epu32(max, _mm512_and_si512(_mm512_castps_si512(_mm512_loadu_ps(xb + k)), abs_mask));
    }
    const uint32_t amax_bits = _mm512_reduce_max_epu32(max);
    float scale = 0.0f;
    if (amax_bits >= 0x7f800000) {
      const uint32_t nan = 0x7fc00000;
      std::memcpy(&scale, &nan, 4);
    } else if (amax_bits >= 0x0d800000) {
      float amax;
      std::memcpy(&amax, &amax_bits, 4);
      scale = amax / 127.0f;
      const __m512 id = _mm512_set1_ps(1.0f / scale);
      for (int64_t k = 0; k < l.block; k += 16) {
        __m512i levels = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(xb + k), id));
        levels = _mm512_min_epi32(_mm512_max_epi32(levels, _mm512_set1_epi32(-127)), _mm512_set1_epi32(127));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(q + b * l.block + k), _mm512_cvtepi32_epi8(levels));
      }
    }
    if (l.block == 32) {
      _mm256_storeu_ps(d + 8 * b, _mm256_set1_ps(scale));
    } else {
      d[b] = scale;
    }
  }
  // Sums of 4 (VPDPBUSD with ones) and of 32.
  const __m256i ones = _mm256_set1_epi8(1);
  for (int64_t g = 0; g < l.in / 32; ++g) {
    const __m256i fours = _mm256_dpbusd_epi32(_mm256_setzero_si256(), ones, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 32 * g)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(starts + 8 * g), _mm256_mullo_epi32(fours, _mm256_set1_epi32(-l.bias)));
    __m128i total = _mm_add_epi32(_mm256_castsi256_si128(fours), _mm256_extracti128_si256(fours, 1));
    total = _mm_hadd_epi32(total, total);
    sums[g] = static_cast<int16_t>(_mm_cvtsi128_si32(_mm_hadd_epi32(total, total)));
  }
}

void QuantizeRows(const QuantizeActsArgs& l, const float* x, int64_t x_stride, int64_t rows, void* out) {
  for (int64_t r = 0; r < rows; ++r) QuantizeRow(l, x + r * x_stride, static_cast<unsigned char*>(out) + r * l.row_bytes);
}

constexpr QuantKernelTable kTable = {
    "avx512-vnni",
    {Block32Rows<Block32Type::kQ8_0>::Dot, Block32Rows<Block32Type::kQ4_0>::Dot, Block256Rows<0>::Dot,
     Block256Rows<1>::Dot, Block256Rows<2>::Dot, Block32Rows<Block32Type::kQ5_0>::Dot},
    QuantizeRows,
};

}  // namespace

const QuantKernelTable& Avx512VnniQuantTable() { return kTable; }

void Avx512Block32Rows(const QuantDotArgs& a, Block32Type type, int64_t o_begin, int64_t o_end, int64_t r_begin,
                       int64_t r_end) {
  switch (type) {
    case Block32Type::kQ8_0: Block32Rows<Block32Type::kQ8_0>::Rows(a, o_begin, o_end, r_begin, r_end); break;
    case Block32Type::kQ4_0: Block32Rows<Block32Type::kQ4_0>::Rows(a, o_begin, o_end, r_begin, r_end); break;
    case Block32Type::kQ5_0: Block32Rows<Block32Type::kQ5_0>::Rows(a, o_begin, o_end, r_begin, r_end); break;
  }
}

}  // namespace niels::daemon::kernels::simd

#endif  // __x86_64__
