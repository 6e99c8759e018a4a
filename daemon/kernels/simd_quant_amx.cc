// The AMX-INT8 kernels of the block types for many activation rows (prefill): TDPBSSD multiplies a
// tile of 16 activation rows x 32 values (one q8_0 / q4_0 / q5_0 block or q4_k / q5_k sub-block; 16 for a
// q6_k group) by a tile of the same values of 16 weight rows (their true signed levels, repacked)
// into 16 x 16 exact int32 sums. Compiled
// with the AVX-512 flags plus -mavx512vnni -mamx-tile -mamx-int8 (daemon/CMakeLists.txt); called
// only when the CPU has them and the kernel granted this process the tile data (AmxGranted,
// simd_kernels.cc). Includes nothing that defines inline functions (simd_table.h).
//
// Bits: each (activation row r, weight row o) gets the integer sums of simd_quant_avx512.cc's
// kernels (exact: the same numbers however they are summed) and then the same float operations in
// the same order (that file's header), so y is bitwise the decode path's. The rows the tiles
// leave over (rows % 16 activation rows, (o_end - o_begin) % 32 weight rows) run those kernels.
//
// Weights stay where they are (the memory-mapped file, ggml's blocks): per 32 weight rows, a
// "panel" -- their levels as the B tiles of every block and their scales -- is repacked
// into a per-thread buffer (ScratchBuffer) and met by all the activation rows.

#if defined(__x86_64__)

#include <immintrin.h>

#include <cstdint>

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include "daemon/kernels/simd_table.h"

namespace niels::daemon::kernels::simd {
namespace {

constexpr int kTileRows = 16;    // activation rows per tile (A and C tiles' rows)
constexpr int kPanelRows = 32;   // weight rows per panel: two B tiles of 16 columns
constexpr int kTileBytes = 512;  // one B tile: 8 rows (32 values / 4) x 16 columns x 4 bytes

// LDTILECFG's 64 bytes (palette 1): tiles 0, 1 the two C tiles (16 x 16 int32), 2 the A tile (16
// rows x 32 int8), 3 and 4 the B tiles (8 rows x 64 bytes).
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {64, 64, 32, 64, 64};
  uint8_t rows[16] = {16, 16, 16, 8, 8};
};

// Writes a finished tile's 16 activation rows x 32 outputs (plus the bias) to y.
inline void StoreTile(const QuantDotArgs& a, int64_t o, int64_t r, const __m512 (&acc)[kTileRows][2]) {
  for (int m = 0; m < kTileRows; ++m) {
    float* y = a.y + (r + m) * a.y_stride + o;
    for (int half = 0; half < 2; ++half) {
      __m512 out = acc[m][half];
      if (a.bias != nullptr) out = _mm512_add_ps(out, _mm512_loadu_ps(a.bias + o + 16 * half));
      _mm512_storeu_ps(y + 16 * half, out);
    }
  }
}

// The fifth bits 0..3 of each dword of t as bytes 0..3 of 16 or 0 (q5_0): the multiply moves bit j
// to bit 8j (and copies elsewhere, masked off: the 16 products j + 7i never collide or carry).
__m512i FifthBitBytes(__m512i t) {
  const __m512i spread = _mm512_mullo_epi32(_mm512_and_si512(t, _mm512_set1_epi32(0xf)), _mm512_set1_epi32(0x00204081));
  return _mm512_slli_epi32(_mm512_and_si512(spread, _mm512_set1_epi32(0x01010101)), 4);
}

template <Block32Type kType>
struct Block32Amx {
  static constexpr int64_t kBlockBytes = kType == Block32Type::kQ8_0 ? 34 : kType == Block32Type::kQ4_0 ? 18 : 22;

  // Weight rows o .. o + 31 into `panel` (block b's B tiles at 2b and 2b + 1: dword n of row k =
  // values 4k .. 4k + 3 of weight row 16 * tile + n) and `scales` (block b's at 32b .. 32b + 31,
  // converted from f16 as Block32Rows converts them).
  static void Pack(const QuantDotArgs& a, int64_t o, int64_t blocks, unsigned char* panel, float* scales) {
    const __m512i rows = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                            _mm512_set1_epi32(static_cast<int>(a.w_row_bytes)));
    for (int half = 0; half < 2; ++half) {
      const auto* base = static_cast<const unsigned char*>(a.w) + (o + 16 * half) * a.w_row_bytes;
      for (int64_t b = 0; b < blocks; ++b) {
        const __m512i at = _mm512_add_epi32(rows, _mm512_set1_epi32(static_cast<int>(b * kBlockBytes)));
        unsigned char* tile = panel + (2 * b + half) * kTileBytes;
        if constexpr (kType == Block32Type::kQ4_0) {  // bytes 4k .. 4k + 3: values 4k.. in the low nibbles, 16 + 4k.. in the high
          const __m512i nibble = _mm512_set1_epi8(0x0f), eight = _mm512_set1_epi8(8);
#pragma GCC unroll 4
          for (int k = 0; k < 4; ++k) {
            const __m512i bytes = _mm512_i32gather_epi32(_mm512_add_epi32(at, _mm512_set1_epi32(2 + 4 * k)), base, 1);
            const __m512i low = _mm512_sub_epi8(_mm512_and_si512(bytes, nibble), eight);
            const __m512i high = _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi32(bytes, 4), nibble), eight);
            _mm512_store_si512(tile + 64 * k, low);
            _mm512_store_si512(tile + 64 * (k + 4), high);
          }
        } else if constexpr (kType == Block32Type::kQ5_0) {  // as q4_0, with bit v of qh (bytes 2..5) above value v's nibble
          const __m512i nibble = _mm512_set1_epi8(0x0f), sixteen = _mm512_set1_epi8(16);
          const __m512i qh = _mm512_i32gather_epi32(_mm512_add_epi32(at, _mm512_set1_epi32(2)), base, 1);
#pragma GCC unroll 4
          for (int k = 0; k < 4; ++k) {
            const __m512i bytes = _mm512_i32gather_epi32(_mm512_add_epi32(at, _mm512_set1_epi32(6 + 4 * k)), base, 1);
            const __m512i low = _mm512_or_si512(_mm512_and_si512(bytes, nibble), FifthBitBytes(_mm512_srli_epi32(qh, 4 * k)));
            const __m512i high = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(bytes, 4), nibble),
                                                 FifthBitBytes(_mm512_srli_epi32(qh, 16 + 4 * k)));
            _mm512_store_si512(tile + 64 * k, _mm512_sub_epi8(low, sixteen));
            _mm512_store_si512(tile + 64 * (k + 4), _mm512_sub_epi8(high, sixteen));
          }
        } else {
#pragma GCC unroll 8
          for (int k = 0; k < 8; ++k) {
            _mm512_store_si512(tile + 64 * k,
                               _mm512_i32gather_epi32(_mm512_add_epi32(at, _mm512_set1_epi32(2 + 4 * k)), base, 1));
          }
        }
        const __m512i halves = _mm512_i32gather_epi32(at, base, 1);
        _mm512_store_ps(scales + 32 * b + 16 * half, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(halves)));
      }
    }
  }

  // Activation rows r .. r + 15 against the panel of weight rows o .. o + 31.
  static void Tile(const QuantDotArgs& a, int64_t o, int64_t r, int64_t blocks, const unsigned char* panel,
                   const float* scales) {
    alignas(64) int32_t sums[2][kTileRows][16];
    __m512 acc[kTileRows][2];
    for (int m = 0; m < kTileRows; ++m) acc[m][0] = acc[m][1] = _mm512_setzero_ps();
    const auto* x = static_cast<const unsigned char*>(a.x) + r * a.x_row_bytes;
    for (int64_t b = 0; b < blocks; ++b) {
      _tile_zero(0);
      _tile_zero(1);
      _tile_loadd(2, x + 32 * b, a.x_row_bytes);
      _tile_loadd(3, panel + 2 * b * kTileBytes, 64);
      _tile_loadd(4, panel + (2 * b + 1) * kTileBytes, 64);
      _tile_dpbssd(0, 2, 3);
      _tile_dpbssd(1, 2, 4);
      _tile_stored(0, sums[0], 64);
      _tile_stored(1, sums[1], 64);
      const __m512 dw0 = _mm512_load_ps(scales + 32 * b), dw1 = _mm512_load_ps(scales + 32 * b + 16);
      for (int m = 0; m < kTileRows; ++m) {
        // The row's d of block b (quant_activations.h: repeated 8 times per block).
        const float* d = reinterpret_cast<const float*>(x + m * a.x_row_bytes + a.x_d_offset);
        const __m512 dx = _mm512_set1_ps(d[8 * b]);
        acc[m][0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(sums[0][m])), _mm512_mul_ps(dw0, dx), acc[m][0]);
        acc[m][1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(sums[1][m])), _mm512_mul_ps(dw1, dx), acc[m][1]);
      }
    }
    StoreTile(a, o, r, acc);
  }

  static void Dot(const QuantDotArgs& a, int64_t o_begin, int64_t o_end) {
    const int64_t r_tiles = a.rows / kTileRows * kTileRows;
    const int64_t o_panels = o_begin + (o_end - o_begin) / kPanelRows * kPanelRows;
    if (r_tiles == 0 || o_panels == o_begin) {
      Avx512Block32Rows(a, kType, o_begin, o_end, 0, a.rows);
      return;
    }
    const int64_t blocks = a.in / 32;
    auto* panel = static_cast<unsigned char*>(ScratchBuffer(blocks * (2 * kTileBytes + kPanelRows * 4)));
    auto* scales = reinterpret_cast<float*>(panel + blocks * 2 * kTileBytes);
    const TileConfig config;
    _tile_loadconfig(&config);
    for (int64_t o = o_begin; o < o_panels; o += kPanelRows) {
      Pack(a, o, blocks, panel, scales);
      for (int64_t r = 0; r < r_tiles; r += kTileRows) Tile(a, o, r, blocks, panel, scales);
    }
    _tile_release();
    if (r_tiles < a.rows) Avx512Block32Rows(a, kType, o_begin, o_panels, r_tiles, a.rows);
    if (o_panels < o_end) Avx512Block32Rows(a, kType, o_panels, o_end, 0, a.rows);
  }
};


// The 6-bit scale and min of sub-block j < 8 of a q4_k / q5_k block (quant_blocks.h ScaleMinK4).
void ScaleMin(const unsigned char* scales, int j, int32_t* scale, int32_t* min) {
  if (j < 4) {
    *scale = scales[j] & 63;
    *min = scales[j + 4] & 63;
  } else {
    *scale = (scales[j + 4] & 0x0f) | (scales[j - 4] >> 6) << 4;
    *min = (scales[j + 4] >> 4) | (scales[j] >> 6) << 4;
  }
}

// q4_k, q5_k (kType 0, 1) and q6_k (2): per 256-block u of weight row o and activation row r (the
// chain of simd_quant_avx512.cc's Block256Kernel):
//   A = sum over the groups g (8 sub-blocks of 32 values; q6_k: 16 groups of 16) of sc_g * S_g,
//       S_g the exact int32 dot of the group's levels (q6_k's minus 32) with q: TDPBSSD with K =
//       one group, then VPMULLD by the scales and VPADDD, exact
//   M = sum_g m_g * (the sum of q over sub-block g)  (q4_k, q5_k; VPMADDWD over pairs, exact)
//   block = float(A) * d; block = fma(-float(M), dmin, block); acc = fma(block, d_x, acc)
template <int kType>
struct Block256Amx {
  static constexpr bool kMins = kType != 2;
  static constexpr int kGroups = kMins ? 8 : 16, kGroupValues = 256 / kGroups;
  static constexpr int64_t kUnitBytes = kType == 0 ? 144 : kType == 1 ? 176 : 210;
  static constexpr int kBBytes = kGroupValues / 4 * 64;  // one B tile: 8 (or 4) rows x 64 bytes
  // Per 256-block in the panel: the B tiles [group][half], then int32 scales [group][32], then
  // (kMins) the mins of sub-blocks 2c and 2c + 1 as two int16 per column [c][32], then d [32] and
  // dmin [32].
  static constexpr int64_t kTilesBytes = kGroups * 2 * kBBytes;
  static constexpr int64_t kScalesOffset = kTilesBytes, kMinsOffset = kScalesOffset + kGroups * 32 * 4;
  static constexpr int64_t kDOffset = kMinsOffset + (kMins ? 4 * 32 * 4 : 0), kUnitPanelBytes = kDOffset + 2 * 32 * 4;

  static TileConfig Config() {
    TileConfig c;
    c.colsb[2] = kGroupValues;
    c.rows[3] = c.rows[4] = kGroupValues / 4;
    return c;
  }

  // The B tile rows of one group for 16 weight rows (column n = base + rows[n] + at).
  static void PackGroups(const unsigned char* base, __m512i at, unsigned char* unit, int half) {
    const __m512i nibble = _mm512_set1_epi8(0x0f);
    auto gather = [&](int offset) { return _mm512_i32gather_epi32(_mm512_add_epi32(at, _mm512_set1_epi32(offset)), base, 1); };
    auto tile = [&](int group, int k) { return unit + (2 * group + half) * kBBytes + 64 * k; };
    if constexpr (kMins) {
      for (int c = 0; c < 4; ++c) {  // sub-blocks 2c (low nibbles of qs[32c ..]) and 2c + 1 (high)
        for (int k = 0; k < 8; ++k) {
          const __m512i qs = gather((kType == 0 ? 16 : 48) + 32 * c + 4 * k);
          __m512i low = _mm512_and_si512(qs, nibble);
          __m512i high = _mm512_and_si512(_mm512_srli_epi32(qs, 4), nibble);
          if constexpr (kType == 1) {  // + 16 * bit 2c / 2c + 1 of qh[4k ..]
            const __m512i qh = gather(16 + 4 * k);
            const __m512i one = _mm512_set1_epi8(1);
            low = _mm512_or_si512(low, _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(qh, 2 * c), one), 4));
            high = _mm512_or_si512(high, _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(qh, 2 * c + 1), one), 4));
          }
          _mm512_store_si512(tile(2 * c, k), low);
          _mm512_store_si512(tile(2 * c + 1, k), high);
        }
      }
    } else {
      for (int g = 0; g < 16; ++g) {  // values 16g ..: half h = g / 8, quarter (g % 8) / 2 of it
        const int h = g / 8, quarter = (g % 8) / 2, l0 = 16 * (g % 2);
        for (int k = 0; k < 4; ++k) {
          const __m512i ql = gather(64 * h + 32 * (quarter % 2) + l0 + 4 * k);
          const __m512i qh = gather(128 + 32 * h + l0 + 4 * k);
          const __m512i low = _mm512_and_si512(quarter >= 2 ? _mm512_srli_epi32(ql, 4) : ql, nibble);
          const __m512i top = _mm512_and_si512(_mm512_srli_epi32(qh, 2 * quarter), _mm512_set1_epi8(3));
          const __m512i level = _mm512_or_si512(low, _mm512_slli_epi32(top, 4));
          _mm512_store_si512(tile(g, k), _mm512_sub_epi8(level, _mm512_set1_epi8(32)));
        }
      }
    }
  }

  // Weight rows o .. o + 31, every 256-block, into the panel.
  static void Pack(const QuantDotArgs& a, int64_t o, int64_t units, unsigned char* panel) {
    const __m512i rows = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                            _mm512_set1_epi32(static_cast<int>(a.w_row_bytes)));
    for (int half = 0; half < 2; ++half) {
      const auto* base = static_cast<const unsigned char*>(a.w) + (o + 16 * half) * a.w_row_bytes;
      for (int64_t u = 0; u < units; ++u) {
        unsigned char* unit = panel + u * kUnitPanelBytes;
        PackGroups(base, _mm512_add_epi32(rows, _mm512_set1_epi32(static_cast<int>(u * kUnitBytes))), unit, half);
        auto* scales = reinterpret_cast<int32_t*>(unit + kScalesOffset);
        auto* mins = reinterpret_cast<int32_t*>(unit + kMinsOffset);
        auto* d = reinterpret_cast<float*>(unit + kDOffset);
        for (int n = 0; n < 16; ++n) {
          const unsigned char* p = base + n * a.w_row_bytes + u * kUnitBytes;
          const int col = 16 * half + n;
          if constexpr (kMins) {
            int32_t sc[8], m[8];
            for (int g = 0; g < 8; ++g) ScaleMin(p + 4, g, &sc[g], &m[g]);
            for (int g = 0; g < 8; ++g) scales[32 * g + col] = sc[g];
            for (int c = 0; c < 4; ++c) mins[32 * c + col] = m[2 * c] | m[2 * c + 1] << 16;
            d[col] = _cvtsh_ss(static_cast<uint16_t>(p[0] | p[1] << 8));
            d[32 + col] = _cvtsh_ss(static_cast<uint16_t>(p[2] | p[3] << 8));
          } else {
            for (int g = 0; g < 16; ++g) scales[32 * g + col] = static_cast<int8_t>(p[192 + g]);
            d[col] = _cvtsh_ss(static_cast<uint16_t>(p[208] | p[209] << 8));
          }
        }
      }
    }
  }

  // Activation rows r .. r + 15 against the panel of weight rows o .. o + 31.
  static void Tile(const QuantDotArgs& a, int64_t o, int64_t r, int64_t units, const unsigned char* panel) {
    alignas(64) int32_t sums[2][kTileRows][16];
    __m512 acc[kTileRows][2];
    for (int m = 0; m < kTileRows; ++m) acc[m][0] = acc[m][1] = _mm512_setzero_ps();
    const auto* x = static_cast<const unsigned char*>(a.x) + r * a.x_row_bytes;
    for (int64_t u = 0; u < units; ++u) {
      const unsigned char* unit = panel + u * kUnitPanelBytes;
      const auto* scales = reinterpret_cast<const int32_t*>(unit + kScalesOffset);
      __m512i total[kTileRows][2];
      for (int m = 0; m < kTileRows; ++m) total[m][0] = total[m][1] = _mm512_setzero_si512();
      for (int g = 0; g < kGroups; ++g) {
        _tile_zero(0);
        _tile_zero(1);
        _tile_loadd(2, x + 256 * u + kGroupValues * g, a.x_row_bytes);
        _tile_loadd(3, unit + 2 * g * kBBytes, 64);
        _tile_loadd(4, unit + (2 * g + 1) * kBBytes, 64);
        _tile_dpbssd(0, 2, 3);
        _tile_dpbssd(1, 2, 4);
        _tile_stored(0, sums[0], 64);
        _tile_stored(1, sums[1], 64);
        const __m512i sc0 = _mm512_load_si512(scales + 32 * g), sc1 = _mm512_load_si512(scales + 32 * g + 16);
        for (int m = 0; m < kTileRows; ++m) {
          total[m][0] = _mm512_add_epi32(total[m][0], _mm512_mullo_epi32(_mm512_load_si512(sums[0][m]), sc0));
          total[m][1] = _mm512_add_epi32(total[m][1], _mm512_mullo_epi32(_mm512_load_si512(sums[1][m]), sc1));
        }
      }
      const auto* mins = reinterpret_cast<const int32_t*>(unit + kMinsOffset);
      const auto* d = reinterpret_cast<const float*>(unit + kDOffset);
      for (int m = 0; m < kTileRows; ++m) {
        const unsigned char* row = x + m * a.x_row_bytes;
        const __m512 dx = _mm512_set1_ps(reinterpret_cast<const float*>(row + a.x_d_offset)[u]);
        for (int half = 0; half < 2; ++half) {
          __m512 block = _mm512_mul_ps(_mm512_cvtepi32_ps(total[m][half]), _mm512_load_ps(d + 16 * half));
          if constexpr (kMins) {
            const auto* pairs = reinterpret_cast<const int32_t*>(row + a.x_sums_offset) + 4 * u;  // sums 8u .. 8u + 7
            __m512i min_total = _mm512_setzero_si512();
            for (int c = 0; c < 4; ++c) {
              min_total = _mm512_add_epi32(min_total, _mm512_madd_epi16(_mm512_load_si512(mins + 32 * c + 16 * half),
                                                                        _mm512_set1_epi32(pairs[c])));
            }
            block = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(min_total), _mm512_load_ps(d + 32 + 16 * half), block);
          }
          acc[m][half] = _mm512_fmadd_ps(block, dx, acc[m][half]);
        }
      }
    }
    StoreTile(a, o, r, acc);
  }

  static void Dot(const QuantDotArgs& a, int64_t o_begin, int64_t o_end) {
    const int64_t r_tiles = a.rows / kTileRows * kTileRows;
    const int64_t o_panels = o_begin + (o_end - o_begin) / kPanelRows * kPanelRows;
    const QuantDotFn vnni = Avx512VnniQuantTable().dot[2 + kType];
    if (r_tiles == 0 || o_panels == o_begin) {
      vnni(a, o_begin, o_end);
      return;
    }
    const int64_t units = a.in / 256;
    auto* panel = static_cast<unsigned char*>(ScratchBuffer(units * kUnitPanelBytes));
    const TileConfig config = Config();
    _tile_loadconfig(&config);
    for (int64_t o = o_begin; o < o_panels; o += kPanelRows) {
      Pack(a, o, units, panel);
      for (int64_t r = 0; r < r_tiles; r += kTileRows) Tile(a, o, r, units, panel);
    }
    _tile_release();
    if (r_tiles < a.rows) {  // the rows left over, through the VNNI kernel on a view of them
      QuantDotArgs rest = a;
      rest.x = static_cast<const unsigned char*>(a.x) + r_tiles * a.x_row_bytes;
      rest.rows = a.rows - r_tiles;
      rest.y = a.y + r_tiles * a.y_stride;
      vnni(rest, o_begin, o_panels);
    }
    if (o_panels < o_end) vnni(a, o_panels, o_end);
  }
};

}  // namespace

const QuantKernelTable& Avx512AmxQuantTable() {
  static const QuantKernelTable table = [] {
    QuantKernelTable t = Avx512VnniQuantTable();
    t.name = "avx512-amx";
    t.dot[0] = Block32Amx<Block32Type::kQ8_0>::Dot;
    t.dot[1] = Block32Amx<Block32Type::kQ4_0>::Dot;
    t.dot[2] = Block256Amx<0>::Dot;
    t.dot[3] = Block256Amx<1>::Dot;
    t.dot[4] = Block256Amx<2>::Dot;
    t.dot[5] = Block32Amx<Block32Type::kQ5_0>::Dot;
    return t;
  }();
  return table;
}

}  // namespace niels::daemon::kernels::simd

#endif  // __x86_64__
