// The kernels of simd_kernels.h written once over an instruction-set "traits" struct. Internal to
// daemon/kernels: included only by simd_portable.cc, simd_avx2.cc and simd_avx512.cc, INSIDE their
// anonymous namespace, after they define `struct Isa` and `using V = Isa::V` (see simd_table.h for
// why).
//
// Isa provides:
//   using V                      a vector of kLanes floats
//   kLanes, kTileRows            lanes per vector; rows of x per DotRows register tile
//   Zero(), Set1(f), Add, Mul, Div, Fma(a, b, c) = a * b + c
//   LoadF32(p), LoadF16(p), LoadBF16(p)              kLanes elements, widened to float
//   LoadF32Tail(p, n), LoadF16Tail(p, n), LoadBF16Tail(p, n)   the first n < kLanes, zeros above
//   StoreF32(p, v), StoreF32Tail(p, v, n), StoreF16(p, v), StoreF16Tail(p, v, n)
//   Sum4(a, b, c, d, out)        out[k] = the sum of the lanes of the k-th vector, in a fixed tree
//                                that depends on nothing but that vector
//   Exp(v)                       the kernels' exp (accuracy: simd_kernels.h); the SIMD files
//                                define it as CephesExp below, from Min, Max, Round (to nearest),
//                                Fnmadd(a, b, c) = c - a * b, MulPow2(y, n) = y * 2^n and
//                                ExpEdges(result, x, hi, lo) (inf above hi, 0 below lo, NaN kept)
//   SumLanes(v)                  the sum of the lanes, in a fixed order

#ifndef NIELS_KERNELS_SIMD_GENERIC_INCLUDED_BY_AN_ISA_FILE
#error "simd_generic.h is included only by simd_portable.cc, simd_avx2.cc and simd_avx512.cc"
#endif

// Weight element types: how a row of them is loaded as floats.
struct F32Elements {
  using T = float;
  static V Load(const T* p) { return Isa::LoadF32(p); }
  static V LoadTail(const T* p, int64_t n) { return Isa::LoadF32Tail(p, n); }
};
struct F16Elements {
  using T = uint16_t;
  static V Load(const T* p) { return Isa::LoadF16(p); }
  static V LoadTail(const T* p, int64_t n) { return Isa::LoadF16Tail(p, n); }
};
struct BF16Elements {
  using T = uint16_t;
  static V Load(const T* p) { return Isa::LoadBF16(p); }
  static V LoadTail(const T* p, int64_t n) { return Isa::LoadBF16Tail(p, n); }
};

constexpr int64_t kLanes = Isa::kLanes;
constexpr int kTileRows = Isa::kTileRows;

// The end of every chain of a register tile (RM weight rows from o, RN rows of x from r): each
// accumulator's lanes summed by the fixed Sum4 tree, then + bias, into y.
template <int RM, int RN>
inline void StoreTile(const DotRowsArgs& a, const V (&acc)[RM][RN], int64_t o, int64_t r) {
#pragma GCC unroll 8
  for (int j = 0; j < RN; ++j) {
    float sums[4];
    float* y = a.y + (r + j) * a.y_stride + o;
    if constexpr (RM == 4) {
      Isa::Sum4(acc[0][j], acc[1][j], acc[2][j], acc[3][j], sums);
      for (int i = 0; i < 4; ++i) y[i] = a.bias != nullptr ? sums[i] + a.bias[o + i] : sums[i];
    } else {
      for (int i = 0; i < RM; ++i) {
        Isa::Sum4(acc[i][j], Isa::Zero(), Isa::Zero(), Isa::Zero(), sums);
        y[i] = a.bias != nullptr ? sums[0] + a.bias[o + i] : sums[0];
      }
    }
  }
}

// The register tile of DotRows: the dot products of RM consecutive weight rows (from row o) with RN
// rows of x (from row r), RM * RN accumulators of kLanes lanes. Every one of them is the same chain
// of operations whatever RM, RN, o and r are -- one FMA per kLanes columns in column order, the last
// in % kLanes columns loaded under a mask (zeros beyond), then the fixed Sum4 tree, then + bias --
// so a result never depends on the tile it was computed in: batch invariance.
template <class W, int RM, int RN>
inline void DotTile(const DotRowsArgs& a, int64_t o, int64_t r, bool prefetch) {
  const auto* w0 = static_cast<const typename W::T*>(a.w) + o * a.in;
  const float* x0 = a.x + r * a.x_stride;
  V acc[RM][RN];
#pragma GCC unroll 8
  for (int i = 0; i < RM; ++i) {
#pragma GCC unroll 8
    for (int j = 0; j < RN; ++j) acc[i][j] = Isa::Zero();
  }
  int64_t k = 0;
  // With `prefetch`, the same columns of the weight rows two tiles ahead (rows below
  // a.prefetch_end: this call's, or the next block's of the same product) are asked into L2 now. A
  // decode step streams every weight from memory once, and the hardware prefetcher alone keeps too
  // few lines in flight (rows are short, and each tile starts RM new streams). A matrix-vector
  // microbenchmark on personal-shaped weights, before/after in one run on the 2-vCPU AMD EPYC:
  // f16 1 row 1.46 -> 0.67 ms, f32 8 rows 4.0 -> 2.55 ms.
  // (Without, the tile's own rows: a no-op that keeps the loop free of branches.)
  const auto* ahead = prefetch ? w0 + 2 * RM * a.in : w0;
  for (; k + kLanes <= a.in; k += kLanes) {
#pragma GCC unroll 8
    for (int i = 0; i < RM; ++i) __builtin_prefetch(ahead + i * a.in + k, /*rw=*/0, /*locality=*/2);
    V xv[RN];
#pragma GCC unroll 8
    for (int j = 0; j < RN; ++j) xv[j] = Isa::LoadF32(x0 + j * a.x_stride + k);
#pragma GCC unroll 8
    for (int i = 0; i < RM; ++i) {
      const V wv = W::Load(w0 + i * a.in + k);
#pragma GCC unroll 8
      for (int j = 0; j < RN; ++j) acc[i][j] = Isa::Fma(wv, xv[j], acc[i][j]);
    }
  }
  if (k < a.in) {
    const int64_t n = a.in - k;
    V xv[RN];
#pragma GCC unroll 8
    for (int j = 0; j < RN; ++j) xv[j] = Isa::LoadF32Tail(x0 + j * a.x_stride + k, n);
#pragma GCC unroll 8
    for (int i = 0; i < RM; ++i) {
      const V wv = W::LoadTail(w0 + i * a.in + k, n);
#pragma GCC unroll 8
      for (int j = 0; j < RN; ++j) acc[i][j] = Isa::Fma(wv, xv[j], acc[i][j]);
    }
  }
  StoreTile<RM, RN>(a, acc, o, r);
}

// Rows [r, r_end) of x against weight rows o..o+RM-1: full tiles of kTileRows rows, then one
// smaller tile for the rest.
template <class W, int RM>
inline void DotTileRows(const DotRowsArgs& a, int64_t o, int64_t r, int64_t r_end, bool prefetch) {
  for (; r + kTileRows <= r_end; r += kTileRows) DotTile<W, RM, kTileRows>(a, o, r, prefetch);
  switch (r_end - r) {
    case 0: break;
    case 1: DotTile<W, RM, 1>(a, o, r, prefetch); break;
    case 2: DotTile<W, RM, (kTileRows > 2 ? 2 : 1)>(a, o, r, prefetch); break;
    case 3: DotTile<W, RM, (kTileRows > 3 ? 3 : 1)>(a, o, r, prefetch); break;
    case 4: DotTile<W, RM, (kTileRows > 4 ? 4 : 1)>(a, o, r, prefetch); break;
    default: DotTile<W, RM, (kTileRows > 5 ? 5 : 1)>(a, o, r, prefetch); break;  // 5 (kTileRows is 3 or 6)
  }
}

// Rows of x per pass over a range of weight rows: a pass keeps its rows of x in L2 (about 192 KiB)
// while each block of 4 weight rows, in L1, meets all of them.
inline int64_t RowChunk(int64_t in) {
  const int64_t rows = (192 * 1024) / (in * static_cast<int64_t>(sizeof(float)) + 1);
  return rows < kTileRows ? kTileRows : rows / kTileRows * kTileRows;
}

// A prefill (more than kDecodeRows rows of x) runs the same chains K-blocked: the columns in
// slices of kSliceColumns, weight rows in groups of kGroupRows, rows of x in chunks of kChunkRows.
// Per (group, chunk, slice) the group's slice of weights is widened to f32 once into the thread's
// scratch (exact), then every tile of the chunk runs its slice of columns from there, with that
// tile's rows of x in L1, its accumulators saved in the scratch between slices (exact too): each
// chain is still one FMA per kLanes columns in column order, the same Sum4 and + bias. Widening
// in the loop put two vector uops per weight load on the FMA ports, and a tile's 6 rows of x over
// all columns (48 KiB at in = 2048) streamed from L2. On the 2-vCPU Xeon (Emerald Rapids),
// nielsd-quant-bench --threads 2, 512 rows, medians interleaved with the old loop: 2048x2048 f16
// 55 -> 71 GMAC/s, 8192x2048 f16 58 -> 74, bf16 alike, 2048x8192 unchanged (~70).
constexpr int64_t kDecodeRows = 16;
constexpr int64_t kSliceColumns = 512;  // a multiple of kLanes
constexpr int64_t kGroupRows = 64;
constexpr int64_t kChunkRows = 96;  // a multiple of kTileRows (3 or 6)
static_assert(kSliceColumns % kLanes == 0 && kChunkRows % kTileRows == 0);

// The calling thread's prefill scratch, allocated on first use and kept: the widened weights
// (kGroupRows x kSliceColumns floats) and the saved accumulators (per tile of x rows in the chunk,
// kGroupRows x kTileRows vectors, weight row major). Plain operator new/delete: nothing with
// external linkage is instantiated in an ISA file (simd_table.h).
class PrefillScratch {
 public:
  PrefillScratch() = default;
  PrefillScratch(const PrefillScratch&) = delete;
  PrefillScratch& operator=(const PrefillScratch&) = delete;
  ~PrefillScratch() { ::operator delete(raw_); }

  float* Weights() {
    if (raw_ == nullptr) Allocate();
    return weights_;
  }
  V* Saved() {
    if (raw_ == nullptr) Allocate();
    return saved_;
  }

 private:
  static constexpr int64_t kWeightBytes = kGroupRows * kSliceColumns * static_cast<int64_t>(sizeof(float));
  static constexpr int64_t kSavedBytes = kChunkRows * kGroupRows * static_cast<int64_t>(sizeof(V));
  void Allocate() {
    raw_ = ::operator new(static_cast<decltype(sizeof(0))>(kWeightBytes + kSavedBytes + 64));
    const auto address = reinterpret_cast<uintptr_t>(raw_);
    auto* base = static_cast<unsigned char*>(raw_) + (64 - address % 64) % 64;
    weights_ = reinterpret_cast<float*>(base);
    saved_ = reinterpret_cast<V*>(base + kWeightBytes);
  }
  void* raw_ = nullptr;
  float* weights_ = nullptr;
  V* saved_ = nullptr;
};

inline PrefillScratch& ThreadPrefillScratch() {
  thread_local PrefillScratch scratch;
  return scratch;
}

// Weight rows [o, o + count), columns [k, k + n), widened into `to` (rows kSliceColumns apart;
// zeros past n up to a multiple of kLanes, as W::LoadTail gives them to DotTile).
template <class W>
inline void WidenSlice(const DotRowsArgs& a, int64_t o, int64_t count, int64_t k, int64_t n, float* to) {
  for (int64_t i = 0; i < count; ++i) {
    const auto* from = static_cast<const typename W::T*>(a.w) + (o + i) * a.in + k;
    float* row = to + i * kSliceColumns;
    int64_t c = 0;
    for (; c + kLanes <= n; c += kLanes) Isa::StoreF32(row + c, W::Load(from + c));
    if (c < n) Isa::StoreF32(row + c, W::LoadTail(from + c, n - c));
  }
}

// Columns [k, k + n) of the chains of a register tile: RM widened weight rows at wp, RN rows of x
// from row r, weight rows from o. The accumulators start at zero (`first`) or come from saved[i *
// kTileRows + j]; with `last` the chains end (StoreTile), else they go back there.
template <int RM, int RN>
inline void SliceTile(const DotRowsArgs& a, const float* wp, int64_t o, int64_t r, int64_t k, int64_t n, V* saved,
                      bool first, bool last) {
  const float* x0 = a.x + r * a.x_stride + k;
  V acc[RM][RN];
#pragma GCC unroll 8
  for (int i = 0; i < RM; ++i) {
#pragma GCC unroll 8
    for (int j = 0; j < RN; ++j) acc[i][j] = first ? Isa::Zero() : saved[i * kTileRows + j];
  }
  int64_t c = 0;
  for (; c + kLanes <= n; c += kLanes) {
    V xv[RN];
#pragma GCC unroll 8
    for (int j = 0; j < RN; ++j) xv[j] = Isa::LoadF32(x0 + j * a.x_stride + c);
#pragma GCC unroll 8
    for (int i = 0; i < RM; ++i) {
      const V wv = Isa::LoadF32(wp + i * kSliceColumns + c);
#pragma GCC unroll 8
      for (int j = 0; j < RN; ++j) acc[i][j] = Isa::Fma(wv, xv[j], acc[i][j]);
    }
  }
  if (c < n) {
    V xv[RN];
#pragma GCC unroll 8
    for (int j = 0; j < RN; ++j) xv[j] = Isa::LoadF32Tail(x0 + j * a.x_stride + c, n - c);
#pragma GCC unroll 8
    for (int i = 0; i < RM; ++i) {
      const V wv = Isa::LoadF32(wp + i * kSliceColumns + c);
#pragma GCC unroll 8
      for (int j = 0; j < RN; ++j) acc[i][j] = Isa::Fma(wv, xv[j], acc[i][j]);
    }
  }
  if (last) {
    StoreTile<RM, RN>(a, acc, o, r);
    return;
  }
#pragma GCC unroll 8
  for (int i = 0; i < RM; ++i) {
#pragma GCC unroll 8
    for (int j = 0; j < RN; ++j) saved[i * kTileRows + j] = acc[i][j];
  }
}

// One slice of RN rows of x from r against every weight row of the group [o_begin, o_end).
template <int RN>
inline void SliceTiles(const DotRowsArgs& a, const float* wp, int64_t o_begin, int64_t o_end, int64_t r, int64_t k,
                       int64_t n, V* saved, bool first, bool last) {
  int64_t o = o_begin;
  for (; o + 4 <= o_end; o += 4) {
    SliceTile<4, RN>(a, wp + (o - o_begin) * kSliceColumns, o, r, k, n, saved + (o - o_begin) * kTileRows, first, last);
  }
  for (; o < o_end; ++o) {
    SliceTile<1, RN>(a, wp + (o - o_begin) * kSliceColumns, o, r, k, n, saved + (o - o_begin) * kTileRows, first, last);
  }
}

template <class W>
void PrefillRows(const DotRowsArgs& a, int64_t o_begin, int64_t o_end) {
  PrefillScratch& scratch = ThreadPrefillScratch();
  float* wp = scratch.Weights();
  V* saved = scratch.Saved();
  for (int64_t g = o_begin; g < o_end; g += kGroupRows) {
    const int64_t g_end = g + kGroupRows < o_end ? g + kGroupRows : o_end;
    for (int64_t r = 0; r < a.rows; r += kChunkRows) {
      const int64_t r_end = r + kChunkRows < a.rows ? r + kChunkRows : a.rows;
      for (int64_t k = 0; k < a.in; k += kSliceColumns) {
        const int64_t n = k + kSliceColumns < a.in ? kSliceColumns : a.in - k;
        const bool first = k == 0, last = k + n == a.in;
        WidenSlice<W>(a, g, g_end - g, k, n, wp);
        for (int64_t t = r; t < r_end; t += kTileRows) {
          V* tile_saved = saved + (t - r) / kTileRows * (kGroupRows * kTileRows);
          switch (r_end - t < kTileRows ? r_end - t : kTileRows) {
            case 1: SliceTiles<1>(a, wp, g, g_end, t, k, n, tile_saved, first, last); break;
            case 2: SliceTiles<(kTileRows > 2 ? 2 : 1)>(a, wp, g, g_end, t, k, n, tile_saved, first, last); break;
            case 3: SliceTiles<(kTileRows > 3 ? 3 : kTileRows)>(a, wp, g, g_end, t, k, n, tile_saved, first, last); break;
            case 4: SliceTiles<(kTileRows > 4 ? 4 : 1)>(a, wp, g, g_end, t, k, n, tile_saved, first, last); break;
            case 5: SliceTiles<(kTileRows > 5 ? 5 : 1)>(a, wp, g, g_end, t, k, n, tile_saved, first, last); break;
            default: SliceTiles<kTileRows>(a, wp, g, g_end, t, k, n, tile_saved, first, last); break;
          }
        }
      }
    }
  }
}

// Up to kDecodeRows rows of x: the chains straight from the weights, which a decode step streams
// from memory once (with read-ahead, DotTile); more: PrefillRows.
template <class W>
void DotRowsImpl(const DotRowsArgs& a, int64_t o_begin, int64_t o_end) {
  if (a.rows > kDecodeRows) {
    PrefillRows<W>(a, o_begin, o_end);
    return;
  }
  const int64_t chunk = RowChunk(a.in);
  for (int64_t r = 0; r < a.rows; r += chunk) {
    const int64_t r_end = r + chunk < a.rows ? r + chunk : a.rows;
    int64_t o = o_begin;
    for (; o + 4 <= o_end; o += 4) DotTileRows<W, 4>(a, o, r, r_end, /*prefetch=*/o + 3 * 4 <= a.prefetch_end);
    for (; o < o_end; ++o) DotTileRows<W, 1>(a, o, r, r_end, /*prefetch=*/false);
  }
}

// exp(x) as Cephes' expf: x = n ln2 + r with |r| <= ln2/2 (ln2 split in two so that r is exact), a
// degree-6 polynomial for e^r, times 2^n. exp(x > 88.72) = inf, exp(x < -103.97) = 0, NaN stays NaN.
template <class I = Isa>
typename I::V CephesExp(typename I::V x) {
  using Vec = typename I::V;
  const Vec hi = I::Set1(88.72283935546875f), lo = I::Set1(-103.97208404541015625f);
  const Vec xc = I::Min(I::Max(x, lo), hi);
  const Vec n = I::Round(I::Mul(xc, I::Set1(1.44269504088896341f)));
  Vec r = I::Fnmadd(n, I::Set1(0.693359375f), xc);
  r = I::Fnmadd(n, I::Set1(-2.12194440e-4f), r);
  Vec y = I::Set1(1.9875691500e-4f);
  y = I::Fma(y, r, I::Set1(1.3981999507e-3f));
  y = I::Fma(y, r, I::Set1(8.3334519073e-3f));
  y = I::Fma(y, r, I::Set1(4.1665795894e-2f));
  y = I::Fma(y, r, I::Set1(1.6666665459e-1f));
  y = I::Fma(y, r, I::Set1(5.0000001201e-1f));
  y = I::Fma(y, I::Mul(r, r), I::Add(r, I::Set1(1.0f)));
  return I::ExpEdges(I::MulPow2(y, n), x, hi, lo);
}

template <class W>
void ToFloatImpl(const void* src_data, int64_t n, float* dst) {
  const auto* src = static_cast<const typename W::T*>(src_data);
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) Isa::StoreF32(dst + i, W::Load(src + i));
  if (i < n) Isa::StoreF32Tail(dst + i, W::LoadTail(src + i, n - i), n - i);
}

void F32ToF16Impl(const float* src, int64_t n, void* dst_data) {
  auto* dst = static_cast<uint16_t*>(dst_data);
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) Isa::StoreF16(dst + i, Isa::LoadF32(src + i));
  if (i < n) Isa::StoreF16Tail(dst + i, Isa::LoadF32Tail(src + i, n - i), n - i);
}

void CopyF32Impl(const float* src, int64_t n, void* dst_data) {
  float* dst = static_cast<float*>(dst_data);
  for (int64_t i = 0; i < n; ++i) dst[i] = src[i];
}

void ExpImpl(const float* x, int64_t n, float* out) {
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) Isa::StoreF32(out + i, Isa::Exp(Isa::LoadF32(x + i)));
  if (i < n) Isa::StoreF32Tail(out + i, Isa::Exp(Isa::LoadF32Tail(x + i, n - i)), n - i);
}

// The largest of s[0..m): from s[0], each element x taken as x > max ? x : max (so a NaN past s[0]
// is skipped), in kLanes running maxima (lane k sees s[k], s[k + kLanes], ...) where Isa has Max --
// whose Max(x, max) is that same test -- then the lanes in order and the last m % kLanes elements.
// Every order gives the same value but for the sign of a zero maximum, which changes no bit of the
// softmax (exp(+-0) = 1).
template <class I = Isa>
float RowMax(const float* s, int64_t m) {
  float max = s[0];
  int64_t j = 1;
  if constexpr (requires(typename I::V v) { I::Max(v, v); }) {
    if (m >= kLanes) {
      typename I::V lanes = I::Set1(s[0]);
      for (j = 0; j + kLanes <= m; j += kLanes) lanes = I::Max(I::LoadF32(s + j), lanes);
      alignas(64) float lane[kLanes];
      I::StoreF32(lane, lanes);
      for (int64_t k = 0; k < kLanes; ++k) max = lane[k] > max ? lane[k] : max;
    }
  }
  for (; j < m; ++j) max = s[j] > max ? s[j] : max;
  return max;
}

// s[j] = exp(scale * (s[j] - max)) / sum over j < m: the sum in kLanes float lanes (added in order
// within each lane), then SumLanes.
void SoftmaxImpl(float* s, int64_t m, float scale) {
  const float max = RowMax(s, m);
  const V vscale = Isa::Set1(scale);
  const V vshift = Isa::Set1(-scale * max);
  V total = Isa::Zero();
  int64_t j = 0;
  for (; j + kLanes <= m; j += kLanes) {
    const V e = Isa::Exp(Isa::Fma(Isa::LoadF32(s + j), vscale, vshift));
    Isa::StoreF32(s + j, e);
    total = Isa::Add(total, e);
  }
  if (j < m) {
    // Lanes past m hold exp(shift) != 0 after Exp: store the first m - j and add them back from
    // memory (zeros above).
    Isa::StoreF32Tail(s + j, Isa::Exp(Isa::Fma(Isa::LoadF32Tail(s + j, m - j), vscale, vshift)), m - j);
    total = Isa::Add(total, Isa::LoadF32Tail(s + j, m - j));
  }
  const V inv = Isa::Set1(1.0f / Isa::SumLanes(total));
  j = 0;
  for (; j + kLanes <= m; j += kLanes) Isa::StoreF32(s + j, Isa::Mul(Isa::LoadF32(s + j), inv));
  if (j < m) Isa::StoreF32Tail(s + j, Isa::Mul(Isa::LoadF32Tail(s + j, m - j), inv), m - j);
}

// a[i] = a[i] * silu(g[i]) = a[i] * g[i] / (1 + exp(-g[i])).
void SiluMulImpl(const float* g, float* a, int64_t n) {
  const V one = Isa::Set1(1.0f);
  const V minus_one = Isa::Set1(-1.0f);
  int64_t i = 0;
  auto step = [&](V gv, V av) { return Isa::Mul(av, Isa::Div(gv, Isa::Add(one, Isa::Exp(Isa::Mul(gv, minus_one))))); };
  for (; i + kLanes <= n; i += kLanes) Isa::StoreF32(a + i, step(Isa::LoadF32(g + i), Isa::LoadF32(a + i)));
  if (i < n) Isa::StoreF32Tail(a + i, step(Isa::LoadF32Tail(g + i, n - i), Isa::LoadF32Tail(a + i, n - i)), n - i);
}
