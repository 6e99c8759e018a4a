// The portable kernels of the block types (plain C++, any CPU): per block the exact integer dot
// product of the weights' levels with the quantized activations (quant_activations.h), then per
// (weight row, activation row) ONE float chain over the blocks in order:
//   q8_0, q4_0, q5_0:  acc += float(sum_i w_i q_i) * (d_w * d_x)
//   q4_k, q5_k:  acc += float(sum_s sc_s sum_i w_i q_i) * (d * d_x);
//                acc -= float(sum_s m_s * (sum of q over sub-block s)) * (dmin * d_x)
//   q6_k:        acc += float(sum_g sc_g sum_i (w_i - 32) q_i) * (d * d_x)
// (each * and +/- one float operation; float(...) rounds to nearest beyond 2^24).

#include <cstdint>
#include <cstring>

#include "daemon/kernels/dtype.h"
#include "daemon/kernels/quant_activations.h"
#include "daemon/kernels/quant_blocks.h"
#include "daemon/kernels/simd_table.h"

namespace niels::daemon::kernels::simd {
namespace {

#define NIELS_KERNELS_SIMD_QUANT_INCLUDED_BY_AN_ISA_FILE
#include "daemon/kernels/simd_quant_tile.h"

float HalfAt(const unsigned char* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return HalfToFloat(h);
}

// The integer levels of one block as the formulas of quant_blocks.h read them (before scaling).
struct KLevels {
  int levels[256];
  int scale[16];  // per sub-block (8, q4_k / q5_k) or group (16, q6_k)
  int min[8];
  float d, dmin;
};

void LevelsQ4KOrQ5K(const unsigned char* b, bool five_bits, KLevels* out) {
  out->d = HalfAt(b);
  out->dmin = HalfAt(b + 2);
  const unsigned char* scales = b + 4;
  const unsigned char* qh = b + 16;
  const unsigned char* qs = b + (five_bits ? 48 : 16);
  for (int s = 0; s < 8; ++s) {
    uint8_t sc, m;
    ScaleMinK4(scales, s, &sc, &m);
    out->scale[s] = sc;
    out->min[s] = m;
  }
  for (int c = 0; c < 4; ++c) {
    for (int l = 0; l < 32; ++l) {
      out->levels[64 * c + l] = (qs[32 * c + l] & 15) + (five_bits ? 16 * (qh[l] >> (2 * c) & 1) : 0);
      out->levels[64 * c + 32 + l] = (qs[32 * c + l] >> 4) + (five_bits ? 16 * (qh[l] >> (2 * c + 1) & 1) : 0);
    }
  }
}

void LevelsQ6K(const unsigned char* b, KLevels* out) {
  out->d = HalfAt(b + 208);
  for (int g = 0; g < 16; ++g) out->scale[g] = static_cast<int8_t>(b[192 + g]);
  for (int h = 0; h < 2; ++h) {
    const unsigned char* ql = b + 64 * h;
    const unsigned char* qh = b + 128 + 32 * h;
    int* v = out->levels + 128 * h;
    for (int l = 0; l < 32; ++l) {
      v[l] = ((ql[l] & 15) | (qh[l] & 3) << 4) - 32;
      v[l + 32] = ((ql[l + 32] & 15) | (qh[l] >> 2 & 3) << 4) - 32;
      v[l + 64] = ((ql[l] >> 4) | (qh[l] >> 4 & 3) << 4) - 32;
      v[l + 96] = ((ql[l + 32] >> 4) | (qh[l] >> 6 & 3) << 4) - 32;
    }
  }
}

int Dot(const int* w, const int8_t* q, int n) {
  int sum = 0;
  for (int i = 0; i < n; ++i) sum += w[i] * q[i];
  return sum;
}

// q8_0, q4_0 and q5_0: one 32-block per unit.
template <Dtype kType>
struct Block32Kernel {
  static constexpr int64_t kUnit = 32, kUnitBytes = kType == Dtype::kQ8_0 ? 34 : kType == Dtype::kQ4_0 ? 18 : 22;
  static constexpr int kTailUnit = 0;
  static constexpr int kWeightRows = 4, kDecodeWeightRows = 4, kTileRows = 3;
  using Acc = float;
  static Acc Zero() { return 0.0f; }
  static void Reduce4(Acc a, Acc b, Acc c, Acc d, float* out) {
    out[0] = a;
    out[1] = b;
    out[2] = c;
    out[3] = d;
  }
  template <int RM, int RN>
  static void Unit(const unsigned char* const (&w)[RM], const XRow (&x)[RN], int64_t u, Acc (&acc)[RM][RN]) {
    for (int i = 0; i < RM; ++i) {
      int levels[32];
      uint32_t qh = 0;
      if constexpr (kType == Dtype::kQ5_0) std::memcpy(&qh, w[i] + 2, sizeof qh);
      for (int k = 0; k < 16; ++k) {
        if constexpr (kType == Dtype::kQ4_0) {
          levels[k] = (w[i][2 + k] & 15) - 8;
          levels[k + 16] = (w[i][2 + k] >> 4) - 8;
        } else if constexpr (kType == Dtype::kQ5_0) {
          levels[k] = ((w[i][6 + k] & 15) | static_cast<int>(qh >> k & 1) << 4) - 16;
          levels[k + 16] = ((w[i][6 + k] >> 4) | static_cast<int>(qh >> (k + 16) & 1) << 4) - 16;
        } else {
          levels[k] = static_cast<int8_t>(w[i][2 + k]);
          levels[k + 16] = static_cast<int8_t>(w[i][18 + k]);
        }
      }
      const float dw = HalfAt(w[i]);
      for (int j = 0; j < RN; ++j) {
        const int sum = Dot(levels, x[j].q + 32 * u, 32);
        acc[i][j] += static_cast<float>(sum) * (dw * x[j].d[8 * u]);
      }
    }
  }
  template <int RM, int RN>
  static void TailUnit(const unsigned char* const (&)[RM], const XRow (&)[RN], int64_t, Acc (&)[RM][RN]) {}
};

// q4_k, q5_k (kMins) and q6_k: one 256-block per unit.
template <Dtype kType>
struct Block256Kernel {
  static constexpr bool kMins = kType != Dtype::kQ6_K;
  static constexpr int64_t kUnit = 256, kTailUnit = 0;
  static constexpr int64_t kUnitBytes = kType == Dtype::kQ4_K ? 144 : kType == Dtype::kQ5_K ? 176 : 210;
  static constexpr int kWeightRows = 4, kDecodeWeightRows = 4, kTileRows = 3;
  using Acc = float;
  static Acc Zero() { return 0.0f; }
  static void Reduce4(Acc a, Acc b, Acc c, Acc d, float* out) { Block32Kernel<Dtype::kQ8_0>::Reduce4(a, b, c, d, out); }
  template <int RM, int RN>
  static void Unit(const unsigned char* const (&w)[RM], const XRow (&x)[RN], int64_t u, Acc (&acc)[RM][RN]) {
    constexpr int kGroup = kMins ? 32 : 16;
    for (int i = 0; i < RM; ++i) {
      KLevels k;
      if constexpr (kType == Dtype::kQ6_K) {
        LevelsQ6K(w[i], &k);
      } else {
        LevelsQ4KOrQ5K(w[i], kType == Dtype::kQ5_K, &k);
      }
      for (int j = 0; j < RN; ++j) {
        const int8_t* q = x[j].q + 256 * u;
        int scaled = 0, mins = 0;
        for (int g = 0; g < 256 / kGroup; ++g) {
          scaled += k.scale[g] * Dot(k.levels + kGroup * g, q + kGroup * g, kGroup);
          if constexpr (kMins) mins += k.min[g] * x[j].sums[8 * u + g];
        }
        const float dx = x[j].d[u];
        acc[i][j] += static_cast<float>(scaled) * (k.d * dx);
        if constexpr (kMins) acc[i][j] -= static_cast<float>(mins) * (k.dmin * dx);
      }
    }
  }
  template <int RM, int RN>
  static void TailUnit(const unsigned char* const (&)[RM], const XRow (&)[RN], int64_t, Acc (&)[RM][RN]) {}
};

constexpr QuantKernelTable kTable = {
    "portable",
    {QuantDotImpl<Block32Kernel<Dtype::kQ8_0>>, QuantDotImpl<Block32Kernel<Dtype::kQ4_0>>,
     QuantDotImpl<Block256Kernel<Dtype::kQ4_K>>, QuantDotImpl<Block256Kernel<Dtype::kQ5_K>>,
     QuantDotImpl<Block256Kernel<Dtype::kQ6_K>>, QuantDotImpl<Block32Kernel<Dtype::kQ5_0>>},
    PortableQuantizeActs,
};

}  // namespace

void PortableQuantizeActs(const QuantizeActsArgs& a, const float* x, int64_t x_stride, int64_t rows, void* out) {
  ActivationLayout layout;
  layout.in = a.in;
  layout.block = a.block;
  layout.padded = a.padded;
  layout.bias = a.bias;
  layout.d_offset = a.d_offset;
  layout.sums_offset = a.sums_offset;
  layout.starts_offset = a.starts_offset;
  layout.row_bytes = a.row_bytes;
  for (int64_t r = 0; r < rows; ++r) {
    QuantizeActivationRow(layout, x + r * x_stride, static_cast<unsigned char*>(out) + r * a.row_bytes);
  }
}

const QuantKernelTable& PortableQuantTable() { return kTable; }

}  // namespace niels::daemon::kernels::simd
