// The AVX2 kernels of the block types (no VNNI): VPMADDUBSW multiplies 32 unsigned 8-bit weight
// levels by 32 signed activation levels (quant_activations.h) into 16 int16 pair sums (never
// saturating: |level| <= 63 or q8_0's |w| <= 128 against |q| <= 127), VPMADDWD adds pairs into
// int32 lanes. Compiled with -mavx2 -mfma -mf16c (daemon/CMakeLists.txt). Includes nothing that
// defines inline functions (simd_table.h).
//
// Every type (Block32Rows, Block256Rows) follows simd_quant_avx512.cc's chain, the same
// operations in the same order, so the same bits as the AVX-512 and AMX kernels: per (weight row,
// activation row) the exact integer total of each block (K types: A and M), then one float chain
// over the blocks in order. The lanes hold 8 weight rows. Decode unpacks each row's
// blocks in place and totals the rows' partial sums across lanes; prefill (4+ activation rows)
// repacks 8 weight rows at a time into a per-thread panel (ScratchBuffer) whose steps are met by
// each activation row's levels broadcast, so the row totals come out in the lanes.

#if defined(__x86_64__)

#include <immintrin.h>

#include <cstdint>
#include <cstring>

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
__m256i Load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

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

// A block's 32 weights (at p) as bytes in value order: q4_0's nibbles (w + 8), q5_0's five-bit
// levels (w + 16), q8_0's signed values themselves.
template <Block32Type kType>
__m256i BlockBytes(const unsigned char* p) {
  if constexpr (kType == Block32Type::kQ8_0) {
    return Load256(p + 2);
  } else {
    constexpr int kNibbles = kType == Block32Type::kQ4_0 ? 2 : 6;
    const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + kNibbles));
    __m256i levels = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(packed, 4), packed), _mm256_set1_epi8(0x0f));
    if constexpr (kType == Block32Type::kQ5_0) levels = _mm256_or_si256(levels, FifthBits(p + 2));
    return levels;
  }
}

// The 8 weight rows' d of the block at byte `at` of each.
__m256 RowScales(const unsigned char* const (&w)[8], int64_t at) {
  return _mm256_cvtph_ps(_mm_setr_epi16(static_cast<short>(LoadU16(w[0] + at)), static_cast<short>(LoadU16(w[1] + at)),
                                        static_cast<short>(LoadU16(w[2] + at)), static_cast<short>(LoadU16(w[3] + at)),
                                        static_cast<short>(LoadU16(w[4] + at)), static_cast<short>(LoadU16(w[5] + at)),
                                        static_cast<short>(LoadU16(w[6] + at)), static_cast<short>(LoadU16(w[7] + at))));
}

// v[c]: 8 int32 partial sums of row c. Returns lane c = their total (exact: integers).
__m256i SumRows(const __m256i (&v)[8]) {
  // hadd(a, b) per 128-bit half: a's two pair sums, then b's.
  const __m256i abcd = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
  const __m256i efgh = _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
  return _mm256_add_epi32(_mm256_permute2x128_si256(abcd, efgh, 0x20), _mm256_permute2x128_si256(abcd, efgh, 0x31));
}

// t[k] = dword k of each of the 8 rows r[0..7] (an 8 x 8 transpose of dwords).
void Transpose8(const __m256i (&r)[8], __m256i (&t)[8]) {
  __m256i a[8], b[8];
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {
    a[2 * k] = _mm256_unpacklo_epi32(r[2 * k], r[2 * k + 1]);      // dwords 0, 1 | 4, 5 of both
    a[2 * k + 1] = _mm256_unpackhi_epi32(r[2 * k], r[2 * k + 1]);  // 2, 3 | 6, 7
  }
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {  // rows 4h .. 4h + 3
    b[4 * h + 0] = _mm256_unpacklo_epi64(a[4 * h], a[4 * h + 2]);      // dword 0 | 4
    b[4 * h + 1] = _mm256_unpackhi_epi64(a[4 * h], a[4 * h + 2]);      // 1 | 5
    b[4 * h + 2] = _mm256_unpacklo_epi64(a[4 * h + 1], a[4 * h + 3]);  // 2 | 6
    b[4 * h + 3] = _mm256_unpackhi_epi64(a[4 * h + 1], a[4 * h + 3]);  // 3 | 7
  }
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {
    t[k] = _mm256_permute2x128_si256(b[k], b[4 + k], 0x20);
    t[k + 4] = _mm256_permute2x128_si256(b[k], b[4 + k], 0x31);
  }
}

// The 8 weight rows o .. o + 7 of a tile with n of them real (1 <= n <= 8): past n, the last row
// again (read, never stored).
void Rows8(const QuantDotArgs& a, int64_t o, int n, const unsigned char* (&w)[8]) {
  const auto* w0 = static_cast<const unsigned char*>(a.w) + o * a.w_row_bytes;
#pragma GCC unroll 8
  for (int c = 0; c < 8; ++c) w[c] = w0 + (c < n ? c : n - 1) * a.w_row_bytes;
}

// Activation rows r .. r + RN - 1 and their accumulators, zeroed.
template <int RN>
void StartRows(const QuantDotArgs& a, int64_t r, XRow (&x)[RN], __m256 (&acc)[RN]) {
#pragma GCC unroll 4
  for (int j = 0; j < RN; ++j) {
    x[j] = XRowAt(a, r + j);
    acc[j] = _mm256_setzero_ps();
  }
}

// y[r + j, o .. o + n - 1] = the first n lanes of acc[j] (+ bias).
template <int RN>
void StoreLanes(const QuantDotArgs& a, int64_t o, int n, int64_t r, const __m256 (&acc)[RN]) {
  const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  const __m256 bias = a.bias != nullptr ? _mm256_maskload_ps(a.bias + o, mask) : _mm256_setzero_ps();
#pragma GCC unroll 4
  for (int j = 0; j < RN; ++j) {
    const __m256 out = a.bias != nullptr ? _mm256_add_ps(acc[j], bias) : acc[j];
    _mm256_maskstore_ps(a.y + (r + j) * a.y_stride + o, mask, out);
  }
}

// The activation bytes a panel kernel keeps in L2 while a panel meets them (256 KiB and 1 MiB
// measured alike on a Zen 3 with 512 KiB of L2).
constexpr int64_t kPanelChunkBytes = 384 * 1024;

// q8_0, q4_0 and q5_0 with the lanes over weight rows: 8 weight rows at a time and, per 32-block b,
// the exact int32 dot s of each with one activation row, folded as acc = fma(float(s), d_w * d_x,
// acc) in block order: simd_quant_avx512.cc's chain, so the same bits as the AVX-512 and AMX kernels.
//   Few activation rows (decode): each weight row's block unpacked in place, VPMADDUBSW + VPMADDWD
//   into 8 partial sums per row, totalled across rows by SumRows.
//   Prefill: 8 weight rows repacked once into a panel (per block, 8 steps of 32 bytes: dword c of
//   step t = row c's levels 4t .. 4t + 3; then the rows' d as floats) that every activation row
//   meets: per step one VPMADDUBSW against the row's 4 levels broadcast gives 2 int16 per weight row,
//   summed in int16 over the block's steps (never saturating: 8 steps of q4_0, 4 of q5_0; q8_0 goes
//   to int32 each step) and then by VPMADDWD into the row's lane.
// q8_0's signed weights meet VPMADDUBSW as |w| against q with w's sign; q4_0 and q5_0's offset
// levels are undone per block with -8 or -16 times the block's sum of q (quant_activations.h).
template <Block32Type kType>
struct Block32Rows {
  static constexpr int64_t kBlockBytes = kType == Block32Type::kQ8_0 ? 34 : kType == Block32Type::kQ4_0 ? 18 : 22;
  static constexpr int kOffset = kType == Block32Type::kQ4_0 ? 8 : kType == Block32Type::kQ5_0 ? 16 : 0;
  static constexpr int64_t kPanelBlockBytes = 8 * 32 + 8 * 4;
  static constexpr int64_t kPanelMinRows = 4;  // fewer activation rows: the in-place (decode) tiles
  static constexpr int kTileRows = 4;           // activation rows per panel tile (5, 6: slower, spilled)

  // The exact int32 dot of each lane's weight row with x's block b, from the integer products.
  static __m256i Undo(__m256i s, const XRow& x, int64_t b) {
    if constexpr (kOffset != 0) s = _mm256_add_epi32(s, _mm256_set1_epi32(-kOffset * x.sums[b]));
    return s;
  }

  // Decode: weight rows o .. o + n - 1 (n <= 8) in place against activation rows r .. r + RN - 1.
  // With `prefetch`, each block of the next 8 weight rows is asked into L2 as this tile reads its own
  // (as simd_quant_tile.h's kPrefetchRows).
  template <int RN>
  static void InPlaceTile(const QuantDotArgs& a, int64_t o, int n, int64_t r, bool prefetch) {
    const unsigned char* w[8];
    Rows8(a, o, n, w);
    const int64_t ahead = prefetch ? 8 * a.w_row_bytes : 0;
    XRow x[RN];
    __m256 acc[RN];
    StartRows<RN>(a, r, x, acc);
    const __m256i ones = _mm256_set1_epi16(1);
    const int64_t blocks = a.in / 32;
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t at = b * kBlockBytes;
      __m256i levels[8];
#pragma GCC unroll 8
      for (int c = 0; c < 8; ++c) {
        __builtin_prefetch(w[c] + ahead + at, 0, 2);
        levels[c] = BlockBytes<kType>(w[c] + at);
      }
      const __m256 dw = RowScales(w, at);
#pragma GCC unroll 4
      for (int j = 0; j < RN; ++j) {
        const __m256i q = Load256(x[j].q + 32 * b);
        __m256i partial[8];
#pragma GCC unroll 8
        for (int c = 0; c < 8; ++c) {
          if constexpr (kType == Block32Type::kQ8_0) {
            const __m256i magnitude = _mm256_sign_epi8(levels[c], levels[c]);
            partial[c] = _mm256_madd_epi16(_mm256_maddubs_epi16(magnitude, _mm256_sign_epi8(q, levels[c])), ones);
          } else {
            partial[c] = _mm256_madd_epi16(_mm256_maddubs_epi16(levels[c], q), ones);
          }
        }
        const __m256 s = _mm256_cvtepi32_ps(Undo(SumRows(partial), x[j], b));
        acc[j] = _mm256_fmadd_ps(s, _mm256_mul_ps(dw, _mm256_set1_ps(x[j].d[8 * b])), acc[j]);
      }
    }
    StoreLanes<RN>(a, o, n, r, acc);
  }

  // Weight rows o .. o + n - 1 (n <= 8) into `panel` (see the top of this struct).
  static void Pack(const QuantDotArgs& a, int64_t o, int n, unsigned char* panel) {
    const unsigned char* w[8];
    Rows8(a, o, n, w);
    const int64_t blocks = a.in / 32;
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t at = b * kBlockBytes;
      __m256i rows[8], steps[8];
#pragma GCC unroll 8
      for (int c = 0; c < 8; ++c) rows[c] = BlockBytes<kType>(w[c] + at);
      Transpose8(rows, steps);
      unsigned char* out = panel + b * kPanelBlockBytes;
#pragma GCC unroll 8
      for (int t = 0; t < 8; ++t) _mm256_store_si256(reinterpret_cast<__m256i*>(out + 32 * t), steps[t]);
      _mm256_store_ps(reinterpret_cast<float*>(out + 256), RowScales(w, at));
    }
  }

  // Prefill: the panel of weight rows o .. o + n - 1 against activation rows r .. r + RN - 1.
  template <int RN>
  static void PanelTile(const QuantDotArgs& a, const unsigned char* panel, int64_t o, int n, int64_t r) {
    XRow x[RN];
    __m256 acc[RN];
    StartRows<RN>(a, r, x, acc);
    const __m256i ones = _mm256_set1_epi16(1);
    const int64_t blocks = a.in / 32;
    for (int64_t b = 0; b < blocks; ++b) {
      const unsigned char* p = panel + b * kPanelBlockBytes;
      __m256i s[RN];
      auto levels_of = [&](int j, int t) {
        int32_t four;
        std::memcpy(&four, x[j].q + 32 * b + 4 * t, 4);
        return _mm256_set1_epi32(four);
      };
      if constexpr (kType == Block32Type::kQ8_0) {
#pragma GCC unroll 4
        for (int j = 0; j < RN; ++j) s[j] = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int t = 0; t < 8; ++t) {
          const __m256i wt = _mm256_load_si256(reinterpret_cast<const __m256i*>(p + 32 * t));
          const __m256i magnitude = _mm256_sign_epi8(wt, wt);
#pragma GCC unroll 4
          for (int j = 0; j < RN; ++j) {
            const __m256i pairs = _mm256_maddubs_epi16(magnitude, _mm256_sign_epi8(levels_of(j, t), wt));
            s[j] = _mm256_add_epi32(s[j], _mm256_madd_epi16(pairs, ones));
          }
        }
      } else {
        constexpr int kSpan = 4;  // steps summed in int16 (q4_0 could take 8: measured slower)
#pragma GCC unroll 4
        for (int j = 0; j < RN; ++j) s[j] = _mm256_setzero_si256();
#pragma GCC unroll 2
        for (int t0 = 0; t0 < 8; t0 += kSpan) {
          __m256i s16[RN];
#pragma GCC unroll 4
          for (int j = 0; j < RN; ++j) s16[j] = _mm256_setzero_si256();
#pragma GCC unroll 8
          for (int t = t0; t < t0 + kSpan; ++t) {
            const __m256i wt = _mm256_load_si256(reinterpret_cast<const __m256i*>(p + 32 * t));
#pragma GCC unroll 4
            for (int j = 0; j < RN; ++j) s16[j] = _mm256_add_epi16(s16[j], _mm256_maddubs_epi16(wt, levels_of(j, t)));
          }
#pragma GCC unroll 4
          for (int j = 0; j < RN; ++j) s[j] = _mm256_add_epi32(s[j], _mm256_madd_epi16(s16[j], ones));
        }
      }
      const __m256 dw = _mm256_load_ps(reinterpret_cast<const float*>(p + 256));
#pragma GCC unroll 4
      for (int j = 0; j < RN; ++j) {
        const __m256 total = _mm256_cvtepi32_ps(Undo(s[j], x[j], b));
        acc[j] = _mm256_fmadd_ps(total, _mm256_mul_ps(dw, _mm256_set1_ps(x[j].d[8 * b])), acc[j]);
      }
    }
    StoreLanes<RN>(a, o, n, r, acc);
  }

  // PanelTile of exactly `rows` (1 <= rows <= N) activation rows.
  template <int N>
  static void PanelTileOf(const QuantDotArgs& a, const unsigned char* panel, int64_t o, int n, int64_t r, int64_t rows) {
    if constexpr (N >= 1) {
      if (rows == N) {
        PanelTile<N>(a, panel, o, n, r);
      } else {
        PanelTileOf<N - 1>(a, panel, o, n, r, rows);
      }
    }
  }

  static void Dot(const QuantDotArgs& a, int64_t o_begin, int64_t o_end) {
    if (a.rows < kPanelMinRows) {
      for (int64_t o = o_begin; o < o_end; o += 8) {
        const int n = static_cast<int>(o_end - o < 8 ? o_end - o : 8);
        const bool prefetch = o + 16 <= a.prefetch_end;
        int64_t r = 0;
        for (; r + 2 <= a.rows; r += 2) InPlaceTile<2>(a, o, n, r, prefetch);
        if (r < a.rows) InPlaceTile<1>(a, o, n, r, prefetch);
      }
      return;
    }
    auto* panel = static_cast<unsigned char*>(ScratchBuffer(a.in / 32 * kPanelBlockBytes));
    // Activation rows in chunks whose q and d (2 * in bytes a row) stay in L2 while every group of
    // 8 weight rows is packed once and meets all of them.
    int64_t chunk = kPanelChunkBytes / (2 * a.in);
    chunk = chunk < kTileRows ? kTileRows : chunk / kTileRows * kTileRows;
    for (int64_t r0 = 0; r0 < a.rows; r0 += chunk) {
      const int64_t r_end = r0 + chunk < a.rows ? r0 + chunk : a.rows;
      for (int64_t o = o_begin; o < o_end; o += 8) {
        const int n = static_cast<int>(o_end - o < 8 ? o_end - o : 8);
        Pack(a, o, n, panel);
        int64_t r = r0;
        for (; r + kTileRows <= r_end; r += kTileRows) PanelTile<kTileRows>(a, panel, o, n, r);
        if (r < r_end) PanelTileOf<kTileRows - 1>(a, panel, o, n, r, r_end - r);
      }
    }
  }
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

// The unpacking of one q4_k, q5_k or q6_k 256-block in 8 steps of 32 values (Block256Rows').
template <int kType>  // 0 q4_k, 1 q5_k, 2 q6_k
struct Block256Kernel {
  static constexpr bool kMins = kType != 2;
  static constexpr int64_t kUnitBytes = kType == 0 ? 144 : kType == 1 ? 176 : 210;

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
};

// q4_k, q5_k and q6_k with the lanes over weight rows, one chain per (weight row, activation row)
// over the 256-blocks in order: A = sum_k sc_k * (exact dot of sub-block / group k, q6_k's levels
// minus 32) and (q4_k, q5_k) M = sum_k m_k s_k totalled as integers, then block = float(A) * d;
// block = fma(-float(M), dmin, block) (q4_k, q5_k); acc = fma(block, d_x, acc):
// simd_quant_avx512.cc's chain, so the same bits as the AVX-512 kernels.
//   Few activation rows (decode): Block256Kernel's per-row unpacking, 8 lanes of A's partial sums
//   per row totalled across 8 rows by SumRows.
//   Prefill: 8 weight rows repacked once per unit into a panel: 64 steps of 32 bytes (dword c of
//   step 8k + i = row c's levels 32k + 4i .. + 3), then per sub-block (q4_k, q5_k) or 16-value group
//   (q6_k) the rows' scales as int16 pairs, then pairs of the mins of sub-blocks 2i, 2i + 1 (q4_k,
//   q5_k) or of the scales of groups 2i, 2i + 1 (q6_k), then d (and dmin). Every activation row
//   meets it with its 4 levels of each step broadcast: int16 sums over 4 steps (2 for q6_k's
//   six-bit levels), then VPMADDWD by the scales into A. q6_k's offset comes off as a whole:
//   A -= 32 * sum_g sc_g * (the sum of q over group g), those sums taken once per activation row.
template <int kType>  // 0 q4_k, 1 q5_k, 2 q6_k
struct Block256Rows {
  using K = Block256Kernel<kType>;
  static constexpr bool kMins = K::kMins;
  static constexpr int kScaleVectors = kMins ? 8 : 16;  // per sub-block / group
  static constexpr int64_t kScalesAt = 64 * 32, kPairsAt = kScalesAt + kScaleVectors * 32;
  static constexpr int64_t kPairVectors = kMins ? 4 : 8;
  static constexpr int64_t kDAt = kPairsAt + kPairVectors * 32, kDminAt = kDAt + 32;
  static constexpr int64_t kUnitPanelBytes = kDminAt + 32;
  static constexpr int64_t kPanelMinRows = 4;
  static constexpr int kTileRows = 4;  // 3: measured alike

  // block = float(A) * d; block = fma(-float(M), dmin, block) (q4_k, q5_k); acc = fma(block, d_x, acc).
  static __m256 Fold(__m256i sum_a, __m256i sum_m, __m256 d, __m256 dmin, float dx, __m256 acc) {
    __m256 block = _mm256_mul_ps(_mm256_cvtepi32_ps(sum_a), d);
    if constexpr (kMins) block = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(sum_m), dmin, block);
    return _mm256_fmadd_ps(block, _mm256_set1_ps(dx), acc);
  }

  // Decode: weight rows o .. o + n - 1 (n <= 8) in place against activation row r.
  static void InPlaceTile(const QuantDotArgs& a, int64_t o, int n, int64_t r, bool prefetch) {
    const unsigned char* w[8];
    Rows8(a, o, n, w);
    const int64_t ahead = prefetch ? 8 * a.w_row_bytes : 0;
    const XRow x = XRowAt(a, r);
    __m256 acc = _mm256_setzero_ps();
    const int64_t units = a.in / 256;
    for (int64_t u = 0; u < units; ++u) {
      __m256i partial_a[8], partial_m[8];
      alignas(32) float d[8], dmin[8];
      const __m128i block_sums = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x.sums + 8 * u));
#pragma GCC unroll 1
      for (int c = 0; c < 8; ++c) {
        const unsigned char* p = w[c] + u * K::kUnitBytes;
#pragma GCC unroll 4
        for (int64_t line = 0; line < K::kUnitBytes; line += 64) __builtin_prefetch(p + ahead + line, 0, 2);
        typename K::Row row;
        K::Prepare(p, &row);
        __m256i sum = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int s = 0; s < 8; ++s) {
          __m256i scale;
          const __m256i levels = K::Levels(p, row, s, &scale);
          const __m256i pairs = _mm256_maddubs_epi16(levels, Load256(x.q + 256 * u + 32 * s));
          if constexpr (kMins) {
            sum = _mm256_add_epi32(sum, _mm256_madd_epi16(pairs, scale));
          } else {  // q6_k: the exact dot of 4 values (levels - 32) first (|.| <= 16256), then times the scale
            const __m256i start = Load256(x.starts + 64 * u + 8 * s);
            const __m256i fours = _mm256_add_epi32(_mm256_madd_epi16(pairs, _mm256_set1_epi16(1)), start);
            sum = _mm256_add_epi32(sum, _mm256_madd_epi16(fours, scale));
          }
        }
        partial_a[c] = sum;
        partial_m[c] = kMins ? _mm256_zextsi128_si256(_mm_madd_epi16(block_sums, row.mins)) : _mm256_setzero_si256();
        d[c] = row.d;
        dmin[c] = row.dmin;
      }
      acc = Fold(SumRows(partial_a), SumRows(partial_m), _mm256_load_ps(d), _mm256_load_ps(dmin), x.d[u], acc);
    }
    const __m256 out[1] = {acc};
    StoreLanes<1>(a, o, n, r, out);
  }

  // Weight rows o .. o + n - 1 (n <= 8), every 256-block, into `panel`.
  static void Pack(const QuantDotArgs& a, int64_t o, int n, unsigned char* panel) {
    const unsigned char* w[8];
    Rows8(a, o, n, w);
    const int64_t units = a.in / 256;
    for (int64_t u = 0; u < units; ++u) {
      unsigned char* out = panel + u * kUnitPanelBytes;
      typename K::Row rows[8];
      alignas(32) int16_t scales[kScaleVectors][8][2], pairs[kPairVectors][8][2];
      alignas(32) float d[8], dmin[8] = {};
#pragma GCC unroll 1
      for (int c = 0; c < 8; ++c) {
        K::Prepare(w[c] + u * K::kUnitBytes, &rows[c]);
        for (int k = 0; k < kScaleVectors; ++k) {
          scales[k][c][0] = scales[k][c][1] = rows[c].scales[k];
          if constexpr (!kMins) pairs[k / 2][c][k % 2] = rows[c].scales[k];
        }
        if constexpr (kMins) {
          alignas(16) int16_t m[8];
          _mm_store_si128(reinterpret_cast<__m128i*>(m), rows[c].mins);
          for (int k = 0; k < 8; ++k) pairs[k / 2][c][k % 2] = m[k];
          dmin[c] = rows[c].dmin;
        }
        d[c] = rows[c].d;
      }
#pragma GCC unroll 1
      for (int k = 0; k < 8; ++k) {
        __m256i levels[8], steps[8];
#pragma GCC unroll 8
        for (int c = 0; c < 8; ++c) {
          __m256i unused;
          levels[c] = K::Levels(w[c] + u * K::kUnitBytes, rows[c], k, &unused);
        }
        Transpose8(levels, steps);
#pragma GCC unroll 8
        for (int i = 0; i < 8; ++i) _mm256_store_si256(reinterpret_cast<__m256i*>(out + 32 * (8 * k + i)), steps[i]);
      }
      std::memcpy(out + kScalesAt, scales, sizeof scales);
      std::memcpy(out + kPairsAt, pairs, sizeof pairs);
      std::memcpy(out + kDAt, d, sizeof d);
      std::memcpy(out + kDminAt, dmin, sizeof dmin);
    }
  }

  // q6_k: per activation row and unit, the sums of q over groups 2i and 2i + 1 as an int16 pair
  // (|sum| <= 16 * 127), i < 8, for rows r0 .. r_end - 1 into `table`.
  static void GroupSums(const QuantDotArgs& a, int64_t r0, int64_t r_end, int32_t* table) {
    const int64_t units = a.in / 256;
    const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
    for (int64_t r = r0; r < r_end; ++r) {
      const int8_t* q = XRowAt(a, r).q;
      for (int64_t u = 0; u < units; ++u) {
        __m256i halves[2];  // 128-bit half 0: the sums of groups 2i, half 1: of 2i + 1, i = 4h .. 4h + 3
#pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) {
          __m256i fours[4];  // lanes 0-3: values 0..15 of 32 values 32i.., lanes 4-7: values 16..31
#pragma GCC unroll 4
          for (int k = 0; k < 4; ++k) {
            fours[k] = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, Load256(q + 256 * u + 32 * (4 * h + k))), ones16);
          }
          halves[h] = _mm256_hadd_epi32(_mm256_hadd_epi32(fours[0], fours[1]), _mm256_hadd_epi32(fours[2], fours[3]));
        }
#pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) {
          const __m128i even = _mm256_castsi256_si128(halves[h]), odd = _mm256_extracti128_si256(halves[h], 1);
          const __m128i pairs = _mm_or_si128(_mm_and_si128(even, _mm_set1_epi32(0xffff)), _mm_slli_epi32(odd, 16));
          _mm_storeu_si128(reinterpret_cast<__m128i*>(&table[((r - r0) * units + u) * 8 + 4 * h]), pairs);
        }
      }
    }
  }

  // Prefill: the panel of weight rows o .. o + n - 1 against activation rows r .. r + RN - 1
  // (q6_k: `groups`, GroupSums' table from row r on).
  template <int RN>
  static void PanelTile(const QuantDotArgs& a, const unsigned char* panel, int64_t o, int n, int64_t r,
                        const int32_t* groups) {
    XRow x[RN];
    __m256 acc[RN];
    StartRows<RN>(a, r, x, acc);
    // Steps summed in int16: 4 of levels < 32 (q4_k could take 8: measured slower), 2 of q6_k's < 64.
    constexpr int kSpan = kMins ? 4 : 2;
    const int64_t units = a.in / 256;
    for (int64_t u = 0; u < units; ++u) {
      const unsigned char* p = panel + u * kUnitPanelBytes;
      __m256i sum_a[RN];
#pragma GCC unroll 4
      for (int j = 0; j < RN; ++j) sum_a[j] = _mm256_setzero_si256();
#pragma GCC unroll 1
      for (int k = 0; k < 8; ++k) {
#pragma GCC unroll 4
        for (int i0 = 0; i0 < 8; i0 += kSpan) {
          // Sub-block k's scales, or those of group 2k + i0 / 4.
          const int64_t scale_at = kScalesAt + 32 * (kMins ? k : 2 * k + i0 / 4);
          const __m256i scale = _mm256_load_si256(reinterpret_cast<const __m256i*>(p + scale_at));
          __m256i s16[RN];
#pragma GCC unroll 4
          for (int j = 0; j < RN; ++j) s16[j] = _mm256_setzero_si256();
#pragma GCC unroll 8
          for (int i = i0; i < i0 + kSpan; ++i) {
            const __m256i wt = _mm256_load_si256(reinterpret_cast<const __m256i*>(p + 32 * (8 * k + i)));
#pragma GCC unroll 4
            for (int j = 0; j < RN; ++j) {
              int32_t four;
              std::memcpy(&four, x[j].q + 256 * u + 32 * k + 4 * i, 4);
              s16[j] = _mm256_add_epi16(s16[j], _mm256_maddubs_epi16(wt, _mm256_set1_epi32(four)));
            }
          }
#pragma GCC unroll 4
          for (int j = 0; j < RN; ++j) sum_a[j] = _mm256_add_epi32(sum_a[j], _mm256_madd_epi16(s16[j], scale));
        }
      }
      const __m256 d = _mm256_load_ps(reinterpret_cast<const float*>(p + kDAt));
      const __m256 dmin = _mm256_load_ps(reinterpret_cast<const float*>(p + kDminAt));
#pragma GCC unroll 4
      for (int j = 0; j < RN; ++j) {
        // M (q4_k, q5_k: the mins against the sums of q per sub-block) or q6_k's sum_g sc_g * sum_g q.
        __m256i pair_sum = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int i = 0; i < kPairVectors; ++i) {
          int32_t pair;
          if constexpr (kMins) {
            std::memcpy(&pair, x[j].sums + 8 * u + 2 * i, 4);
          } else {
            pair = groups[(j * units + u) * 8 + i];
          }
          const __m256i weights = _mm256_load_si256(reinterpret_cast<const __m256i*>(p + kPairsAt + 32 * i));
          pair_sum = _mm256_add_epi32(pair_sum, _mm256_madd_epi16(weights, _mm256_set1_epi32(pair)));
        }
        if constexpr (!kMins) sum_a[j] = _mm256_sub_epi32(sum_a[j], _mm256_slli_epi32(pair_sum, 5));
        acc[j] = Fold(sum_a[j], pair_sum, d, dmin, x[j].d[u], acc[j]);
      }
    }
    StoreLanes<RN>(a, o, n, r, acc);
  }

  template <int N>
  static void PanelTileOf(const QuantDotArgs& a, const unsigned char* panel, int64_t o, int n, int64_t r, int64_t rows,
                          const int32_t* groups) {
    if constexpr (N >= 1) {
      if (rows == N) {
        PanelTile<N>(a, panel, o, n, r, groups);
      } else {
        PanelTileOf<N - 1>(a, panel, o, n, r, rows, groups);
      }
    }
  }

  static void Dot(const QuantDotArgs& a, int64_t o_begin, int64_t o_end) {
    if (a.rows < kPanelMinRows) {
      for (int64_t o = o_begin; o < o_end; o += 8) {
        const int n = static_cast<int>(o_end - o < 8 ? o_end - o : 8);
        for (int64_t r = 0; r < a.rows; ++r) InPlaceTile(a, o, n, r, o + 16 <= a.prefetch_end);
      }
      return;
    }
    const int64_t units = a.in / 256;
    int64_t chunk = kPanelChunkBytes / (a.in + units * 32);  // q and sums (d: 4 bytes a unit)
    chunk = chunk < kTileRows ? kTileRows : chunk / kTileRows * kTileRows;
    const int64_t panel_bytes = units * kUnitPanelBytes;
    const int64_t table_bytes = kMins ? 0 : chunk * units * 32;
    auto* panel = static_cast<unsigned char*>(ScratchBuffer(panel_bytes + table_bytes));
    auto* groups = reinterpret_cast<int32_t*>(panel + panel_bytes);
    for (int64_t r0 = 0; r0 < a.rows; r0 += chunk) {
      const int64_t r_end = r0 + chunk < a.rows ? r0 + chunk : a.rows;
      if constexpr (!kMins) GroupSums(a, r0, r_end, groups);
      for (int64_t o = o_begin; o < o_end; o += 8) {
        const int n = static_cast<int>(o_end - o < 8 ? o_end - o : 8);
        Pack(a, o, n, panel);
        int64_t r = r0;
        for (; r + kTileRows <= r_end; r += kTileRows) {
          PanelTile<kTileRows>(a, panel, o, n, r, groups + (r - r0) * units * 8);
        }
        if (r < r_end) PanelTileOf<kTileRows - 1>(a, panel, o, n, r, r_end - r, groups + (r - r0) * units * 8);
      }
    }
  }
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
    {Block32Rows<Block32Type::kQ8_0>::Dot, Block32Rows<Block32Type::kQ4_0>::Dot, Block256Rows<0>::Dot,
     Block256Rows<1>::Dot, Block256Rows<2>::Dot, Block32Rows<Block32Type::kQ5_0>::Dot},
    QuantizeRows,
};

}  // namespace

const QuantKernelTable& Avx2QuantTable() { return kTable; }

}  // namespace niels::daemon::kernels::simd

#endif  // __x86_64__
