// The AVX2 kernels of the block types (no VNNI): VPMADDUBSW multiplies 32 unsigned 8-bit weight
// levels by 32 signed activation levels (quant_activations.h) into 16 int16 pair sums (never
// saturating: |level| <= 63 or q8_0's |w| <= 128 against |q| <= 127), VPMADDWD adds pairs into 8
// int32 lanes. Compiled with -mavx2 -mfma -mf16c (daemon/CMakeLists.txt). Includes nothing that
// defines inline functions (simd_table.h).
//
// Per (weight row o, activation row r), per lane l < 8 (the same operations whatever the tile):
//   q8_0, q4_0, q5_0 (a unit = one 32-block): isum_l = the exact dot of values 4l..4l+3 (q8_0: |w|
//     times q with w's sign; q4_0: nibbles (w + 8) times q, then + the start value -8 * sum of q;
//     q5_0 likewise with its five-bit levels (w + 16) and -16 * sum of q);
//     acc_l = fma(float(isum_l), d_w * d_x, acc_l)
//   q4_k, q5_k, q6_k (a unit = one 256-block in 8 steps of 32 values):
//     A_l = sum over the steps of (the exact dot of the lane's values) * (their sub-block's / group's
//     scale)                                      exact: |A_l| < 2^24
//     acc_l = fma(float(A_l), d * d_x, acc_l)
//     q4_k, q5_k: acc_l = fnmadd(float(m_2l s_2l + m_2l+1 s_2l+1), dmin * d_x, acc_l) for l < 4,
//     m_k the min of sub-block k, s_k the sum of its activation levels
// and y = the lanes summed in a fixed tree + bias.

#if defined(__x86_64__)

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "daemon/kernels/simd_table.h"

namespace niels::daemon::kernels::simd {
namespace {

#define NIELS_KERNELS_SIMD_QUANT_INCLUDED_BY_AN_ISA_FILE
#include "daemon/kernels/simd_quant_tile.h"

using Acc = __m256;

uint16_t LoadU16(const unsigned char* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
float HalfAt(const unsigned char* p) { return _cvtsh_ss(LoadU16(p)); }
__m256i Load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

struct Common {
  using Acc = __m256;
  static Acc Zero() { return _mm256_setzero_ps(); }
  // ((l0+l1)+(l2+l3)) + ((l4+l5)+(l6+l7)) of each, as simd_avx2.cc's Sum4.
  static void Reduce4(Acc a, Acc b, Acc c, Acc d, float* out) {
    const __m256 ab_cd = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
    _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(ab_cd), _mm256_extractf128_ps(ab_cd, 1)));
  }
};

// 32 bits (little-endian at p) as 32 bytes: byte i is 16 where bit i is set, else 0 (q5_0's fifth
// bits, in value order).
__m256i FifthBits(const unsigned char* p) {
  uint32_t bits;
  std::memcpy(&bits, p, sizeof bits);
  // Byte i gets byte i / 8 of the bits (shuffles stay within 128-bit lanes: bytes 2, 3 for the upper).
  const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(bits)),
                                             _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202,
                                                               0x0101010101010101, 0x0000000000000000));
  const __m256i select = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201));
  return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, select), select), _mm256_set1_epi8(16));
}

// q8_0, q4_0 and q5_0: a unit is one 32-block.
template <Block32Type kType>
struct Block32Kernel : Common {
  static constexpr bool kOffsetLevels = kType != Block32Type::kQ8_0;  // fed as w + 8 / w + 16, undone by `starts`
  static constexpr int64_t kUnit = 32, kUnitBytes = kType == Block32Type::kQ8_0 ? 34 : kType == Block32Type::kQ4_0 ? 18 : 22;
  static constexpr int64_t kTailUnit = 0;
  static constexpr int kWeightRows = 2, kDecodeWeightRows = 2, kTileRows = 4;  // 8 accumulators + levels, scales, constants, temporaries

  template <int RM, int RN>
  static void Unit(const unsigned char* const (&w)[RM], const XRow (&x)[RN], int64_t u, Acc (&acc)[RM][RN]) {
    const __m256i ones = _mm256_set1_epi16(1);
#pragma GCC unroll 8
    for (int i = 0; i < RM; ++i) {
      const __m256 dw = _mm256_set1_ps(HalfAt(w[i]));
      __m256i levels, signs;
      if constexpr (kOffsetLevels) {
        constexpr int kNibbles = kType == Block32Type::kQ4_0 ? 2 : 6;
        const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w[i] + kNibbles));
        levels = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(packed, 4), packed), _mm256_set1_epi8(0x0f));
        if constexpr (kType == Block32Type::kQ5_0) levels = _mm256_or_si256(levels, FifthBits(w[i] + 2));
      } else {
        signs = Load256(w[i] + 2);
        levels = _mm256_sign_epi8(signs, signs);  // |w| (128 for -128, read unsigned)
      }
#pragma GCC unroll 8
      for (int j = 0; j < RN; ++j) {
        __m256i q = Load256(x[j].q + 32 * u);
        if constexpr (!kOffsetLevels) q = _mm256_sign_epi8(q, signs);
        __m256i isum = _mm256_madd_epi16(_mm256_maddubs_epi16(levels, q), ones);
        if constexpr (kOffsetLevels) isum = _mm256_add_epi32(isum, Load256(x[j].starts + 8 * u));
        const __m256 scale = _mm256_mul_ps(dw, _mm256_loadu_ps(x[j].d + 8 * u));
        acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), scale, acc[i][j]);
      }
    }
  }
  template <int RM, int RN>
  static void TailUnit(const unsigned char* const (&)[RM], const XRow (&)[RN], int64_t, Acc (&)[RM][RN]) {}
};

// The six-bit scales and mins of a q4_k / q5_k block (quant_blocks.h ScaleMinK4), 8 bytes each.
void ScalesAndMinsK4(const unsigned char* packed, uint8_t* scales, uint8_t* mins) {
  uint32_t u[3];
  std::memcpy(u, packed, 12);
  const uint32_t s[2] = {u[0] & 0x3f3f3f3f, (u[2] & 0x0f0f0f0f) | ((u[0] >> 2) & 0x30303030)};
  const uint32_t m[2] = {u[1] & 0x3f3f3f3f, ((u[2] >> 4) & 0x0f0f0f0f) | ((u[1] >> 2) & 0x30303030)};
  std::memcpy(scales, s, 8);
  std::memcpy(mins, m, 8);
}

// q4_k, q5_k, q6_k: a unit is one 256-block in 8 steps of 32 values.
template <int kType>  // 0 q4_k, 1 q5_k, 2 q6_k
struct Block256Kernel : Common {
  static constexpr bool kMins = kType != 2;
  static constexpr int64_t kUnit = 256, kTailUnit = 0;
  static constexpr int64_t kUnitBytes = kType == 0 ? 144 : kType == 1 ? 176 : 210;
  static constexpr int kWeightRows = 2, kDecodeWeightRows = 2, kTileRows = 3;  // 6 int + 6 float accumulators

  struct Row {
    int16_t scales[16];  // per sub-block (8) or group (16)
    __m128i mins;        // int16: the 8 sub-block mins
    float d, dmin;
  };

  static void Prepare(const unsigned char* p, Row* row) {
    if constexpr (kMins) {
      uint8_t scales[8], mins[8];
      ScalesAndMinsK4(p + 4, scales, mins);
      for (int s = 0; s < 8; ++s) row->scales[s] = scales[s];
      row->mins = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(mins)));
      row->d = HalfAt(p);
      row->dmin = HalfAt(p + 2);
    } else {
      for (int g = 0; g < 16; ++g) row->scales[g] = static_cast<int8_t>(p[192 + g]);
      row->d = HalfAt(p + 208);
    }
  }

  // Step s < 8: values 32s .. 32s + 31 as unsigned levels, and the scale vector for its lanes.
  static __m256i Levels(const unsigned char* p, const Row& row, int s, __m256i* scale) {
    if constexpr (kMins) {
      const __m256i packed = Load256(p + (kType == 0 ? 16 : 48) + 32 * (s / 2));
      __m256i levels = _mm256_and_si256(s % 2 ? _mm256_srli_epi16(packed, 4) : packed, _mm256_set1_epi8(0x0f));
      if constexpr (kType == 1) {  // + 16 * bit s of qh
        const __m256i bits = _mm256_slli_epi16(_mm256_srli_epi16(Load256(p + 16), s), 4);
        levels = _mm256_or_si256(levels, _mm256_and_si256(bits, _mm256_set1_epi8(0x10)));
      }
      *scale = _mm256_set1_epi16(row.scales[s]);  // int16 pairs x the sub-block's scale
      return levels;
    } else {
      // Half h = s / 4, quarter k = s % 4: low (k < 2) or high nibbles of ql[64h + 32 (k & 1) ..],
      // plus bits 2k, 2k + 1 of qh[32h ..] as bits 4, 5.
      const int h = s / 4, k = s % 4;
      const __m256i packed = Load256(p + 64 * h + 32 * (k & 1));
      const __m256i low = _mm256_and_si256(k >= 2 ? _mm256_srli_epi16(packed, 4) : packed, _mm256_set1_epi8(0x0f));
      const __m256i bits = _mm256_slli_epi16(_mm256_srli_epi16(Load256(p + 128 + 32 * h), 2 * k), 4);
      // int32 lanes of 4 values: lanes 0-3 group 2s, 4-7 group 2s + 1 (the upper 16 bits 0).
      *scale = _mm256_set_m128i(_mm_set1_epi32(static_cast<uint16_t>(row.scales[2 * s + 1])),
                                _mm_set1_epi32(static_cast<uint16_t>(row.scales[2 * s])));
      return _mm256_or_si256(low, _mm256_and_si256(bits, _mm256_set1_epi8(0x30)));
    }
  }

  template <int RM, int RN>
  static void Unit(const unsigned char* const (&w)[RM], const XRow (&x)[RN], int64_t u, Acc (&acc)[RM][RN]) {
    Row rows[RM];
#pragma GCC unroll 8
    for (int i = 0; i < RM; ++i) Prepare(w[i], &rows[i]);
    __m256i sums[RM][RN];
#pragma GCC unroll 8
    for (int i = 0; i < RM; ++i) {
#pragma GCC unroll 8
      for (int j = 0; j < RN; ++j) sums[i][j] = _mm256_setzero_si256();
    }
    const __m256i ones = _mm256_set1_epi16(1);
#pragma GCC unroll 1
    for (int s = 0; s < 8; ++s) {
#pragma GCC unroll 8
      for (int i = 0; i < RM; ++i) {
        __m256i scale;
        const __m256i levels = Levels(w[i], rows[i], s, &scale);
#pragma GCC unroll 8
        for (int j = 0; j < RN; ++j) {
          const __m256i pairs = _mm256_maddubs_epi16(levels, Load256(x[j].q + 256 * u + 32 * s));
          if constexpr (kMins) {
            sums[i][j] = _mm256_add_epi32(sums[i][j], _mm256_madd_epi16(pairs, scale));
          } else {
            // The exact dot of 4 values (levels - 32) first (|.| <= 16256), then times the scale.
            const __m256i fours = _mm256_add_epi32(_mm256_madd_epi16(pairs, ones), Load256(x[j].starts + 64 * u + 8 * s));
            sums[i][j] = _mm256_add_epi32(sums[i][j], _mm256_madd_epi16(fours, scale));
          }
        }
      }
    }
#pragma GCC unroll 8
    for (int i = 0; i < RM; ++i) {
#pragma GCC unroll 8
      for (int j = 0; j < RN; ++j) {
        const float dx = x[j].d[u];
        acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums[i][j]), _mm256_set1_ps(rows[i].d * dx), acc[i][j]);
        if constexpr (kMins) {
          const __m128i block_sums = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x[j].sums + 8 * u));
          const __m256i min_sums = _mm256_zextsi128_si256(_mm_madd_epi16(block_sums, rows[i].mins));
          acc[i][j] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(min_sums), _mm256_set1_ps(rows[i].dmin * dx), acc[i][j]);
        }
      }
    }
  }
  template <int RM, int RN>
  static void TailUnit(const unsigned char* const (&)[RM], const XRow (&)[RN], int64_t, Acc (&)[RM][RN]) {}
};

// quant_activations.h's quantization of one row, 8 values at a time, with QuantizeActivationRow's
// operations (so its bytes): an integer max of |x|'s bits, d and 1 / d in scalar, x * id rounded
// to nearest even by VCVTPS2DQ.
void QuantizeRow(const QuantizeActsArgs& l, const float* x, unsigned char* row) {
  std::memset(row, 0, static_cast<size_t>(l.row_bytes));
  auto* q = reinterpret_cast<int8_t*>(row);
  auto* d = reinterpret_cast<float*>(row + l.d_offset);
  auto* sums = reinterpret_cast<int16_t*>(row + l.sums_offset);
  auto* starts = reinterpret_cast<int32_t*>(row + l.starts_offset);
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
  for (int64_t b = 0; b < l.in / l.block; ++b) {
    const float* xb = x + b * l.block;
    __m256i max = _mm256_setzero_si256();
    for (int64_t k = 0; k < l.block; k += 8) {
      max = _mm256_max_epu32(max, _mm256_and_si256(_mm256_castps_si256(_mm256_loadu_ps(xb + k)), abs_mask));
    }
    __m128i m = _mm_max_epu32(_mm256_castsi256_si128(max), _mm256_extracti128_si256(max, 1));
    m = _mm_max_epu32(m, _mm_shuffle_epi32(m, 0x4e));
    m = _mm_max_epu32(m, _mm_shuffle_epi32(m, 0xb1));
    const uint32_t amax_bits = static_cast<uint32_t>(_mm_cvtsi128_si32(m));
    float scale = 0.0f;
    if (amax_bits >= 0x7f800000) {
      const uint32_t nan = 0x7fc00000;
      std::memcpy(&scale, &nan, 4);
    } else if (amax_bits >= 0x0d800000) {
      float amax;
      std::memcpy(&amax, &amax_bits, 4);
      scale = amax / 127.0f;
      const __m256 id = _mm256_set1_ps(1.0f / scale);
      for (int64_t k = 0; k < l.block; k += 16) {
        const __m256i a = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xb + k), id));
        const __m256i c = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xb + k + 8), id));
        // Saturating packs keep [-127, 127] (|x * id| <= 127.00x); the lanes interleave by 128 bits.
        const __m256i words = _mm256_permute4x64_epi64(_mm256_packs_epi32(a, c), 0xd8);
        const __m128i bytes = _mm_packs_epi16(_mm256_castsi256_si128(words), _mm256_extracti128_si256(words, 1));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(q + b * l.block + k), _mm_max_epi8(bytes, _mm_set1_epi8(-127)));
      }
    }
    if (l.block == 32) {
      _mm256_storeu_ps(d + 8 * b, _mm256_set1_ps(scale));
    } else {
      d[b] = scale;
    }
  }
  const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
  for (int64_t g = 0; g < l.in / 32; ++g) {
    const __m256i fours = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, Load256(q + 32 * g)), ones16);
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
    "avx2",
    {QuantDotImpl<Block32Kernel<Block32Type::kQ8_0>>, QuantDotImpl<Block32Kernel<Block32Type::kQ4_0>>, QuantDotImpl<Block256Kernel<0>>,
     QuantDotImpl<Block256Kernel<1>>, QuantDotImpl<Block256Kernel<2>>, QuantDotImpl<Block32Kernel<Block32Type::kQ5_0>>},
    QuantizeRows,
};

}  // namespace

const QuantKernelTable& Avx2QuantTable() { return kTable; }

}  // namespace niels::daemon::kernels::simd

#endif  // __x86_64__
