// The attention kernel of simd_kernels.h (Attend) written once over an instruction-set "traits"
// struct, like simd_generic.h: included only by simd_portable.cc, simd_avx2.cc and simd_avx512.cc,
// INSIDE their anonymous namespace, right after simd_generic.h (whose element types, kLanes,
// kTileRows and SoftmaxImpl it uses).
//
// One call does one (query block, key/value head) work item of the forward step: the rows of the
// call are the (query head, position) pairs of every query head sharing that key/value head (attend_
// args.h), so each key and value is read once for all of them. Three passes, each walking the
// sequence's KV blocks in order:
//   scores  every row against every key up to the last row's position, in register tiles of
//           kTileRows rows x 4 keys: a key is loaded once per tile, a block's keys stay in L1
//           while every tile of rows meets them;
//   softmax per row over its own positions (SoftmaxImpl);
//   values  per block, tiles of kTileRows rows x 4 column vectors: a value vector is loaded once
//           per tile, a block's values stay in L1 while every tile meets them, and each row's
//           accumulators go back to its output between blocks (exactly: a store and a load).
// No call per block: a decode step (one row per query head) is one call per key/value head and layer.
//
// Bits (batch invariance; daemon/model/forward_step.h relies on it): a row's score against key j is
// one chain -- an FMA per kLanes columns in column order (the last under a mask), then Isa::Sum4's
// fixed tree -- whatever rows or keys share its register tile; the softmax is SoftmaxImpl over the
// row's own scores; output column c is one FMA chain over the row's positions in order starting
// from +0, whichever block a position is in and whichever rows share its tile (a tile's positions
// stop at its rows' smallest limit; each row then goes on alone up to its own). So a row's result
// depends on its query, its position and the sequence's keys and values only: not on the other rows
// of the call or their number, the group size, or how the positions are split into blocks.

#ifndef NIELS_KERNELS_SIMD_GENERIC_INCLUDED_BY_AN_ISA_FILE
#error "simd_attention.h is included only by simd_portable.cc, simd_avx2.cc and simd_avx512.cc"
#endif

template <class W>
inline const typename W::T* KvRows(const AttendArgs& a, int64_t block, int64_t offset) {
  return reinterpret_cast<const typename W::T*>(static_cast<const unsigned char*>(a.blocks[block]) + offset);
}

// Row n = g * rows + i of the call: its query, its output, and how many positions it sees.
inline const float* QueryRow(const AttendArgs& a, int64_t n) {
  return a.q + (n / a.rows) * a.q_group_stride + (n % a.rows) * a.q_stride;
}
inline float* OutRow(const AttendArgs& a, int64_t n) {
  return a.out + (n / a.rows) * a.out_group_stride + (n % a.rows) * a.out_stride;
}
inline int64_t Seen(const AttendArgs& a, int64_t n) { return a.first_position + n % a.rows + 1; }

// Scores of RN rows (from row r) against RK keys (from key j of `keys`, rows of head_dim elements):
// s[(r + n) * scores_stride + first + j + i] for i < RK, n < RN.
template <class W, int RK, int RN>
inline void ScoreTile(const AttendArgs& a, const typename W::T* keys, int64_t j, int64_t r, int64_t first) {
  const int64_t D = a.head_dim;
  const float* q[RN];
#pragma GCC unroll 8
  for (int n = 0; n < RN; ++n) q[n] = QueryRow(a, r + n);
  const typename W::T* k0 = keys + j * D;
  V acc[RK][RN];
#pragma GCC unroll 8
  for (int i = 0; i < RK; ++i) {
#pragma GCC unroll 8
    for (int n = 0; n < RN; ++n) acc[i][n] = Isa::Zero();
  }
  int64_t c = 0;
  for (; c + kLanes <= D; c += kLanes) {
    V qv[RN];
#pragma GCC unroll 8
    for (int n = 0; n < RN; ++n) qv[n] = Isa::LoadF32(q[n] + c);
#pragma GCC unroll 8
    for (int i = 0; i < RK; ++i) {
      const V kv = W::Load(k0 + i * D + c);
#pragma GCC unroll 8
      for (int n = 0; n < RN; ++n) acc[i][n] = Isa::Fma(kv, qv[n], acc[i][n]);
    }
  }
  if (c < D) {
    const int64_t left = D - c;
    V qv[RN];
#pragma GCC unroll 8
    for (int n = 0; n < RN; ++n) qv[n] = Isa::LoadF32Tail(q[n] + c, left);
#pragma GCC unroll 8
    for (int i = 0; i < RK; ++i) {
      const V kv = W::LoadTail(k0 + i * D + c, left);
#pragma GCC unroll 8
      for (int n = 0; n < RN; ++n) acc[i][n] = Isa::Fma(kv, qv[n], acc[i][n]);
    }
  }
#pragma GCC unroll 8
  for (int n = 0; n < RN; ++n) {
    float sums[4];
    float* s = a.scores + (r + n) * a.scores_stride + first + j;
    if constexpr (RK == 4) {
      Isa::Sum4(acc[0][n], acc[1][n], acc[2][n], acc[3][n], sums);
      for (int i = 0; i < 4; ++i) s[i] = sums[i];
    } else {
      for (int i = 0; i < RK; ++i) {
        Isa::Sum4(acc[i][n], Isa::Zero(), Isa::Zero(), Isa::Zero(), sums);
        s[i] = sums[0];
      }
    }
  }
}

// Calls tile.template operator()<RN>(r) for tiles of kTileRows rows over [0, n), then one smaller
// tile for the rest (kTileRows 3 leaves at most 2 rows, kTileRows 6 at most 5).
template <class Tile>
inline void ForRowTiles(int64_t n, Tile&& tile) {
  int64_t r = 0;
  for (; r + kTileRows <= n; r += kTileRows) tile.template operator()<kTileRows>(r);
  switch (n - r) {
    case 0: break;
    case 1: tile.template operator()<1>(r); break;
    case 2: tile.template operator()<(kTileRows > 2 ? 2 : 1)>(r); break;
    case 3: tile.template operator()<(kTileRows > 3 ? 3 : 1)>(r); break;
    case 4: tile.template operator()<(kTileRows > 4 ? 4 : 1)>(r); break;
    default: tile.template operator()<(kTileRows > 5 ? 5 : 1)>(r); break;
  }
}

// Asks for the `rows` KV rows (keys or values) of one block at `offset` into L2: the blocks of a
// sequence lie anywhere in the pool, so the hardware prefetcher, which follows one address stream,
// starts over at every block.
template <class W>
inline void PrefetchKvRows(const AttendArgs& a, int64_t block, int64_t offset, int64_t rows) {
  const auto* p = reinterpret_cast<const unsigned char*>(KvRows<W>(a, block, offset));
  const int64_t bytes = rows * a.head_dim * static_cast<int64_t>(sizeof(typename W::T));
  for (int64_t i = 0; i < bytes; i += 64) __builtin_prefetch(p + i, /*rw=*/0, /*locality=*/2);
}

// Every row's scores against keys [0, first_position + rows), block by block.
template <class W>
void ScorePass(const AttendArgs& a) {
  const int64_t bt = a.block_tokens, N = a.group * a.rows;
  const int64_t end = a.first_position + a.rows;  // keys [0, end) are seen by some row
  for (int64_t first = 0, b = 0; first < end; first += bt, ++b) {
    const typename W::T* keys = KvRows<W>(a, b, a.key_offset);
    const int64_t n = end - first < bt ? end - first : bt;
    if (first + bt < end) PrefetchKvRows<W>(a, b + 1, a.key_offset, end - first - bt < bt ? end - first - bt : bt);
    int64_t j = 0;
    for (; j + 4 <= n; j += 4) {
      ForRowTiles(N, [&]<int RN>(int64_t r) { ScoreTile<W, 4, RN>(a, keys, j, r, first); });
    }
    for (; j < n; ++j) {
      ForRowTiles(N, [&]<int RN>(int64_t r) { ScoreTile<W, 1, RN>(a, keys, j, r, first); });
    }
  }
}

// For RN rows (out[n], prob[n]) and NV column vectors from column c (the last one's first `left`
// lanes only if kTail): out[n][col] += prob[n][p] * value_p[col] for p in [begin, end), in position
// order, one FMA chain per (row, column), continued from and stored back into out.
template <class W, int RN, int NV, bool kTail>
inline void ValueTile(const typename W::T* values, int64_t D, float* const* out, const float* const* prob,
                      int64_t begin, int64_t end, int64_t c, int64_t left) {
  V acc[RN][NV];
#pragma GCC unroll 8
  for (int n = 0; n < RN; ++n) {
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) {
      acc[n][v] = kTail && v == NV - 1 ? Isa::LoadF32Tail(out[n] + c + v * kLanes, left)
                                       : Isa::LoadF32(out[n] + c + v * kLanes);
    }
  }
  for (int64_t p = begin; p < end; ++p) {
    const typename W::T* row = values + p * D + c;
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) {
      const V value = kTail && v == NV - 1 ? W::LoadTail(row + v * kLanes, left) : W::Load(row + v * kLanes);
#pragma GCC unroll 8
      for (int n = 0; n < RN; ++n) acc[n][v] = Isa::Fma(Isa::Set1(prob[n][p]), value, acc[n][v]);
    }
  }
#pragma GCC unroll 8
  for (int n = 0; n < RN; ++n) {
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) {
      if (kTail && v == NV - 1) {
        Isa::StoreF32Tail(out[n] + c + v * kLanes, acc[n][v], left);
      } else {
        Isa::StoreF32(out[n] + c + v * kLanes, acc[n][v]);
      }
    }
  }
}

// ValueTile over every column: chunks of 4 vectors, then single vectors, then the masked tail.
template <class W, int RN>
inline void ValueColumns(const typename W::T* values, int64_t D, float* const* out, const float* const* prob,
                         int64_t begin, int64_t end) {
  int64_t c = 0;
  for (; c + 4 * kLanes <= D; c += 4 * kLanes) ValueTile<W, RN, 4, false>(values, D, out, prob, begin, end, c, 0);
  for (; c + kLanes <= D; c += kLanes) ValueTile<W, RN, 1, false>(values, D, out, prob, begin, end, c, 0);
  if (c < D) ValueTile<W, RN, 1, true>(values, D, out, prob, begin, end, c, D - c);
}

// Rows [r, r + RN) against the values of block b (positions [first, first + n)): together up to
// the first position one of them does not see, then each row alone up to its own limit.
template <class W, int RN>
inline void ValueRows(const AttendArgs& a, const typename W::T* values, int64_t r, int64_t first, int64_t n) {
  float* out[RN];
  const float* prob[RN];
  int64_t joint = n;
#pragma GCC unroll 8
  for (int k = 0; k < RN; ++k) {
    out[k] = OutRow(a, r + k);
    prob[k] = a.scores + (r + k) * a.scores_stride + first;
    const int64_t seen = Seen(a, r + k) - first;
    joint = seen < joint ? seen : joint;
  }
  joint = joint > 0 ? joint : 0;  // (a row may see none of this block)
  if (joint > 0) ValueColumns<W, RN>(values, a.head_dim, out, prob, 0, joint);
  for (int k = 0; k < RN; ++k) {
    const int64_t seen = Seen(a, r + k) - first, own = seen < n ? seen : n;
    if (own > joint) ValueColumns<W, 1>(values, a.head_dim, &out[k], &prob[k], joint, own);
  }
}

// Every row's output from zero, block by block.
template <class W>
void ValuePass(const AttendArgs& a) {
  const int64_t bt = a.block_tokens, N = a.group * a.rows, D = a.head_dim;
  for (int64_t n = 0; n < N; ++n) {
    float* out = OutRow(a, n);
    for (int64_t c = 0; c < D; ++c) out[c] = 0.0f;
  }
  const int64_t end = a.first_position + a.rows;
  for (int64_t first = 0, b = 0; first < end; first += bt, ++b) {
    const typename W::T* values = KvRows<W>(a, b, a.value_offset);
    const int64_t n = end - first < bt ? end - first : bt;
    if (first + bt < end) PrefetchKvRows<W>(a, b + 1, a.value_offset, end - first - bt < bt ? end - first - bt : bt);
    ForRowTiles(N, [&]<int RN>(int64_t r) { ValueRows<W, RN>(a, values, r, first, n); });
  }
}

template <class W>
void AttendImpl(const AttendArgs& a) {
  ScorePass<W>(a);
  const int64_t N = a.group * a.rows;
  for (int64_t n = 0; n < N; ++n) SoftmaxImpl(a.scores + n * a.scores_stride, Seen(a, n), a.scale);
  ValuePass<W>(a);
}
