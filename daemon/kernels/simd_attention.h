// The attention kernel of simd_kernels.h (Attend) written once over an instruction-set "traits"
// struct, like simd_generic.h: included only by simd_portable.cc, simd_avx2.cc and simd_avx512.cc,
// INSIDE their anonymous namespace, right after simd_generic.h (whose element types, kLanes,
// kTileRows and SoftmaxImpl it uses).
//
// One call does one (query block, head) work item of the forward step: the scores of every row
// against every key it may see, walking the sequence's KV blocks itself, then per row the softmax
// and the probability-weighted sum of the values. No call per block: a decode step (one row) is
// one call per head and layer.
//
// Bits (batch invariance; forward_step.h relies on it): a row's score against key j is one chain --
// an FMA per kLanes columns in column order (the last under a mask), then Isa::Sum4's fixed tree --
// whatever rows or keys share its register tile; the softmax is SoftmaxImpl over the row's own
// scores; output column c is one FMA chain over the row's positions in order starting from 0,
// whichever block a position is in. So a row's result depends on its query, its position and the
// sequence's keys and values only: not on the other rows of the call, their number, or how the
// positions are split into blocks.

#ifndef NIELS_KERNELS_SIMD_GENERIC_INCLUDED_BY_AN_ISA_FILE
#error "simd_attention.h is included only by simd_portable.cc, simd_avx2.cc and simd_avx512.cc"
#endif

template <class W>
inline const typename W::T* KvRows(const AttendArgs& a, int64_t block, int64_t offset) {
  return reinterpret_cast<const typename W::T*>(static_cast<const unsigned char*>(a.blocks[block]) + offset);
}

// Scores of RN rows (from row r) against RK keys (from key j of `keys`, rows of head_dim elements):
// s[(r + n) * scores_stride + first + i] for i < RK, n < RN.
template <class W, int RK, int RN>
inline void ScoreTile(const AttendArgs& a, const typename W::T* keys, int64_t j, int64_t r, int64_t first) {
  const int64_t D = a.head_dim;
  const float* q0 = a.q + r * a.q_stride;
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
    for (int n = 0; n < RN; ++n) qv[n] = Isa::LoadF32(q0 + n * a.q_stride + c);
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
    for (int n = 0; n < RN; ++n) qv[n] = Isa::LoadF32Tail(q0 + n * a.q_stride + c, left);
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

// Keys [j, j + RK) of one block against every row: tiles of kTileRows rows, then one smaller tile.
template <class W, int RK>
inline void ScoreKeys(const AttendArgs& a, const typename W::T* keys, int64_t j, int64_t first) {
  int64_t r = 0;
  for (; r + kTileRows <= a.rows; r += kTileRows) ScoreTile<W, RK, kTileRows>(a, keys, j, r, first);
  switch (a.rows - r) {
    case 0: break;
    case 1: ScoreTile<W, RK, 1>(a, keys, j, r, first); break;
    case 2: ScoreTile<W, RK, (kTileRows > 2 ? 2 : 1)>(a, keys, j, r, first); break;
    case 3: ScoreTile<W, RK, (kTileRows > 3 ? 3 : 1)>(a, keys, j, r, first); break;
    case 4: ScoreTile<W, RK, (kTileRows > 4 ? 4 : 1)>(a, keys, j, r, first); break;
    default: ScoreTile<W, RK, (kTileRows > 5 ? 5 : 1)>(a, keys, j, r, first); break;  // 5 (kTileRows 3 or 6)
  }
  // kTileRows 3 leaves at most 2 rows, kTileRows 6 at most 5: every remainder is one tile above.
}

// out[c] for c in [c0, c0 + NV * kLanes): sum over positions p < m of prob[p] * value_p[c], in
// position order, one chain per column.
template <class W, int NV>
inline void ValueColumns(const AttendArgs& a, const float* prob, int64_t m, int64_t c0, float* out) {
  const int64_t D = a.head_dim, bt = a.block_tokens;
  V acc[NV];
#pragma GCC unroll 8
  for (int v = 0; v < NV; ++v) acc[v] = Isa::Zero();
  for (int64_t begin = 0, b = 0; begin < m; begin += bt, ++b) {
    const typename W::T* values = KvRows<W>(a, b, a.value_offset) + c0;
    const int64_t n = m - begin < bt ? m - begin : bt;
    for (int64_t j = 0; j < n; ++j) {
      const V weight = Isa::Set1(prob[begin + j]);
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) acc[v] = Isa::Fma(weight, W::Load(values + j * D + v * kLanes), acc[v]);
    }
  }
#pragma GCC unroll 8
  for (int v = 0; v < NV; ++v) Isa::StoreF32(out + c0 + v * kLanes, acc[v]);
}

// The last D % kLanes columns (from c0), loaded under a mask.
template <class W>
inline void ValueTail(const AttendArgs& a, const float* prob, int64_t m, int64_t c0, float* out) {
  const int64_t D = a.head_dim, bt = a.block_tokens, left = D - c0;
  V acc = Isa::Zero();
  for (int64_t begin = 0, b = 0; begin < m; begin += bt, ++b) {
    const typename W::T* values = KvRows<W>(a, b, a.value_offset) + c0;
    const int64_t n = m - begin < bt ? m - begin : bt;
    for (int64_t j = 0; j < n; ++j) acc = Isa::Fma(Isa::Set1(prob[begin + j]), W::LoadTail(values + j * D, left), acc);
  }
  Isa::StoreF32Tail(out + c0, acc, left);
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

template <class W>
void AttendImpl(const AttendArgs& a) {
  const int64_t bt = a.block_tokens, D = a.head_dim;
  const int64_t end = a.first_position + a.rows;  // keys [0, end) are seen by some row
  for (int64_t first = 0, b = 0; first < end; first += bt, ++b) {
    const typename W::T* keys = KvRows<W>(a, b, a.key_offset);
    const int64_t n = end - first < bt ? end - first : bt;
    // While this block's scores are computed: the next block's keys, this block's values (the
    // value pass below reads them, block by block in the same order).
    if (first + bt < end) PrefetchKvRows<W>(a, b + 1, a.key_offset, end - first - bt < bt ? end - first - bt : bt);
    PrefetchKvRows<W>(a, b, a.value_offset, n);
    int64_t j = 0;
    for (; j + 4 <= n; j += 4) ScoreKeys<W, 4>(a, keys, j, first);
    for (; j < n; ++j) ScoreKeys<W, 1>(a, keys, j, first);
  }
  for (int64_t i = 0; i < a.rows; ++i) {
    const int64_t m = a.first_position + i + 1;
    float* prob = a.scores + i * a.scores_stride;
    SoftmaxImpl(prob, m, a.scale);
    float* out = a.out + i * a.out_stride;
    int64_t c = 0;
    for (; c + 8 * kLanes <= D; c += 8 * kLanes) ValueColumns<W, 8>(a, prob, m, c, out);
    for (; c + 4 * kLanes <= D; c += 4 * kLanes) ValueColumns<W, 4>(a, prob, m, c, out);
    for (; c + kLanes <= D; c += kLanes) ValueColumns<W, 1>(a, prob, m, c, out);
    if (c < D) ValueTail<W>(a, prob, m, c, out);
  }
}
