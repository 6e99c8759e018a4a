// The AMX-INT8 kernels of q8_0 and q4_0 for many activation rows (prefill): TDPBSSD multiplies a
// tile of 16 activation rows x 32 values (one block, int8) by a tile of the same 32 values of 16
// weight rows (their true signed levels, repacked) into 16 x 16 exact int32 block sums. Compiled
// with the AVX-512 flags plus -mavx512vnni -mamx-tile -mamx-int8 (daemon/CMakeLists.txt); called
// only when the CPU has them and the kernel granted this process the tile data (AmxGranted,
// simd_kernels.cc). Includes nothing that defines inline functions (simd_table.h).
//
// Bits: each (activation row r, weight row o) gets the block sums s_b of simd_quant_avx512.cc's
// Block32Rows (exact integers: the same numbers however they are summed) and the same float chain
// acc = fma(float(s_b), d_w * d_x, acc) over the blocks in order, then + bias: y is bitwise the
// decode path's. The rows the tiles leave over (rows % 16 activation rows, (o_end - o_begin) % 32
// weight rows) run Block32Rows itself.
//
// Weights stay where they are (the memory-mapped file, ggml's blocks): per 32 weight rows, a
// "panel" -- their levels as the B tiles of every block and their scales as floats -- is repacked
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

template <bool kFourBits>
struct Block32Amx {
  static constexpr int64_t kBlockBytes = kFourBits ? 18 : 34;

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
        if constexpr (kFourBits) {  // bytes 4k .. 4k + 3: values 4k.. in the low nibbles, 16 + 4k.. in the high
          const __m512i nibble = _mm512_set1_epi8(0x0f), eight = _mm512_set1_epi8(8);
#pragma GCC unroll 4
          for (int k = 0; k < 4; ++k) {
            const __m512i bytes = _mm512_i32gather_epi32(_mm512_add_epi32(at, _mm512_set1_epi32(2 + 4 * k)), base, 1);
            const __m512i low = _mm512_sub_epi8(_mm512_and_si512(bytes, nibble), eight);
            const __m512i high = _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi32(bytes, 4), nibble), eight);
            _mm512_store_si512(tile + 64 * k, low);
            _mm512_store_si512(tile + 64 * (k + 4), high);
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
    for (int m = 0; m < kTileRows; ++m) {
      float* y = a.y + (r + m) * a.y_stride + o;
      for (int half = 0; half < 2; ++half) {
        __m512 out = acc[m][half];
        if (a.bias != nullptr) out = _mm512_add_ps(out, _mm512_loadu_ps(a.bias + o + 16 * half));
        _mm512_storeu_ps(y + 16 * half, out);
      }
    }
  }

  static void Dot(const QuantDotArgs& a, int64_t o_begin, int64_t o_end) {
    const int64_t r_tiles = a.rows / kTileRows * kTileRows;
    const int64_t o_panels = o_begin + (o_end - o_begin) / kPanelRows * kPanelRows;
    if (r_tiles == 0 || o_panels == o_begin) {
      Avx512Block32Rows(a, kFourBits, o_begin, o_end, 0, a.rows);
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
    if (r_tiles < a.rows) Avx512Block32Rows(a, kFourBits, o_begin, o_panels, r_tiles, a.rows);
    if (o_panels < o_end) Avx512Block32Rows(a, kFourBits, o_panels, o_end, 0, a.rows);
  }
};

}  // namespace

const QuantKernelTable& Avx512AmxQuantTable() {
  static const QuantKernelTable table = [] {
    QuantKernelTable t = Avx512VnniQuantTable();
    t.name = "avx512-amx";
    t.dot[0] = Block32Amx<false>::Dot;
    t.dot[1] = Block32Amx<true>::Dot;
    return t;
  }();
  return table;
}

}  // namespace niels::daemon::kernels::simd

#endif  // __x86_64__
