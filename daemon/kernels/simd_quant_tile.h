// The register-tiled loop of DotRowsQuantized (simd_kernels.h), written once over a per-type,
// per-ISA kernel K. Internal to daemon/kernels: included only by simd_quant_*.cc, INSIDE their
// anonymous namespace, after they define their kernels (see simd_table.h for why).
//
// K provides:
//   kUnit, kUnitBytes      weight values / bytes per unit: the span the kernel's integer sums
//                          cover before it folds them into its float accumulators
//   kTailUnit              0, or the values of a shorter last unit (in % kUnit == kTailUnit)
//   kWeightRows, kTileRows the register tile: kWeightRows (4, 2 or 1) weight rows x kTileRows rows
//                          of x; kDecodeWeightRows: the tile height when x has fewer rows
//   Acc, Zero()            a float accumulator per (weight row, x row) pair
//   Unit<RM, RN>(w, x, u, acc)      unit u of RM weight rows (w[i]: the row's unit u) times RN
//                                   activation rows x[j], into acc[i][j]
//   TailUnit<RM, RN>(w, x, u, acc)  the same for the short last unit (when kTailUnit)
//   Reduce4(a, b, c, d, out)        out[k] = the k-th accumulator's value, summed in a fixed tree
// Batch invariance: every acc[i][j] goes through the same operations whatever RM, RN, the tile's
// place, the o range and the thread are (Unit treats each pair alike), so y[r, o] depends only on
// weight row o and activation row r.
// Users: the portable kernels of every block type. AVX-512's and AVX2's (weight rows in the lanes,
// integer totals per block, so that AMX can follow them) take only XRow and kPrefetchRows from here.

#ifndef NIELS_KERNELS_SIMD_QUANT_INCLUDED_BY_AN_ISA_FILE
#error "simd_quant_tile.h is included only by the simd_quant_*.cc files"
#endif

// One quantized activation row (quant_activations.h).
struct XRow {
  const int8_t* q;
  const float* d;
  const int16_t* sums;
  const int32_t* starts;
};

inline XRow XRowAt(const QuantDotArgs& a, int64_t r) {
  const auto* base = static_cast<const unsigned char*>(a.x) + r * a.x_row_bytes;
  return {reinterpret_cast<const int8_t*>(base), reinterpret_cast<const float*>(base + a.x_d_offset),
          reinterpret_cast<const int16_t*>(base + a.x_sums_offset),
          reinterpret_cast<const int32_t*>(base + a.x_starts_offset)};
}

// How far ahead (in weight rows) a tile prefetches: 8 rows whatever the tile's height (a 1-row
// tile prefetching 2 rows ahead decoded q4_k/q6_k from memory 15-20% slower than 2-row tiles).
constexpr int64_t kPrefetchRows = 8;

template <class K, int RM, int RN>
inline void QuantTile(const QuantDotArgs& a, int64_t o, int64_t r, bool prefetch) {
  const auto* w0 = static_cast<const unsigned char*>(a.w) + o * a.w_row_bytes;
  const unsigned char* w[RM];
#pragma GCC unroll 8
  for (int i = 0; i < RM; ++i) w[i] = w0 + i * a.w_row_bytes;
  XRow x[RN];
#pragma GCC unroll 8
  for (int j = 0; j < RN; ++j) x[j] = XRowAt(a, r + j);
  typename K::Acc acc[RM][RN];
#pragma GCC unroll 8
  for (int i = 0; i < RM; ++i) {
#pragma GCC unroll 8
    for (int j = 0; j < RN; ++j) acc[i][j] = K::Zero();
  }
  // With `prefetch`, the same unit of the weight rows kPrefetchRows ahead is asked into L2 (as
  // simd_generic.h's DotTile does two 4-row tiles ahead); without, the tile's own rows (a no-op
  // that keeps the loop branch-free).
  const unsigned char* ahead = prefetch ? w0 + kPrefetchRows * a.w_row_bytes : w0;
  const int64_t units = a.in / K::kUnit;
  for (int64_t u = 0; u < units; ++u) {
#pragma GCC unroll 8
    for (int i = 0; i < RM; ++i) {
#pragma GCC unroll 4
      for (int64_t line = 0; line < K::kUnitBytes; line += 64) {
        __builtin_prefetch(ahead + i * a.w_row_bytes + u * K::kUnitBytes + line, /*rw=*/0, /*locality=*/2);
      }
    }
    const unsigned char* wu[RM];
#pragma GCC unroll 8
    for (int i = 0; i < RM; ++i) wu[i] = w[i] + u * K::kUnitBytes;
    K::template Unit<RM, RN>(wu, x, u, acc);
  }
  if constexpr (K::kTailUnit != 0) {
    if (units * K::kUnit < a.in) {
      const unsigned char* wu[RM];
#pragma GCC unroll 8
      for (int i = 0; i < RM; ++i) wu[i] = w[i] + units * K::kUnitBytes;
      K::template TailUnit<RM, RN>(wu, x, units, acc);
    }
  }
  // Each accumulator reduced by Reduce4 (with zeros beside it when RM < 4: the same tree).
#pragma GCC unroll 8
  for (int j = 0; j < RN; ++j) {
    float sums[4];
    float* y = a.y + (r + j) * a.y_stride + o;
    if constexpr (RM == 4) {
      K::Reduce4(acc[0][j], acc[1][j], acc[2][j], acc[3][j], sums);
    } else if constexpr (RM == 2) {
      K::Reduce4(acc[0][j], acc[1][j], K::Zero(), K::Zero(), sums);
    } else {
      K::Reduce4(acc[0][j], K::Zero(), K::Zero(), K::Zero(), sums);
    }
    for (int i = 0; i < RM; ++i) y[i] = a.bias != nullptr ? sums[i] + a.bias[o + i] : sums[i];
  }
}

// A tile of n < N rows of x (n >= 1): the instantiation for exactly n.
template <class K, int RM, int N>
inline void QuantTileOf(const QuantDotArgs& a, int64_t o, int64_t r, int64_t n, bool prefetch) {
  if constexpr (N > 1) {
    if (n == N - 1) {
      QuantTile<K, RM, N - 1>(a, o, r, prefetch);
    } else {
      QuantTileOf<K, RM, N - 1>(a, o, r, n, prefetch);
    }
  }
}

// Rows [r, r_end) of x against weight rows o..o+RM-1: tiles of kTileRows rows, then one smaller.
template <class K, int RM>
inline void QuantTileRows(const QuantDotArgs& a, int64_t o, int64_t r, int64_t r_end, bool prefetch) {
  constexpr int kRows = K::kTileRows;
  for (; r + kRows <= r_end; r += kRows) QuantTile<K, RM, kRows>(a, o, r, prefetch);
  if (r < r_end) QuantTileOf<K, RM, kRows>(a, o, r, r_end - r, prefetch);
}

// DotRowsQuantized over [o_begin, o_end): rows of x in chunks whose activations stay in L2 (about
// 192 KiB) while each group of kWeightRows weight rows meets all of them.
template <class K, int kM>
void QuantDotRows(const QuantDotArgs& a, int64_t o_begin, int64_t o_end) {
  int64_t chunk = (192 * 1024) / (a.x_row_bytes + 1);
  chunk = chunk < K::kTileRows ? K::kTileRows : chunk / K::kTileRows * K::kTileRows;
  for (int64_t r = 0; r < a.rows; r += chunk) {
    const int64_t r_end = r + chunk < a.rows ? r + chunk : a.rows;
    int64_t o = o_begin;
    for (; o + kM <= o_end; o += kM) {
      QuantTileRows<K, kM>(a, o, r, r_end, /*prefetch=*/o + kPrefetchRows + kM <= a.prefetch_end);
    }
    for (; o < o_end; ++o) QuantTileRows<K, 1>(a, o, r, r_end, /*prefetch=*/false);
  }
}

// Fewer rows of x than a tile holds (decode) may take taller tiles (K::kDecodeWeightRows): more
// independent weight rows in flight. Which tile computes an output never changes its bits.
template <class K>
void QuantDotImpl(const QuantDotArgs& a, int64_t o_begin, int64_t o_end) {
  if (a.rows < K::kTileRows) {
    QuantDotRows<K, K::kDecodeWeightRows>(a, o_begin, o_end);
  } else {
    QuantDotRows<K, K::kWeightRows>(a, o_begin, o_end);
  }
}
