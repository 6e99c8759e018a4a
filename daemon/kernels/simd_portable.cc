// The portable implementation of the kernels (plain C++, any CPU): the templates of simd_generic.h
// over 8-float "vectors" that the compiler maps to whatever the build targets (SSE2 on x86-64).

#include <cmath>
#include <cstdint>

#include "daemon/kernels/dtype.h"
#include "daemon/kernels/simd_table.h"

namespace niels::daemon::kernels::simd {
namespace {

struct Isa {
  struct V {
    float v[8];
  };
  static constexpr int64_t kLanes = 8;
  static constexpr int kTileRows = 3;

  template <typename Fn>
  static V Map(Fn&& fn) {
    V r;
    for (int k = 0; k < 8; ++k) r.v[k] = fn(k);
    return r;
  }
  static V Zero() { return Map([](int) { return 0.0f; }); }
  static V Set1(float f) { return Map([f](int) { return f; }); }
  static V Add(V a, V b) { return Map([&](int k) { return a.v[k] + b.v[k]; }); }
  static V Mul(V a, V b) { return Map([&](int k) { return a.v[k] * b.v[k]; }); }
  static V Div(V a, V b) { return Map([&](int k) { return a.v[k] / b.v[k]; }); }
  static V Fma(V a, V b, V c) { return Map([&](int k) { return a.v[k] * b.v[k] + c.v[k]; }); }
  static V LoadF32(const float* p) { return Map([p](int k) { return p[k]; }); }
  static V LoadF16(const uint16_t* p) { return Map([p](int k) { return HalfToFloat(p[k]); }); }
  static V LoadBF16(const uint16_t* p) { return Map([p](int k) { return BFloat16ToFloat(p[k]); }); }
  static V LoadF32Tail(const float* p, int64_t n) { return Map([=](int k) { return k < n ? p[k] : 0.0f; }); }
  static V LoadF16Tail(const uint16_t* p, int64_t n) {
    return Map([=](int k) { return k < n ? HalfToFloat(p[k]) : 0.0f; });
  }
  static V LoadBF16Tail(const uint16_t* p, int64_t n) {
    return Map([=](int k) { return k < n ? BFloat16ToFloat(p[k]) : 0.0f; });
  }
  static void StoreF32(float* p, V v) {
    for (int k = 0; k < 8; ++k) p[k] = v.v[k];
  }
  static void StoreF32Tail(float* p, V v, int64_t n) {
    for (int k = 0; k < n; ++k) p[k] = v.v[k];
  }
  static void StoreF16(uint16_t* p, V v) {
    for (int k = 0; k < 8; ++k) p[k] = FloatToHalf(v.v[k]);
  }
  static void StoreF16Tail(uint16_t* p, V v, int64_t n) {
    for (int k = 0; k < n; ++k) p[k] = FloatToHalf(v.v[k]);
  }
  static float SumLanes(V v) {
    return ((v.v[0] + v.v[1]) + (v.v[2] + v.v[3])) + ((v.v[4] + v.v[5]) + (v.v[6] + v.v[7]));
  }
  static void Sum4(V a, V b, V c, V d, float* out) {
    out[0] = SumLanes(a);
    out[1] = SumLanes(b);
    out[2] = SumLanes(c);
    out[3] = SumLanes(d);
  }
  static V Exp(V v) { return Map([&](int k) { return std::exp(v.v[k]); }); }
};
using V = Isa::V;

#define NIELS_KERNELS_SIMD_GENERIC_INCLUDED_BY_AN_ISA_FILE
#include "daemon/kernels/simd_generic.h"
#include "daemon/kernels/simd_attention.h"
#include "daemon/kernels/simd_table_make.h"

constexpr KernelTable kTable = MakeKernelTable("portable");

}  // namespace

const KernelTable& PortableTable() { return kTable; }

// Narrowing to bf16 is the same scalar rounding in every implementation (it only runs when weights
// are converted at load).
void PortableF32ToBF16(const float* src, int64_t n, void* dst) {
  auto* out = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) out[i] = FloatToBFloat16(src[i]);
}

}  // namespace niels::daemon::kernels::simd
